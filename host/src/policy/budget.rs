//! Named budgets of the `limit` outcome: per key (a caller, or a caller and a tool), a token
//! bucket of `calls` and one of argument `bytes`, both refilled over `per_secs`, and at most
//! `concurrent` calls at once. Local to this process; buckets of idle keys go away once full
//! again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::config::Budget;

/// Why a budget refused a call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("budget `{budget}` is exhausted for this caller ({why}); retry after {retry_after_secs} s")]
pub struct BudgetError {
    /// The budget's name.
    pub budget: String,
    /// The rule that drew on it.
    pub rule: String,
    /// What ran out.
    pub why: String,
    /// Seconds until a call would be admitted (at least 1).
    pub retry_after_secs: u64,
}

#[derive(Debug)]
struct Bucket {
    /// Calls left in the window (`calls` budgets).
    calls: Level,
    /// Argument bytes left in the window (`bytes` budgets).
    bytes: Level,
    refilled: Instant,
    in_flight: Arc<AtomicU32>,
}

/// A token bucket's level, refilled to its capacity over the budget's window.
#[derive(Debug)]
struct Level(f64);

impl Level {
    /// Refill for `share` of a window (elapsed seconds / `per_secs`), up to `capacity`.
    fn refill(&mut self, share: f64, capacity: f64) {
        self.0 = (self.0 + share * capacity).min(capacity);
    }

    /// Seconds until `amount` is there, when it is not now.
    fn wait_for(&self, amount: f64, capacity: f64, per_secs: f64) -> Option<u64> {
        (self.0 < amount).then(|| ((amount - self.0) * per_secs / capacity).ceil() as u64)
    }
}

/// The state of every budget's buckets.
#[derive(Debug, Default)]
pub struct Budgets {
    buckets: Mutex<HashMap<(String, String), Bucket>>,
}

/// Holds one of a budget's concurrent slots until dropped.
#[derive(Debug)]
pub struct BudgetPermit {
    in_flight: Arc<AtomicU32>,
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Budgets {
    /// Take one call with `arg_bytes` of arguments from budget `name` (`limits`) for `key` at
    /// `now`, for `rule`.
    pub fn admit(
        &self,
        name: &str,
        limits: &Budget,
        key: &str,
        rule: &str,
        call: (u64, Instant),
    ) -> Result<BudgetPermit, BudgetError> {
        let (arg_bytes, now) = call;
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        // Forget idle keys whose bucket is full again (bounded memory with many callers).
        if buckets.len() > 4096 {
            buckets.retain(|_, b| {
                b.in_flight.load(Ordering::Acquire) > 0
                    || now.duration_since(b.refilled).as_secs_f64() < 3600.0
            });
        }
        let calls_capacity = f64::from(limits.calls.unwrap_or(0));
        let bytes_capacity = limits.bytes.unwrap_or(0) as f64;
        let bucket = buckets
            .entry((name.to_owned(), key.to_owned()))
            .or_insert_with(|| Bucket {
                calls: Level(calls_capacity),
                bytes: Level(bytes_capacity),
                refilled: now,
                in_flight: Arc::default(),
            });
        let refuse = |why: String, retry_after_secs: u64| BudgetError {
            budget: name.to_owned(),
            rule: rule.to_owned(),
            why,
            retry_after_secs: retry_after_secs.max(1),
        };
        if let Some(max) = limits.concurrent
            && bucket.in_flight.load(Ordering::Acquire) >= max
        {
            return Err(refuse(format!("{max} calls at once"), 1));
        }
        let per_secs = limits.per_secs;
        let share = now.saturating_duration_since(bucket.refilled).as_secs_f64() / per_secs;
        bucket.refilled = now;
        bucket.calls.refill(share, calls_capacity);
        bucket.bytes.refill(share, bytes_capacity);
        if let Some(calls) = limits.calls
            && let Some(wait) = bucket.calls.wait_for(1.0, calls_capacity, per_secs)
        {
            return Err(refuse(format!("{calls} calls per {per_secs} s"), wait));
        }
        if let Some(bytes) = limits.bytes {
            if arg_bytes > bytes {
                return Err(refuse(
                    format!(
                        "these arguments are {arg_bytes} bytes, over the {bytes} bytes of \
                         arguments it allows per {per_secs} s"
                    ),
                    per_secs.ceil() as u64,
                ));
            }
            let needed = arg_bytes as f64;
            if let Some(wait) = bucket.bytes.wait_for(needed, bytes_capacity, per_secs) {
                return Err(refuse(
                    format!("{bytes} bytes of arguments per {per_secs} s"),
                    wait,
                ));
            }
            bucket.bytes.0 -= needed;
        }
        if limits.calls.is_some() {
            bucket.calls.0 -= 1.0;
        }
        bucket.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok(BudgetPermit {
            in_flight: Arc::clone(&bucket.in_flight),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_bucket_empties_then_refills_with_time() {
        let budgets = Budgets::default();
        let limits = Budget {
            calls: Some(2),
            per_secs: 10.0,
            concurrent: None,
            bytes: None,
        };
        let t0 = Instant::now();
        let a = budgets
            .admit("b", &limits, "k", "r", (0, t0))
            .expect("first");
        let b = budgets
            .admit("b", &limits, "k", "r", (0, t0))
            .expect("second");
        drop((a, b));
        let err = budgets
            .admit("b", &limits, "k", "r", (0, t0))
            .expect_err("third");
        assert_eq!(err.retry_after_secs, 5);
        // Another key has its own bucket.
        budgets
            .admit("b", &limits, "other", "r", (0, t0))
            .expect("other key");
        // After 5 s one token is back.
        budgets
            .admit("b", &limits, "k", "r", (0, t0 + Duration::from_secs(5)))
            .expect("refilled");
    }

    #[test]
    fn concurrent_calls_are_bounded_until_a_permit_is_dropped() {
        let budgets = Budgets::default();
        let limits = Budget {
            calls: None,
            per_secs: 60.0,
            concurrent: Some(1),
            bytes: None,
        };
        let now = Instant::now();
        let held = budgets
            .admit("c", &limits, "k", "r", (0, now))
            .expect("first");
        assert!(budgets.admit("c", &limits, "k", "r", (0, now)).is_err());
        drop(held);
        budgets
            .admit("c", &limits, "k", "r", (0, now))
            .expect("after release");
    }

    #[test]
    fn argument_bytes_drain_their_own_bucket_and_an_oversized_call_is_refused_outright() {
        let budgets = Budgets::default();
        let limits = Budget {
            calls: None,
            per_secs: 10.0,
            concurrent: None,
            bytes: Some(1000),
        };
        let t0 = Instant::now();
        let too_big = budgets
            .admit("b", &limits, "k", "r", (1001, t0))
            .expect_err("over the whole budget");
        assert!(too_big.why.contains("1001 bytes"), "{too_big}");
        drop(
            budgets
                .admit("b", &limits, "k", "r", (600, t0))
                .expect("600"),
        );
        let err = budgets
            .admit("b", &limits, "k", "r", (600, t0))
            .expect_err("only 400 left");
        // 200 bytes more are needed: 2 s at 100 bytes a second.
        assert_eq!(err.retry_after_secs, 2);
        // Small calls still fit, and the bucket refills with time.
        drop(
            budgets
                .admit("b", &limits, "k", "r", (400, t0))
                .expect("400"),
        );
        budgets
            .admit("b", &limits, "k", "r", (600, t0 + Duration::from_secs(6)))
            .expect("refilled");
    }
}
