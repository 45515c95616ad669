//! The operator console and tool playground, served at `console.path` (default `/ui`) on the
//! main listener: pages that show what the host knows about itself (overview charts, sources in
//! override order, agents' views, pins and quarantines, tasks, live calls) and a playground that
//! calls tools, reads resources and gets prompts through the protocol, as a real client would.
//!
//! Everything is embedded in the binary ([`assets`]) and served under a strict
//! Content-Security-Policy (no inline script, no other origin). Logins ([`login`]) take the same
//! credentials as MCP (a personal secret or a bearer token) and live in an `HttpOnly`,
//! `SameSite=Strict` cookie; where the host requires no authentication, a loopback visitor gets an
//! anonymous login. Reads are open to any login; actions ([`actions`]) need a user named in
//! `console.admins`, a POST with the login's CSRF token and a same-origin `Origin`, and each lands
//! in the audit log.

mod actions;
mod api;
mod assets;
mod history;
mod listener;
mod login;
mod playground;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming as IncomingBody;
use hyper::header::HeaderValue;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::State;
use super::body::{Body, empty, json_response};
use crate::access::Identity;
use crate::config::Config;

/// Largest body a console POST may send.
const MAX_BODY: usize = 1 << 20;

/// The console's state: its logins, its charts, when the server started.
#[derive(Debug)]
pub(super) struct Console {
    /// Where it is served (read at start).
    base: String,
    /// Its own address (`console.listen`), when not on the main listener.
    own: Option<std::net::SocketAddr>,
    logins: login::Logins,
    /// Failed logins per remote address (a brake on guessing).
    failures: login::Failures,
    /// One action at a time (each writes the lock file or rescans).
    acting: tokio::sync::Mutex<()>,
    history: history::History,
    started: Instant,
}

impl Console {
    /// The console for `config`, if it serves one (`console.enabled`, loopback by default).
    pub(super) fn start(
        config: &Config,
        feed: Arc<crate::telemetry::feed::Feed>,
    ) -> Option<Console> {
        if !config.console.serves(&config.listen) {
            return None;
        }
        Some(Console {
            base: config.console.path.clone(),
            own: config.console.listen,
            logins: login::Logins::default(),
            failures: login::Failures::default(),
            acting: tokio::sync::Mutex::new(()),
            history: history::History::start(feed),
            started: Instant::now(),
        })
    }

    /// Where it is served.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    /// Whether the main listener serves it (not an address of its own).
    pub(super) fn on_main_listener(&self) -> bool {
        self.own.is_none()
    }

    /// Serve it on its own address, when it has one: bound now (an address that cannot be bound
    /// stops start-up), served until the returned task is aborted.
    pub(super) async fn serve_own(
        state: &Arc<State>,
    ) -> std::io::Result<Option<tokio::task::JoinHandle<()>>> {
        let Some(addr) = state.console.as_ref().and_then(|c| c.own) else {
            return Ok(None);
        };
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot listen on {addr} (console.listen): {e}"),
            )
        })?;
        tracing::info!(
            "the operator console is served at http://{addr}{}/",
            state.console.as_ref().map_or("", |c| c.base())
        );
        Ok(Some(tokio::spawn(listener::serve(
            Arc::clone(state),
            listener,
        ))))
    }

    /// Whether `path` is the console's.
    pub(super) fn owns(&self, path: &str) -> bool {
        path.strip_prefix(self.base.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }
}

/// Where a console request comes from.
#[derive(Debug, Clone, Copy)]
pub(super) struct Visitor<'a> {
    /// Its caller key (the remote address's), for the stream and call limits.
    pub key: &'a Arc<str>,
    /// The remote address of the connection.
    pub ip: std::net::IpAddr,
}

impl Visitor<'_> {
    /// Whether the visitor is on this machine: a loopback connection that no proxy forwarded
    /// (a proxy on loopback says whom it forwards in `X-Forwarded-For`). Only such a visitor gets
    /// an anonymous login.
    fn is_local(&self, headers: &HeaderMap) -> bool {
        self.ip.is_loopback() && !headers.contains_key("x-forwarded-for")
    }
}

/// Who is logged in, as of this request.
pub(super) struct Operator {
    /// The login (its CSRF token).
    login: login::Login,
    /// The identity its credentials verify to now.
    identity: Identity,
    /// Whether it may act (`console.admins`).
    admin: bool,
}

impl Operator {
    /// The verified user, if any.
    fn user(&self) -> Option<&str> {
        self.identity.caller.as_ref().map(|c| c.user_id.as_str())
    }
}

/// Serve a console request.
pub(super) async fn route(
    state: &Arc<State>,
    console: &Console,
    req: Request<IncomingBody>,
    visitor: Visitor<'_>,
) -> Response<Body> {
    let rest = req.uri().path()[console.base.len()..].to_owned();
    let method = req.method().clone();
    let config = state.core.protocol().host().config();
    if let Err(refused) = check_host(req.headers(), &config) {
        return refused.response();
    }
    let mut resp = match (&method, rest.as_str()) {
        (&Method::GET, "") => redirect(&format!("{}/", console.base)),
        (&Method::GET, "/" | "/login") => page(state, console, req.headers(), &rest, visitor),
        (&Method::GET, asset) if asset.starts_with("/assets/") => assets::serve(&asset[8..]),
        (&Method::POST, "/api/login") => login_post(state, console, req, visitor).await,
        (&Method::POST, "/api/logout") => match same_origin(req.headers(), &config) {
            Ok(()) => logout(console, req.headers()),
            Err(refused) => refused.response(),
        },
        (_, api) if api.starts_with("/api/") => {
            match operator(state, console, req.headers(), visitor) {
                Ok(op) if method == Method::GET => {
                    api::get(state, console, &op, &api[5..], req.headers(), visitor.key).await
                }
                Ok(op) if method == Method::POST => {
                    post(state, console, op, req, visitor.key).await
                }
                Ok(_) => empty(StatusCode::METHOD_NOT_ALLOWED),
                Err(refused) => refused.response(),
            }
        }
        _ => json_response(404, &json!({ "error": "not found" })),
    };
    secure(resp.headers_mut());
    resp
}

/// A state-changing request: same origin, the login's CSRF token, then the action.
async fn post(
    state: &Arc<State>,
    console: &Console,
    op: Operator,
    req: Request<IncomingBody>,
    peer: &Arc<str>,
) -> Response<Body> {
    let config = state.core.protocol().host().config();
    if let Err(refused) = same_origin(req.headers(), &config) {
        return refused.response();
    }
    if !op.login.csrf_matches(req.headers()) {
        return refuse(
            403,
            "the request lacks this login's CSRF token (reload the page)",
        );
    }
    let path = req.uri().path()[console.base.len()..].to_owned();
    let body = match read_json(req, &config).await {
        Ok(body) => body,
        Err(refused) => return refused.response(),
    };
    match path.as_str() {
        "/api/rpc" => playground::rpc(state, &op, &body, peer).await,
        "/api/connections/disconnect" => api::disconnect(state, &op, &body).await,
        action => {
            let _one_at_a_time = console.acting.lock().await;
            actions::act(state, &op, action, &body).await
        }
    }
}

/// The index page (after a login, where one is needed) or the login page.
fn page(
    state: &State,
    console: &Console,
    headers: &HeaderMap,
    rest: &str,
    visitor: Visitor<'_>,
) -> Response<Body> {
    let access = state.core.protocol().host().access();
    let logged_in = console.logins.get(headers).is_some();
    if rest == "/login" {
        return assets::page(assets::Page::Login);
    }
    if logged_in {
        return assets::page(assets::Page::Console);
    }
    if access.requires_auth() || !visitor.is_local(headers) {
        return redirect(&format!("{}/login", console.base));
    }
    // No authentication required, and the visitor is on this machine: an anonymous login.
    let lifetime = lifetime(&state.core.protocol().host().config());
    match console.logins.open(None, lifetime) {
        Ok(opened) => {
            let mut resp = assets::page(assets::Page::Console);
            set_cookie(
                &mut resp,
                &console.base,
                Some((&opened.id, lifetime)),
                headers,
            );
            resp
        }
        Err(e) => refuse(500, &format!("no randomness for a login: {e}")),
    }
}

fn lifetime(config: &Config) -> Duration {
    Duration::from_secs(config.console.session_minutes.max(1) * 60)
}

/// `POST /api/login {"token": ...}`: open a login with a personal secret or a bearer token.
async fn login_post(
    state: &Arc<State>,
    console: &Console,
    req: Request<IncomingBody>,
    visitor: Visitor<'_>,
) -> Response<Body> {
    let host = state.core.protocol().host();
    let config = host.config();
    if let Err(refused) = same_origin(req.headers(), &config) {
        return refused.response();
    }
    if !console.failures.allows(visitor.key) {
        return refuse(429, "too many failed logins from here: wait a minute");
    }
    let headers = req.headers().clone();
    let body = match read_json(req, &config).await {
        Ok(body) => body,
        Err(refused) => return refused.response(),
    };
    let Some(token) = body["token"]
        .as_str()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return refuse(
            400,
            "send {\"token\": \"<personal secret or bearer token>\"}",
        );
    };
    let access = host.access();
    let identity = match access.resolve(None, Some(token), None) {
        Ok(identity) if identity.caller.is_some() => identity,
        Ok(_) | Err(_) => {
            host.telemetry().metrics().auth_failure("console_login");
            console.failures.failed(visitor.key);
            let refused = Err("the credentials were refused");
            audit(host, None, "console.login", visitor.key, refused);
            return refuse(401, "these credentials were refused");
        }
    };
    let user = identity.caller.as_ref().map(|c| c.user_id.clone());
    let lifetime = lifetime(&config);
    match console.logins.open(Some(token.to_owned()), lifetime) {
        Ok(opened) => {
            audit(host, user.as_deref(), "console.login", "-", Ok(()));
            let mut resp = json_response(200, &json!({ "user": user }));
            set_cookie(
                &mut resp,
                &console.base,
                Some((&opened.id, lifetime)),
                &headers,
            );
            resp
        }
        Err(e) => refuse(500, &format!("no randomness for a login: {e}")),
    }
}

fn logout(console: &Console, headers: &HeaderMap) -> Response<Body> {
    console.logins.close(headers);
    let mut resp = json_response(200, &json!({}));
    set_cookie(&mut resp, &console.base, None, headers);
    resp
}

/// The operator of a request: its login, verified again now. 401 without one (or when its
/// credentials no longer verify: expired, removed from the configuration).
fn operator(
    state: &State,
    console: &Console,
    headers: &HeaderMap,
    visitor: Visitor<'_>,
) -> Result<Operator, Refusal> {
    let host = state.core.protocol().host();
    let access = host.access();
    let Some(login) = console.logins.get(headers) else {
        return Err(Refusal::new(401, "log in first"));
    };
    let identity = match &login.token {
        Some(token) => access.resolve(None, Some(token), None),
        None if access.requires_auth() || !visitor.is_local(headers) => {
            return Err(Refusal::new(401, "log in first"));
        }
        None => Ok(Identity::default()),
    };
    let identity = identity.map_err(|_| {
        console.logins.close(headers);
        Refusal::new(
            401,
            "the login's credentials are no longer accepted: log in again",
        )
    })?;
    let config = host.config();
    let admin = match &identity.caller {
        Some(caller) => config.console.admins.contains(&caller.user_id),
        None => config.console.anonymous_admin && !access.authenticates(),
    };
    Ok(Operator {
        login,
        identity,
        admin,
    })
}

/// DNS-rebinding protection, as for MCP: the `Host` must be local or in `http.allowed_hosts`.
fn check_host(headers: &HeaderMap, config: &Config) -> Result<(), Refusal> {
    let host = headers
        .get(hyper::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let name = super::guard::host_part(host);
    let allowed = super::guard::is_local(name)
        || config
            .http
            .allowed_hosts
            .iter()
            .any(|h| h == name || h == host);
    if allowed || host.is_empty() {
        Ok(())
    } else {
        Err(Refusal::new(403, format!("Host {host} is not allowed")))
    }
}

/// A state-changing request must come from the console's own pages: an `Origin` naming this
/// server (the `Host` it was sent to) or one of `http.allowed_origins`, and no cross-site fetch.
fn same_origin(headers: &HeaderMap, config: &Config) -> Result<(), Refusal> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let host = get("host").unwrap_or("");
    let Some(origin) = get("origin") else {
        return Err(Refusal::new(403, "a console action needs an Origin header"));
    };
    let own = ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host));
    if !(own || config.http.allowed_origins.iter().any(|o| o == origin)) {
        return Err(Refusal::new(
            403,
            format!("cross-site request from {origin} refused"),
        ));
    }
    if get("sec-fetch-site").is_some_and(|s| s == "cross-site") {
        return Err(Refusal::new(403, "cross-site request refused"));
    }
    Ok(())
}

/// A POST's JSON body (at most [`MAX_BODY`] bytes).
async fn read_json(req: Request<IncomingBody>, config: &Config) -> Result<Value, Refusal> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY);
    let deadline = Duration::from_secs(config.http.body_read_timeout_secs.max(1));
    let collected = match tokio::time::timeout(deadline, limited.collect()).await {
        Ok(collected) => collected,
        Err(_) => return Err(Refusal::new(408, "the request body did not arrive in time")),
    };
    let bytes: Bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Err(Refusal::new(
                413,
                "the request body is too large or broke off",
            ));
        }
    };
    if bytes.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(&bytes).map_err(|e| Refusal::new(400, format!("not JSON: {e}")))
}

/// A JSON error answer.
pub(super) fn refuse(status: u16, why: &str) -> Response<Body> {
    json_response(status, &json!({ "error": why }))
}

/// Why a console request is refused: its HTTP status, and what the page shows.
#[derive(Debug)]
pub(super) struct Refusal {
    status: u16,
    why: String,
}

impl Refusal {
    pub(super) fn new(status: u16, why: impl Into<String>) -> Refusal {
        Refusal {
            status,
            why: why.into(),
        }
    }

    /// The answer saying so.
    pub(super) fn response(&self) -> Response<Body> {
        refuse(self.status, &self.why)
    }
}

pub(super) fn redirect(to: &str) -> Response<Body> {
    let mut resp = empty(StatusCode::SEE_OTHER);
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(hyper::header::LOCATION, v);
    }
    resp
}

/// Set the login cookie (`Secure` when the request came over HTTPS through a proxy that says so).
fn set_cookie(
    resp: &mut Response<Body>,
    base: &str,
    login: Option<(&str, Duration)>,
    request: &HeaderMap,
) {
    let https = request
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    if let Ok(v) = HeaderValue::from_str(&login::set_cookie(base, login, https)) {
        resp.headers_mut().insert(hyper::header::SET_COOKIE, v);
    }
}

/// The headers every console answer carries: nothing but the host's own scripts and styles, no
/// framing, no caching, no sniffing, no referrer.
fn secure(headers: &mut HeaderMap) {
    const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' \
                       data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                       base-uri 'none'";
    let pairs = [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ];
    for (name, value) in pairs {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

/// Record a console action (audit log and live stream).
fn audit(
    host: &crate::host::Host,
    user: Option<&str>,
    action: &'static str,
    target: &str,
    outcome: Result<(), &str>,
) {
    host.telemetry()
        .audit_action(&crate::telemetry::audit::Action {
            time: crate::telemetry::audit::Action::now(),
            caller: user,
            action,
            target,
            outcome: if outcome.is_ok() { "ok" } else { "refused" },
            detail: outcome.err(),
        });
}
