//! What the server says about itself: `initialize` (legacy sessions) and `server/discover` (2026),
//! with the capabilities and instructions they carry.

use serde_json::{Map, Value, json};

use super::era::supported_versions;
use super::jsonrpc::{RpcError, response};
use super::{Answer, Exchange, LEGACY_VERSIONS, Protocol, Reply, Request};

impl Protocol {
    /// The server capabilities advertised in both eras. Every method family is served whatever
    /// the plugins export (lists may be empty), so they are always declared, and hot reload can
    /// add resources and prompts to a running server.
    fn capabilities(&self) -> Value {
        json!({
            "tools": { "listChanged": true },
            "resources": { "subscribe": true, "listChanged": true },
            "prompts": { "listChanged": true },
            "completions": {},
            "logging": {},
        })
    }
}

/// A bare `initialize`: negotiate a legacy version (the client's when supported, else the newest)
/// and let the transport open the session.
pub(crate) fn initialize(
    protocol: &Protocol,
    id: &Value,
    params: &Map<String, Value>,
    ex: &Exchange,
) -> Reply {
    if ex.session.is_some() {
        return Reply::error(
            id,
            &RpcError::invalid_request("this session is already initialized"),
            false,
        );
    }
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or(LEGACY_VERSIONS[0]);
    let version = if LEGACY_VERSIONS.contains(&requested) {
        requested
    } else {
        LEGACY_VERSIONS[0]
    };
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": protocol.capabilities(),
        "serverInfo": &*protocol.server_info,
    });
    if let Some(text) = &protocol.host.config().instructions {
        result["instructions"] = json!(text);
    }
    Reply::Initialized {
        body: response(id, result).into(),
        version: version.to_owned(),
        capabilities: super::session::kept_capabilities(params.get("capabilities")),
    }
}

/// `server/discover` (2026): versions, capabilities (with the tasks extension, which legacy
/// sessions never get) and instructions; cacheable.
pub(crate) fn discover(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    let mut capabilities = protocol.capabilities();
    capabilities["extensions"] = json!({ super::tasks::EXTENSION: {} });
    let mut result = json!({
        "supportedVersions": supported_versions(),
        "capabilities": capabilities,
    });
    if let Some(text) = &req.config.instructions {
        result["instructions"] = json!(text);
    }
    Ok(Answer::cacheable(result))
}
