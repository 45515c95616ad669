//! The call path every transport uses: argument validation, the caller check, fair permits, the
//! thread hand-off, the timeout, cancellation when the caller goes away, and the mapping of what
//! the plugin returned. Nested calls (a tool calling a tool) take a shorter path on the calling
//! thread, inheriting the parent's caller, agent view, deadline and events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_plugin_sdk::UserInfo;
use mcp_plugin_sdk::wire::CallerNeed;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use tracing::Instrument as _;

use super::pool::WorkerPool;
use super::{CallState, CancelFlag, EventSink};
use crate::access::agents::Agent;
use crate::registry::{Registry, Tool};
use crate::telemetry::{Arguments, CallParty, ObservedCall, Outcome, Telemetry};

/// Why a call was refused before any tool ran (protocol-level errors; tool failures are results).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// No served tool has this name (JSON-RPC -32602).
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// The tool takes `UserInfo` and the call has no verified caller.
    #[error("tool {0} requires an authenticated caller")]
    CallerRequired(String),
}

/// Per-call inputs besides the tool name and arguments.
#[derive(Clone, Default)]
pub struct CallOptions {
    /// The verified caller, if any.
    pub caller: Option<UserInfo>,
    /// The agent whose view of the tools applies (to the call's nested calls too).
    pub agent: Option<Arc<Agent>>,
    /// Cancellation shared with the transport (client cancel, closed stream).
    pub cancel: CancelFlag,
    /// Where progress and log events go.
    pub events: Option<EventSink>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

/// Runs tool calls: a pool of worker threads and the global concurrency limit.
#[derive(Debug)]
pub struct Executor {
    pool: WorkerPool,
    global: Arc<Semaphore>,
    telemetry: Arc<Telemetry>,
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
    /// An executor running at most `max_concurrent` calls at once, reporting each to `telemetry`.
    pub fn new(max_concurrent: usize, telemetry: Arc<Telemetry>) -> Self {
        Executor {
            pool: WorkerPool::new(max_concurrent),
            global: Arc::new(Semaphore::new(max_concurrent.max(1))),
            telemetry,
        }
    }

    /// Call `tool` with `args` (an object, or `None` for no arguments).
    ///
    /// Protocol-level refusals are `Err`; everything the tool or its arguments got wrong is an
    /// `isError` result, as MCP asks (SEP-1303).
    pub async fn call(
        &self,
        tool: Arc<Tool>,
        args: Option<Value>,
        opts: CallOptions,
    ) -> Result<Value, CallError> {
        let args = args.unwrap_or_else(|| json!({}));
        let party = CallParty {
            caller: opts.caller.as_ref(),
            caller_json: "",
            agent: opts.agent.as_deref().map(|a| a.name.as_str()),
            depth: 0,
        };
        let observed = self
            .telemetry
            .observe(&tool, party, Arguments::Value(&args));
        let cancel = opts.cancel.clone();
        let (result, outcome) = self
            .run_call(tool, args, opts, &observed)
            .instrument(observed.span().clone())
            .await;
        let outcome = match outcome {
            Outcome::Ok | Outcome::ToolError if cancel.is_cancelled() => Outcome::Cancelled,
            other => other,
        };
        observed.finish(outcome, result.as_ref().ok());
        result
    }

    /// [`Executor::call`] inside its span: the answer, and how the call ended.
    async fn run_call(
        &self,
        tool: Arc<Tool>,
        args: Value,
        opts: CallOptions,
        observed: &ObservedCall<'_>,
    ) -> (Result<Value, CallError>, Outcome) {
        let name = tool.name.as_str();
        if let Err(message) = observed
            .phase("validate")
            .in_scope(|| validate(&tool, &args))
        {
            return (Ok(error_result(&message)), Outcome::InvalidArguments);
        }
        let caller_json = match caller_json(&tool, opts.caller.as_ref()) {
            Ok(json) => json,
            Err(refused) => return (Err(refused), Outcome::CallerRequired),
        };
        let started = Instant::now();
        let call = Arc::new(CallState {
            cancel: opts.cancel.clone(),
            deadline: Some(started + tool.timeout),
            events: opts.events.clone(),
            caller_json,
            agent: opts.agent.clone(),
            depth: 0,
            tool: Arc::from(name),
        });
        let args_text = serde_json::to_string(&args).unwrap_or_default();
        if tool.descriptor.inline {
            let (result, outcome) = observed
                .phase("plugin")
                .in_scope(|| run(&tool, &args_text, &call));
            return (Ok(result), outcome);
        }

        let mut guard = CancelOnDrop(Some(opts.cancel.clone()));
        let work = {
            let tool = Arc::clone(&tool);
            let call = Arc::clone(&call);
            let (global, pool) = (Arc::clone(&self.global), &self.pool);
            async move {
                let waiting = Instant::now();
                let (global, local) = async {
                    let global = global.acquire_owned().await;
                    let local = Arc::clone(&tool.slot.limiter).acquire_owned().await;
                    (global, local)
                }
                .instrument(observed.phase("queue"))
                .await;
                observed.dequeued(waiting.elapsed());
                let plugin = observed.phase("plugin");
                let (tx, rx) = tokio::sync::oneshot::channel();
                pool.submit(move || {
                    // Permits are released only when the plugin function has returned.
                    let _permits = (global, local);
                    let _ = tx.send(plugin.in_scope(|| run(&tool, &args_text, &call)));
                });
                rx.await
            }
        };
        let outcome = tokio::time::timeout(tool.timeout, work).await;
        guard.0 = None;
        match outcome {
            Ok(Ok((result, outcome))) => (Ok(result), outcome),
            Ok(Err(_)) => (
                Ok(error_result(
                    "the tool call was lost (its worker thread ended)",
                )),
                Outcome::PluginFailure,
            ),
            Err(_) => {
                call.cancel.cancel();
                tracing::warn!(
                    tool = name,
                    "call timed out after {} s; cancellation requested",
                    fmt_secs(tool.timeout)
                );
                let message = format!("timed out after {} s", fmt_secs(tool.timeout));
                (Ok(error_result(&message)), Outcome::Timeout)
            }
        }
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
    ) -> Result<String, String> {
        let depth = parent.map_or(0, |p| p.depth + 1);
        if depth > max_depth {
            return Err(format!(
                "tool calls nested deeper than {max_depth} (calling {name})"
            ));
        }
        let tool = registry
            .get(name)
            .cloned()
            .ok_or_else(|| format!("unknown tool: {name}"))?;
        let args_value: Value = if args.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(args).map_err(|e| format!("arguments are not JSON: {e}"))?
        };
        let caller_json: Arc<str> =
            parent.map_or_else(|| Arc::from(""), |p| Arc::clone(&p.caller_json));
        let party = CallParty {
            caller: None,
            caller_json: &caller_json,
            agent: parent.and_then(|p| p.agent.as_deref().map(|a| a.name.as_str())),
            depth,
        };
        let observed = self.telemetry.observe(&tool, party, Arguments::Text(args));
        let span = observed.span().clone();
        let _in_call = span.enter();
        if let Err(message) = observed
            .phase("validate")
            .in_scope(|| validate(&tool, &args_value))
        {
            let result = error_result(&message);
            observed.finish(Outcome::InvalidArguments, Some(&result));
            return Ok(result.to_string());
        }
        if tool.descriptor.caller == CallerNeed::Required && caller_json.is_empty() {
            observed.finish(Outcome::CallerRequired, None);
            return Err(format!("tool {name} requires an authenticated caller"));
        }
        let call = Arc::new(CallState {
            cancel: parent.map_or_else(CancelFlag::new, |p| p.cancel.clone()),
            deadline: parent
                .and_then(|p| p.deadline)
                .or_else(|| Some(Instant::now() + tool.timeout)),
            events: parent.and_then(|p| p.events.clone()),
            caller_json,
            agent: parent.and_then(|p| p.agent.clone()),
            depth,
            tool: Arc::from(name),
        });
        let (result, outcome) = observed
            .phase("plugin")
            .in_scope(|| run(&tool, args, &call));
        observed.finish(outcome, Some(&result));
        Ok(result.to_string())
    }
}

/// The caller as JSON for a tool that takes one (empty otherwise); a tool that needs a verified
/// caller refuses a call without one.
fn caller_json(tool: &Tool, caller: Option<&UserInfo>) -> Result<Arc<str>, CallError> {
    match (caller, tool.descriptor.caller) {
        (None, CallerNeed::Required) => Err(CallError::CallerRequired(tool.name.clone())),
        (Some(caller), CallerNeed::Optional | CallerNeed::Required) => {
            Ok(serde_json::to_string(caller).unwrap_or_default().into())
        }
        _ => Ok(Arc::from("")),
    }
}

/// Run a tool on this thread and map what the plugin returned: the result, and how the call ended.
fn run(tool: &Tool, args: &str, call: &Arc<CallState>) -> (Value, Outcome) {
    match tool.slot.backend.call_blocking(tool.index, args, call) {
        Ok(json) => match serde_json::from_str::<Value>(&json) {
            Ok(v) if v.get("content").is_some_and(Value::is_array) => {
                let outcome = Outcome::of_result(&v);
                (v, outcome)
            }
            _ => {
                tracing::error!(tool = %tool.name, "plugin returned an invalid result");
                let result = error_result("the plugin returned an invalid result");
                (result, Outcome::PluginFailure)
            }
        },
        Err(e) => {
            tracing::error!(tool = %tool.name, "plugin could not run the tool: {e}");
            let result = error_result(&format!("the plugin could not run the tool: {e}"));
            (result, Outcome::PluginFailure)
        }
    }
}

/// A tool result with `isError: true` and this text.
pub fn error_result(message: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": message }], "isError": true })
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
    tool.validator.check(&tool.name, args)
}
