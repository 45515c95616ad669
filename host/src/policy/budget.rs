//! Named budgets of the `limit` outcome: per key (a caller, or a caller and a tool), a token
//! bucket of `calls` and one of argument `bytes`, both refilled over `per_secs`, and at most
//! `concurrent` calls at once. Local to this process (buckets of idle keys go away once full
//! again), unless a [`SharedBudgets`] counter is set: then every replica draws on the same
//! buckets, kept by the store (Redis). A shared counter that cannot be reached refuses the call
//! (fails closed) with [`BudgetError::unreachable`] set.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crate::config::Budget;

/// Why a budget refused a call.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetError {
    /// The budget's name.
    pub budget: String,
    /// The rule that drew on it.
    pub rule: String,
    /// What ran out (or why it could not be counted).
    pub why: String,
    /// Seconds until a call would be admitted (at least 1).
    pub retry_after_secs: u64,
    /// The budget is shared and its counter (the store) could not be reached: the call is
    /// refused without knowing whether it was within the budget.
    pub unreachable: bool,
}

impl std::fmt::Display for BudgetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            budget,
            why,
            retry_after_secs,
            ..
        } = self;
        if self.unreachable {
            write!(
                f,
                "budget `{budget}` cannot be counted ({why}); retry after {retry_after_secs} s"
            )
        } else {
            write!(
                f,
                "budget `{budget}` is exhausted for this caller ({why}); retry after \
                 {retry_after_secs} s"
            )
        }
    }
}

impl std::error::Error for BudgetError {}

/// One call's draw on a shared budget.
#[derive(Debug, Clone, Copy)]
pub struct Draw<'a> {
    /// The budget's name.
    pub budget: &'a str,
    /// Its limits.
    pub limits: &'a Budget,
    /// Whose bucket.
    pub key: &'a str,
    /// Bytes of arguments the call takes from a `bytes` budget.
    pub arg_bytes: u64,
}

/// Why a shared counter did not admit a call.
#[derive(Debug, Clone, PartialEq)]
pub enum SharedRefusal {
    /// The budget has no room: what ran out, and seconds until it would.
    Exhausted {
        /// What ran out.
        why: String,
        /// Seconds until a call would be admitted.
        retry_after_secs: u64,
    },
    /// The counter could not be reached (why).
    Unreachable(String),
}

/// Held while a call admitted by a shared counter runs: dropping it gives back its concurrent
/// slot (if the budget has `concurrent`).
pub type SharedSlot = Box<dyn std::any::Any + Send + Sync>;

/// A shared answer to a draw.
pub type SharedAdmission<'a> =
    Pin<Box<dyn Future<Output = Result<SharedSlot, SharedRefusal>> + Send + 'a>>;

/// A counter of budgets every replica shares (the store implements it over Redis): one atomic
/// step per call that refills the buckets, checks every limit and draws on them.
pub trait SharedBudgets: Send + Sync + std::fmt::Debug {
    /// Draw one call on a budget, or say why not.
    fn admit<'a>(&'a self, draw: Draw<'a>) -> SharedAdmission<'a>;
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

/// The state of every budget's buckets: this process's own, or a shared counter's.
#[derive(Debug, Default)]
pub struct Budgets {
    buckets: Mutex<HashMap<(String, String), Bucket>>,
    /// The replicas' shared counter and the runtime it runs on, once set.
    shared: OnceLock<(Arc<dyn SharedBudgets>, tokio::runtime::Handle)>,
}

/// Holds one of a budget's concurrent slots until dropped.
#[derive(Debug)]
pub struct BudgetPermit {
    held: Held,
}

enum Held {
    /// A local bucket's count of calls in flight.
    Local(Arc<AtomicU32>),
    /// A shared counter's slot.
    Shared(#[allow(dead_code, reason = "held for its Drop")] SharedSlot),
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Local(n) => write!(f, "Local({n:?})"),
            Held::Shared(_) => f.write_str("Shared"),
        }
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        if let Held::Local(in_flight) = &self.held {
            in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Budgets {
    /// Count budgets with `counter`, shared by the replicas, from now on (once; on the runtime
    /// the caller runs on, which a blocking draw waits on).
    pub fn share(&self, counter: Arc<dyn SharedBudgets>, runtime: tokio::runtime::Handle) {
        if self.shared.set((counter, runtime)).is_err() {
            tracing::warn!("the policy's budgets are shared already");
        }
    }

    /// Take one call (`draw`) at `now`, for `rule`: from the shared counter when there is one,
    /// else locally.
    pub async fn admit(
        &self,
        draw: Draw<'_>,
        rule: &str,
        now: Instant,
    ) -> Result<BudgetPermit, BudgetError> {
        match self.shared.get() {
            Some((counter, _)) => shared_permit(counter.admit(draw).await, draw.budget, rule),
            None => self.admit_drawn(draw, rule, now),
        }
    }

    /// [`Budgets::admit`] on a thread that may block (a tool's call of another tool): a shared
    /// draw is waited for here.
    pub fn admit_blocking(
        &self,
        draw: Draw<'_>,
        rule: &str,
        now: Instant,
    ) -> Result<BudgetPermit, BudgetError> {
        let Some((counter, runtime)) = self.shared.get() else {
            return self.admit_drawn(draw, rule, now);
        };
        let admitted = block_on(runtime, counter.admit(draw)).unwrap_or_else(|| {
            Err(SharedRefusal::Unreachable(
                "a shared budget cannot be waited for on this thread".into(),
            ))
        });
        shared_permit(admitted, draw.budget, rule)
    }

    fn admit_drawn(
        &self,
        draw: Draw<'_>,
        rule: &str,
        now: Instant,
    ) -> Result<BudgetPermit, BudgetError> {
        let Draw {
            budget,
            limits,
            key,
            arg_bytes,
        } = draw;
        self.admit_local(budget, limits, key, rule, (arg_bytes, now))
    }

    /// Take one call from this process's own buckets (see [`Budgets::admit`]).
    pub fn admit_local(
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
            unreachable: false,
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
            held: Held::Local(Arc::clone(&bucket.in_flight)),
        })
    }
}

/// The permit, or the refusal, of a shared draw on budget `name` for `rule`.
fn shared_permit(
    admitted: Result<SharedSlot, SharedRefusal>,
    name: &str,
    rule: &str,
) -> Result<BudgetPermit, BudgetError> {
    let refuse = |why: String, retry_after_secs: u64, unreachable| BudgetError {
        budget: name.to_owned(),
        rule: rule.to_owned(),
        why,
        retry_after_secs: retry_after_secs.max(1),
        unreachable,
    };
    match admitted {
        Ok(slot) => Ok(BudgetPermit {
            held: Held::Shared(slot),
        }),
        Err(SharedRefusal::Exhausted {
            why,
            retry_after_secs,
        }) => Err(refuse(why, retry_after_secs, false)),
        Err(SharedRefusal::Unreachable(why)) => {
            tracing::warn!(
                budget = name,
                "shared budget unreachable, call refused: {why}"
            );
            Err(refuse(
                format!("its shared counter in the store cannot be reached: {why}"),
                UNREACHABLE_RETRY_SECS,
                true,
            ))
        }
    }
}

/// When to retry a call refused because the shared counter could not be reached.
const UNREACHABLE_RETRY_SECS: u64 = 5;

/// Wait for `future` on this thread: off the runtime by driving it on `runtime`; on a worker of
/// a multi-threaded runtime by letting that worker's other tasks move first. `None` where this
/// thread cannot wait (a current-thread runtime).
fn block_on<F: Future>(runtime: &tokio::runtime::Handle, future: F) -> Option<F::Output> {
    match tokio::runtime::Handle::try_current() {
        Err(_) => Some(runtime.block_on(future)),
        Ok(here) if here.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            Some(tokio::task::block_in_place(|| here.block_on(future)))
        }
        Ok(_) => None,
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
            .admit_local("b", &limits, "k", "r", (0, t0))
            .expect("first");
        let b = budgets
            .admit_local("b", &limits, "k", "r", (0, t0))
            .expect("second");
        drop((a, b));
        let err = budgets
            .admit_local("b", &limits, "k", "r", (0, t0))
            .expect_err("third");
        assert_eq!(err.retry_after_secs, 5);
        // Another key has its own bucket.
        budgets
            .admit_local("b", &limits, "other", "r", (0, t0))
            .expect("other key");
        // After 5 s one token is back.
        budgets
            .admit_local("b", &limits, "k", "r", (0, t0 + Duration::from_secs(5)))
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
            .admit_local("c", &limits, "k", "r", (0, now))
            .expect("first");
        assert!(
            budgets
                .admit_local("c", &limits, "k", "r", (0, now))
                .is_err()
        );
        drop(held);
        budgets
            .admit_local("c", &limits, "k", "r", (0, now))
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
            .admit_local("b", &limits, "k", "r", (1001, t0))
            .expect_err("over the whole budget");
        assert!(too_big.why.contains("1001 bytes"), "{too_big}");
        drop(
            budgets
                .admit_local("b", &limits, "k", "r", (600, t0))
                .expect("600"),
        );
        let err = budgets
            .admit_local("b", &limits, "k", "r", (600, t0))
            .expect_err("only 400 left");
        // 200 bytes more are needed: 2 s at 100 bytes a second.
        assert_eq!(err.retry_after_secs, 2);
        // Small calls still fit, and the bucket refills with time.
        drop(
            budgets
                .admit_local("b", &limits, "k", "r", (400, t0))
                .expect("400"),
        );
        budgets
            .admit_local("b", &limits, "k", "r", (600, t0 + Duration::from_secs(6)))
            .expect("refilled");
    }
}
