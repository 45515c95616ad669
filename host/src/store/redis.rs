//! The Redis store, shared by every replica of one endpoint (plain Redis, not Cluster: the
//! scripts touch keys they compute).
//!
//! Keys, all under `mcp-host:` (use the URL's database number to separate deployments):
//!
//! | key | type | what |
//! |---|---|---|
//! | `task:{id}` | hash `rec`, `v`, `status`, `runner`, `lease` | a task: its sealed JSON record, version, status and lease; expires with the task (`PEXPIREAT`) |
//! | `tasks:caller:{key}` | sorted set id → expiry | a caller's tasks, for `tasks.max_per_caller` |
//! | `tasks:all` | sorted set id → expiry | every task, for `tasks.max_tasks` and the console's list |
//! | `tasks:size:caller:{key}` | hash id → bytes | the size of a caller's records, for `tasks.max_bytes_per_caller` |
//! | `tasks:size` | hash id → bytes | the size of every record, for `tasks.max_total_bytes` |
//! | `tasks:size:total` | integer | their sum |
//! | `session:{id}` | hash `owner`, `version`, `caps`, `level`, `subs` | a legacy session; expires when idle (`PEXPIRE`, renewed on use) |
//! | `sessions:caller:{owner}` | sorted set id → last use | a caller's sessions, for `http.max_sessions_per_caller` |
//! | `sessions:all` | sorted set `{id}:{owner}` → last use | every session, for `http.max_sessions` |
//! | `sessions:owners` | sorted set owner → count | who holds the most sessions (evicted first when full) |
//! | `events` | pub/sub channel | [`super::bus::Event`]s between replicas |
//! | `budget:…` | hash, sorted set | the call policy's shared budgets ([`super::budgets`]) |
//! | `vault:…` | hash, set, sorted set, string | the upstream token vault's rows ([`super::vault`]) |
//!
//! Every read-modify-write is one Lua script, so replicas never interleave inside one. Commands
//! time out after 2 s: a replica that lost Redis answers quickly with an error instead of hanging.
//!
//! `rediss://` connects over TLS (rustls), checking the server's certificate against the system's
//! roots, or against the PEM file `SSL_CERT_FILE` names (a private CA); `#insecure` is refused.
//! AUTH comes from the URL (`rediss://user:password@host:port/db`, `redis+unix:///path?pass=...`).
//! A refused password or certificate stops the start (a Redis that is down does not).

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, Script};
use arc_swap::ArcSwap;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;

use super::bus::{Bus, Envelope};
use super::{EVENT_MAX_SKEW_MS, RecordKeys, open_event, seal_event};
use super::{
    Lease, MAX_SESSION_SUBSCRIPTIONS, RawTask, SessionBounds, SessionRecord, StoreError,
    TaskRecord, TaskStatus, checks_bytes, now_ms, over_bytes,
};
use crate::config::TaskSettings;

pub(super) const PREFIX: &str = "mcp-host:";
/// How long one command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// A URL without its credentials (userinfo dropped, secret query parameters redacted), for
/// messages.
pub(super) fn describe(url: &str) -> String {
    super::redact_url_with(url, false)
}

/// How long the first contact at start may take.
const FIRST_CONTACT: Duration = Duration::from_secs(10);

/// Whether `e` says the configuration is wrong (a refused password, a certificate that does not
/// verify) rather than that Redis is down for now.
fn is_configuration_error(e: &::redis::RedisError) -> bool {
    if e.kind() == ::redis::ErrorKind::AuthenticationFailed
        || e.kind() == ::redis::ErrorKind::InvalidClientConfig
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
    {
        return true;
    }
    let text = e.to_string().to_ascii_lowercase();
    ["certificate", "noauth", "wrongpass", "handshake"]
        .iter()
        .any(|w| text.contains(w))
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// The Redis store: a connection manager (reconnecting by itself) and the scripts.
pub(super) struct Redis {
    conn: ConnectionManager,
    create_task: Script,
    update_task: Script,
    renew_lease: Script,
    insert_session: Script,
    touch_session: Script,
    save_session: Script,
    remove_session: Script,
}

impl Redis {
    /// Connect lazily (a Redis that is down now is retried at each use), start the publisher and
    /// the pub/sub listener of the bus.
    /// Events are sealed and checked under `keys` (the store's, as configured now).
    pub(super) fn connect(
        url: &str,
        replica: &str,
        keys: Arc<ArcSwap<RecordKeys>>,
    ) -> Result<(Redis, Bus), StoreError> {
        crate::config::tls::use_ring_provider();
        let client = Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("store {}: {e}", describe(url))))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(unavailable)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let bus = Bus::shared(replica, tx);
        tokio::spawn(publish(conn.clone(), rx, Arc::clone(&keys)));
        tokio::spawn(listen(client, bus.clone(), keys));
        let redis = Redis {
            conn,
            create_task: Script::new(&format!("{TASK_SIZES}{CREATE_TASK}")),
            update_task: Script::new(&format!("{TASK_SIZES}{UPDATE_TASK}")),
            renew_lease: Script::new(RENEW_LEASE),
            insert_session: Script::new(&format!("{DROP_SESSION}{INSERT_SESSION}")),
            touch_session: Script::new(TOUCH_SESSION),
            save_session: Script::new(SAVE_SESSION),
            remove_session: Script::new(&format!("{DROP_SESSION}{REMOVE_SESSION}")),
        };
        Ok((redis, bus))
    }

    /// Connect once and PING, at start: a refused password or certificate is an error (the
    /// configuration is wrong); a Redis that is down or slow is only logged (the replica reports
    /// itself not ready and reconnects).
    pub(super) async fn first_contact(url: &str) -> Result<(), StoreError> {
        let shown = describe(url);
        let client = Client::open(url)
            .map_err(|e| StoreError::Unavailable(format!("store {shown}: {e}")))?;
        let attempt = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            ::redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        match tokio::time::timeout(FIRST_CONTACT, attempt).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if is_configuration_error(&e) => Err(StoreError::Unavailable(format!(
                "store {shown} refused this server: {e} (check the credentials in the URL, and for \
                 rediss:// the server's certificate: a private CA goes in SSL_CERT_FILE)"
            ))),
            Ok(Err(e)) => {
                tracing::warn!("task store {shown} cannot be reached yet: {e}");
                Ok(())
            }
            Err(_) => {
                tracing::warn!(
                    "task store {shown} did not answer within {} s",
                    FIRST_CONTACT.as_secs()
                );
                Ok(())
            }
        }
    }

    /// The connection (shared, reconnecting by itself).
    pub(super) fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Whether Redis answers.
    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let cmd = ::redis::cmd("PING");
        timed(cmd.query_async::<String>(&mut conn)).await.map(drop)
    }

    pub(super) async fn create_task(
        &self,
        task: &TaskRecord,
        record: &str,
        lease: Option<&Lease>,
        settings: &TaskSettings,
    ) -> Result<(), StoreError> {
        let (runner, until) = lease_fields(lease);
        let mut conn = self.conn.clone();
        let mut call = self.create_task.prepare_invoke();
        call.arg(PREFIX)
            .arg(&task.id)
            .arg(&task.quota_key)
            .arg(record)
            .arg(task.status.as_str())
            .arg(runner)
            .arg(until)
            .arg(task.expires_ms())
            .arg(now_ms())
            .arg(settings.max_per_caller)
            .arg(settings.max_tasks)
            .arg(record.len())
            .arg(settings.max_bytes_per_caller)
            .arg(settings.max_total_bytes);
        let (outcome, count): (i64, i64) = timed(call.invoke_async(&mut conn)).await?;
        match outcome {
            1 => Err(StoreError::Full(format!(
                "Too many tasks: this caller keeps {count}, the limit is {} \
                 (tasks.max_per_caller); they expire tasks.ttl_secs after their creation",
                settings.max_per_caller
            ))),
            2 => Err(StoreError::Full(format!(
                "Too many tasks: the server keeps {count}, the limit is {} (tasks.max_tasks)",
                settings.max_tasks
            ))),
            3 => Err(over_bytes(1, count.max(0) as u64, record.len(), settings)),
            4 => Err(over_bytes(2, count.max(0) as u64, record.len(), settings)),
            _ => Ok(()),
        }
    }

    /// The ids of up to `limit` unexpired tasks, those expiring last first (from `tasks:all`, the
    /// index `tasks.max_tasks` is counted in; no keyspace scan).
    pub(super) async fn task_ids(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conn.clone();
        // ZREVRANGEBYSCORE rather than ZRANGE … BYSCORE REV: Redis before 6.2 has only this one.
        let mut cmd = ::redis::cmd("ZREVRANGEBYSCORE");
        cmd.arg(format!("{PREFIX}tasks:all"))
            .arg("+inf")
            .arg(now_ms())
            .arg("LIMIT")
            .arg(0)
            .arg(limit);
        timed(cmd.query_async(&mut conn)).await
    }

    pub(super) async fn task(&self, id: &str) -> Result<Option<RawTask>, StoreError> {
        let mut conn = self.conn.clone();
        let mut cmd = ::redis::cmd("HMGET");
        cmd.arg(format!("{PREFIX}task:{id}"))
            .arg(&["rec", "v", "runner", "lease"]);
        let fields: Vec<Option<String>> = timed(cmd.query_async(&mut conn)).await?;
        let [Some(record), Some(version), runner, lease] =
            <[Option<String>; 4]>::try_from(fields).unwrap_or([None, None, None, None])
        else {
            return Ok(None);
        };
        let lease = runner
            .filter(|r| !r.is_empty())
            .zip(lease.and_then(|l| l.parse().ok()))
            .map(|(runner, until_ms)| Lease { runner, until_ms });
        Ok(Some(RawTask {
            record,
            version: version.parse().unwrap_or(0),
            lease,
        }))
    }

    pub(super) async fn update_task(
        &self,
        task: &TaskRecord,
        record: &str,
        version: u64,
        lease: Option<&Lease>,
        settings: &TaskSettings,
    ) -> Result<bool, StoreError> {
        let (runner, until) = lease_fields(lease);
        // Checked when it grows (the script compares with the stored size).
        let check = checks_bytes(task, 0, 1);
        let mut conn = self.conn.clone();
        let mut call = self.update_task.prepare_invoke();
        call.key(format!("{PREFIX}task:{}", task.id))
            .arg(version)
            .arg(record)
            .arg(task.status.as_str())
            .arg(runner)
            .arg(until)
            .arg(PREFIX)
            .arg(&task.id)
            .arg(&task.quota_key)
            .arg(record.len())
            .arg(u8::from(check))
            .arg(settings.max_bytes_per_caller)
            .arg(settings.max_total_bytes)
            .arg(now_ms());
        let (outcome, held): (i64, i64) = timed(call.invoke_async(&mut conn)).await?;
        match outcome {
            1 => Ok(true),
            2 => Err(over_bytes(1, held.max(0) as u64, record.len(), settings)),
            3 => Err(over_bytes(2, held.max(0) as u64, record.len(), settings)),
            _ => Ok(false),
        }
    }

    pub(super) async fn renew_lease(
        &self,
        id: &str,
        lease: &Lease,
    ) -> Result<Option<TaskStatus>, StoreError> {
        let mut conn = self.conn.clone();
        let mut call = self.renew_lease.prepare_invoke();
        call.key(format!("{PREFIX}task:{id}"))
            .arg(&lease.runner)
            .arg(lease.until_ms);
        let status: Option<String> = timed(call.invoke_async(&mut conn)).await?;
        Ok(status.and_then(|s| serde_json::from_value(serde_json::Value::String(s)).ok()))
    }

    pub(super) async fn insert_session(
        &self,
        id: &str,
        record: &SessionRecord,
        bounds: SessionBounds,
    ) -> Result<Vec<String>, StoreError> {
        let caps = record.capabilities.to_string();
        let mut conn = self.conn.clone();
        let mut call = self.insert_session.prepare_invoke();
        call.arg(PREFIX)
            .arg(id)
            .arg(&record.owner)
            .arg(now_ms())
            .arg(bounds.idle.as_millis() as u64)
            .arg(bounds.max.max(1))
            .arg(bounds.per_caller.max(1))
            .arg(&record.version)
            .arg(caps)
            .arg(&record.log_level);
        timed(call.invoke_async(&mut conn)).await
    }

    pub(super) async fn session(
        &self,
        id: &str,
        bounds: SessionBounds,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let mut conn = self.conn.clone();
        let mut call = self.touch_session.prepare_invoke();
        call.arg(PREFIX)
            .arg(id)
            .arg(now_ms())
            .arg(bounds.idle.as_millis() as u64);
        let fields: Option<Vec<String>> = timed(call.invoke_async(&mut conn)).await?;
        let Some([owner, version, caps, level, subs]) =
            fields.and_then(|f| <[String; 5]>::try_from(f).ok())
        else {
            return Ok(None);
        };
        Ok(Some(SessionRecord {
            owner,
            version,
            capabilities: serde_json::from_str(&caps).unwrap_or_default(),
            log_level: level,
            subscriptions: serde_json::from_str(&subs).unwrap_or_default(),
        }))
    }

    pub(super) async fn session_exists(&self, id: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let mut cmd = ::redis::cmd("EXISTS");
        cmd.arg(format!("{PREFIX}session:{id}"));
        let n: i64 = timed(cmd.query_async(&mut conn)).await?;
        Ok(n == 1)
    }

    pub(super) async fn save_session(
        &self,
        id: &str,
        record: &SessionRecord,
    ) -> Result<(), StoreError> {
        let subs: Vec<&String> = record
            .subscriptions
            .iter()
            .take(MAX_SESSION_SUBSCRIPTIONS)
            .collect();
        let subs = serde_json::to_string(&subs).map_err(unavailable)?;
        let mut conn = self.conn.clone();
        let mut call = self.save_session.prepare_invoke();
        call.key(format!("{PREFIX}session:{id}"))
            .arg(&record.log_level)
            .arg(subs);
        timed(call.invoke_async::<i64>(&mut conn)).await.map(drop)
    }

    pub(super) async fn remove_session(&self, id: &str) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let mut call = self.remove_session.prepare_invoke();
        call.arg(PREFIX).arg(id);
        let removed: i64 = timed(call.invoke_async(&mut conn)).await?;
        Ok(removed == 1)
    }
}

/// A command within [`COMMAND_TIMEOUT`] (plus the manager's own), its errors as unavailability.
pub(super) async fn timed<T>(
    fut: impl std::future::Future<Output = ::redis::RedisResult<T>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(COMMAND_TIMEOUT * 2, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(unavailable(e)),
        Err(_) => Err(StoreError::Unavailable(format!(
            "no answer within {} s",
            (COMMAND_TIMEOUT * 2).as_secs()
        ))),
    }
}

fn lease_fields(lease: Option<&Lease>) -> (String, u64) {
    match lease {
        Some(l) => (l.runner.clone(), l.until_ms),
        None => (String::new(), 0),
    }
}

/// Publish this replica's events on the channel, in order.
/// Every event is sealed (HMAC under the store's keys, with the time it is sent): a replica
/// takes only sealed events, sent within a minute of its clock.
async fn publish(
    mut conn: ConnectionManager,
    mut rx: mpsc::UnboundedReceiver<Envelope>,
    keys: Arc<ArcSwap<RecordKeys>>,
) {
    let channel = format!("{PREFIX}events");
    while let Some(envelope) = rx.recv().await {
        let Ok(json) = serde_json::to_string(&envelope) else {
            continue;
        };
        let payload = seal_event(&keys.load().keys, now_ms(), &json);
        let mut cmd = ::redis::cmd("PUBLISH");
        cmd.arg(&channel).arg(payload);
        if let Err(e) = timed(cmd.query_async::<i64>(&mut conn)).await {
            tracing::debug!("an event for the other replicas was lost: {e}");
        }
    }
}

/// Hear the other replicas' events, reconnecting (with a pause) whenever the subscription drops.
async fn listen(client: Client, bus: Bus, keys: Arc<ArcSwap<RecordKeys>>) {
    let channel = format!("{PREFIX}events");
    let mut pause = Duration::from_millis(100);
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                Ok(()) => {
                    pause = Duration::from_millis(100);
                    let mut messages = pubsub.into_on_message();
                    while let Some(msg) = messages.next().await {
                        let payload = String::from_utf8_lossy(msg.get_payload_bytes());
                        let opened = open_event(&keys.load().keys, &payload, now_ms())
                            .map_err(|e| e.to_string())
                            .and_then(|json| {
                                serde_json::from_str::<Envelope>(json).map_err(|e| e.to_string())
                            });
                        match opened {
                            Ok(envelope) => bus.deliver_remote(envelope),
                            Err(why) => tracing::warn!(
                                "an event on {channel} is refused (replicas seal their events \
                                 under request_state.keys, sent within {} s): {why}",
                                EVENT_MAX_SKEW_MS / 1000
                            ),
                        }
                    }
                    tracing::debug!("the subscription to {channel} ended; resubscribing");
                }
                Err(e) => tracing::debug!("cannot subscribe to {channel}: {e}"),
            },
            Err(e) => tracing::debug!("cannot connect for {channel}: {e}"),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Shared by the task scripts: forget the sizes of the expired tasks (of every caller in the
/// store's sum, and of `caller` in theirs); the sums of `caller`'s records and of all records.
const TASK_SIZES: &str = r"
local function sizes(p, caller, now)
  local all, total = p .. 'tasks:size', p .. 'tasks:size:total'
  local mine = p .. 'tasks:size:caller:' .. caller
  for _, x in ipairs(redis.call('ZRANGEBYSCORE', p .. 'tasks:all', '-inf', now)) do
    local b = redis.call('HGET', all, x)
    if b then
      redis.call('DECRBY', total, b)
      redis.call('HDEL', all, x)
    end
  end
  for _, x in ipairs(redis.call('ZRANGEBYSCORE', p .. 'tasks:caller:' .. caller, '-inf', now)) do
    redis.call('HDEL', mine, x)
  end
  local m = 0
  for _, b in ipairs(redis.call('HVALS', mine)) do m = m + tonumber(b) end
  return m, tonumber(redis.call('GET', total) or '0')
end
local function set_size(p, caller, id, bytes, old, expires)
  local mine = p .. 'tasks:size:caller:' .. caller
  redis.call('HSET', p .. 'tasks:size', id, bytes)
  redis.call('HSET', mine, id, bytes)
  redis.call('INCRBY', p .. 'tasks:size:total', bytes - old)
  if expires then redis.call('PEXPIREAT', mine, expires) end
end
";

/// ARGV: prefix, id, caller key, record, status, runner, lease, expires, now, max per caller,
/// max total, bytes, max bytes per caller, max bytes in total. Returns {0, 0} when stored,
/// {1, n} when the caller holds n tasks, {2, n} when the store holds n, {3, b} when the caller's
/// records take b bytes and this one would pass its bound, {4, b} the same for the store.
/// Runs after [`TASK_SIZES`].
const CREATE_TASK: &str = r"
local p, id, caller = ARGV[1], ARGV[2], ARGV[3]
local expires, now = tonumber(ARGV[8]), tonumber(ARGV[9])
local bytes = tonumber(ARGV[12])
local mine, all = p .. 'tasks:caller:' .. caller, p .. 'tasks:all'
local mine_bytes, all_bytes = sizes(p, caller, now)
redis.call('ZREMRANGEBYSCORE', mine, '-inf', now)
redis.call('ZREMRANGEBYSCORE', all, '-inf', now)
local n = redis.call('ZCARD', mine)
if n >= tonumber(ARGV[10]) then return {1, n} end
n = redis.call('ZCARD', all)
if n >= tonumber(ARGV[11]) then return {2, n} end
if mine_bytes + bytes > tonumber(ARGV[13]) then return {3, mine_bytes} end
if all_bytes + bytes > tonumber(ARGV[14]) then return {4, all_bytes} end
local key = p .. 'task:' .. id
redis.call('HSET', key, 'rec', ARGV[4], 'v', 1, 'status', ARGV[5], 'runner', ARGV[6], 'lease', ARGV[7])
redis.call('PEXPIREAT', key, expires)
redis.call('ZADD', mine, expires, id)
redis.call('ZADD', all, expires, id)
local last = redis.call('ZRANGE', mine, -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', mine, last[2])
set_size(p, caller, id, bytes, 0, last[2])
return {0, 0}
";

/// KEYS: the task. ARGV: expected version, record, status, runner, lease, prefix, id, caller key,
/// bytes, whether a growth is checked (1/0), max bytes per caller, max bytes in total, now.
/// {1, 0} when replaced, {0, 0} when the version is not the expected one, {2, b} / {3, b} when
/// the record would grow past the caller's / the store's bound (their records take b bytes).
/// Runs after [`TASK_SIZES`].
const UPDATE_TASK: &str = r"
local v = redis.call('HGET', KEYS[1], 'v')
if not v or v ~= ARGV[1] then return {0, 0} end
local p, id, caller = ARGV[6], ARGV[7], ARGV[8]
local bytes = tonumber(ARGV[9])
local old = tonumber(redis.call('HGET', p .. 'tasks:size', id) or '0')
if ARGV[10] == '1' and bytes > old then
  local mine_bytes, all_bytes = sizes(p, caller, tonumber(ARGV[13]))
  if mine_bytes - old + bytes > tonumber(ARGV[11]) then return {2, mine_bytes - old} end
  if all_bytes - old + bytes > tonumber(ARGV[12]) then return {3, all_bytes - old} end
end
redis.call('HSET', KEYS[1], 'rec', ARGV[2], 'v', tonumber(v) + 1, 'status', ARGV[3], 'runner', ARGV[4], 'lease', ARGV[5])
set_size(p, caller, id, bytes, old, nil)
return {1, 0}
";

/// KEYS: the task. ARGV: runner, lease. The status (nil when gone).
const RENEW_LEASE: &str = r"
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'working' and redis.call('HGET', KEYS[1], 'runner') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'lease', ARGV[2])
end
return status
";

/// Shared by the session scripts: drop session `id` of `owner` from every index.
const DROP_SESSION: &str = r"
local function drop(p, id, owner)
  redis.call('DEL', p .. 'session:' .. id)
  redis.call('ZREM', p .. 'sessions:all', id .. ':' .. owner)
  redis.call('ZREM', p .. 'sessions:caller:' .. owner, id)
  local left = tonumber(redis.call('ZINCRBY', p .. 'sessions:owners', -1, owner))
  if left <= 0 then redis.call('ZREM', p .. 'sessions:owners', owner) end
end
";

/// ARGV: prefix, id, owner, now, idle ms, max, max per caller, version, capabilities, level.
/// Returns the ids evicted to make room (expired sessions are dropped from the indexes too).
/// Runs after [`DROP_SESSION`].
const INSERT_SESSION: &str = r"
local p, id, owner = ARGV[1], ARGV[2], ARGV[3]
local now, idle, max, per = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local all, mine = p .. 'sessions:all', p .. 'sessions:caller:' .. owner
local evicted = {}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', all, '-inf', now - idle)) do
  drop(p, string.sub(m, 1, 32), string.sub(m, 34))
end
while redis.call('ZCARD', mine) >= per do
  local oldest = redis.call('ZRANGE', mine, 0, 0)[1]
  drop(p, oldest, owner)
  table.insert(evicted, oldest)
end
while redis.call('ZCARD', all) >= max do
  local top = redis.call('ZREVRANGE', p .. 'sessions:owners', 0, 0)[1]
  if not top then break end
  local oldest = redis.call('ZRANGE', p .. 'sessions:caller:' .. top, 0, 0)[1]
  if not oldest then redis.call('ZREM', p .. 'sessions:owners', top) else
    drop(p, oldest, top)
    table.insert(evicted, oldest)
  end
end
local key = p .. 'session:' .. id
redis.call('HSET', key, 'owner', owner, 'version', ARGV[8], 'caps', ARGV[9], 'level', ARGV[10], 'subs', '[]')
redis.call('PEXPIRE', key, idle)
redis.call('ZADD', all, now, id .. ':' .. owner)
redis.call('ZADD', mine, now, id)
redis.call('PEXPIRE', mine, idle)
redis.call('ZINCRBY', p .. 'sessions:owners', 1, owner)
return evicted
";

/// ARGV: prefix, id, now, idle ms. The session's fields (owner, version, caps, level, subs), its
/// idle timer restarted; nil when it expired.
const TOUCH_SESSION: &str = r"
local p, id, now, idle = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local key = p .. 'session:' .. id
local f = redis.call('HMGET', key, 'owner', 'version', 'caps', 'level', 'subs')
if not f[1] then return nil end
redis.call('PEXPIRE', key, idle)
redis.call('ZADD', p .. 'sessions:all', 'XX', now, id .. ':' .. f[1])
local mine = p .. 'sessions:caller:' .. f[1]
redis.call('ZADD', mine, 'XX', now, id)
redis.call('PEXPIRE', mine, idle)
return f
";

/// KEYS: the session. ARGV: level, subscriptions. Only while it exists.
const SAVE_SESSION: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'level', ARGV[1], 'subs', ARGV[2])
return 1
";

/// ARGV: prefix, id. 1 when it existed. Runs after [`DROP_SESSION`].
const REMOVE_SESSION: &str = r"
local p, id = ARGV[1], ARGV[2]
local owner = redis.call('HGET', p .. 'session:' .. id, 'owner')
if not owner then return 0 end
drop(p, id, owner)
return 1
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_are_described_without_credentials() {
        assert_eq!(
            describe("redis://user:secret@10.0.0.1:6379/2"),
            "redis://10.0.0.1:6379/2"
        );
        assert_eq!(describe("redis://127.0.0.1/"), "redis://127.0.0.1/");
    }
}
