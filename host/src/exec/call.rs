//! The call path every transport uses: argument validation, the caller check, fair permits, the
//! hand-off (a pool thread for in-process plugins; a task awaiting the worker for isolated ones),
//! the timeout, cancellation when the caller goes away, and the mapping of what the plugin
//! returned. Nested calls (a tool calling a tool) take a shorter path on the calling thread,
//! inheriting the parent's caller, agent view, deadline and events.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_plugin_sdk::UserInfo;
use mcp_plugin_sdk::wire::CallerNeed;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::pool::WorkerPool;
use super::{CallState, CancelFlag, EventSink};
use crate::access::agents::Agent;
use crate::plugins::backend::CallFuture;
use crate::registry::{Registry, Tool};

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
        let elsewhere = tool.slot.backend.call_async(tool.index, &args_text, &call);
        if elsewhere.is_none() && tool.descriptor.inline {
            return Ok(run(&tool, &args_text, &call));
        }

        let mut guard = CancelOnDrop(Some(opts.cancel.clone()));
        let outcome = match elsewhere {
            Some(future) => {
                // Driven right here (no hand-off on the way to the worker and back); should the
                // timeout answer first, or this request go away, it finishes on a task of its own.
                let permits = (Arc::clone(&self.global), Arc::clone(&tool.slot.limiter));
                let mut running = Detached(Some(Box::pin(await_elsewhere(
                    permits,
                    Arc::clone(&tool),
                    future,
                ))));
                tokio::time::timeout(tool.timeout, &mut running).await
            }
            None => {
                let work = self.run_on_pool(Arc::clone(&tool), args_text, Arc::clone(&call));
                tokio::time::timeout(tool.timeout, work).await
            }
        };
        guard.0 = None;
        Ok(match outcome {
            Ok(Some(result)) => result,
            Ok(None) => error_result("the tool call was lost (its worker thread ended)"),
            Err(_) => {
                call.cancel.cancel();
                tracing::warn!(
                    tool = name,
                    "call timed out after {} s; cancellation requested",
                    fmt_secs(tool.timeout)
                );
                error_result(&format!("timed out after {} s", fmt_secs(tool.timeout)))
            }
        })
    }

    /// Take the permits, then run the call on a pool thread; they are released only when the
    /// plugin function has returned (even after the timeout answered the client).
    async fn run_on_pool(
        &self,
        tool: Arc<Tool>,
        args: String,
        call: Arc<CallState>,
    ) -> Option<Value> {
        let global = Arc::clone(&self.global).acquire_owned().await;
        let local = Arc::clone(&tool.slot.limiter).acquire_owned().await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pool.submit(move || {
            let _permits = (global, local);
            let _ = tx.send(run(&tool, &args, &call));
        });
        rx.await.ok()
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
        // The agent's view applies to nested calls too: a hidden tool does not exist for them.
        let agent = parent.and_then(|p| p.agent.as_ref());
        let tool = registry
            .get(name)
            .filter(|_| agent.is_none_or(|a| a.permits(name)))
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
        });
        Ok(run(&tool, args, &call).to_string())
    }
}

/// Take the permits, then wait for a call running in another process. The permits are held until
/// the call really ended (answered, or its worker killed past the deadline), even after the timeout
/// answered the client: see [`Detached`].
async fn await_elsewhere(
    (global, local): (Arc<Semaphore>, Arc<Semaphore>),
    tool: Arc<Tool>,
    future: CallFuture,
) -> Option<Value> {
    let _permits = (global.acquire_owned().await, local.acquire_owned().await);
    let result = future.await;
    Some(map_result(&tool, result))
}

/// A call in another process that keeps running on a task of its own when its caller stops
/// waiting (a timeout, a request that went away), so it keeps its permits until it really ended.
struct Detached(Option<Pin<Box<dyn Future<Output = Option<Value>> + Send>>>);

impl Future for Detached {
    type Output = Option<Value>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Value>> {
        let Some(running) = self.0.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let polled = running.as_mut().poll(cx);
        if polled.is_ready() {
            self.0 = None;
        }
        polled
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(running) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(running);
        }
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
    map_result(
        tool,
        tool.slot.backend.call_blocking(tool.index, args, call),
    )
}

/// What the plugin returned as a `CallToolResult` (an error result when it is not one).
fn map_result(tool: &Tool, result: Result<String, String>) -> Value {
    match result {
        Ok(json) => match serde_json::from_str::<Value>(&json) {
            Ok(v) if v.get("content").is_some_and(Value::is_array) => v,
            _ => {
                tracing::error!(tool = %tool.name, "plugin returned an invalid result");
                error_result("the plugin returned an invalid result")
            }
        },
        Err(e) => {
            tracing::error!(tool = %tool.name, "plugin could not run the tool: {e}");
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
