//! JSON-RPC 2.0 framing: classifying incoming messages and building responses and errors.
//!
//! Every error has a kind ([`ErrorKind`]) that decides both its JSON-RPC code and its HTTP status, so
//! transports never have to know which protocol rule produced an error.

use serde_json::{Map, Value, json};

/// Parse error (invalid JSON).
pub const PARSE_ERROR: i64 = -32700;
/// Not a valid JSON-RPC request.
pub const INVALID_REQUEST: i64 = -32600;
/// Unknown or unsupported method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid parameters (also: unknown tool, bad cursor, missing 2026 `_meta`).
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// Authentication required (implementation-defined, outside the spec-reserved -32020..-32099).
pub const UNAUTHORIZED: i64 = -32001;
/// Too many requests from one caller (implementation-defined, outside -32020..-32099); `data`
/// carries `retryAfterSecs`.
pub const TOO_MANY_REQUESTS: i64 = -32010;
/// 2026: an HTTP header disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026: the request needs a client capability the client did not declare.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// 2026: unsupported protocol version.
pub const UNSUPPORTED_VERSION: i64 = -32022;
/// 2025: no such resource (2026 uses -32602 with `data.uri` instead).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// 2025-11-25: the request needs a URL elicitation completed first (`URLElicitationRequiredError`).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// What went wrong. The kind alone fixes the JSON-RPC code ([`ErrorKind::code`]) and the HTTP
/// status ([`ErrorKind::http_status`]): no error is built with a status of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The message is not JSON (-32700, 400).
    Parse,
    /// Not a valid JSON-RPC request, or not valid here (-32600, 400).
    InvalidRequest,
    /// Unknown method, or one the negotiated revision does not have (-32601, 404).
    MethodNotFound,
    /// Invalid parameters: unknown tool, bad cursor, missing 2026 `_meta` (-32602, 400).
    InvalidParams,
    /// The server failed (-32603, 500).
    Internal,
    /// No verified caller where one is needed (-32001, 401 with a challenge).
    Unauthorized,
    /// Credentials that may not use this endpoint, or a refused Origin/Host (-32600, 403).
    Forbidden,
    /// No such session or agent (-32600, 404).
    NotFound,
    /// The request body is over the limit (-32600, 413).
    PayloadTooLarge,
    /// The request body is not JSON (-32600, 415).
    UnsupportedMediaType,
    /// The request body did not arrive in time (-32600, 408).
    RequestTimeout,
    /// The caller has too many calls in flight or is over its rate (-32010, 429 with
    /// `Retry-After` from `data.retryAfterSecs`).
    TooManyRequests,
    /// 2026: an HTTP header disagrees with the body (-32020, 400).
    HeaderMismatch,
    /// 2026: a client capability the request needs was not declared (-32021, 400).
    MissingCapability,
    /// 2026: the protocol version is not supported (-32022, 400).
    UnsupportedVersion,
    /// 2025: no such resource (-32002, 404; 200 inside a session). 2026 answers an unknown resource
    /// with [`ErrorKind::InvalidParams`].
    ResourceNotFound,
    /// What the request needs is unavailable for now, e.g. the store of tasks and sessions
    /// (-32603, 503).
    Unavailable,
    /// 2025-11-25: the request needs a URL elicitation completed first (-32042; `data` holds
    /// `elicitations`).
    UrlElicitationRequired,
}

impl ErrorKind {
    /// The JSON-RPC error code.
    pub fn code(self) -> i64 {
        match self {
            ErrorKind::Parse => PARSE_ERROR,
            ErrorKind::InvalidRequest
            | ErrorKind::Forbidden
            | ErrorKind::NotFound
            | ErrorKind::PayloadTooLarge
            | ErrorKind::UnsupportedMediaType
            | ErrorKind::RequestTimeout => INVALID_REQUEST,
            ErrorKind::TooManyRequests => TOO_MANY_REQUESTS,
            ErrorKind::MethodNotFound => METHOD_NOT_FOUND,
            ErrorKind::InvalidParams => INVALID_PARAMS,
            ErrorKind::Internal | ErrorKind::Unavailable => INTERNAL_ERROR,
            ErrorKind::Unauthorized => UNAUTHORIZED,
            ErrorKind::HeaderMismatch => HEADER_MISMATCH,
            ErrorKind::MissingCapability => MISSING_CLIENT_CAPABILITY,
            ErrorKind::UnsupportedVersion => UNSUPPORTED_VERSION,
            ErrorKind::ResourceNotFound => RESOURCE_NOT_FOUND,
            ErrorKind::UrlElicitationRequired => URL_ELICITATION_REQUIRED,
        }
    }

    /// The HTTP status of this error on Streamable HTTP, the one place that decides it.
    ///
    /// Inside a legacy (2025) session a method's error goes out as 200 (a legacy client reads a
    /// 404 as "session gone"); what the transport or the session check refused keeps its status,
    /// and so does 401, which carries the authentication challenge.
    pub fn http_status(self, in_legacy_session: bool) -> u16 {
        let status = match self {
            ErrorKind::Parse
            | ErrorKind::InvalidRequest
            | ErrorKind::InvalidParams
            | ErrorKind::HeaderMismatch
            | ErrorKind::MissingCapability
            | ErrorKind::UnsupportedVersion
            | ErrorKind::UrlElicitationRequired => 400,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::MethodNotFound | ErrorKind::NotFound | ErrorKind::ResourceNotFound => 404,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::UnsupportedMediaType => 415,
            ErrorKind::TooManyRequests => 429,
            ErrorKind::Internal => 500,
            ErrorKind::Unavailable => 503,
        };
        let keeps_status = matches!(
            self,
            ErrorKind::Parse
                | ErrorKind::InvalidRequest
                | ErrorKind::Unauthorized
                | ErrorKind::Forbidden
                | ErrorKind::NotFound
                | ErrorKind::PayloadTooLarge
                | ErrorKind::UnsupportedMediaType
                | ErrorKind::RequestTimeout
                | ErrorKind::TooManyRequests
                | ErrorKind::Unavailable
        );
        if in_legacy_session && !keeps_status {
            200
        } else {
            status
        }
    }
}

/// A JSON-RPC error: its kind, a message for humans, and optional structured data.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} ({})", kind.code())]
pub struct RpcError {
    /// What went wrong (fixes the code and the HTTP status).
    pub kind: ErrorKind,
    /// Human-readable message.
    pub message: String,
    /// Optional structured data.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RpcError {
            kind,
            message: message.into(),
            data: None,
        }
    }

    /// Attach `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The JSON-RPC code.
    pub fn code(&self) -> i64 {
        self.kind.code()
    }

    /// [`ErrorKind::Parse`].
    pub fn parse(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Parse, message)
    }

    /// [`ErrorKind::InvalidRequest`].
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }

    /// [`ErrorKind::MethodNotFound`] for `method`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            ErrorKind::MethodNotFound,
            format!("Method not found: {method}"),
        )
    }

    /// [`ErrorKind::InvalidParams`].
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidParams, message)
    }

    /// [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// [`ErrorKind::TooManyRequests`], telling the client when to retry.
    pub fn too_many_requests(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self::new(ErrorKind::TooManyRequests, message)
            .with_data(json!({ "retryAfterSecs": retry_after_secs }))
    }

    /// The seconds after which a [`ErrorKind::TooManyRequests`] may be retried.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.data.as_ref()?.get("retryAfterSecs")?.as_u64()
    }

    /// The error member of a response.
    pub fn to_value(&self) -> Value {
        let mut error = json!({ "code": self.code(), "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// A classified incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request (has an id).
    Request {
        /// The id (string or number; never null).
        id: Value,
        /// The method.
        method: String,
        /// The params object (`{}` when absent).
        params: Map<String, Value>,
    },
    /// A notification (no id).
    Notification {
        /// The method.
        method: String,
        /// The params object (`{}` when absent).
        params: Map<String, Value>,
    },
    /// A response from the client to a request of ours.
    Response {
        /// The id of our request.
        id: Value,
        /// Its `result`, or its `error` object.
        outcome: Result<Value, Value>,
    },
}

/// Classify one parsed JSON value. `Err` carries the id to answer with (null when unknown).
pub fn classify(value: Value) -> Result<Incoming, (Value, RpcError)> {
    let Value::Object(mut obj) = value else {
        return Err(not_an_object());
    };
    classify_members(Members {
        jsonrpc_is_2_0: obj.get("jsonrpc").and_then(Value::as_str) == Some("2.0"),
        id: obj.remove("id"),
        method: obj.remove("method"),
        params: obj.remove("params"),
        result: obj.remove("result"),
        error: obj.remove("error"),
    })
}

fn not_an_object() -> (Value, RpcError) {
    (
        Value::Null,
        RpcError::invalid_request("a JSON-RPC message must be an object"),
    )
}

/// The members of a message object that decide what it is (each as written, when present).
#[derive(Default)]
struct Members {
    jsonrpc_is_2_0: bool,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
}

/// The one set of rules: a request, a notification, a response, or what is wrong with it.
fn classify_members(m: Members) -> Result<Incoming, (Value, RpcError)> {
    let id_for_error = m.id.clone().unwrap_or(Value::Null);
    if !m.jsonrpc_is_2_0 {
        return Err((
            id_for_error,
            RpcError::invalid_request("\"jsonrpc\" must be \"2.0\""),
        ));
    }
    let method = match m.method {
        Some(Value::String(method)) => method,
        Some(_) => {
            return Err((
                id_for_error,
                RpcError::invalid_request("\"method\" must be a string"),
            ));
        }
        None if m.result.is_some() || m.error.is_some() => {
            let outcome = match (m.result, m.error) {
                (_, Some(error)) => Err(error),
                (Some(result), None) => Ok(result),
                (None, None) => unreachable!("one of them is present"),
            };
            return Ok(Incoming::Response {
                id: id_for_error,
                outcome,
            });
        }
        None => {
            return Err((
                id_for_error,
                RpcError::invalid_request("missing \"method\""),
            ));
        }
    };
    let params = match m.params {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err((
                id_for_error,
                RpcError::invalid_params("\"params\" must be an object"),
            ));
        }
    };
    match m.id {
        None => Ok(Incoming::Notification { method, params }),
        Some(id @ (Value::String(_) | Value::Number(_))) => {
            Ok(Incoming::Request { id, method, params })
        }
        Some(_) => Err((
            Value::Null,
            RpcError::invalid_request("\"id\" must be a string or a number"),
        )),
    }
}

/// A message as read off the wire.
#[derive(Debug, PartialEq)]
pub enum Received {
    /// One message.
    One {
        /// What it is, or what is wrong with it (with the id to answer with).
        message: Result<Incoming, (Value, RpcError)>,
        /// Its `id` as written (null when absent): for an error answered before it is routed.
        id: Value,
        /// Its `params._meta` names a protocol version: a 2026 request, which no session serves.
        modern: bool,
    },
    /// A JSON-RPC batch: its items, each classified when it runs.
    Batch(Vec<Value>),
}

impl Received {
    /// A message already parsed (a batch's item).
    pub fn of(value: Value) -> Received {
        match value {
            Value::Array(items) => Received::Batch(items),
            value => {
                let id = value.get("id").cloned().unwrap_or(Value::Null);
                let modern = value
                    .get("params")
                    .is_some_and(|p| names_protocol_version(p.get("_meta")));
                Received::One {
                    message: classify(value),
                    id,
                    modern,
                }
            }
        }
    }
}

fn names_protocol_version(meta: Option<&Value>) -> bool {
    meta.and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .is_some()
}

/// Parse and classify a message's text; `Err` when it is not JSON (answered with
/// [`RpcError::parse`]). A message object is read member by member straight into what it is,
/// without building a tree of the whole message first (only its `id`, `method`, `params`,
/// `result` and `error` are kept); anything else is read as a tree, as the rules for it need.
pub fn read(text: &str) -> Result<Received, serde_json::Error> {
    if !text.trim_start().starts_with('{') {
        return serde_json::from_str::<Value>(text).map(Received::of);
    }
    let WireMessage(members) = serde_json::from_str(text)?;
    let id = members.id.clone().unwrap_or(Value::Null);
    let modern = (members.params.as_ref()).is_some_and(|p| names_protocol_version(p.get("_meta")));
    Ok(Received::One {
        message: classify_members(members),
        id,
        modern,
    })
}

/// A message object as [`read`] takes it: members in any order, a repeated one taking its last
/// value (as when the object is read as a tree), unknown ones skipped.
struct WireMessage(Members);

impl<'de> serde::Deserialize<'de> for WireMessage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = WireMessage;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON-RPC message object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut m = Members::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match &*key {
                        "jsonrpc" => {
                            let raw: &'de serde_json::value::RawValue = map.next_value()?;
                            m.jsonrpc_is_2_0 = raw.get() == "\"2.0\""
                                || serde_json::from_str::<Value>(raw.get())
                                    .is_ok_and(|v| v.as_str() == Some("2.0"));
                        }
                        "id" => m.id = Some(map.next_value()?),
                        "method" => m.method = Some(map.next_value()?),
                        "params" => m.params = Some(map.next_value()?),
                        "result" => m.result = Some(map.next_value()?),
                        "error" => m.error = Some(map.next_value()?),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(WireMessage(m))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// A success response.
pub fn response(id: &Value, result: Value) -> Value {
    envelope(id, "result", result)
}

/// `{"jsonrpc": "2.0", "id": id, member: value}`. Built by hand: `json!` would deep-copy `value`
/// (a whole tool result) through `serde_json::to_value`.
fn envelope(id: &Value, member: &str, value: Value) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    m.insert("id".into(), id.clone());
    m.insert(member.into(), value);
    Value::Object(m)
}

/// An error response.
pub fn error_response(id: &Value, error: &RpcError) -> Value {
    envelope(id, "error", error.to_value())
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    m.insert("method".into(), Value::from(method));
    m.insert("params".into(), params);
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`read`] makes of a message's text, as comparable data.
    fn read_text(text: &str) -> (Result<Incoming, (Value, RpcError)>, Value, bool) {
        match read(text).unwrap() {
            Received::One {
                message,
                id,
                modern,
            } => (message, id, modern),
            Received::Batch(items) => panic!("a batch: {items:?}"),
        }
    }

    #[test]
    fn reading_a_message_member_by_member_decides_as_classifying_its_tree_does() {
        let messages = [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#" {"method":"tools/call","id":"a","jsonrpc":"2.0","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"x":1},"error":{"code":1}}"#,
            r#"{"jsonrpc":"1.0","id":7,"method":"x"}"#,
            r#"{"jsonrpc":2.0,"id":7,"method":"x"}"#,
            r#"{"jsonrpc":"2\u002e0","id":7,"method":"x"}"#,
            r#"{"id":7,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":5}"#,
            r#"{"jsonrpc":"2.0","id":7}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"x","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"x","params":null}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x","params":{"_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x","method":"y","extra":[{"deep":true}]}"#,
            r#"{"jsonrpc":"1.0","jsonrpc":"2.0","id":1.5,"method":"x"}"#,
        ];
        for text in messages {
            let tree = match Received::of(serde_json::from_str(text).unwrap()) {
                Received::One {
                    message,
                    id,
                    modern,
                } => (message, id, modern),
                Received::Batch(_) => unreachable!(),
            };
            assert_eq!(read_text(text), tree, "{text}");
        }
    }

    #[test]
    fn reading_anything_but_an_object_keeps_the_rules_for_it() {
        assert!(matches!(read("[1, {}]").unwrap(), Received::Batch(items) if items.len() == 2));
        let (message, id, modern) = read_text("\"ping\"");
        assert_eq!(message.unwrap_err().1.code(), INVALID_REQUEST);
        assert_eq!((id, modern), (Value::Null, false));
        assert!(read("{\"jsonrpc\": ").is_err());
        assert!(read("{} trailing").is_err());
        assert!(read("").is_err());
    }

    #[test]
    fn classifies_requests_notifications_and_invalid_messages() {
        let r = classify(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).unwrap();
        assert!(matches!(r, Incoming::Request { ref method, .. } if method == "ping"));
        let n = classify(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        assert!(matches!(n, Incoming::Notification { .. }));
        let (id, e) = classify(json!({"jsonrpc": "1.0", "id": 7, "method": "x"})).unwrap_err();
        assert_eq!((id, e.code()), (json!(7), INVALID_REQUEST));
        let (_, e) = classify(json!([1])).unwrap_err();
        assert_eq!(e.code(), INVALID_REQUEST);
        let (_, e) = classify(json!({"jsonrpc": "2.0", "id": null, "method": "x"})).unwrap_err();
        assert_eq!(e.code(), INVALID_REQUEST);
        let (_, e) =
            classify(json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]})).unwrap_err();
        assert_eq!(e.code(), INVALID_PARAMS);
    }
}
