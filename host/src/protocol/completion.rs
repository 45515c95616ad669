//! `completion/complete`: values for a prompt argument (`ref/prompt`) or a resource template
//! variable (`ref/resource`), from the completion function the plugin declared for it (none: no
//! values). A prompt or template the call policy denies to the caller completes to no values.

use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::{CallEnvelope, CallerNeed, CompletionTarget};
use serde_json::{Map, Value, json};

use super::invoke::{self, Invocation};
use super::jsonrpc::RpcError;
use super::resources::visible;
use super::{Answer, Protocol, Request, prompts};
use crate::plugins::slot::PluginSlot;
use crate::policy::Subject;

fn string<'a>(v: Option<&'a Value>, what: &str) -> Result<&'a str, RpcError> {
    v.and_then(Value::as_str).ok_or_else(|| {
        RpcError::invalid_params(format!("completion/complete needs a string {what}"))
    })
}

/// What a completion is asked of: the prompt or resource template, its arguments, and which of
/// them have a completion function.
struct Completable {
    slot: Arc<PluginSlot>,
    index: u32,
    target: CompletionTarget,
    arguments: Vec<String>,
    completions: Vec<String>,
    timeout: Duration,
    /// How the call is named in errors and logs.
    what: String,
    /// The prompt's name or the template's URI, for the call policy.
    name: String,
}

/// No values (nothing to complete, or the plugin gave none usable).
fn no_values() -> Answer {
    Answer::plain(json!({ "completion": { "values": [], "total": 0, "hasMore": false } }))
}

/// `completion/complete`: read the argument and the reference, find what it refers to, check
/// the argument is one of its own, then ask the plugin (when it completes that argument).
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
    let kind = string(reference.and_then(|r| r.get("type")), "ref.type")?;
    let target = match kind {
        "ref/prompt" => prompt_target(protocol, req, reference)?,
        "ref/resource" => resource_target(protocol, req, reference)?,
        other => {
            return Err(RpcError::invalid_params(format!(
                "unknown ref.type {other:?}: expected ref/prompt or ref/resource"
            )));
        }
    };
    if !target.arguments.iter().any(|a| a == name) {
        return Err(RpcError::invalid_params(format!(
            "{}: no argument named {name}",
            target.what
        )));
    }
    if !target.completions.iter().any(|a| a == name) || denied(protocol, req, &target, &context) {
        return Ok(no_values());
    }
    let call = Invocation {
        slot: &target.slot,
        envelope: CallEnvelope::Complete {
            target: target.target,
            index: target.index,
            argument: name.to_owned(),
            value: value.to_owned(),
            context,
        },
        caller: CallerNeed::Optional,
        timeout: target.timeout,
        what: target.what,
        policed: None,
    };
    match invoke::run(protocol, req, call, None).await? {
        Some(result) if result["completion"]["values"].is_array() => Ok(Answer::plain(result)),
        _ => Ok(no_values()),
    }
}

/// Whether the call policy denies `target` to the caller, with the arguments given so far
/// (`context`, and the one being completed) as its `args`: then it shows no values of it.
fn denied(
    protocol: &Protocol,
    req: &Request<'_>,
    target: &Completable,
    context: &Map<String, Value>,
) -> bool {
    let subject = match target.target {
        CompletionTarget::Prompt => Subject::Prompt { name: &target.name },
        // A template's own URI (or a resource's normal form): what the client named.
        _ => Subject::Resource {
            uri: &target.name,
            raw: &target.name,
        },
    };
    let mut args = context.clone();
    if let Some(argument) = req.params.get("argument")
        && let (Some(name), Some(value)) = (argument.get("name"), argument.get("value"))
        && let Some(name) = name.as_str()
    {
        args.insert(name.to_owned(), value.clone());
    }
    let denied = protocol.host.policy_denies(
        subject,
        target.slot.backend.name(),
        &Value::Object(args),
        &req.ex.request,
    );
    if denied {
        tracing::debug!(what = %target.what, "no values: the call policy denies it");
    }
    denied
}

/// `ref/prompt`: the prompt named `ref.name`, as the client may see it.
fn prompt_target(
    protocol: &Protocol,
    req: &Request<'_>,
    reference: Option<&Value>,
) -> Result<Completable, RpcError> {
    let prompt_name = string(reference.and_then(|r| r.get("name")), "ref.name")?;
    let p = prompts::find(protocol, req, prompt_name)?;
    Ok(Completable {
        slot: Arc::clone(&p.slot),
        index: p.index,
        target: CompletionTarget::Prompt,
        arguments: p
            .descriptor
            .arguments
            .iter()
            .map(|a| a.name.clone())
            .collect(),
        completions: p.descriptor.completions.clone(),
        timeout: p.timeout,
        what: format!("completion of prompt {prompt_name}"),
        name: prompt_name.to_owned(),
    })
}

/// `ref/resource`: the resource template (or resource) `ref.uri`, when the client may see it.
fn resource_target(
    protocol: &Protocol,
    req: &Request<'_>,
    reference: Option<&Value>,
) -> Result<Completable, RpcError> {
    let uri = string(reference.and_then(|r| r.get("uri")), "ref.uri")?;
    let registry = protocol.host.registry();
    let r = registry
        .template(uri)
        .or_else(|| registry.resource(&crate::registry::uri::normalize(uri).ok()?))
        .filter(|r| visible(req, &r.key))
        .ok_or_else(|| RpcError::invalid_params(format!("Unknown resource template: {uri}")))?;
    Ok(Completable {
        slot: Arc::clone(&r.slot),
        index: r.index,
        target: CompletionTarget::Resource,
        arguments: r
            .template
            .as_ref()
            .map(|t| t.variables().to_vec())
            .unwrap_or_default(),
        completions: r.descriptor.completions.clone(),
        timeout: r.timeout,
        what: format!("completion of resource {uri}"),
        name: r.key.clone(),
    })
}
