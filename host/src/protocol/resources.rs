//! `resources/list`, `resources/templates/list`, `resources/read` (both eras; reads may ask the
//! client for input) and the 2025 `resources/subscribe` / `resources/unsubscribe`. A client's URI
//! is normalised first ([`crate::registry::uri`]): the agent's view, the call policy, the registry
//! and the plugin or upstream that reads it all see its normal form, and a URI that has none is
//! refused. The agent's view applies to resources by URI and to templates by URI template; a URI
//! nothing lists goes to the upstream servers in order.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::{CallEnvelope, CallerNeed};
use serde_json::{Map, Value, json};

use super::input::{self, Subject};
use super::invoke::{self, Invocation};
use super::jsonrpc::{ErrorKind, RpcError};
use super::session::LegacySession;
use super::{Answer, Cache, Protocol, Request, pages};
use crate::registry::uri::{self, UriError};
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
            .filter(|r| visible(req, &r.key))
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

/// The normal form of a client's resource URI `raw` ([`uri::normalize`]), which is what is
/// compared, policed, routed and read. A URI without one is refused — unless a plugin lists
/// exactly it, when that one spelling (and no other) names that resource.
pub(crate) fn normal_uri<'a>(protocol: &Protocol, raw: &'a str) -> Result<Cow<'a, str>, UriError> {
    match uri::normalize(raw) {
        Err(_) if protocol.host.registry().resource(raw).is_some() => Ok(Cow::Borrowed(raw)),
        normalized => normalized,
    }
}

/// The `uri` parameter of `method` as sent, and its normal form; invalid params when it has none.
fn asked_uri<'a>(
    protocol: &Protocol,
    req: &'a Request<'_>,
    method: &str,
) -> Result<(&'a str, Cow<'a, str>), RpcError> {
    let raw = uri_param(req, method)?;
    let normal = normal_uri(protocol, raw).map_err(|e| {
        RpcError::invalid_params(format!("Invalid resource URI {raw:?}: {e}"))
            .with_data(json!({ "uri": raw }))
    })?;
    Ok((raw, normal))
}

/// What reads a URI: a listed resource's (or template's) plugin, or an upstream offered a URI
/// nothing lists.
struct Reader {
    slot: Arc<PluginSlot>,
    index: u32,
    /// The URI it is asked for: a listed resource's as its plugin declared it (the client's is
    /// another spelling of it at most), else the client's in normal form.
    uri: String,
    variables: Map<String, Value>,
    caller: CallerNeed,
    timeout: Duration,
}

/// Who reads `uri` (in normal form) for `req`, in order: the listed resource or matching template
/// alone, else the upstreams that read URIs nothing lists
/// ([`crate::registry::Registry::route`]); none when nothing may serve it to this caller.
fn readers(protocol: &Protocol, req: &Request<'_>, uri: &str) -> Vec<Reader> {
    let registry = protocol.host.registry();
    match registry.route(uri, |u| visible(req, u)) {
        Route::Listed(resource, variables) => vec![Reader {
            slot: Arc::clone(&resource.slot),
            index: resource.index,
            uri: match resource.template {
                Some(_) => uri.to_owned(),
                None => resource.uri.clone(),
            },
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
                uri: uri.to_owned(),
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
    let (raw, uri) = asked_uri(protocol, req, "resources/read")?;
    let uri = &*uri;
    let readers = readers(protocol, req, uri);
    if readers.is_empty() {
        return Err(not_found(req, raw));
    }
    let subject = Subject {
        method: "resources/read",
        name: uri,
        arguments: None,
    };
    let channel = input::channel(protocol, req, &subject)?;
    let mut answer = Err(not_found(req, raw));
    for reader in readers {
        let call = Invocation {
            slot: &reader.slot,
            envelope: CallEnvelope::ReadResource {
                index: reader.index,
                uri: reader.uri,
                variables: reader.variables,
            },
            caller: reader.caller,
            timeout: reader.timeout,
            what: format!("resource {uri}"),
            policed: Some(crate::policy::Subject::Resource { uri, raw }),
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

/// Whether `req` may subscribe to `uri` (in normal form): a resource it could read, or a URI
/// nothing lists that some upstream would be asked for (it is not read to check; updates come
/// when the upstream sends them).
pub(crate) fn subscribable(protocol: &Protocol, req: &Request<'_>, uri: &str) -> bool {
    match protocol.host.registry().route(uri, |u| visible(req, u)) {
        Route::Listed(..) => true,
        Route::Unlisted(upstreams) => !upstreams.is_empty(),
        Route::Hidden => false,
    }
}

/// `resources/subscribe` (2025): updates of a served URI (by any spelling) go to this session
/// from now on.
pub(crate) fn subscribe(
    protocol: &Protocol,
    req: &Request<'_>,
    session: &LegacySession,
) -> Result<Answer, RpcError> {
    let (raw, uri) = asked_uri(protocol, req, "resources/subscribe")?;
    if !subscribable(protocol, req, &uri) {
        return Err(not_found(req, raw));
    }
    session.subscribe(&uri);
    Ok(Answer::plain(json!({})))
}

/// `resources/unsubscribe` (2025).
pub(crate) fn unsubscribe(req: &Request<'_>, session: &LegacySession) -> Result<Answer, RpcError> {
    let raw = uri_param(req, "resources/unsubscribe")?;
    session.unsubscribe(&uri::normalize(raw).unwrap_or(Cow::Borrowed(raw)));
    Ok(Answer::plain(json!({})))
}
