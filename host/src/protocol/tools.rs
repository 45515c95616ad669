//! `tools/list` and `tools/call`, the same in both eras: the agent's view of the registry, cursors,
//! capability and header checks, then the call path.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::jsonrpc::{ErrorKind, RpcError};
use super::logging::event_sink;
use super::{Answer, Protocol, Request};
use crate::host::{CallError, CallOptions};

/// `tools/list`: one page in name order, and the cursor of the next; cacheable.
pub(crate) fn list(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let after = match req.params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| RpcError::invalid_params("invalid cursor"))?,
        ),
        Some(_) => return Err(RpcError::invalid_params("invalid cursor")),
    };
    let page_size = req.config.list_page_size.max(1);
    let agent = req.ex.agent.as_deref();
    let registry = protocol.host.registry();
    let mut page = Vec::new();
    let mut next = None;
    for tool in registry
        .tools()
        .filter(|t| after.as_deref().is_none_or(|a| t.name.as_str() > a))
        .filter(|t| agent.is_none_or(|a| a.permits(&t.name)))
    {
        if page.len() == page_size {
            if let Some(last) = page.last().and_then(|t: &Value| t["name"].as_str()) {
                next = Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(last));
            }
            break;
        }
        page.push(tool.listing.clone());
    }
    let mut result = Map::new();
    // Moved in: `json!` would deep-copy the whole page through `to_value`.
    result.insert("tools".into(), Value::Array(page));
    if let Some(next) = next {
        result.insert("nextCursor".into(), json!(next));
    }
    Ok(Answer::cacheable(Value::Object(result)))
}

/// `tools/call`: look the tool up in the caller's view, check headers and required client
/// capabilities, then run it. Tool failures are results (`isError`); refusals are errors.
pub(crate) async fn call(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let params = req.params;
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err(RpcError::invalid_params(
            "tools/call needs a string \"name\"",
        ));
    };
    let args = params.get("arguments").filter(|a| !a.is_null()).cloned();
    // A tool the agent cannot see does not exist for it: the same error as an unknown tool.
    let Some(tool) = protocol
        .host
        .registry()
        .get(name)
        .filter(|_| req.ex.agent.as_ref().is_none_or(|a| a.permits(name)))
        .cloned()
    else {
        return Err(unknown_tool(name));
    };
    if !req.era.is_legacy()
        && let Some(headers) = &req.ex.headers
    {
        headers.check_params(&tool.descriptor.input_schema, args.as_ref())?;
    }
    if let Some(Value::Object(required)) = &tool.descriptor.required_client_capabilities {
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
    let progress_token = params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_number())
        .cloned();
    let events = req
        .ex
        .notifier
        .as_ref()
        .and_then(|n| event_sink(Arc::clone(n), progress_token, req.era.log_level()));
    let opts = CallOptions {
        caller: req.ex.caller.clone(),
        agent: req.ex.agent.clone(),
        cancel: req.ex.cancel.clone(),
        events,
        quota_key: req.ex.quota_key.clone(),
    };
    match protocol.host.call_tool(tool, args, opts).await {
        Ok(result) => Ok(Answer::plain(result)),
        Err(CallError::UnknownTool(n)) => Err(unknown_tool(&n)),
        Err(CallError::CallerRequired(n)) => Err(RpcError::new(
            ErrorKind::Unauthorized,
            format!("Authentication required: tool {n} needs a verified caller"),
        )),
        Err(CallError::Throttled(q)) => Err(RpcError::too_many_requests(
            format!("Too many requests: {q}"),
            q.retry_after_secs(),
        )),
    }
}

fn unknown_tool(name: &str) -> RpcError {
    RpcError::invalid_params(format!("Unknown tool: {name}"))
}
