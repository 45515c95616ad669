//! The MCP protocol: one dispatcher for both eras, independent of the transport.
//!
//! - **2026-07-28** (stateless): every request carries `_meta` with the protocol version and the client
//!   capabilities; nothing is remembered between requests.
//! - **2025-11-25 / 2025-06-18 / 2025-03-26** (legacy): a bare `initialize` (no modern `_meta`) opens a
//!   session for that stdio connection or HTTP `Mcp-Session-Id`.
//!
//! Transports hand each request to [`Protocol::handle_request`] with an [`Exchange`] describing what
//! they know (session, HTTP headers, caller, where request-scoped notifications go) and send back the
//! [`Reply`]. Every error carries its HTTP status ([`jsonrpc::RpcError`]).

pub mod jsonrpc;
pub mod session;

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use mcp_plugin_sdk::{LogLevel, UserInfo};
use serde_json::{Map, Value, json};

use crate::host::{CallError, CallOptions, Host};
use crate::plugins::host_api::{CallEvent, CancelFlag, EventSink};
use jsonrpc::{RpcError, response};
use session::LegacySession;

/// The current (stateless) protocol revision.
pub const MODERN_VERSION: &str = "2026-07-28";
/// Legacy revisions served through `initialize`, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// Where a transport delivers request-scoped notifications (full JSON-RPC messages).
pub type Notifier = Arc<dyn Fn(Value) + Send + Sync>;

/// Protocol settings from the configuration.
#[derive(Debug, Clone)]
pub struct ProtocolSettings {
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// `ttlMs` of cacheable 2026 results.
    pub ttl_ms: u64,
    /// Optional server instructions.
    pub instructions: Option<String>,
}

impl Default for ProtocolSettings {
    fn default() -> Self {
        ProtocolSettings {
            page_size: 100,
            ttl_ms: 0,
            instructions: None,
        }
    }
}

/// The HTTP headers 2026 requires to mirror the body (absent on stdio).
#[derive(Debug, Clone, Default)]
pub struct HttpHeaders {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// `Mcp-Method`.
    pub method: Option<String>,
    /// `Mcp-Name` (already decoded from `=?base64?…?=`).
    pub name: Option<String>,
    /// `Mcp-Param-{Name}` headers: (lower-cased `Name`, raw value, possibly `=?base64?…?=`).
    pub params: Vec<(String, String)>,
}

/// Decode a header value that may use the `=?base64?…?=` form (strict base64, padding required).
pub fn decode_header_value(value: &str) -> Result<String, RpcError> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| {
                RpcError::new(
                    jsonrpc::HEADER_MISMATCH,
                    "invalid base64 in header value",
                    400,
                )
            }),
        None => Ok(value.to_owned()),
    }
}

/// Check `Mcp-Param-{Name}` headers against the arguments whose schema carries `x-mcp-header`.
fn check_param_headers(
    schema: &Value,
    args: Option<&Value>,
    headers: &HttpHeaders,
) -> Result<(), RpcError> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    let mismatch = |m: String| RpcError::new(jsonrpc::HEADER_MISMATCH, m, 400);
    for (param, prop) in props {
        let Some(name) = prop.get("x-mcp-header").and_then(Value::as_str) else {
            continue;
        };
        let header = headers
            .params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim());
        let body = args.and_then(|a| a.get(param)).filter(|v| !v.is_null());
        match (header, body) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(mismatch(format!(
                    "missing Mcp-Param-{name} header for argument {param}"
                )));
            }
            (Some(_), None) => {
                return Err(mismatch(format!(
                    "Mcp-Param-{name} header sent but argument {param} is absent"
                )));
            }
            (Some(raw), Some(value)) => {
                let decoded = decode_header_value(raw)?;
                let matches = match value {
                    Value::String(s) => *s == decoded,
                    Value::Number(n) => decoded
                        .parse::<f64>()
                        .ok()
                        .zip(n.as_f64())
                        .is_some_and(|(a, b)| a == b),
                    Value::Bool(b) => decoded == b.to_string(),
                    _ => false,
                };
                if !matches {
                    return Err(mismatch(format!(
                        "Header mismatch: Mcp-Param-{name} header does not match argument {param}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// What the transport knows about one request.
#[derive(Clone, Default)]
pub struct Exchange {
    /// The legacy session this request belongs to, if any.
    pub session: Option<Arc<LegacySession>>,
    /// HTTP headers (`None` on stdio).
    pub headers: Option<HttpHeaders>,
    /// The verified caller.
    pub caller: Option<UserInfo>,
    /// Cancellation of this request (client cancel, closed stream).
    pub cancel: CancelFlag,
    /// Where this request's progress and log notifications go.
    pub notifier: Option<Notifier>,
    /// The answer depends on who asks (agent views, authentication): `cacheScope: private`.
    pub cache_private: bool,
    /// The agent whose view of the tools applies (tools it cannot see do not exist for it).
    pub agent: Option<Arc<crate::access::agents::Agent>>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("session", &self.session.as_ref().map(|s| &s.id))
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// What to send back.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A response (success or error) with its HTTP status.
    Response {
        /// The JSON-RPC response.
        body: Value,
        /// HTTP status.
        status: u16,
    },
    /// A legacy `initialize` succeeded: the transport opens a session with this version.
    Initialized {
        /// The JSON-RPC response.
        body: Value,
        /// Negotiated version.
        version: String,
        /// The client's capabilities.
        capabilities: Value,
    },
    /// `subscriptions/listen`: the transport keeps a stream open for these notifications.
    Listen {
        /// The request id (also the subscription id).
        id: Value,
        /// The acknowledged filter (`{"toolsListChanged": true}` or `{}`).
        accepted: Value,
    },
}

impl Reply {
    fn error(id: &Value, e: &RpcError) -> Reply {
        Reply::Response {
            body: jsonrpc::error_response(id, e),
            status: e.http_status,
        }
    }

    fn ok(id: &Value, result: Value) -> Reply {
        Reply::Response {
            body: response(id, result),
            status: 200,
        }
    }
}

/// The era a request is served in.
enum Era<'a> {
    Modern {
        caps: &'a Value,
        log_level: Option<LogLevel>,
    },
    Legacy(&'a LegacySession),
}

/// The protocol engine shared by all transports.
#[derive(Debug, Clone)]
pub struct Protocol {
    host: Host,
    settings: Arc<ProtocolSettings>,
    server_info: Value,
}

fn parse_level(v: Option<&Value>) -> Option<LogLevel> {
    serde_json::from_value(v?.clone()).ok()
}

impl Protocol {
    /// A protocol engine over `host`.
    pub fn new(host: Host, settings: ProtocolSettings) -> Self {
        Protocol {
            host,
            settings: Arc::new(settings),
            server_info: json!({ "name": "mcp-host", "version": env!("CARGO_PKG_VERSION") }),
        }
    }

    /// The host behind it.
    pub fn host(&self) -> &Host {
        &self.host
    }

    fn capabilities(&self) -> Value {
        json!({ "tools": { "listChanged": true }, "logging": {} })
    }

    fn modern_meta(&self) -> Value {
        let mut meta = Map::new();
        meta.insert(META_SERVER_INFO.into(), self.server_info.clone());
        Value::Object(meta)
    }

    fn cache_scope(ex: &Exchange) -> &'static str {
        if ex.cache_private || ex.agent.is_some() {
            "private"
        } else {
            "public"
        }
    }

    /// Handle one request.
    pub async fn handle_request(
        &self,
        id: Value,
        method: &str,
        params: Map<String, Value>,
        ex: Exchange,
    ) -> Reply {
        let meta = params.get("_meta").and_then(Value::as_object);
        let modern = meta.is_some_and(|m| m.contains_key(META_VERSION))
            || ex
                .headers
                .as_ref()
                .and_then(|h| h.protocol_version.as_deref())
                == Some(MODERN_VERSION)
                && ex.session.is_none();
        if !modern {
            if method == "initialize" {
                return self.initialize(&id, &params, &ex);
            }
            if let Some(session) = ex.session.clone() {
                return self.legacy(&id, method, &params, &ex, &session).await;
            }
        }
        self.modern(&id, method, &params, &ex).await
    }

    fn initialize(&self, id: &Value, params: &Map<String, Value>, ex: &Exchange) -> Reply {
        if ex.session.is_some() {
            return Reply::error(
                id,
                &RpcError::invalid_request("this session is already initialized"),
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
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info,
        });
        if let Some(text) = &self.settings.instructions {
            result["instructions"] = json!(text);
        }
        Reply::Initialized {
            body: response(id, result),
            version: version.to_owned(),
            capabilities: params.get("capabilities").cloned().unwrap_or(json!({})),
        }
    }

    async fn legacy(
        &self,
        id: &Value,
        method: &str,
        params: &Map<String, Value>,
        ex: &Exchange,
        session: &LegacySession,
    ) -> Reply {
        // JSON-RPC errors go out with HTTP 200 here: a legacy client reads 404 as "session gone".
        let err = |e: RpcError| {
            Reply::error(
                id,
                &RpcError {
                    http_status: 200,
                    ..e
                },
            )
        };
        if let Some(header) = ex
            .headers
            .as_ref()
            .and_then(|h| h.protocol_version.as_deref())
            && header != session.version
            && !LEGACY_VERSIONS.contains(&header)
        {
            return Reply::error(
                id,
                &RpcError::invalid_request(format!(
                    "unsupported MCP-Protocol-Version {header:?} (this session speaks {})",
                    session.version
                )),
            );
        }
        match method {
            "ping" => Reply::ok(id, json!({})),
            "logging/setLevel" => match parse_level(params.get("level")) {
                Some(level) => {
                    session.set_log_level(level);
                    Reply::ok(id, json!({}))
                }
                None => err(RpcError::invalid_params(
                    "level must be one of debug, info, notice, warning, error, critical, alert, emergency",
                )),
            },
            "tools/list" => match self.list_tools(params, ex.agent.as_deref()) {
                Ok((tools, next)) => {
                    let mut result = json!({ "tools": tools });
                    if let Some(next) = next {
                        result["nextCursor"] = json!(next);
                    }
                    Reply::ok(id, result)
                }
                Err(e) => err(e),
            },
            "tools/call" => match self.call_tool(params, ex, Era::Legacy(session)).await {
                Ok(result) => Reply::ok(id, result),
                Err(e) if e.http_status == 401 => Reply::error(id, &e),
                Err(e) => err(e),
            },
            other => err(RpcError::method_not_found(other)),
        }
    }

    async fn modern(
        &self,
        id: &Value,
        method: &str,
        params: &Map<String, Value>,
        ex: &Exchange,
    ) -> Reply {
        let meta = params.get("_meta").and_then(Value::as_object);
        // The order of these checks follows the specification's examples and the conformance suite.
        if let Some(h) = &ex.headers {
            if h.protocol_version.is_none() {
                return Reply::error(
                    id,
                    &RpcError::new(
                        jsonrpc::HEADER_MISMATCH,
                        "missing MCP-Protocol-Version header",
                        400,
                    ),
                );
            }
            if h.method.is_none() {
                return Reply::error(
                    id,
                    &RpcError::new(jsonrpc::HEADER_MISMATCH, "missing Mcp-Method header", 400),
                );
            }
        }
        let version = meta
            .and_then(|m| m.get(META_VERSION))
            .and_then(Value::as_str);
        let caps = meta
            .and_then(|m| m.get(META_CAPS))
            .filter(|c| c.is_object());
        let (Some(version), Some(caps)) = (version, caps) else {
            return Reply::error(
                id,
                &RpcError::invalid_params(format!(
                    "params._meta must carry \"{META_VERSION}\" (a string) and \"{META_CAPS}\" (an object); \
                     a 2025 client must send initialize first"
                )),
            );
        };
        if let Some(h) = &ex.headers {
            let mismatch = |header: &str, sent: Option<&str>, body: &str, value: &str| {
                Reply::error(
                    id,
                    &RpcError::new(
                        jsonrpc::HEADER_MISMATCH,
                        format!(
                            "Header mismatch: {header} header {:?} does not match {body} {value:?}",
                            sent.unwrap_or("")
                        ),
                        400,
                    ),
                )
            };
            if h.protocol_version.as_deref().map(str::trim) != Some(version) {
                let sent = h.protocol_version.as_deref();
                return mismatch(
                    "MCP-Protocol-Version",
                    sent,
                    "_meta protocolVersion",
                    version,
                );
            }
            if h.method.as_deref().map(str::trim) != Some(method) {
                return mismatch("Mcp-Method", h.method.as_deref(), "body method", method);
            }
            if method == "tools/call" {
                let body_name = params.get("name").and_then(Value::as_str);
                let header_name = h.name.as_deref().map(str::trim);
                if header_name.is_none() || header_name != body_name {
                    let body = body_name.unwrap_or("");
                    return mismatch("Mcp-Name", header_name, "body name", body);
                }
            }
        }
        if version != MODERN_VERSION {
            let mut supported = vec![MODERN_VERSION];
            supported.extend_from_slice(LEGACY_VERSIONS);
            return Reply::error(
                id,
                &RpcError::new(
                    jsonrpc::UNSUPPORTED_VERSION,
                    format!("Unsupported protocol version {version:?}"),
                    400,
                )
                .with_data(json!({ "supported": supported, "requested": version })),
            );
        }
        let log_level = parse_level(meta.and_then(|m| m.get(META_LOG_LEVEL)));
        let with_meta = |mut result: Value| {
            result["resultType"] = json!("complete");
            match result.get_mut("_meta").and_then(Value::as_object_mut) {
                Some(m) => {
                    m.insert(META_SERVER_INFO.into(), self.server_info.clone());
                }
                None => result["_meta"] = self.modern_meta(),
            }
            result
        };
        match method {
            "server/discover" => {
                let mut supported = vec![MODERN_VERSION];
                supported.extend_from_slice(LEGACY_VERSIONS);
                let mut result = json!({
                    "supportedVersions": supported,
                    "capabilities": self.capabilities(),
                    "ttlMs": self.settings.ttl_ms,
                    "cacheScope": Self::cache_scope(ex),
                });
                if let Some(text) = &self.settings.instructions {
                    result["instructions"] = json!(text);
                }
                Reply::ok(id, with_meta(result))
            }
            "tools/list" => match self.list_tools(params, ex.agent.as_deref()) {
                Ok((tools, next)) => {
                    let mut result = json!({
                        "ttlMs": self.settings.ttl_ms,
                        "cacheScope": Self::cache_scope(ex),
                    });
                    // Moved in: `json!` would deep-copy the whole page through `to_value`.
                    result["tools"] = Value::Array(tools);
                    if let Some(next) = next {
                        result["nextCursor"] = json!(next);
                    }
                    Reply::ok(id, with_meta(result))
                }
                Err(e) => Reply::error(id, &e),
            },
            "tools/call" => match self
                .call_tool(params, ex, Era::Modern { caps, log_level })
                .await
            {
                Ok(result) => Reply::ok(id, with_meta(result)),
                Err(e) => Reply::error(id, &e),
            },
            "subscriptions/listen" => {
                let wants_tools = params
                    .get("notifications")
                    .and_then(|n| n.get("toolsListChanged"))
                    .and_then(Value::as_bool)
                    == Some(true);
                let accepted = if wants_tools {
                    json!({ "toolsListChanged": true })
                } else {
                    json!({})
                };
                Reply::Listen {
                    id: id.clone(),
                    accepted,
                }
            }
            other => Reply::error(id, &RpcError::method_not_found(other)),
        }
    }

    /// One page of the tool list (name order) and the cursor of the next.
    fn list_tools(
        &self,
        params: &Map<String, Value>,
        agent: Option<&crate::access::agents::Agent>,
    ) -> Result<(Vec<Value>, Option<String>), RpcError> {
        let after = match params.get("cursor") {
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
        let registry = self.host.registry();
        let mut page = Vec::new();
        let mut next = None;
        for tool in registry
            .tools()
            .filter(|t| after.as_deref().is_none_or(|a| t.name.as_str() > a))
            .filter(|t| agent.is_none_or(|a| a.permits(&t.name)))
        {
            if page.len() == self.settings.page_size {
                if let Some(last) = page.last().and_then(|t: &Value| t["name"].as_str()) {
                    next = Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(last));
                }
                break;
            }
            page.push(tool.listing.clone());
        }
        Ok((page, next))
    }

    async fn call_tool(
        &self,
        params: &Map<String, Value>,
        ex: &Exchange,
        era: Era<'_>,
    ) -> Result<Value, RpcError> {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err(RpcError::invalid_params(
                "tools/call needs a string \"name\"",
            ));
        };
        let args = params.get("arguments").filter(|a| !a.is_null()).cloned();
        // A tool the agent cannot see does not exist for it: the same error as an unknown tool.
        let Some(tool) = self
            .host
            .registry()
            .get(name)
            .filter(|_| ex.agent.as_ref().is_none_or(|a| a.permits(name)))
            .cloned()
        else {
            return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
        };
        if let (Era::Modern { .. }, Some(headers)) = (&era, &ex.headers) {
            check_param_headers(&tool.descriptor.input_schema, args.as_ref(), headers)?;
        }
        let (caps, log_level) = match &era {
            Era::Modern { caps, log_level } => (*caps, *log_level),
            Era::Legacy(s) => (&s.capabilities, Some(s.log_level())),
        };
        if let Some(Value::Object(required)) = &tool.descriptor.required_client_capabilities {
            let missing: Map<String, Value> = required
                .iter()
                .filter(|(k, _)| caps.get(k.as_str()).is_none())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !missing.is_empty() {
                return Err(RpcError::new(
                    jsonrpc::MISSING_CLIENT_CAPABILITY,
                    format!(
                        "Missing required client capability: tool {name} needs {}",
                        missing.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    400,
                )
                .with_data(json!({ "requiredCapabilities": missing })));
            }
        }
        let progress_token = params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_number())
            .cloned();
        let events = ex
            .notifier
            .as_ref()
            .and_then(|n| event_sink(Arc::clone(n), progress_token, log_level));
        let opts = CallOptions {
            caller: ex.caller.clone(),
            cancel: ex.cancel.clone(),
            events,
        };
        match self.host.call_tool(tool, args, opts).await {
            Ok(result) => Ok(result),
            Err(CallError::UnknownTool(n)) => {
                Err(RpcError::invalid_params(format!("Unknown tool: {n}")))
            }
            Err(CallError::CallerRequired(n)) => Err(RpcError::new(
                jsonrpc::UNAUTHORIZED,
                format!("Authentication required: tool {n} needs a verified caller"),
                401,
            )),
        }
    }

    /// The `notifications/subscriptions/acknowledged` message that opens a listen stream.
    pub fn listen_ack(id: &Value, accepted: &Value) -> Value {
        jsonrpc::notification(
            "notifications/subscriptions/acknowledged",
            json!({ "notifications": accepted, "_meta": { META_SUBSCRIPTION: id } }),
        )
    }

    /// A `tools/list_changed` notification for a listen stream (tagged) or a legacy session (untagged).
    pub fn tools_changed(subscription: Option<&Value>) -> Value {
        match subscription {
            Some(id) => jsonrpc::notification(
                "notifications/tools/list_changed",
                json!({ "_meta": { META_SUBSCRIPTION: id } }),
            ),
            None => json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" }),
        }
    }

    /// The result that ends a listen stream gracefully.
    pub fn listen_end(&self, id: &Value) -> Value {
        response(
            id,
            json!({ "resultType": "complete", "_meta": { META_SUBSCRIPTION: id, META_SERVER_INFO: self.server_info } }),
        )
    }
}

/// Turn call events into notifications: progress only with a token and strictly increasing, logs
/// only at or above the requested level.
fn event_sink(
    notifier: Notifier,
    token: Option<Value>,
    level: Option<LogLevel>,
) -> Option<EventSink> {
    if token.is_none() && level.is_none() {
        return None;
    }
    let last = Mutex::new(f64::NEG_INFINITY);
    Some(Arc::new(move |event| match event {
        CallEvent::Progress {
            progress,
            total,
            message,
        } => {
            let Some(token) = &token else { return };
            {
                let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
                // Strictly increasing (NaN never passes).
                if progress.partial_cmp(&*last) != Some(std::cmp::Ordering::Greater) {
                    return;
                }
                *last = progress;
            }
            let mut params = json!({ "progressToken": token, "progress": progress });
            if let Some(total) = total {
                params["total"] = json!(total);
            }
            if let Some(message) = message {
                params["message"] = json!(message);
            }
            notifier(jsonrpc::notification("notifications/progress", params));
        }
        CallEvent::Log {
            level: l,
            message,
            logger,
        } => {
            if level.is_some_and(|min| l >= min) {
                notifier(jsonrpc::notification(
                    "notifications/message",
                    json!({ "level": l.as_str(), "logger": logger, "data": message }),
                ));
            }
        }
    }))
}

/// The request id a `notifications/cancelled` names.
pub fn cancelled_request(params: &Map<String, Value>) -> Option<&Value> {
    params.get("requestId")
}
