//! [`Detached`]: a future polled in place that, should its owner stop waiting for it, finishes on a
//! task of its own instead of being dropped half-way.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A boxed future that is driven where it is awaited, without the cost of spawning a task; if it
/// is dropped before it finished (a timeout, a request that went away), what is left of it is
/// spawned on the current runtime and runs to its end. Its output is `None` once it has been
/// taken, or when polling it panicked (the panic is logged and the future dropped: a bug in one
/// request never takes its connection down with it).
pub(crate) struct Detached<T: Send + 'static>(Option<Pin<Box<dyn Future<Output = T> + Send>>>);

impl<T: Send + 'static> Detached<T> {
    /// Wrap `future`, which has not started yet.
    pub(crate) fn new(future: impl Future<Output = T> + Send + 'static) -> Self {
        Detached(Some(Box::pin(future)))
    }
}

impl<T: Send + 'static> Future for Detached<T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(running) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| running.as_mut().poll(cx)));
        let Ok(polled) = polled else {
            tracing::error!("a request panicked while it ran; it is answered as lost");
            self.0 = None;
            return Poll::Ready(None);
        };
        if polled.is_ready() {
            self.0 = None;
        }
        polled.map(Some)
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        if let Some(running) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(running);
        }
    }
}
