//! The executor: where plugin calls run, off the async reactor.
//!
//! Calls are blocking at the ABI. A dedicated pool of worker threads takes them through a channel (a
//! cheaper hand-off than `spawn_blocking`), growing on demand up to the global concurrency limit. A
//! call holds a global and a per-plugin permit until the plugin's function actually returns — even
//! after its timeout answered the client — so a hanging tool can never make the host spawn without
//! bound; excess calls wait in FIFO order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A growable pool of worker threads for plugin calls.
#[derive(Debug)]
pub(crate) struct WorkerPool {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    idle: Arc<AtomicUsize>,
    spawned: AtomicUsize,
    max: usize,
}

impl WorkerPool {
    /// A pool of at most `max` threads (none are started until needed).
    pub(crate) fn new(max: usize) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        WorkerPool {
            tx,
            rx,
            idle: Arc::new(AtomicUsize::new(0)),
            spawned: AtomicUsize::new(0),
            max: max.max(1),
        }
    }

    /// Run `job` on a worker thread.
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) {
        // The receiver lives as long as the pool, so sending cannot fail.
        let _ = self.tx.send(Box::new(job));
        // More queued jobs than idle workers: start one more (bounded by `max`; the permits callers
        // hold already bound how many jobs can be queued at once).
        if self.rx.len() > self.idle.load(Ordering::Acquire) {
            self.grow();
        }
    }

    fn grow(&self) {
        let n = self.spawned.fetch_add(1, Ordering::AcqRel);
        if n >= self.max {
            self.spawned.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let rx = self.rx.clone();
        let idle = Arc::clone(&self.idle);
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-call-{n}"))
            .spawn(move || {
                loop {
                    idle.fetch_add(1, Ordering::AcqRel);
                    let job = rx.recv();
                    idle.fetch_sub(1, Ordering::AcqRel);
                    match job {
                        Ok(job) => job(),
                        Err(_) => break,
                    }
                }
            });
        if let Err(e) = spawned {
            self.spawned.fetch_sub(1, Ordering::AcqRel);
            tracing::error!("cannot start a call worker thread: {e}");
        }
    }
}
