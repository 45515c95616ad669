//! Legacy (2025-xx) sessions: what an `initialize` handshake establishes for a stdio connection or an
//! HTTP `Mcp-Session-Id`, the bounded store that keeps HTTP sessions, and the requests in flight that
//! `notifications/cancelled` can reach.
//!
//! A session keeps only what the host uses of what the client sent, bounded: the names of its
//! capabilities (at most [`MAX_KEPT_CAPABILITIES`]), the negotiated version and a log level. The
//! store bounds sessions per caller as well as in total, and a full store makes room at the
//! expense of the caller holding the most sessions, so a flood of `initialize` only ever evicts the
//! flooder's own sessions.
//!
//! 2026-07-28 requests are stateless and never touch this module.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::LogLevel;
use serde_json::{Value, json};

use super::Notifier;
use super::jsonrpc;
use crate::exec::{CancelFlag, ClientLink};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Requests in flight, by id, so `notifications/cancelled` can reach them: one set per stdio
/// connection and per legacy HTTP session.
#[derive(Debug, Default)]
pub struct Inflight {
    running: Mutex<HashMap<RequestKey, CancelFlag>>,
    /// Requests are tracked from the first time they wait (see [`Inflight::one_reader`]).
    from_first_wait: bool,
}

/// A request id as a map key: a number as it is (no text made for it), a string by its text. A
/// number and a string never name the same request (`1` is not `"1"`), as JSON-RPC has it.
#[derive(Debug, PartialEq, Eq, Hash)]
enum RequestKey {
    Number(serde_json::Number),
    Text(String),
    /// Any other id (the transports only run requests with string or number ids).
    Other(String),
}

impl RequestKey {
    fn of(id: &Value) -> RequestKey {
        match id {
            Value::Number(n) => RequestKey::Number(n.clone()),
            Value::String(s) => RequestKey::Text(s.clone()),
            other => RequestKey::Other(other.to_string()),
        }
    }
}

impl Inflight {
    /// The requests of a connection whose messages one thread reads, running each request until it
    /// first has to wait before it reads the next message (stdio): a request that finishes in that
    /// first run can never be named by a `notifications/cancelled`, which is read only afterwards,
    /// so requests are tracked from their first wait instead of from their start.
    pub fn one_reader() -> Inflight {
        Inflight {
            from_first_wait: true,
            ..Inflight::default()
        }
    }

    /// Whether requests are tracked from their first wait rather than from their start.
    pub fn tracks_from_first_wait(&self) -> bool {
        self.from_first_wait
    }

    /// Track a request until [`Inflight::finish`].
    pub fn track(&self, id: &Value, cancel: CancelFlag) {
        lock(&self.running).insert(RequestKey::of(id), cancel);
    }

    /// Stop tracking a request; `false` when a `notifications/cancelled` took it out first (the
    /// client cancelled it and expects no response).
    pub fn finish(&self, id: &Value) -> bool {
        lock(&self.running).remove(&RequestKey::of(id)).is_some()
    }

    /// Cancel an in-flight request; true if it was running.
    pub fn cancel(&self, id: &Value) -> bool {
        match lock(&self.running).remove(&RequestKey::of(id)) {
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

/// Most client capability names a session keeps (the host only ever asks whether one, or one of
/// its sub-capabilities such as `elicitation.url`, is present).
pub const MAX_KEPT_CAPABILITIES: usize = 64;
/// Most sub-capability names kept under one capability.
pub const MAX_KEPT_SUB_CAPABILITIES: usize = 16;
/// Longest client capability name a session keeps, in bytes.
pub const MAX_CAPABILITY_NAME: usize = 128;

/// What a session keeps of the client's declared `capabilities`: their names, each with the names
/// of its sub-capabilities (each an empty object) — at most [`MAX_KEPT_CAPABILITIES`] names with at
/// most [`MAX_KEPT_SUB_CAPABILITIES`] sub-names each, none over [`MAX_CAPABILITY_NAME`] bytes.
pub fn kept_capabilities(capabilities: Option<&Value>) -> Value {
    fn names(value: Option<&Value>, most: usize, inner: impl Fn(&Value) -> Value) -> Value {
        let kept = value
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(name, _)| name.len() <= MAX_CAPABILITY_NAME)
            .take(most)
            .map(|(name, v)| (name.clone(), inner(v)))
            .collect();
        Value::Object(kept)
    }
    names(capabilities, MAX_KEPT_CAPABILITIES, |sub| {
        names(Some(sub), MAX_KEPT_SUB_CAPABILITIES, |_| {
            Value::Object(serde_json::Map::new())
        })
    })
}

/// The state of one legacy session.
pub struct LegacySession {
    /// The session id (HTTP) or `stdio`.
    pub id: String,
    /// The negotiated protocol version.
    pub version: String,
    /// The names of the client's declared capabilities ([`kept_capabilities`]).
    pub capabilities: Value,
    /// Its requests in flight.
    pub inflight: Arc<Inflight>,
    log_level: Mutex<LogLevel>,
    last_seen: Mutex<Instant>,
    stream: Mutex<Option<Arc<dyn Outbound>>>,
    /// Requests this server sent the client, waiting for its response, by id.
    outgoing: Mutex<HashMap<String, Sender<Result<Value, Value>>>>,
    next_request: AtomicU64,
    /// Names this process's requests to the client (another replica serving the same session
    /// numbers its own), so their ids never collide.
    request_tag: String,
    /// Resource URIs the client subscribed to (`resources/subscribe`).
    subscriptions: Mutex<BTreeSet<String>>,
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
            outgoing: Mutex::default(),
            next_request: AtomicU64::new(1),
            request_tag: new_session_id()[..8].to_owned(),
            subscriptions: Mutex::default(),
        }
    }

    /// The resource URIs the client subscribed to.
    pub fn subscriptions(&self) -> Vec<String> {
        lock(&self.subscriptions).iter().cloned().collect()
    }

    /// Replace the subscriptions (a fleet's record of the session, changed on another replica).
    pub fn set_subscriptions(&self, uris: impl IntoIterator<Item = String>) {
        *lock(&self.subscriptions) = uris.into_iter().collect();
    }

    /// Close the session-level stream, if one is attached (the session ended).
    pub fn detach_stream(&self) {
        *lock(&self.stream) = None;
    }

    /// Route a response from the client to the request of ours it answers; `false` when no request
    /// with that id is waiting (answered already, abandoned, or never sent).
    pub fn deliver(&self, id: &Value, outcome: Result<Value, Value>) -> bool {
        match lock(&self.outgoing).remove(&id.to_string()) {
            Some(waiting) => waiting.send(outcome).is_ok(),
            None => false,
        }
    }

    /// Subscribe to updates of `uri`.
    pub fn subscribe(&self, uri: &str) {
        lock(&self.subscriptions).insert(uri.to_owned());
    }

    /// Stop the updates of `uri`.
    pub fn unsubscribe(&self, uri: &str) {
        lock(&self.subscriptions).remove(uri);
    }

    /// Whether the client subscribed to `uri`.
    pub fn is_subscribed(&self, uri: &str) -> bool {
        lock(&self.subscriptions).contains(uri)
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

/// A legacy session's client as a running call reaches it: requests go out on the call's own
/// stream (the POST's SSE stream, or stdout), responses come back through [`LegacySession::deliver`].
pub struct SessionLink {
    session: Arc<LegacySession>,
    out: Notifier,
}

impl SessionLink {
    /// The link to `session`'s client over `out`, the stream of the request being served.
    pub fn new(session: Arc<LegacySession>, out: Notifier) -> Self {
        SessionLink { session, out }
    }
}

impl ClientLink for SessionLink {
    fn send(
        &self,
        method: &str,
        params: Value,
    ) -> Result<(Value, Receiver<Result<Value, Value>>), String> {
        let n = self.session.next_request.fetch_add(1, Ordering::Relaxed);
        let id = json!(format!("mcp-host-{}-{n}", self.session.request_tag));
        let (tx, rx) = channel();
        // Registered before it is sent, so an answer can never arrive first.
        lock(&self.session.outgoing).insert(id.to_string(), tx);
        let mut request = jsonrpc::notification(method, params);
        request["id"] = id.clone();
        (self.out)(request);
        Ok((id, rx))
    }

    fn notify(&self, method: &str, params: Value) {
        (self.out)(jsonrpc::notification(method, params));
    }

    fn abandon(&self, id: &Value) {
        if lock(&self.session.outgoing)
            .remove(&id.to_string())
            .is_some()
        {
            (self.out)(jsonrpc::notification(
                "notifications/cancelled",
                json!({ "requestId": id, "reason": "the call that asked ended" }),
            ));
        }
    }
}

/// A stored session and the caller that opened it.
#[derive(Debug)]
struct Stored {
    owner: Arc<str>,
    session: Arc<LegacySession>,
}

/// The HTTP sessions, bounded in number (in total and per caller) and expired when idle.
#[derive(Debug)]
pub struct SessionStore {
    sessions: Mutex<HashMap<String, Stored>>,
    max: usize,
    per_caller: usize,
    idle: Duration,
    /// Set to the number of sessions held after every change.
    gauge: Option<prometheus_client::metrics::gauge::Gauge>,
}

impl SessionStore {
    /// A store of at most `max` sessions, `per_caller` of them per caller, each expiring after
    /// `idle` without requests.
    pub fn new(max: usize, per_caller: usize, idle: Duration) -> Self {
        SessionStore {
            sessions: Mutex::new(HashMap::new()),
            max: max.max(1),
            per_caller: per_caller.max(1),
            idle,
            gauge: None,
        }
    }

    /// This store, keeping `gauge` at the number of sessions it holds.
    pub fn with_gauge(mut self, gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        self.gauge = Some(gauge);
        self
    }

    fn count(&self, map: &HashMap<String, Stored>) {
        if let Some(gauge) = &self.gauge {
            gauge.set(i64::try_from(map.len()).unwrap_or(i64::MAX));
        }
    }

    /// Register a new session of caller `owner`, evicting expired ones; at the caller's limit its
    /// own least recently used session goes, and at the total limit the least recently used
    /// session of the caller holding the most.
    pub fn insert(&self, session: Arc<LegacySession>, owner: Arc<str>) {
        let mut map = lock(&self.sessions);
        map.retain(|_, s| s.session.idle_for() < self.idle);
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for s in map.values() {
            *counts.entry(&s.owner).or_default() += 1;
        }
        let mut victims = Vec::new();
        let own = counts.get(&*owner).copied().unwrap_or(0);
        for _ in 0..(own + 1).saturating_sub(self.per_caller) {
            victims.push(Arc::clone(&owner));
            if let Some(n) = counts.get_mut(&*owner) {
                *n -= 1;
            }
        }
        let mut total = map.len() - victims.len();
        while total >= self.max {
            let Some((biggest, n)) = counts
                .iter_mut()
                .max_by_key(|(k, n)| (**n, **k == &*owner))
                .filter(|(_, n)| **n > 0)
            else {
                break;
            };
            victims.push(Arc::from(*biggest));
            *n -= 1;
            total -= 1;
        }
        drop(counts);
        for victim in victims {
            let oldest = map
                .iter()
                .filter(|(_, s)| s.owner == victim)
                .max_by_key(|(_, s)| s.session.idle_for())
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(session.id.clone(), Stored { owner, session });
        self.count(&map);
    }

    /// The live session with this id opened by `owner` (refreshing its idle timer). Another
    /// caller's session is `None`, as if it did not exist, and its idle timer is left alone: a
    /// session id is a bearer of nothing without its owner's identity.
    pub fn get(&self, id: &str, owner: &str) -> Option<Arc<LegacySession>> {
        let mut map = lock(&self.sessions);
        match map.get(id) {
            Some(s) if &*s.owner != owner => None,
            Some(s) if s.session.idle_for() < self.idle => {
                let s = &s.session;
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

    /// The caller that opened session `id`, if this store has it.
    pub fn owner(&self, id: &str) -> Option<Arc<str>> {
        lock(&self.sessions).get(id).map(|s| Arc::clone(&s.owner))
    }

    /// The session with this id, if this store has it (its idle timer left alone).
    pub fn peek(&self, id: &str) -> Option<Arc<LegacySession>> {
        lock(&self.sessions).get(id).map(|s| Arc::clone(&s.session))
    }

    /// End a session; true if it existed.
    pub fn remove(&self, id: &str) -> bool {
        let mut map = lock(&self.sessions);
        let removed = map.remove(id).is_some();
        self.count(&map);
        removed
    }

    /// The sessions idle for `idle` or longer (leaving them in place).
    pub fn idle(&self, idle: Duration) -> Vec<Arc<LegacySession>> {
        lock(&self.sessions)
            .values()
            .filter(|s| s.session.idle_for() >= idle)
            .map(|s| Arc::clone(&s.session))
            .collect()
    }

    /// Drop expired sessions; returns how many remain.
    pub fn sweep(&self) -> usize {
        let mut map = lock(&self.sessions);
        map.retain(|_, s| s.session.idle_for() < self.idle);
        self.count(&map);
        map.len()
    }

    /// Every live session (for broadcasting `tools/list_changed`).
    pub fn all(&self) -> Vec<Arc<LegacySession>> {
        lock(&self.sessions)
            .values()
            .map(|s| Arc::clone(&s.session))
            .collect()
    }
}

/// A fresh, unguessable session id (128 random bits, hex).
pub fn new_session_id() -> String {
    crate::exec::input::fresh_id()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str) -> Arc<LegacySession> {
        Arc::new(LegacySession::new(
            id.into(),
            "2025-11-25".into(),
            Value::Null,
        ))
    }

    #[test]
    fn an_id_and_the_same_digits_as_a_string_are_different_requests() {
        let inflight = Inflight::default();
        let (number, text) = (CancelFlag::new(), CancelFlag::new());
        inflight.track(&json!(7), number.clone());
        inflight.track(&json!("7"), text.clone());
        assert!(inflight.cancel(&json!("7")));
        assert!(text.is_cancelled() && !number.is_cancelled());
        assert!(!inflight.finish(&json!(7.0)), "7.0 is not the request 7");
        assert!(inflight.finish(&json!(7)));
        assert!(!inflight.finish(&json!(7)), "finished once");
    }

    #[test]
    fn store_is_bounded_and_evicts_the_least_recently_used() {
        let store = SessionStore::new(2, 10, Duration::from_secs(60));
        for id in ["a", "b"] {
            store.insert(session(id), "x".into());
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(store.get("a", "x").is_some()); // a is now the most recent
        store.insert(session("c"), "x".into());
        assert!(store.get("b", "x").is_none());
        assert!(store.get("a", "x").is_some() && store.get("c", "x").is_some());
    }

    #[test]
    fn a_session_is_found_only_by_the_caller_that_opened_it() {
        let store = SessionStore::new(4, 4, Duration::from_secs(60));
        store.insert(session("a"), "user:alice".into());
        assert!(store.get("a", "user:bob").is_none());
        assert!(store.get("a", "addr:127.0.0.1").is_none());
        assert!(store.get("a", "user:alice").is_some());
        assert_eq!(store.owner("a").as_deref(), Some("user:alice"));
    }

    #[test]
    fn a_flood_of_sessions_evicts_only_the_flooders_own() {
        let store = SessionStore::new(4, 3, Duration::from_secs(60));
        store.insert(session("alice-1"), "alice".into());
        store.insert(session("bob-1"), "bob".into());
        for i in 0..50 {
            store.insert(session(&format!("m-{i}")), "mallory".into());
        }
        assert!(store.get("alice-1", "alice").is_some() && store.get("bob-1", "bob").is_some());
        assert!(store.get("m-49", "mallory").is_some() && store.get("m-48", "mallory").is_some());
        assert_eq!(store.sweep(), 4);
        // At the total limit a newcomer evicts from the caller holding the most.
        store.insert(session("carol-1"), "carol".into());
        assert!(store.get("alice-1", "alice").is_some() && store.get("bob-1", "bob").is_some());
        assert!(store.get("carol-1", "carol").is_some());
        assert_eq!(store.sweep(), 4, "one of mallory's sessions made room");
    }

    #[test]
    fn only_bounded_capability_names_are_kept() {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "sampling".into(),
            serde_json::json!({"huge": "x".repeat(10_000)}),
        );
        caps.insert("x".repeat(MAX_CAPABILITY_NAME + 1), Value::Null);
        for i in 0..200 {
            caps.insert(format!("c{i:03}"), serde_json::json!([1, 2, 3]));
        }
        let kept = kept_capabilities(Some(&Value::Object(caps)));
        let kept = kept.as_object().unwrap();
        assert_eq!(kept.len(), MAX_KEPT_CAPABILITIES);
        assert!(kept.values().all(|v| v == &serde_json::json!({})));
        assert_eq!(
            kept_capabilities(Some(&serde_json::json!([1]))),
            serde_json::json!({})
        );
    }

    #[test]
    fn sub_capability_names_are_kept_and_their_values_dropped() {
        let caps = serde_json::json!({
            "elicitation": { "form": {}, "url": { "x": "y".repeat(1000) } },
            "sampling": { "tools": {}, "context": "big" },
            "roots": { "listChanged": true },
        });
        assert_eq!(
            kept_capabilities(Some(&caps)),
            serde_json::json!({
                "elicitation": { "form": {}, "url": {} },
                "sampling": { "context": {}, "tools": {} },
                "roots": { "listChanged": {} },
            })
        );
    }

    #[test]
    fn idle_sessions_expire() {
        let store = SessionStore::new(10, 10, Duration::from_millis(1));
        store.insert(session("a"), "x".into());
        std::thread::sleep(Duration::from_millis(5));
        assert!(store.get("a", "x").is_none());
        assert_eq!(store.sweep(), 0);
    }

    #[test]
    fn session_ids_are_unique_hex() {
        let a = new_session_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, new_session_id());
    }
}
