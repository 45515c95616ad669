//! An outgoing JSON-RPC message, written straight to the wire. Most are JSON trees; a tool call's
//! response keeps the plugin's result as the text it wrote and is assembled as it is written (the
//! envelope around it, and what the era adds to it), so the answer of a call is never parsed into a
//! tree and serialised again.

use std::io::{self, Write};
use std::sync::Arc;

use serde_json::Value;

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
    Batch(Vec<Message>),
}

impl Message {
    /// A success response whose result is the JSON object `text` (a checked plugin result with at
    /// least one member), extended with `members` (`,"name":value...`) when given.
    pub(crate) fn result_text(id: Value, text: String, members: Option<Arc<str>>) -> Message {
        Message(Repr::Result { id, text, members })
    }

    /// A batch of responses (a JSON array).
    pub fn batch(messages: Vec<Message>) -> Message {
        Message(Repr::Batch(messages))
    }

    /// Write it as compact JSON.
    pub fn write_to<W: Write>(&self, out: &mut W) -> io::Result<()> {
        match &self.0 {
            Repr::Value(v) => serde_json::to_writer(&mut *out, v).map_err(io::Error::from),
            Repr::Result { id, text, members } => {
                out.write_all(br#"{"jsonrpc":"2.0","id":"#)?;
                serde_json::to_writer(&mut *out, id)?;
                out.write_all(br#","result":"#)?;
                let text = text.trim();
                match (members, text.strip_suffix('}')) {
                    (Some(members), Some(open)) => {
                        out.write_all(open.as_bytes())?;
                        out.write_all(members.as_bytes())?;
                        out.write_all(b"}")?;
                    }
                    _ => out.write_all(text.as_bytes())?,
                }
                out.write_all(b"}")
            }
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
            Repr::Result { id, .. } => Some(id),
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
