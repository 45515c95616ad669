//! Observing a tool call: [`Telemetry::observe`] starts an [`ObservedCall`] (its span, the
//! in-flight gauge), the call marks when it left the queue, and [`ObservedCall::finish`] records
//! the outcome in the metrics, on the span and in the audit log. A call dropped before it finished
//! (the client went away) is recorded as `cancelled`. Here rather than in `telemetry`, which sits
//! below the stages that define tools and results.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::UserInfo;
use serde_json::Value;

use crate::exec::ToolResult;
use crate::registry::Tool;
use crate::telemetry::{Metrics, Outcome, Telemetry, audit, json_len, metrics, trace};

/// Who a call runs for, as the audit log names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallParty<'a> {
    /// The verified caller, if any.
    pub caller: Option<&'a UserInfo>,
    /// Else the caller as JSON, as a nested call inherits it (empty for none).
    pub caller_json: &'a str,
    /// The agent whose view applies, if any.
    pub agent: Option<&'a str>,
    /// 0 for a client's call, more for a tool calling a tool.
    pub depth: u32,
}

impl Telemetry {
    /// Start observing a call of `tool` for `party`, with its arguments (their size goes to the
    /// audit log; never their values).
    pub(crate) fn observe(
        &self,
        tool: &Arc<Tool>,
        party: CallParty<'_>,
        args: Arguments<'_>,
    ) -> ObservedCall<'_> {
        series_of(&self.metrics, tool).started();
        let audited = (self.audit.is_some() || self.feed.watched()).then(|| {
            let inherited = (party.caller.is_none() && !party.caller_json.is_empty())
                .then(|| serde_json::from_str::<UserInfo>(party.caller_json).ok())
                .flatten();
            let caller = party.caller.or(inherited.as_ref());
            Audited {
                caller: caller.map(|c| c.user_id.clone()),
                agent: party
                    .agent
                    .map(str::to_owned)
                    .or_else(|| caller.and_then(|c| c.agent.clone())),
                argument_bytes: args.len(),
            }
        });
        ObservedCall {
            telemetry: self,
            tool: Arc::clone(tool),
            span: call_span(tool),
            started: Instant::now(),
            queue_wait: OnceLock::new(),
            depth: party.depth,
            audited,
            policy: OnceLock::new(),
            guardrails: OnceLock::new(),
            done: false,
        }
    }
}

/// A tool's series, looked up at its first call and kept with it.
fn series_of<'t>(metrics: &Metrics, tool: &'t Tool) -> &'t metrics::ToolSeries {
    tool.series
        .get_or_init(|| metrics.tool(&tool.name, tool.slot.backend.name()))
}

/// A call's arguments, as the call path has them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arguments<'a> {
    /// Parsed (a client's call).
    Value(&'a Value),
    /// As JSON text (a nested call).
    Text(&'a str),
}

impl Arguments<'_> {
    /// Their size as JSON text, in bytes.
    fn len(self) -> usize {
        match self {
            Arguments::Value(v) => json_len(v),
            Arguments::Text(t) => t.len(),
        }
    }
}

/// What the audit log needs of a call besides the tool (taken only when it is on).
#[derive(Debug)]
struct Audited {
    caller: Option<String>,
    agent: Option<String>,
    argument_bytes: usize,
}

/// One call being observed: its span, its timings, and who it runs for.
#[derive(Debug)]
pub(crate) struct ObservedCall<'a> {
    telemetry: &'a Telemetry,
    tool: Arc<Tool>,
    span: tracing::Span,
    started: Instant,
    queue_wait: OnceLock<Duration>,
    depth: u32,
    audited: Option<Audited>,
    /// The call policy rule that decided the call and what it decided.
    policy: OnceLock<(String, &'static str)>,
    /// What the guardrails found in its result.
    guardrails: OnceLock<Vec<audit::GuardFinding>>,
    done: bool,
}

impl ObservedCall<'_> {
    /// The call's span (`execute_tool <name>`): run the call in it.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// A span for one phase of the call (`validate`, `queue`, `plugin`), a child of the call's.
    pub(crate) fn phase(&self, name: &'static str) -> tracing::Span {
        trace::phase_span(&self.span, name)
    }

    /// When the call started.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// The call got its permits after waiting `wait` for them.
    pub(crate) fn dequeued(&self, wait: Duration) {
        if self.queue_wait.set(wait).is_ok() {
            self.series().queued(wait);
        }
    }

    fn series(&self) -> &metrics::ToolSeries {
        series_of(&self.telemetry.metrics, &self.tool)
    }

    /// Call policy rule `rule` decided the call (`allowed`, `denied`, `limited`, `approved`,
    /// `refused`): counted per rule, and named in the audit record.
    pub(crate) fn policy(&self, rule: &str, decision: &'static str) {
        let metrics = &self.telemetry.metrics;
        metrics.policy_decision(rule, "matched");
        if decision != "allowed" {
            metrics.policy_decision(rule, decision);
        }
        let _ = self.policy.set((rule.to_owned(), decision));
    }

    /// The guardrails found `findings` in the call's result: counted per detector and action,
    /// and named in the audit record.
    pub(crate) fn guarded(&self, findings: Vec<audit::GuardFinding>) {
        for f in &findings {
            self.telemetry
                .metrics
                .guardrail_finding(&f.detector, f.action);
        }
        let _ = self.guardrails.set(findings);
    }

    /// The call ended with `outcome` and `result` (an error to the client has none).
    pub(crate) fn finish(mut self, outcome: Outcome, result: Option<&ToolResult>) {
        self.done = true;
        self.record(outcome, result);
    }

    fn record(&self, outcome: Outcome, result: Option<&ToolResult>) {
        let took = self.started.elapsed();
        self.series().finished(outcome, took);
        trace::record_outcome(&self.span, outcome);
        let feed = &self.telemetry.feed;
        feed.count(outcome == Outcome::Ok, took);
        if let Some(audited) = &self.audited {
            let queue = self.queue_wait.get().copied();
            let record = self.audit_record(audited, outcome, took, queue, result);
            if let Some(log) = &self.telemetry.audit {
                log.write(&record);
            }
            feed.publish(&record);
        }
    }

    fn audit_record<'r>(
        &'r self,
        audited: &'r Audited,
        outcome: Outcome,
        took: Duration,
        queue: Option<Duration>,
        result: Option<&ToolResult>,
    ) -> audit::Record<'r> {
        let slot = &self.tool.slot;
        audit::Record {
            time: format!("{:.6}", jiff::Timestamp::now()),
            caller: audited.caller.as_deref(),
            agent: audited.agent.as_deref(),
            tool: &self.tool.name,
            source_tool: self
                .tool
                .shaped()
                .map(|_| self.tool.source_name())
                .filter(|source| *source != self.tool.name),
            plugin: slot.backend.name(),
            plugin_version: &slot.backend.manifest().version,
            plugin_file: &slot.candidate.path,
            outcome: outcome.as_str(),
            duration_ms: took.as_secs_f64() * 1e3,
            queue_ms: queue.map(|q| q.as_secs_f64() * 1e3),
            argument_bytes: audited.argument_bytes,
            result_bytes: result.map(ToolResult::json_len),
            depth: self.depth,
            policy_rule: self.policy.get().map(|(r, _)| r.as_str()),
            policy: self.policy.get().map(|(_, d)| *d),
            trace_id: trace::trace_id(&self.span),
            guardrails: self.guardrails.get().map(Vec::as_slice),
        }
    }
}

impl Drop for ObservedCall<'_> {
    /// A call that never finished was abandoned by its client.
    fn drop(&mut self) {
        if !self.done {
            self.record(Outcome::Cancelled, None);
        }
    }
}

/// The span of one tool call (a child of the current span: the request's, or for a nested call the
/// calling tool's `plugin` phase).
pub(crate) fn call_span(tool: &Tool) -> tracing::Span {
    if !trace::exporting() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        target: trace::TARGET,
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", tool.name),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool.name,
        mcp_host.plugin = tool.slot.backend.name(),
        mcp_host.plugin.version = %tool.slot.backend.manifest().version,
        mcp_host.outcome = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}
