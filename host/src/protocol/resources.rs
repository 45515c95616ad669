//! `resources/list`, `resources/templates/list`, `resources/read` (both eras; reads may ask the
//! client for input) and the 2025 `resources/subscribe` / `resources/unsubscribe`. The agent's view
//! applies to resources by URI and to templates by URI template; a URI nothing lists goes to the
//! upstream servers in order.

use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::{CallEnvelope, CallerNeed};
use serde_json::{Map, Value, json};

use super::input::{self, Subject};
use super::invoke::{self, Invocation};
use super::jsonrpc::{ErrorKind, RpcError};
use super::session::LegacySession;
use super::{Answer, Cache, Protocol, Request, pages};
use crate::registry::{PluginSlot, Route};

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

/// What reads a URI: a listed resource's (or template's) plugin, or an upstream offered a URI
/// nothing lists.
struct Reader {
    slot: Arc<PluginSlot>,
    index: u32,
    variables: Map<String, Value>,
    caller: CallerNeed,
    timeout: Duration,
}

/// Who reads `uri` for `req`, in order: the listed resource or matching template alone, else the
/// upstreams that read URIs nothing lists ([`crate::registry::Registry::route`]); none when
/// nothing may serve it to this caller.
fn readers(protocol: &Protocol, req: &Request<'_>, uri: &str) -> Vec<Reader> {
    let registry = protocol.host.registry();
    match registry.route(uri, |u| visible(req, u)) {
        Route::Listed(resource, variables) => vec![Reader {
            slot: Arc::clone(&resource.slot),
            index: resource.index,
            variables,
            caller: resource.descriptor.caller,
            timeout: resource.timeout,
        }],
        Route::Unlisted(upstreams) => upstreams
            .into_iter()
            .map(|f| Reader {
                slot: Arc::clone(&f.slot),
                // An upstream reads by URI: the index is not looked at.
                index: u32::MAX,
                variables: Map::new(),
                caller: CallerNeed::None,
                timeout: f.timeout,
            })
            .collect(),
        Route::Hidden => Vec::new(),
    }
}

/// `resources/read`: the resource with that URI, or the first template that matches it, read by
/// its plugin (as the caller, when it takes one); a URI nothing lists and no template matches is
/// offered to the upstream servers in `tool_dirs` order, the first that does not answer "not
/// found" answering (each ask policed, counted and audited as a read of that upstream).
/// Cacheable, privately when it depends on the caller.
pub(crate) async fn read(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let uri = uri_param(req, "resources/read")?;
    let readers = readers(protocol, req, uri);
    if readers.is_empty() {
        return Err(not_found(req, uri));
    }
    let subject = Subject {
        method: "resources/read",
        name: uri,
        arguments: None,
    };
    let channel = input::channel(protocol, req, &subject)?;
    let mut answer = Err(not_found(req, uri));
    for reader in readers {
        let call = Invocation {
            slot: &reader.slot,
            envelope: CallEnvelope::ReadResource {
                index: reader.index,
                uri: uri.to_owned(),
                variables: reader.variables,
            },
            caller: reader.caller,
            timeout: reader.timeout,
            what: format!("resource {uri}"),
            policed: Some(crate::policy::Subject::Resource { uri }),
        };
        let cache = if reader.caller == CallerNeed::None {
            Cache::Yes
        } else {
            Cache::Private
        };
        match invoke::run(protocol, req, call, channel.clone()).await {
            Ok(Some(value)) if value["contents"].as_array().is_some_and(|c| !c.is_empty()) => {
                answer = Ok(Answer::Result { value, cache });
                break;
            }
            Ok(_) => tracing::debug!(uri, plugin = reader.slot.backend.name(), "not found"),
            Err(e) => {
                answer = Err(e);
                break;
            }
        }
    }
    let failed = answer.is_err();
    input::finish(protocol, req, &subject, channel.as_deref(), failed, answer)
}

/// Whether `req` may subscribe to `uri`: a resource it could read, or a URI nothing lists that
/// some upstream would be asked for (it is not read to check; updates come when the upstream
/// sends them).
pub(crate) fn subscribable(protocol: &Protocol, req: &Request<'_>, uri: &str) -> bool {
    match protocol.host.registry().route(uri, |u| visible(req, u)) {
        Route::Listed(..) => true,
        Route::Unlisted(upstreams) => !upstreams.is_empty(),
        Route::Hidden => false,
    }
}

/// `resources/subscribe` (2025): updates of a served URI go to this session from now on.
pub(crate) fn subscribe(
    protocol: &Protocol,
    req: &Request<'_>,
    session: &LegacySession,
) -> Result<Answer, RpcError> {
    let uri = uri_param(req, "resources/subscribe")?;
    if !subscribable(protocol, req, uri) {
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
