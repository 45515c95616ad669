//! Guardrails on results (`guardrails`, `plugins.<name>.guardrails`, `agents.<name>.guardrails`):
//! which detectors run over what a tool returns, and what a finding does — `flag`, `redact`,
//! `block`, or `off` — for every tool, per tool, per source and per agent. Only the shapes and the
//! names live here; the detectors and the pipeline are the `policy` stage's (`policy::detect`,
//! `policy::guardrails`). See `docs/operators/guardrails.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The groups of detectors, as a key names all of a group at once.
pub const GUARDRAIL_GROUPS: &[&str] = &["credentials", "personal_data", "injection"];

/// The detectors, as a key names one (`policy::detect::DETECTORS`, in its order; a test keeps
/// the two lists equal).
pub const GUARDRAIL_DETECTORS: &[&str] = &[
    "aws_access_key",
    "gcp_api_key",
    "azure_storage_key",
    "azure_client_secret",
    "github_token",
    "slack_token",
    "stripe_key",
    "jwt",
    "private_key",
    "high_entropy",
    "email",
    "phone",
    "payment_card",
    "iban",
    "unicode_tags",
    "zero_width",
    "bidi_controls",
    "ignore_instructions",
    "conceal_from_user",
    "read_credentials",
    "prompt_tag",
    "exfiltration_link",
];

/// What a finding of a detector does to the result it is in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GuardAction {
    /// The detector does not run (turns off what a lower level set).
    Off,
    /// The result goes through unchanged, annotated (`_meta["mcp-host/guardrails"]`), with an
    /// audit log entry and a metric.
    Flag,
    /// What the detector found is replaced by `[REDACTED:<detector>]`, in the text content and in
    /// `structuredContent` (which stays valid JSON); annotated, audited and counted like `flag`.
    Redact,
    /// The client gets an error result naming the detector (never what it found) instead.
    Block,
}

/// The guardrails of one level: an action per detector or group, for every tool, and per tool.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Guardrails {
    /// For every tool this level applies to: a detector (`email`) or a group (`credentials`,
    /// `personal_data`, `injection`) → `flag`, `redact`, `block` or `off`. A detector's own key
    /// wins over its group's.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub detect: BTreeMap<String, GuardAction>,
    /// Per tool, over `detect`: the same map. Under `plugins.<name>.guardrails` tools go by the
    /// source's own name (before prefixes and overrides); at the top level and under
    /// `agents.<name>.guardrails`, by the name clients call them by.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, BTreeMap<String, GuardAction>>,
}

impl Guardrails {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.detect.is_empty() && self.tools.is_empty()
    }

    /// The first key that names no detector nor group (with its path under this level), if any.
    pub fn unknown_key(&self) -> Option<String> {
        let known = |k: &String| {
            GUARDRAIL_GROUPS.contains(&k.as_str()) || GUARDRAIL_DETECTORS.contains(&k.as_str())
        };
        if let Some(k) = self.detect.keys().find(|k| !known(k)) {
            return Some(format!("detect.{k}"));
        }
        self.tools.iter().find_map(|(tool, map)| {
            map.keys()
                .find(|k| !known(k))
                .map(|k| format!("tools.{tool}.{k}"))
        })
    }
}
