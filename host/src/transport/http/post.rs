//! `POST /mcp`: read and check the body, resolve the session and the caller, then run the message
//! through the connection core. A request is answered as plain JSON unless it emits a notification
//! before its reply, in which case the answer becomes an SSE stream carrying the notifications and
//! then the reply.

use std::future::Future as _;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming as IncomingBody;
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use serde_json::{Map, Value};

use super::State;
use super::body::{
    Body, CancelOnDrop, Sse, UNAVAILABLE_RETRY_SECS, empty, error_response, message_response,
    sse_channel, sse_response, with_retry_after,
};
use super::guard::{denied, names, unauthorized};
use super::headers::{Header, RequestHeaders};
use super::inbox::{Inbox, inbox};
use super::sessions::Changeable;
use crate::exec::CancelFlag;
use crate::exec::detached::Detached;
use crate::protocol::jsonrpc::{self, ErrorKind, Received, RpcError};
use crate::protocol::session::{LegacySession, Outbound as _};
use crate::protocol::{HttpHeaders, Reply, decode_header_value};
use crate::transport::core::{Batched, Origin, Routed};

/// Read the body within its size limit; the error response otherwise.
async fn read_body(
    state: &State,
    headers: &RequestHeaders<'_>,
    body: IncomingBody,
) -> Result<Bytes, Response<Body>> {
    // Read at each request: a reload of these settings applies at once.
    let http = &state.core.protocol().host().config().http;
    // A 2026 request names its method in a header: one without a payload is read only as far as
    // its own, lower limit.
    let (max, key) = match headers.get(Header::Method) {
        Some(method) if !carries_payload(method) => (
            http.max_other_body_bytes.min(http.max_body_bytes),
            "http.max_other_body_bytes",
        ),
        _ => (http.max_body_bytes, "http.max_body_bytes"),
    };
    let body_secs = http.body_read_timeout_secs;
    let too_large = || body_too_large(max, key);
    let declared = headers
        .get(Header::ContentLength)
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    if let Some(ct) = headers.get(Header::ContentType)
        && !ct.to_ascii_lowercase().starts_with("application/json")
    {
        return Err(error_response(
            &Value::Null,
            &RpcError::new(
                ErrorKind::UnsupportedMediaType,
                format!("Content-Type must be application/json, got {ct}"),
            ),
        ));
    }
    let deadline = std::time::Duration::from_secs(body_secs.max(1));
    let declared = declared.and_then(|n| usize::try_from(n).ok());
    let mut collect = std::pin::pin!(gather(body, max, declared));
    // A body that came with its head (nearly all of them) is read without arming the timer.
    let first = std::future::poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await;
    let read = match first {
        Poll::Ready(read) => Ok(read),
        Poll::Pending => tokio::time::timeout(deadline, collect).await,
    };
    let Ok(read) = read else {
        return Err(error_response(
            &Value::Null,
            &RpcError::new(
                ErrorKind::RequestTimeout,
                format!(
                    "the request body did not arrive within {} s (http.body_read_timeout_secs)",
                    deadline.as_secs()
                ),
            ),
        ));
    };
    match read {
        Ok(bytes) => Ok(bytes),
        Err(None) => Err(too_large()),
        Err(Some(e)) => Err(error_response(
            &Value::Null,
            &RpcError::invalid_request(format!("cannot read body: {e}")),
        )),
    }
}

/// The body's bytes, at most `max` of them (`Err(None)` past that; `Err(Some(_))`: it could not
/// be read). A body that came in one piece is kept as it came; pieces are copied, once, into one
/// buffer sized by the `declared` length (no second copy of a large body to join them).
async fn gather(
    body: IncomingBody,
    max: usize,
    declared: Option<usize>,
) -> Result<Bytes, Option<hyper::Error>> {
    let mut body = body;
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(Some)?.into_data() else {
            continue; // trailers
        };
        let total = first.as_ref().map_or(0, Bytes::len) + joined.len() + data.len();
        if total > max {
            return Err(None);
        }
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            Some(piece) => {
                joined.reserve_exact(declared.unwrap_or(total).clamp(total, max));
                joined.extend_from_slice(&piece);
                joined.extend_from_slice(&data);
            }
            None => joined.extend_from_slice(&data),
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

/// The answer to a body over `max` bytes, the limit set by `key`.
fn body_too_large(max: usize, key: &str) -> Response<Body> {
    error_response(
        &Value::Null,
        &RpcError::new(
            ErrorKind::PayloadTooLarge,
            format!("request body exceeds the limit of {max} bytes ({key})"),
        ),
    )
}

/// Whether requests of `method` carry a caller's payload (arguments, a URI, a task's input), and
/// so may take all of `http.max_body_bytes`; any other message is small
/// (`http.max_other_body_bytes`).
fn carries_payload(method: &str) -> bool {
    matches!(
        method,
        "tools/call" | "prompts/get" | "resources/read" | "completion/complete"
    ) || method.starts_with("tasks/")
}

/// A body over `http.max_other_body_bytes` whose message is not one that may be that large (its
/// method found without building anything of the rest, which is skipped): the 413 to answer.
/// Batches and clients' responses (no method) may be as large as `http.max_body_bytes`.
fn oversized_other(state: &State, bytes: &[u8]) -> Option<Response<Body>> {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    let max = {
        let http = &state.core.protocol().host().config().http;
        http.max_other_body_bytes.min(http.max_body_bytes)
    };
    if bytes.len() <= max || bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    // Not one object with one `method` (a repeated member would pass this check and count at
    // the full parse): refused too.
    let method = match serde_json::from_slice::<Method<'_>>(bytes) {
        Ok(Method { method: None }) => return None,
        Ok(Method { method: Some(m) }) if carries_payload(&m) => return None,
        Ok(Method { method: Some(m) }) => m.into_owned(),
        Err(_) => "unreadable".to_owned(),
    };
    tracing::debug!(
        "refused a {method} message of {} bytes (http.max_other_body_bytes)",
        bytes.len()
    );
    Some(body_too_large(max, "http.max_other_body_bytes"))
}

/// The 2026 headers that mirror the body.
fn mirrored_headers(headers: &RequestHeaders<'_>) -> Result<HttpHeaders, RpcError> {
    let name = headers
        .get(Header::McpName)
        .map(decode_header_value)
        .transpose()?;
    Ok(HttpHeaders {
        protocol_version: headers.get(Header::ProtocolVersion).map(str::to_owned),
        method: headers.get(Header::Method).map(str::to_owned),
        name,
        params: headers
            .params()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect(),
        trace_context: headers.get(Header::TraceParent).map(|parent| {
            let state = headers.get(Header::TraceState).map(str::to_owned);
            (parent.to_owned(), state)
        }),
    })
}

/// Serve one POST: read its message, authenticate it, find its legacy session, then run the
/// request (or the batch).
pub(crate) async fn post(
    state: Arc<State>,
    headers: &RequestHeaders<'_>,
    body: IncomingBody,
    endpoint_agent: Option<String>,
    peer: Arc<str>,
) -> Response<Body> {
    let read = match read_message(&state, headers, body).await {
        Ok(read) => read,
        Err(resp) => return resp,
    };
    let (id, is_modern) = match &read {
        Received::One { id, modern, .. } => (id.clone(), *modern),
        Received::Batch(_) => (Value::Null, false),
    };
    let session_id = headers.get(Header::Session).filter(|_| !is_modern);
    let mirrored = match mirrored_headers(headers) {
        Ok(h) => h,
        Err(e) => return error_response(&id, &e),
    };
    // Every request authenticates on its own (the 2026 protocol keeps no state between requests).
    let access = state.core.protocol().host().access();
    let identity = match access.resolve(endpoint_agent.as_deref(), headers.bearer(), session_id) {
        Ok(identity) => identity,
        Err(d) => {
            let metrics = state.core.protocol().host().telemetry().metrics();
            return denied(&access, metrics, endpoint_agent.as_deref(), &id, d);
        }
    };
    // A legacy session answers only to the caller that opened it: to anyone else its id is
    // unknown (404), whatever they send with it (a call, a response to its pending elicitation).
    let owner = identity.session_owner(&peer);
    let session = match legacy_session(&state, session_id, &owner).await {
        Ok(session) => session,
        Err(resp) => return resp,
    };
    let origin = Origin {
        inflight: session.as_ref().map(|s| Arc::clone(&s.inflight)),
        session,
        headers: Some(Arc::new(mirrored)),
        caller_key: identity.caller_key(Some(&peer)),
        identity,
        cache_private: access.caller_dependent(),
    };
    match state.core.route(read, &origin) {
        Routed::Request { id, method, params } => {
            // A listen stream lasts: each caller holds only so many.
            let stream = if method == "subscriptions/listen" {
                match state.stream_slot(&origin.caller_key) {
                    Ok(held) => Some(held),
                    Err(max) => return too_many_streams(&id, max),
                }
            } else {
                None
            };
            let reply_to = ReplyTo {
                owner,
                endpoint_agent,
                stream,
            };
            request(state, id, method, params, origin, reply_to).await
        }
        Routed::Batch(items) => batch_response(&state, items, &origin).await,
        Routed::Invalid(id, e) => error_response(&id, &e),
        Routed::Done => empty(StatusCode::ACCEPTED),
    }
}

/// The POSTed JSON-RPC message: the body within its limits, as UTF-8 JSON.
async fn read_message(
    state: &Arc<State>,
    headers: &RequestHeaders<'_>,
    body: IncomingBody,
) -> Result<Received, Response<Body>> {
    let bytes = read_body(state, headers, body).await?;
    if let Some(refused) = oversized_other(state, &bytes) {
        return Err(refused);
    }
    let read = match std::str::from_utf8(&bytes) {
        Ok(text) => jsonrpc::read(text).map_err(|e| e.to_string()),
        Err(e) => Err(format!("the body is not UTF-8 ({e})")),
    };
    read.map_err(|e| error_response(&Value::Null, &RpcError::parse(format!("invalid JSON: {e}"))))
}

/// The legacy session `session_id` names, when it belongs to `owner`. A legacy session answers
/// only to the caller that opened it: to anyone else its id is unknown (404), whatever they send
/// with it (a call, a response to its pending elicitation).
async fn legacy_session(
    state: &State,
    session_id: Option<&str>,
    owner: &str,
) -> Result<Option<Arc<LegacySession>>, Response<Body>> {
    let Some(sid) = session_id else {
        return Ok(None);
    };
    match state.sessions.get(sid, owner).await {
        Ok(Some(s)) => Ok(Some(s)),
        Ok(None) => Err(error_response(
            &Value::Null,
            &RpcError::new(ErrorKind::NotFound, "Session not found: initialize again"),
        )),
        Err(e) => Err(error_response(&Value::Null, &e)),
    }
}

/// Run a batch (2025-03-26 only) and answer it, the session saved after it.
async fn batch_response(state: &State, items: Vec<Value>, origin: &Origin) -> Response<Body> {
    let before = origin.session.as_deref().map(Changeable::of);
    // Boxed: a batch runs whole requests, and without the box every POST's future would be as
    // large as theirs.
    let batched = Box::pin(state.core.batch(items, origin)).await;
    if let (Some(session), Some(before)) = (&origin.session, before) {
        state.sessions.save(session, &before).await;
    }
    match batched {
        Batched::Replies(replies) => message_response(200, &replies),
        Batched::Refused(e) => error_response(&Value::Null, &e),
        Batched::Nothing => empty(StatusCode::ACCEPTED),
    }
}

/// The answer to a long-lived stream its caller may not open: it holds `max` already.
pub(super) fn too_many_streams(id: &Value, max: usize) -> Response<Body> {
    let mut resp = error_response(
        id,
        &RpcError::new(
            ErrorKind::TooManyRequests,
            format!(
                "this caller holds {max} open streams already (http.max_streams_per_caller); \
                 close one first"
            ),
        ),
    );
    resp.headers_mut()
        .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// The answer to a request whose handling panicked.
fn lost(id: &Value) -> Response<Body> {
    error_response(id, &RpcError::internal("the request was lost"))
}

/// Stream the notifications already queued.
fn send_queued(out: &Sse, rx: &mut Inbox) {
    while let Some(n) = rx.try_recv() {
        out.send(&n);
    }
}

/// Run one request; answer JSON if it finishes before emitting a notification, SSE otherwise.
///
/// The request runs right here on the connection's task (no task of its own to spawn and wake);
/// should a notification come first, or this handler be dropped (the client went away), it goes
/// on on a task of its own ([`Detached`]), so it always runs to its end (its session saved, its
/// tracking removed). The race between the answer and the first event is one `select!`.
async fn request(
    state: Arc<State>,
    id: Value,
    method: String,
    params: Map<String, Value>,
    origin: Origin,
    mut reply_to: ReplyTo,
) -> Response<Body> {
    let cancel = CancelFlag::new();
    // Cancels the call if this handler is dropped (client gone) before it answered.
    let mut guard = CancelOnDrop(Some(cancel.clone()));
    let (notifier, mut rx) = inbox();
    let mut running = {
        let state = Arc::clone(&state);
        let id = id.clone();
        let cancel = cancel.clone();
        Detached::new(async move {
            let before = origin.session.as_deref().map(Changeable::of);
            let answered = state
                .core
                .request(id, &method, params, &origin, cancel, Some(notifier))
                .await;
            if let (Some(session), Some(before)) = (&origin.session, before) {
                state.sessions.save(session, &before).await;
            }
            // Over HTTP a cancelled request's POST is still closed out with its reply.
            answered.reply
        })
    };
    // Whether a notification comes before the reply decides the response type. The notifier is
    // dropped (with the request's exchange) before the reply is ready, so `None` from the
    // notifications means the request ended without any; a request that notified and answered
    // in the same poll is streamed too (its notifications wait in the queue). The request is
    // polled first: most answer in that poll, before anything waits for a notification.
    let first_notification = tokio::select! {
        biased;
        reply = &mut running => {
            guard.disarm();
            let Some(reply) = reply else {
                return lost(&id);
            };
            let Some(first) = rx.try_recv() else {
                return finish(&state, reply, reply_to).await;
            };
            let (out, body) = sse_channel();
            let out = out.holding(reply_to.stream.take());
            out.send(&first);
            send_queued(&out, &mut rx);
            tokio::spawn(async move { stream_reply(&state, reply, out).await });
            return sse_response(body, Some(cancel));
        }
        n = rx.recv() => n,
    };
    let Some(first_notification) = first_notification else {
        // No notification can come any more: a plain JSON answer. (Streaming it would send errors
        // as `200 text/event-stream` instead of their 4xx status.)
        let reply = (&mut running).await;
        guard.disarm();
        return match reply {
            Some(reply) => finish(&state, reply, reply_to).await,
            None => lost(&id),
        };
    };
    // A notification came first: switch to an SSE stream carrying it, the rest, then the response.
    guard.disarm();
    let (out, body) = sse_channel();
    let out = out.holding(reply_to.stream.take());
    out.send(&first_notification);
    tokio::spawn(stream_rest(state, running, rx, out));
    sse_response(body, Some(cancel))
}

/// Stream a running request's further notifications as they come, then its reply.
async fn stream_rest(state: Arc<State>, mut running: Detached<Reply>, mut rx: Inbox, out: Sse) {
    let reply = loop {
        tokio::select! {
            biased;
            n = rx.recv() => match n {
                Some(n) => { out.send(&n); }
                None => break (&mut running).await,
            },
            reply = &mut running => {
                send_queued(&out, &mut rx);
                break reply;
            }
        }
    };
    if let Some(reply) = reply {
        stream_reply(&state, reply, out).await;
    }
}

/// The reply at the end of a request's SSE stream (a listen stream goes on from there).
async fn stream_reply(state: &State, reply: Reply, out: Sse) {
    match reply {
        Reply::Response { body, .. } | Reply::Initialized { body, .. } => {
            out.send_waiting(&body).await;
        }
        Reply::Listen { id, accepted } => {
            let keepalive = Some(state.options.keepalive);
            state
                .core
                .listen(&id, &accepted, &out, keepalive, &CancelFlag::new())
                .await;
        }
    }
}

/// Who a reply goes to: the caller a new session belongs to ([`crate::access::Identity::session_owner`]),
/// and the endpoint asked.
struct ReplyTo {
    owner: Arc<str>,
    endpoint_agent: Option<String>,
    /// The stream slot a listen stream holds while it lasts.
    stream: Option<crate::transport::http::limits::Held>,
}

/// The HTTP response for a reply that came before any notification.
async fn finish(state: &Arc<State>, reply: Reply, to: ReplyTo) -> Response<Body> {
    match reply {
        Reply::Response { body, status: 401 } => {
            // A tool that needs a verified caller was called without one: challenge the client.
            let access = state.core.protocol().host().access();
            unauthorized(&access, to.endpoint_agent.as_deref(), &body)
        }
        // Too many requests, or unavailable for now (the store): say when to retry, what
        // `data.retryAfterSecs` says when the error has it.
        Reply::Response {
            body,
            status: status @ (429 | 503),
        } => {
            let default = if status == 429 {
                1
            } else {
                UNAVAILABLE_RETRY_SECS
            };
            let retry = body.to_value()["error"]["data"]["retryAfterSecs"]
                .as_u64()
                .unwrap_or(default);
            with_retry_after(message_response(status, &body), retry)
        }
        Reply::Response { body, status } => message_response(status, &body),
        Reply::Initialized {
            body,
            version,
            capabilities,
        } => {
            let id = match state
                .sessions
                .open(version, capabilities, Arc::clone(&to.owner))
                .await
            {
                Ok(id) => id,
                Err(e) => return error_response(body.id().unwrap_or(&Value::Null), &e),
            };
            let mut resp = message_response(200, &body);
            if let Ok(v) = HeaderValue::from_str(&id) {
                resp.headers_mut().insert(names::SESSION, v);
            }
            resp
        }
        Reply::Listen { id, accepted } => {
            let (out, body) = sse_channel();
            let out = out.holding(to.stream);
            let state = Arc::clone(state);
            tokio::spawn(
                async move { stream_reply(&state, Reply::Listen { id, accepted }, out).await },
            );
            sse_response(body, None)
        }
    }
}
