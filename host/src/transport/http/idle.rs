//! The header-read deadline of a connection: one that has waited `http.header_read_timeout_secs`
//! for a request's head — since it was accepted, or since its last response was sent — is closed.
//! This is also the idle keep-alive limit, and what closes a client that sends its head a byte at
//! a time (a request's body has its own deadline, `http.body_read_timeout_secs`).
//!
//! hyper's own `header_read_timeout` arms a timer for every request head it waits for (a boxed
//! sleep registered in the runtime's timer wheel and removed again when the head arrives). Here a
//! connection has one timer, armed when it is accepted and moved only when it fires; a request
//! just marks the connection busy and, when its response is done, stamps the time.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Instant;

use super::Body;

/// One connection's requests in progress and when it last became idle.
#[derive(Debug)]
pub(super) struct Watch {
    accepted: Instant,
    /// Nanoseconds from `accepted` to the end of the last response.
    idle_since: AtomicU64,
    /// Requests whose head arrived and whose response is not yet sent.
    busy: AtomicUsize,
}

/// Marks a connection busy until dropped (with the response's body, once hyper has sent it).
#[derive(Debug)]
pub(super) struct Busy(Arc<Watch>);

impl Drop for Busy {
    fn drop(&mut self) {
        let since = self.0.accepted.elapsed().as_nanos();
        self.0
            .idle_since
            .store(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Release);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Watch {
    /// The watch of a connection accepted now.
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Watch {
            accepted: Instant::now(),
            idle_since: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        })
    }

    /// A request's head arrived: the connection is busy until the returned guard is dropped.
    pub(super) fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    /// When the connection became idle (its accept, or the end of its last response).
    fn idle_since(&self) -> Instant {
        self.accepted + Duration::from_nanos(self.idle_since.load(Ordering::Acquire))
    }

    /// Resolves once the connection has been idle for `timeout` without a request head arriving.
    /// While a request is in progress the deadline does not run; it is checked again a `timeout`
    /// later.
    pub(super) async fn expired(&self, timeout: Duration) {
        let mut at = self.accepted + timeout;
        loop {
            tokio::time::sleep_until(at).await;
            let now = Instant::now();
            if self.busy.load(Ordering::Acquire) > 0 {
                at = now + timeout;
                continue;
            }
            let due = self.idle_since() + timeout;
            if due <= now {
                return;
            }
            at = due;
        }
    }
}

/// A response body that keeps its connection busy until hyper drops it: once it is sent, or with
/// the connection.
pub(super) struct Tracked {
    body: Body,
    _busy: Busy,
}

impl Tracked {
    /// `body`, keeping `busy` until it is dropped.
    pub(super) fn new(body: Body, busy: Busy) -> Self {
        Tracked { body, _busy: busy }
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    //! On the real clock (paused time would need tokio's `test-util` feature, which `cargo test`
    //! would then also build into the `mcp-host` binary the end-to-end tests run, putting a lock
    //! in every clock read): each assertion is a bound that holds however loaded the machine is,
    //! with a generous deadline for what must happen.

    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(100);
    const DEADLINE: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn an_idle_connection_expires_after_the_timeout_from_its_accept() {
        let watch = Watch::new();
        tokio::time::timeout(DEADLINE, watch.expired(TIMEOUT))
            .await
            .expect("an idle connection expires");
        assert!(watch.accepted.elapsed() >= TIMEOUT, "expired early");
    }

    #[tokio::test]
    async fn a_busy_connection_does_not_expire_and_its_deadline_runs_from_its_last_response() {
        let watch = Watch::new();
        let busy = watch.begin();
        let expired = {
            let watch = Arc::clone(&watch);
            tokio::spawn(async move { watch.expired(TIMEOUT).await })
        };
        // Several timeouts pass with a request in progress.
        tokio::time::sleep(TIMEOUT * 5).await;
        assert!(
            !expired.is_finished(),
            "expired while a request was in progress"
        );
        let idle_from = Instant::now();
        drop(busy);
        tokio::time::timeout(DEADLINE, expired)
            .await
            .expect("an idle connection expires")
            .expect("the watch ends");
        assert!(
            idle_from.elapsed() >= TIMEOUT,
            "expired less than the timeout after its last response"
        );
    }
}
