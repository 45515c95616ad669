//! `resources/list`, `resources/templates/list`, `resources/read` (both eras; reads may ask the
//! client for input) and the 2025 `resources/subscribe` / `resources/unsubscribe`. The agent's view
//! applies to resources by URI and to templates by URI template.

use mcp_plugin_sdk::wire::CallEnvelope;
use serde_json::{Value, json};

use super::input::{self, Subject};
use super::invoke::{self, Invocation};
use super::jsonrpc::{ErrorKind, RpcError};
use super::session::LegacySession;
use super::{Answer, Cache, Protocol, Request, pages};
use crate::registry::Resource;

/// Whether the request's agent may see `uri` (a URI or URI template).
pub(crate) fn visible(req: &Request<'_>, uri: &str) -> bool {
    req.ex.request.agent().is_none_or(|a| a.permits(uri))
}

/// `resources/list`: the resources with a fixed URI, in URI order; cacheable.
pub(crate) fn list(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let registry = protocol.host.registry();
    pages::page(req, "resources", |after| {
        registry
            .resources_after(after)
            .filter(|r| visible(req, &r.uri))
            .map(|r| (r.uri.as_str(), &r.listing))
    })
}

/// `resources/templates/list`: the resource templates, in URI-template order; cacheable.
pub(crate) fn templates(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let registry = protocol.host.registry();
    pages::page(req, "resourceTemplates", |after| {
        registry
            .templates_after(after)
            .filter(|r| visible(req, &r.uri))
            .map(|r| (r.uri.as_str(), &r.listing))
    })
}

/// The error for a URI nothing serves: -32002 in a 2025 session, -32602 in 2026 (both with
/// `data.uri`).
fn not_found(req: &Request<'_>, uri: &str) -> RpcError {
    let kind = if req.era.is_legacy() {
        ErrorKind::ResourceNotFound
    } else {
        ErrorKind::InvalidParams
    };
    RpcError::new(kind, format!("Resource not found: {uri}")).with_data(json!({ "uri": uri }))
}

fn uri_param<'a>(req: &'a Request<'_>, method: &str) -> Result<&'a str, RpcError> {
    req.params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("{method} needs a string \"uri\"")))
}

/// `resources/read`: the resource with that URI, or the first template that matches it, read by
/// its plugin (as the caller, when it takes one); cacheable, privately when it depends on the
/// caller.
pub(crate) async fn read(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let uri = uri_param(req, "resources/read")?;
    let registry = protocol.host.registry();
    let Some((resource, variables)) = registry.resolve(uri, |r: &Resource| visible(req, &r.uri))
    else {
        return Err(not_found(req, uri));
    };
    let subject = Subject {
        method: "resources/read",
        name: uri,
        arguments: None,
    };
    let channel = input::channel(protocol, req, &subject)?;
    let call = Invocation {
        slot: &resource.slot,
        envelope: CallEnvelope::ReadResource {
            index: resource.index,
            uri: uri.to_owned(),
            variables,
        },
        caller: resource.descriptor.caller,
        timeout: resource.timeout,
        what: format!("resource {uri}"),
        policed: Some(crate::policy::Subject::Resource { uri }),
    };
    let cache = if resource.descriptor.caller == mcp_plugin_sdk::wire::CallerNeed::None {
        Cache::Yes
    } else {
        Cache::Private
    };
    let answer = match invoke::run(protocol, req, call, channel.clone()).await {
        Ok(Some(value)) if value["contents"].as_array().is_some_and(|c| !c.is_empty()) => {
            Ok(Answer::Result { value, cache })
        }
        Ok(_) => Err(not_found(req, uri)),
        Err(e) => Err(e),
    };
    let failed = answer.is_err();
    input::finish(protocol, req, &subject, channel.as_deref(), failed, answer)
}

/// `resources/subscribe` (2025): updates of a served URI go to this session from now on.
pub(crate) fn subscribe(
    protocol: &Protocol,
    req: &Request<'_>,
    session: &LegacySession,
) -> Result<Answer, RpcError> {
    let uri = uri_param(req, "resources/subscribe")?;
    let registry = protocol.host.registry();
    if registry
        .resolve(uri, |r: &Resource| visible(req, &r.uri))
        .is_none()
    {
        return Err(not_found(req, uri));
    }
    session.subscribe(uri);
    Ok(Answer::plain(json!({})))
}

/// `resources/unsubscribe` (2025).
pub(crate) fn unsubscribe(req: &Request<'_>, session: &LegacySession) -> Result<Answer, RpcError> {
    session.unsubscribe(uri_param(req, "resources/unsubscribe")?);
    Ok(Answer::plain(json!({})))
}
