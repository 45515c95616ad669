//! The connection core: what every transport does with a message once it has one. It classifies
//! the message, routes `notifications/cancelled` to the request it names, runs requests through the
//! [`Protocol`] with their cancellation tracked, answers batches, serves `subscriptions/listen`
//! streams and fans tool-list changes out to legacy sessions.
//!
//! Transports are message pipes around it: stdio reads and writes lines; HTTP adds what only HTTP
//! has (sessions by header, authentication, the JSON-or-SSE choice, GET streams).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::access::Identity;
use crate::exec::{CancelFlag, RequestContext};
use crate::plugins::call::TraceContext;
use crate::protocol::jsonrpc::{self, Incoming, Received, RpcError};
use crate::protocol::session::{Inflight, LegacySession, Outbound};

use crate::protocol::{Exchange, HttpHeaders, Message, Notifier, Protocol, Reply};
use crate::store::Event;

/// What a transport knows about where a message came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    /// The legacy session it belongs to.
    pub session: Option<Arc<LegacySession>>,
    /// Its HTTP headers (`None` on stdio).
    pub headers: Option<Arc<HttpHeaders>>,
    /// Who sent it, and through which agent.
    pub identity: Identity,
    /// Answers depend on who asks (`cacheScope: private`).
    pub cache_private: bool,
    /// Where its requests are tracked for `notifications/cancelled` (stdio: the connection; HTTP:
    /// the legacy session).
    pub inflight: Option<Arc<Inflight>>,
    /// Whom the per-caller limits count it against ([`Identity::caller_key`], with the remote
    /// address for callers without an identity), made once per request.
    pub caller_key: Arc<str>,
}

/// A message, sorted.
pub(crate) enum Routed {
    /// A request to run.
    Request {
        /// Its id.
        id: Value,
        /// Its method.
        method: String,
        /// Its params.
        params: Map<String, Value>,
    },
    /// A JSON-RPC batch.
    Batch(Vec<Value>),
    /// Nothing to answer: a notification (already acted on) or a client's response.
    Done,
    /// Not a valid message: answer this error, with this id (null when unknown).
    Invalid(Value, RpcError),
}

/// What came of a batch.
pub(crate) enum Batched {
    /// Batches are not allowed here: answer this error.
    Refused(RpcError),
    /// The array of responses.
    Replies(Message),
    /// Only notifications: nothing to answer.
    Nothing,
}

/// A request's reply, and whether the client cancelled it meanwhile.
pub(crate) struct Answered {
    /// What the protocol answered.
    pub reply: Reply,
    /// A `notifications/cancelled` named the request while it ran: the client expects no answer.
    pub cancelled_by_client: bool,
}

/// The answers of a batch so far. Together they stay within their own bound (`budget` bytes):
/// past it, the requests left are not run and each is answered an error naming the limit (an
/// answer that would cross it too).
struct BatchAnswers {
    budget: usize,
    used: usize,
    out: Vec<Message>,
}

impl BatchAnswers {
    /// Whether the bound is reached: the requests left are not run.
    fn spent(&self) -> bool {
        self.used >= self.budget
    }

    /// The error for request `id` left unanswered by the bound.
    fn over_budget(&mut self, id: &Value) {
        let budget = self.budget;
        self.out.push(
            jsonrpc::error_response(
                id,
                &RpcError::invalid_request(format!(
                    "the answers of this batch reached the limit of {budget} bytes \
                     (limits.max_batch_answer_bytes); this request was not answered: send it \
                     on its own"
                )),
            )
            .into(),
        );
    }

    /// An invalid-request error for `id`.
    fn refuse(&mut self, id: &Value, why: &'static str) {
        self.out
            .push(jsonrpc::error_response(id, &RpcError::invalid_request(why)).into());
    }

    /// A request's reply: kept while within the bound (else the bound's error, and the bound is
    /// spent); a listen stream cannot be part of a batch.
    fn reply(&mut self, reply: Reply) {
        match reply {
            Reply::Response { body, .. } | Reply::Initialized { body, .. } => {
                let len = body.wire_len();
                if self.used.saturating_add(len) > self.budget {
                    tracing::info!(
                        "a batch's answers reached limits.max_batch_answer_bytes ({} bytes); its \
                         other requests are answered an error",
                        self.budget
                    );
                    self.used = self.budget;
                    self.over_budget(body.id().unwrap_or(&Value::Null));
                } else {
                    self.used += len;
                    self.out.push(body);
                }
            }
            Reply::Listen { id, .. } => self.refuse(&id, "subscriptions/listen cannot be batched"),
        }
    }
}

/// The shared core of every transport.
#[derive(Debug, Clone)]
pub(crate) struct Core {
    protocol: Protocol,
    /// Set when the server shuts down: listen streams end with their closing result.
    shutdown: CancelFlag,
}

impl Core {
    /// A core over `protocol`; `shutdown` ends every listen stream gracefully when set.
    pub(crate) fn new(protocol: Protocol, shutdown: CancelFlag) -> Self {
        Core { protocol, shutdown }
    }

    /// The protocol engine.
    pub(crate) fn protocol(&self) -> &Protocol {
        &self.protocol
    }

    /// Sort a parsed message; notifications and responses take effect here
    /// (`notifications/cancelled` reaches the request it names in `origin.inflight`; a response
    /// from the client reaches the call waiting for it in `origin.session`).
    pub(crate) fn route(&self, read: Received, origin: &Origin) -> Routed {
        let message = match read {
            Received::Batch(items) => return Routed::Batch(items),
            Received::One { message, .. } => message,
        };
        match message {
            Ok(Incoming::Request { id, method, params }) => Routed::Request { id, method, params },
            Ok(Incoming::Notification { method, params }) => {
                if method == "notifications/cancelled"
                    && let (Some(inflight), Some(id)) = (
                        origin.inflight.as_deref(),
                        crate::protocol::cancelled_request(&params),
                    )
                    && !inflight.cancel(id)
                {
                    // Not running here: maybe on another replica serving the same session.
                    self.tell_replicas(origin, |session| Event::CancelRequest {
                        session,
                        id: id.clone(),
                    });
                }
                Routed::Done
            }
            Ok(Incoming::Response { id, outcome }) => {
                let Some(session) = &origin.session else {
                    tracing::debug!("a response outside any session (id {id}) was ignored");
                    return Routed::Done;
                };
                let shared = self.protocol.store().is_shared();
                let wire = shared.then(|| match &outcome {
                    Ok(result) => json!({ "result": result }),
                    Err(error) => json!({ "error": error }),
                });
                if !session.deliver(&id, outcome) {
                    match wire {
                        // The request it answers may wait on another replica.
                        Some(outcome) => self.tell_replicas(origin, |session| Event::Response {
                            session,
                            id: id.clone(),
                            outcome,
                        }),
                        None => {
                            tracing::debug!(
                                "a response to no waiting request (id {id}) was ignored"
                            )
                        }
                    }
                }
                Routed::Done
            }
            Err((id, e)) => Routed::Invalid(id, e),
        }
    }

    /// Tell the other replicas (when the store is shared) something about `origin`'s session.
    fn tell_replicas(&self, origin: &Origin, event: impl FnOnce(String) -> Event) {
        let store = self.protocol.store();
        if let Some(session) = origin.session.as_ref().filter(|_| store.is_shared()) {
            store.bus().publish_to_others(event(session.id.clone()));
        }
    }

    /// Run one request with its cancellation tracked in `origin.inflight` (see
    /// [`Inflight::one_reader`]).
    pub(crate) async fn request(
        &self,
        id: Value,
        method: &str,
        params: Map<String, Value>,
        origin: &Origin,
        cancel: CancelFlag,
        notifier: Option<Notifier>,
    ) -> Answered {
        // Tracked from the start, or (one reader: stdio) from the first time the request waits.
        let inflight = origin.inflight.as_deref();
        let mut tracked = inflight.is_some_and(|i| !i.tracks_from_first_wait());
        if let Some(inflight) = inflight.filter(|_| tracked) {
            inflight.track(&id, cancel.clone());
        }
        let later = inflight.filter(|_| !tracked).map(|i| (i, cancel.clone()));
        // The request's one context, shared from here down to the plugin.
        let ex = Exchange {
            session: origin.session.clone(),
            headers: origin.headers.clone(),
            request: Arc::new(RequestContext {
                identity: origin.identity.clone(),
                quota_key: Some(Arc::clone(&origin.caller_key)),
                cancel,
                trace: TraceContext::of_request(
                    origin
                        .headers
                        .as_ref()
                        .and_then(|h| h.trace_context.as_ref()),
                    &params,
                ),
                approved: Default::default(),
            }),
            notifier,
            cache_private: origin.cache_private,
        };
        let mut handling =
            std::pin::pin!(self.protocol.handle_request(id.clone(), method, params, ex));
        let reply = std::future::poll_fn(|cx| {
            let polled = handling.as_mut().poll(cx);
            if polled.is_pending()
                && !tracked
                && let Some((inflight, cancel)) = &later
            {
                inflight.track(&id, cancel.clone());
                tracked = true;
            }
            polled
        })
        .await;
        let cancelled_by_client = tracked && inflight.is_some_and(|inflight| !inflight.finish(&id));
        Answered {
            reply,
            cancelled_by_client,
        }
    }

    /// A JSON-RPC batch (2025-03-26 sessions only), its requests run in order: check it may be
    /// run, then answer each item into a [`BatchAnswers`] that keeps the answers within bounds.
    pub(crate) async fn batch(&self, items: Vec<Value>, origin: &Origin) -> Batched {
        if let Err(refused) = self.check_batch(&items, origin) {
            return Batched::Refused(refused);
        }
        let mut answers = BatchAnswers {
            budget: self.protocol.host().config().limits.batch_answer_bytes(),
            used: 0,
            out: Vec::new(),
        };
        for item in items {
            match self.route(Received::of(item), origin) {
                Routed::Request { id, .. } if answers.spent() => answers.over_budget(&id),
                Routed::Request { id, method, params } => {
                    let answered = self
                        .request(id, &method, params, origin, CancelFlag::new(), None)
                        .await;
                    if !answered.cancelled_by_client {
                        answers.reply(answered.reply);
                    }
                }
                Routed::Batch(_) => answers.refuse(&Value::Null, "a batch cannot contain a batch"),
                Routed::Invalid(id, e) => answers.out.push(jsonrpc::error_response(&id, &e).into()),
                Routed::Done => {}
            }
        }
        if answers.out.is_empty() {
            Batched::Nothing
        } else {
            Batched::Replies(Message::batch(answers.out))
        }
    }

    /// A batch is run only in a session whose revision has them, and up to `limits.max_batch_len`
    /// messages.
    fn check_batch(&self, items: &[Value], origin: &Origin) -> Result<(), RpcError> {
        let allowed = origin.session.as_ref().is_some_and(|s| s.allows_batches());
        if !allowed || items.is_empty() {
            return Err(RpcError::invalid_request(
                "JSON-RPC batches are not supported by this protocol revision",
            ));
        }
        let max = self.protocol.host().config().limits.max_batch_len;
        if items.len() > max {
            return Err(RpcError::invalid_request(format!(
                "a batch of {} messages exceeds the limit of {max} (limits.max_batch_len)",
                items.len()
            )));
        }
        Ok(())
    }

    /// Serve a `subscriptions/listen` stream on `out`: the acknowledgement, then the tagged
    /// notifications it accepted and keep-alives, until the server shuts down (the closing result
    /// is sent), `cancel` is set or the receiver is gone (nothing more is sent).
    pub(crate) async fn listen(
        &self,
        id: &Value,
        accepted: &Value,
        out: &dyn Outbound,
        keepalive: Option<Duration>,
        cancel: &CancelFlag,
    ) {
        // Subscribed before the acknowledgement goes out: a change the client causes once it has
        // read the acknowledgement is never missed.
        let mut changes = self.protocol.host().changes();
        let mut events = self.protocol.store().bus().subscribe();
        if !out.send(&Protocol::listen_ack(id, accepted)) {
            return;
        }
        let mut tick = keepalive.map(tokio::time::interval);
        if let Some(tick) = &mut tick {
            tick.tick().await;
        }
        let next_tick = async |tick: &mut Option<tokio::time::Interval>| match tick {
            Some(t) => {
                t.tick().await;
            }
            None => std::future::pending().await,
        };
        loop {
            tokio::select! {
                change = changes.next() => {
                    let Some(change) = change else { break };
                    let notes = Protocol::notifications(&change, Some(id), Some(accepted), |_| false);
                    if !notes.iter().all(|n| out.send(n)) {
                        return;
                    }
                }
                event = events.recv() => {
                    if let Ok(event) = event
                        && let Some(note) = Protocol::task_notification(&event, id, accepted)
                        && !out.send(&note)
                    {
                        return;
                    }
                }
                () = next_tick(&mut tick) => if !out.keepalive() { return },
                () = self.shutdown.cancelled() => break,
                () = cancel.cancelled() => return,
            }
        }
        out.send(&self.protocol.listen_end(id));
    }

    /// Tell every legacy session with a stream about list changes, and subscribed sessions about
    /// resource updates, for as long as the host runs. `sessions` lists the sessions at the time of
    /// each change.
    pub(crate) async fn fan_out_changes(&self, sessions: impl Fn() -> Vec<Arc<LegacySession>>) {
        let mut changes = self.protocol.host().changes();
        while let Some(change) = changes.next().await {
            for session in sessions() {
                for note in
                    Protocol::notifications(&change, None, None, |uri| session.is_subscribed(uri))
                {
                    session.notify(&note);
                }
            }
        }
    }
}
