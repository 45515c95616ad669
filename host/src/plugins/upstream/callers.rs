//! Each caller's own session at an HTTP upstream with `server.auth`: a call of verified caller U
//! goes over U's session, whose HTTP client puts U's current token on every request (read from the
//! [`Credentials`] at each request: a token refreshed or obtained meanwhile is used at once) —
//! never another user's token, never the token U presented to the host. The link's serving
//! session stays the listing identity (the operator's connection, or none).
//!
//! A caller without a verified identity (or one whose id is one of the host's reserved `@…`
//! names) is refused. A caller without a token at the upstream gets no session: the call asks for
//! consent ([`super::consent`]). Sessions are bounded: at most `upstream_auth.sessions.
//! max_per_upstream` per upstream (the least recently used closes for one more), closed after
//! `upstream_auth.sessions.idle_secs` unused, one opened at a time per caller (the others wait for
//! it), each handshake within the upstream's handshake timeout; all share one connection pool.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{ClientRequest, ServerResult};
use rmcp::service::{ClientInitializeError, ClientServiceExt as _, PeerRequestOptions};

use super::http::{Endpoint, Lifecycle};
use super::link::{Failure, Handler, Link, Running, Sent, Session, Transport, lifecycle};
use super::relay::Routes;
use crate::access::upstream::AuthFailure;
use crate::access::upstream::Principal;
use crate::access::upstream::gateway::{
    CallerAuthorizer, CredError, CredentialSlot, Credentials, Need,
};
use crate::plugins::call::{CallState, TraceContext};
use crate::plugins::lock;

/// One caller's session.
struct Held {
    session: Arc<Session>,
    auth: Arc<CallerAuthorizer>,
    used: Instant,
}

/// A caller's session, for one request.
#[derive(Clone)]
pub(super) struct CallerSession {
    session: Arc<Session>,
    auth: Arc<CallerAuthorizer>,
}

/// The callers' sessions of one upstream (see the module's documentation).
pub(crate) struct Callers {
    credentials: CredentialSlot,
    /// The one connection pool of every caller's session.
    pool: reqwest::Client,
    sessions: Mutex<HashMap<Principal, Held>>,
    /// One session opened at a time per caller.
    opening: Mutex<HashMap<Principal, Arc<tokio::sync::Mutex<()>>>>,
    next: AtomicU64,
    /// A task closes idle sessions.
    sweeping: AtomicBool,
}

impl Callers {
    /// The callers' sessions of an upstream, their tokens from `credentials`, their connections
    /// from `pool`.
    pub(crate) fn new(credentials: CredentialSlot, pool: reqwest::Client) -> Callers {
        Callers {
            credentials,
            pool,
            sessions: Mutex::default(),
            opening: Mutex::default(),
            next: AtomicU64::new(0),
            sweeping: AtomicBool::new(false),
        }
    }

    /// The credentials service, once the host's store is open.
    pub(crate) fn credentials(&self) -> Result<&Arc<Credentials>, Failure> {
        self.credentials
            .get()
            .ok_or_else(|| Failure::Unavailable("the token vault is not open yet".into()))
    }

    /// `who`'s open session, marked used.
    fn get(&self, who: &Principal) -> Option<CallerSession> {
        let mut sessions = lock(&self.sessions);
        let held = sessions.get_mut(who)?;
        if held.session.ended() {
            sessions.remove(who);
            return None;
        }
        held.used = Instant::now();
        Some(CallerSession {
            session: Arc::clone(&held.session),
            auth: Arc::clone(&held.auth),
        })
    }

    /// Keep `who`'s new session, closing the least recently used one past `max`.
    fn keep(&self, who: &Principal, session: &CallerSession, max: usize) {
        let mut sessions = lock(&self.sessions);
        while sessions.len() >= max {
            let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, h)| h.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(held) = sessions.remove(&oldest) {
                held.session.end();
            }
        }
        sessions.insert(
            who.clone(),
            Held {
                session: Arc::clone(&session.session),
                auth: Arc::clone(&session.auth),
                used: Instant::now(),
            },
        );
    }

    /// Forget `who`'s session `id` (it ended), if it is still the one held.
    fn ended(&self, who: &Principal, id: u64) {
        let mut sessions = lock(&self.sessions);
        if sessions.get(who).is_some_and(|h| h.session.id == id) {
            sessions.remove(who);
        }
    }

    /// Close the sessions unused for `idle`; how many remain.
    pub(crate) fn sweep(&self, idle: Duration) -> usize {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, held| {
            let keep = held.used.elapsed() < idle && !held.session.ended();
            if !keep {
                held.session.end();
            }
            keep
        });
        sessions.len()
    }

    /// Close every session (the link is retired).
    pub(crate) fn close(&self) {
        for (_, held) in lock(&self.sessions).drain() {
            held.session.end();
        }
    }
}

/// Who a call is for at an upstream with `server.auth`: its verified caller, never a reserved
/// `@…` identity; else why not.
pub(super) fn principal(call: &CallState, upstream: &str) -> Result<Principal, Failure> {
    let Some(caller) = call.request.caller() else {
        return Err(Failure::Refused(format!(
            "upstream {upstream} is used with each caller's own account: this call has no \
             verified caller (sign in to mcp-host with a personal secret or a token)"
        )));
    };
    let id = caller.user_id.as_str();
    if id.is_empty() || id.starts_with('@') {
        return Err(Failure::Refused(format!(
            "upstream {upstream} is used with each caller's own account, and the user id {id:?} \
             cannot hold one (ids starting with @ are the host's own)"
        )));
    }
    Ok(Principal(id.to_owned()))
}

impl Link {
    /// From now on, calls go over each caller's own session (`server.auth`).
    pub(crate) fn serve_callers(&self, callers: Callers) {
        let _ = self.callers.set(callers);
    }

    /// Send `request` for `call` over its caller's own session: the answer, or why not — a
    /// caller whose authorization is needed first is [`Failure::NeedsConsent`].
    pub(super) async fn request_as_caller(
        self: &Arc<Self>,
        request: &ClientRequest,
        call: &Arc<CallState>,
        trace: Option<&TraceContext>,
    ) -> Result<ServerResult, Failure> {
        let who = principal(call, &self.name)?;
        self.present_subject(&who, call);
        let user = self.caller_session(&who).await?;
        let mut entered = user.session.routes.enter(call);
        let mut options = PeerRequestOptions::no_options();
        options.meta = super::link::request_meta(&user.session, call, trace);
        let sent = user
            .session
            .peer
            .send_request_with_option(request.clone(), options)
            .await;
        let answered = match sent {
            Ok(handle) => {
                entered.bind(&handle.id, &handle.progress_token);
                self.answer(Sent::Rmcp(handle), call).await
            }
            Err(e) => Err(self.unavailable(e)),
        };
        drop(entered);
        answered.map_err(|failure| match user.auth.take_need() {
            Some(need) => Failure::NeedsConsent(need),
            None => failure,
        })
    }

    /// The JWT `call`'s caller presented, for an upstream that exchanges it (token exchange,
    /// `obtained.rs` of the credentials).
    fn present_subject(&self, who: &Principal, call: &CallState) {
        let Some(credentials) = self.callers.get().and_then(|c| c.credentials().ok()) else {
            return;
        };
        let identity = &call.request.identity;
        let exp = identity
            .claims
            .as_ref()
            .and_then(|c| c.get("exp"))
            .and_then(serde_json::Value::as_u64);
        credentials.present_subject(who, &self.name, identity.subject_token.as_ref(), exp);
    }

    /// `who`'s session: the open one, else one opened now — when `who` holds a token.
    async fn caller_session(self: &Arc<Self>, who: &Principal) -> Result<CallerSession, Failure> {
        let Some(callers) = self.callers.get() else {
            return Err(Failure::Unavailable("no callers' sessions".into()));
        };
        if let Some(open) = callers.get(who) {
            return Ok(open);
        }
        let gate = Arc::clone(lock(&callers.opening).entry(who.clone()).or_default());
        let _one = gate.lock().await;
        if let Some(open) = callers.get(who) {
            return Ok(open);
        }
        let token = callers.credentials()?.token(who, &self.name).await;
        match token {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(Failure::NeedsConsent(Need::Consent {
                    scopes: Vec::new(),
                    challenge: None,
                    step_up: false,
                }));
            }
            Err(CredError::Auth(AuthFailure::Refused(why))) => return Err(Failure::Refused(why)),
            Err(e) => return Err(Failure::Unavailable(format!("upstream {}: {e}", self.name))),
        }
        // Opened on the upstream runtime, where every upstream connection lives.
        let (link, caller) = (Arc::clone(self), who.clone());
        let opened = self
            .runtime
            .spawn(async move { link.open_caller(&caller).await })
            .await
            .unwrap_or_else(|e| Err(Failure::Unavailable(format!("upstream {}: {e}", self.name))));
        lock(&callers.opening).remove(who);
        opened
    }

    /// Open `who`'s session: the handshake with `who`'s token, within the handshake timeout.
    async fn open_caller(self: &Arc<Self>, who: &Principal) -> Result<CallerSession, Failure> {
        let Some(callers) = self.callers.get() else {
            return Err(Failure::Unavailable("no callers' sessions".into()));
        };
        let auth = Arc::new(CallerAuthorizer::new(
            Arc::clone(&callers.credentials),
            who.clone(),
            &self.name,
        ));
        let id = callers.next.fetch_add(1, Ordering::AcqRel) + 1;
        let limit = self.supervision.handshake;
        let handshake = tokio::time::timeout(limit, self.caller_handshake(id, &auth, callers));
        let (running, routes) = match handshake.await {
            Ok(Ok(done)) => done,
            failed => {
                if let Some(need) = auth.take_need() {
                    return Err(Failure::NeedsConsent(need));
                }
                let why = match failed {
                    Ok(Err(why)) => why,
                    _ => format!("did not answer the handshake within {} s", limit.as_secs()),
                };
                return Err(Failure::Unavailable(format!(
                    "upstream {}: {who}'s session: {why}",
                    self.name
                )));
            }
        };
        let session = Arc::new(Session::of_caller(id, &running, routes));
        let held = CallerSession {
            session: Arc::clone(&session),
            auth,
        };
        let settings = callers.credentials()?.settings();
        callers.keep(who, &held, settings.max_sessions);
        self.watch_caller(running, who.clone(), id);
        self.sweep_callers(settings.session_idle);
        tracing::info!("Upstream {}: opened {who}'s session", self.name);
        Ok(held)
    }

    /// The handshake of caller's session `id`, its requests authorized by `auth`: the link's
    /// lifecycle (`server/discover`, else `initialize` — remembered for every session).
    async fn caller_handshake(
        self: &Arc<Self>,
        id: u64,
        auth: &Arc<CallerAuthorizer>,
        callers: &Callers,
    ) -> Result<(Running, Arc<Routes>), String> {
        let Transport::Http(endpoint) = &self.transport else {
            return Err("a caller's session needs an HTTP upstream".into());
        };
        loop {
            let legacy = legacy(endpoint, self.legacy.load(Ordering::Acquire));
            let routes = Arc::new(Routes::new(Arc::clone(&self.name)));
            let handler = Handler::for_caller(self, id, Arc::clone(&routes));
            let inner = super::http::transport_over(
                endpoint,
                callers.pool.clone(),
                Some(Arc::clone(auth) as _),
            )
            .map_err(|e| e.to_string())?;
            let transport = super::relay::Routing {
                inner,
                routes: Arc::clone(&routes),
            };
            match handler
                .serve_with_lifecycle(transport, lifecycle(legacy))
                .await
            {
                Ok(running) => return Ok((running, routes)),
                Err(ClientInitializeError::JsonRpcError(_))
                    if !legacy && endpoint.lifecycle == Lifecycle::Auto =>
                {
                    self.legacy.store(true, Ordering::Release);
                }
                Err(e) => return Err(super::http::init_failure(&e, Some(&endpoint.url))),
            }
        }
    }

    /// Forget `who`'s session `id` when its service ends.
    fn watch_caller(self: &Arc<Self>, running: Running, who: Principal, id: u64) {
        let weak: Weak<Link> = Arc::downgrade(self);
        self.runtime.spawn(async move {
            let _ = running.waiting().await;
            if let Some(link) = weak.upgrade()
                && let Some(callers) = link.callers.get()
            {
                callers.ended(&who, id);
            }
        });
    }

    /// Close idle callers' sessions from time to time, for as long as the link lives (one
    /// task, started with the first session).
    fn sweep_callers(self: &Arc<Self>, idle: Duration) {
        let Some(callers) = self.callers.get() else {
            return;
        };
        if callers.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Link> = Arc::downgrade(self);
        let every = (idle / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
        self.runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(link) = weak.upgrade() else { return };
                if let Some(callers) = link.callers.get() {
                    callers.sweep(idle);
                }
            }
        });
    }
}

/// Whether `endpoint`'s sessions speak 2025 (`initialize`): pinned, or found out (`known`).
fn legacy(endpoint: &Endpoint, known: bool) -> bool {
    match endpoint.lifecycle {
        Lifecycle::Auto => known,
        Lifecycle::Initialize => true,
        Lifecycle::Discover => false,
    }
}
