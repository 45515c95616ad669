//! The Streamable HTTP transport on hyper 1.x: `POST /mcp` (JSON, or an SSE stream once a request
//! emits notifications), legacy sessions with `GET`/`DELETE`, `/healthz`, Origin/Host validation
//! against DNS rebinding, a request body cap, keep-alive and graceful shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body as HttpBody, Frame, Incoming as IncomingBody, SizeHint};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::config::HttpSettings;
use crate::plugins::host_api::CancelFlag;
use crate::protocol::jsonrpc::{self, ErrorKind, Incoming, RpcError};
use crate::protocol::session::{LegacySession, SessionStore, new_session_id};
use crate::protocol::{Exchange, HttpHeaders, Protocol, Reply, decode_header_value};

const SESSION_HEADER: &str = "mcp-session-id";

/// Settings of the HTTP transport: the configuration's `http` section plus timing.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Endpoint path, body cap, allowed origins and hosts, session limits.
    pub settings: HttpSettings,
    /// How long shutdown waits for in-flight requests.
    pub grace: Duration,
    /// Interval of SSE keep-alive comments on long-lived streams.
    pub keepalive: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            settings: HttpSettings::default(),
            grace: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
        }
    }
}

struct State {
    protocol: Protocol,
    options: HttpOptions,
    sessions: SessionStore,
    shutdown: watch::Receiver<bool>,
}

/// Response body: a complete buffer or an SSE stream.
pub enum Body {
    /// A complete body.
    Full(Option<Bytes>),
    /// A stream of SSE frames; dropping it (client gone) cancels the request it belongs to.
    Stream {
        /// Frames to send.
        rx: mpsc::UnboundedReceiver<Bytes>,
        /// Cancels the request when the stream is dropped before it finished.
        guard: CancelOnDrop,
    },
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Body::Stream { rx, guard } => match rx.poll_recv(cx) {
                Poll::Ready(Some(bytes)) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
                Poll::Ready(None) => {
                    guard.disarm();
                    Poll::Ready(None)
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(Some(d)) => SizeHint::with_exact(d.len() as u64),
            Body::Full(None) => SizeHint::with_exact(0),
            Body::Stream { .. } => SizeHint::default(),
        }
    }
}

/// Sets a cancellation flag when dropped, unless disarmed.
pub struct CancelOnDrop(Option<CancelFlag>);

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            flag.cancel();
        }
    }
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::Full(Some(Bytes::from(
        // Straight into a buffer (`to_string` goes through `fmt::Display`); the same bytes.
        serde_json::to_vec(body).unwrap_or_default(),
    ))));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn error_response(id: &Value, e: &RpcError) -> Response<Body> {
    json_response(e.kind.http_status(false), &jsonrpc::error_response(id, e))
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut resp = Response::new(Body::Full(None));
    *resp.status_mut() = status;
    resp
}

fn sse_frame(message: &Value) -> Bytes {
    Bytes::from(format!("data: {message}\n\n"))
}

fn sse_response(rx: mpsc::UnboundedReceiver<Bytes>, cancel: Option<CancelFlag>) -> Response<Body> {
    let mut resp = Response::new(Body::Stream {
        rx,
        guard: CancelOnDrop(cancel),
    });
    let h = resp.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn host_part(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

fn is_local(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1") || host.ends_with(".localhost")
}

/// DNS-rebinding protection: Origin (when present) and Host must be local or explicitly allowed.
fn check_origin(headers: &HeaderMap, options: &HttpOptions) -> Result<(), RpcError> {
    let forbidden = |what: &str| RpcError::new(ErrorKind::Forbidden, format!("Forbidden: {what}"));
    if let Some(origin) = header(headers, "origin") {
        let authority = origin.split("://").nth(1).unwrap_or(origin);
        if !(is_local(host_part(authority))
            || options.settings.allowed_origins.iter().any(|o| o == origin))
        {
            return Err(forbidden(&format!("Origin {origin} is not allowed")));
        }
    }
    if let Some(host) = header(headers, "host") {
        let name = host_part(host);
        if !(is_local(name)
            || options
                .settings
                .allowed_hosts
                .iter()
                .any(|h| h == name || h == host))
        {
            return Err(forbidden(&format!("Host {host} is not allowed")));
        }
    }
    Ok(())
}

/// Serve until `shutdown` resolves; then stop accepting, end long-lived streams, and let in-flight
/// requests finish within the grace period.
pub async fn serve(
    protocol: Protocol,
    listener: TcpListener,
    options: HttpOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let state = Arc::new(State {
        sessions: SessionStore::new(
            options.settings.max_sessions,
            Duration::from_secs(options.settings.session_idle_secs),
        ),
        protocol,
        options,
        shutdown: stop_rx,
    });
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let sweeper = {
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                state.sessions.sweep();
            }
        })
    };
    let notifier = tokio::spawn(forward_changes(Arc::clone(&state)));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let state = Arc::clone(&state);
                let service = hyper::service::service_fn(move |req| {
                    let state = Arc::clone(&state);
                    async move { Ok::<_, Infallible>(handle(state, req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!("connection ended: {e}");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tracing::info!("shutting down: no new connections; waiting for in-flight requests");
    let _ = stop_tx.send(true);
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
    sweeper.abort();
    notifier.abort();
    Ok(())
}

async fn forward_changes(state: Arc<State>) {
    let mut changes = state.protocol.host().changes();
    while changes.next().await {
        for session in state.sessions.all() {
            session.notify(Protocol::tools_changed(None));
        }
    }
}

async fn handle(state: Arc<State>, req: Request<IncomingBody>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    if path == "/healthz" {
        return json_response(200, &json!({ "status": "ok" }));
    }
    if path == "/.well-known/oauth-protected-resource"
        || path.starts_with("/.well-known/oauth-protected-resource/")
    {
        return match *req.method() {
            Method::GET => json_response(200, &state.protocol.host().access().metadata()),
            _ => empty(StatusCode::METHOD_NOT_ALLOWED),
        };
    }
    // `/mcp` or `/mcp/agents/{name}`.
    let agent = match path.strip_prefix(state.options.settings.path.as_str()) {
        Some("") => None,
        Some(rest) => match rest.strip_prefix("/agents/") {
            Some(name) if !name.is_empty() && !name.contains('/') => Some(name.to_owned()),
            _ => None,
        },
        None => None,
    };
    if path != state.options.settings.path && agent.is_none() {
        return json_response(
            404,
            &json!({ "error": "not found", "mcpEndpoint": state.options.settings.path }),
        );
    }
    if let Err(e) = check_origin(req.headers(), &state.options) {
        return error_response(&Value::Null, &e);
    }
    // GET and DELETE act on a legacy session: they authenticate like every request does.
    if matches!(*req.method(), Method::GET | Method::DELETE)
        && let Err(d) =
            state
                .protocol
                .host()
                .access()
                .resolve(agent.as_deref(), bearer(req.headers()), None)
    {
        return denied(&state, &Value::Null, d);
    }
    match *req.method() {
        Method::POST => post(state, req, agent).await,
        Method::GET => get_stream(state, req.headers()),
        Method::DELETE => delete_session(&state, req.headers()),
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

fn get_stream(state: Arc<State>, headers: &HeaderMap) -> Response<Body> {
    let Some(id) = header(headers, SESSION_HEADER) else {
        // 2026 has no GET stream (subscriptions/listen replaces it).
        let mut resp = empty(StatusCode::METHOD_NOT_ALLOWED);
        resp.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("POST"));
        return resp;
    };
    let Some(session) = state.sessions.get(id) else {
        return error_response(
            &Value::Null,
            &RpcError::new(ErrorKind::NotFound, "Session not found"),
        );
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    session.attach_stream(tx);
    let (out, body) = mpsc::unbounded_channel::<Bytes>();
    let _ = out.send(Bytes::from_static(b": stream open\n\n"));
    let mut shutdown = state.shutdown.clone();
    let keepalive = state.options.keepalive;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(keepalive);
        tick.tick().await;
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => if out.send(sse_frame(&m)).is_err() { return },
                    None => return,
                },
                _ = tick.tick() => if out.send(Bytes::from_static(b": keepalive\n\n")).is_err() { return },
                _ = shutdown.changed() => return,
            }
        }
    });
    sse_response(body, None)
}

fn delete_session(state: &State, headers: &HeaderMap) -> Response<Body> {
    match header(headers, SESSION_HEADER) {
        None => empty(StatusCode::METHOD_NOT_ALLOWED),
        Some(id) if state.sessions.remove(id) => empty(StatusCode::OK),
        Some(_) => error_response(
            &Value::Null,
            &RpcError::new(ErrorKind::NotFound, "Session not found"),
        ),
    }
}

/// A 401 with its `WWW-Authenticate` challenge, or the 403/404 for a refused identity.
fn denied(state: &State, id: &Value, d: crate::access::Denied) -> Response<Body> {
    use crate::access::Denied;
    match d {
        Denied::Unauthorized { error, description } => {
            let mut resp = error_response(
                id,
                &RpcError::new(
                    ErrorKind::Unauthorized,
                    format!("Unauthorized: {description}"),
                ),
            );
            if let Ok(v) = HeaderValue::from_str(
                &state
                    .protocol
                    .host()
                    .access()
                    .challenge(error, &description),
            ) {
                resp.headers_mut()
                    .insert(hyper::header::WWW_AUTHENTICATE, v);
            }
            resp
        }
        Denied::Forbidden(why) => error_response(
            id,
            &RpcError::new(ErrorKind::Forbidden, format!("Forbidden: {why}")),
        ),
        Denied::UnknownAgent(name) => error_response(
            id,
            &RpcError::new(ErrorKind::NotFound, format!("No such agent: {name}")),
        ),
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = header(headers, "authorization")?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

async fn post(
    state: Arc<State>,
    req: Request<IncomingBody>,
    endpoint_agent: Option<String>,
) -> Response<Body> {
    let max = state.options.settings.max_body_bytes;
    let too_large = || {
        error_response(
            &Value::Null,
            &RpcError::new(
                ErrorKind::PayloadTooLarge,
                format!("request body exceeds the limit of {max} bytes"),
            ),
        )
    };
    let declared = header(req.headers(), "content-length").and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_large();
    }
    if let Some(ct) = header(req.headers(), "content-type")
        && !ct.to_ascii_lowercase().starts_with("application/json")
    {
        return error_response(
            &Value::Null,
            &RpcError::new(
                ErrorKind::UnsupportedMediaType,
                format!("Content-Type must be application/json, got {ct}"),
            ),
        );
    }
    let (parts, body) = req.into_parts();
    let bytes = match http_body_util::Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return too_large();
        }
        Err(e) => {
            return error_response(
                &Value::Null,
                &RpcError::invalid_request(format!("cannot read body: {e}")),
            );
        }
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return error_response(&Value::Null, &RpcError::parse(format!("invalid JSON: {e}")));
        }
    };
    let is_modern = value
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .is_some();
    let session = match header(&parts.headers, SESSION_HEADER) {
        Some(id) if !is_modern => match state.sessions.get(id) {
            Some(s) => Some(s),
            None => {
                return error_response(
                    &Value::Null,
                    &RpcError::new(ErrorKind::NotFound, "Session not found: initialize again"),
                );
            }
        },
        _ => None,
    };
    let name = match header(&parts.headers, "mcp-name")
        .map(decode_header_value)
        .transpose()
    {
        Ok(n) => n,
        Err(e) => return error_response(value.get("id").unwrap_or(&Value::Null), &e),
    };
    let headers = HttpHeaders {
        protocol_version: header(&parts.headers, "mcp-protocol-version").map(str::to_owned),
        method: header(&parts.headers, "mcp-method").map(str::to_owned),
        name,
        params: parts
            .headers
            .iter()
            .filter_map(|(k, v)| {
                let name = k.as_str().strip_prefix("mcp-param-")?;
                Some((name.to_owned(), v.to_str().ok()?.to_owned()))
            })
            .collect(),
    };
    // Every request authenticates on its own (the 2026 protocol keeps no state between requests).
    let identity = match state.protocol.host().access().resolve(
        endpoint_agent.as_deref(),
        bearer(&parts.headers),
        session.as_ref().map(|s| s.id.as_str()),
    ) {
        Ok(identity) => identity,
        Err(d) => return denied(&state, value.get("id").unwrap_or(&Value::Null), d),
    };
    if let Value::Array(items) = value {
        return batch(&state, items, session, headers, identity).await;
    }
    let (id, method, params) = match jsonrpc::classify(value) {
        Ok(Incoming::Request { id, method, params }) => (id, method, params),
        Ok(Incoming::Notification { method, params }) => {
            if method == "notifications/cancelled"
                && let (Some(session), Some(id)) =
                    (&session, crate::protocol::cancelled_request(&params))
            {
                session.cancel(id);
            }
            return empty(StatusCode::ACCEPTED);
        }
        Ok(Incoming::Response) => return empty(StatusCode::ACCEPTED),
        Err((id, e)) => return error_response(&id, &e),
    };
    request(state, id, method, params, session, headers, identity).await
}

async fn batch(
    state: &Arc<State>,
    items: Vec<Value>,
    session: Option<Arc<LegacySession>>,
    headers: HttpHeaders,
    identity: crate::access::Identity,
) -> Response<Body> {
    if !session.as_ref().is_some_and(|s| s.allows_batches()) || items.is_empty() {
        return error_response(
            &Value::Null,
            &RpcError::invalid_request(
                "JSON-RPC batches are not supported by this protocol revision",
            ),
        );
    }
    let mut out = Vec::new();
    for item in items {
        match jsonrpc::classify(item) {
            Ok(Incoming::Request { id, method, params }) => {
                let ex = Exchange {
                    session: session.clone(),
                    headers: Some(headers.clone()),
                    caller: identity.caller.clone(),
                    agent: identity.agent.clone(),
                    cache_private: state.protocol.host().access().caller_dependent(),
                    ..Exchange::default()
                };
                match state
                    .protocol
                    .handle_request(id.clone(), &method, params, ex)
                    .await
                {
                    Reply::Response { body, .. } | Reply::Initialized { body, .. } => {
                        out.push(body)
                    }
                    Reply::Listen { id, .. } => out.push(jsonrpc::error_response(
                        &id,
                        &RpcError::invalid_request("subscriptions/listen cannot be batched"),
                    )),
                }
            }
            Ok(_) => {}
            Err((id, e)) => out.push(jsonrpc::error_response(&id, &e)),
        }
    }
    if out.is_empty() {
        empty(StatusCode::ACCEPTED)
    } else {
        json_response(200, &Value::Array(out))
    }
}

/// Run one request; answer JSON if it finishes before emitting a notification, SSE otherwise.
async fn request(
    state: Arc<State>,
    id: Value,
    method: String,
    params: serde_json::Map<String, Value>,
    session: Option<Arc<LegacySession>>,
    headers: HttpHeaders,
    identity: crate::access::Identity,
) -> Response<Body> {
    let cancel = CancelFlag::new();
    // Cancels the call if this handler is dropped (client gone) before it answered.
    let mut guard = CancelOnDrop(Some(cancel.clone()));
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let notify_tx = tx.clone();
    let exchange = Exchange {
        session: session.clone(),
        headers: Some(headers),
        caller: identity.caller,
        agent: identity.agent,
        cancel: cancel.clone(),
        notifier: Some(Arc::new(move |n| {
            let _ = notify_tx.send(n);
        })),
        cache_private: state.protocol.host().access().caller_dependent(),
    };
    if let Some(s) = &session {
        s.track(&id, cancel.clone());
    }
    let (reply_tx, mut reply_rx) = tokio::sync::oneshot::channel::<Reply>();
    {
        let protocol = state.protocol.clone();
        let id = id.clone();
        let session = session.clone();
        tokio::spawn(async move {
            let reply = protocol
                .handle_request(id.clone(), &method, params, exchange)
                .await;
            if let Some(s) = &session {
                s.untrack(&id);
            }
            let _ = reply_tx.send(reply);
        });
    }
    drop(tx);
    // Whether a notification comes before the reply decides the response type. The notifier is
    // dropped (with the request's exchange) before the reply is sent, so polling notifications
    // first is exact: a fast call that reported progress is still streamed (polling the reply
    // first dropped its queued notifications), and `None` means the request ended without any.
    let first_notification = tokio::select! {
        biased;
        n = rx.recv() => n,
        reply = &mut reply_rx => {
            guard.disarm();
            return match reply {
                Ok(reply) => finish(&state, reply),
                Err(_) => error_response(&id, &RpcError::internal("the request was lost")),
            };
        }
    };
    let Some(first_notification) = first_notification else {
        // No notification can come any more: a plain JSON answer. (Streaming it would send errors
        // as `200 text/event-stream` instead of their 4xx status.)
        let reply = reply_rx.await;
        guard.disarm();
        return match reply {
            Ok(reply) => finish(&state, reply),
            Err(_) => error_response(&id, &RpcError::internal("the request was lost")),
        };
    };
    // A notification came first: switch to an SSE stream carrying it, the rest, then the response.
    guard.disarm();
    let (out, body) = mpsc::unbounded_channel::<Bytes>();
    let _ = out.send(sse_frame(&first_notification));
    let state2 = Arc::clone(&state);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                biased;
                n = rx.recv() => match n {
                    Some(n) => { let _ = out.send(sse_frame(&n)); }
                    None => {
                        if let Ok(reply) = (&mut reply_rx).await {
                            send_final(&state2, reply, &out).await;
                        }
                        return;
                    }
                },
                reply = &mut reply_rx => {
                    while let Ok(n) = rx.try_recv() {
                        let _ = out.send(sse_frame(&n));
                    }
                    if let Ok(reply) = reply {
                        send_final(&state2, reply, &out).await;
                    }
                    return;
                }
            }
        }
    });
    sse_response(body, Some(cancel))
}

async fn send_final(state: &Arc<State>, reply: Reply, out: &mpsc::UnboundedSender<Bytes>) {
    match reply {
        Reply::Response { body, .. } | Reply::Initialized { body, .. } => {
            let _ = out.send(sse_frame(&body));
        }
        Reply::Listen { id, accepted } => listen_stream(state, id, accepted, out.clone()).await,
    }
}

fn finish(state: &Arc<State>, reply: Reply) -> Response<Body> {
    match reply {
        Reply::Response { body, status: 401 } => {
            // A tool that needs a verified caller was called without one: challenge the client.
            let mut resp = json_response(401, &body);
            let challenge = state.protocol.host().access().challenge(None, "");
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                resp.headers_mut()
                    .insert(hyper::header::WWW_AUTHENTICATE, v);
            }
            resp
        }
        Reply::Response { body, status } => json_response(status, &body),
        Reply::Initialized {
            body,
            version,
            capabilities,
        } => {
            let id = new_session_id();
            state.sessions.insert(Arc::new(LegacySession::new(
                id.clone(),
                version,
                capabilities,
            )));
            let mut resp = json_response(200, &body);
            if let Ok(v) = HeaderValue::from_str(&id) {
                resp.headers_mut().insert(SESSION_HEADER, v);
            }
            resp
        }
        Reply::Listen { id, accepted } => {
            let (out, body) = mpsc::unbounded_channel::<Bytes>();
            let state = Arc::clone(state);
            tokio::spawn(async move { listen_stream(&state, id, accepted, out).await });
            sse_response(body, None)
        }
    }
}

/// A `subscriptions/listen` stream: the acknowledgement, tagged `tools/list_changed` notifications,
/// keep-alive comments, and the closing result at shutdown.
async fn listen_stream(
    state: &Arc<State>,
    id: Value,
    accepted: Value,
    out: mpsc::UnboundedSender<Bytes>,
) {
    if out
        .send(sse_frame(&Protocol::listen_ack(&id, &accepted)))
        .is_err()
    {
        return;
    }
    let wants_tools = accepted.get("toolsListChanged").is_some();
    let mut changes = state.protocol.host().changes();
    let mut shutdown = state.shutdown.clone();
    let mut tick = tokio::time::interval(state.options.keepalive);
    tick.tick().await;
    loop {
        tokio::select! {
            changed = changes.next() => {
                if !changed {
                    break;
                }
                if wants_tools && out.send(sse_frame(&Protocol::tools_changed(Some(&id)))).is_err() {
                    return;
                }
            }
            _ = tick.tick() => if out.send(Bytes::from_static(b": keepalive\n\n")).is_err() { return },
            _ = shutdown.changed() => break,
        }
    }
    let _ = out.send(sse_frame(&state.protocol.listen_end(&id)));
}

/// Bind `addr` (for callers that want the bound address before serving, e.g. port 0).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_origins_and_hosts_pass_by_default() {
        let opts = HttpOptions::default();
        let mut h = HeaderMap::new();
        h.insert("origin", HeaderValue::from_static("http://localhost:3000"));
        h.insert("host", HeaderValue::from_static("127.0.0.1:18080"));
        assert!(check_origin(&h, &opts).is_ok());
        h.insert(
            "origin",
            HeaderValue::from_static("http://evil.example.com"),
        );
        assert_eq!(
            check_origin(&h, &opts).unwrap_err().kind,
            ErrorKind::Forbidden
        );
        h.remove("origin");
        h.insert("host", HeaderValue::from_static("evil.example.com"));
        assert!(check_origin(&h, &opts).is_err());
        h.insert("host", HeaderValue::from_static("[::1]:8080"));
        assert!(check_origin(&h, &opts).is_ok());
    }
}
