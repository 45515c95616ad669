//! JSON-RPC 2.0 framing: classifying incoming messages and building responses and errors.
//!
//! Each error carries the HTTP status the Streamable HTTP transport must use for it, so transports
//! never have to know which protocol rule produced an error.

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
/// 2026: an HTTP header disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// 2026: the request needs a client capability the client did not declare.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// 2026: unsupported protocol version.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// A JSON-RPC error with the HTTP status that goes with it.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// JSON-RPC error code.
    pub code: i64,
    /// Human-readable message.
    pub message: String,
    /// Optional structured data.
    pub data: Option<Value>,
    /// The HTTP status for Streamable HTTP.
    pub http_status: u16,
}

impl RpcError {
    /// An error with an explicit status.
    pub fn new(code: i64, message: impl Into<String>, http_status: u16) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
            http_status,
        }
    }

    /// Attach `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32700, HTTP 400.
    pub fn parse(message: impl Into<String>) -> Self {
        Self::new(PARSE_ERROR, message, 400)
    }

    /// -32600, HTTP 400.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(INVALID_REQUEST, message, 400)
    }

    /// -32601, HTTP 404.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("Method not found: {method}"), 404)
    }

    /// -32602, HTTP 400 (HTTP 200 would also be valid JSON-RPC, but 2026 asks for 400).
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message, 400)
    }

    /// -32603, HTTP 500.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message, 500)
    }

    /// The error member of a response.
    pub fn to_value(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
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
    /// A response from the client (we send no requests, so these are ignored).
    Response,
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
            return Ok(Incoming::Response);
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
        assert_eq!((id, e.code), (json!(7), INVALID_REQUEST));
        let (_, e) = classify(json!([1])).unwrap_err();
        assert_eq!(e.code, INVALID_REQUEST);
        let (_, e) = classify(json!({"jsonrpc": "2.0", "id": null, "method": "x"})).unwrap_err();
        assert_eq!(e.code, INVALID_REQUEST);
        let (_, e) =
            classify(json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]})).unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
    }
}
