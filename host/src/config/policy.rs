//! The `policy` section: call policy rules over the caller, the tool and the call's arguments
//! (CEL conditions, first match wins), and the named budgets their `limit` outcome draws on.
//! Compiled and checked by the `policy` stage; only the shapes live here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Call policy: rules evaluated on every tool call (and, for rules that say so, every resource read
/// and prompt) before its plugin or upstream server runs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySettings {
    /// Rules in order: the first whose `when` holds decides the call; no match allows it.
    pub rules: Vec<PolicyRule>,
    /// Named budgets (`limit` rules name one): calls per window and calls at once, per caller.
    pub budgets: BTreeMap<String, Budget>,
    /// Seconds an `approve` rule waits for the human's answer over a 2025 session (default 120).
    pub approval_timeout_secs: Option<f64>,
}

/// One rule: a name, a CEL condition and what happens to a call it matches.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    /// Names the rule in errors, the audit log, metrics and `mcp-host policy test`.
    pub name: String,
    /// A CEL expression over `caller` (`user`, `agent`, `claims`), `kind` (`tool`, `resource` or
    /// `prompt`), `tool` (`name`, `plugin`, `annotations`), `resource` (`uri` in normal form,
    /// `raw` as the client sent it, `plugin`), `prompt` (`name`, `plugin`) and `args` (a tool's
    /// arguments, checked against its input schema first; a prompt's arguments; a resource
    /// template's variables) and, in an `on: [results]` rule, `result` (`text`,
    /// `structuredContent`, `isError`, `findings`); must yield a bool. Default: `true`.
    #[serde(default = "always")]
    pub when: String,
    /// What the rule polices: `tools` (`tools/call`), `resources` (`resources/read`), `prompts`
    /// (`prompts/get`), any of them; or `results` alone (a tool's result, before the client gets
    /// it). Default: `[tools]`.
    #[serde(default = "tools_only")]
    pub on: Vec<Policed>,
    /// What a matching call gets: `allow`, `deny`, `limit` or `approve`.
    pub outcome: RuleOutcome,
    /// `deny`: the message the caller gets (in the tool error result, or the JSON-RPC error of a
    /// resource read or a prompt).
    #[serde(default)]
    pub message: Option<String>,
    /// `limit`: the budget (a key of `policy.budgets`) the call draws on.
    #[serde(default)]
    pub budget: Option<String>,
    /// `limit`: a budget of its own per tool (per resource URI, per prompt), besides per caller.
    #[serde(default)]
    pub per_tool: bool,
    /// `approve`: the fields of `args` shown to the human with the question.
    #[serde(default)]
    pub show: Vec<String>,
    /// `approve`: who answers — `caller` (the caller's client asks its human) or `console` (an
    /// admin in the operator console, for the calls of unattended agents). Default: `caller`.
    #[serde(default, skip_serializing_if = "Approver::is_caller")]
    pub approver: Approver,
}

/// Who answers an `approve` rule's question.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Approver {
    /// The caller's own client, through elicitation (2025) or an input-required round (2026).
    #[default]
    Caller,
    /// An admin (`console.admins`) in the operator console; the call waits for the answer.
    Console,
}

impl Approver {
    /// Whether this is the default, `caller`.
    pub fn is_caller(&self) -> bool {
        *self == Approver::Caller
    }
}

fn always() -> String {
    "true".into()
}

fn tools_only() -> Vec<Policed> {
    vec![Policed::Tools]
}

/// The requests a rule polices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Policed {
    /// Tool calls (`tools/call`, and a tool's calls of other tools).
    Tools,
    /// Resource reads (`resources/read`).
    Resources,
    /// Prompts (`prompts/get`).
    Prompts,
    /// Tool results, after the tool ran and the guardrails did, before the client gets them:
    /// the rule sees `result` (`text`, `structuredContent`, `isError`, `findings`). Only `allow`
    /// and `deny`, in a rule of its own (`on: [results]`).
    Results,
}

/// What a matching rule does with the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleOutcome {
    /// The call runs (later rules are not looked at).
    Allow,
    /// The call is refused with the rule's `message` as a tool error.
    Deny,
    /// The call runs if its `budget` has room; else it is refused with `retryAfter`.
    Limit,
    /// The caller's client asks its human yes or no first (elicitation / input-required round).
    Approve,
}

/// A rate and concurrency budget, kept per caller (and per tool when the rule says so).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Calls allowed per window (a token bucket of this size, refilled over `per_secs`).
    #[serde(default)]
    pub calls: Option<u32>,
    /// The window, in seconds (default 60).
    #[serde(default = "minute")]
    pub per_secs: f64,
    /// Calls allowed at once.
    #[serde(default)]
    pub concurrent: Option<u32>,
    /// Bytes of arguments (their JSON) allowed per window: a second token bucket, of bytes,
    /// refilled over `per_secs`. A call whose arguments alone exceed it is refused.
    #[serde(default)]
    pub bytes: Option<u64>,
}

fn minute() -> f64 {
    60.0
}
