//! What a tool's result passes before the client gets it: the guardrails its call's plan names
//! ([`crate::policy::guardrails`]) — what the detectors found is redacted, flagged
//! (`_meta["mcp-host/guardrails"]`, the audit record, a metric) or blocks the result (an error
//! result naming the detector, never what it found) — then the call policy's `on: [results]`
//! rules, which see the result and every detector's findings, and may deny it. The plugins'
//! result filters the guardrails name (`plugin:<plugin>/<filter>`) run first, each called like a
//! tool of its plugin; what they found is flagged, redacted or blocks like a built-in detector's
//! finding, and a filter that cannot answer (its plugin missing, a panic, its timeout, an answer
//! that is not a verdict) blocks the result: the guardrails fail closed. A call neither applies
//! to costs two loads and two checks: nothing is allocated, parsed or scanned.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Value, json};

use super::call::{CallError, Executor, host_error};
use super::observe::ObservedCall;
use super::result::ToolResult;
use super::{RequestContext, police};
use crate::config::GuardAction;
use crate::policy::detect::DETECTORS;
use crate::policy::guardrails::{
    CallSite, Findings, Plan, each_text, filter_matches, filter_set, scan,
};
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
    /// The result filters that run (`plugin:<plugin>/<filter>`), with their actions.
    filters: Vec<(String, GuardAction)>,
    tool: Arc<Tool>,
    /// The policy, when it has result rules, and the request they judge.
    rules: Option<(Arc<Policy>, Arc<RequestContext>)>,
}

impl Executor {
    /// The built-in detectors' actions (`None` when none runs) and the result filters that run,
    /// for a call of `tool` through `agent`; nothing allocated when no guardrail is configured.
    fn guard_plans(
        &self,
        tool: &Tool,
        agent: Option<&str>,
    ) -> (Option<Plan>, Vec<(String, GuardAction)>) {
        let guardrails = self.guardrails.load();
        if guardrails.is_empty() {
            return (None, Vec::new());
        }
        let site = CallSite {
            tool: &tool.name,
            source_tool: tool.source_name(),
            source: tool.slot.backend.name(),
            agent,
        };
        (guardrails.plan(site), guardrails.filters(site))
    }

    /// Whether anything looks at results (a guardrail or an `on: [results]` rule): one flag read.
    pub(super) fn watches_results(&self) -> bool {
        self.results_watched
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// What a client's call of `tool` for `request` (the agent as the call policy sees it)
    /// passes on its way back; `None` when no guardrail and no result rule applies.
    fn guarded(&self, tool: &Arc<Tool>, request: &Arc<RequestContext>) -> Option<Guarded> {
        let (plan, filters) = self.guard_plans(tool, police::who(request).1);
        let policy = self.policy.load();
        let rules = policy
            .polices_results()
            .then(|| (Arc::clone(&policy), Arc::clone(request)));
        if plan.is_none() && filters.is_empty() && rules.is_none() {
            return None;
        }
        Some(Guarded {
            plan: plan.unwrap_or_else(|| vec![None; DETECTORS.len()]),
            filters,
            tool: Arc::clone(tool),
            rules,
        })
    }
}

/// How a call of `tool` (with `args`, for `request`) ended, after what its result passes when
/// the tool returned one: a result that is blocked or denied ends the call `denied`. Only called
/// when [`Executor::watches_results`].
pub(super) async fn concluded(
    exec: &Executor,
    (tool, request): (Arc<Tool>, Arc<RequestContext>),
    args: &Value,
    ended: (Result<ToolResult, CallError>, Outcome),
    observed: &ObservedCall<'_>,
) -> (Result<ToolResult, CallError>, Outcome) {
    let Some(guarded) = exec.guarded(&tool, &request) else {
        return ended;
    };
    match ended {
        (Ok(returned), outcome @ (Outcome::Ok | Outcome::ToolError)) => {
            let filtered = guarded.filter(exec, &returned).await;
            let (returned, stopped) = match filtered {
                Ok(filtered) => guarded.pass(returned, &filtered, args, observed),
                Err(message) => (host_error(&message), true),
            };
            (
                Ok(returned),
                if stopped { Outcome::Denied } else { outcome },
            )
        }
        other => other,
    }
}

/// What one result filter found in a result: its matches (compiled; `None`: nothing), with its
/// key and action.
struct Filtered {
    key: String,
    action: GuardAction,
    set: Option<aho_corasick::AhoCorasick>,
}

/// A finding as the annotation, the audit log and the metric show it: a built-in detector's or
/// a result filter's.
struct Noted {
    detector: Cow<'static, str>,
    group: &'static str,
    count: u32,
    action: Option<GuardAction>,
}

/// The most matches a filter's verdict may hold, and the longest one.
const MAX_FILTER_MATCHES: usize = 1000;
const MAX_FILTER_MATCH_BYTES: usize = 4096;

impl Guarded {
    /// The result filters' matches in `result` (in their order), or the error message of the
    /// result that replaces it when one of them cannot answer (never what the result holds).
    async fn filter(&self, exec: &Executor, result: &ToolResult) -> Result<Vec<Filtered>, String> {
        if self.filters.is_empty() {
            return Ok(Vec::new());
        }
        let mut texts: Vec<String> = Vec::new();
        let mut value = result.clone().into_value();
        each_text(&mut value, &mut |text| texts.push(text.clone()));
        let input = json!({
            "tool": self.tool.name,
            "source": self.tool.slot.backend.name(),
            "texts": texts,
        })
        .to_string();
        let mut filtered = Vec::with_capacity(self.filters.len());
        for (key, action) in &self.filters {
            let verdict = exec.run_filter(key, input.clone()).await;
            let set = verdict.and_then(|v| {
                let matches = verdict_matches(&v)
                    .ok_or_else(|| "it answered something that is not a verdict".to_owned())?;
                filter_set(&matches).map_err(|_| "its matches could not be compiled".to_owned())
            });
            match set {
                Ok(set) => filtered.push(Filtered {
                    key: key.clone(),
                    action: *action,
                    set,
                }),
                Err(why) => {
                    tracing::error!(tool = %self.tool.name, filter = %key, "result filter failed closed: {why}");
                    return Err(format!(
                        "the result of {} was blocked: its guardrail filter `{key}` could not check it ({why})",
                        self.tool.name
                    ));
                }
            }
        }
        Ok(filtered)
    }

    /// `result` of a call with `args` after the guardrails (the filters' matches `filtered`
    /// among them) and the result rules: redacted, annotated, or an error result in its place
    /// (then `true`). The findings go to the call's audit record and metrics.
    fn pass(
        &self,
        result: ToolResult,
        filtered: &[Filtered],
        args: &Value,
        observed: &ObservedCall<'_>,
    ) -> (ToolResult, bool) {
        let mut noted = Vec::new();
        let mut denied = None;
        let result = result.inspect(|value| {
            let (by_filters, filters_changed) = apply_filters(value, filtered);
            let (findings, changed) = scan(value, &self.plan, self.rules.is_some());
            noted = notes(&findings, by_filters);
            if noted.iter().any(|n| n.action == Some(GuardAction::Block)) {
                return false;
            }
            if let Some((policy, request)) = &self.rules {
                denied = judge(
                    policy, request, &self.tool, args, value, &findings, observed,
                );
            }
            let acted: Vec<&Noted> = noted.iter().filter(|f| f.action.is_some()).collect();
            if acted.is_empty() || denied.is_some() {
                return changed || filters_changed;
            }
            annotate(value, &acted);
            true
        });
        self.record(&noted, observed);
        if let Some(blocking) = noted.iter().find(|n| n.action == Some(GuardAction::Block)) {
            let label = DETECTORS
                .iter()
                .find(|d| d.name == blocking.detector)
                .map_or("what an organisation filter matches", |d| d.label);
            let message = format!(
                "the result of {} was blocked by a guardrail: it holds {} (detector `{}`)",
                self.tool.name, label, blocking.detector
            );
            return (host_error(&message), true);
        }
        match denied {
            Some(message) => (host_error(&message), true),
            None => (result, false),
        }
    }

    /// The findings a guardrail acted on: logged (never what was found), counted and audited.
    fn record(&self, noted: &[Noted], observed: &ObservedCall<'_>) {
        let recorded: Vec<GuardFinding> = noted
            .iter()
            .filter(|f| f.action.is_some())
            .map(|f| GuardFinding {
                detector: f.detector.clone(),
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
                detector = %f.detector,
                count = f.count,
                action = f.action,
                "guardrail finding in a tool result"
            );
        }
        observed.guarded(recorded);
    }
}

/// The matches of a filter's verdict (`structuredContent.matches`, strings), if the result is
/// one within bounds.
fn verdict_matches(result: &Value) -> Option<Vec<String>> {
    let matches = result
        .get("structuredContent")?
        .get("matches")?
        .as_array()?;
    if matches.len() > MAX_FILTER_MATCHES {
        return None;
    }
    matches
        .iter()
        .map(|m| {
            let m = m.as_str()?;
            (!m.is_empty() && m.len() <= MAX_FILTER_MATCH_BYTES).then(|| m.to_owned())
        })
        .collect()
}

/// Count (and, for `redact`, replace) the filters' matches in `result`'s text strings: what each
/// filter found (those that found something), and whether the result changed.
fn apply_filters(result: &mut Value, filtered: &[Filtered]) -> (Vec<Noted>, bool) {
    let mut noted = Vec::new();
    let mut changed = false;
    for f in filtered {
        let Some(set) = &f.set else {
            continue;
        };
        let redact = f.action == GuardAction::Redact;
        let mut count = 0u32;
        each_text(result, &mut |text| {
            let (n, c) = filter_matches(text, set, &f.key, redact);
            count = count.saturating_add(n);
            changed |= c;
        });
        if count > 0 {
            noted.push(Noted {
                detector: Cow::Owned(f.key.clone()),
                group: "plugin",
                count,
                action: Some(f.action),
            });
        }
    }
    (noted, changed)
}

/// The built-in detectors' findings, then the filters'.
fn notes(findings: &Findings, by_filters: Vec<Noted>) -> Vec<Noted> {
    let builtin = findings.0.iter().map(|f| Noted {
        detector: Cow::Borrowed(f.name()),
        group: f.group(),
        count: f.count,
        action: f.action,
    });
    builtin.chain(by_filters).collect()
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
fn annotate(result: &mut Value, findings: &[&Noted]) {
    let listed: Vec<Value> = findings
        .iter()
        .map(|f| {
            json!({
                "detector": f.detector,
                "group": f.group,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_verdict_is_read_within_bounds_or_refused() {
        let ok = json!({"structuredContent": {"matches": ["TCK-1", "TCK-2"]}});
        assert_eq!(
            verdict_matches(&ok),
            Some(vec!["TCK-1".to_owned(), "TCK-2".to_owned()])
        );
        let none = json!({"structuredContent": {"matches": []}});
        assert_eq!(verdict_matches(&none), Some(Vec::new()));
        let many: Vec<String> = (0..=MAX_FILTER_MATCHES).map(|i| i.to_string()).collect();
        let long = "x".repeat(MAX_FILTER_MATCH_BYTES + 1);
        for garbage in [
            json!({"content": [{"type": "text", "text": "{}"}]}),
            json!({"structuredContent": {"matches": "TCK-1"}}),
            json!({"structuredContent": {"matches": [1]}}),
            json!({"structuredContent": {"matches": [""]}}),
            json!({"structuredContent": {"matches": [long]}}),
            json!({"structuredContent": {"matches": many}}),
        ] {
            assert_eq!(verdict_matches(&garbage), None, "{garbage}");
        }
    }

    #[test]
    fn a_filter_redacts_its_matches_in_text_and_structured_content() {
        let mut result = json!({
            "content": [{"type": "text", "text": "a TCK-1 b TCK-1 \"q\""}],
            "structuredContent": {"ids": ["TCK-1", "TCK-2"], "n": 3}
        });
        let set = |m: &[&str]| {
            let m: Vec<String> = m.iter().map(|s| (*s).to_owned()).collect();
            filter_set(&m).expect("builds")
        };
        let filtered = [Filtered {
            key: "plugin:p/f".into(),
            action: GuardAction::Redact,
            set: set(&["TCK-1"]),
        }];
        let (noted, changed) = apply_filters(&mut result, &filtered);
        assert!(changed);
        assert_eq!(noted.len(), 1);
        assert_eq!(
            (noted[0].detector.as_ref(), noted[0].count),
            ("plugin:p/f", 3)
        );
        assert_eq!(
            result["content"][0]["text"],
            "a [REDACTED:plugin:p/f] b [REDACTED:plugin:p/f] \"q\""
        );
        assert_eq!(
            result["structuredContent"]["ids"],
            json!(["[REDACTED:plugin:p/f]", "TCK-2"])
        );
        // Flagged: counted, unchanged.
        let flagged = [Filtered {
            action: GuardAction::Flag,
            set: set(&["TCK-2"]),
            ..filtered.into_iter().next().expect("one")
        }];
        let (noted, changed) = apply_filters(&mut result, &flagged);
        assert!(!changed);
        assert_eq!(noted[0].count, 1); // Overlapping matches: the longest wins, once.
        let mut overlapping = json!({"content": [{"type": "text", "text": "x TCK-12 y"}]});
        let both = [Filtered {
            key: "plugin:p/f".into(),
            action: GuardAction::Redact,
            set: set(&["TCK-1", "TCK-12", "12"]),
        }];
        let (noted, _) = apply_filters(&mut overlapping, &both);
        assert_eq!(noted[0].count, 1);
        assert_eq!(
            overlapping["content"][0]["text"],
            "x [REDACTED:plugin:p/f] y"
        );
    }
}
