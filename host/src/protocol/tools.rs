//! `tools/list` and `tools/call`, the same in both eras: the agent's view of the registry (or, for
//! an agent in search mode, the fixed set of [`super::tool_search`]), cursors, capability and header
//! checks, then the call path.

use std::sync::Arc;

use mcp_plugin_sdk::wire::TaskSupport;
use serde_json::{Map, Value, json};

use super::input::{self, Subject};
use super::jsonrpc::{ErrorKind, RpcError};
use super::logging::event_sink;
use super::tool_search::{self, CALL_TOOL, SEARCH_TOOL};
use super::{Answer, Protocol, Request, pages};
use crate::host::{CallError, CallOptions};

/// `tools/list`: one page in name order, and the cursor of the next; cacheable.
pub(crate) fn list(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let agent = req.ex.request.agent();
    let registry = protocol.host.registry();
    if let Some(agent) = agent.filter(|a| a.searches()) {
        return tool_search::list(req, agent, &registry);
    }
    let view = registry.view(agent.map(|a| a.name.as_str()));
    pages::page(req, "tools", |after| {
        view.tools_after(after)
            .filter(|t| agent.is_none_or(|a| a.permits(&t.name)))
            .map(|t| (t.name.as_str(), &t.listing))
    })
}

/// `tools/call`: the search and call tools for an agent in search mode, else a tool of the
/// caller's view.
pub(crate) async fn call(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let params = req.params;
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(RpcError::invalid_params(
            "tools/call needs a string \"name\"",
        ));
    };
    let args = params.get("arguments").filter(|a| !a.is_null());
    if req.ex.request.agent().is_some_and(|a| a.searches()) {
        if name == SEARCH_TOOL {
            return Ok(tool_search::search(req, &protocol.host.registry(), args));
        }
        if name == CALL_TOOL {
            return match tool_search::target(args) {
                Ok((target, args)) => call_named(protocol, req, &target, args.as_ref(), true).await,
                Err(result) => Ok(Answer::plain(result)),
            };
        }
    }
    call_named(protocol, req, name, args, false).await
}

/// Call tool `name` of the caller's view with `args`: check headers (unless `proxied` by the call
/// tool, whose request carries its own) and required client capabilities, then run it. Tool
/// failures are results (`isError`); refusals are errors — except an unknown tool named through
/// the call tool, which is a result the model can read.
async fn call_named(
    protocol: &Protocol,
    req: &Request<'_>,
    name: &str,
    args: Option<&Value>,
    proxied: bool,
) -> Result<Answer, RpcError> {
    // A tool the agent cannot see does not exist for it: the same error as an unknown tool.
    let agent = req.ex.request.agent();
    let Some(tool) = protocol
        .host
        .registry()
        .view(agent.map(|a| a.name.as_str()))
        .get(name)
        .filter(|_| agent.is_none_or(|a| a.permits(name)))
        .cloned()
    else {
        if proxied {
            return Ok(Answer::plain(tool_search::unknown_target(name)));
        }
        return Err(unknown_tool(name));
    };
    if !req.era.is_legacy()
        && !proxied
        && let Some(headers) = &req.ex.headers
    {
        headers.check_params(tool.header_params(), args)?;
    }
    if let Some(Value::Object(required)) = &tool.descriptor().required_client_capabilities {
        let caps = req.era.client_capabilities();
        let missing: Map<String, Value> = required
            .iter()
            .filter(|(k, _)| caps.get(k.as_str()).is_none())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !missing.is_empty() {
            return Err(RpcError::new(
                ErrorKind::MissingCapability,
                format!(
                    "Missing required client capability: tool {name} needs {}",
                    missing.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
            .with_data(json!({ "requiredCapabilities": missing })));
        }
    }
    // Only a tool that may run as a task carries the task machinery's (large) future.
    if tool.descriptor().task_support != TaskSupport::Forbidden
        && let Some(task) = Box::pin(super::tasks::start(protocol, req, &tool, args)).await?
    {
        return Ok(task);
    }
    let subject = Subject {
        method: "tools/call",
        name,
        arguments: args,
    };
    let channel = input::channel(protocol, req, &subject)?;
    let opts = call_options(req, channel.clone());
    let (failed, answer) = match protocol.host.call_tool(tool, args, opts).await {
        Ok(result) => (result.is_error(), Ok(Answer::Tool(result))),
        Err(e) => (true, Err(refused(e))),
    };
    input::finish(protocol, req, &subject, channel.as_deref(), failed, answer)
}

/// The error for a call refused before its tool ran.
pub(crate) fn refused(e: CallError) -> RpcError {
    match e {
        CallError::UnknownTool(n) => unknown_tool(&n),
        CallError::CallerRequired(n) => RpcError::new(
            ErrorKind::Unauthorized,
            format!("Authentication required: tool {n} needs a verified caller"),
        ),
        CallError::Withheld { tool, argument } => RpcError::invalid_params(format!(
            "Invalid arguments for tool {tool}: argument {argument} is set by the host and may \
             not be sent"
        ))
        .with_data(json!({ "argument": argument })),
        CallError::Throttled(q) => throttled(&q),
        CallError::Limited(b) => limited(&b),
    }
}

/// The error for a request over a call policy budget: 429 with `Retry-After` over HTTP, and
/// `retryAfter` (seconds), the budget and the rule in `data`. A shared budget whose counter (the
/// store) cannot be reached refuses too (fails closed): -32603, 503 over HTTP, the same `data`.
pub(crate) fn limited(b: &crate::policy::budget::BudgetError) -> RpcError {
    let data = json!({
        "retryAfter": b.retry_after_secs,
        "retryAfterSecs": b.retry_after_secs,
        "budget": b.budget,
        "rule": b.rule,
    });
    if b.unreachable {
        return RpcError::new(ErrorKind::Unavailable, format!("Service unavailable: {b}"))
            .with_data(data);
    }
    RpcError::too_many_requests(format!("Too many requests: {b}"), b.retry_after_secs)
        .with_data(data)
}

/// The options of a plugin call made for `req`: its caller, agent, cancellation, where its
/// progress and log events go (progress only with a `progressToken`), and how it asks for input.
pub(crate) fn call_options(
    req: &Request<'_>,
    input: Option<Arc<crate::exec::InputChannel>>,
) -> CallOptions {
    let progress_token = req
        .params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_number())
        .cloned();
    let level = req.era.log_level();
    let wants = crate::exec::EventWants {
        progress: progress_token.is_some(),
        log_level: level,
    };
    let events = req
        .ex
        .notifier
        .as_ref()
        .and_then(|n| event_sink(Arc::clone(n), progress_token, level));
    CallOptions {
        request: Arc::clone(&req.ex.request),
        events,
        wants,
        input,
    }
}

/// The error for a caller over its share (`limits.per_caller`): 429 with `Retry-After` over HTTP.
pub(crate) fn throttled(q: &crate::exec::quota::QuotaError) -> RpcError {
    RpcError::too_many_requests(format!("Too many requests: {q}"), q.retry_after_secs())
}

pub(crate) fn unknown_tool(name: &str) -> RpcError {
    RpcError::invalid_params(format!("Unknown tool: {name}"))
}
