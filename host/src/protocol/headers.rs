//! The HTTP headers a 2026-07-28 request mirrors from its body (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`, `Mcp-Param-{Name}`), their `=?base64?…?=` encoding, and the checks that
//! they agree with the body. On stdio there are none.

use base64::Engine as _;
use serde_json::Value;

use super::jsonrpc::{ErrorKind, RpcError};
use crate::registry::HeaderParam;

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
    /// W3C trace context: `traceparent`, and `tracestate` (the client's trace, for the request's
    /// span).
    pub trace_context: Option<(String, Option<String>)>,
}

fn mismatch(message: String) -> RpcError {
    RpcError::new(ErrorKind::HeaderMismatch, message)
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
            .ok_or_else(|| mismatch("invalid base64 in header value".into())),
        None => Ok(value.to_owned()),
    }
}

/// The body member that `Mcp-Name` mirrors for `method`, if it has one.
pub fn named_member(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

impl HttpHeaders {
    /// Check the headers of a 2026 request against its body: both version and method headers are
    /// present and equal to the body's, and `Mcp-Name` names what the body names.
    pub fn check(
        &self,
        method: &str,
        version: &str,
        params: &serde_json::Map<String, Value>,
    ) -> Result<(), RpcError> {
        let differs = |header: &str, sent: Option<&str>, body: &str, value: &str| {
            mismatch(format!(
                "Header mismatch: {header} header {:?} does not match {body} {value:?}",
                sent.unwrap_or("")
            ))
        };
        if self.protocol_version.as_deref().map(str::trim) != Some(version) {
            let sent = self.protocol_version.as_deref();
            return Err(differs(
                "MCP-Protocol-Version",
                sent,
                "_meta protocolVersion",
                version,
            ));
        }
        if self.method.as_deref().map(str::trim) != Some(method) {
            return Err(differs(
                "Mcp-Method",
                self.method.as_deref(),
                "body method",
                method,
            ));
        }
        if let Some(member) = named_member(method) {
            let body_name = params.get(member).and_then(Value::as_str);
            let header_name = self.name.as_deref().map(str::trim);
            if header_name.is_none() || header_name != body_name {
                let body = body_name.unwrap_or("");
                return Err(differs(
                    "Mcp-Name",
                    header_name,
                    &format!("body {member}"),
                    body,
                ));
            }
        }
        Ok(())
    }

    /// The headers a 2026 request must carry before its body is even looked at.
    pub fn check_present(&self) -> Result<(), RpcError> {
        if self.protocol_version.is_none() {
            return Err(mismatch("missing MCP-Protocol-Version header".into()));
        }
        if self.method.is_none() {
            return Err(mismatch("missing Mcp-Method header".into()));
        }
        Ok(())
    }

    /// Check `Mcp-Param-{Name}` headers against the arguments the tool mirrors in them (those whose
    /// schema carries `x-mcp-header`: [`crate::registry::Tool::header_params`]).
    pub fn check_params(
        &self,
        declared: &[HeaderParam],
        args: Option<&Value>,
    ) -> Result<(), RpcError> {
        for HeaderParam {
            argument: param,
            header: name,
        } in declared
        {
            let header = self
                .params
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim());
            let body = args
                .and_then(|a| a.get(param.as_str()))
                .filter(|v| !v.is_null());
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_header_values_are_decoded_and_bad_ones_rejected() {
        assert_eq!(decode_header_value("=?base64?SGVsbG8=?=").unwrap(), "Hello");
        assert_eq!(decode_header_value("plain").unwrap(), "plain");
        assert!(decode_header_value("=?base64?!!!?=").is_err());
        assert!(
            decode_header_value("=?base64?SGVsbG8?=").is_err(),
            "padding is required"
        );
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8=").unwrap(),
            "=?base64?SGVsbG8="
        );
    }
}
