//! `prompts/list` and `prompts/get` (both eras; rendering may ask the client for input). The agent's
//! view applies to prompts by name.

use mcp_plugin_sdk::wire::CallEnvelope;
use serde_json::{Map, Value};

use super::input::{self, Subject};
use super::invoke::{self, Invocation};
use super::jsonrpc::RpcError;
use super::{Answer, Protocol, Request, pages};
use crate::registry::Prompt;

/// The prompt called `name` in the request's view.
pub(crate) fn find(
    protocol: &Protocol,
    req: &Request<'_>,
    name: &str,
) -> Result<std::sync::Arc<Prompt>, RpcError> {
    protocol
        .host
        .registry()
        .prompt(name)
        .filter(|_| req.ex.request.agent().is_none_or(|a| a.permits(name)))
        .cloned()
        .ok_or_else(|| RpcError::invalid_params(format!("Unknown prompt: {name}")))
}

/// `prompts/list`: the prompts in name order; cacheable.
pub(crate) fn list(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let agent = req.ex.request.agent();
    let registry = protocol.host.registry();
    pages::page(req, "prompts", |after| {
        registry
            .prompts_after(after)
            .filter(|p| agent.is_none_or(|a| a.permits(&p.name)))
            .map(|p| (p.name.as_str(), &p.listing))
    })
}

/// `prompts/get`: check the arguments (strings; every required one given), then render.
pub(crate) async fn get(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let Some(name) = req.params.get("name").and_then(Value::as_str) else {
        return Err(RpcError::invalid_params(
            "prompts/get needs a string \"name\"",
        ));
    };
    let prompt = find(protocol, req, name)?;
    let arguments = match req.params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a.clone(),
        Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
    };
    if let Some((key, _)) = arguments.iter().find(|(_, v)| !v.is_string()) {
        return Err(RpcError::invalid_params(format!(
            "argument {key} of prompt {name} must be a string"
        )));
    }
    let missing: Vec<&str> = prompt
        .descriptor
        .arguments
        .iter()
        .filter(|a| a.required && !arguments.contains_key(&a.name))
        .map(|a| a.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(RpcError::invalid_params(format!(
            "Missing required argument(s) of prompt {name}: {}",
            missing.join(", ")
        )));
    }
    let args_value = Value::Object(arguments.clone());
    let subject = Subject {
        method: "prompts/get",
        name,
        arguments: Some(&args_value),
    };
    let channel = input::channel(protocol, req, &subject)?;
    let call = Invocation {
        slot: &prompt.slot,
        envelope: CallEnvelope::GetPrompt {
            index: prompt.index,
            arguments,
        },
        caller: prompt.descriptor.caller,
        timeout: prompt.timeout,
        what: format!("prompt {name}"),
        policed: Some(crate::policy::Subject::Prompt { name }),
    };
    let answer = match invoke::run(protocol, req, call, channel.clone()).await {
        Ok(Some(value)) => Ok(Answer::plain(value)),
        Ok(None) => Err(RpcError::invalid_params(format!("Unknown prompt: {name}"))),
        Err(e) => Err(e),
    };
    let failed = answer.is_err();
    input::finish(protocol, req, &subject, channel.as_deref(), failed, answer)
}
