//! Cancellation shared between whoever asked for a call (a client's cancel, a closed stream, a
//! timeout) and the call itself: a flag the plugin polls, and a future the host can await.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A cancellation flag shared between the host and a running call.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    set: AtomicBool,
    notify: Notify,
}

impl CancelFlag {
    /// A fresh, unset flag.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the call to stop (wakes every [`CancelFlag::cancelled`] waiter).
    pub fn cancel(&self) {
        self.0.set.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }

    /// Whether it was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.set.load(Ordering::Acquire)
    }

    /// Resolves once the flag is set (at once if it already is).
    pub async fn cancelled(&self) {
        let notified = self.0.notify.notified();
        tokio::pin!(notified);
        // Registered before the check, so a `cancel` in between is not missed.
        notified.as_mut().enable();
        if self.is_cancelled() {
            return;
        }
        notified.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_wake_on_cancel_and_a_set_flag_resolves_at_once() {
        let flag = CancelFlag::new();
        let waiter = tokio::spawn({
            let flag = flag.clone();
            async move { flag.cancelled().await }
        });
        tokio::task::yield_now().await;
        flag.cancel();
        waiter.await.unwrap();
        flag.cancelled().await;
        assert!(flag.is_cancelled());
    }
}
