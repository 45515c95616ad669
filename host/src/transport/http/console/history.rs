//! The overview's charts: every [`STEP`] the call feed's totals are sampled, and the calls per
//! second, failure rate and latency quantiles of each step kept for the last [`KEPT`] steps.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::telemetry::feed::{Feed, Totals};

/// Time between two samples.
pub(super) const STEP: Duration = Duration::from_secs(2);
/// Samples kept (10 minutes).
const KEPT: usize = 300;

/// One step of the charts.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Point {
    /// When the step ended (Unix milliseconds).
    t: u64,
    /// Calls per second.
    rate: f64,
    /// Share of calls that failed (0..=1; 0 without calls).
    errors: f64,
    /// Median latency in milliseconds (a bucket's upper bound), when there were calls.
    p50: Option<f64>,
    /// 99th percentile latency in milliseconds, when there were calls.
    p99: Option<f64>,
}

/// The samples, and the task taking them.
#[derive(Debug)]
pub(super) struct History {
    points: Arc<Mutex<VecDeque<Point>>>,
    sampler: tokio::task::JoinHandle<()>,
}

impl History {
    /// Start sampling `feed`.
    pub(super) fn start(feed: Arc<Feed>) -> History {
        let points = Arc::new(Mutex::new(VecDeque::with_capacity(KEPT)));
        let kept = Arc::clone(&points);
        let sampler = tokio::spawn(async move {
            let mut tick = tokio::time::interval(STEP);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last: Totals = feed.totals();
            loop {
                tick.tick().await;
                let now = feed.totals();
                let step = now.since(&last);
                last = now;
                let point = Point {
                    t: crate::store::now_ms(),
                    rate: step.calls as f64 / STEP.as_secs_f64(),
                    errors: if step.calls == 0 {
                        0.0
                    } else {
                        step.failed as f64 / step.calls as f64
                    },
                    p50: step.quantile_ms(0.5),
                    p99: step.quantile_ms(0.99),
                };
                let mut points = kept.lock().unwrap_or_else(|p| p.into_inner());
                if points.len() == KEPT {
                    points.pop_front();
                }
                points.push_back(point);
            }
        });
        History { points, sampler }
    }

    /// The samples, oldest first.
    pub(super) fn points(&self) -> Vec<Point> {
        let points = self.points.lock().unwrap_or_else(|p| p.into_inner());
        points.iter().cloned().collect()
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}
