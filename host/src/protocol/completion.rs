//! `completion/complete`: values for a prompt argument (`ref/prompt`) or a resource template
//! variable (`ref/resource`), from the completion function the plugin declared for it (none: no
//! values).

use mcp_plugin_sdk::wire::{CallEnvelope, CallerNeed, CompletionTarget};
use serde_json::{Map, Value, json};

use super::invoke::{self, Invocation};
use super::jsonrpc::RpcError;
use super::resources::visible;
use super::{Answer, Protocol, Request, prompts};

fn string<'a>(v: Option<&'a Value>, what: &str) -> Result<&'a str, RpcError> {
    v.and_then(Value::as_str).ok_or_else(|| {
        RpcError::invalid_params(format!("completion/complete needs a string {what}"))
    })
}

/// `completion/complete`. (Long: the request's checks, then the one plugin call, in order.)
pub(crate) async fn complete(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let reference = req.params.get("ref");
    let argument = req.params.get("argument");
    let name = string(argument.and_then(|a| a.get("name")), "argument.name")?;
    let value = string(argument.and_then(|a| a.get("value")), "argument.value")?;
    let context: Map<String, Value> = req
        .params
        .get("context")
        .and_then(|c| c.get("arguments"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let registry = protocol.host.registry();
    let kind = string(reference.and_then(|r| r.get("type")), "ref.type")?;
    let (slot, index, target, arguments, completions, timeout, what) = match kind {
        "ref/prompt" => {
            let prompt_name = string(reference.and_then(|r| r.get("name")), "ref.name")?;
            let p = prompts::find(protocol, req, prompt_name)?;
            let args: Vec<String> = p
                .descriptor
                .arguments
                .iter()
                .map(|a| a.name.clone())
                .collect();
            (
                Clone::clone(&p.slot),
                p.index,
                CompletionTarget::Prompt,
                args,
                p.descriptor.completions.clone(),
                p.timeout,
                format!("completion of prompt {prompt_name}"),
            )
        }
        "ref/resource" => {
            let uri = string(reference.and_then(|r| r.get("uri")), "ref.uri")?;
            let r = registry
                .template(uri)
                .or_else(|| registry.resource(uri))
                .filter(|r| visible(req, &r.uri))
                .ok_or_else(|| {
                    RpcError::invalid_params(format!("Unknown resource template: {uri}"))
                })?;
            let vars = r
                .template
                .as_ref()
                .map(|t| t.variables().to_vec())
                .unwrap_or_default();
            (
                Clone::clone(&r.slot),
                r.index,
                CompletionTarget::Resource,
                vars,
                r.descriptor.completions.clone(),
                r.timeout,
                format!("completion of resource {uri}"),
            )
        }
        other => {
            return Err(RpcError::invalid_params(format!(
                "unknown ref.type {other:?}: expected ref/prompt or ref/resource"
            )));
        }
    };
    if !arguments.iter().any(|a| a == name) {
        return Err(RpcError::invalid_params(format!(
            "{what}: no argument named {name}"
        )));
    }
    if !completions.iter().any(|a| a == name) {
        return Ok(Answer::plain(
            json!({ "completion": { "values": [], "total": 0, "hasMore": false } }),
        ));
    }
    let call = Invocation {
        slot: &slot,
        envelope: CallEnvelope::Complete {
            target,
            index,
            argument: name.to_owned(),
            value: value.to_owned(),
            context,
        },
        caller: CallerNeed::Optional,
        timeout,
        what,
    };
    match invoke::run(protocol, req, call, None).await? {
        Some(result) if result["completion"]["values"].is_array() => Ok(Answer::plain(result)),
        _ => Ok(Answer::plain(
            json!({ "completion": { "values": [], "total": 0, "hasMore": false } }),
        )),
    }
}
