//! What a tool's result passes before the client gets it: the guardrails its call's plan names
//! ([`crate::policy::guardrails`]) — what the detectors found is redacted, flagged
//! (`_meta["mcp-host/guardrails"]`, the audit record, a metric) or blocks the result (an error
//! result naming the detector, never what it found) — then the call policy's `on: [results]`
//! rules, which see the result and every detector's findings, and may deny it. A call neither
//! applies to costs two loads and two checks: nothing is allocated, parsed or scanned.

use std::sync::Arc;

use serde_json::{Value, json};

use super::call::{CallError, Executor, host_error};
use super::observe::ObservedCall;
use super::result::ToolResult;
use super::{RequestContext, police};
use crate::config::GuardAction;
use crate::policy::detect::DETECTORS;
use crate::policy::guardrails::{CallSite, Finding, Findings, Plan, scan};
use crate::policy::{Policy, ResultFacts};
use crate::registry::Tool;
use crate::telemetry::Outcome;
use crate::telemetry::audit::GuardFinding;

/// The `_meta` key of a result's findings.
pub const META_KEY: &str = "mcp-host/guardrails";

/// What a call's result passes: the guardrails' plan (every detector off when only rules
/// apply) and the result rules, with what they need of the call.
pub(super) struct Guarded {
    plan: Plan,
    tool: Arc<Tool>,
    /// The policy, when it has result rules, and the request they judge.
    rules: Option<(Arc<Policy>, Arc<RequestContext>)>,
}

impl Executor {
    /// The guardrails' actions for a call of `tool` through `agent`: `None` (nothing allocated)
    /// when none applies.
    pub(super) fn guard_plan(&self, tool: &Tool, agent: Option<&str>) -> Option<Plan> {
        let guardrails = self.guardrails.load();
        if guardrails.is_empty() {
            return None;
        }
        guardrails.plan(CallSite {
            tool: &tool.name,
            source_tool: tool.source_name(),
            source: tool.slot.backend.name(),
            agent,
        })
    }

    /// What a client's call of `tool` for `request` (the agent as the call policy sees it)
    /// passes on its way back; `None` when no guardrail and no result rule applies.
    pub(super) fn guarded(
        &self,
        tool: &Arc<Tool>,
        request: &Arc<RequestContext>,
    ) -> Option<Guarded> {
        let plan = self.guard_plan(tool, police::who(request).1);
        let policy = self.policy.load();
        let rules = policy
            .polices_results()
            .then(|| (Arc::clone(&policy), Arc::clone(request)));
        if plan.is_none() && rules.is_none() {
            return None;
        }
        Some(Guarded {
            plan: plan.unwrap_or_else(|| vec![None; DETECTORS.len()]),
            tool: Arc::clone(tool),
            rules,
        })
    }
}

/// How a call (with `args`) ended, after what its result passes (`guarded`, if anything) when
/// the tool returned one: a result that is blocked or denied ends the call `denied`.
pub(super) fn concluded(
    guarded: Option<Guarded>,
    args: &Value,
    ended: (Result<ToolResult, CallError>, Outcome),
    observed: &ObservedCall<'_>,
) -> (Result<ToolResult, CallError>, Outcome) {
    let Some(guarded) = guarded else {
        return ended;
    };
    match ended {
        (Ok(returned), outcome @ (Outcome::Ok | Outcome::ToolError)) => {
            let (returned, stopped) = guarded.pass(returned, args, observed);
            (
                Ok(returned),
                if stopped { Outcome::Denied } else { outcome },
            )
        }
        other => other,
    }
}

impl Guarded {
    /// `result` of a call with `args` after the guardrails and the result rules: redacted,
    /// annotated, or an error result in its place (then `true`). The findings go to the call's
    /// audit record and metrics.
    fn pass(
        &self,
        result: ToolResult,
        args: &Value,
        observed: &ObservedCall<'_>,
    ) -> (ToolResult, bool) {
        let mut findings = Findings::default();
        let mut denied = None;
        let result = result.inspect(|value| {
            let (found, changed) = scan(value, &self.plan, self.rules.is_some());
            findings = found;
            if findings.blocking().is_some() {
                return false;
            }
            if let Some((policy, request)) = &self.rules {
                denied = judge(
                    policy, request, &self.tool, args, value, &findings, observed,
                );
            }
            let acted: Vec<&Finding> = findings.0.iter().filter(|f| f.action.is_some()).collect();
            if acted.is_empty() || denied.is_some() {
                return changed;
            }
            annotate(value, &acted);
            true
        });
        self.record(&findings, observed);
        if let Some(blocking) = findings.blocking() {
            let detector = &DETECTORS[blocking.detector];
            let message = format!(
                "the result of {} was blocked by a guardrail: it holds {} (detector `{}`)",
                self.tool.name, detector.label, detector.name
            );
            return (host_error(&message), true);
        }
        match denied {
            Some(message) => (host_error(&message), true),
            None => (result, false),
        }
    }

    /// The findings a guardrail acted on: logged (never what was found), counted and audited.
    fn record(&self, findings: &Findings, observed: &ObservedCall<'_>) {
        let recorded: Vec<GuardFinding> = findings
            .0
            .iter()
            .filter(|f| f.action.is_some())
            .map(|f| GuardFinding {
                detector: f.name(),
                count: f.count,
                action: action_name(f.action),
            })
            .collect();
        if recorded.is_empty() {
            return;
        }
        for f in &recorded {
            tracing::info!(
                tool = %self.tool.name,
                detector = f.detector,
                count = f.count,
                action = f.action,
                "guardrail finding in a tool result"
            );
        }
        observed.guarded(recorded);
    }
}

/// The result rules' verdict on `result` (with `findings`) of a call of `tool` with `args` for
/// `request`: the message of a denial, if one denies it (recorded like any rule's decision).
fn judge(
    policy: &Policy,
    request: &RequestContext,
    tool: &Tool,
    args: &Value,
    result: &Value,
    findings: &Findings,
    observed: &ObservedCall<'_>,
) -> Option<String> {
    let text = text_of(result);
    let facts = ResultFacts {
        text: &text,
        structured: result.get("structuredContent"),
        is_error: result.get("isError").and_then(Value::as_bool) == Some(true),
        findings,
    };
    let message = police::judge_result(policy, request, tool, args, &facts, observed)?;
    tracing::info!(tool = %tool.name, "result denied by policy");
    Some(message)
}

/// The text content of a result: its items' `text`, one per line.
fn text_of(result: &Value) -> String {
    let items = result.get("content").and_then(Value::as_array);
    let texts: Vec<&str> = items
        .into_iter()
        .flatten()
        .filter_map(|item| item.get("text").and_then(Value::as_str))
        .collect();
    texts.join("\n")
}

/// An action's name in findings, the audit log and metrics.
pub fn action_name(action: Option<GuardAction>) -> &'static str {
    match action {
        Some(GuardAction::Flag) => "flag",
        Some(GuardAction::Redact) => "redact",
        Some(GuardAction::Block) => "block",
        Some(GuardAction::Off) | None => "found",
    }
}

/// Put `findings` in `result`'s `_meta` under [`META_KEY`].
fn annotate(result: &mut Value, findings: &[&Finding]) {
    let listed: Vec<Value> = findings
        .iter()
        .map(|f| {
            json!({
                "detector": f.name(),
                "group": f.group(),
                "count": f.count,
                "action": action_name(f.action),
            })
        })
        .collect();
    let Value::Object(members) = result else {
        return;
    };
    let meta = members
        .entry("_meta")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(META_KEY.to_owned(), json!({ "findings": listed }));
    }
}
