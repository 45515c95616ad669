//! Named budgets of the `limit` outcome: per key (a caller, or a caller and a tool), a token
//! bucket of `calls` refilled over `per_secs`, and at most `concurrent` calls at once. Local to
//! this process; buckets of idle keys go away once full again.

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
    tokens: f64,
    refilled: Instant,
    in_flight: Arc<AtomicU32>,
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
    /// Take one call from budget `name` (`limits`) for `key` at `now`, for `rule`.
    pub fn admit(
        &self,
        name: &str,
        limits: &Budget,
        key: &str,
        rule: &str,
        now: Instant,
    ) -> Result<BudgetPermit, BudgetError> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        // Forget idle keys whose bucket is full again (bounded memory with many callers).
        if buckets.len() > 4096 {
            buckets.retain(|_, b| {
                b.in_flight.load(Ordering::Acquire) > 0
                    || now.duration_since(b.refilled).as_secs_f64() < 3600.0
            });
        }
        let capacity = f64::from(limits.calls.unwrap_or(0));
        let bucket = buckets
            .entry((name.to_owned(), key.to_owned()))
            .or_insert_with(|| Bucket {
                tokens: capacity,
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
        if let Some(calls) = limits.calls {
            let rate = capacity / limits.per_secs;
            let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
            bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
            bucket.refilled = now;
            if bucket.tokens < 1.0 {
                let wait = ((1.0 - bucket.tokens) / rate).ceil();
                return Err(refuse(
                    format!("{calls} calls per {} s", limits.per_secs),
                    wait as u64,
                ));
            }
            bucket.tokens -= 1.0;
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
        };
        let t0 = Instant::now();
        let a = budgets.admit("b", &limits, "k", "r", t0).expect("first");
        let b = budgets.admit("b", &limits, "k", "r", t0).expect("second");
        drop((a, b));
        let err = budgets
            .admit("b", &limits, "k", "r", t0)
            .expect_err("third");
        assert_eq!(err.retry_after_secs, 5);
        // Another key has its own bucket.
        budgets
            .admit("b", &limits, "other", "r", t0)
            .expect("other key");
        // After 5 s one token is back.
        budgets
            .admit("b", &limits, "k", "r", t0 + Duration::from_secs(5))
            .expect("refilled");
    }

    #[test]
    fn concurrent_calls_are_bounded_until_a_permit_is_dropped() {
        let budgets = Budgets::default();
        let limits = Budget {
            calls: None,
            per_secs: 60.0,
            concurrent: Some(1),
        };
        let now = Instant::now();
        let held = budgets.admit("c", &limits, "k", "r", now).expect("first");
        assert!(budgets.admit("c", &limits, "k", "r", now).is_err());
        drop(held);
        budgets
            .admit("c", &limits, "k", "r", now)
            .expect("after release");
    }
}
