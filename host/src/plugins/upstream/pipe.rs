//! The transport of a stdio upstream: newline-delimited JSON-RPC on the child's pipes, with the
//! answers to the requests the host forwards for its clients (`tools/call`, `prompts/get`,
//! `resources/read`, `completion/complete`) left as JSON.
//!
//! rmcp's own stdio transport decodes every answer into its `ServerResult`, an untagged union of
//! some twenty result types tried one after the other — a `tools/call` answer is the sixteenth,
//! after fifteen failed attempts, each building its error. That was most of the CPU time an
//! upstream call cost the host (about 80k of 200k instructions per call), and the answer was then
//! encoded to JSON again to reach the client. Here an answer to a forwarded request is parsed once
//! and handed to rmcp as a `CustomResult` holding the JSON (rmcp matches it to its request by id
//! and passes it on untouched); everything else — the handshake, the lists, notifications, the
//! upstream's own requests — is decoded into rmcp's types as before.
//!
//! Writing is one `write` per message. rmcp encodes a request's parameters into a JSON value
//! before writing them (to merge their `_meta`); a `tools/call` is written here straight from its
//! parameters (the same JSON, checked against rmcp's by a test), everything else as rmcp encodes
//! it. rmcp gives every request a `progressToken`; a `tools/call` marked [`NoProgress`] (its
//! client did not ask for progress) is written without it, so that the server does not report
//! progress nobody reads.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, ClientRequest, CustomResult, InputResponses, JsonObject, JsonRpcMessage,
    JsonRpcResponse, JsonRpcVersion2_0, MetaObject, RequestId, RequestMetaObject, ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};

/// The longest line (one message) read from an upstream, as rmcp's stdio transport allows.
const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// How many forwarded requests may wait for an answer before the record is cleared (a request
/// cancelled by the host may never be answered; an answer not found there is decoded into
/// rmcp's types, which the host reads as well).
const MAX_FORWARDED: usize = 4096;

/// A stdio upstream's transport (see the module's documentation).
pub(super) struct Pipe {
    read: BufReader<ChildStdout>,
    /// The line being read: kept across a cancelled `receive` (rmcp polls it in a `select!`).
    line: Vec<u8>,
    /// Dropping the rest of a line over [`MAX_LINE`].
    discarding: bool,
    /// The child's stdin (`None` once closed), one message written at a time.
    write: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    /// The forwarded requests not answered yet, whose answers stay JSON.
    forwarded: HashSet<RequestId>,
}

impl Pipe {
    /// The transport over a child's stdout and stdin.
    pub(super) fn new(stdout: ChildStdout, stdin: ChildStdin) -> Pipe {
        Pipe {
            read: BufReader::new(stdout),
            line: Vec::new(),
            discarding: false,
            write: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            forwarded: HashSet::new(),
        }
    }

    /// The next whole line into `self.line` (without its newline); `false` at the end of the
    /// stream. A line over [`MAX_LINE`] is dropped (and logged) without being buffered.
    /// Cancel-safe: a partial line stays in `self.line`.
    async fn next_line(&mut self) -> bool {
        loop {
            let available = match self.read.fill_buf().await {
                Ok([]) => return false,
                Ok(available) => available,
                Err(e) => {
                    tracing::warn!("reading from an upstream failed: {e}");
                    return false;
                }
            };
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            if !self.discarding {
                if self.line.len() + take > MAX_LINE {
                    tracing::error!("an upstream sent a message over {MAX_LINE} bytes: dropped");
                    self.line.clear();
                    self.discarding = true;
                } else {
                    self.line.extend_from_slice(&available[..take]);
                }
            }
            self.read.consume(take);
            if newline.is_some() {
                if std::mem::take(&mut self.discarding) {
                    continue;
                }
                return true;
            }
        }
    }

    /// The message in `line`: an answer to a forwarded request as its JSON, anything else in
    /// rmcp's types; `None` for what is not a message (logged, and skipped as rmcp skips it).
    fn decode(&mut self, line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut value: Value = match serde_json::from_slice(line) {
            Ok(value) => value,
            Err(e) => {
                tracing::debug!("ignoring an upstream's unreadable message: {e}");
                return None;
            }
        };
        if value.get("result").is_some()
            && let Some(id) = value_id(&value)
            && self.forwarded.remove(&id)
        {
            let result = value["result"].take();
            return Some(JsonRpcMessage::Response(JsonRpcResponse {
                jsonrpc: JsonRpcVersion2_0,
                id,
                result: ServerResult::CustomResult(CustomResult(result)),
            }));
        }
        match serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(value) {
            Ok(message) => {
                if let JsonRpcMessage::Error(error) = &message
                    && let Some(id) = &error.id
                {
                    self.forwarded.remove(id);
                }
                Some(message)
            }
            Err(e) => {
                tracing::debug!("ignoring an upstream message of no known shape: {e}");
                None
            }
        }
    }
}

/// The `id` of a message, when it has a valid one.
fn value_id(value: &Value) -> Option<RequestId> {
    match value.get("id")? {
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        Value::String(s) => Some(RequestId::String(s.as_str().into())),
        _ => None,
    }
}

/// Whether the answer to `request` is the host's to pass on as it came.
fn forwarded(request: &ClientRequest) -> bool {
    matches!(
        request,
        ClientRequest::CallToolRequest(_)
            | ClientRequest::GetPromptRequest(_)
            | ClientRequest::ReadResourceRequest(_)
            | ClientRequest::CompleteRequest(_)
    )
}

/// In a request's extensions: its client did not ask for progress, leave out the
/// `progressToken` rmcp adds.
#[derive(Debug, Clone, Copy)]
pub(super) struct NoProgress;

/// A request's `_meta` as written: without its `progressToken` when `progress` is false.
struct MetaWire<'a> {
    meta: &'a JsonObject,
    progress: bool,
}

impl Serialize for MetaWire<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.meta {
            if self.progress || key != "progressToken" {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// A `tools/call` request as written (see [`encode_call`]).
#[derive(Serialize)]
struct CallWire<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    method: &'static str,
    params: CallParams<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallParams<'a> {
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<MetaWire<'a>>,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<&'a JsonObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_responses: Option<&'a InputResponses>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_state: Option<&'a String>,
}

/// `tools/call` request `id` as rmcp writes it, straight from its parameters (without its
/// `progressToken` when marked [`NoProgress`]): `None` when its `_meta` is in more than one
/// place (rmcp merges them), for rmcp's encoding.
fn encode_call(id: &RequestId, request: &CallToolRequest) -> Option<Vec<u8>> {
    let params = &request.params;
    if params.meta.is_some() || request.extensions.get::<MetaObject>().is_some() {
        return None;
    }
    let progress = request.extensions.get::<NoProgress>().is_none();
    let meta = request
        .extensions
        .get::<RequestMetaObject>()
        .map(|m| &m.0.0)
        .filter(|m| progress || m.keys().any(|k| k != "progressToken"))
        .map(|meta| MetaWire { meta, progress });
    let wire = CallWire {
        jsonrpc: "2.0",
        id,
        method: "tools/call",
        params: CallParams {
            meta,
            name: &params.name,
            arguments: params.arguments.as_ref(),
            input_responses: params.input_responses.as_ref(),
            request_state: params.request_state.as_ref(),
        },
    };
    serde_json::to_vec(&wire).ok()
}

/// A message as one line.
fn encode(item: &TxJsonRpcMessage<RoleClient>) -> std::io::Result<Vec<u8>> {
    let direct = match item {
        JsonRpcMessage::Request(r) => match &r.request {
            ClientRequest::CallToolRequest(call) => encode_call(&r.id, call),
            _ => None,
        },
        _ => None,
    };
    let mut line = match direct {
        Some(line) => line,
        None => serde_json::to_vec(item)?,
    };
    line.push(b'\n');
    Ok(line)
}

impl Transport<RoleClient> for Pipe {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(request) = &item
            && forwarded(&request.request)
        {
            if self.forwarded.len() >= MAX_FORWARDED {
                self.forwarded.clear();
            }
            self.forwarded.insert(request.id.clone());
        }
        let line = encode(&item);
        let write = Arc::clone(&self.write);
        async move {
            let line = line?;
            match write.lock().await.as_mut() {
                Some(stdin) => stdin.write_all(&line).await,
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "the upstream's stdin is closed",
                )),
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if !self.next_line().await {
                return None;
            }
            let mut line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let message = (!text.is_empty()).then(|| self.decode(text)).flatten();
            line.clear();
            self.line = line;
            if message.is_some() {
                return message;
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolRequestParams, Request};
    use serde_json::json;

    use super::*;

    /// A call marked `NoProgress` is written as rmcp writes it without its `progressToken`;
    /// a `_meta` left empty is left out.
    #[test]
    fn a_call_whose_client_wants_no_progress_goes_without_a_token() {
        let args = json!({"text": "hi"});
        let Value::Object(arguments) = args else {
            unreachable!()
        };
        for meta in [
            json!({"progressToken": 3, "traceparent": "00-ab-cd-01"}),
            json!({"progressToken": 3}),
        ] {
            let Value::Object(meta) = meta else {
                unreachable!()
            };
            let params = CallToolRequestParams::new("echo").with_arguments(arguments.clone());
            let mut request: CallToolRequest = Request::new(params);
            request
                .extensions
                .insert(RequestMetaObject(MetaObject(meta.clone())));
            let id = RequestId::Number(1);
            let message: TxJsonRpcMessage<RoleClient> = JsonRpcMessage::request(
                ClientRequest::CallToolRequest(request.clone()),
                id.clone(),
            );
            let mut theirs = serde_json::to_value(&message).unwrap();
            request.extensions.insert(NoProgress);
            let ours: Value = serde_json::from_slice(&encode_call(&id, &request).unwrap()).unwrap();
            let params = theirs["params"].as_object_mut().unwrap();
            let meta = params["_meta"].as_object_mut().unwrap();
            meta.remove("progressToken");
            if meta.is_empty() {
                params.remove("_meta");
            }
            assert_eq!(ours, theirs);
        }
    }

    /// The direct encoding of a `tools/call` is rmcp's, with and without `_meta` and answers.
    #[test]
    fn a_tool_call_is_written_as_rmcp_writes_it() {
        let mut arguments = JsonObject::new();
        arguments.insert("text".into(), json!("héllo \"there\"\n"));
        arguments.insert("n".into(), json!([1, 2.5, {"x": null}]));
        let plain = CallToolRequestParams::new("echo").with_arguments(arguments.clone());
        let mut answered = plain.clone();
        answered.input_responses = Some([("k".to_owned(), json!({"action": "accept"}))].into());
        answered.request_state = Some("opaque".into());
        for params in [CallToolRequestParams::new("bare"), plain, answered] {
            for meta in [false, true] {
                let mut request: CallToolRequest = Request::new(params.clone());
                if meta {
                    let meta = json!({"progressToken": 3, "traceparent": "00-ab-cd-01"});
                    let serde_json::Value::Object(meta) = meta else {
                        unreachable!()
                    };
                    request
                        .extensions
                        .insert(RequestMetaObject(MetaObject(meta)));
                }
                for id in [RequestId::Number(7), RequestId::String("s-1".into())] {
                    let message: TxJsonRpcMessage<RoleClient> = JsonRpcMessage::request(
                        ClientRequest::CallToolRequest(request.clone()),
                        id.clone(),
                    );
                    let ours: Value = serde_json::from_slice(&encode(&message).unwrap()).unwrap();
                    let theirs = serde_json::to_value(&message).unwrap();
                    assert_eq!(ours, theirs);
                    assert_eq!(ours["params"].get("_meta").is_some(), meta, "{ours}");
                    assert!(encode_call(&id, &request).is_some());
                }
            }
        }
    }
}
