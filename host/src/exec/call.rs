//! The call path every transport uses: argument validation, the caller check, fair permits, the
//! thread hand-off, the timeout, cancellation when the caller goes away, and the mapping of what
//! the plugin returned. Nested calls (a tool calling a tool) take a shorter path on the calling
//! thread, inheriting the parent's caller, agent view, deadline and events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_plugin_sdk::UserInfo;
use mcp_plugin_sdk::wire::{CallEnvelope, CallerNeed, ENVELOPE_INDEX, EnvelopeOutcome};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::pool::WorkerPool;
use super::{CallState, CancelFlag, EventSink, InputChannel};
use crate::access::agents::Agent;
use crate::registry::{PluginSlot, Registry, Tool};

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

/// Why a resource read, a prompt or a completion produced no outcome.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvokeError {
    /// It needs the verified caller and the request has none.
    #[error("{0} requires an authenticated caller")]
    CallerRequired(String),
    /// It did not finish within its time.
    #[error("{0} timed out after {1} s")]
    TimedOut(String, String),
    /// The plugin could not run it, or answered something unreadable.
    #[error("{0}: {1}")]
    Failed(String, String),
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

/// How a plugin call ended without an answer.
enum Interrupted {
    Lost,
    TimedOut,
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
    /// How the call's questions to the client are answered.
    pub input: Option<Arc<InputChannel>>,
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
    /// An executor running at most `max_concurrent` calls at once.
    pub fn new(max_concurrent: usize) -> Self {
        Executor {
            pool: WorkerPool::new(max_concurrent),
            global: Arc::new(Semaphore::new(max_concurrent.max(1))),
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
        let name = tool.name.as_str();
        let args = args.unwrap_or_else(|| json!({}));
        if let Err(message) = validate(&tool, &args) {
            return Ok(error_result(&message));
        }
        let caller_json = caller_json(&tool, opts.caller.as_ref())?;
        let target = Target {
            slot: &tool.slot,
            index: tool.index,
            timeout: tool.timeout,
            inline: tool.descriptor.inline,
            name,
        };
        let args_text = serde_json::to_string(&args).unwrap_or_default();
        Ok(
            match self.execute(&target, args_text, caller_json, &opts).await {
                Ok(returned) => tool_result(name, returned),
                Err(Interrupted::Lost) => {
                    error_result("the tool call was lost (its worker thread ended)")
                }
                Err(Interrupted::TimedOut) => {
                    error_result(&format!("timed out after {} s", fmt_secs(tool.timeout)))
                }
            },
        )
    }

    /// Read a resource, render a prompt or complete an argument: `envelope` to the plugin in
    /// `slot`, within `timeout`, as `opts.caller` when `caller` says it takes one (completions get
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
        let caller_json: Arc<str> = match (opts.caller.as_ref(), caller) {
            (None, CallerNeed::Required) => return Err(InvokeError::CallerRequired(what.into())),
            (Some(c), CallerNeed::Optional | CallerNeed::Required) => {
                serde_json::to_string(c).unwrap_or_default().into()
            }
            (Some(c), CallerNeed::None) if matches!(envelope, CallEnvelope::Complete { .. }) => {
                serde_json::to_string(c).unwrap_or_default().into()
            }
            _ => Arc::from(""),
        };
        let target = Target {
            slot,
            index: ENVELOPE_INDEX,
            timeout,
            inline: false,
            name: what,
        };
        let args = serde_json::to_string(envelope).unwrap_or_default();
        match self.execute(&target, args, caller_json, &opts).await {
            Ok(Ok(json)) => serde_json::from_str(&json).map_err(|e| {
                tracing::error!("{what}: the plugin answered unreadable JSON: {e}");
                InvokeError::Failed(what.into(), "the plugin returned an invalid result".into())
            }),
            Ok(Err(e)) => {
                tracing::error!("{what}: the plugin could not run it: {e}");
                Err(InvokeError::Failed(what.into(), e))
            }
            Err(Interrupted::Lost) => Err(InvokeError::Failed(
                what.into(),
                "the call was lost (its worker thread ended)".into(),
            )),
            Err(Interrupted::TimedOut) => {
                Err(InvokeError::TimedOut(what.into(), fmt_secs(timeout)))
            }
        }
    }

    /// Run one plugin call: inline when the target allows it, else on the worker pool within the
    /// global and per-plugin permits, with the target's timeout (which sets the call's
    /// cancellation flag) and cancellation if this future is dropped.
    async fn execute(
        &self,
        target: &Target<'_>,
        args: String,
        caller_json: Arc<str>,
        opts: &CallOptions,
    ) -> Result<Result<String, String>, Interrupted> {
        let call = Arc::new(CallState {
            cancel: opts.cancel.clone(),
            deadline: Some(Instant::now() + target.timeout),
            events: opts.events.clone(),
            caller_json,
            agent: opts.agent.clone(),
            depth: 0,
            tool: Arc::from(target.name),
            input: opts.input.clone(),
            inline: target.inline,
        });
        let (slot, index) = (target.slot, target.index);
        if target.inline {
            return Ok(slot.backend.call_blocking(index, &args, &call));
        }
        let mut guard = CancelOnDrop(Some(opts.cancel.clone()));
        let work = {
            let slot = Arc::clone(slot);
            let call = Arc::clone(&call);
            let (global, pool) = (Arc::clone(&self.global), &self.pool);
            async move {
                let global = global.acquire_owned().await;
                let local = Arc::clone(&slot.limiter).acquire_owned().await;
                let (tx, rx) = tokio::sync::oneshot::channel();
                pool.submit(move || {
                    // Permits are released only when the plugin function has returned.
                    let _permits = (global, local);
                    let _ = tx.send(slot.backend.call_blocking(index, &args, &call));
                });
                rx.await
            }
        };
        let outcome = tokio::time::timeout(target.timeout, work).await;
        guard.0 = None;
        match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(_)) => Err(Interrupted::Lost),
            Err(_) => {
                call.cancel.cancel();
                tracing::warn!(
                    "{}: call timed out after {} s; cancellation requested",
                    target.name,
                    fmt_secs(target.timeout)
                );
                Err(Interrupted::TimedOut)
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
        if let Err(message) = validate(&tool, &args_value) {
            return Ok(error_result(&message).to_string());
        }
        let caller_json: Arc<str> =
            parent.map_or_else(|| Arc::from(""), |p| Arc::clone(&p.caller_json));
        if tool.descriptor.caller == CallerNeed::Required && caller_json.is_empty() {
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
            input: parent.and_then(|p| p.input.clone()),
            inline: parent.is_some_and(|p| p.inline),
        });
        Ok(run(&tool, args, &call).to_string())
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

/// Run a tool on this thread and map what the plugin returned.
fn run(tool: &Tool, args: &str, call: &Arc<CallState>) -> Value {
    tool_result(
        &tool.name,
        tool.slot.backend.call_blocking(tool.index, args, call),
    )
}

/// A `CallToolResult` from what the plugin returned for tool `name`.
fn tool_result(name: &str, returned: Result<String, String>) -> Value {
    match returned {
        Ok(json) => match serde_json::from_str::<Value>(&json) {
            Ok(v) if v.get("content").is_some_and(Value::is_array) => v,
            _ => {
                tracing::error!(tool = name, "plugin returned an invalid result");
                error_result("the plugin returned an invalid result")
            }
        },
        Err(e) => {
            tracing::error!(tool = name, "plugin could not run the tool: {e}");
            error_result(&format!("the plugin could not run the tool: {e}"))
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
    if !args.is_object() {
        return Err(format!(
            "Invalid arguments for tool {}: arguments must be a JSON object",
            tool.name
        ));
    }
    // The caller is injected by the host from verified credentials; it can never be an argument,
    // whatever a hand-written schema allows.
    let mut problems = Vec::new();
    if args.get("user_info").is_some() {
        problems.push(
            "argument `user_info` is not allowed: the caller comes from verified credentials, \
             never from arguments"
                .to_owned(),
        );
    }
    for error in tool.validator.iter_errors(args).take(5) {
        let path = error.instance_path().to_string();
        let rule = error
            .schema_path()
            .to_string()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let arg = path.trim_start_matches('/').replace('/', ".");
        if arg.is_empty() {
            problems.push(format!("{error} (rule: {rule})"));
        } else {
            problems.push(format!("argument `{arg}`: {error} (rule: {rule})"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Invalid arguments for tool {}: {}",
            tool.name,
            problems.join("; ")
        ))
    }
}
