//! The call path every transport uses: argument validation, the caller check, fair permits (the
//! caller's quota, then the plugin's permit, then the global one, so a busy plugin never holds
//! global slots while it waits), the thread hand-off, the timeout, cancellation when the caller
//! goes away (a call whose client is gone never starts), the result size cap, and the mapping of
//! what the plugin returned. Nested calls (a tool calling a tool) take a shorter path on the
//! calling thread, inheriting the parent's caller, agent view, deadline and events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use mcp_plugin_sdk::UserInfo;
use mcp_plugin_sdk::wire::CallerNeed;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::pool::WorkerPool;
use super::quota::{QuotaError, Quotas};
use super::{CallState, CancelFlag, EventSink};
use crate::access::agents::Agent;
use crate::config::Limits;
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
    /// The caller is over its share (`limits.per_caller`).
    #[error(transparent)]
    Throttled(#[from] QuotaError),
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
    /// Who the call counts against for `limits.per_caller` (`None`: not counted, e.g. the CLI).
    pub quota_key: Option<Arc<str>>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("caller", &self.caller)
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
    /// the other limits follow [`Executor::set_limits`]).
    pub fn new(limits: &Limits) -> Self {
        let max_concurrent = limits.max_concurrent_calls;
        Executor {
            pool: WorkerPool::new(max_concurrent),
            global: Arc::new(Semaphore::new(max_concurrent.max(1))),
            quotas: Arc::default(),
            limits: ArcSwap::from_pointee(limits.clone()),
        }
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
        args: Option<Value>,
        opts: CallOptions,
    ) -> Result<Value, CallError> {
        let name = tool.name.as_str();
        let args = args.unwrap_or_else(|| json!({}));
        if let Err(message) = validate(&tool, &args) {
            return Ok(error_result(&message));
        }
        let caller_json = caller_json(&tool, opts.caller.as_ref())?;
        let limits = self.limits.load_full();
        let quota = match &opts.quota_key {
            Some(key) => Some(self.quotas.admit(key, &limits.per_caller)?),
            None => None,
        };
        let max_result = ResultLimits::of(&limits);
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
            if call.cancel.is_cancelled() {
                return Ok(error_result(NOT_STARTED));
            }
            return Ok(run(&tool, &args_text, &call, max_result));
        }

        let mut guard = CancelOnDrop(Some(opts.cancel.clone()));
        let work = async {
            let Some((local, global)) = self.slots(&tool, &call.cancel).await else {
                return Ok(None);
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            let (tool, call) = (Arc::clone(&tool), Arc::clone(&call));
            self.pool.submit(move || {
                // Permits (and the caller's slot) are released only when the plugin function
                // has returned.
                let permits = (global, local, quota);
                // A call whose client went away while it waited for a thread never starts.
                let result = (!call.cancel.is_cancelled())
                    .then(|| run(&tool, &args_text, &call, max_result));
                // Free the slots before answering: a client that got its answer may call again.
                drop(permits);
                let _ = tx.send(result);
            });
            rx.await
        };
        let outcome = tokio::time::timeout(tool.timeout, work).await;
        guard.0 = None;
        Ok(match outcome {
            Ok(Ok(Some(result))) => result,
            Ok(Ok(None)) => error_result(NOT_STARTED),
            Ok(Err(_)) => error_result("the tool call was lost (its worker thread ended)"),
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

    /// The plugin's slot, then a global one: a call queued behind a busy plugin holds no global
    /// slot, so other plugins keep running. `None` when `cancel` is set while waiting (the client
    /// went away): the call never starts.
    async fn slots(
        &self,
        tool: &Tool,
        cancel: &CancelFlag,
    ) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let left_queue = || {
            tracing::info!(tool = %tool.name, "call cancelled while queued; it never starts");
            None
        };
        let limiter = &tool.slot.limiter;
        let local = match Arc::clone(limiter).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                tracing::debug!(tool = %tool.name, "call queued: its plugin is at its concurrency limit");
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
    ) -> Result<String, String> {
        let depth = parent.map_or(0, |p| p.depth + 1);
        if depth > max_depth {
            return Err(format!(
                "tool calls nested deeper than {max_depth} (calling {name})"
            ));
        }
        // The outer call's agent view applies: a tool it hides does not exist for nested calls.
        let agent = parent.and_then(|p| p.agent.clone());
        let tool = registry
            .get(name)
            .filter(|_| agent.as_ref().is_none_or(|a| a.permits(name)))
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
            agent,
            depth,
            tool: Arc::from(name),
        });
        let max_result = ResultLimits::of(&self.limits.load());
        Ok(run(&tool, args, &call, max_result).to_string())
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

/// The answer of a call that was cancelled before its plugin function started.
const NOT_STARTED: &str = "cancelled before it started";

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

    /// Why the result `json` is refused before it is parsed, if it is.
    fn refuse(&self, json: &str) -> Option<String> {
        if json.len() > self.bytes {
            return Some(format!(
                "the tool's result is {} bytes, over the limit of {} bytes (limits.max_result_bytes)",
                json.len(),
                self.bytes
            ));
        }
        let values = json_values_bound(json);
        (values > self.values).then(|| {
            format!(
                "the tool's result has up to {values} JSON values, over the limit of {} \
                 (limits.max_result_values)",
                self.values
            )
        })
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

/// Run a tool on this thread and map what the plugin returned; a result over `limits` is refused
/// before it is parsed.
fn run(tool: &Tool, args: &str, call: &Arc<CallState>, limits: ResultLimits) -> Value {
    let result = tool.slot.backend.call_blocking(tool.index, args, call);
    if let Some(why) = result.as_deref().ok().and_then(|json| limits.refuse(json)) {
        tracing::warn!(tool = %tool.name, "result refused: {why}");
        return error_result(&why);
    }
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
                .contains("limits.max_result_values")
        );
        // Commas inside strings are not values.
        assert_eq!(json_values_bound(r#"["a,b:c[", 1]"#), 3);
    }
}
