//! The call feed: what the operator console draws and streams. Totals of calls, failures and a
//! latency histogram (a few relaxed atomic additions per call), and the audit records of calls
//! and console actions as they happen — serialised only while somebody watches.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::broadcast;

/// Upper bounds of the latency buckets, in microseconds (the last bucket is everything above).
pub const LATENCY_BOUNDS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// How many records a slow watcher may fall behind before it skips some.
const BACKLOG: usize = 256;

/// Totals since start, and the live stream of records.
#[derive(Debug)]
pub struct Feed {
    calls: AtomicU64,
    failed: AtomicU64,
    latency: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    watchers: AtomicUsize,
    live: broadcast::Sender<Arc<str>>,
}

impl Default for Feed {
    fn default() -> Self {
        Feed {
            calls: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
            watchers: AtomicUsize::new(0),
            live: broadcast::channel(BACKLOG).0,
        }
    }
}

/// The feed's totals at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Calls ended.
    pub calls: u64,
    /// Of which did not end with a result (`isError`, refused, failed, timed out, cancelled).
    pub failed: u64,
    /// Calls per latency bucket ([`LATENCY_BOUNDS_US`], then the overflow).
    pub latency: Vec<u64>,
}

impl Totals {
    /// What happened between `earlier` and these totals.
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            calls: self.calls.saturating_sub(earlier.calls),
            failed: self.failed.saturating_sub(earlier.failed),
            latency: self
                .latency
                .iter()
                .zip(earlier.latency.iter().chain(std::iter::repeat(&0)))
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
        }
    }

    /// The latency quantile `q` (0..=1) in milliseconds: the upper bound of the bucket it falls in
    /// (the last bound for the overflow); `None` without calls.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total: u64 = self.latency.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.latency.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let bound = LATENCY_BOUNDS_US[i.min(LATENCY_BOUNDS_US.len() - 1)];
                return Some(bound as f64 / 1e3);
            }
        }
        None
    }
}

impl Feed {
    /// A call ended after `took`; `ok` when with a result that is not an error.
    pub fn count(&self, ok: bool, took: Duration) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BOUNDS_US.partition_point(|bound| *bound < us);
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// The totals now.
    pub fn totals(&self) -> Totals {
        Totals {
            calls: self.calls.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            latency: self
                .latency
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect(),
        }
    }

    /// Whether anybody watches the live stream (records are made only then).
    pub fn watched(&self) -> bool {
        self.watchers.load(Ordering::Relaxed) > 0
    }

    /// Send `record` (an audit record: never an argument's value) to the watchers.
    pub fn publish(&self, record: &impl Serialize) {
        if !self.watched() {
            return;
        }
        match serde_json::to_string(record) {
            Ok(line) => {
                let _ = self.live.send(line.into());
            }
            Err(e) => tracing::debug!("a live record was not sent: {e}"),
        }
    }

    /// Watch the live stream from now on.
    pub fn watch(self: &Arc<Self>) -> Watch {
        self.watchers.fetch_add(1, Ordering::Relaxed);
        Watch {
            feed: Arc::clone(self),
            records: self.live.subscribe(),
        }
    }
}

/// One watcher of the live stream; it stops counting as one when dropped.
#[derive(Debug)]
pub struct Watch {
    feed: Arc<Feed>,
    records: broadcast::Receiver<Arc<str>>,
}

impl Watch {
    /// The next record (JSON text); `None` when the feed is gone. A watcher that fell behind
    /// skips what it missed.
    pub async fn next(&mut self) -> Option<Arc<str>> {
        loop {
            match self.records.recv().await {
                Ok(line) => return Some(line),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.feed.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_calls_between_two_totals() {
        let feed = Feed::default();
        let before = feed.totals();
        for _ in 0..98 {
            feed.count(true, Duration::from_micros(80));
        }
        feed.count(false, Duration::from_millis(3));
        feed.count(false, Duration::from_secs(60));
        let window = feed.totals().since(&before);
        assert_eq!((window.calls, window.failed), (100, 2));
        assert_eq!(window.quantile_ms(0.5), Some(0.1));
        assert_eq!(window.quantile_ms(0.99), Some(5.0));
        assert_eq!(window.quantile_ms(1.0), Some(10_000.0));
        assert_eq!(Totals::default().quantile_ms(0.5), None);
    }

    #[tokio::test]
    async fn records_are_made_only_while_watched_and_reach_each_watcher() {
        let feed = Arc::new(Feed::default());
        assert!(!feed.watched());
        let mut watch = feed.watch();
        assert!(feed.watched());
        feed.publish(&serde_json::json!({"tool": "echo"}));
        assert_eq!(watch.next().await.as_deref(), Some(r#"{"tool":"echo"}"#));
        drop(watch);
        assert!(!feed.watched());
    }
}
