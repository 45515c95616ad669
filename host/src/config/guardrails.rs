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
    /// wins over its group's. A plugin's result filter is a detector too:
    /// `plugin:<plugin>/<filter>` (`docs/operators/guardrails.md`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub detect: BTreeMap<String, GuardAction>,
    /// Per tool, over `detect`: the same map. Under `plugins.<name>.guardrails` tools go by the
    /// source's own name (before prefixes and overrides); at the top level and under
    /// `agents.<name>.guardrails`, by the name clients call them by.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, BTreeMap<String, GuardAction>>,
}

impl Guardrails {
    /// The result filters (`plugin:<plugin>/<filter>`) any key of this level names.
    pub fn filter_keys(&self) -> impl Iterator<Item = &str> {
        let every = self.detect.keys();
        let tools = self.tools.values().flat_map(BTreeMap::keys);
        every
            .chain(tools)
            .map(String::as_str)
            .filter(|k| filter_key(k).is_some())
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.detect.is_empty() && self.tools.is_empty()
    }

    /// The first key that names no detector nor group (with its path under this level), if any.
    pub fn unknown_key(&self) -> Option<String> {
        let known = |k: &String| {
            GUARDRAIL_GROUPS.contains(&k.as_str())
                || GUARDRAIL_DETECTORS.contains(&k.as_str())
                || filter_key(k).is_some()
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

/// The prefix of a key naming a plugin's result filter: `plugin:<plugin>/<filter>`.
pub const FILTER_KEY_PREFIX: &str = "plugin:";

/// The plugin and the filter a key names (`plugin:<plugin>/<filter>`, both non-empty), if it
/// names one.
pub fn filter_key(key: &str) -> Option<(&str, &str)> {
    let (plugin, filter) = key.strip_prefix(FILTER_KEY_PREFIX)?.split_once('/')?;
    (!plugin.is_empty() && !filter.is_empty() && !filter.contains('/')).then_some((plugin, filter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_keys_name_a_plugin_and_a_filter() {
        assert_eq!(filter_key("plugin:acme/tickets"), Some(("acme", "tickets")));
        for bad in [
            "acme/tickets",
            "plugin:acme",
            "plugin:/t",
            "plugin:a/",
            "plugin:a/b/c",
        ] {
            assert_eq!(filter_key(bad), None, "{bad}");
        }
        let g: Guardrails = serde_json::from_value(serde_json::json!({
            "detect": {"plugin:acme/tickets": "redact", "email": "flag"},
            "tools": {"t": {"plugin:acme/other": "block"}}
        }))
        .expect("guardrails");
        assert_eq!(g.unknown_key(), None);
        let keys: Vec<_> = g.filter_keys().collect();
        assert_eq!(keys, ["plugin:acme/tickets", "plugin:acme/other"]);
    }
}
