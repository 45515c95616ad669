//! An outgoing JSON-RPC message, written straight to the wire. Most are JSON trees; a tool call's
//! response keeps the plugin's result as the text it wrote (or the tree an upstream's answer was
//! read into) and is assembled as it is written (the envelope around it, and what the era adds to
//! it), so the answer of a call is never parsed into a tree, copied or serialised again.

use std::io::{self, Write};
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use super::era::META_SERVER_INFO;

/// One message to send: a response, a notification, or a batch of responses.
#[derive(Debug, Clone, PartialEq)]
pub struct Message(Repr);

#[derive(Debug, Clone, PartialEq)]
enum Repr {
    Value(Value),
    /// `{"jsonrpc":"2.0","id":id,"result":text}`, with `members` (JSON object members, each
    /// preceded by a comma) added at the end of `text`, a JSON object with at least one member
    /// and none of the added ones.
    Result {
        id: Value,
        text: String,
        members: Option<Arc<str>>,
    },
    /// `{"jsonrpc":"2.0","id":id,"result":result}`, `result` decorated for a 2026 era as it is
    /// written when `server_info` is given (see [`Message::result_tree`]).
    Tree {
        id: Value,
        result: Value,
        server_info: Option<Arc<Value>>,
    },
    Batch(Vec<Message>),
}

impl Message {
    /// A success response whose result is the JSON object `text` (a checked plugin result with at
    /// least one member), extended with `members` (`,"name":value...`) when given.
    pub(crate) fn result_text(id: Value, text: String, members: Option<Arc<str>>) -> Message {
        Message(Repr::Result { id, text, members })
    }

    /// A success response whose result is the JSON object `result`, finished for a 2026 era when
    /// `server_info` is given — `resultType: "complete"`, the server's info added to the
    /// result's own `_meta` — as [`super::era::decorate`] finishes it, but written, not built.
    pub(crate) fn result_tree(
        id: Value,
        result: Value,
        server_info: Option<Arc<Value>>,
    ) -> Message {
        Message(Repr::Tree {
            id,
            result,
            server_info,
        })
    }

    /// A batch of responses (a JSON array).
    pub fn batch(messages: Vec<Message>) -> Message {
        Message(Repr::Batch(messages))
    }

    /// Write it as compact JSON.
    pub fn write_to<W: Write>(&self, out: &mut W) -> io::Result<()> {
        match &self.0 {
            Repr::Value(v) => serde_json::to_writer(&mut *out, v).map_err(io::Error::from),
            Repr::Result { id, text, members } => response(out, id, |out| {
                let text = text.trim();
                match (members, text.strip_suffix('}')) {
                    (Some(members), Some(open)) => {
                        out.write_all(open.as_bytes())?;
                        out.write_all(members.as_bytes())?;
                        out.write_all(b"}")
                    }
                    _ => out.write_all(text.as_bytes()),
                }
            }),
            Repr::Tree {
                id,
                result,
                server_info,
            } => response(out, id, |out| match (result.as_object(), server_info) {
                (Some(members), Some(info)) => {
                    Ok(serde_json::to_writer(out, &Decorated { members, info })?)
                }
                _ => Ok(serde_json::to_writer(out, result)?),
            }),
            Repr::Batch(messages) => {
                out.write_all(b"[")?;
                for (i, m) in messages.iter().enumerate() {
                    if i > 0 {
                        out.write_all(b",")?;
                    }
                    m.write_to(out)?;
                }
                out.write_all(b"]")
            }
        }
    }

    /// As compact JSON bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_hint());
        // Writing into a Vec cannot fail, and a Value always serialises.
        let _ = self.write_to(&mut out);
        out
    }

    /// Its length in bytes as compact JSON, counted without building it.
    pub fn wire_len(&self) -> usize {
        struct Count(usize);
        impl Write for Count {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut count = Count(0);
        // Counting cannot fail, and a Value always serialises.
        let _ = self.write_to(&mut count);
        count.0
    }

    /// As a JSON tree (for inspection; the wire never needs it).
    pub fn to_value(&self) -> Value {
        match &self.0 {
            Repr::Value(v) => v.clone(),
            _ => serde_json::from_slice(&self.to_vec()).unwrap_or(Value::Null),
        }
    }

    /// The response's id, if it is one.
    pub fn id(&self) -> Option<&Value> {
        match &self.0 {
            Repr::Value(v) => v.get("id"),
            Repr::Result { id, .. } | Repr::Tree { id, .. } => Some(id),
            Repr::Batch(_) => None,
        }
    }

    fn size_hint(&self) -> usize {
        match &self.0 {
            Repr::Result { text, members, .. } => {
                text.len() + members.as_deref().map_or(0, str::len) + 48
            }
            _ => 128,
        }
    }
}

/// `{"jsonrpc":"2.0","id":id,"result":…}`, the result written by `result`.
fn response<W: Write>(
    out: &mut W,
    id: &Value,
    result: impl FnOnce(&mut W) -> io::Result<()>,
) -> io::Result<()> {
    out.write_all(br#"{"jsonrpc":"2.0","id":"#)?;
    serde_json::to_writer(&mut *out, id)?;
    out.write_all(br#","result":"#)?;
    result(out)?;
    out.write_all(b"}")
}

/// A 2026 result as [`super::era::decorate`] makes it: its members but `resultType` and
/// `_meta`, then `resultType: "complete"` and its `_meta` (an object, or none) with the server's
/// info in it.
struct Decorated<'a> {
    members: &'a Map<String, Value>,
    info: &'a Value,
}

impl Serialize for Decorated<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.members {
            if key != "resultType" && key != "_meta" {
                map.serialize_entry(key, value)?;
            }
        }
        map.serialize_entry("resultType", "complete")?;
        let meta = self.members.get("_meta").and_then(Value::as_object);
        map.serialize_entry(
            "_meta",
            &MetaWithInfo {
                meta,
                info: self.info,
            },
        )?;
        map.end()
    }
}

/// A result's own `_meta` members (but the server's info), then the server's info.
struct MetaWithInfo<'a> {
    meta: Option<&'a Map<String, Value>>,
    info: &'a Value,
}

impl Serialize for MetaWithInfo<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.meta.into_iter().flatten() {
            if key != META_SERVER_INFO {
                map.serialize_entry(key, value)?;
            }
        }
        map.serialize_entry(META_SERVER_INFO, self.info)?;
        map.end()
    }
}

impl From<Value> for Message {
    fn from(value: Value) -> Self {
        Message(Repr::Value(value))
    }
}

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_result_text_is_written_inside_its_envelope_with_the_added_members() {
        let text = r#" {"content":[{"type":"text","text":"}"}],"isError":false} "#;
        let members: Arc<str> = Arc::from(r#","resultType":"complete","_meta":{"k":"v"}"#);
        let m = Message::result_text(json!("a\"b"), text.into(), Some(members));
        assert_eq!(
            m.to_value(),
            json!({"jsonrpc": "2.0", "id": "a\"b", "result": {
                "content": [{"type": "text", "text": "}"}], "isError": false,
                "resultType": "complete", "_meta": {"k": "v"}}})
        );
        let bare = Message::result_text(json!(7), text.into(), None);
        assert_eq!(
            bare.to_value()["result"],
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert_eq!(bare.id(), Some(&json!(7)));
    }

    #[test]
    fn a_result_tree_is_decorated_as_it_is_written() {
        let info = Arc::new(json!({"name": "mcp-host", "version": "1"}));
        let cases = [
            (json!({"content": []}), json!({})),
            (
                json!({"content": [], "resultType": "x", "_meta": {"k": 1, META_SERVER_INFO: "theirs"}}),
                json!({"k": 1}),
            ),
            (json!({"content": [], "_meta": "not an object"}), json!({})),
        ];
        for (result, mut meta) in cases {
            let m = Message::result_tree(json!(3), result.clone(), Some(Arc::clone(&info)));
            meta[META_SERVER_INFO] = (*info).clone();
            let mut expected = result.clone();
            expected["resultType"] = json!("complete");
            expected["_meta"] = meta;
            let written = m.to_value();
            assert_eq!(
                written,
                json!({"jsonrpc": "2.0", "id": 3, "result": expected})
            );
            assert_eq!(m.wire_len(), m.to_vec().len());
            assert_eq!(m.id(), Some(&json!(3)));
            // A legacy era's result goes out as it is.
            let legacy = Message::result_tree(json!(3), result.clone(), None);
            assert_eq!(legacy.to_value()["result"], result);
        }
    }

    #[test]
    fn a_batch_is_an_array_of_its_messages() {
        let m = Message::batch(vec![
            Message::from(json!({"id": 1})),
            Message::result_text(json!(2), r#"{"content":[]}"#.into(), None),
        ]);
        assert_eq!(
            m.to_value(),
            json!([{"id": 1}, {"jsonrpc": "2.0", "id": 2, "result": {"content": []}}])
        );
        assert_eq!(
            m.to_string(),
            r#"[{"id":1},{"jsonrpc":"2.0","id":2,"result":{"content":[]}}]"#
        );
        assert_eq!(m.wire_len(), m.to_vec().len());
    }
}
