//! Legacy sessions of the HTTP transport: kept by this process (one host), or in the shared store
//! (a fleet), so that any replica serves any request of a session.
//!
//! In a fleet the store keeps what a session is — its version, capability names, log level,
//! subscriptions and owner, bounded per caller and in total, expiring when idle — and each replica
//! caches the part that cannot travel: the GET stream open on it, its requests in flight, its
//! requests to the client waiting for an answer. What reaches the wrong replica travels on the
//! bus: a client's response to a request another replica sent, a `notifications/cancelled` for a
//! call running elsewhere, the end of a session whose GET stream is open elsewhere.
//!
//! The store's futures are boxed where they are awaited: every request's future nests these
//! methods', and a request served without a store should not carry (and copy at each move) the
//! size of a Redis round trip's.

use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::LogLevel;
use serde_json::{Value, json};

use crate::config::HttpSettings;
use crate::protocol::jsonrpc::{ErrorKind, RpcError};
use crate::protocol::session::{LegacySession, SessionStore, new_session_id};
use crate::store::{Event, SessionBounds, SessionRecord, Store, StoreError};

/// What a request may change in a session, to save when it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Changeable {
    log_level: LogLevel,
    subscriptions: Vec<String>,
}

impl Changeable {
    /// The session's changeable part now.
    pub(crate) fn of(session: &LegacySession) -> Self {
        Changeable {
            log_level: session.log_level(),
            subscriptions: session.subscriptions(),
        }
    }
}

/// The HTTP transport's legacy sessions.
pub(crate) struct Sessions {
    /// This process's sessions (one host), or its part of the fleet's.
    local: SessionStore,
    /// The fleet's store, when sessions are shared.
    shared: Option<Store>,
    bounds: SessionBounds,
}

fn unavailable(e: StoreError) -> RpcError {
    RpcError::new(
        ErrorKind::Unavailable,
        format!("{e}: legacy sessions are kept there; try again when it is back"),
    )
}

impl Sessions {
    /// Sessions bounded by `settings`, in `store` when it is shared by replicas.
    pub(crate) fn new(settings: &HttpSettings, store: &Store) -> Self {
        let bounds = SessionBounds {
            max: settings.max_sessions,
            per_caller: settings.max_sessions_per_caller,
            idle: Duration::from_secs(settings.session_idle_secs),
        };
        let shared = store.is_shared().then(|| store.clone());
        // In a fleet a session is alive while the store has it, whichever replica it uses: this
        // replica's part goes when the store says it ended (see `sweep`), not on local idleness.
        let local_idle = if shared.is_some() {
            Duration::MAX
        } else {
            bounds.idle
        };
        Sessions {
            local: SessionStore::new(bounds.max, bounds.per_caller, local_idle),
            shared,
            bounds,
        }
    }

    /// These sessions, keeping `gauge` at the number this replica holds.
    pub(crate) fn with_gauge(mut self, gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        self.local = self.local.with_gauge(gauge);
        self
    }

    /// Open a session for `owner` after a successful `initialize`; its id.
    pub(crate) async fn open(
        &self,
        version: String,
        capabilities: Value,
        owner: Arc<str>,
    ) -> Result<String, RpcError> {
        let id = new_session_id();
        if let Some(store) = &self.shared {
            let record = SessionRecord {
                owner: owner.to_string(),
                version: version.clone(),
                capabilities: capabilities.clone(),
                log_level: LogLevel::Info.as_str().to_owned(),
                subscriptions: Vec::new(),
            };
            let evicted = Box::pin(store.insert_session(&id, &record, self.bounds))
                .await
                .map_err(unavailable)?;
            for gone in evicted {
                self.end_here(&gone);
                store
                    .bus()
                    .publish_to_others(Event::SessionEnded { session: gone });
            }
        }
        let session = Arc::new(LegacySession::new(id.clone(), version, capabilities));
        self.local.insert(session, owner);
        Ok(id)
    }

    /// The live session with this id opened by `owner` (its idle timer restarted), as this
    /// replica serves it. Another caller's session is `None`: its id alone grants nothing.
    pub(crate) async fn get(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Arc<LegacySession>>, RpcError> {
        let Some(store) = &self.shared else {
            return Ok(self.local.get(id, owner));
        };
        let Some(record) = Box::pin(store.session(id, self.bounds))
            .await
            .map_err(unavailable)?
        else {
            self.end_here(id);
            return Ok(None);
        };
        if record.owner != owner {
            return Ok(None);
        }
        let session = match self.local.get(id, owner) {
            Some(s) => s,
            None => {
                let s = Arc::new(LegacySession::new(
                    id.to_owned(),
                    record.version.clone(),
                    record.capabilities.clone(),
                ));
                self.local
                    .insert(Arc::clone(&s), Arc::from(record.owner.as_str()));
                s
            }
        };
        if let Ok(level) = serde_json::from_value(json!(record.log_level)) {
            session.set_log_level(level);
        }
        session.set_subscriptions(record.subscriptions);
        Ok(Some(session))
    }

    /// Save what a request changed in `session` (compared with `before`), in a fleet.
    pub(crate) async fn save(&self, session: &LegacySession, before: &Changeable) {
        let Some(store) = &self.shared else { return };
        let now = Changeable::of(session);
        if now == *before {
            return;
        }
        let record = SessionRecord {
            owner: String::new(),
            version: session.version.clone(),
            capabilities: Value::Null,
            log_level: now.log_level.as_str().to_owned(),
            subscriptions: now.subscriptions,
        };
        if let Err(e) = Box::pin(store.save_session(&session.id, &record)).await {
            tracing::warn!(
                "a change to legacy session {} was not saved: {e}",
                session.id
            );
        }
    }

    /// End a session of `owner` (DELETE); whether it existed (another caller's does not).
    pub(crate) async fn remove(&self, id: &str, owner: &str) -> Result<bool, RpcError> {
        if self.get(id, owner).await?.is_none() {
            return Ok(false);
        }
        let here = self.end_here(id);
        let Some(store) = &self.shared else {
            return Ok(here);
        };
        let existed = store.remove_session(id).await.map_err(unavailable)?;
        store.bus().publish_to_others(Event::SessionEnded {
            session: id.to_owned(),
        });
        Ok(existed)
    }

    /// Forget this replica's part of session `id` (closing its GET stream); whether it had one.
    fn end_here(&self, id: &str) -> bool {
        if let Some(session) = self.local.peek(id) {
            session.detach_stream();
        }
        self.local.remove(id)
    }

    /// The sessions this replica serves (for list-change notifications on their GET streams).
    pub(crate) fn local(&self) -> Vec<Arc<LegacySession>> {
        self.local.all()
    }

    /// Drop expired sessions: one host's idle ones; in a fleet, this replica's part of those the
    /// store no longer has.
    pub(crate) async fn sweep(&self) {
        let Some(store) = &self.shared else {
            self.local.sweep();
            return;
        };
        for session in self.local.idle(self.bounds.idle) {
            if let Ok(false) = store.session_exists(&session.id).await {
                self.end_here(&session.id);
            }
        }
    }

    /// Act on what other replicas tell about sessions served here, for as long as the bus runs:
    /// a client's response to a request of this replica's, a client's cancellation of a call
    /// running here, the end of a session.
    pub(crate) async fn relay(&self) {
        let Some(store) = &self.shared else { return };
        let mut events = store.bus().subscribe();
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!("{n} events between replicas were missed");
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            match event {
                Event::Response {
                    session,
                    id,
                    outcome,
                } => {
                    if let Some(s) = self.local.peek(&session) {
                        let outcome = match outcome.get("error") {
                            Some(error) => Err(error.clone()),
                            None => Ok(outcome.get("result").cloned().unwrap_or(Value::Null)),
                        };
                        s.deliver(&id, outcome);
                    }
                }
                Event::CancelRequest { session, id } => {
                    if let Some(s) = self.local.peek(&session) {
                        s.inflight.cancel(&id);
                    }
                }
                Event::SessionEnded { session } => {
                    self.end_here(&session);
                }
                _ => {}
            }
        }
    }
}
