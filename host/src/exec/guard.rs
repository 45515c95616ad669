//! The guardrails on the call path: after a tool returned, the detectors its call's plan names
//! run over the result ([`crate::policy::guardrails`]); what they found is redacted, flagged
//! (`_meta["mcp-host/guardrails"]`, the audit record, a metric) or blocks the result (an error
//! result naming the detector, never what it found). A call no guardrail applies to costs one
//! load of the compiled guardrails and one check: nothing is allocated or scanned.

use std::sync::Arc;

use serde_json::{Value, json};

use super::RequestContext;
use super::call::{CallError, Executor, host_error};
use super::observe::ObservedCall;
use super::result::ToolResult;
use crate::config::GuardAction;
use crate::policy::detect::DETECTORS;
use crate::policy::guardrails::{CallSite, Findings, Plan, scan};
use crate::registry::Tool;
use crate::telemetry::Outcome;
use crate::telemetry::audit::GuardFinding;

/// The `_meta` key of a result's findings.
pub const META_KEY: &str = "mcp-host/guardrails";

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

    /// The plan of a client's call of `tool` for `request` (the agent as the call policy sees
    /// it), with the tool to name in findings; `None` when no guardrail applies.
    pub(super) fn guarded(
        &self,
        tool: &Arc<Tool>,
        request: &RequestContext,
    ) -> Option<(Plan, Arc<Tool>)> {
        self.guard_plan(tool, super::police::who(request).1)
            .map(|plan| (plan, Arc::clone(tool)))
    }
}

/// How a call ended, after the guardrails (`guarded`: the plan and the tool, if any apply) ran
/// over its result when the tool returned one (a result that is blocked ends the call `denied`).
pub(super) fn concluded(
    guarded: Option<(Plan, Arc<Tool>)>,
    ended: (Result<ToolResult, CallError>, Outcome),
    observed: &ObservedCall<'_>,
) -> (Result<ToolResult, CallError>, Outcome) {
    let Some((plan, tool)) = guarded else {
        return ended;
    };
    match ended {
        (Ok(returned), outcome @ (Outcome::Ok | Outcome::ToolError)) => {
            let (returned, blocked) = guard(&tool, &plan, returned, observed);
            (
                Ok(returned),
                if blocked { Outcome::Denied } else { outcome },
            )
        }
        other => other,
    }
}

/// `result` of a call of `tool` after the detectors of `plan`: redacted, annotated, or an error
/// result in its place when a `block` detector found something (then `true`). The findings go
/// to the call's audit record and metrics.
pub(super) fn guard(
    tool: &Tool,
    plan: &Plan,
    result: ToolResult,
    observed: &ObservedCall<'_>,
) -> (ToolResult, bool) {
    let mut findings = Findings::default();
    let result = result.inspect(|value| {
        let (found, changed) = scan(value, plan, false);
        findings = found;
        if findings.is_empty() {
            return changed;
        }
        annotate(value, &findings);
        true
    });
    if findings.is_empty() {
        return (result, false);
    }
    let recorded: Vec<GuardFinding> = findings
        .0
        .iter()
        .map(|f| GuardFinding {
            detector: f.name(),
            count: f.count,
            action: action_name(f.action),
        })
        .collect();
    for f in &recorded {
        tracing::info!(
            tool = %tool.name,
            detector = f.detector,
            count = f.count,
            action = f.action,
            "guardrail finding in a tool result"
        );
    }
    observed.guarded(recorded);
    match findings.blocking() {
        Some(blocking) => {
            let detector = &DETECTORS[blocking.detector];
            let message = format!(
                "the result of {} was blocked by a guardrail: it holds {} (detector `{}`)",
                tool.name, detector.label, detector.name
            );
            (host_error(&message), true)
        }
        None => (result, false),
    }
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
fn annotate(result: &mut Value, findings: &Findings) {
    let listed: Vec<Value> = findings
        .0
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
