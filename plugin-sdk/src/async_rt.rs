//! The plugin's own async runtime for `async fn` tools.
//!
//! A plugin links its own copy of tokio, which cannot use the host's reactor, so the plugin owns a small
//! multi-threaded runtime that drives I/O and timers. A call's future is polled on the host's calling
//! thread (inside the runtime's context) and that thread parks between wake-ups. Unlike
//! `Runtime::block_on`, this nests: an async tool may call another async tool of the same plugin.

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

static RUNTIME: OnceLock<Mutex<Option<tokio::runtime::Runtime>>> = OnceLock::new();
static HANDLE: OnceLock<tokio::runtime::Handle> = OnceLock::new();

fn handle() -> &'static tokio::runtime::Handle {
    HANDLE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("mcp-plugin-rt")
            .enable_all()
            .build()
            .expect("the plugin's async runtime could not start");
        let handle = runtime.handle().clone();
        let _ = RUNTIME.set(Mutex::new(Some(runtime)));
        handle
    })
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Run `future` to completion on the current thread, inside the plugin's runtime context.
///
/// ```
/// let n = mcp_plugin_sdk::__private::block_on(async {
///     tokio::time::sleep(std::time::Duration::from_millis(1)).await;
///     41 + 1
/// });
/// assert_eq!(n, 42);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    let _guard = handle().enter();
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// Stop the runtime's worker threads (called from the plugin's `shutdown` hook).
pub(crate) fn shutdown() {
    if let Some(slot) = RUNTIME.get()
        && let Ok(mut guard) = slot.lock()
        && let Some(runtime) = guard.take()
    {
        runtime.shutdown_background();
    }
}
