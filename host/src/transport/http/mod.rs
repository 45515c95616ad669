//! The Streamable HTTP transport on hyper 1.x: `POST /mcp` (JSON, or an SSE stream once a request
//! emits notifications; [`post`]), legacy sessions with `GET`/`DELETE`, `/healthz`, `/metrics`
//! ([`metrics`], unless a separate address serves it), the RFC 9728 metadata, Origin/Host
//! validation against DNS rebinding ([`guard`]), a request body cap, keep-alive and graceful
//! shutdown. Messages themselves go through the connection core.
//!
//! Connections are bounded: at most `http.max_connections` are served at once, and one remote
//! address holds at most `http.max_connections_per_address` of them (a trusted proxy's are not
//! counted per address). A connection that finds no slot it may take is still accepted, into one
//! of `http.health_connections` kept beyond the limit: it gets `/healthz`, `/livez` and
//! `/metrics` answered, anything else 503 with `Retry-After`, and is closed after one answer (so
//! probes are answered however busy the server is); past those, new connections wait in the
//! listen backlog. Each connection must send its request head within
//! `http.header_read_timeout_secs` ([`idle`]; also the idle keep-alive limit) and its body
//! within `http.body_read_timeout_secs`; a response that waits `http.write_timeout_secs` for a
//! client that does not read closes its connection ([`limits`]). A caller holds at most
//! `http.max_streams_per_caller` long-lived streams (listen and GET streams). A failing `accept`
//! (out of file descriptors) backs off instead of spinning.

mod body;
mod console;
mod guard;
mod headers;
mod idle;
mod inbox;
mod limits;
pub mod metrics;
mod oauth;
mod oauth_key;
mod post;
mod sessions;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming as IncomingBody;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};

pub use body::{Body, CancelOnDrop};
use body::{empty, error_response, json_response, sse_channel, sse_response};
use guard::{check_origin, denied};
use headers::{Header, RequestHeaders};

use super::core::Core;
use crate::config::HttpSettings;
use crate::exec::CancelFlag;
use crate::protocol::Protocol;
use crate::protocol::jsonrpc::{ErrorKind, RpcError};
use crate::protocol::session::Outbound;
use sessions::Sessions;

/// Settings of the HTTP transport: the configuration's `http` section plus timing.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Endpoint path, body cap, allowed origins and hosts, session limits.
    pub settings: HttpSettings,
    /// How long shutdown waits for in-flight requests.
    pub grace: Duration,
    /// Interval of SSE keep-alive comments on long-lived streams.
    pub keepalive: Duration,
    /// Serve `/metrics` here (off when a separate `metrics_listen` address serves it).
    pub metrics: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            settings: HttpSettings::default(),
            grace: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
            metrics: true,
        }
    }
}

struct State {
    core: Core,
    options: HttpOptions,
    sessions: Sessions,
    /// This replica's name, in the `Mcp-Replica` header of every response.
    replica: HeaderValue,
    /// Set at shutdown: long-lived streams end.
    shutdown: CancelFlag,
    /// Connections held per remote address (`http.max_connections_per_address`).
    addresses: Arc<limits::Holdings>,
    /// Long-lived streams held per caller (`http.max_streams_per_caller`).
    streams: Arc<limits::Holdings>,
    /// The operator console, when served (`console.*`, read at start).
    console: Option<console::Console>,
}

impl State {
    /// A long-lived stream's slot for `caller`, or the cap (`http.max_streams_per_caller`) it is
    /// already at.
    fn stream_slot(&self, caller: &Arc<str>) -> Result<limits::Held, usize> {
        let max = self
            .core
            .protocol()
            .host()
            .config()
            .http
            .max_streams_per_caller;
        self.streams.try_take(caller, max.max(1)).ok_or(max)
    }
}

/// What a connection may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Everything: it holds one of `http.max_connections` and one of its address's.
    Full,
    /// Only `/healthz`, `/livez` and `/metrics` (503 otherwise), one answer: it came when every
    /// slot, or every slot of its address, was taken (one of `http.health_connections`).
    Health,
}

/// Serve until `shutdown` resolves; then stop accepting, end long-lived streams, and let in-flight
/// requests finish within the grace period. The server's state and background tasks first, then
/// the accept loop, then the graceful stop.
pub async fn serve(
    protocol: Protocol,
    listener: TcpListener,
    options: HttpOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let stop = CancelFlag::new();
    let sessions_gauge = protocol.host().telemetry().metrics().sessions("http");
    let replica = HeaderValue::from_str(protocol.store().replica())
        .unwrap_or_else(|_| HeaderValue::from_static("unnamed"));
    let console = console::Console::start(
        &protocol.host().config(),
        Arc::clone(protocol.host().telemetry().feed()),
    );
    if let Some(console) = console.as_ref().filter(|c| c.on_main_listener()) {
        tracing::info!("the operator console is served at {}/", console.base());
    }
    let state = Arc::new(State {
        console,
        sessions: Sessions::new(&options.settings, protocol.store()).with_gauge(sessions_gauge),
        replica,
        core: Core::new(protocol, stop.clone()),
        options,
        shutdown: stop.clone(),
        addresses: Arc::default(),
        streams: Arc::default(),
    });
    let own_console = console::Console::serve_own(&state).await?;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let background = Background::spawn(&state);
    accept_until(&state, &listener, &graceful, shutdown).await;
    drop(listener);
    tracing::info!("shutting down: no new connections; waiting for in-flight requests");
    stop.cancel();
    let grace = state.options.grace;
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "grace period of {} s over; closing remaining connections",
            grace.as_secs()
        );
    }
    background.abort();
    if let Some(task) = own_console {
        task.abort();
    }
    Ok(())
}

/// The server's tasks besides connections: the session sweeper, the change fan-out and the
/// replica relay.
struct Background([tokio::task::JoinHandle<()>; 3]);

impl Background {
    fn spawn(state: &Arc<State>) -> Background {
        let sweeper = {
            let state = Arc::clone(state);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(60));
                loop {
                    tick.tick().await;
                    state.sessions.sweep().await;
                }
            })
        };
        let notifier = {
            let state = Arc::clone(state);
            tokio::spawn(async move { state.core.fan_out_changes(|| state.sessions.local()).await })
        };
        let relay = {
            let state = Arc::clone(state);
            tokio::spawn(async move { state.sessions.relay().await })
        };
        Background([sweeper, notifier, relay])
    }

    fn abort(self) {
        for task in self.0 {
            task.abort();
        }
    }
}

/// Accept connections until `shutdown` resolves, each served on its own task with the slots the
/// [`Gate`] gives it. A connection slot first: beyond the limit, new connections wait in the
/// backlog.
async fn accept_until(
    state: &Arc<State>,
    listener: &TcpListener,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut gate = Gate::new(&state.options.settings);
    let mut backoff = Backoff::default();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&gate.connections).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                backoff.reset();
                a
            }
            Err(e) => {
                // Out of descriptors (EMFILE/ENFILE) or a connection reset before accept: wait,
                // longer each time in a row, rather than spin on a listener that stays readable.
                let pause = backoff.next();
                tracing::warn!("accept failed: {e}; pausing {} ms", pause.as_millis());
                tokio::select! {
                    () = tokio::time::sleep(pause) => {},
                    () = &mut shutdown => break,
                }
                continue;
            }
        };
        let conn = gate.admit(state, peer, permit);
        serve_connection(state, graceful, stream, conn);
    }
}

/// The connection limits. Every connection holds one of `connections`, from before its accept to
/// its close; one that gets no full slot (all taken, or all of its address's) is served health
/// answers only.
struct Gate {
    connections: Arc<Semaphore>,
    full: Arc<Semaphore>,
    header_timeout: Duration,
    refusals: Refusals,
}

impl Gate {
    fn new(settings: &HttpSettings) -> Gate {
        let max_connections = settings.max_connections.max(1);
        Gate {
            connections: Arc::new(Semaphore::new(
                max_connections.saturating_add(settings.health_connections),
            )),
            full: Arc::new(Semaphore::new(max_connections)),
            header_timeout: Duration::from_secs(settings.header_read_timeout_secs.max(1)),
            refusals: Refusals::default(),
        }
    }

    /// The slots of a connection from `peer` holding `permit`: a full one when one is free (and
    /// one of its address's, unless it is a trusted proxy), else health answers only.
    fn admit(
        &mut self,
        state: &State,
        peer: SocketAddr,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> Conn {
        let peer_ip = peer.ip().to_canonical();
        let peer = crate::access::peer_key(peer_ip);
        // Read at each connection: a reload of these settings applies at once.
        let (per_address, trusted, write_timeout) = {
            let http = &state.core.protocol().host().config().http;
            (
                http.connections_per_address(),
                http.is_trusted_proxy(peer_ip),
                Duration::from_secs(http.write_timeout_secs.max(1)),
            )
        };
        // A trusted proxy carries many clients: only the total bounds its connections.
        let address = if trusted {
            Ok(None)
        } else {
            state
                .addresses
                .try_take(&peer, per_address)
                .map(Some)
                .ok_or(())
        };
        let held = match (address, Arc::clone(&self.full).try_acquire_owned()) {
            (Ok(address), Ok(full)) => Some((address, full)),
            (address, _) => {
                self.refusals.note(&peer, address.is_err());
                None
            }
        };
        Conn {
            peer,
            peer_ip,
            slot: if held.is_some() {
                Slot::Full
            } else {
                Slot::Health
            },
            _permits: (permit, held),
            header_timeout: self.header_timeout,
            write_timeout,
        }
    }
}

/// An accepted connection: who it comes from, what it may ask, and the slots it holds until it
/// closes.
struct Conn {
    /// Its remote address's caller key ([`crate::access::peer_key`]).
    peer: Arc<str>,
    peer_ip: std::net::IpAddr,
    slot: Slot,
    /// Its connection slot, and (a full slot) its address's and the full one; given back when
    /// the connection is dropped.
    _permits: (
        tokio::sync::OwnedSemaphorePermit,
        Option<(Option<limits::Held>, tokio::sync::OwnedSemaphorePermit)>,
    ),
    header_timeout: Duration,
    write_timeout: Duration,
}

/// Log connections refused a full slot, at most once a minute (a flood would flood the log).
#[derive(Debug, Default)]
struct Refusals {
    last: Option<std::time::Instant>,
    since: u64,
}

impl Refusals {
    fn note(&mut self, peer: &str, per_address: bool) {
        self.since += 1;
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(60))
        {
            return;
        }
        let why = if per_address {
            format!("{peer} holds http.max_connections_per_address connections")
        } else {
            "every one of http.max_connections is taken".to_owned()
        };
        tracing::warn!(
            "{} connection(s) served health answers only (503 otherwise) since the last note; \
             the latest because {why}",
            self.since
        );
        self.last = Some(std::time::Instant::now());
        self.since = 0;
    }
}

/// Serve one accepted connection on its own task (hyper's HTTP/1, closed once it has waited
/// `header_timeout` for a request head: [`idle`], or `write_timeout` for its client to read:
/// [`limits::WriteTimeout`]), holding its slots until it closes.
fn serve_connection(
    state: &Arc<State>,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    stream: tokio::net::TcpStream,
    conn: Conn,
) {
    let _ = stream.set_nodelay(true);
    let state = Arc::clone(state);
    let watch = idle::Watch::new();
    let (slot, header_timeout) = (conn.slot, conn.header_timeout);
    let service = {
        let watch = Arc::clone(&watch);
        let (peer, peer_ip) = (Arc::clone(&conn.peer), conn.peer_ip);
        hyper::service::service_fn(move |req| {
            let busy = watch.begin();
            let (state, peer) = (Arc::clone(&state), Arc::clone(&peer));
            async move {
                let resp = handle(
                    state,
                    req,
                    Peer {
                        key: peer,
                        ip: peer_ip,
                    },
                    slot,
                )
                .await;
                Ok::<_, Infallible>(resp.map(|body| idle::Tracked::new(body, busy)))
            }
        })
    };
    let io = limits::WriteTimeout::new(stream, conn.write_timeout);
    let served = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .keep_alive(slot == Slot::Full)
        .serve_connection(TokioIo::new(io), service);
    let served = graceful.watch(served);
    tokio::spawn(async move {
        tokio::select! {
            biased;
            ended = served => if let Err(e) = ended {
                tracing::debug!("connection ended: {e}");
            },
            () = watch.expired(header_timeout) => tracing::debug!(
                "closing a connection that sent no request head in {} s",
                header_timeout.as_secs()
            ),
        }
        drop(conn);
    });
}

/// The remote end of a connection.
#[derive(Debug, Clone)]
struct Peer {
    /// Its caller key ([`crate::access::peer_key`]).
    key: Arc<str>,
    ip: std::net::IpAddr,
}

impl Peer {
    /// The caller key of an anonymous request from here: the address's, or the client's that a
    /// trusted proxy names in `X-Forwarded-For` ([`limits::client_address`]).
    fn caller(&self, headers: &hyper::HeaderMap, http: &HttpSettings) -> Arc<str> {
        let client = limits::client_address(self.ip, headers, http);
        if client == self.ip {
            Arc::clone(&self.key)
        } else {
            crate::access::peer_key(client)
        }
    }
}

/// Pauses after failed `accept`s in a row: 10 ms doubling up to 1 s.
#[derive(Debug, Default)]
struct Backoff(u32);

impl Backoff {
    fn next(&mut self) -> Duration {
        let pause = Duration::from_millis(10u64 << self.0.min(7)).min(Duration::from_secs(1));
        self.0 = self.0.saturating_add(1);
        pause
    }

    fn reset(&mut self) {
        self.0 = 0;
    }
}

/// The agent named by an endpoint path below `base`: `Some(None)` for `base` itself,
/// `Some(Some(name))` for `base/agents/{name}`, `None` for anything else.
fn endpoint_agent<'a>(path: &'a str, base: &str) -> Option<Option<&'a str>> {
    match path.strip_prefix(base)? {
        "" => Some(None),
        rest => match rest.strip_prefix("/agents/") {
            Some(name) if !name.is_empty() && !name.contains('/') => Some(Some(name)),
            _ => None,
        },
    }
}

/// Serve one request; every response names the replica that served it (`Mcp-Replica`). A
/// connection with a health slot only gets health answers (and `/metrics`).
async fn handle(
    state: Arc<State>,
    req: Request<IncomingBody>,
    peer: Peer,
    slot: Slot,
) -> Response<Body> {
    let replica = state.replica.clone();
    let path = req.uri().path();
    let mut resp = if slot == Slot::Health
        && !matches!(path, "/healthz" | "/livez")
        && !(path == "/metrics" && state.options.metrics)
    {
        let mut resp = json_response(
            503,
            &json!({ "error": "too many connections: every slot this client may use is taken \
                     (http.max_connections, http.max_connections_per_address); try again later" }),
        );
        resp.headers_mut()
            .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
        resp
    } else {
        let http = &state.core.protocol().host().config().http;
        let caller = peer.caller(req.headers(), http);
        route(state, req, caller, peer.ip).await
    };
    resp.headers_mut().insert(guard::names::REPLICA, replica);
    resp
}

/// `/healthz`: ready — the tool directories were loaded (the listener opens only after the first
/// load; upstream servers connect in the background, and `upstreams` says how each stands and
/// why) and the store answers; 503 naming the store otherwise. `/livez`: alive.
fn health(state: &State, path: &str) -> Option<Response<Body>> {
    match path {
        "/livez" => Some(json_response(200, &json!({ "status": "ok" }))),
        "/healthz" => {
            let protocol = state.core.protocol();
            let store = protocol.store();
            let upstreams = protocol.host().upstreams_json();
            Some(if store.is_reachable() {
                json_response(
                    200,
                    &json!({ "status": "ok", "store": store.describe(), "upstreams": upstreams }),
                )
            } else {
                json_response(
                    503,
                    &json!({
                        "status": "unavailable",
                        "reason": format!("the store {} cannot be reached", store.describe()),
                        "upstreams": upstreams,
                    }),
                )
            })
        }
        _ => None,
    }
}

/// The future of a request is moved into place for each request (hyper keeps it in the
/// connection's slot), so its size is a cost per request: the paths other than `POST` (the
/// console, OAuth, a session's stream or end) are boxed, each the size of a pointer here — the
/// OAuth endpoints alone made every `tools/call` copy kilobytes more.
async fn route(
    state: Arc<State>,
    req: Request<IncomingBody>,
    peer: Arc<str>,
    ip: std::net::IpAddr,
) -> Response<Body> {
    let path = req.uri().path().to_owned();
    if let Some(resp) = health(&state, &path) {
        return resp;
    }
    if path == "/metrics" && state.options.metrics {
        return metrics::respond(state.core.protocol().host(), &req);
    }
    if let Some(console) = state
        .console
        .as_ref()
        .filter(|c| c.on_main_listener() && c.owns(&path))
    {
        let visitor = console::Visitor { key: &peer, ip };
        return Box::pin(console::route(&state, console, req, visitor)).await;
    }
    if oauth::owns(&path) {
        return Box::pin(oauth::route(state.core.protocol().host(), req)).await;
    }
    let access = state.core.protocol().host().access();
    if let Some(rest) = path.strip_prefix("/.well-known/oauth-protected-resource") {
        return resource_metadata(&state, &access, req.method(), rest);
    }
    // `/mcp` or `/mcp/agents/{name}`.
    let Some(agent) = endpoint_agent(&path, &state.options.settings.path) else {
        return json_response(
            404,
            &json!({ "error": "not found", "mcpEndpoint": state.options.settings.path }),
        );
    };
    let agent = agent.map(str::to_owned);
    let (parts, body) = req.into_parts();
    let headers = RequestHeaders::read(&parts.headers);
    // Read at each request: a reload of these settings applies at once.
    if let Err(e) = check_origin(&headers, &state.core.protocol().host().config().http) {
        return error_response(&Value::Null, &e);
    }
    // GET and DELETE act on a legacy session: they authenticate like every request does, and
    // reach only a session of their own caller.
    let (owner, caller) = match parts.method {
        Method::GET | Method::DELETE => {
            match access.resolve(agent.as_deref(), headers.bearer(), None) {
                Ok(identity) => (
                    identity.session_owner(&peer),
                    identity.caller_key(Some(&peer)),
                ),
                Err(d) => {
                    let metrics = state.core.protocol().host().telemetry().metrics();
                    return denied(&access, metrics, agent.as_deref(), &Value::Null, d);
                }
            }
        }
        _ => (Arc::clone(&peer), Arc::clone(&peer)),
    };
    match parts.method {
        Method::POST => post::post(state, &headers, body, agent, peer).await,
        Method::GET => Box::pin(get_stream(&state, &headers, &owner, &caller)).await,
        Method::DELETE => Box::pin(delete_session(&state, &headers, &owner)).await,
        _ => {
            let mut resp = empty(StatusCode::METHOD_NOT_ALLOWED);
            resp.headers_mut().insert(
                hyper::header::ALLOW,
                HeaderValue::from_static("POST, GET, DELETE"),
            );
            resp
        }
    }
}

/// `GET /.well-known/oauth-protected-resource<rest>`: `…/oauth-protected-resource` or
/// `…<http.path>`: the endpoint's document; `…<http.path>/agents/{name}`: that agent endpoint's
/// own (RFC 9728 §3.1).
fn resource_metadata(
    state: &State,
    access: &crate::access::Access,
    method: &Method,
    rest: &str,
) -> Response<Body> {
    let agent = match rest {
        "" => Some(None),
        _ => endpoint_agent(rest, &state.options.settings.path),
    };
    match (method, agent) {
        (&Method::GET, Some(agent)) => json_response(200, &access.metadata(agent)),
        (_, None) => json_response(404, &json!({ "error": "not found" })),
        _ => empty(StatusCode::METHOD_NOT_ALLOWED),
    }
}

/// A session's end of its GET stream.
struct Relay(mpsc::UnboundedSender<Value>);

impl Outbound for Relay {
    fn send(&self, message: &Value) -> bool {
        self.0.send(message.clone()).is_ok()
    }
}

fn session_not_found() -> Response<Body> {
    error_response(
        &Value::Null,
        &RpcError::new(ErrorKind::NotFound, "Session not found"),
    )
}

/// A legacy session's GET stream: its session-level notifications, with keep-alives, until the
/// client goes or the server stops.
async fn get_stream(
    state: &State,
    headers: &RequestHeaders<'_>,
    owner: &str,
    caller: &Arc<str>,
) -> Response<Body> {
    let Some(id) = headers.get(Header::Session) else {
        // 2026 has no GET stream (subscriptions/listen replaces it).
        let mut resp = empty(StatusCode::METHOD_NOT_ALLOWED);
        resp.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("POST"));
        return resp;
    };
    let session = match state.sessions.get(id, owner).await {
        Ok(Some(session)) => session,
        Ok(None) => return session_not_found(),
        Err(e) => return error_response(&Value::Null, &e),
    };
    let slot = match state.stream_slot(caller) {
        Ok(slot) => slot,
        Err(max) => return post::too_many_streams(&Value::Null, max),
    };
    // The session holds the relay; the task below owns the response stream, so the stream ends
    // when the task does (client gone, session's stream replaced, server stopping).
    let (relay, mut rx) = mpsc::unbounded_channel::<Value>();
    session.attach_stream(Arc::new(Relay(relay)));
    let (out, body) = sse_channel();
    let out = out.holding(Some(slot));
    out.comment(": stream open");
    let shutdown = state.shutdown.clone();
    let keepalive = state.options.keepalive;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(keepalive);
        tick.tick().await;
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => if !out.send(&m) { return },
                    None => return,
                },
                _ = tick.tick() => if !out.keepalive() { return },
                () = shutdown.cancelled() => return,
            }
        }
    });
    sse_response(body, None)
}

async fn delete_session(
    state: &State,
    headers: &RequestHeaders<'_>,
    owner: &str,
) -> Response<Body> {
    let Some(id) = headers.get(Header::Session) else {
        return empty(StatusCode::METHOD_NOT_ALLOWED);
    };
    match state.sessions.remove(id, owner).await {
        Ok(true) => empty(StatusCode::OK),
        Ok(false) => session_not_found(),
        Err(e) => error_response(&Value::Null, &e),
    }
}

/// Bind `addr` (for callers that want the bound address before serving, e.g. port 0).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
