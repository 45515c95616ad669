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
//! upstream's own requests — is decoded into rmcp's types as before. Writing is rmcp's.

use std::collections::HashSet;

use rmcp::model::{
    ClientRequest, CustomResult, JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0, RequestId,
    ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
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
    /// rmcp's transport over the child's stdin, for writing (never read).
    write: AsyncRwTransport<RoleClient, tokio::io::Empty, ChildStdin>,
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
            write: AsyncRwTransport::new_client(tokio::io::empty(), stdin),
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
        self.write.send(item)
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

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.write.close()
    }
}
