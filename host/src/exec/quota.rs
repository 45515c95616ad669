//! Per-caller fair sharing: how many tool calls one caller may have in flight, and an optional
//! token-bucket rate. A caller is keyed by the transport (verified user, else agent, else remote
//! address); a refused call is told when to retry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::config::PerCallerLimits;

/// Why a caller's call was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuotaError {
    /// Already `max` calls in flight.
    #[error("too many calls in flight for this caller (the limit is {max})")]
    InFlight {
        /// `limits.per_caller.max_in_flight`.
        max: usize,
    },
    /// Over the sustained rate.
    #[error("too many calls: this caller may start {rate} calls per second")]
    Rate {
        /// `limits.per_caller.calls_per_sec`.
        rate: f64,
        /// Seconds until a call would be admitted.
        retry_after_secs: u64,
    },
}

impl QuotaError {
    /// Seconds after which a retry may succeed (at least 1).
    pub fn retry_after_secs(&self) -> u64 {
        match self {
            QuotaError::InFlight { .. } => 1,
            QuotaError::Rate {
                retry_after_secs, ..
            } => *retry_after_secs,
        }
    }
}

#[derive(Debug)]
struct Bucket {
    /// Shared with the caller's permits, which give their slot back without the map's lock.
    in_flight: Arc<AtomicUsize>,
    tokens: f64,
    refilled: Instant,
}

/// Callers' in-flight counts and rate buckets. Entries go away once a caller is idle and its
/// bucket full, so the map holds only active callers.
#[derive(Debug, Default)]
pub struct Quotas {
    callers: Mutex<HashMap<Arc<str>, Bucket>>,
}

/// Holds one in-flight slot of a caller until dropped.
#[derive(Debug)]
pub struct QuotaPermit {
    in_flight: Arc<AtomicUsize>,
}

impl Drop for QuotaPermit {
    fn drop(&mut self) {
        // Only permits decrement, one each, and an entry is only forgotten at zero.
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Quotas {
    /// Admit one call of caller `key` under `limits` at `now` (the call's start, read once for
    /// the whole call path), or say why not.
    pub fn admit(
        &self,
        key: &str,
        limits: &PerCallerLimits,
        now: Instant,
    ) -> Result<QuotaPermit, QuotaError> {
        let rate = limits.calls_per_sec.filter(|r| *r > 0.0 && r.is_finite());
        let burst = f64::from(limits.burst.max(1));
        let max = limits.max_in_flight.max(1);
        let mut map = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 1024 {
            // Forget callers that are idle with a full bucket: they would start afresh anyway.
            map.retain(|_, b| {
                b.in_flight.load(Ordering::Acquire) > 0
                    || rate.is_some_and(|r| refill(b, now, r, burst) < burst)
            });
        }
        // A caller seen before (nearly every call) is found with one hash of its key.
        let bucket = match map.get_mut(key) {
            Some(bucket) => bucket,
            None => map.entry(Arc::from(key)).or_insert(Bucket {
                in_flight: Arc::default(),
                tokens: burst,
                refilled: now,
            }),
        };
        if bucket.in_flight.load(Ordering::Acquire) >= max {
            return Err(QuotaError::InFlight { max });
        }
        if let Some(rate) = rate {
            let tokens = refill(bucket, now, rate, burst);
            if tokens < 1.0 {
                let wait = ((1.0 - tokens) / rate).ceil().max(1.0);
                return Err(QuotaError::Rate {
                    rate,
                    retry_after_secs: wait as u64,
                });
            }
            bucket.tokens = tokens - 1.0;
        }
        // Under the map's lock: no other admission can pass `max` in between.
        bucket.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok(QuotaPermit {
            in_flight: Arc::clone(&bucket.in_flight),
        })
    }
}

/// Top the bucket up for the time since its last refill; the tokens now available.
fn refill(b: &mut Bucket, now: Instant, rate: f64, burst: f64) -> f64 {
    let elapsed = now.saturating_duration_since(b.refilled).as_secs_f64();
    b.tokens = (b.tokens + elapsed * rate).min(burst);
    b.refilled = now;
    b.tokens
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limits(max_in_flight: usize, calls_per_sec: Option<f64>, burst: u32) -> PerCallerLimits {
        PerCallerLimits {
            max_in_flight,
            calls_per_sec,
            burst,
        }
    }

    #[test]
    fn in_flight_calls_are_bounded_per_caller_and_released_on_drop() {
        let q = Arc::new(Quotas::default());
        let limits = limits(2, None, 1);
        let a1 = q.admit("alice", &limits, Instant::now()).expect("first");
        let _a2 = q.admit("alice", &limits, Instant::now()).expect("second");
        assert_eq!(
            q.admit("alice", &limits, Instant::now()).unwrap_err(),
            QuotaError::InFlight { max: 2 }
        );
        let _b = q
            .admit("bob", &limits, Instant::now())
            .expect("another caller is not affected");
        drop(a1);
        let _a3 = q
            .admit("alice", &limits, Instant::now())
            .expect("a slot came free");
    }

    #[test]
    fn the_rate_admits_a_burst_then_refuses_with_a_retry_time() {
        let q = Arc::new(Quotas::default());
        let limits = limits(100, Some(0.001), 3);
        for _ in 0..3 {
            drop(
                q.admit("alice", &limits, Instant::now())
                    .expect("within the burst"),
            );
        }
        let err = q.admit("alice", &limits, Instant::now()).unwrap_err();
        assert!(matches!(err, QuotaError::Rate { .. }), "{err:?}");
        assert!(err.retry_after_secs() >= 1);
        drop(
            q.admit("bob", &limits, Instant::now())
                .expect("bob has his own bucket"),
        );
    }

    #[test]
    fn the_rate_refills_with_the_time_that_passed_between_calls() {
        let q = Arc::new(Quotas::default());
        let limits = limits(100, Some(10.0), 1);
        let t0 = Instant::now();
        drop(q.admit("alice", &limits, t0).expect("the first call"));
        let early = q.admit("alice", &limits, t0 + Duration::from_millis(50));
        assert!(matches!(early, Err(QuotaError::Rate { .. })), "{early:?}");
        drop(
            q.admit("alice", &limits, t0 + Duration::from_millis(150))
                .expect("a token came back after 100 ms"),
        );
    }

    #[test]
    fn idle_callers_are_forgotten_but_callers_with_calls_in_flight_are_kept() {
        let q = Arc::new(Quotas::default());
        let limits = limits(1, None, 1);
        let now = Instant::now();
        let held = q.admit("busy", &limits, now).expect("busy's call");
        for i in 0..1100 {
            drop(
                q.admit(&format!("idle-{i}"), &limits, now)
                    .expect("an idle caller"),
            );
        }
        assert!(
            q.callers.lock().expect("lock").len() < 1100,
            "idle callers were forgotten"
        );
        assert_eq!(
            q.admit("busy", &limits, now).unwrap_err(),
            QuotaError::InFlight { max: 1 },
            "the busy caller's slot is still counted"
        );
        drop(held);
        drop(q.admit("busy", &limits, now).expect("its slot came back"));
    }
}
