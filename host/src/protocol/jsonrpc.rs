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
            | ErrorKind::UnsupportedVersion => 400,
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
        return Err((
            Value::Null,
            RpcError::invalid_request("a JSON-RPC message must be an object"),
        ));
    };
    let id = obj.remove("id");
    let id_for_error = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((
            id_for_error,
            RpcError::invalid_request("\"jsonrpc\" must be \"2.0\""),
        ));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return Err((
                id_for_error,
                RpcError::invalid_request("\"method\" must be a string"),
            ));
        }
        None if obj.contains_key("result") || obj.contains_key("error") => {
            let outcome = match (obj.remove("result"), obj.remove("error")) {
                (Some(result), None) => Ok(result),
                (_, Some(error)) => Err(error),
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
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err((
                id_for_error,
                RpcError::invalid_params("\"params\" must be an object"),
            ));
        }
    };
    match id {
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
