//! Which protocol revision a request is served in, decided once per request with every check that
//! goes with it, and what each era adds to a result.
//!
//! - **2026-07-28** (stateless): the request's `_meta` carries the version and the client's
//!   capabilities; over HTTP the headers must mirror the body. Nothing is remembered.
//! - **2025-11-25 / 2025-06-18 / 2025-03-26** (legacy): a bare `initialize` (no modern `_meta`) opens
//!   a session for the stdio connection or the HTTP `Mcp-Session-Id`; later requests run in it.

use mcp_plugin_sdk::LogLevel;
use serde_json::{Map, Value, json};

use super::jsonrpc::{ErrorKind, RpcError};
use super::session::LegacySession;
use super::{Exchange, LEGACY_VERSIONS, MODERN_VERSION};

pub(crate) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The era a request is served in, with what that era tells about the client.
#[derive(Debug)]
pub(crate) enum Era<'a> {
    /// A 2026-07-28 request: everything about the client is in the request itself.
    Modern {
        /// The client's capabilities (an object).
        caps: &'a Value,
        /// The level from which this request's log notifications are wanted.
        log_level: Option<LogLevel>,
    },
    /// A request in a legacy session.
    Legacy(&'a LegacySession),
}

/// What the negotiation decided.
pub(crate) enum Negotiated<'a> {
    /// A bare `initialize`: open a legacy session.
    Initialize,
    /// Serve the request in this era.
    Serve(Era<'a>),
}

impl Era<'_> {
    /// The capabilities the client declared.
    pub(crate) fn client_capabilities(&self) -> &Value {
        match self {
            Era::Modern { caps, .. } => caps,
            Era::Legacy(session) => &session.capabilities,
        }
    }

    /// The level from which log notifications go to the client (`None`: none at all).
    pub(crate) fn log_level(&self) -> Option<LogLevel> {
        match self {
            Era::Modern { log_level, .. } => *log_level,
            Era::Legacy(session) => Some(session.log_level()),
        }
    }

    /// Whether this is a legacy session (errors go out as HTTP 200 there).
    pub(crate) fn is_legacy(&self) -> bool {
        matches!(self, Era::Legacy(_))
    }
}

/// The revisions this server speaks, newest first.
pub(crate) fn supported_versions() -> Vec<&'static str> {
    let mut supported = vec![MODERN_VERSION];
    supported.extend_from_slice(LEGACY_VERSIONS);
    supported
}

/// A level named in a request (`logging/setLevel`, or 2026's `_meta` log level).
pub(crate) fn parse_level(v: Option<&Value>) -> Option<LogLevel> {
    serde_json::from_value(v?.clone()).ok()
}

/// The members of a request's `_meta` the era reads, found in one pass over it (their names share
/// a 24-byte prefix, which makes each lookup by name a long comparison).
#[derive(Default)]
struct MetaFields<'a> {
    version: Option<&'a Value>,
    caps: Option<&'a Value>,
    log_level: Option<&'a Value>,
}

impl<'a> MetaFields<'a> {
    fn of(meta: Option<&'a Map<String, Value>>) -> Self {
        let mut fields = MetaFields::default();
        for (key, value) in meta.into_iter().flatten() {
            match key.as_str() {
                META_VERSION => fields.version = Some(value),
                META_CAPS => fields.caps = Some(value),
                META_LOG_LEVEL => fields.log_level = Some(value),
                _ => {}
            }
        }
        fields
    }
}

/// Decide the era of a request and run every check that goes with it.
pub(crate) fn negotiate<'a>(
    method: &str,
    params: &'a Map<String, Value>,
    ex: &'a Exchange,
) -> Result<Negotiated<'a>, RpcError> {
    let meta = MetaFields::of(params.get("_meta").and_then(Value::as_object));
    let modern = meta.version.is_some()
        || ex
            .headers
            .as_ref()
            .and_then(|h| h.protocol_version.as_deref())
            == Some(MODERN_VERSION)
            && ex.session.is_none();
    if !modern {
        if method == "initialize" {
            return Ok(Negotiated::Initialize);
        }
        if let Some(session) = &ex.session {
            return legacy(session, ex).map(Negotiated::Serve);
        }
    }
    modern_request(method, params, meta, ex).map(Negotiated::Serve)
}

fn legacy<'a>(session: &'a LegacySession, ex: &Exchange) -> Result<Era<'a>, RpcError> {
    if let Some(header) = ex
        .headers
        .as_ref()
        .and_then(|h| h.protocol_version.as_deref())
        && header != session.version
        && !LEGACY_VERSIONS.contains(&header)
    {
        return Err(RpcError::invalid_request(format!(
            "unsupported MCP-Protocol-Version {header:?} (this session speaks {})",
            session.version
        )));
    }
    Ok(Era::Legacy(session))
}

fn modern_request<'a>(
    method: &str,
    params: &'a Map<String, Value>,
    meta: MetaFields<'a>,
    ex: &Exchange,
) -> Result<Era<'a>, RpcError> {
    // The order of these checks follows the specification's examples and the conformance suite.
    if let Some(h) = &ex.headers {
        h.check_present()?;
    }
    let version = meta.version.and_then(Value::as_str);
    let caps = meta.caps.filter(|c| c.is_object());
    let (Some(version), Some(caps)) = (version, caps) else {
        return Err(RpcError::invalid_params(format!(
            "params._meta must carry \"{META_VERSION}\" (a string) and \"{META_CAPS}\" (an object); \
             a 2025 client must send initialize first"
        )));
    };
    if let Some(h) = &ex.headers {
        h.check(method, version, params)?;
    }
    if version != MODERN_VERSION {
        return Err(RpcError::new(
            ErrorKind::UnsupportedVersion,
            format!("Unsupported protocol version {version:?}"),
        )
        .with_data(json!({ "supported": supported_versions(), "requested": version })));
    }
    Ok(Era::Modern {
        caps,
        log_level: parse_level(meta.log_level),
    })
}

/// How long a client may cache a result, and for whom (2026 lists and discovery).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caching {
    /// `ttlMs`.
    pub ttl_ms: u64,
    /// `cacheScope: private` (the answer depends on who asks) rather than `public`.
    pub private: bool,
}

/// Finish a successful result for its era: 2026 results get `resultType`, the server's info in
/// `_meta` and, when cacheable, `ttlMs` and `cacheScope`; legacy results go out as they are.
pub(crate) fn decorate(
    era: &Era<'_>,
    mut result: Value,
    caching: Option<Caching>,
    server_info: &Value,
) -> Value {
    if era.is_legacy() {
        return result;
    }
    if let Some(c) = caching {
        result["ttlMs"] = json!(c.ttl_ms);
        result["cacheScope"] = json!(if c.private { "private" } else { "public" });
    }
    result["resultType"] = json!("complete");
    match result.get_mut("_meta").and_then(Value::as_object_mut) {
        Some(m) => {
            m.insert(META_SERVER_INFO.into(), server_info.clone());
        }
        None => result["_meta"] = json!({ META_SERVER_INFO: server_info }),
    }
    result
}

/// Finish a 2026 result that is not the request's final answer (`input_required`, or `task`):
/// `resultType`, the server's info, never caching hints.
pub(crate) fn decorate_interim(result_type: &str, mut result: Value, server_info: &Value) -> Value {
    result["resultType"] = json!(result_type);
    result["_meta"] = json!({ META_SERVER_INFO: server_info });
    result
}
