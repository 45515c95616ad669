//! How an HTTP upstream's answers are read. The client under its Streamable HTTP session is
//! reqwest as rmcp uses it (built in [`super::http`]), except that the answers to a stateless
//! (2026-07-28) session's requests are read here, so that an `application/json` answer is read as
//! the stream of JSON-RPC messages it may be.
//!
//! rmcp reads an `application/json` answer to its end before it parses the one message it
//! expects. Servers also write several newline-delimited messages on a chunked
//! `application/json` body — the conformance repository's reference server for 2026-07-28 answers
//! `subscriptions/listen` so (its acknowledgment, then each change, the body kept open for as long
//! as the subscription lasts), and tools that report progress or log before their result — and
//! rmcp then waits for a body that never ends (for a subscription: forever, with no deadline), or
//! fails to parse two messages as one. Here each complete top-level JSON value of the body is a
//! message as soon as it has arrived: an answer made of one response is that response (as rmcp
//! would have it), and anything else is handed to rmcp as a stream of events, like a
//! `text/event-stream` answer. Each message is bounded (rmcp's limit for a JSON answer), as is
//! each event of a `text/event-stream` answer (its limit for an event).
//!
//! The same server names a subscription by its request's id written as a string (`"1"` for the
//! request `1`); rmcp matches the two strictly and would never see the acknowledgment. On a
//! `subscriptions/listen` answer, a subscription id that is the request's numeric id written as a
//! string is read as that number.
//!
//! Every other request — a 2025 session's (it has a session id), the handshake's (`initialize`,
//! `server/discover`), notifications and responses — goes to rmcp's reqwest client unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::{self, BoxStream};
use futures_util::{FutureExt as _, StreamExt as _};
use http::{HeaderName, HeaderValue, StatusCode};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, RequestId};
use rmcp::model::{NumberOrString, ServerJsonRpcMessage};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpClient,
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use serde_json::Value;
use sse_stream::Sse;

/// An error of this client (rmcp's, over reqwest's).
type Error = StreamableHttpError<reqwest::Error>;

/// The bytes of an answer's body as reqwest gives them.
type Body = BoxStream<'static, Result<bytes::Bytes, reqwest::Error>>;

/// Where a message's subscription id is, in a notification and in a result.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Headers rmcp sets itself and refuses from `server.headers` (as its own client does).
const RESERVED: &[&str] = &["accept", "mcp-session-id", "last-event-id"];

/// reqwest, reading the answers of stateless requests itself (see the module's documentation).
#[derive(Clone)]
pub(super) struct Client {
    inner: reqwest::Client,
}

impl Client {
    pub(super) fn new(inner: reqwest::Client) -> Client {
        Client { inner }
    }
}

impl StreamableHttpClient for Client {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Error> {
        if session_id.is_some() || !stateless_request(&message) {
            return self
                .inner
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await;
        }
        let post = Post {
            client: &self.inner,
            uri: &uri,
            auth: auth_header,
            headers: custom_headers,
            limits,
        };
        post.send(&message).await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, Error> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, Error> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// A request of a stateless session that is not the handshake: its answer is read here.
fn stateless_request(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, ClientJsonRpcMessage::Request(r)
        if !matches!(r.request, ClientRequest::InitializeRequest(_) | ClientRequest::DiscoverRequest(_)))
}

/// The id of a `subscriptions/listen` request.
fn listen_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        ClientJsonRpcMessage::Request(r)
            if matches!(r.request, ClientRequest::SubscriptionsListenRequest(_)) =>
        {
            Some(r.id.clone())
        }
        _ => None,
    }
}

/// One POST of a stateless request.
struct Post<'a> {
    client: &'a reqwest::Client,
    uri: &'a str,
    auth: Option<String>,
    headers: HashMap<HeaderName, HeaderValue>,
    limits: StreamableHttpResponseLimits,
}

impl Post<'_> {
    /// Send `message` and read its answer as rmcp's client would, but for a successful
    /// `application/json` answer (see the module's documentation).
    async fn send(
        self,
        message: &ClientJsonRpcMessage,
    ) -> Result<StreamableHttpPostResponse, Error> {
        let mut request = self
            .client
            .post(self.uri)
            .header(http::header::ACCEPT, "text/event-stream, application/json");
        if let Some(token) = &self.auth {
            request = request.bearer_auth(token);
        }
        for (name, value) in self.headers {
            if RESERVED
                .iter()
                .any(|r| name.as_str().eq_ignore_ascii_case(r))
            {
                return Err(StreamableHttpError::ReservedHeaderConflict(
                    name.to_string(),
                ));
            }
            request = request.header(name, value);
        }
        let response = request.json(message).send().await?;
        let status = response.status();
        if let Some(refused) = challenge(&response) {
            return Err(refused);
        }
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let is = |expected: &str| {
            content_type
                .as_deref()
                .is_some_and(|ct| media_type_is(ct, expected))
        };
        let (json, sse) = (is("application/json"), is("text/event-stream"));
        if !status.is_success() {
            return failure(response, json, &self.limits).await;
        }
        let listen = listen_id(message);
        let body: Body = response.bytes_stream().boxed();
        if sse {
            let events = bounded_events(body, self.limits.max_sse_event_size);
            return Ok(StreamableHttpPostResponse::Sse(
                renamed_events(events, listen),
                None,
            ));
        }
        if json {
            let frames = Frames::new(body, self.limits.max_json_response_size, listen);
            return messages(frames).await;
        }
        Err(StreamableHttpError::UnexpectedContentType(content_type))
    }
}

/// A 401 or 403 with a challenge, as rmcp's client reports it.
fn challenge(response: &reqwest::Response) -> Option<Error> {
    let status = response.status();
    if !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return None;
    }
    let header = response.headers().get(http::header::WWW_AUTHENTICATE)?;
    let Ok(header) = header.to_str() else {
        return Some(StreamableHttpError::UnexpectedServerResponse(
            "invalid www-authenticate header value".into(),
        ));
    };
    Some(if status == StatusCode::UNAUTHORIZED {
        StreamableHttpError::AuthRequired(AuthRequiredError::new(header.to_owned()))
    } else {
        StreamableHttpError::InsufficientScope(InsufficientScopeError::new(
            header.to_owned(),
            scope(header),
        ))
    })
}

/// The `scope=` of a `WWW-Authenticate` challenge (quoted or not).
fn scope(header: &str) -> Option<String> {
    let at = header.to_ascii_lowercase().find("scope=")? + "scope=".len();
    let rest = header.get(at..)?;
    if let Some(quoted) = rest.strip_prefix('"') {
        return quoted.find('"').map(|end| quoted[..end].to_owned());
    }
    let end = rest.find([',', ' ']).unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_owned())
}

/// Whether a `Content-Type` is `expected`, whatever its case and parameters.
fn media_type_is(value: &str, expected: &str) -> bool {
    value
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(expected))
}

/// The answer to an unsuccessful status, as rmcp's client makes it: a JSON-RPC error in a JSON
/// body is that error (a stateless server answers 400 or 404 with one); 429 and 5xx are the
/// status (and its `Retry-After`); anything else an error quoting the start of the body.
async fn failure(
    response: reqwest::Response,
    json: bool,
    limits: &StreamableHttpResponseLimits,
) -> Result<StreamableHttpPostResponse, Error> {
    let status = response.status();
    let status_error =
        (status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()).then(|| {
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            HttpStatusError::new(status.as_u16(), retry_after)
        });
    let status_error = match status_error {
        Some(e) if status == StatusCode::TOO_MANY_REQUESTS || !json => return Err(e.into()),
        other => other,
    };
    let body = response.bytes_stream().boxed();
    let auth_failure = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
    let prefix = if json && !auth_failure {
        match read_to_end(body, limits.max_json_response_size).await {
            Ok(whole) => {
                if let Ok(error @ JsonRpcMessage::Error(_)) =
                    serde_json::from_slice::<ServerJsonRpcMessage>(&whole)
                {
                    return Ok(StreamableHttpPostResponse::Json(error, None));
                }
                whole[..whole.len().min(limits.max_error_response_size)].to_vec()
            }
            Err(e @ StreamableHttpError::ResponseBodyTooLarge { .. }) => {
                return Err(status_error.map_or(e, Into::into));
            }
            Err(_) => b"<failed to read response body>".to_vec(),
        }
    } else {
        read_prefix(body, limits.max_error_response_size).await
    };
    if let Some(e) = status_error {
        return Err(e.into());
    }
    Err(StreamableHttpError::UnexpectedServerResponse(
        format!("HTTP {status}: {}", String::from_utf8_lossy(&prefix)).into(),
    ))
}

/// The whole body, refused past `max` bytes.
async fn read_to_end(mut body: Body, max: usize) -> Result<Vec<u8>, Error> {
    let mut whole = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(StreamableHttpError::Client)?;
        if chunk.len() > max.saturating_sub(whole.len()) {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
        }
        whole.extend_from_slice(&chunk);
    }
    Ok(whole)
}

/// At most the first `max` bytes of the body (what arrives before an error, if one does).
async fn read_prefix(mut body: Body, max: usize) -> Vec<u8> {
    let mut prefix = Vec::new();
    while prefix.len() < max {
        let Some(Ok(chunk)) = body.next().await else {
            break;
        };
        let take = chunk.len().min(max - prefix.len());
        prefix.extend_from_slice(&chunk[..take]);
    }
    prefix
}

/// A successful `application/json` answer: one response is that response (the body is read no
/// further); anything else — a notification first — is the first of a stream of messages,
/// handed to rmcp as events.
async fn messages(mut frames: Frames) -> Result<StreamableHttpPostResponse, Error> {
    let first = frames.next().await.unwrap_or_else(|| {
        Err(FrameError::NotJson(
            "an empty application/json answer".into(),
        ))
    })?;
    let message: ServerJsonRpcMessage = serde_json::from_str(&first).map_err(|e| {
        StreamableHttpError::UnexpectedServerResponse(format!("not a JSON-RPC message: {e}").into())
    })?;
    if matches!(
        message,
        JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)
    ) {
        // Let the connection see the end of a body that has ended, so it can be reused.
        let _ = frames.body.next().now_or_never();
        return Ok(StreamableHttpPostResponse::Json(message, None));
    }
    let rest = stream::unfold(frames, |mut frames| async move {
        frames.next().await.map(|frame| (frame, frames))
    });
    let events = stream::once(async move { Ok(first) })
        .chain(rest)
        .map(|frame| {
            frame
                .map(|data| Sse {
                    data: Some(data),
                    ..Sse::default()
                })
                .map_err(|e| SseError::Body(Box::new(e)))
        });
    Ok(StreamableHttpPostResponse::Sse(events.boxed(), None))
}

/// Why a body could not be read as messages.
#[derive(Debug, thiserror::Error)]
enum FrameError {
    #[error("a message of more than {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    NotJson(String),
    #[error("the answer's body: {0}")]
    Body(#[from] reqwest::Error),
}

impl From<FrameError> for Error {
    fn from(e: FrameError) -> Error {
        match e {
            FrameError::TooLarge(max_size) => {
                StreamableHttpError::ResponseBodyTooLarge { max_size }
            }
            FrameError::NotJson(why) => StreamableHttpError::UnexpectedServerResponse(why.into()),
            FrameError::Body(e) => StreamableHttpError::Client(e),
        }
    }
}

/// The top-level JSON values of a body, each as it completes: one JSON text, or several
/// separated by whitespace (newline-delimited), whatever the chunks.
struct Frames {
    body: Body,
    split: Splitter,
    /// The `subscriptions/listen` request this body answers.
    listen: Option<RequestId>,
    /// The body ended.
    ended: bool,
    /// No more messages: the body ended, or could not be read.
    done: bool,
}

impl Frames {
    fn new(body: Body, max: usize, listen: Option<RequestId>) -> Frames {
        Frames {
            body,
            split: Splitter::new(max),
            listen,
            ended: false,
            done: false,
        }
    }

    /// The next message; `None` at the end of the body, and after an error.
    async fn next(&mut self) -> Option<Result<String, FrameError>> {
        if self.done {
            return None;
        }
        let next = self.read().await;
        self.done = !matches!(next, Some(Ok(_)));
        next
    }

    async fn read(&mut self) -> Option<Result<String, FrameError>> {
        loop {
            match self.split.next_value() {
                Ok(Some(value)) => {
                    return Some(Ok(match &self.listen {
                        Some(id) => renamed(value, id),
                        None => value,
                    }));
                }
                Ok(None) if self.ended => {
                    return self.split.rest().map(|rest| {
                        Err(FrameError::NotJson(format!(
                            "the answer ended inside a message ({} bytes of it)",
                            rest
                        )))
                    });
                }
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.split.push(&chunk),
                Some(Err(e)) => return Some(Err(FrameError::Body(e))),
                None => self.ended = true,
            }
        }
    }
}

/// Finds where each top-level JSON object (or array) of a byte stream ends, by counting brackets
/// outside strings: every byte is looked at once, and each value is parsed once, whole.
struct Splitter {
    buf: Vec<u8>,
    /// How much of `buf` was consumed (values handed out, whitespace skipped).
    start: usize,
    /// How much of `buf` was scanned.
    scanned: usize,
    depth: u32,
    in_string: bool,
    escaped: bool,
    max: usize,
}

impl Splitter {
    fn new(max: usize) -> Splitter {
        Splitter {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            max,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The bytes of an unfinished value, if any.
    fn rest(&self) -> Option<usize> {
        let rest = &self.buf[self.start..];
        (!rest.iter().all(u8::is_ascii_whitespace)).then_some(rest.len())
    }

    /// The next complete value, when the bytes so far hold one.
    fn next_value(&mut self) -> Result<Option<String>, FrameError> {
        while self.scanned < self.buf.len() {
            let byte = self.buf[self.scanned];
            self.scanned += 1;
            if self.depth == 0 {
                if byte.is_ascii_whitespace() {
                    self.start = self.scanned;
                    continue;
                }
                if !matches!(byte, b'{' | b'[') {
                    return Err(FrameError::NotJson(format!(
                        "not a JSON-RPC message: it starts with {:?}",
                        char::from(byte)
                    )));
                }
            }
            if self.step(byte) {
                let value = &self.buf[self.start..self.scanned];
                let text = String::from_utf8(value.to_vec())
                    .map_err(|e| FrameError::NotJson(format!("a message is not UTF-8: {e}")))?;
                self.start = self.scanned;
                return Ok(Some(text));
            }
            if self.scanned - self.start > self.max {
                return Err(FrameError::TooLarge(self.max));
            }
        }
        Ok(None)
    }

    /// Take `byte` (of a value); whether it ends the value.
    fn step(&mut self, byte: u8) -> bool {
        if self.in_string {
            match byte {
                _ if self.escaped => self.escaped = false,
                b'\\' => self.escaped = true,
                b'"' => self.in_string = false,
                _ => {}
            }
            return false;
        }
        match byte {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

/// `message` with its subscription id read as `listen`'s numeric id, when the server wrote that
/// id as a string (see the module's documentation); otherwise unchanged.
fn renamed(message: String, listen: &RequestId) -> String {
    let NumberOrString::Number(id) = listen else {
        return message;
    };
    let Ok(mut value) = serde_json::from_str::<Value>(&message) else {
        return message;
    };
    let mut changed = false;
    for holder in ["params", "result"] {
        if let Some(slot) = value
            .get_mut(holder)
            .and_then(|h| h.get_mut("_meta"))
            .and_then(|m| m.get_mut(SUBSCRIPTION_ID))
            && slot.as_str() == Some(id.to_string().as_str())
        {
            *slot = Value::from(*id);
            changed = true;
        }
    }
    if changed { value.to_string() } else { message }
}

/// The events of a `subscriptions/listen` answer with their subscription ids read as the
/// request's (see [`renamed`]); any other answer's events unchanged.
fn renamed_events(events: BoxedSseResponse, listen: Option<RequestId>) -> BoxedSseResponse {
    let Some(id) = listen else {
        return events;
    };
    events
        .map(move |event| {
            event.map(|mut event| {
                event.data = event.data.map(|data| renamed(data, &id));
                event
            })
        })
        .boxed()
}

/// A `text/event-stream` body as events, each at most `max` bytes (its data and field lines;
/// comments are not kept, so not counted once they end).
fn bounded_events(body: Body, max: usize) -> BoxedSseResponse {
    let mut size = EventSize::default();
    let bounded = body.map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        if size.observe(&chunk, max) {
            Ok(chunk)
        } else {
            Err(std::io::Error::other(format!(
                "an event of more than {max} bytes"
            )))
        }
    });
    sse_stream::SseStream::from_bytes_stream(bounded).boxed()
}

/// The size of the event being read from an event stream.
#[derive(Default)]
struct EventSize {
    /// The bytes of the event's finished lines.
    kept: usize,
    /// The bytes of the line being read.
    line: usize,
    comment: bool,
    after_cr: bool,
}

impl EventSize {
    /// Count `chunk`; whether the event stays within `max` bytes.
    fn observe(&mut self, chunk: &[u8], max: usize) -> bool {
        for &byte in chunk {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\r' | b'\n' => {
                    self.after_cr = byte == b'\r';
                    if self.line == 0 {
                        self.kept = 0;
                    } else if !self.comment {
                        self.kept = self.kept.saturating_add(self.line + 1);
                    }
                    self.line = 0;
                    self.comment = false;
                }
                _ => {
                    if self.line == 0 {
                        self.comment = byte == b':';
                    }
                    self.line += 1;
                }
            }
            if self.kept.saturating_add(self.line) > max {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(chunks: &[&[u8]], max: usize) -> Result<Vec<String>, FrameError> {
        let mut split = Splitter::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            split.push(chunk);
            while let Some(value) = split.next_value()? {
                out.push(value);
            }
        }
        Ok(out)
    }

    #[test]
    fn values_are_found_whole_whatever_the_chunks_and_layout() {
        let ndjson = b"{\"a\":\"}{\\\"\"}\n{\"b\":[1,{\"c\":2}]}\n";
        for cut in 0..ndjson.len() {
            let (one, two) = ndjson.split_at(cut);
            let values = split_all(&[one, two], 1 << 20).unwrap();
            assert_eq!(
                values,
                ["{\"a\":\"}{\\\"\"}", "{\"b\":[1,{\"c\":2}]}"],
                "{cut}"
            );
        }
        // One pretty-printed JSON text is one value.
        let pretty = b"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 1,\n  \"result\": {}\n}";
        assert_eq!(split_all(&[pretty], 1 << 20).unwrap().len(), 1);
    }

    #[test]
    fn a_value_over_the_limit_or_a_body_that_is_not_json_is_refused() {
        let big = format!("{{\"x\":\"{}\"}}", "y".repeat(100));
        assert!(matches!(
            split_all(&[big.as_bytes()], 50),
            Err(FrameError::TooLarge(50))
        ));
        assert!(matches!(
            split_all(&[b"<html>"], 50),
            Err(FrameError::NotJson(_))
        ));
    }

    fn body(chunks: &[&'static str]) -> Body {
        let chunks: Vec<Result<bytes::Bytes, reqwest::Error>> = chunks
            .iter()
            .map(|c| Ok(bytes::Bytes::from_static(c.as_bytes())))
            .collect();
        stream::iter(chunks).boxed()
    }

    #[tokio::test]
    async fn a_json_answer_is_one_response_or_a_stream_of_messages() {
        let one = body(&["{\"jsonrpc\":\"2.0\",\"id\":3,", "\"result\":{}}"]);
        let answer = messages(Frames::new(one, 1 << 20, None)).await.unwrap();
        assert!(
            matches!(answer, StreamableHttpPostResponse::Json(..)),
            "{answer:?}"
        );
        // A listen answer: the acknowledgment (its id written as a string), then a change.
        let ack = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"4"},"notifications":{}}}"#;
        let change = "\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n{\"jsonrpc\":";
        let listen = Frames::new(
            body(&[ack, change]),
            1 << 20,
            Some(NumberOrString::Number(4)),
        );
        let StreamableHttpPostResponse::Sse(mut events, _) = messages(listen).await.unwrap() else {
            panic!("not a stream");
        };
        let first: Value =
            serde_json::from_str(&events.next().await.unwrap().unwrap().data.unwrap()).unwrap();
        assert_eq!(first["params"]["_meta"][SUBSCRIPTION_ID], 4);
        let second = events.next().await.unwrap().unwrap().data.unwrap();
        assert!(second.contains("list_changed"), "{second}");
        // The body ended inside a message: an error, and then nothing more.
        assert!(events.next().await.unwrap().is_err());
        assert!(events.next().await.is_none());
    }

    #[test]
    fn a_subscription_id_written_as_a_string_is_read_as_the_numeric_request_id() {
        let ack = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"7"},"notifications":{}}}"#;
        let fixed: Value =
            serde_json::from_str(&renamed(ack.into(), &NumberOrString::Number(7))).unwrap();
        assert_eq!(fixed["params"]["_meta"][SUBSCRIPTION_ID], 7);
        // Another id, or a string request id, is left as it is.
        assert_eq!(renamed(ack.into(), &NumberOrString::Number(8)), ack);
        assert_eq!(
            renamed(ack.into(), &NumberOrString::String("7".into())),
            ack
        );
    }

    #[test]
    fn an_event_is_bounded_but_comments_and_past_events_do_not_count() {
        let mut size = EventSize::default();
        assert!(size.observe(b"data: 12345\n\n", 12));
        assert!(size.observe(b": ping\r\n", 12));
        assert!(size.observe(b"data: 12345\r\n\r\n", 12));
        assert!(!size.observe(b"data: 1234567890\n", 12));
    }

    #[test]
    fn a_scope_is_read_quoted_or_not() {
        assert_eq!(
            scope(r#"Bearer error="insufficient_scope", scope="files:read files:write""#)
                .as_deref(),
            Some("files:read files:write")
        );
        assert_eq!(
            scope("Bearer scope=read:data").as_deref(),
            Some("read:data")
        );
        assert_eq!(scope("Bearer realm=x"), None);
    }
}
