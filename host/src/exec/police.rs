//! The call policy on the call path: the decision for a tool call, a tool's call of another tool,
//! a resource read or a prompt, and what comes of it — run (holding a budget's slot when a
//! `limit` rule matched), a refusal, or a human's yes asked for first ([`super::approval`]).
//! Every decision a rule makes is counted in the rule's metrics and lands in the audit log: a tool
//! call's in the call's record, a read's or a prompt's in a record of its own.

use std::time::Instant;

use serde_json::Value;

use super::RequestContext;
use super::call::{CallError, CallOptions, Executor, InvokeError, annotations_of, host_error};
use super::observe::ObservedCall;
use super::result::ToolResult;
use crate::config::{Approver, Budget};
use crate::policy::budget::{BudgetError, BudgetPermit, Draw};
use crate::policy::{CallFacts, Decision, Policy, ResultFacts, Subject};
use crate::registry::Tool;
use crate::telemetry::{Outcome, audit};

/// What the call policy left of a tool call.
pub(super) enum Policed {
    /// It runs, holding this budget slot (if a `limit` rule matched).
    Go(Option<BudgetPermit>),
    /// It ends here with this answer.
    Stop(Result<ToolResult, CallError>, Outcome),
}

/// What a decision came to, whatever was asked for.
enum Verdict {
    /// It runs, holding this budget slot (if a `limit` rule matched).
    Go(Option<BudgetPermit>),
    /// A `deny` rule refused it with the operator's message.
    Denied(String, String),
    /// A `limit` rule's budget is exhausted.
    Limited(BudgetError),
    /// An `approve` rule's question waits in a 2026 round.
    Pending,
    /// An `approve` rule got no yes: the rule, and the refusal.
    NotApproved(String, String),
}

/// Where a rule's decision is recorded: `(rule, decision)` (`allowed`, `denied`, `limited`,
/// `approved`, `refused`).
type Record<'r> = &'r (dyn Fn(&str, &'static str) + Sync);

impl Executor {
    /// The call policy's decision for a client's call of `tool` with `args`: go on (holding a
    /// budget's slot when a `limit` rule matched), or stop with this answer.
    pub(super) async fn police(
        &self,
        tool: &Tool,
        args: &Value,
        opts: &CallOptions,
        observed: &ObservedCall<'_>,
    ) -> Policed {
        let policy = self.policy.load_full();
        if policy.is_empty() {
            return Policed::Go(None);
        }
        let annotations = annotations_of(tool);
        let subject = tool_subject(tool, &annotations);
        let decision = decide(
            &policy,
            subject,
            tool.slot.backend.name(),
            args,
            &opts.request,
        );
        let record = |rule: &str, decision| observed.policy(rule, decision);
        match self
            .verdict(&policy, decision, &subject, args, opts, &record)
            .await
        {
            Verdict::Go(permit) => Policed::Go(permit),
            Verdict::Denied(rule, message) => {
                tracing::info!(tool = %tool.name, rule, "call denied by policy");
                Policed::Stop(Ok(host_error(&message)), Outcome::Denied)
            }
            Verdict::Limited(e) => {
                tracing::info!(tool = %tool.name, rule = e.rule, "call limited by policy: {e}");
                Policed::Stop(Err(CallError::Limited(e)), Outcome::Throttled)
            }
            Verdict::Pending => Policed::Stop(
                Ok(host_error("waiting for approval of this call")),
                Outcome::Denied,
            ),
            Verdict::NotApproved(_, message) => {
                Policed::Stop(Ok(host_error(&message)), Outcome::Denied)
            }
        }
    }

    /// The call policy's decision for a resource read or a prompt (`subject`, served by `plugin`,
    /// with `args`: a prompt's arguments or a template's variables, made only when there are
    /// rules) before its plugin or upstream server runs: the budget slot to hold while it runs,
    /// or why it does not.
    pub async fn police_request(
        &self,
        subject: Subject<'_>,
        plugin: &str,
        args: impl FnOnce() -> Value,
        opts: &CallOptions,
    ) -> Result<Option<BudgetPermit>, InvokeError> {
        let policy = self.policy.load_full();
        if policy.is_empty() {
            return Ok(None);
        }
        let args = &args();
        let decision = decide(&policy, subject, plugin, args, &opts.request);
        let telemetry = &self.telemetry;
        let record = |rule: &str, decision| {
            telemetry.metrics.policy_decision(rule, "matched");
            if decision != "allowed" {
                telemetry.metrics.policy_decision(rule, decision);
            }
            if telemetry.auditing() {
                telemetry.audit_decision(&decision_record(&subject, plugin, opts, rule, decision));
            }
        };
        let (kind, name) = (subject.kind(), subject.name());
        match self
            .verdict(&policy, decision, &subject, args, opts, &record)
            .await
        {
            Verdict::Go(permit) => Ok(permit),
            Verdict::Denied(rule, message) => {
                tracing::info!(kind, name, rule, "request denied by policy");
                Err(InvokeError::Denied { rule, message })
            }
            Verdict::Limited(e) => {
                tracing::info!(kind, name, rule = e.rule, "request limited by policy: {e}");
                Err(InvokeError::Limited(e))
            }
            Verdict::Pending => Err(InvokeError::AwaitingApproval),
            Verdict::NotApproved(rule, message) => Err(InvokeError::NotApproved { rule, message }),
        }
    }

    /// Whether the call policy refuses a request about `subject` (served by `plugin`, with
    /// `args`) to `request`'s caller outright: a `deny` rule matches, or a rule cannot be
    /// evaluated on it (a policy fails closed). Asked before a completion shows the values of
    /// what the caller may not get; nothing is drawn on, asked or recorded.
    pub fn denies(
        &self,
        subject: Subject<'_>,
        plugin: &str,
        args: &Value,
        request: &RequestContext,
    ) -> bool {
        let policy = self.policy.load_full();
        !policy.is_empty()
            && matches!(
                decide(&policy, subject, plugin, args, request),
                Decision::Deny { .. }
            )
    }

    /// What `decision` comes to for a request about `subject` with `args`: a budget drawn on, a
    /// human asked, each step recorded through `record`.
    async fn verdict(
        &self,
        policy: &Policy,
        decision: Decision<'_>,
        subject: &Subject<'_>,
        args: &Value,
        opts: &CallOptions,
        record: Record<'_>,
    ) -> Verdict {
        match decision {
            Decision::Limit {
                rule,
                budget,
                limits,
                key,
            } => {
                let draw = draw_of(budget, limits, &key, args);
                let admitted = self.budgets.admit(draw, rule, Instant::now()).await;
                limited(record, rule, admitted)
            }
            Decision::Approve { rule, shown, by } => {
                let timeout = policy.approval_timeout();
                let answer = match by {
                    Approver::Caller => {
                        super::approval::ask(subject, rule, &shown, opts, timeout).await
                    }
                    Approver::Console => {
                        self.approvals
                            .ask(subject, rule, &shown, opts, timeout)
                            .await
                    }
                };
                match answer {
                    super::approval::Answer::Yes => {
                        record(rule, "approved");
                        tracing::info!(name = subject.name(), rule, "request approved");
                        Verdict::Go(None)
                    }
                    super::approval::Answer::Pending => Verdict::Pending,
                    super::approval::Answer::No(why) => {
                        record(rule, "refused");
                        tracing::info!(name = subject.name(), rule, "request refused: {why}");
                        let message = format!(
                            "refused: this {} needs approval (policy rule `{rule}`) and {why}",
                            what_needs_approval(subject)
                        );
                        Verdict::NotApproved(rule.to_owned(), message)
                    }
                }
            }
            plain => plain_verdict(plain, record),
        }
    }

    /// The call policy's decision for a nested call of `tool` (for the outer call's `request`):
    /// go on, holding a budget slot if a `limit` rule matched, or the refusal.
    pub(super) fn police_nested(
        &self,
        tool: &Tool,
        args: &Value,
        request: &RequestContext,
        observed: &ObservedCall<'_>,
    ) -> Result<Option<BudgetPermit>, String> {
        let policy = self.policy.load_full();
        if policy.is_empty() {
            return Ok(None);
        }
        let annotations = annotations_of(tool);
        let subject = tool_subject(tool, &annotations);
        let record = |rule: &str, decision| observed.policy(rule, decision);
        let verdict = match decide(&policy, subject, tool.slot.backend.name(), args, request) {
            Decision::Limit {
                rule,
                budget,
                limits,
                key,
            } => {
                // A shared budget's draw is waited for on this (blocking) thread.
                let draw = draw_of(budget, limits, &key, args);
                let admitted = self.budgets.admit_blocking(draw, rule, Instant::now());
                limited(&record, rule, admitted)
            }
            Decision::Approve { rule, .. } => {
                record(rule, "refused");
                let message = format!(
                    "refused: this call needs approval (policy rule `{rule}`) and a tool's call \
                     of another tool cannot ask for it"
                );
                Verdict::NotApproved(rule.to_owned(), message)
            }
            plain => plain_verdict(plain, &record),
        };
        match verdict {
            Verdict::Go(permit) => Ok(permit),
            Verdict::Denied(_, message) | Verdict::NotApproved(_, message) => Err(message),
            Verdict::Limited(e) => Err(e.to_string()),
            Verdict::Pending => Err("refused: waiting for approval".into()),
        }
    }
}

/// The `on: [results]` rules' verdict on a call of `tool` with `args` for `request` whose tool
/// returned `result`: the message of a denial, if one denies it. Recorded like any rule's
/// decision (a result rule that cannot be evaluated denies: a policy fails closed).
pub(super) fn judge_result(
    policy: &Policy,
    request: &RequestContext,
    tool: &Tool,
    args: &Value,
    result: &ResultFacts<'_>,
    observed: &ObservedCall<'_>,
) -> Option<String> {
    let annotations = annotations_of(tool);
    let subject = tool_subject(tool, &annotations);
    let facts = facts(subject, tool.slot.backend.name(), args, request);
    let record = |rule: &str, decision| observed.policy(rule, decision);
    match plain_verdict(policy.decide_result(&facts, result), &record) {
        Verdict::Denied(_, message) => Some(message),
        _ => None,
    }
}

/// The verdict of an allow or a deny (recorded through `record`). A limit or an approve is
/// decided by the caller; handed one, this refuses it.
fn plain_verdict(decision: Decision<'_>, record: Record<'_>) -> Verdict {
    match decision {
        Decision::Allow { rule } => {
            if let Some(rule) = rule {
                record(rule, "allowed");
            }
            Verdict::Go(None)
        }
        Decision::Deny { rule, message } => {
            record(rule, "denied");
            Verdict::Denied(rule.to_owned(), message)
        }
        Decision::Limit { rule, .. } | Decision::Approve { rule, .. } => Verdict::Denied(
            rule.to_owned(),
            format!("refused: policy rule `{rule}` was not applied"),
        ),
    }
}

/// The verdict of a budget's answer (`admitted`) for `rule`, recorded as allowing or limiting
/// the call.
fn limited(record: Record<'_>, rule: &str, admitted: Result<BudgetPermit, BudgetError>) -> Verdict {
    match admitted {
        Ok(permit) => {
            record(rule, "allowed");
            Verdict::Go(Some(permit))
        }
        Err(e) => {
            record(rule, "limited");
            Verdict::Limited(e)
        }
    }
}

/// A call's draw on `budget` (`limits`) for `key`: the bytes it takes are the length of its
/// arguments' compact JSON, measured only for a budget that counts bytes.
fn draw_of<'a>(budget: &'a str, limits: &'a Budget, key: &'a str, args: &Value) -> Draw<'a> {
    let arg_bytes = limits
        .bytes
        .map_or(0, |_| crate::telemetry::json_len(args) as u64);
    Draw {
        budget,
        limits,
        key,
        arg_bytes,
    }
}

/// The audit record of `rule`'s `decision` on a read or a prompt (`subject`, served by `plugin`)
/// for `opts`' caller.
fn decision_record<'a>(
    subject: &Subject<'a>,
    plugin: &'a str,
    opts: &'a CallOptions,
    rule: &'a str,
    decision: &'static str,
) -> audit::Decision<'a> {
    let (caller, agent) = who(&opts.request);
    let (request, resource, prompt) = match *subject {
        Subject::Resource { uri, raw } => ("resources/read", Some((uri, raw)), None),
        Subject::Prompt { name } => ("prompts/get", None, Some(name)),
        // Not policed here: a tool call's decision is in the call's own record.
        Subject::Tool { .. } => ("tools/call", None, None),
    };
    audit::Decision {
        time: audit::Action::now(),
        caller,
        agent,
        request,
        resource: resource.map(|(uri, _)| uri),
        resource_raw: resource.and_then(|(uri, raw)| (raw != uri).then_some(raw)),
        prompt,
        plugin,
        policy_rule: rule,
        policy: decision,
    }
}

/// How a refusal names what needed approval.
fn what_needs_approval(subject: &Subject<'_>) -> &'static str {
    match subject {
        Subject::Tool { .. } => "call",
        Subject::Resource { .. } => "read",
        Subject::Prompt { .. } => "prompt",
    }
}

/// The policy's decision for a request about `subject` (served by `plugin`, with `args`) by
/// `request`'s caller.
fn decide<'p>(
    policy: &'p Policy,
    subject: Subject<'_>,
    plugin: &str,
    args: &Value,
    request: &RequestContext,
) -> Decision<'p> {
    policy.decide(&facts(subject, plugin, args, request))
}

/// What the call policy knows of a request for `subject` (served by `plugin`) with `args`.
fn facts<'a>(
    subject: Subject<'a>,
    plugin: &'a str,
    args: &'a Value,
    request: &'a RequestContext,
) -> CallFacts<'a> {
    let (user, agent) = who(request);
    CallFacts {
        user,
        agent,
        claims: request.identity.claims.as_deref(),
        subject,
        plugin,
        args,
    }
}

/// `tool` as the subject of a policy decision (`annotations`: [`annotations_of`] it).
pub(super) fn tool_subject<'a>(tool: &'a Tool, annotations: &'a Value) -> Subject<'a> {
    Subject::Tool {
        name: &tool.name,
        source_name: tool.source_name(),
        annotations,
    }
}

/// Who a request is, as the call policy sees it: the verified user, and the agent (the view that
/// applies, else the one the caller's credential names).
pub(super) fn who(request: &RequestContext) -> (Option<&str>, Option<&str>) {
    let caller = request.caller();
    let agent = request
        .agent()
        .map(|a| a.name.as_str())
        .or_else(|| caller.and_then(|c| c.agent.as_deref()));
    (caller.map(|c| c.user_id.as_str()), agent)
}
