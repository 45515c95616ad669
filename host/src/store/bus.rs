//! The events replicas tell each other, and this process's own fan-out of them.
//!
//! Every event goes to this process's subscribers at once; with Redis it is also published on
//! the store's channel, and what other replicas publish arrives here the same way (a replica
//! ignores its own messages coming back). Delivery between replicas is best effort: an event
//! published while Redis is unreachable is lost, so nothing depends on it alone — a cancelled
//! task's runner also sees the cancellation when it renews its lease, and clients poll tasks.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

use crate::plugins::backend::Change;

/// How many events a slow subscriber may fall behind before it misses some.
const CAPACITY: usize = 1024;

/// Something one replica tells the others (and its own subscribers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A task changed: its detailed view (what `tasks/get` answers), for listen streams.
    Task {
        /// The task.
        id: String,
        /// Who may see it.
        owner: String,
        /// Its `DetailedTask`.
        view: Value,
    },
    /// Stop the run of a task, wherever it runs (the client cancelled it).
    CancelTask {
        /// The task.
        id: String,
    },
    /// A legacy client's response to a request one replica sent it, arrived at another.
    Response {
        /// The session.
        session: String,
        /// Our request's id.
        id: Value,
        /// `{"result": ...}` or `{"error": ...}`.
        outcome: Value,
    },
    /// A legacy client cancelled one of its requests (`notifications/cancelled`).
    CancelRequest {
        /// The session.
        session: String,
        /// The request's id.
        id: Value,
    },
    /// A legacy session ended (DELETE, expiry or eviction): its GET stream closes wherever it is.
    SessionEnded {
        /// The session.
        session: String,
    },
    /// A plugin announced a change (on whichever replica ran it).
    Change {
        /// `tools/list` changed.
        tools: bool,
        /// `resources/list` changed.
        resources: bool,
        /// `prompts/list` changed.
        prompts: bool,
        /// The contents of this resource changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
    },
}

impl Event {
    /// The event announcing `change`.
    pub fn from_change(change: &Change) -> Event {
        match change {
            Change::Lists {
                tools,
                resources,
                prompts,
            } => Event::Change {
                tools: *tools,
                resources: *resources,
                prompts: *prompts,
                uri: None,
            },
            Change::ResourceUpdated(uri) => Event::Change {
                tools: false,
                resources: false,
                prompts: false,
                uri: Some(uri.to_string()),
            },
        }
    }

    /// The change an [`Event::Change`] announces.
    pub fn change(&self) -> Option<Change> {
        match self {
            Event::Change { uri: Some(uri), .. } => {
                Some(Change::ResourceUpdated(uri.as_str().into()))
            }
            Event::Change {
                tools,
                resources,
                prompts,
                uri: None,
            } => Some(Change::Lists {
                tools: *tools,
                resources: *resources,
                prompts: *prompts,
            }),
            _ => None,
        }
    }
}

/// An event on the wire: who sent it, and what.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Envelope {
    /// The sending replica.
    pub from: String,
    /// The event.
    pub event: Event,
}

/// Where events are published and heard.
#[derive(Debug, Clone)]
pub struct Bus {
    replica: String,
    /// Made at the first subscription: a channel's slots are allocated and written when it is
    /// made (1,024 events, about 28 pages a start would fault in), and an event sent with nobody
    /// subscribed is dropped either way.
    local: Arc<OnceLock<broadcast::Sender<Event>>>,
    /// To other replicas (Redis); `None` for a host on its own.
    remote: Option<mpsc::UnboundedSender<Envelope>>,
}

impl Bus {
    /// A bus inside this process only.
    pub fn local(replica: &str) -> Bus {
        Bus {
            replica: replica.to_owned(),
            local: Arc::default(),
            remote: None,
        }
    }

    /// A bus whose events also go to `remote` (the Redis publisher).
    pub(super) fn shared(replica: &str, remote: mpsc::UnboundedSender<Envelope>) -> Bus {
        Bus {
            remote: Some(remote),
            ..Bus::local(replica)
        }
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Tell this process's subscribers and the other replicas. Never blocks (callable from a
    /// plugin's worker thread).
    pub fn publish(&self, event: Event) {
        if let Some(remote) = &self.remote {
            let _ = remote.send(Envelope {
                from: self.replica.clone(),
                event: event.clone(),
            });
        }
        self.send_local(event);
    }

    /// Tell this process's subscribers, if any.
    fn send_local(&self, event: Event) {
        if let Some(local) = self.local.get() {
            let _ = local.send(event);
        }
    }

    /// Tell the other replicas only (what this process already handled itself).
    pub fn publish_to_others(&self, event: Event) {
        if let Some(remote) = &self.remote {
            let _ = remote.send(Envelope {
                from: self.replica.clone(),
                event,
            });
        }
    }

    /// An event another replica published, for this process's subscribers.
    pub(super) fn deliver_remote(&self, envelope: Envelope) {
        if envelope.from != self.replica {
            self.send_local(envelope.event);
        }
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.local
            .get_or_init(|| broadcast::channel(CAPACITY).0)
            .subscribe()
    }
}

/// A replica name: the configured one, or 8 random hex digits.
pub fn replica_name(configured: Option<&str>) -> String {
    if let Some(name) = configured {
        return name.to_owned();
    }
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    if b == [0; 4] {
        b = std::process::id().to_be_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_round_trip_through_events_and_json() {
        for change in [
            Change::ALL_LISTS,
            Change::ResourceUpdated("test://x".into()),
        ] {
            let event = Event::from_change(&change);
            let wire: Event =
                serde_json::from_str(&serde_json::to_string(&event).unwrap()).unwrap();
            assert_eq!(wire.change(), Some(change));
        }
    }

    #[test]
    fn a_replica_ignores_its_own_messages_coming_back() {
        let bus = Bus::local("a");
        let mut rx = bus.subscribe();
        let event = Event::CancelTask { id: "t".into() };
        bus.deliver_remote(Envelope {
            from: "a".into(),
            event: event.clone(),
        });
        bus.deliver_remote(Envelope {
            from: "b".into(),
            event: event.clone(),
        });
        assert_eq!(rx.try_recv().unwrap(), event);
        assert!(rx.try_recv().is_err());
    }
}
