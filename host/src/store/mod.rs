//! What outlives one request and is shared by every replica behind one endpoint: tasks (the
//! 2026 tasks extension), legacy sessions (with Redis), and the events replicas tell each other.
//!
//! The `store` key picks the backend: embedded SQLite (the default: a finished task's result
//! survives a restart), memory (nothing survives), or Redis (a fleet: every replica reads and
//! writes the same tasks and sessions, with expiry, and hears the others on a pub/sub channel).
//! Whatever the backend, the same rules hold:
//!
//! - a task is one record with a version; every change is a compare-and-set on that version, so
//!   two replicas never overwrite each other's change (the loser re-reads and re-applies);
//! - the replica running a task holds a **lease** on it, renewed while the call runs; a task whose
//!   lease ran out while `working` was left by a replica that stopped, and is reported failed;
//! - everything a client can create is bounded: tasks per caller and in total
//!   (`tasks.max_per_caller`, `tasks.max_tasks`), each kept `tasks.ttl_secs` from its creation;
//!   legacy sessions per caller and in total (`http.max_sessions_per_caller`, `http.max_sessions`),
//!   each expiring after `http.session_idle_secs` idle;
//! - the bytes are bounded too: a task's result (`tasks.max_result_bytes`), and the stored records
//!   of one caller and of the whole store (`tasks.max_bytes_per_caller`, `tasks.max_total_bytes`);
//!   a write that would go over is refused with the key named (a result over the bounds fails its
//!   task instead of being stored);
//! - every task record is **sealed**: an HMAC-SHA256 over the record's JSON (its id, owner,
//!   caller, tool, arguments, answers and result) under the `request_state.keys` (the first seals,
//!   any opens, so keys rotate like request states), checked at every read. A record that fails
//!   the check (changed by someone with write access to the store, or sealed under a key no longer
//!   configured) is treated as absent, and logged. Without configured keys, SQLite keeps a random
//!   key of its own in the database; Redis refuses to start. The events replicas publish on
//!   Redis are sealed the same way, with the time they were sent: a replica drops an event that
//!   is not sealed under one of its keys or was sent more than a minute from its clock.
//!
//! [`bus`] carries the events: a task changed or must be cancelled, a legacy client's response or
//! cancellation for a call running on another replica, a plugin's announcement.
//!
//! The store also keeps the rows of the upstream token vault ([`Store::vault_backend`]): users'
//! upstream credentials, registered clients, pending consents and refresh leases, sealed by the
//! vault (`access::upstream`) under its own keys, which the store never holds.

mod budgets;
pub mod bus;
mod redis;
mod sqlite;
mod vault;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use mcp_plugin_sdk::UserInfo;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::Sha256;

pub use bus::{Bus, Event};

use crate::config::{StoreSetting, TaskSettings};

/// Milliseconds since the Unix epoch (the store's clock; replicas' clocks are assumed to agree
/// within a fraction of a lease).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why the store could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached (Redis down) or failed (a disk error).
    #[error("the task store is unavailable: {0}")]
    Unavailable(String),
    /// A bound on what clients may create is reached (the message names the key).
    #[error("{0}")]
    Full(String),
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Its call runs.
    Working,
    /// Its call asked the client something: answers come with `tasks/update`.
    InputRequired,
    /// Its call returned a result (an `isError` result included).
    Completed,
    /// Its call ended with a protocol error (or the replica running it stopped).
    Failed,
    /// The client cancelled it.
    Cancelled,
}

impl TaskStatus {
    /// Completed, failed and cancelled never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// The wire name (`working`, `input_required`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// One task: what the client sees of it, and what the host needs to run its call again (the
/// tool, its arguments, the caller, and the answers the client gave so far).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    /// The unguessable id (128 random bits).
    pub id: String,
    /// Who may see it: the verified user and agent it was created by.
    pub owner: String,
    /// Whom it counts against (`tasks.max_per_caller`).
    pub quota_key: String,
    /// Where it is.
    pub status: TaskStatus,
    /// Why it is there, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Created, in Unix milliseconds.
    pub created_ms: u64,
    /// Last changed, in Unix milliseconds.
    pub updated_ms: u64,
    /// Kept this long from its creation.
    pub ttl_ms: u64,
    /// How often the client is asked to poll.
    pub poll_ms: u64,
    /// The tool called.
    pub tool: String,
    /// Its arguments.
    #[serde(default)]
    pub arguments: Option<Value>,
    /// The verified caller, for tools that take one.
    #[serde(default)]
    pub caller: Option<UserInfo>,
    /// The agent whose view applied.
    #[serde(default)]
    pub agent: Option<String>,
    /// What the client declared with the request that created the task.
    #[serde(default)]
    pub capabilities: Value,
    /// Every answer the client gave (before the task and with `tasks/update`), by key.
    #[serde(default)]
    pub answers: Map<String, Value>,
    /// The questions waiting for an answer (`input_required`), by key.
    #[serde(default)]
    pub input_requests: Map<String, Value>,
    /// The call's result (`completed`).
    #[serde(default)]
    pub result: Option<Value>,
    /// The JSON-RPC error (`failed`).
    #[serde(default)]
    pub error: Option<Value>,
    /// Which run of the call is current (a run after `tasks/update` is the next one); a run's
    /// outcome is recorded only while it is current.
    #[serde(default)]
    pub run: u64,
}

impl TaskRecord {
    /// When it expires, in Unix milliseconds.
    pub fn expires_ms(&self) -> u64 {
        self.created_ms.saturating_add(self.ttl_ms)
    }
}

/// Sealed records begin with this (then the tag, a dot, and the record's JSON).
const SEALED: &str = "r1.";
/// What the MAC of a record covers before its JSON (so that no other MAC under the same keys, such
/// as a request state's, can pass for a record's).
const RECORD_CONTEXT: &[u8] = b"mcp-host task record v1\0";

fn record_mac(key: &[u8], json: &str) -> Hmac<Sha256> {
    context_mac(key, RECORD_CONTEXT, &[json.as_bytes()])
}

/// HMAC-SHA256 under `key` of `context` then `parts`.
fn context_mac(key: &[u8], context: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(context);
    for part in parts {
        mac.update(part);
    }
    mac
}

/// Sealed events between replicas begin with this (then the time sent, the tag, the JSON).
const SEALED_EVENT: &str = "e1.";
/// What the MAC of an event covers before its time and JSON.
const EVENT_CONTEXT: &[u8] = b"mcp-host bus event v1\0";
/// How far an event's time may be from this replica's clock (replayed or delayed events older
/// than this are dropped).
pub(crate) const EVENT_MAX_SKEW_MS: u64 = 60_000;

/// An event for the other replicas (its envelope's JSON), sealed under the first of `keys`
/// with the time it is sent.
pub(crate) fn seal_event(keys: &[Vec<u8>], sent_ms: u64, json: &str) -> String {
    let key = keys.first().map_or(&[][..], Vec::as_slice);
    let sent = sent_ms.to_string();
    let mac = context_mac(
        key,
        EVENT_CONTEXT,
        &[sent.as_bytes(), b".", json.as_bytes()],
    );
    let tag = B64.encode(mac.finalize().into_bytes());
    format!("{SEALED_EVENT}{sent}.{tag}.{json}")
}

/// The JSON of a sealed event, if its MAC matches under one of `keys` and it was sent within
/// [`EVENT_MAX_SKEW_MS`] of `now_ms`.
pub(crate) fn open_event<'a>(
    keys: &[Vec<u8>],
    payload: &'a str,
    now_ms: u64,
) -> Result<&'a str, RecordError> {
    let rest = payload
        .strip_prefix(SEALED_EVENT)
        .ok_or(RecordError::Unsealed)?;
    let (sent, rest) = rest.split_once('.').ok_or(RecordError::Unsealed)?;
    let (tag, json) = rest.split_once('.').ok_or(RecordError::Unsealed)?;
    let tag = B64.decode(tag).map_err(|_| RecordError::Tampered)?;
    if !keys.iter().any(|key| {
        context_mac(
            key,
            EVENT_CONTEXT,
            &[sent.as_bytes(), b".", json.as_bytes()],
        )
        .verify_slice(&tag)
        .is_ok()
    }) {
        return Err(RecordError::Tampered);
    }
    let sent: u64 = sent
        .parse()
        .map_err(|_| RecordError::Unreadable("its time is not a number".into()))?;
    if sent.abs_diff(now_ms) > EVENT_MAX_SKEW_MS {
        return Err(RecordError::Unreadable(format!(
            "it was sent {} s away from this replica's clock (a replay, or clocks apart)",
            sent.abs_diff(now_ms) / 1000
        )));
    }
    Ok(json)
}

/// Why a stored record is not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Not sealed at all (written by an older version, or by someone else).
    #[error("it is not sealed")]
    Unsealed,
    /// The MAC matches under no configured key: changed outside mcp-host, or sealed under a key
    /// no longer configured.
    #[error(
        "its MAC matches under no configured key (changed outside mcp-host, or sealed under a key no longer in request_state.keys)"
    )]
    Tampered,
    /// Sealed, but stored under another task's id (a valid record copied elsewhere).
    #[error("it is the record of another task")]
    Misplaced,
    /// Sealed, but not a task record this version reads.
    #[error("it is unreadable: {0}")]
    Unreadable(String),
}

/// `task` as stored: sealed under the first of `keys`.
pub fn seal_record(keys: &[Vec<u8>], task: &TaskRecord) -> Result<String, StoreError> {
    let json = serde_json::to_string(task)
        .map_err(|e| StoreError::Unavailable(format!("a task record cannot be written: {e}")))?;
    let key = keys.first().map_or(&[][..], Vec::as_slice);
    let tag = B64.encode(record_mac(key, &json).finalize().into_bytes());
    Ok(format!("{SEALED}{tag}.{json}"))
}

/// The record stored under `id`, if its MAC matches under one of `keys` and it is task `id`'s.
pub fn open_record(keys: &[Vec<u8>], id: &str, stored: &str) -> Result<TaskRecord, RecordError> {
    let (tag, json) = stored
        .strip_prefix(SEALED)
        .and_then(|rest| rest.split_once('.'))
        .ok_or(RecordError::Unsealed)?;
    let tag = B64.decode(tag).map_err(|_| RecordError::Tampered)?;
    // Constant-time comparison (`verify_slice`), under each key in turn.
    if !keys
        .iter()
        .any(|key| record_mac(key, json).verify_slice(&tag).is_ok())
    {
        return Err(RecordError::Tampered);
    }
    let task: TaskRecord =
        serde_json::from_str(json).map_err(|e| RecordError::Unreadable(e.to_string()))?;
    if task.id != id {
        return Err(RecordError::Misplaced);
    }
    Ok(task)
}

/// A task as a backend returns it: the sealed record, unchecked.
pub(crate) struct RawTask {
    /// The record as stored.
    record: String,
    /// Its version.
    version: u64,
    /// Its lease.
    lease: Option<Lease>,
}

/// Whether a write that takes a record from `old` to `new` bytes is checked against the byte
/// bounds: a growing one, unless it ends the task (a failure or cancellation is always recorded).
fn checks_bytes(task: &TaskRecord, old: usize, new: usize) -> bool {
    new > old && !matches!(task.status, TaskStatus::Failed | TaskStatus::Cancelled)
}

/// The refusal of a write over a byte bound (`which`: 1 this caller's, 2 the store's).
fn over_bytes(which: i64, held: u64, adding: usize, settings: &TaskSettings) -> StoreError {
    match which {
        1 => StoreError::Full(format!(
            "Too much task data: this caller's stored tasks take {held} bytes, {adding} more \
             would pass the limit of {} bytes (tasks.max_bytes_per_caller); they expire \
             tasks.ttl_secs after their creation",
            settings.max_bytes_per_caller
        )),
        _ => StoreError::Full(format!(
            "Too much task data: the server's stored tasks take {held} bytes, {adding} more \
             would pass the limit of {} bytes (tasks.max_total_bytes)",
            settings.max_total_bytes
        )),
    }
}

/// A URL as it may be shown (logs, `/healthz`, `mcp-host config`): the password of its userinfo
/// and the values of query parameters that name a secret (`pass`, `password`, `token`, `secret`,
/// `key`, ...) replaced by `<redacted>`. The user name, host, path and other parameters stay.
///
/// ```
/// use mcp_host::store::redact_url;
/// assert_eq!(
///     redact_url("rediss://app:s3cret@db:6380/0?pass=s3cret&protocol=resp3"),
///     "rediss://app:<redacted>@db:6380/0?pass=<redacted>&protocol=resp3"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    redact_url_with(url, true)
}

/// [`redact_url`], with the userinfo kept (`user:<redacted>@`) or dropped.
fn redact_url_with(url: &str, keep_user: bool) -> String {
    const REDACTED: &str = "<redacted>";
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) if keep_user => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:{REDACTED}@{host}"),
            None if userinfo.is_empty() => format!("@{host}"),
            // A lone userinfo part is a password for Redis (`redis://secret@host`), a name for
            // others: either way it may be a secret.
            None => format!("{REDACTED}@{host}"),
        },
        Some((_, host)) => host.to_owned(),
        None => authority.to_owned(),
    };
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (tail, None),
    };
    let tail = match before_fragment.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if is_secret_name(name) => format!("{name}={REDACTED}"),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => before_fragment.to_owned(),
    };
    let fragment = fragment.map_or_else(String::new, |f| format!("#{f}"));
    format!("{scheme}://{authority}{tail}{fragment}")
}

/// Whether a URL query parameter (or a configuration key) names a secret.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["pass", "pwd", "sig"].contains(&name.as_str())
        || [
            "secret",
            "token",
            "password",
            "passwd",
            "credential",
            "key",
            "auth",
            "cookie",
            "signature",
        ]
        .iter()
        .any(|word| name.contains(word))
}

/// A replica's claim on a running task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The replica.
    pub runner: String,
    /// Valid until, in Unix milliseconds.
    pub until_ms: u64,
}

/// A task as stored: the record, its version (for compare-and-set) and the lease on it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    /// The record.
    pub task: TaskRecord,
    /// Bumped by every change.
    pub version: u64,
    /// The replica running it, if one does.
    pub lease: Option<Lease>,
}

impl StoredTask {
    /// `working`, but nobody renewed the lease in time: the replica running it stopped.
    pub fn abandoned(&self, now_ms: u64) -> bool {
        self.task.status == TaskStatus::Working
            && self.lease.as_ref().is_none_or(|l| l.until_ms <= now_ms)
    }
}

/// What a fleet keeps of a legacy session (the replica serving a request rebuilds the session
/// from it): the negotiated version, the client's capability names, its log level, the resources
/// it subscribed to, and who opened it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The caller that opened it (whom it counts against).
    pub owner: String,
    /// The negotiated version.
    pub version: String,
    /// The kept capability names (`protocol::session::kept_capabilities`).
    pub capabilities: Value,
    /// The log level (`logging/setLevel`), as its wire name.
    pub log_level: String,
    /// Subscribed resource URIs.
    pub subscriptions: Vec<String>,
}

/// Most resource subscriptions a fleet keeps per legacy session.
pub const MAX_SESSION_SUBSCRIPTIONS: usize = 256;

/// The bounds of legacy sessions in a fleet.
#[derive(Debug, Clone, Copy)]
pub struct SessionBounds {
    /// Sessions in total.
    pub max: usize,
    /// Sessions per caller.
    pub per_caller: usize,
    /// Idle time after which a session expires.
    pub idle: Duration,
}

enum Backend {
    Sqlite(sqlite::Sqlite),
    Redis(Box<redis::Redis>),
}

/// The store every replica of one endpoint shares (or this process's own).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    bus: Bus,
    /// What the store is, for messages (`sqlite /path`, `memory`, `redis://host:port/db`).
    describe: String,
    /// False while the store cannot be reached (Redis down).
    reachable: AtomicBool,
    /// The keys that seal task records (and, with Redis, the events between replicas).
    keys: Arc<ArcSwap<RecordKeys>>,
}

/// The keys that seal task records: the configured ones (`request_state.keys`), as given and as
/// bytes. Empty: the backend's own (SQLite), or none (Redis).
#[derive(Default)]
pub(crate) struct RecordKeys {
    configured: Vec<String>,
    pub(crate) keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("store", &self.inner.describe)
            .field("replica", &self.inner.bus.replica())
            .finish()
    }
}

/// The default place of the SQLite store: `$XDG_STATE_HOME/mcp-host/tasks.sqlite`, else
/// `~/.local/state/mcp-host/tasks.sqlite`.
pub fn default_sqlite_path() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    Some(state.join("mcp-host").join("tasks.sqlite"))
}

impl Store {
    /// A store in memory (tasks live as long as the process), with a bus inside this process.
    pub fn memory(replica: &str) -> Store {
        Store::with_backend(
            Backend::Sqlite(sqlite::Sqlite::memory()),
            Bus::local(replica),
            "memory".into(),
            Arc::default(),
        )
    }

    fn with_backend(
        backend: Backend,
        bus: Bus,
        describe: String,
        keys: Arc<ArcSwap<RecordKeys>>,
    ) -> Store {
        Store {
            inner: Arc::new(Inner {
                backend,
                bus,
                describe,
                reachable: AtomicBool::new(true),
                keys,
            }),
        }
    }

    /// Open the configured store (inside a tokio runtime: Redis starts its connection, its
    /// pub/sub listener and its health checks), its task records sealed under `record_keys` (the
    /// `request_state.keys`). An unreachable Redis is not an error here: the replica starts,
    /// reports itself not ready and reconnects; a SQLite file that cannot be opened is, and so is
    /// Redis without keys (its records could not be authenticated). The default SQLite place
    /// falls back to memory when there is no home directory.
    pub async fn open(
        setting: &StoreSetting,
        replica: &str,
        record_keys: &[String],
    ) -> Result<Store, StoreError> {
        let store = Self::open_backend(setting, replica, record_keys)?;
        store.set_record_keys(record_keys);
        if let StoreSetting::Redis(url) = setting {
            redis::Redis::first_contact(url).await?;
        }
        Ok(store)
    }

    fn open_backend(
        setting: &StoreSetting,
        replica: &str,
        record_keys: &[String],
    ) -> Result<Store, StoreError> {
        match setting {
            StoreSetting::Memory => Ok(Store::memory(replica)),
            StoreSetting::Sqlite(path) => {
                let path = match path.clone().or_else(default_sqlite_path) {
                    Some(p) => p,
                    None => {
                        tracing::warn!(
                            "no home or state directory for the task store: keeping tasks in \
                             memory (set `store: sqlite:PATH` to keep them across restarts)"
                        );
                        return Ok(Store::memory(replica));
                    }
                };
                let db = sqlite::Sqlite::open(&path);
                let store = Store::with_backend(
                    Backend::Sqlite(db),
                    Bus::local(replica),
                    format!("sqlite {}", path.display()),
                    Arc::default(),
                );
                store.spawn_sqlite_sweeper();
                Ok(store)
            }
            StoreSetting::Redis(url) => {
                if record_keys.iter().all(String::is_empty) {
                    return Err(StoreError::Unavailable(format!(
                        "store {}: a Redis store needs request_state.keys (the HMAC keys that \
                         authenticate task records, the same on every replica; use ${{ENV_VAR}})",
                        redis::describe(url)
                    )));
                }
                // Shared with the bus's publisher and listener, which seal and check events.
                let keys: Arc<ArcSwap<RecordKeys>> = Arc::default();
                let (backend, bus) = redis::Redis::connect(url, replica, Arc::clone(&keys))?;
                let store = Store::with_backend(
                    Backend::Redis(Box::new(backend)),
                    bus,
                    redis::describe(url),
                    keys,
                );
                store.spawn_health_checks();
                Ok(store)
            }
        }
    }

    /// Seal task records under `keys` from now on (the first seals, any opens; a configuration
    /// reload passes the new `request_state.keys`). Empty keys are ignored (the backend's own key,
    /// for SQLite).
    pub fn set_record_keys(&self, keys: &[String]) {
        if self.inner.keys.load().configured == keys {
            return;
        }
        let bytes = keys
            .iter()
            .filter(|k| !k.is_empty())
            .map(|k| k.as_bytes().to_vec())
            .collect();
        self.inner.keys.store(Arc::new(RecordKeys {
            configured: keys.to_vec(),
            keys: bytes,
        }));
    }

    /// The keys that seal and open task records now.
    async fn record_keys(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        let keys = self.inner.keys.load();
        if !keys.keys.is_empty() {
            return Ok(keys.keys.clone());
        }
        match &self.inner.backend {
            Backend::Sqlite(db) => Ok(vec![db.record_key().await?]),
            Backend::Redis(_) => Err(StoreError::Unavailable(
                "no request_state.keys to authenticate task records".into(),
            )),
        }
    }

    /// `task` sealed under the current key.
    async fn sealed(&self, task: &TaskRecord) -> Result<String, StoreError> {
        seal_record(&self.record_keys().await?, task)
    }

    /// The record of `raw`, if it is task `id`'s, sealed under a current key (else logged).
    async fn checked(&self, id: &str, raw: RawTask) -> Result<Option<StoredTask>, StoreError> {
        let keys = self.record_keys().await?;
        match open_record(&keys, id, &raw.record) {
            Ok(task) => Ok(Some(StoredTask {
                task,
                version: raw.version,
                lease: raw.lease,
            })),
            Err(why) => {
                tracing::error!(
                    task = id,
                    "the stored record of task {id} is refused and treated as absent: {why}"
                );
                Ok(None)
            }
        }
    }

    /// What the store is (`sqlite /path`, `memory`, `redis://host:port/db`), without credentials.
    pub fn describe(&self) -> &str {
        &self.inner.describe
    }

    /// Whether it is shared by replicas (Redis): legacy sessions are kept in it too.
    pub fn is_shared(&self) -> bool {
        matches!(self.inner.backend, Backend::Redis(_))
    }

    /// The counter of the call policy's budgets every replica shares: Redis's (none for SQLite
    /// and memory, where each process counts its own).
    pub fn shared_budgets(&self) -> Option<Arc<dyn crate::policy::budget::SharedBudgets>> {
        match &self.inner.backend {
            Backend::Redis(redis) => Some(Arc::new(budgets::RedisBudgets::new(
                redis.connection(),
                self.clone(),
            ))),
            Backend::Sqlite(_) => None,
        }
    }

    /// Where the upstream token vault keeps its rows: this store (SQLite's tables, or Redis's
    /// keys; the memory store is SQLite in memory). Built on every call: keep the one you need.
    pub fn vault_backend(&self) -> Arc<dyn crate::access::upstream::vault::VaultBackend> {
        Arc::new(vault::StoreVault::new(self))
    }

    /// The events between replicas.
    pub fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        self.inner.bus.replica()
    }

    /// Whether the store could be reached at the last check (memory always is).
    pub fn is_reachable(&self) -> bool {
        self.inner.reachable.load(Ordering::Relaxed)
    }

    /// Record the outcome of an operation: a failure marks the store unreachable until the next
    /// successful check (Redis: its PING every second; SQLite: a probe every second started by
    /// the failure, so a file that could not be opened for want of descriptors, or a database
    /// locked too long, is ready again once it answers).
    fn observe<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Unavailable(why)) = &result
            && self.inner.reachable.swap(false, Ordering::Relaxed)
        {
            tracing::error!("task store {} unreachable: {why}", self.inner.describe);
            if matches!(self.inner.backend, Backend::Sqlite(_)) {
                self.spawn_sqlite_recovery();
            }
        }
        result
    }

    /// Probe SQLite every second until it answers, then mark the store reachable again.
    fn spawn_sqlite_recovery(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let Backend::Sqlite(db) = &inner.backend else {
                    return;
                };
                if db.probe().await.is_ok() {
                    inner.reachable.store(true, Ordering::Relaxed);
                    tracing::info!("task store {} reachable", inner.describe);
                    return;
                }
            }
        });
    }

    fn spawn_sqlite_sweeper(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            // Not at start: the database is opened when first needed.
            let period = Duration::from_secs(60);
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                if let Backend::Sqlite(db) = &inner.backend {
                    if let Err(e) = db.sweep().await {
                        tracing::warn!("task store sweep failed: {e}");
                    }
                    if let Err(e) = db.sweep_vault().await {
                        tracing::warn!("token vault sweep failed: {e}");
                    }
                }
            }
        });
    }

    /// Redis: a PING every second; the replica is ready only while it answers.
    fn spawn_health_checks(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let Backend::Redis(redis) = &inner.backend else {
                    return;
                };
                let ok = redis.ping().await;
                let was = inner.reachable.swap(ok.is_ok(), Ordering::Relaxed);
                match (&ok, was) {
                    (Ok(()), false) => {
                        tracing::info!("task store {} reachable", inner.describe);
                    }
                    (Err(e), true) => {
                        tracing::error!("task store {} unreachable: {e}", inner.describe);
                    }
                    _ => {}
                }
            }
        });
    }

    // -----------------------------------------------------------------------------------------
    // Tasks

    /// Store a new task (durably: a `tasks/get` anywhere finds it once this returns), sealed,
    /// with the creating replica's lease, within the bounds of `settings`.
    pub async fn create_task(
        &self,
        task: &TaskRecord,
        lease: Option<&Lease>,
        settings: &TaskSettings,
    ) -> Result<(), StoreError> {
        let result = match self.sealed(task).await {
            Ok(record) => match &self.inner.backend {
                Backend::Sqlite(db) => db.create_task(task, &record, lease, settings).await,
                Backend::Redis(r) => r.create_task(task, &record, lease, settings).await,
            },
            Err(e) => Err(e),
        };
        self.observe(result)
    }

    /// The task with this id, unless it expired or its record fails its check (then it is
    /// logged, and absent).
    pub async fn task(&self, id: &str) -> Result<Option<StoredTask>, StoreError> {
        let result = match &self.inner.backend {
            Backend::Sqlite(db) => db.task(id).await,
            Backend::Redis(r) => r.task(id).await,
        };
        match self.observe(result)? {
            Some(raw) => self.observe(self.checked(id, raw).await),
            None => Ok(None),
        }
    }

    /// Up to `limit` tasks of every caller (the operator console's view): those expiring last,
    /// newest first.
    pub async fn tasks(&self, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        let ids = match &self.inner.backend {
            Backend::Sqlite(db) => db.task_ids(limit).await,
            Backend::Redis(r) => r.task_ids(limit).await,
        };
        let mut tasks = Vec::new();
        for id in self.observe(ids)? {
            if let Some(stored) = self.task(&id).await? {
                tasks.push(stored.task);
            }
        }
        tasks.sort_by_key(|t| std::cmp::Reverse(t.created_ms));
        Ok(tasks)
    }

    /// Replace the task, sealed, if it is still at `version` (else `false`: someone changed it
    /// first), with `lease` (`None` drops the lease). A write that grows the record past the byte
    /// bounds of `settings` is refused ([`StoreError::Full`]), unless it fails or cancels the task.
    pub async fn update_task(
        &self,
        task: &TaskRecord,
        version: u64,
        lease: Option<&Lease>,
        settings: &TaskSettings,
    ) -> Result<bool, StoreError> {
        let result = match self.sealed(task).await {
            Ok(record) => match &self.inner.backend {
                Backend::Sqlite(db) => {
                    db.update_task(task, &record, version, lease, settings)
                        .await
                }
                Backend::Redis(r) => r.update_task(task, &record, version, lease, settings).await,
            },
            Err(e) => Err(e),
        };
        self.observe(result)
    }

    /// Extend `lease` on a task this replica runs (only while it is `working` under this runner);
    /// the task's status now (`None`: gone).
    pub async fn renew_lease(
        &self,
        id: &str,
        lease: &Lease,
    ) -> Result<Option<TaskStatus>, StoreError> {
        let result = match &self.inner.backend {
            Backend::Sqlite(db) => db.renew_lease(id, lease).await,
            Backend::Redis(r) => r.renew_lease(id, lease).await,
        };
        self.observe(result)
    }

    // -----------------------------------------------------------------------------------------
    // Legacy sessions (Redis only; one host keeps them in memory)

    /// Keep a new session within `bounds`; the ids of sessions evicted to make room.
    pub async fn insert_session(
        &self,
        id: &str,
        record: &SessionRecord,
        bounds: SessionBounds,
    ) -> Result<Vec<String>, StoreError> {
        let result = match &self.inner.backend {
            Backend::Redis(r) => r.insert_session(id, record, bounds).await,
            Backend::Sqlite(_) => Err(StoreError::Unavailable(
                "sessions are kept in the store only with Redis".into(),
            )),
        };
        self.observe(result)
    }

    /// The live session with this id (its idle timer restarted).
    pub async fn session(
        &self,
        id: &str,
        bounds: SessionBounds,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let result = match &self.inner.backend {
            Backend::Redis(r) => r.session(id, bounds).await,
            Backend::Sqlite(_) => Ok(None),
        };
        self.observe(result)
    }

    /// Whether the session still exists (its idle timer left alone).
    pub async fn session_exists(&self, id: &str) -> Result<bool, StoreError> {
        let result = match &self.inner.backend {
            Backend::Redis(r) => r.session_exists(id).await,
            Backend::Sqlite(_) => Ok(false),
        };
        self.observe(result)
    }

    /// Save what a request changed in a session (log level, subscriptions).
    pub async fn save_session(&self, id: &str, record: &SessionRecord) -> Result<(), StoreError> {
        let result = match &self.inner.backend {
            Backend::Redis(r) => r.save_session(id, record).await,
            Backend::Sqlite(_) => Ok(()),
        };
        self.observe(result)
    }

    /// End a session; whether it existed.
    pub async fn remove_session(&self, id: &str) -> Result<bool, StoreError> {
        let result = match &self.inner.backend {
            Backend::Redis(r) => r.remove_session(id).await,
            Backend::Sqlite(_) => Ok(false),
        };
        self.observe(result)
    }
}

/// A fresh unguessable id: 128 random bits as a UUID-shaped string (version 4 layout).
pub fn new_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        let seed = format!("{:?}{:p}{}", SystemTime::now(), &b, std::process::id());
        for (i, x) in seed.bytes().enumerate() {
            b[i % 16] ^= x;
        }
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A `working` task of caller `owner_key` for unit tests.
#[cfg(test)]
pub(crate) fn sample_task(id: &str, owner_key: &str) -> TaskRecord {
    let now = now_ms();
    TaskRecord {
        id: id.into(),
        owner: String::new(),
        quota_key: owner_key.into(),
        status: TaskStatus::Working,
        status_message: None,
        created_ms: now,
        updated_ms: now,
        ttl_ms: 60_000,
        poll_ms: 500,
        tool: "t".into(),
        arguments: None,
        caller: None,
        agent: None,
        capabilities: serde_json::json!({}),
        answers: Map::new(),
        input_requests: Map::new(),
        result: None,
        error: None,
        run: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, owner_key: &str) -> TaskRecord {
        sample_task(id, owner_key)
    }

    #[tokio::test]
    async fn tasks_are_compared_and_set_by_version_and_bounded_per_caller() {
        let store = Store::memory("r1");
        let settings = TaskSettings {
            max_per_caller: 2,
            ..TaskSettings::default()
        };
        let lease = Lease {
            runner: "r1".into(),
            until_ms: now_ms() + 10_000,
        };
        store
            .create_task(&task("a", "x"), Some(&lease), &settings)
            .await
            .unwrap();
        store
            .create_task(&task("b", "x"), None, &settings)
            .await
            .unwrap();
        let full = store.create_task(&task("c", "x"), None, &settings).await;
        assert!(matches!(full, Err(StoreError::Full(m)) if m.contains("tasks.max_per_caller")));
        store
            .create_task(&task("c", "y"), None, &settings)
            .await
            .unwrap();
        let got = store.task("a").await.unwrap().unwrap();
        assert_eq!(got.lease, Some(lease.clone()));
        assert!(!got.abandoned(now_ms()));
        let mut done = got.task.clone();
        done.status = TaskStatus::Completed;
        assert!(
            store
                .update_task(&done, got.version, None, &settings)
                .await
                .unwrap()
        );
        assert!(
            !store
                .update_task(&done, got.version, None, &settings)
                .await
                .unwrap(),
            "a stale version loses"
        );
        assert_eq!(
            store.renew_lease("a", &lease).await.unwrap(),
            Some(TaskStatus::Completed)
        );
        assert!(store.task("nope").await.unwrap().is_none());
        let b = store.task("b").await.unwrap().unwrap();
        assert!(b.abandoned(now_ms()), "working without a lease");
    }

    #[tokio::test]
    async fn a_sqlite_file_that_could_not_be_opened_is_ready_again_once_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("state");
        std::fs::write(&blocker, b"a file where the directory goes").unwrap();
        let setting = StoreSetting::Sqlite(Some(blocker.join("tasks.sqlite")));
        let store = Store::open(&setting, "r1", &[]).await.unwrap();
        assert!(store.task("a").await.is_err());
        assert!(!store.is_reachable());
        std::fs::remove_file(&blocker).unwrap();
        // The probe runs every second; a loaded machine gets a generous deadline.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !store.is_reachable() {
            assert!(
                std::time::Instant::now() < deadline,
                "never reachable again"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(store.task("a").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_record_changed_outside_the_store_or_moved_to_another_id_is_refused() {
        let keys = vec![b"k1".to_vec()];
        let mut t = task("t1", "x");
        t.owner = "alice\u{0}".into();
        let sealed = seal_record(&keys, &t).unwrap();
        assert_eq!(open_record(&keys, "t1", &sealed).unwrap(), t);
        // Rotation: a new first key seals, the old one still opens.
        let rotated = vec![b"k2".to_vec(), b"k1".to_vec()];
        assert_eq!(open_record(&rotated, "t1", &sealed).unwrap(), t);
        assert_eq!(
            open_record(&[b"k2".to_vec()], "t1", &sealed),
            Err(RecordError::Tampered)
        );
        let forged = sealed.replace("alice", "mallo");
        assert_eq!(
            open_record(&keys, "t1", &forged),
            Err(RecordError::Tampered)
        );
        assert_eq!(
            open_record(&keys, "t2", &sealed),
            Err(RecordError::Misplaced)
        );
        let plain = serde_json::to_string(&t).unwrap();
        assert_eq!(open_record(&keys, "t1", &plain), Err(RecordError::Unsealed));

        // Through a store: a record changed in place reads as absent.
        let store = Store::memory("r1");
        store.set_record_keys(&["k1".into()]);
        store
            .create_task(&t, None, &TaskSettings::default())
            .await
            .unwrap();
        assert!(store.task("t1").await.unwrap().is_some());
        store.set_record_keys(&["other".into()]);
        assert!(store.task("t1").await.unwrap().is_none(), "no key opens it");
    }

    #[test]
    fn events_are_taken_only_sealed_under_a_key_and_recent() {
        let keys = vec![b"k1".to_vec()];
        let json = r#"{"from":"r1","event":{"kind":"cancel_task","id":"t"}}"#;
        let now = now_ms();
        let sealed = seal_event(&keys, now, json);
        assert_eq!(open_event(&keys, &sealed, now + 1000), Ok(json));
        let rotated = vec![b"k2".to_vec(), b"k1".to_vec()];
        assert_eq!(open_event(&rotated, &sealed, now), Ok(json));
        assert_eq!(open_event(&keys, json, now), Err(RecordError::Unsealed));
        let forged = sealed.replace("\"t\"", "\"u\"");
        assert_eq!(open_event(&keys, &forged, now), Err(RecordError::Tampered));
        let later = now + EVENT_MAX_SKEW_MS + 1;
        assert!(matches!(
            open_event(&keys, &sealed, later),
            Err(RecordError::Unreadable(_))
        ));
        // The time is covered by the MAC too.
        let moved = sealed.replacen(&now.to_string(), &later.to_string(), 1);
        assert_eq!(open_event(&keys, &moved, later), Err(RecordError::Tampered));
    }

    #[test]
    fn urls_are_shown_without_passwords_or_secret_parameters() {
        assert_eq!(
            redact_url("redis://u:p%40ss@h:6379/1?pass=x&user=u&token=y#insecure"),
            "redis://u:<redacted>@h:6379/1?pass=<redacted>&user=u&token=<redacted>#insecure"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=2&pass=secret"),
            "redis+unix:///run/redis.sock?db=2&pass=<redacted>"
        );
        assert_eq!(redact_url("redis://pw@h"), "redis://<redacted>@h");
        assert_eq!(redact_url("sqlite /x/y"), "sqlite /x/y");
        assert_eq!(
            redact_url_with("rediss://u:p@h:1/0?password=p", false),
            "rediss://h:1/0?password=<redacted>"
        );
    }

    #[test]
    fn ids_are_uuid_shaped_and_unique() {
        let a = new_id();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, new_id());
    }
}
