//! The notifications one POSTed request emits before its reply, handed from wherever its call runs
//! (the connection's task, a worker thread, a worker process's reader) to the POST that answers
//! it. Whether one comes before the reply decides between a JSON answer and an SSE stream.
//!
//! Most requests emit none, so the inbox costs one small allocation and no wait-list entry when
//! nothing is sent (a tokio `mpsc` channel allocates its first 32-slot block up front).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::Notify;

use crate::protocol::Notifier;

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Value>>,
    /// Set when the notifier (every clone of it) is gone: nothing more can arrive.
    closed: AtomicBool,
    arrived: Notify,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, VecDeque<Value>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sending half, owned by the notifier's closure: closes the inbox when dropped.
struct Sender(Arc<Shared>);

impl Sender {
    fn send(&self, notification: Value) {
        self.0.queue().push_back(notification);
        self.0.arrived.notify_one();
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.arrived.notify_one();
    }
}

/// The receiving half.
pub(super) struct Inbox(Arc<Shared>);

/// A fresh inbox and the notifier that fills it; the inbox closes when the notifier (with all its
/// clones) is dropped.
pub(super) fn inbox() -> (Notifier, Inbox) {
    let shared = Arc::new(Shared::default());
    let sender = Sender(Arc::clone(&shared));
    (Arc::new(move |n| sender.send(n)), Inbox(shared))
}

impl Inbox {
    /// The next notification already queued, if any.
    pub(super) fn try_recv(&mut self) -> Option<Value> {
        self.0.queue().pop_front()
    }

    /// The next notification, waiting for one; `None` once the notifier is gone and every
    /// notification was taken.
    pub(super) async fn recv(&mut self) -> Option<Value> {
        loop {
            // Read before the queue: a notifier that closed after queueing is seen with its queue.
            let closed = self.0.closed.load(Ordering::Acquire);
            if let Some(n) = self.try_recv() {
                return Some(n);
            }
            if closed {
                return None;
            }
            // A send between the checks above and this wait leaves a permit: no wake-up is lost.
            self.0.arrived.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn notifications_arrive_in_order_then_none_once_the_notifier_is_dropped() {
        let (notify, mut inbox) = inbox();
        assert!(inbox.try_recv().is_none());
        notify(json!(1));
        notify(json!(2));
        let clone = Arc::clone(&notify);
        drop(notify);
        let later = std::thread::spawn(move || clone(json!(3)));
        assert_eq!(inbox.recv().await, Some(json!(1)));
        assert_eq!(inbox.recv().await, Some(json!(2)));
        later.join().expect("the sending thread");
        assert_eq!(inbox.recv().await, Some(json!(3)));
        assert_eq!(inbox.recv().await, None, "every clone is gone");
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_by_a_send_from_another_thread() {
        let (notify, mut inbox) = inbox();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            notify(json!("late"));
        });
        assert_eq!(inbox.recv().await, Some(json!("late")));
        sender.join().expect("the sending thread");
        assert_eq!(inbox.recv().await, None);
    }
}
