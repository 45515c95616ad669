//! What a tool call answered: the plugin's `CallToolResult` kept as the JSON text it wrote —
//! checked, never parsed into a tree on the way to the client — or as the JSON tree its backend
//! read (an upstream server's answer), or a result the host made itself (a refusal, a timeout).
//! The protocol writes a plain result straight into its response, adding what the era needs
//! ([`ToolResult::into_plain`]), and a tree as it serialises it; whoever needs the tree asks for
//! it ([`ToolResult::into_value`]).

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// A `CallToolResult`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult(Repr);

#[derive(Debug, Clone, PartialEq)]
enum Repr {
    /// As the plugin wrote it: a JSON object whose `content` is an array.
    Text {
        json: String,
        is_error: bool,
        /// It has neither `_meta` nor `resultType`: members can be appended as they are.
        plain: bool,
    },
    /// Made by the host, or read as JSON by the backend (an upstream's answer).
    Value(Value),
}

/// The members of a result the host looks at; the rest is checked to be JSON and skipped.
#[derive(Deserialize)]
struct Members<'a> {
    #[serde(borrow)]
    content: &'a RawValue,
    #[serde(rename = "isError", borrow, default)]
    is_error: Option<&'a RawValue>,
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<&'a RawValue>,
    #[serde(rename = "resultType", borrow, default)]
    result_type: Option<&'a RawValue>,
}

impl ToolResult {
    /// Check what a plugin returned: a JSON object with a `content` array (`None` otherwise).
    /// Nothing is copied or built; the text is kept as it is.
    pub fn from_plugin(json: String) -> Option<ToolResult> {
        let members: Members<'_> = serde_json::from_str(&json).ok()?;
        if !members.content.get().starts_with('[') {
            return None;
        }
        let is_error = members.is_error.is_some_and(|e| e.get() == "true");
        let plain = members.meta.is_none() && members.result_type.is_none();
        Some(ToolResult(Repr::Text {
            json,
            is_error,
            plain,
        }))
    }

    /// Check what a backend returned as parsed JSON (an upstream server's answer): an object
    /// with a `content` array (`None` otherwise).
    pub fn from_json(value: Value) -> Option<ToolResult> {
        let checked = value.get("content").is_some_and(Value::is_array);
        checked.then_some(ToolResult(Repr::Value(value)))
    }

    /// A result the host made (it must be a `CallToolResult` object).
    pub fn from_value(value: Value) -> ToolResult {
        ToolResult(Repr::Value(value))
    }

    /// Whether it says `isError: true`.
    pub fn is_error(&self) -> bool {
        match &self.0 {
            Repr::Text { is_error, .. } => *is_error,
            Repr::Value(v) => v.get("isError").and_then(Value::as_bool) == Some(true),
        }
    }

    /// The plugin's text (a JSON object with at least a `content` member), when it has neither
    /// `_meta` nor `resultType`, so members can be added before its closing brace without a
    /// duplicate; itself otherwise.
    pub fn into_plain(self) -> Result<String, ToolResult> {
        match self.0 {
            Repr::Text {
                json, plain: true, ..
            } => Ok(json),
            other => Err(ToolResult(other)),
        }
    }

    /// Its length as JSON text.
    pub fn json_len(&self) -> usize {
        match &self.0 {
            Repr::Text { json, .. } => json.trim().len(),
            Repr::Value(v) => crate::telemetry::json_len(v),
        }
    }

    /// As a JSON tree.
    pub fn into_value(self) -> Value {
        match self.0 {
            // Checked to be JSON when it was made.
            Repr::Text { json, .. } => serde_json::from_str(&json).unwrap_or(Value::Null),
            Repr::Value(v) => v,
        }
    }

    /// Itself after `f` looked at (and maybe changed) its tree: `f` says whether it changed
    /// it. A plugin's text is parsed for `f` and kept as it was when `f` changed nothing.
    pub fn inspect(self, f: impl FnOnce(&mut Value) -> bool) -> ToolResult {
        match self.0 {
            Repr::Text { ref json, .. } => {
                // Checked to be JSON when it was made.
                let Ok(mut value) = serde_json::from_str::<Value>(json) else {
                    return self;
                };
                if f(&mut value) {
                    ToolResult(Repr::Value(value))
                } else {
                    self
                }
            }
            Repr::Value(mut value) => {
                f(&mut value);
                ToolResult(Repr::Value(value))
            }
        }
    }

    /// As JSON text.
    pub fn into_text(self) -> String {
        match self.0 {
            Repr::Text { json, .. } => json,
            Repr::Value(v) => v.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugins_result_is_checked_without_being_rebuilt() {
        let text = r#" {"content":[{"type":"text","text":"hi"}],"isError":true,"structuredContent":{"a":[1,2]}} "#;
        let r = ToolResult::from_plugin(text.into()).unwrap();
        assert!(r.is_error());
        assert_eq!(r.json_len(), text.trim().len());
        assert_eq!(
            r.clone().into_value()["structuredContent"]["a"],
            serde_json::json!([1, 2])
        );
        assert_eq!(r.into_plain(), Ok(text.to_owned()));
    }

    #[test]
    fn results_that_are_not_call_tool_results_are_refused() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"content":"text"}"#,
            r#"{"content":[]} trailing"#,
            r#"{"content":[],"x":}"#,
            r#"{"content":[],"content":[]}"#,
        ] {
            assert!(ToolResult::from_plugin(bad.into()).is_none(), "{bad}");
        }
    }

    #[test]
    fn parsed_results_are_checked_like_text() {
        let value = serde_json::json!({"content": [], "isError": true, "_meta": {"k": 1}});
        let r = ToolResult::from_json(value.clone()).unwrap();
        assert!(r.is_error());
        assert_eq!(r.json_len(), value.to_string().len());
        assert_eq!(r.clone().into_value(), value);
        assert!(
            r.into_plain().is_err(),
            "a tree is never appended to as text"
        );
        for bad in [
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!({"content": "text"}),
        ] {
            assert!(ToolResult::from_json(bad.clone()).is_none(), "{bad}");
        }
    }

    #[test]
    fn results_with_their_own_meta_or_result_type_are_not_plain() {
        for text in [
            r#"{"content":[],"_meta":{"k":1}}"#,
            r#"{"content":[],"resultType":"complete"}"#,
        ] {
            let r = ToolResult::from_plugin(text.into()).unwrap();
            assert!(!r.is_error());
            assert!(r.into_plain().is_err(), "{text}");
        }
        let escaped = ToolResult::from_plugin(r#"{"content":[],"\u005fmeta":{}}"#.into()).unwrap();
        assert!(
            escaped.into_plain().is_err(),
            "an escaped key is still _meta"
        );
    }
}
