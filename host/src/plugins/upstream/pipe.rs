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
//! Writing is one `write` per message, as rmcp encodes it.
//!
//! A `tools/call` for a client does not go through rmcp's service loop at all ([`Direct`]): the
//! thread that runs the call writes it to the child's stdin itself, and the transport hands its
//! answer straight to that call as it reads it. rmcp's loop runs on the upstream thread, so each
//! request sent through it wakes that thread (a thread hand-off, 20–25 µs on a busy two-core
//! machine, on the path of every call) and passes through its channel, its send task and its
//! table of responders.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, ClientRequest, CustomResult, InputResponses, JsonObject, JsonRpcMessage,
    JsonRpcResponse, JsonRpcVersion2_0, RequestId, ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;

use crate::plugins::lock;

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
    /// The requests written beside rmcp, waiting for their answers.
    direct: Arc<Direct>,
}

impl Pipe {
    /// The transport over a child's stdout and stdin.
    pub(super) fn new(stdout: ChildStdout, stdin: ChildStdin) -> Pipe {
        let write = Arc::new(tokio::sync::Mutex::new(Some(stdin)));
        Pipe {
            read: BufReader::new(stdout),
            line: Vec::new(),
            discarding: false,
            direct: Arc::new(Direct {
                write: Arc::clone(&write),
                waiting: Mutex::new(Some(HashMap::new())),
                next: AtomicI64::new(DIRECT_FIRST_ID),
                session_meta: OnceLock::new(),
            }),
            write,
            forwarded: HashSet::new(),
        }
    }

    /// Where the host writes its `tools/call` requests beside rmcp (see [`Direct`]).
    pub(super) fn direct(&self) -> Arc<Direct> {
        Arc::clone(&self.direct)
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
            let newline = memchr::memchr(b'\n', available);
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
        // Checked as UTF-8 once, as a whole, rather than string by string while it is parsed.
        let parsed = match std::str::from_utf8(line) {
            Ok(text) => serde_json::from_str(text).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let mut value: Value = match parsed {
            Ok(value) => value,
            Err(e) => {
                tracing::debug!("ignoring an upstream's unreadable message: {e}");
                return None;
            }
        };
        if let Some(id) = value.get("id").and_then(Value::as_i64)
            && id >= DIRECT_FIRST_ID
            && value.get("method").is_none()
        {
            // An answer to a request rmcp never saw: for the call waiting on it (if it still
            // is), not for rmcp.
            self.direct.answered(id, &mut value);
            return None;
        }
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

/// A `tools/call`'s `_meta` as [`Direct`] writes it: the session's, the request's own, and
/// the progress token.
struct Meta<'a> {
    session: Option<&'a SessionMeta>,
    request: Option<&'a JsonObject>,
    progress: Option<i64>,
}

impl Serialize for Meta<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        // A member the request sets itself (a call's client capabilities) replaces the
        // session's.
        let own = |key: &String| self.request.is_some_and(|r| r.contains_key(key));
        for (key, value) in self.session.iter().flat_map(|m| &m.0) {
            if !own(key) {
                map.serialize_entry(key, value)?;
            }
        }
        for (key, value) in self.request.iter().flat_map(|m| m.iter()) {
            map.serialize_entry(key, value)?;
        }
        if let Some(token) = self.progress {
            map.serialize_entry("progressToken", &token)?;
        }
        map.end()
    }
}

/// The `_meta` members every request of a session carries, each value written out once (a
/// 2026-07-28 session's client info and capabilities are nested objects: encoding them for
/// every call cost more than the rest of the request).
pub(super) struct SessionMeta(Vec<(String, Box<RawValue>)>);

impl SessionMeta {
    /// The members of `meta`, their values as JSON text.
    pub(super) fn new(meta: &JsonObject) -> serde_json::Result<SessionMeta> {
        let members = meta
            .iter()
            .map(|(key, value)| Ok((key.clone(), serde_json::value::to_raw_value(value)?)));
        members.collect::<serde_json::Result<_>>().map(SessionMeta)
    }
}

/// A `tools/call` request as written (see [`direct_call`]).
#[derive(Serialize)]
struct CallWire<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    method: &'static str,
    params: CallParams<'a>,
}

impl<'a> CallWire<'a> {
    /// `tools/call` request `id` of `params`, with `meta`.
    fn new(id: &'a RequestId, params: &'a CallToolRequestParams, meta: Option<Meta<'a>>) -> Self {
        CallWire {
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
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CallParams<'a> {
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<Meta<'a>>,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<&'a JsonObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_responses: Option<&'a InputResponses>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_state: Option<&'a String>,
}

/// A message as one line.
fn encode(item: &TxJsonRpcMessage<RoleClient>) -> std::io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(item)?;
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
                self.direct.close();
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
        self.direct.close();
        drop(self.write.lock().await.take());
        Ok(())
    }
}

/// The first request id of the requests [`Direct`] writes: above every id rmcp gives (it counts
/// in a `u32`), so that the two never meet, and below 2^53, which a JavaScript server reads
/// exactly.
const DIRECT_FIRST_ID: i64 = 1 << 32;

/// An answer to a request [`Direct`] wrote: its result, or the upstream's error.
pub(super) type Answer = Result<Value, ErrorData>;

/// The `tools/call` requests the host writes to the child's stdin itself, beside rmcp's service
/// loop, from the thread that runs the call; the transport hands their answers straight to the
/// calls waiting on them (see the module's documentation). Their ids are the host's own, from
/// [`DIRECT_FIRST_ID`] up; a call that wants progress gives its id as its progress token.
pub(super) struct Direct {
    /// The child's stdin, shared with the transport: one message written at a time.
    write: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    /// The calls waiting for an answer, by request id; `None` once the pipe closed.
    waiting: Mutex<Option<HashMap<i64, oneshot::Sender<Answer>>>>,
    next: AtomicI64,
    /// The `_meta` every request of the session carries (a 2026-07-28 session's protocol
    /// version, client info and capabilities, as rmcp adds them to its own), set after the
    /// handshake.
    session_meta: OnceLock<SessionMeta>,
}

impl Direct {
    /// Every request of the session carries `meta` (see [`Direct::session_meta`]).
    pub(super) fn set_session_meta(&self, meta: SessionMeta) {
        let _ = self.session_meta.set(meta);
    }

    /// Write a `tools/call` with `params` and `meta` (its progress token, when `progress`):
    /// the request, waiting for its answer.
    pub(super) async fn call(
        self: &Arc<Self>,
        params: &CallToolRequestParams,
        meta: Option<&JsonObject>,
        progress: bool,
    ) -> std::io::Result<Pending> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match lock(&self.waiting).as_mut() {
            Some(waiting) => waiting.insert(id, tx),
            None => return Err(closed()),
        };
        // Removed again (by its drop) when the request is not written.
        let pending = Pending {
            direct: Arc::clone(self),
            id,
            answer: rx,
        };
        let line = direct_call(id, params, self.session_meta.get(), meta, progress)?;
        self.write_line(&line).await?;
        Ok(pending)
    }

    /// Tell the upstream that request `id` is cancelled, with `reason`.
    async fn cancel(&self, id: i64, reason: &str) {
        let notification = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": reason},
        });
        if let Ok(mut line) = serde_json::to_vec(&notification) {
            line.push(b'\n');
            let _ = self.write_line(&line).await;
        }
    }

    /// Write `line`; a pipe that fails a write is closed (its child is gone: nothing was
    /// delivered that a reader could have read).
    async fn write_line(&self, line: &[u8]) -> std::io::Result<()> {
        let written = match self.write.lock().await.as_mut() {
            Some(stdin) => stdin.write_all(line).await,
            None => Err(closed()),
        };
        if written.is_err() {
            self.close();
        }
        written
    }

    /// Whether the pipe closed: the session takes no more requests.
    pub(super) fn is_closed(&self) -> bool {
        lock(&self.waiting).is_none()
    }

    /// The answer (a JSON-RPC response: `result` or `error`) to request `id` arrived.
    fn answered(&self, id: i64, message: &mut Value) {
        let waiting = lock(&self.waiting).as_mut().and_then(|w| w.remove(&id));
        let Some(waiting) = waiting else {
            return;
        };
        let answer = match message.get_mut("error") {
            Some(error) => Err(serde_json::from_value(error.take()).unwrap_or_else(|e| {
                ErrorData::internal_error(format!("the upstream's error is unreadable: {e}"), None)
            })),
            None => Ok(message
                .get_mut("result")
                .map(Value::take)
                .unwrap_or_default()),
        };
        let _ = waiting.send(answer);
    }

    /// The pipe closed: the calls waiting are answered that the upstream went away, and no
    /// more are written.
    fn close(&self) {
        drop(lock(&self.waiting).take());
    }
}

/// [`Direct`]'s `tools/call` request `id` as one line: `params`, its `_meta` the session's
/// and the request's own, with `id` as its progress token when `progress`.
fn direct_call(
    id: i64,
    params: &CallToolRequestParams,
    session: Option<&SessionMeta>,
    request: Option<&JsonObject>,
    progress: bool,
) -> serde_json::Result<Vec<u8>> {
    let session = session.filter(|m| !m.0.is_empty());
    let request = request.filter(|m| !m.is_empty());
    let meta = (session.is_some() || request.is_some() || progress).then_some(Meta {
        session,
        request,
        progress: progress.then_some(id),
    });
    let id = RequestId::Number(id);
    // A request is a few hundred bytes: one allocation, not the doublings from 128 up.
    let mut line = Vec::with_capacity(512);
    serde_json::to_writer(&mut line, &CallWire::new(&id, params, meta))?;
    line.push(b'\n');
    Ok(line)
}

fn closed() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "the upstream's stdin is closed",
    )
}

/// A request [`Direct`] wrote, waiting for its answer; forgotten when dropped.
pub(super) struct Pending {
    direct: Arc<Direct>,
    /// Its request id (and progress token).
    pub(super) id: i64,
    answer: oneshot::Receiver<Answer>,
}

impl Pending {
    /// The answer; `None` when the pipe closed first.
    pub(super) async fn answer(&mut self) -> Option<Answer> {
        (&mut self.answer).await.ok()
    }

    /// Tell the upstream the request is cancelled, with `reason` (it is forgotten).
    pub(super) async fn cancel(self, reason: &str) {
        self.direct.cancel(self.id, reason).await;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(waiting) = lock(&self.direct.waiting).as_mut() {
            waiting.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolRequest, MetaObject, Request, RequestMetaObject};
    use serde_json::json;

    use super::*;

    /// [`Direct`] writes a `tools/call` as rmcp would on the same session: the session's
    /// `_meta` (2026-07-28: protocol version, client info, capabilities), the request's own,
    /// and a progress token only when asked for; no `_meta` when there is none.
    #[test]
    fn a_direct_call_is_written_as_rmcp_writes_it_on_its_session() {
        let mut session = RequestMetaObject::default();
        session.set_protocol_version(rmcp::model::ProtocolVersion::V_2026_07_28);
        session.set_client_info(rmcp::model::Implementation::new("mcp-host", "1"));
        session.set_client_capabilities(rmcp::model::ClientCapabilities::default());
        let session = session.0.0;
        let Value::Object(request_meta) = json!({"traceparent": "00-ab-cd-01"}) else {
            unreachable!()
        };
        let Value::Object(arguments) = json!({"text": "hé \"x\"", "n": [1, 2.5]}) else {
            unreachable!()
        };
        let params = CallToolRequestParams::new("echo").with_arguments(arguments);
        let id = DIRECT_FIRST_ID + 5;
        for (session, request, progress) in [
            (Some(&session), Some(&request_meta), true),
            (Some(&session), None, false),
            (None, Some(&request_meta), false),
            (None, None, true),
            (None, None, false),
        ] {
            let written = session.map(|s| SessionMeta::new(s).unwrap());
            let line = direct_call(id, &params, written.as_ref(), request, progress).unwrap();
            assert_eq!(line.last(), Some(&b'\n'));
            let ours: Value = serde_json::from_slice(&line).unwrap();
            let mut meta = session.cloned().unwrap_or_default();
            meta.extend(request.cloned().unwrap_or_default());
            if progress {
                meta.insert("progressToken".into(), json!(id));
            }
            let mut rmcps: CallToolRequest = Request::new(params.clone());
            if !meta.is_empty() {
                rmcps.extensions.insert(RequestMetaObject(MetaObject(meta)));
            }
            let message: TxJsonRpcMessage<RoleClient> = JsonRpcMessage::request(
                ClientRequest::CallToolRequest(rmcps),
                RequestId::Number(id),
            );
            assert_eq!(ours, serde_json::to_value(&message).unwrap());
        }
    }
}
