//! Legacy (2025-xx) sessions: what an `initialize` handshake establishes for a stdio connection or an
//! HTTP `Mcp-Session-Id`, the bounded store that keeps HTTP sessions, and the requests in flight that
//! `notifications/cancelled` can reach.
//!
//! 2026-07-28 requests are stateless and never touch this module.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::LogLevel;
use serde_json::Value;

use crate::exec::CancelFlag;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Requests in flight, by id, so `notifications/cancelled` can reach them: one set per stdio
/// connection and per legacy HTTP session.
#[derive(Debug, Default)]
pub struct Inflight(Mutex<HashMap<String, CancelFlag>>);

impl Inflight {
    /// Track a request until [`Inflight::finish`].
    pub fn track(&self, id: &Value, cancel: CancelFlag) {
        lock(&self.0).insert(id.to_string(), cancel);
    }

    /// Stop tracking a request; `false` when a `notifications/cancelled` took it out first (the
    /// client cancelled it and expects no response).
    pub fn finish(&self, id: &Value) -> bool {
        lock(&self.0).remove(&id.to_string()).is_some()
    }

    /// Cancel an in-flight request; true if it was running.
    pub fn cancel(&self, id: &Value) -> bool {
        match lock(&self.0).remove(&id.to_string()) {
            Some(flag) => {
                flag.cancel();
                true
            }
            None => false,
        }
    }
}

/// Where a connection's or a session's messages go: stdout, an SSE stream.
pub trait Outbound: Send + Sync {
    /// Send one message; `false` when the receiving end is gone.
    fn send(&self, message: &Value) -> bool;

    /// Keep an idle stream open (an SSE comment); `false` when the receiving end is gone.
    fn keepalive(&self) -> bool {
        true
    }
}

/// The state of one legacy session.
pub struct LegacySession {
    /// The session id (HTTP) or `stdio`.
    pub id: String,
    /// The negotiated protocol version.
    pub version: String,
    /// The client's declared capabilities.
    pub capabilities: Value,
    /// Its requests in flight.
    pub inflight: Arc<Inflight>,
    log_level: Mutex<LogLevel>,
    last_seen: Mutex<Instant>,
    stream: Mutex<Option<Arc<dyn Outbound>>>,
}

impl std::fmt::Debug for LegacySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacySession")
            .field("id", &self.id)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl LegacySession {
    /// A session after a successful `initialize`.
    pub fn new(id: String, version: String, capabilities: Value) -> Self {
        LegacySession {
            id,
            version,
            capabilities,
            inflight: Arc::default(),
            log_level: Mutex::new(LogLevel::Info),
            last_seen: Mutex::new(Instant::now()),
            stream: Mutex::new(None),
        }
    }

    /// The minimum level of `notifications/message` (set by `logging/setLevel`; `info` until then).
    pub fn log_level(&self) -> LogLevel {
        *lock(&self.log_level)
    }

    /// Change the minimum log level.
    pub fn set_log_level(&self, level: LogLevel) {
        *lock(&self.log_level) = level;
    }

    /// Whether this session speaks 2025-03-26 (the only revision with JSON-RPC batches).
    pub fn allows_batches(&self) -> bool {
        self.version == "2025-03-26"
    }

    fn touch(&self) {
        *lock(&self.last_seen) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_seen).elapsed()
    }

    /// Attach the stream that carries session-level notifications (the HTTP GET stream, or stdout).
    pub fn attach_stream(&self, out: Arc<dyn Outbound>) {
        *lock(&self.stream) = Some(out);
    }

    /// Send a session-level notification (e.g. `tools/list_changed`) if a stream is open.
    pub fn notify(&self, message: &Value) -> bool {
        let mut slot = lock(&self.stream);
        match slot.as_ref() {
            Some(out) if out.send(message) => true,
            Some(_) => {
                *slot = None;
                false
            }
            None => false,
        }
    }
}

/// The HTTP sessions, bounded in number and expired when idle.
#[derive(Debug)]
pub struct SessionStore {
    sessions: Mutex<HashMap<String, Arc<LegacySession>>>,
    max: usize,
    idle: Duration,
    /// Set to the number of sessions held after every change.
    gauge: Option<prometheus_client::metrics::gauge::Gauge>,
}

impl SessionStore {
    /// A store of at most `max` sessions, each expiring after `idle` without requests.
    pub fn new(max: usize, idle: Duration) -> Self {
        SessionStore {
            sessions: Mutex::new(HashMap::new()),
            max: max.max(1),
            idle,
            gauge: None,
        }
    }

    /// This store, keeping `gauge` at the number of sessions it holds.
    pub fn with_gauge(mut self, gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        self.gauge = Some(gauge);
        self
    }

    fn count(&self, map: &HashMap<String, Arc<LegacySession>>) {
        if let Some(gauge) = &self.gauge {
            gauge.set(i64::try_from(map.len()).unwrap_or(i64::MAX));
        }
    }

    /// Register a new session, evicting expired ones and, at the limit, the least recently used.
    pub fn insert(&self, session: Arc<LegacySession>) {
        let mut map = lock(&self.sessions);
        map.retain(|_, s| s.idle_for() < self.idle);
        while map.len() >= self.max {
            let oldest = map
                .iter()
                .max_by_key(|(_, s)| s.idle_for())
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    map.remove(&k);
                }
                None => break,
            }
        }
        map.insert(session.id.clone(), session);
        self.count(&map);
    }

    /// The live session with this id (refreshing its idle timer).
    pub fn get(&self, id: &str) -> Option<Arc<LegacySession>> {
        let mut map = lock(&self.sessions);
        match map.get(id) {
            Some(s) if s.idle_for() < self.idle => {
                s.touch();
                Some(Arc::clone(s))
            }
            Some(_) => {
                map.remove(id);
                self.count(&map);
                None
            }
            None => None,
        }
    }

    /// End a session; true if it existed.
    pub fn remove(&self, id: &str) -> bool {
        let mut map = lock(&self.sessions);
        let removed = map.remove(id).is_some();
        self.count(&map);
        removed
    }

    /// Drop expired sessions; returns how many remain.
    pub fn sweep(&self) -> usize {
        let mut map = lock(&self.sessions);
        map.retain(|_, s| s.idle_for() < self.idle);
        self.count(&map);
        map.len()
    }

    /// Every live session (for broadcasting `tools/list_changed`).
    pub fn all(&self) -> Vec<Arc<LegacySession>> {
        lock(&self.sessions).values().cloned().collect()
    }
}

/// A fresh, unguessable session id (128 random bits, hex).
pub fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // Without an OS RNG, fall back to time and address entropy (still unique per process).
        let t = Instant::now();
        let seed = format!("{t:?}{:p}", &bytes);
        for (i, b) in seed.bytes().enumerate() {
            bytes[i % 16] ^= b;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_is_bounded_and_evicts_the_least_recently_used() {
        let store = SessionStore::new(2, Duration::from_secs(60));
        for id in ["a", "b"] {
            store.insert(Arc::new(LegacySession::new(
                id.into(),
                "2025-11-25".into(),
                Value::Null,
            )));
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(store.get("a").is_some()); // a is now the most recent
        store.insert(Arc::new(LegacySession::new(
            "c".into(),
            "2025-11-25".into(),
            Value::Null,
        )));
        assert!(store.get("b").is_none());
        assert!(store.get("a").is_some() && store.get("c").is_some());
    }

    #[test]
    fn idle_sessions_expire() {
        let store = SessionStore::new(10, Duration::from_millis(1));
        store.insert(Arc::new(LegacySession::new(
            "a".into(),
            "2025-11-25".into(),
            Value::Null,
        )));
        std::thread::sleep(Duration::from_millis(5));
        assert!(store.get("a").is_none());
        assert_eq!(store.sweep(), 0);
    }

    #[test]
    fn session_ids_are_unique_hex() {
        let a = new_session_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, new_session_id());
    }
}
