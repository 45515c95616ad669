//! HTTP responses: a complete JSON body or an SSE stream (whose drop cancels the request it
//! carries), and the SSE side of [`Outbound`]. An SSE stream holds at most [`SSE_BACKLOG`] frames
//! for a client that reads slower than they come: beyond that, notifications are dropped rather
//! than queued without bound, and a request's reply waits for room.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::Response;
use hyper::StatusCode;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper::header::HeaderValue;
use serde_json::Value;
use tokio::sync::mpsc;

use super::limits::Held;
use crate::exec::CancelFlag;
use crate::protocol::Message;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::session::Outbound;

/// Response body: a complete buffer or an SSE stream.
pub enum Body {
    /// A complete body.
    Full(Option<Bytes>),
    /// A stream of SSE frames; dropping it (client gone) cancels the request it belongs to.
    Stream {
        /// Frames to send.
        rx: mpsc::Receiver<Bytes>,
        /// Cancels the request when the stream is dropped before it finished.
        guard: CancelOnDrop,
    },
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Body::Stream { rx, guard } => match rx.poll_recv(cx) {
                Poll::Ready(Some(bytes)) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                Poll::Ready(None) => {
                    guard.disarm();
                    Poll::Ready(None)
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(Some(d)) => SizeHint::with_exact(d.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Stream { .. } => SizeHint::default(),
        }
    }
}

/// Sets a cancellation flag when dropped, unless disarmed.
pub struct CancelOnDrop(pub(crate) Option<CancelFlag>);

impl CancelOnDrop {
    /// Do not cancel after all (the request finished).
    pub(crate) fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            flag.cancel();
        }
    }
}

/// A JSON response.
pub(crate) fn json_response(status: u16, body: &Value) -> Response<Body> {
    // Straight into a buffer (`to_string` goes through `fmt::Display`); the same bytes.
    json_bytes(status, serde_json::to_vec(body).unwrap_or_default())
}

/// A JSON response carrying a reply.
pub(crate) fn message_response(status: u16, message: &Message) -> Response<Body> {
    json_bytes(status, message.to_vec())
}

fn json_bytes(status: u16, bytes: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Body::Full(Some(Bytes::from(bytes))));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// An error response outside any session, with the status of the error's kind; a 503 says when
/// to retry ([`with_retry_after`]).
pub(crate) fn error_response(id: &Value, e: &RpcError) -> Response<Body> {
    let status = e.kind.http_status(false);
    let resp = json_response(status, &jsonrpc::error_response(id, e));
    if status != 503 {
        return resp;
    }
    let secs = e.data.as_ref().and_then(|d| d["retryAfterSecs"].as_u64());
    with_retry_after(resp, secs.unwrap_or(UNAVAILABLE_RETRY_SECS))
}

/// What `Retry-After` says on a 503 whose error does not say (`data.retryAfterSecs`): the store's
/// health is checked every second and its reconnection backs off up to 2 s.
pub(crate) const UNAVAILABLE_RETRY_SECS: u64 = 2;

/// `resp` with `Retry-After: secs` (a 429 or a 503: the client may try again then).
pub(crate) fn with_retry_after(mut resp: Response<Body>, secs: u64) -> Response<Body> {
    resp.headers_mut()
        .insert(hyper::header::RETRY_AFTER, HeaderValue::from(secs));
    resp
}

/// A response without a body.
pub(crate) fn empty(status: StatusCode) -> Response<Body> {
    let mut resp = Response::new(Body::Full(None));
    *resp.status_mut() = status;
    resp
}

/// One SSE event carrying `message`.
pub(crate) fn sse_frame(message: &Value) -> Bytes {
    Bytes::from(format!("data: {message}\n\n"))
}

/// A streaming `text/event-stream` response fed by `rx`; `cancel` is set if the client goes away
/// before the stream ended.
pub(crate) fn sse_response(
    rx: mpsc::Receiver<Bytes>,
    cancel: Option<CancelFlag>,
) -> Response<Body> {
    let mut resp = Response::new(Body::Stream {
        rx,
        guard: CancelOnDrop(cancel),
    });
    let h = resp.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// Frames an SSE response holds for a client that does not read them yet.
pub(crate) const SSE_BACKLOG: usize = 1024;

/// A new SSE stream: its sending side, and the receiver its response body reads.
pub(crate) fn sse_channel() -> (Sse, mpsc::Receiver<Bytes>) {
    let (tx, rx) = mpsc::channel(SSE_BACKLOG);
    (Sse(tx, None), rx)
}

/// The sending side of an SSE response, and the stream slot of its caller it holds (a long-lived
/// stream's, `http.max_streams_per_caller`) until it is dropped.
pub(crate) struct Sse(mpsc::Sender<Bytes>, Option<Held>);

impl Outbound for Sse {
    /// Queue a notification; dropped (the stream stays open) when the client is [`SSE_BACKLOG`]
    /// frames behind.
    fn send(&self, message: &Value) -> bool {
        self.push(sse_frame(message))
    }

    fn keepalive(&self) -> bool {
        self.comment(": keepalive")
    }
}

impl Sse {
    /// This stream, holding `slot` for as long as it is fed.
    pub(crate) fn holding(mut self, slot: Option<Held>) -> Self {
        self.1 = slot;
        self
    }

    fn push(&self, frame: Bytes) -> bool {
        match self.0.try_send(frame) {
            Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// One event carrying `json` (compact JSON text: one line), as it is; dropped like a
    /// notification when the client is behind.
    pub(crate) fn send_json_text(&self, json: &str) -> bool {
        self.push(Bytes::from(format!("data: {json}\n\n")))
    }

    /// An SSE comment line (`text` starts with `:`).
    pub(crate) fn comment(&self, text: &'static str) -> bool {
        self.push(Bytes::from(format!("{text}\n\n")))
    }

    /// Send a message that must not be dropped (a request's reply), waiting for room.
    pub(crate) async fn send_waiting(&self, message: &Message) -> bool {
        let mut frame = b"data: ".to_vec();
        // Writing into a Vec cannot fail.
        let _ = message.write_to(&mut frame);
        frame.extend_from_slice(b"\n\n");
        self.0.send(Bytes::from(frame)).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_that_does_not_read_holds_a_bounded_backlog_and_still_gets_the_reply() {
        let (out, mut rx) = sse_channel();
        for i in 0..10 * SSE_BACKLOG {
            assert!(out.send(&serde_json::json!({ "progress": i })));
        }
        let reply =
            tokio::spawn(async move { out.send_waiting(&serde_json::json!("reply").into()).await });
        let mut frames = Vec::new();
        while let Some(frame) = rx.recv().await {
            frames.push(frame);
        }
        assert!(reply.await.unwrap());
        assert_eq!(frames.len(), SSE_BACKLOG + 1);
        assert_eq!(
            frames.last().unwrap(),
            &sse_frame(&serde_json::json!("reply"))
        );
    }
}
