//! The call path every transport uses: argument validation (before the call policy, so rules judge
//! arguments that exist), the caller check, fair permits (the caller's quota, then the plugin's
//! permit, then the global one, so a busy plugin never holds global slots while it waits), the
//! hand-off (a pool thread for in-process plugins; the caller's task awaiting the worker for
//! isolated ones), the timeout, cancellation when the caller goes away (a call whose client is
//! gone never starts), the result size cap, and the mapping of what the plugin returned. Tools, resource reads, prompts and completions all take this path
//! ([`Executor::call`], [`Executor::invoke`]). Nested calls (a tool calling a tool) take a shorter
//! path on the calling thread, inheriting the parent's caller, agent view, deadline and events.
//! Every tool call, nested ones included, reports to [`Telemetry`] (span and phases, metrics, the
//! audit record).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use mcp_plugin_sdk::UserInfo;
use mcp_plugin_sdk::wire::{CallEnvelope, CallerNeed, ENVELOPE_INDEX, EnvelopeOutcome};
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use tracing::Instrument as _;

use super::detached::Detached;
use super::police::Policed;
use super::pool::WorkerPool;
use super::quota::{QuotaError, QuotaPermit, Quotas};
use super::result::ToolResult;
use super::{CallState, CancelFlag, EventSink, EventWants, InputChannel, RequestContext};
use crate::access::auth::Claims;
use crate::config::Limits;
use crate::exec::observe::{Arguments, CallParty, ObservedCall};
use crate::plugins::backend::{CallFuture, NestedCallError, PluginCallError, Returned};
use crate::policy::budget::{BudgetError, BudgetPermit, Budgets};
use crate::policy::guardrails::Guardrails;
use crate::policy::{CallFacts, Decision, Policy};
use crate::registry::{Filter, PluginSlot, Registry, Tool};
use crate::telemetry::{Outcome, Telemetry};

/// Why a call was refused before any tool ran (protocol-level errors; tool failures are results).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// No served tool has this name (JSON-RPC -32602).
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// The tool takes `UserInfo`, or its overrides fill an argument from the caller, and the call
    /// has no verified caller.
    #[error("tool {0} requires an authenticated caller")]
    CallerRequired(String),
    /// The client sent an argument the tool's overrides hide or fix (JSON-RPC -32602).
    #[error("argument {argument} of tool {tool} is set by the host and may not be sent")]
    Withheld {
        /// The tool, as the client named it.
        tool: String,
        /// The argument.
        argument: String,
    },
    /// The caller is over its share (`limits.per_caller`).
    #[error(transparent)]
    Throttled(#[from] QuotaError),
    /// A call policy `limit` rule's budget is exhausted for this caller.
    #[error(transparent)]
    Limited(#[from] BudgetError),
}

/// Why a resource read, a prompt or a completion produced no outcome.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvokeError {
    /// It needs the verified caller and the request has none.
    #[error("{0} requires an authenticated caller")]
    CallerRequired(String),
    /// It did not finish within its time.
    #[error("{0} timed out after {1} s")]
    TimedOut(String, String),
    /// The plugin could not run it, or answered something unreadable or too large.
    #[error("{0}: {1}")]
    Failed(String, String),
    /// The caller is over its share (`limits.per_caller`).
    #[error(transparent)]
    Throttled(#[from] QuotaError),
    /// A call policy `deny` rule refused it.
    #[error("{message}")]
    Denied {
        /// The rule.
        rule: String,
        /// The operator's message.
        message: String,
    },
    /// A call policy `limit` rule's budget is exhausted for this caller.
    #[error(transparent)]
    Limited(#[from] BudgetError),
    /// A call policy `approve` rule asked and got no yes (the message says why).
    #[error("{message}")]
    NotApproved {
        /// The rule.
        rule: String,
        /// Why it did not run.
        message: String,
    },
    /// A call policy `approve` rule's question is open in this 2026 round: the request is
    /// answered input-required.
    #[error("waiting for approval")]
    AwaitingApproval,
}

/// What runs a plugin call: the plugin, the entry (tool index or [`ENVELOPE_INDEX`]), its time.
struct Target<'a> {
    slot: &'a Arc<PluginSlot>,
    index: u32,
    timeout: Duration,
    inline: bool,
    /// For log lines (a tool name, `resource <uri>`, `prompt <name>`).
    name: &'a str,
}

impl<'a> Target<'a> {
    /// A tool's own target.
    fn of(tool: &'a Tool) -> Self {
        Target {
            slot: &tool.slot,
            index: tool.index,
            timeout: tool.timeout,
            inline: tool.descriptor().inline,
            name: &tool.name,
        }
    }
}

/// How a plugin call ended without an answer it could use.
enum Interrupted {
    /// Its worker thread ended without answering.
    Lost,
    /// Past its timeout.
    TimedOut,
    /// The client went away before it started.
    NotStarted,
    /// The caller is over its share.
    Throttled(QuotaError),
    /// The answer is over `limits.max_result_bytes` / `max_result_values`.
    Refused(ResultRefused),
}

/// A tool call's answer, and how the call ended.
type Concluded = (Result<ToolResult, CallError>, Outcome);

/// How [`Executor::begin`] left a tool call.
enum Begun<'a> {
    /// Ended.
    Done(Concluded),
    /// Waiting (see [`Executor::wait`]): the rest of the call.
    Waiting(Pin<Box<dyn Future<Output = Concluded> + Send + 'a>>),
}

/// What the call policy would decide for a call ([`Executor::explain`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Explained {
    /// The rule that matched (none: no rule matched, the call is allowed).
    pub rule: Option<String>,
    /// `allow`, `deny`, `limit` or `approve`.
    pub outcome: &'static str,
    /// The deny message, the budget, or the fields an approval shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// How [`Executor::start`] left a plugin call.
enum Started {
    /// It ran here (inline): what the plugin returned.
    Ran(Result<Returned, PluginCallError>),
    /// It waits for a thread, permits or its worker process.
    Queued(Queued),
}

/// What a call that waits takes along from [`Executor::start`] to [`Executor::wait`].
struct Queued {
    args: String,
    call: Arc<CallState>,
    /// The call, when its backend runs it elsewhere (a worker process).
    elsewhere: Option<CallFuture>,
    /// The caller's quota slot, held until the plugin function returned.
    quota: Option<QuotaPermit>,
    max_result: ResultLimits,
}

/// Per-call inputs besides the tool name and arguments: the request the call serves, shared as
/// the transport built it, and what is particular to this call of it.
#[derive(Clone, Default)]
pub struct CallOptions {
    /// The request: its caller and agent view (which apply to the call's nested calls too), whom
    /// `limits.per_caller` counts it against, and its cancellation (client cancel, closed stream).
    pub request: Arc<RequestContext>,
    /// Where progress and log events go.
    pub events: Option<EventSink>,
    /// Which events the client asked for (an upstream server is asked for just those).
    pub wants: EventWants,
    /// How the call's questions to the client are answered.
    pub input: Option<Arc<InputChannel>>,
}

impl CallOptions {
    /// The options of a call made for `request`, without events or a way to ask the client.
    pub fn for_request(request: Arc<RequestContext>) -> Self {
        CallOptions {
            request,
            events: None,
            wants: EventWants::NONE,
            input: None,
        }
    }
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}

/// Runs tool calls: a pool of worker threads, the global concurrency limit and the callers'
/// quotas.
#[derive(Debug)]
pub struct Executor {
    pool: WorkerPool,
    global: Arc<Semaphore>,
    quotas: Arc<Quotas>,
    /// The reloadable limits (result size, per-caller quotas).
    limits: ArcSwap<Limits>,
    /// The reloadable call policy.
    pub(super) policy: ArcSwap<Policy>,
    /// The state of the policy's budgets (kept across reloads).
    pub(super) budgets: Budgets,
    /// The calls waiting for an admin's approval in the console.
    pub(super) approvals: Arc<super::approval::Approvals>,
    /// The reloadable guardrails on results.
    pub(super) guardrails: ArcSwap<Guardrails>,
    /// The loaded plugins' result filters, by guardrails key (the registry's, swapped with it).
    pub(super) filters: ArcSwap<HashMap<String, Filter>>,
    /// Whether anything looks at results (a guardrail or an `on: [results]` rule), set with the
    /// policy and the guardrails: a call of a configuration without either reads one flag.
    pub(super) results_watched: std::sync::atomic::AtomicBool,
    pub(super) telemetry: Arc<Telemetry>,
}

/// Sets the call's cancellation flag if the call future is dropped before it finished.
struct CancelOnDrop(Option<CancelFlag>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            flag.cancel();
        }
    }
}

impl Executor {
    /// An executor running at most `limits.max_concurrent_calls` calls at once (fixed at start;
    /// the other limits follow [`Executor::set_limits`]), reporting each call to `telemetry`.
    pub fn new(limits: &Limits, telemetry: Arc<Telemetry>) -> Self {
        let max_concurrent = limits.max_concurrent_calls;
        Executor {
            pool: WorkerPool::new(max_concurrent),
            global: Arc::new(Semaphore::new(max_concurrent.max(1))),
            quotas: Arc::default(),
            limits: ArcSwap::from_pointee(limits.clone()),
            policy: ArcSwap::from_pointee(Policy::default()),
            budgets: Budgets::default(),
            approvals: Arc::default(),
            guardrails: ArcSwap::from_pointee(Guardrails::default()),
            filters: ArcSwap::default(),
            results_watched: std::sync::atomic::AtomicBool::new(false),
            telemetry,
        }
    }

    /// Apply a (compiled) call policy to calls from now on.
    pub fn set_policy(&self, policy: Arc<Policy>) {
        self.policy.store(policy);
        self.watch_results();
    }

    /// Apply (compiled) guardrails to the results of calls from now on.
    pub fn set_guardrails(&self, guardrails: Arc<Guardrails>) {
        self.guardrails.store(guardrails);
        self.watch_results();
    }

    /// Note whether the policy or the guardrails now in force look at results (the host sets
    /// both under its reload lock, so the last store sees both).
    fn watch_results(&self) {
        let watched = !self.guardrails.load().is_empty() || self.policy.load().polices_results();
        self.results_watched
            .store(watched, std::sync::atomic::Ordering::Release);
    }

    /// The plugins' result filters the guardrails may name, from now on (the registry's).
    pub fn set_filters(&self, filters: HashMap<String, Filter>) {
        self.filters.store(Arc::new(filters));
    }

    /// Run the result filter `key` (`plugin:<plugin>/<filter>`) over `input` (a `FilterInput`
    /// as JSON) like a call of a tool of its plugin: on the worker pool or in its worker, within
    /// the plugin's permits and its timeout. Its matches, or why there are none to trust: the
    /// plugin is not loaded, the filter failed (a panic, its worker died), timed out, or
    /// answered something that is not a verdict.
    pub(super) async fn run_filter(&self, key: &str, input: String) -> Result<Value, String> {
        let Some(filter) = self.filters.load().get(key).cloned() else {
            return Err("its plugin is not loaded or has no such filter".into());
        };
        let target = Target {
            slot: &filter.slot,
            index: filter.index,
            timeout: filter.timeout,
            inline: false,
            name: key,
        };
        let opts = CallOptions::for_request(Arc::default());
        let executed = match self.start(&target, input, no_caller(), &opts, None) {
            Ok(Started::Queued(queued)) => {
                Box::pin(self.wait(&target, queued, &opts.request.cancel, None)).await
            }
            Ok(Started::Ran(returned)) => Ok(returned),
            Err(interrupted) => Err(interrupted),
        };
        match executed {
            Ok(returned) => match tool_result(key, returned) {
                (result, Outcome::Ok) => Ok(result.into_value()),
                _ => Err("it failed".into()),
            },
            Err(Interrupted::TimedOut) => {
                Err(format!("it timed out after {} s", fmt_secs(filter.timeout)))
            }
            Err(_) => Err("it could not run".into()),
        }
    }

    /// Count the policy's budgets with `counter`, shared by the replicas, from now on (call on
    /// the runtime: a nested call's draw waits on it).
    pub fn share_budgets(&self, counter: Arc<dyn crate::policy::budget::SharedBudgets>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => self.budgets.share(counter, runtime),
            Err(_) => tracing::error!(
                "the policy's budgets cannot be shared outside a runtime: each process counts \
                 its own"
            ),
        }
    }

    /// The calls waiting for an admin's approval in the console.
    pub fn approvals(&self) -> &super::approval::Approvals {
        &self.approvals
    }

    /// The call policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.load_full()
    }

    /// Apply reloaded limits (result size, per-caller quotas) to calls from now on.
    pub fn set_limits(&self, limits: &Limits) {
        self.limits.store(Arc::new(limits.clone()));
    }

    /// Call `tool` with `args` (an object, or `None` for no arguments).
    ///
    /// Protocol-level refusals are `Err`; everything the tool or its arguments got wrong is an
    /// `isError` result, as MCP asks (SEP-1303).
    pub async fn call(
        &self,
        tool: Arc<Tool>,
        args: Option<&Value>,
        opts: CallOptions,
    ) -> Result<ToolResult, CallError> {
        let args = args.unwrap_or(&NO_ARGUMENTS);
        let party = CallParty {
            caller: opts.request.caller(),
            caller_json: "",
            agent: opts.request.agent().map(|a| a.name.as_str()),
            depth: 0,
        };
        let observed = self.telemetry.observe(&tool, party, Arguments::Value(args));
        // An argument the tool's overrides hide or fix is the host's, never the client's.
        if let Some(refused) = withheld(&tool, args) {
            observed.finish(Outcome::InvalidArguments, None);
            return Err(refused);
        }
        // The arguments are checked against the tool's input schema (as served) first (once:
        // nothing after checks them again), so the call policy judges arguments that exist, and
        // a call that fails the check draws on no budget and asks no one.
        if let Err(message) = observed
            .phase("validate")
            .in_scope(|| validate(&tool, args))
        {
            let result = Ok(host_error(&message));
            observed.finish(Outcome::InvalidArguments, result.as_ref().ok());
            return result;
        }
        // Then completed with what the host fixes and fills: the policy and the source see the
        // arguments the source gets.
        let completed = match tool.injection() {
            None => None,
            Some(injection) => match complete(&tool, injection, args, &opts.request) {
                Ok(value) => Some(value),
                Err(refused) => {
                    observed.finish(Outcome::CallerRequired, None);
                    return Err(refused);
                }
            },
        };
        let args = completed.as_ref().unwrap_or(args);
        // The call policy decides before anything else runs; a `limit` holds its budget's slot
        // until the call ended.
        let _budget = match self.police(&tool, args, &opts, &observed).await {
            Policed::Go(permit) => permit,
            Policed::Stop(result, outcome) => {
                observed.finish(outcome, result.as_ref().ok());
                return result;
            }
        };
        let cancel = opts.request.cancel.clone();
        // Two pointers past the call, only if something looks at results (the future stays small).
        let watched = self
            .watches_results()
            .then(|| (Arc::clone(&tool), Arc::clone(&opts.request)));
        let (result, outcome) = {
            let begun = observed
                .span()
                .in_scope(|| self.begin(tool, args, opts, &observed));
            match begun {
                Begun::Done(done) => done,
                Begun::Waiting(waiting) => waiting.instrument(observed.span().clone()).await,
            }
        };
        let ended = (result, cancelled_if(outcome, &cancel));
        // What the tool returned passes the guardrails that apply to the call, if any.
        let (result, outcome) = match watched {
            None => ended,
            Some(watched) => {
                Box::pin(super::guard::concluded(
                    self, watched, args, ended, &observed,
                ))
                .await
            }
        };
        observed.finish(outcome, result.as_ref().ok());
        result
    }

    /// What the call policy would decide for a call of `tool` with `args` by `user` through
    /// `agent`, without calling (and without drawing on budgets): `mcp-host policy test`.
    pub fn explain(
        &self,
        tool: &Tool,
        args: &Value,
        user: Option<&str>,
        agent: Option<&str>,
        claims: Option<&Claims>,
    ) -> Explained {
        let policy = self.policy.load_full();
        let annotations = annotations_of(tool);
        let facts = CallFacts {
            user,
            agent,
            claims,
            subject: super::police::tool_subject(tool, &annotations),
            plugin: tool.slot.backend.name(),
            args,
        };
        let decision = policy.decide(&facts);
        let detail = match &decision {
            Decision::Allow { .. } => None,
            Decision::Deny { message, .. } => Some(json!({ "message": message })),
            Decision::Limit {
                budget,
                limits,
                key,
                ..
            } => Some(json!({ "budget": budget, "limits": limits, "key": key })),
            Decision::Approve { shown, .. } => Some(json!({ "show": shown })),
        };
        Explained {
            rule: decision.rule().map(str::to_owned),
            outcome: decision.outcome(),
            detail,
        }
    }

    /// [`Executor::call`] inside its span, as far as it goes without waiting: the answer and how
    /// the call ended (a refusal, or the inline path), or the boxed rest of a call that waits.
    /// Only a waiting call has a future of its own: futures nest, so every request's future
    /// would otherwise carry the size of that path's (permits, timer, pool or worker hand-off)
    /// and be copied whole at each move (README, Performance).
    fn begin<'a>(
        &'a self,
        tool: Arc<Tool>,
        args: &Value,
        opts: CallOptions,
        observed: &'a ObservedCall<'_>,
    ) -> Begun<'a> {
        let caller_json = match caller_json(&tool, opts.request.caller()) {
            Ok(json) => json,
            Err(refused) => return Begun::Done((Err(refused), Outcome::CallerRequired)),
        };
        let args_text = serde_json::to_string(args).unwrap_or_default();
        let started = self.start(
            &Target::of(&tool),
            args_text,
            caller_json,
            &opts,
            Some(observed),
        );
        match started {
            Ok(Started::Ran(returned)) => Begun::Done(conclude(&tool, Ok(returned))),
            Err(interrupted) => Begun::Done(conclude(&tool, Err(interrupted))),
            Ok(Started::Queued(queued)) => Begun::Waiting(Box::pin(async move {
                let waited = self
                    .wait(
                        &Target::of(&tool),
                        queued,
                        &opts.request.cancel,
                        Some(observed),
                    )
                    .await;
                conclude(&tool, waited)
            })),
        }
    }

    /// Read a resource, render a prompt or complete an argument: `envelope` to the plugin in
    /// `slot`, within `timeout`, as the request's caller when `caller` says it takes one (completions get
    /// the caller whenever there is one). `what` names it in log lines and errors.
    pub async fn invoke(
        &self,
        slot: &Arc<PluginSlot>,
        envelope: &CallEnvelope,
        caller: CallerNeed,
        timeout: Duration,
        what: &str,
        opts: CallOptions,
    ) -> Result<EnvelopeOutcome, InvokeError> {
        // The caller as this plugin sees it: its own session id (`access::for_plugin`).
        let seen = |c| crate::access::for_plugin(c, slot.backend.name());
        let caller_json: Arc<str> = match (opts.request.caller(), caller) {
            (None, CallerNeed::Required) => return Err(InvokeError::CallerRequired(what.into())),
            (Some(c), CallerNeed::Optional | CallerNeed::Required) => {
                serde_json::to_string(&seen(c)).unwrap_or_default().into()
            }
            (Some(c), CallerNeed::None) if matches!(envelope, CallEnvelope::Complete { .. }) => {
                serde_json::to_string(&seen(c)).unwrap_or_default().into()
            }
            _ => no_caller(),
        };
        let target = Target {
            slot,
            index: ENVELOPE_INDEX,
            timeout,
            inline: false,
            name: what,
        };
        let args = serde_json::to_string(envelope).unwrap_or_default();
        // Never inline (`target.inline` is false): always waits, on a boxed future (see `begin`).
        let executed = match self.start(&target, args, caller_json, &opts, None) {
            Ok(Started::Queued(queued)) => {
                Box::pin(self.wait(&target, queued, &opts.request.cancel, None)).await
            }
            Ok(Started::Ran(returned)) => Ok(returned),
            Err(interrupted) => Err(interrupted),
        };
        match executed {
            Ok(Ok(returned)) => outcome(returned).map_err(|e| {
                tracing::error!("{what}: the plugin answered unreadable JSON: {e}");
                InvokeError::Failed(what.into(), "the plugin returned an invalid result".into())
            }),
            Ok(Err(e)) => {
                tracing::error!("{what}: the plugin could not run it: {e}");
                Err(InvokeError::Failed(what.into(), e.to_string()))
            }
            Err(Interrupted::Lost) => Err(InvokeError::Failed(
                what.into(),
                "the call was lost (its worker thread ended)".into(),
            )),
            Err(Interrupted::TimedOut) => {
                Err(InvokeError::TimedOut(what.into(), fmt_secs(timeout)))
            }
            Err(Interrupted::NotStarted) => {
                Err(InvokeError::Failed(what.into(), NOT_STARTED.into()))
            }
            Err(Interrupted::Refused(why)) => {
                Err(InvokeError::Failed(what.into(), why.to_string()))
            }
            Err(Interrupted::Throttled(q)) => Err(InvokeError::Throttled(q)),
        }
    }

    /// Start one plugin call: within the caller's quota; run it here when the target allows it
    /// inline, else hand back what [`Executor::wait`] needs. A call whose client went away before
    /// it started never starts; an answer over the result limits is refused before anyone
    /// parses it.
    fn start(
        &self,
        target: &Target<'_>,
        args: String,
        caller_json: Arc<str>,
        opts: &CallOptions,
        observed: Option<&ObservedCall<'_>>,
    ) -> Result<Started, Interrupted> {
        // One clock read serves the quota, the deadline and the call's duration.
        let now = observed.map_or_else(Instant::now, ObservedCall::started);
        let limits = self.limits.load_full();
        let quota = match &opts.request.quota_key {
            Some(key) => Some(
                self.quotas
                    .admit(key, &limits.per_caller, now)
                    .map_err(Interrupted::Throttled)?,
            ),
            None => None,
        };
        let max_result = ResultLimits::of(&limits);
        let call = Arc::new(CallState {
            request: Arc::clone(&opts.request),
            deadline: Some(now + target.timeout),
            events: opts.events.clone(),
            wants: opts.wants,
            caller_json,
            depth: 0,
            tool: Arc::from(target.name),
            input: opts
                .input
                .clone()
                .map(|i| i as Arc<dyn crate::plugins::call::CallInput>),
            inline: target.inline,
        });
        let (slot, index) = (target.slot, target.index);
        // A backend whose calls run elsewhere (a worker process) hands back a future.
        let elsewhere = slot.backend.call_async(index, &args, &call);
        if elsewhere.is_none() && target.inline && slot.backend.ready() {
            if call.cancel().is_cancelled() {
                return Err(Interrupted::NotStarted);
            }
            let plugin = observed.map_or_else(tracing::Span::none, |o| o.phase("plugin"));
            let returned = plugin.in_scope(|| blocking(slot, index, &args, &call));
            return max_result.check(target.name, returned).map(Started::Ran);
        }
        Ok(Started::Queued(Queued {
            args,
            call,
            elsewhere,
            quota,
            max_result,
        }))
    }

    /// A call that waits: on the worker pool (or its worker process) within the plugin's and the
    /// global permits, with the target's timeout (which sets the call's cancellation flag) and
    /// cancellation if this future is dropped. (Long on purpose: the steps of one call, in the
    /// order they happen, read best in one place.)
    async fn wait(
        &self,
        target: &Target<'_>,
        queued: Queued,
        cancel: &CancelFlag,
        observed: Option<&ObservedCall<'_>>,
    ) -> Result<Result<Returned, PluginCallError>, Interrupted> {
        let Queued {
            args,
            call,
            elsewhere,
            quota,
            max_result,
        } = queued;
        let phase = |name| observed.map_or_else(tracing::Span::none, |o| o.phase(name));
        let (slot, index) = (target.slot, target.index);
        let mut guard = CancelOnDrop(Some(cancel.clone()));
        let work = async {
            let waiting = Instant::now();
            let slots = self
                .slots(slot, target.name, call.cancel())
                .instrument(phase("queue"))
                .await;
            let Some((local, global)) = slots else {
                return Ok(None);
            };
            if let Some(o) = observed {
                o.dequeued(waiting.elapsed());
            }
            let plugin = phase("plugin");
            // Permits (and the caller's slot) are released only when the plugin function has
            // returned, even after the timeout answered the client.
            let permits = (global, local, quota);
            if let Some(future) = elsewhere {
                // Driven right here (no hand-off on the way to the worker and back); should the
                // timeout answer first, or this request go away, it finishes on a task of its
                // own, holding the permits until the worker answered or was killed.
                if call.cancel().is_cancelled() {
                    return Ok(None);
                }
                let running = Detached::new(
                    async move {
                        let returned = future.await;
                        drop(permits);
                        returned
                    }
                    .instrument(plugin),
                );
                return Ok(running.await);
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (slot, call) = (Arc::clone(slot), Arc::clone(&call));
            self.pool.submit(move || {
                // A call whose client went away while it waited for a thread never starts.
                let result = (!call.cancel().is_cancelled())
                    .then(|| plugin.in_scope(|| blocking(&slot, index, &args, &call)));
                // Free the slots before answering: a client that got its answer may call again.
                drop(permits);
                let _ = tx.send(result);
            });
            rx.await
        };
        let outcome = tokio::time::timeout(target.timeout, work).await;
        guard.0 = None;
        match outcome {
            Ok(Ok(Some(result))) => max_result.check(target.name, result),
            Ok(Ok(None)) => Err(Interrupted::NotStarted),
            Ok(Err(_)) => Err(Interrupted::Lost),
            Err(_) => {
                call.cancel().cancel();
                tracing::warn!(
                    "{}: call timed out after {} s; cancellation requested",
                    target.name,
                    fmt_secs(target.timeout)
                );
                Err(Interrupted::TimedOut)
            }
        }
    }

    /// The plugin's slot, then a global one: a call queued behind a busy plugin holds no global
    /// slot, so other plugins keep running. `None` when `cancel` is set while waiting (the client
    /// went away): the call never starts.
    async fn slots(
        &self,
        slot: &PluginSlot,
        name: &str,
        cancel: &CancelFlag,
    ) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let left_queue = || {
            tracing::info!(tool = name, "call cancelled while queued; it never starts");
            None
        };
        let limiter = &slot.limiter;
        let local = match Arc::clone(limiter).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                tracing::debug!(
                    tool = name,
                    "call queued: its plugin is at its concurrency limit"
                );
                tokio::select! {
                    p = Arc::clone(limiter).acquire_owned() => p.ok()?,
                    () = cancel.cancelled() => return left_queue(),
                }
            }
        };
        let global = tokio::select! {
            p = Arc::clone(&self.global).acquire_owned() => p.ok()?,
            () = cancel.cancelled() => return left_queue(),
        };
        Some((local, global))
    }

    /// A tool calling tool `name` with JSON `args`, on the calling thread, on behalf of `parent`
    /// (which it inherits caller, cancellation, deadline and events from). `registry` is the tool
    /// set to look it up in; `max_depth` bounds the nesting.
    pub fn call_nested(
        &self,
        registry: &Registry,
        max_depth: u32,
        parent: Option<&Arc<CallState>>,
        name: &str,
        args: &str,
    ) -> Result<String, NestedCallError> {
        let depth = parent.map_or(0, |p| p.depth + 1);
        if depth > max_depth {
            return Err(NestedCallError::TooDeep {
                max_depth,
                tool: name.into(),
            });
        }
        // The outer call's request applies: its agent view (a tool it hides does not exist for
        // nested calls), its quota, its cancellation.
        let request = parent.map_or_else(Arc::default, |p| Arc::clone(&p.request));
        let agent = request.agent();
        let tool = nested_tool(registry, agent, name)?;
        let args_value = nested_args(args)?;
        if let Some(refused) = withheld(&tool, &args_value) {
            return Err(NestedCallError::BadArguments(refused.to_string()));
        }
        // A nested call counts against the outer caller's quota (in flight and rate), held
        // until it returns.
        let _quota = self.nested_quota(&request, name)?;
        let caller_json: Arc<str> =
            parent.map_or_else(|| Arc::from(""), |p| Arc::clone(&p.caller_json));
        let party = CallParty {
            caller: None,
            caller_json: &caller_json,
            agent: agent.map(|a| a.name.as_str()),
            depth,
        };
        let observed = self.telemetry.observe(&tool, party, Arguments::Text(args));
        let span = observed.span().clone();
        let _in_call = span.enter();
        let admitted =
            self.admit_nested(&tool, name, &args_value, &request, &caller_json, &observed);
        let (_budget, completed) = match admitted {
            Ok(admitted) => admitted,
            Err(NestedRefusal::Answered(outcome, result)) => {
                observed.finish(outcome, Some(&result));
                return Ok(result.into_text());
            }
            Err(NestedRefusal::Failed(outcome, error)) => {
                observed.finish(outcome, None);
                return Err(error);
            }
        };
        let call = Arc::new(CallState {
            request: Arc::clone(&request),
            deadline: parent
                .and_then(|p| p.deadline)
                .or_else(|| Some(observed.started() + tool.timeout)),
            events: parent.and_then(|p| p.events.clone()),
            wants: parent.map_or(EventWants::NONE, |p| p.wants),
            caller_json,
            depth,
            tool: Arc::from(name),
            input: parent.and_then(|p| p.input.clone()),
            inline: parent.is_some_and(|p| p.inline),
        });
        let completed = completed.map(|v| v.to_string());
        let args = completed.as_deref().unwrap_or(args);
        Ok(self.run_nested(&tool, name, args, &call, observed))
    }

    /// The outer caller's quota admitting nested call `name` (none without a quota key).
    fn nested_quota(
        &self,
        request: &RequestContext,
        name: &str,
    ) -> Result<Option<QuotaPermit>, NestedCallError> {
        let Some(key) = &request.quota_key else {
            return Ok(None);
        };
        self.quotas
            .admit(key, &self.limits.load().per_caller, Instant::now())
            .map(Some)
            .map_err(|e| NestedCallError::Throttled {
                tool: name.into(),
                reason: e.to_string(),
            })
    }

    /// The checks a nested call of `tool` (asked for as `name`) passes before its plugin runs:
    /// valid arguments, a caller when the tool needs one, and the call policy as the outer
    /// caller (no human can be asked from here, so an `approve` rule refuses), on the arguments
    /// completed as the tool's overrides say. The permit of the budget it draws on and the
    /// completed arguments (none: as given); else why not.
    fn admit_nested(
        &self,
        tool: &Tool,
        name: &str,
        args: &Value,
        request: &RequestContext,
        caller_json: &str,
        observed: &ObservedCall<'_>,
    ) -> Result<(Option<BudgetPermit>, Option<Value>), NestedRefusal> {
        if let Err(message) = observed.phase("validate").in_scope(|| validate(tool, args)) {
            return Err(NestedRefusal::Answered(
                Outcome::InvalidArguments,
                host_error(&message),
            ));
        }
        let refused = || {
            NestedRefusal::Failed(
                Outcome::CallerRequired,
                NestedCallError::CallerRequired(name.into()),
            )
        };
        if tool.descriptor().caller == CallerNeed::Required && caller_json.is_empty() {
            return Err(refused());
        }
        let completed = match tool.injection() {
            Some(injection) => {
                Some(complete(tool, injection, args, request).map_err(|_| refused())?)
            }
            None => None,
        };
        let args = completed.as_ref().unwrap_or(args);
        self.police_nested(tool, args, request, observed)
            .map(|permit| (permit, completed))
            .map_err(|message| NestedRefusal::Answered(Outcome::Denied, host_error(&message)))
    }

    /// The plugin's part of a nested call: run it on this thread, check what it returned against
    /// the result limits, and record the outcome; the result as JSON text.
    fn run_nested(
        &self,
        tool: &Tool,
        name: &str,
        args: &str,
        call: &Arc<CallState>,
        observed: ObservedCall,
    ) -> String {
        let max_result = ResultLimits::of(&self.limits.load());
        let returned = observed
            .phase("plugin")
            .in_scope(|| blocking(&tool.slot, tool.index, args, call));
        let (result, outcome) = match max_result.check(name, returned) {
            Ok(returned) => tool_result(name, returned),
            Err(Interrupted::Refused(why)) => {
                (host_error(&why.to_string()), Outcome::PluginFailure)
            }
            Err(_) => (
                host_error("the tool call was interrupted"),
                Outcome::PluginFailure,
            ),
        };
        observed.finish(outcome, Some(&result));
        result.into_text()
    }
}

/// The tool a nested call names, if the outer call's agent may see it.
fn nested_tool(
    registry: &Registry,
    agent: Option<&crate::access::Agent>,
    name: &str,
) -> Result<Arc<Tool>, NestedCallError> {
    registry
        .view(agent.map(|a| a.name.as_str()))
        .get(name)
        .filter(|_| agent.is_none_or(|a| a.permits(name)))
        .cloned()
        .ok_or_else(|| NestedCallError::UnknownTool(name.into()))
}

/// The arguments of a call that sent none.
static NO_ARGUMENTS: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!({}));

/// `outcome`, or `Cancelled` when a call that ran to its end was cancelled meanwhile.
fn cancelled_if(outcome: Outcome, cancel: &CancelFlag) -> Outcome {
    match outcome {
        Outcome::Ok | Outcome::ToolError if cancel.is_cancelled() => Outcome::Cancelled,
        other => other,
    }
}

/// The refusal of a call that sends an argument `tool`'s overrides hide or fix, if it does.
fn withheld(tool: &Tool, args: &Value) -> Option<CallError> {
    let argument = tool.injection()?.withheld_in(args)?;
    Some(CallError::Withheld {
        tool: tool.name.clone(),
        argument: argument.to_owned(),
    })
}

/// `args` (checked against the served schema) with what `tool`'s overrides fix and fill, from
/// `request`'s verified caller and agent; a value filled from a caller the call does not have
/// refuses it.
fn complete(
    tool: &Tool,
    injection: &crate::registry::shape::Injection,
    args: &Value,
    request: &RequestContext,
) -> Result<Value, CallError> {
    let agent = request.agent().map(|a| a.name.as_str());
    injection
        .complete(args, request.caller(), agent)
        .map_err(|refusal| match refusal {
            crate::registry::shape::Refusal::Withheld(argument) => CallError::Withheld {
                tool: tool.name.clone(),
                argument,
            },
            crate::registry::shape::Refusal::NoCaller(_) => {
                CallError::CallerRequired(tool.name.clone())
            }
        })
}

/// A nested call's arguments as JSON (none: an empty object).
fn nested_args(args: &str) -> Result<Value, NestedCallError> {
    if args.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(args).map_err(|e| NestedCallError::BadArguments(e.to_string()))
}

/// The caller as JSON for a tool that takes one (empty otherwise); a tool that needs a verified
/// caller refuses a call without one.
fn caller_json(tool: &Tool, caller: Option<&UserInfo>) -> Result<Arc<str>, CallError> {
    match (caller, tool.descriptor().caller) {
        (None, CallerNeed::Required) => Err(CallError::CallerRequired(tool.name.clone())),
        (Some(caller), CallerNeed::Optional | CallerNeed::Required) => {
            let caller = crate::access::for_plugin(caller, tool.slot.backend.name());
            Ok(serde_json::to_string(&caller).unwrap_or_default().into())
        }
        _ => Ok(no_caller()),
    }
}

/// A tool's annotations as rules see them: every hint present, absent ones at MCP's defaults
/// (`readOnlyHint` false, `destructiveHint` true unless read-only, `idempotentHint` false,
/// `openWorldHint` true), so `tool.annotations.destructiveHint` never fails to evaluate.
pub(super) fn annotations_of(tool: &Tool) -> Value {
    let a = &tool.descriptor().annotations;
    let read_only = a.read_only_hint.unwrap_or(false);
    json!({
        "title": a.title.clone().unwrap_or_default(),
        "readOnlyHint": read_only,
        "destructiveHint": a.destructive_hint.unwrap_or(!read_only),
        "idempotentHint": a.idempotent_hint.unwrap_or(false),
        "openWorldHint": a.open_world_hint.unwrap_or(true),
    })
}

/// The caller JSON of a call made without one: shared, not allocated per call.
fn no_caller() -> Arc<str> {
    static EMPTY: std::sync::LazyLock<Arc<str>> = std::sync::LazyLock::new(|| Arc::from(""));
    Arc::clone(&EMPTY)
}

/// A tool call's answer and how it ended, from what its plugin call came to.
fn conclude(
    tool: &Tool,
    executed: Result<Result<Returned, PluginCallError>, Interrupted>,
) -> Concluded {
    match executed {
        Ok(returned) => {
            let (result, outcome) = tool_result(&tool.name, returned);
            (Ok(result), outcome)
        }
        Err(Interrupted::Lost) => (
            Ok(host_error(
                "the tool call was lost (its worker thread ended)",
            )),
            Outcome::PluginFailure,
        ),
        Err(Interrupted::TimedOut) => (
            Ok(host_error(&format!(
                "timed out after {} s",
                fmt_secs(tool.timeout)
            ))),
            Outcome::Timeout,
        ),
        Err(Interrupted::NotStarted) => (Ok(host_error(NOT_STARTED)), Outcome::Cancelled),
        Err(Interrupted::Refused(why)) => {
            (Ok(host_error(&why.to_string())), Outcome::PluginFailure)
        }
        Err(Interrupted::Throttled(q)) => (Err(CallError::Throttled(q)), Outcome::Throttled),
    }
}

/// The answer of a call that was cancelled before its plugin function started.
const NOT_STARTED: &str = "cancelled before it started";

/// Why a plugin's answer was refused before anyone parsed it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ResultRefused {
    /// Over `limits.max_result_bytes`.
    #[error(
        "the tool's result is {bytes} bytes, over the limit of {limit} bytes \
         (limits.max_result_bytes)"
    )]
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Over `limits.max_result_values` (counted without parsing: an upper bound).
    #[error(
        "the tool's result has up to {values} JSON values, over the limit of {limit} \
         (limits.max_result_values)"
    )]
    TooManyValues {
        /// Its values, at most.
        values: usize,
        /// The limit.
        limit: usize,
    },
}

/// How large a result the host takes from a plugin (`limits.max_result_bytes` and
/// `limits.max_result_values`).
#[derive(Debug, Clone, Copy)]
struct ResultLimits {
    bytes: usize,
    values: usize,
}

impl ResultLimits {
    fn of(limits: &Limits) -> Self {
        ResultLimits {
            bytes: limits.max_result_bytes,
            values: limits.max_result_values,
        }
    }

    /// What the plugin returned for `name`, unless it is over the limits (logged).
    fn check(
        &self,
        name: &str,
        returned: Result<Returned, PluginCallError>,
    ) -> Result<Result<Returned, PluginCallError>, Interrupted> {
        let refused = match &returned {
            Ok(Returned::Text(json)) => self.refuse(json),
            Ok(Returned::Json(value)) => self.refuse_tree(value),
            Err(_) => None,
        };
        match refused {
            Some(why) => {
                tracing::warn!(tool = name, "result refused: {why}");
                Err(Interrupted::Refused(why))
            }
            None => Ok(returned),
        }
    }

    /// Why the result `json` is refused before it is parsed, if it is.
    fn refuse(&self, json: &str) -> Option<ResultRefused> {
        self.refuse_sized(json.len(), || json_values_bound(json))
    }

    /// Why the parsed result `value` is refused, if it is: its length as compact JSON text, and
    /// its values counted exactly.
    fn refuse_tree(&self, value: &Value) -> Option<ResultRefused> {
        self.refuse_sized(crate::telemetry::json_len(value), || json_values(value))
    }

    /// Why a result of `bytes` bytes of JSON text is refused, if it is, `values` counting (or
    /// bounding) its values only when the limit could be passed.
    fn refuse_sized(&self, bytes: usize, values: impl FnOnce() -> usize) -> Option<ResultRefused> {
        if bytes > self.bytes {
            return Some(ResultRefused::TooLarge {
                bytes,
                limit: self.bytes,
            });
        }
        // Every value takes at least one byte of the text: a short one needs no count.
        if bytes <= self.values {
            return None;
        }
        let values = values();
        (values > self.values).then_some(ResultRefused::TooManyValues {
            values,
            limit: self.values,
        })
    }
}

/// The values in a JSON tree (itself, and every element and member value in it).
fn json_values(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(json_values).sum(),
        Value::Object(members) => members.values().map(json_values).sum(),
        _ => 0,
    }
}

/// An envelope's outcome from what its backend returned.
fn outcome(returned: Returned) -> serde_json::Result<EnvelopeOutcome> {
    match returned {
        Returned::Text(json) => serde_json::from_str(&json),
        Returned::Json(value) => serde_json::from_value(value),
    }
}

/// An upper bound of the values in a JSON text, without parsing it: every value but the first
/// follows a `,`, `:` or `[` outside strings.
fn json_values_bound(text: &str) -> usize {
    let (mut count, mut in_string, mut escaped) = (1usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b':' | b'[' => count += 1,
                _ => {}
            }
        }
    }
    count
}

/// Run tool `index` of `slot`'s plugin on this thread ([`PluginBackend::call_blocking`]).
///
/// [`PluginBackend::call_blocking`]: crate::plugins::backend::PluginBackend::call_blocking
fn blocking(
    slot: &PluginSlot,
    index: u32,
    args: &str,
    call: &Arc<CallState>,
) -> Result<Returned, PluginCallError> {
    slot.backend
        .call_blocking(index, args, call)
        .map(Returned::Text)
}

/// A `CallToolResult` from what the plugin returned for tool `name` (checked, kept as its text
/// or tree), and how the call ended.
fn tool_result(name: &str, returned: Result<Returned, PluginCallError>) -> (ToolResult, Outcome) {
    let checked = returned.map(|returned| match returned {
        Returned::Text(json) => ToolResult::from_plugin(json),
        Returned::Json(value) => ToolResult::from_json(value),
    });
    match checked {
        Ok(Some(result)) if result.is_error() => (result, Outcome::ToolError),
        Ok(Some(result)) => (result, Outcome::Ok),
        Ok(None) => {
            tracing::error!(tool = name, "plugin returned an invalid result");
            let result = host_error("the plugin returned an invalid result");
            (result, Outcome::PluginFailure)
        }
        Err(e) => {
            tracing::error!(tool = name, "plugin could not run the tool: {e}");
            let result = host_error(&format!("the plugin could not run the tool: {e}"));
            (result, Outcome::PluginFailure)
        }
    }
}

/// Why a nested call does not reach its plugin, with the outcome to record.
enum NestedRefusal {
    /// The call returns this tool error (invalid arguments, refused by the call policy).
    Answered(Outcome, ToolResult),
    /// The plugin that asked gets this error.
    Failed(Outcome, NestedCallError),
}

/// [`error_result`] as the answer of a call.
pub(super) fn host_error(message: &str) -> ToolResult {
    ToolResult::from_value(super::error_result(message))
}

fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

/// Validate arguments against the tool's compiled schema; the message names each argument and rule.
fn validate(tool: &Tool, args: &Value) -> Result<(), String> {
    match tool.validator() {
        Ok(validator) => validator.check(&tool.name, args),
        Err(why) => Err(format!(
            "Tool {} cannot be called: its input schema does not compile: {why}",
            tool.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_refused_by_size_or_by_their_number_of_values_before_parsing() {
        let limits = ResultLimits {
            bytes: 100,
            values: 10,
        };
        assert!(
            limits
                .refuse(r#"{"content":[{"type":"text","text":"ok"}]}"#)
                .is_none()
        );
        let long = format!(
            r#"{{"content":[{{"type":"text","text":"{}"}}]}}"#,
            "x".repeat(200)
        );
        assert!(
            limits
                .refuse(&long)
                .unwrap()
                .to_string()
                .contains("limits.max_result_bytes")
        );
        let many = format!(
            r#"{{"content":[],"structuredContent":[{}1]}}"#,
            "1,".repeat(20)
        );
        assert!(
            limits
                .refuse(&many)
                .unwrap()
                .to_string()
                .contains("limits.max_result_values")
        );
        // Commas inside strings are not values.
        assert_eq!(json_values_bound(r#"["a,b:c[", 1]"#), 3);
        // Every value takes a byte at least (what lets a short result skip the count).
        for dense in [
            "1",
            "[]",
            "[[[]]]",
            "[1,2,3]",
            r#"{"a":1,"b":[0,0]}"#,
            "[[],[],[]]",
        ] {
            assert!(json_values_bound(dense) <= dense.len(), "{dense}");
        }
        // A parsed result (an upstream's answer) meets the same limits, its values counted.
        for (text, refused) in [
            (
                r#"{"content":[{"type":"text","text":"ok"}]}"#.to_owned(),
                None,
            ),
            (long, Some("limits.max_result_bytes")),
            (many, Some("limits.max_result_values")),
        ] {
            let tree: Value = serde_json::from_str(&text).unwrap();
            let why = limits.refuse_tree(&tree).map(|why| why.to_string());
            assert_eq!(why.is_some(), refused.is_some(), "{text}");
            assert!(why.unwrap_or_default().contains(refused.unwrap_or("")));
        }
        assert_eq!(json_values(&json!({"a": 1, "b": [0, {"c": null}]})), 6);
        assert_eq!(json_values(&json!([])), 1);
    }
}
