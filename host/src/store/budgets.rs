//! The call policy's budgets shared by every replica, in Redis ([`SharedBudgets`]): one Lua script
//! per call refills a budget's buckets, checks its limits and draws on them, atomically, on
//! Redis's clock (`TIME`), so replicas with skewed clocks count alike.
//!
//! | key | type | what |
//! |---|---|---|
//! | `budget:{name}:{key}` | hash `c`, `b`, `t` | the calls and bytes left in a caller's buckets, and when they were last refilled (ms); expires once it would be full again |
//! | `budget:{name}:{key}:running` | sorted set slot → lease end (ms) | the calls running now (`concurrent`): each slot is renewed while its call runs, so a replica that stops leaves slots that expire within [`LEASE`] |

use std::sync::Arc;
use std::time::Duration;

use ::redis::Script;
use ::redis::aio::ConnectionManager;

use super::redis::{PREFIX, timed};
use super::{Store, StoreError};
use crate::policy::budget::{Draw, SharedAdmission, SharedBudgets, SharedRefusal, SharedSlot};

/// How long a concurrent slot lives without renewal: a stopped replica's calls stop counting
/// within this.
const LEASE: Duration = Duration::from_secs(30);

/// Refill, check and draw, in one step. KEYS: the buckets, the running slots. ARGV: calls,
/// bytes, concurrent (0: no such limit), the window (ms), the call's slot, its bytes, the lease
/// (ms). Answers `{0, 0}` (admitted), or `{why, ms}`: 1 too many at once, 2 no call left, 3 the
/// arguments are over the whole bytes budget, 4 not enough bytes left; `ms` until there would be.
const ADMIT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local calls, bytes, concurrent = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local per, need, lease = tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
if concurrent > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= concurrent then return {1, 1000} end
end
local held = redis.call('HMGET', KEYS[1], 'c', 'b', 't')
local c, b = tonumber(held[1]) or calls, tonumber(held[2]) or bytes
local share = math.max(0, now - (tonumber(held[3]) or now)) / per
c = math.min(calls, c + share * calls)
b = math.min(bytes, b + share * bytes)
if calls > 0 and c < 1 then return {2, math.ceil((1 - c) * per / calls)} end
if bytes > 0 then
  if need > bytes then return {3, per} end
  if b < need then return {4, math.ceil((need - b) * per / bytes)} end
  b = b - need
end
if calls > 0 then c = c - 1 end
redis.call('HSET', KEYS[1], 'c', tostring(c), 'b', tostring(b), 't', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(per) + 1000)
if concurrent > 0 then
  redis.call('ZADD', KEYS[2], now + lease, ARGV[5])
  redis.call('PEXPIRE', KEYS[2], lease + 1000)
end
return {0, 0}
";

/// Push a running slot's lease end on. KEYS: the running slots. ARGV: the slot, the lease (ms).
const RENEW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + 1000)
return 1
";

/// The budgets' counter over the store's Redis connection.
pub(super) struct RedisBudgets {
    conn: ConnectionManager,
    admit: Script,
    renew: Arc<Script>,
    /// The store, to refuse at once while it is known to be unreachable.
    store: Store,
}

impl std::fmt::Debug for RedisBudgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBudgets")
            .field("store", &self.store.describe())
            .finish_non_exhaustive()
    }
}

impl RedisBudgets {
    pub(super) fn new(conn: ConnectionManager, store: Store) -> Self {
        RedisBudgets {
            conn,
            admit: Script::new(ADMIT),
            renew: Arc::new(Script::new(RENEW)),
            store,
        }
    }

    async fn draw(&self, draw: Draw<'_>) -> Result<SharedSlot, SharedRefusal> {
        if !self.store.is_reachable() {
            return Err(SharedRefusal::Unreachable(format!(
                "{} does not answer",
                self.store.describe()
            )));
        }
        let limits = draw.limits;
        let bucket = format!("{PREFIX}budget:{}:{}", draw.budget, draw.key);
        let running = format!("{bucket}:running");
        let slot = format!("{}:{}", self.store.replica(), super::new_id());
        let per_ms = (limits.per_secs * 1000.0).ceil().max(1.0) as u64;
        let mut call = self.admit.prepare_invoke();
        call.key(&bucket)
            .key(&running)
            .arg(limits.calls.unwrap_or(0))
            .arg(limits.bytes.unwrap_or(0))
            .arg(limits.concurrent.unwrap_or(0))
            .arg(per_ms)
            .arg(&slot)
            .arg(draw.arg_bytes)
            .arg(LEASE.as_millis() as u64);
        let mut conn = self.conn.clone();
        let answered: Result<(i64, i64), StoreError> = timed(call.invoke_async(&mut conn)).await;
        let (why, wait_ms) = answered.map_err(|e| SharedRefusal::Unreachable(e.to_string()))?;
        let retry_after_secs = (wait_ms.max(0) as u64).div_ceil(1000);
        let per_secs = limits.per_secs;
        let why = match why {
            0 if limits.concurrent.is_some() => return Ok(self.hold(running, slot)),
            0 => return Ok(Box::new(())),
            1 => format!("{} calls at once", limits.concurrent.unwrap_or(0)),
            2 => format!("{} calls per {per_secs} s", limits.calls.unwrap_or(0)),
            3 => format!(
                "these arguments are {} bytes, over the {} bytes of arguments it allows per \
                 {per_secs} s",
                draw.arg_bytes,
                limits.bytes.unwrap_or(0)
            ),
            _ => format!(
                "{} bytes of arguments per {per_secs} s",
                limits.bytes.unwrap_or(0)
            ),
        };
        Err(SharedRefusal::Exhausted {
            why,
            retry_after_secs,
        })
    }

    /// The running `slot` in `running`, renewed until the guard is dropped, then removed.
    fn hold(&self, running: String, slot: String) -> SharedSlot {
        let (conn, renew) = (self.conn.clone(), Arc::clone(&self.renew));
        let (key, member) = (running.clone(), slot.clone());
        let renewing = tokio::spawn(async move {
            let mut tick = tokio::time::interval(LEASE / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                let mut conn = conn.clone();
                let mut call = renew.prepare_invoke();
                call.key(&key).arg(&member).arg(LEASE.as_millis() as u64);
                if let Err(e) = timed(call.invoke_async::<i64>(&mut conn)).await {
                    tracing::warn!("a shared budget's running call could not be renewed: {e}");
                }
            }
        });
        Box::new(Running {
            renewing,
            conn: self.conn.clone(),
            key: running,
            slot,
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

/// A concurrent slot held in Redis: renewed while held, removed when dropped.
struct Running {
    renewing: tokio::task::JoinHandle<()>,
    conn: ConnectionManager,
    key: String,
    slot: String,
    runtime: tokio::runtime::Handle,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.renewing.abort();
        let mut conn = self.conn.clone();
        let (key, slot) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.slot),
        );
        // Dropped on any thread (a pool thread, for a nested call): removed on the runtime. Should
        // it fail, the slot expires with its lease.
        self.runtime.spawn(async move {
            let mut removed = ::redis::cmd("ZREM");
            removed.arg(&key).arg(&slot);
            if let Err(e) = timed(removed.query_async::<i64>(&mut conn)).await {
                tracing::warn!("a shared budget's slot could not be given back: {e}");
            }
        });
    }
}

impl SharedBudgets for RedisBudgets {
    fn admit<'a>(&'a self, draw: Draw<'a>) -> SharedAdmission<'a> {
        Box::pin(self.draw(draw))
    }
}
