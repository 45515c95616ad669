//! The host's connection to one upstream MCP server: the session (rmcp's client over a child's
//! pipes or over Streamable HTTP) and its requests — with the call's deadline and cancellation
//! forwarded as `notifications/cancelled`, progress, log messages and requests for input passed
//! to the caller (`relay`), and the child's stderr to the log. How the connection is made,
//! kept up, restarted, quarantined and stopped, and how a list change is re-read, is
//! [`super::supervise`]'s; a stdio child's process is [`super::child`]'s.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::wire::Manifest;
use rmcp::ClientHandler as _;
use rmcp::model::{
    ClientCapabilities, ClientRequest, ErrorCode, Implementation, InitializeRequestParams,
    ProtocolVersion, ServerResult,
};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt as _, NotificationContext, Peer,
    PeerRequestOptions, RoleClient, RunningService, ServiceError,
};
use serde_json::Value;

use super::child;
use super::handshake::{self, Era, Replay};
use super::supervise::{Current, Relists, State, Supervision};
use crate::plugins::backend::HostCallbacks;
use crate::plugins::call::{CallState, TraceContext};
use crate::plugins::{LoadError, lock, output};

/// How long a 2026-07-28 upstream may take to acknowledge the `subscriptions/listen` the host
/// opens before reading its lists (the lists are read without it after that).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(15);
/// A client session's running service.
pub(super) type Running = RunningService<RoleClient, Handler>;

/// How long a failed handshake waits for the child's exit that explains it.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// The 2026-07-28 error for a request that needs a client capability the client did not declare.
const MISSING_CLIENT_CAPABILITY: i32 = -32021;

/// How the upstream is reached.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program and arguments to spawn (the helper `mcp-host upstream-exec …` when the
        /// child is confined, else the command itself).
        argv: Vec<OsString>,
        /// Its whole environment.
        env: Vec<(OsString, OsString)>,
        /// Its working directory.
        cwd: PathBuf,
        /// Whether it runs under `isolation: sandbox` (a refused program start in its last
        /// stderr lines then reads as the sandbox's refusal).
        sandboxed: bool,
    },
    /// A Streamable HTTP endpoint, its headers and which redirects are followed.
    Http(super::http::Endpoint),
}

/// A request that produced no result.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The upstream answered a JSON-RPC error.
    Rpc(ErrorCode, String),
    /// The upstream refused the request for a client capability the caller did not declare
    /// (-32021): the capabilities it named (`requiredCapabilities`), and its message.
    Needs(Value, String),
    /// The call was cancelled or ran out of time (the upstream was told).
    Stopped(&'static str),
    /// The upstream could not be reached, or went away during the request.
    Unavailable(String),
    /// The caller's own authorization at the upstream is needed first (`server.auth`): its
    /// consent, or a step-up.
    NeedsConsent(crate::access::upstream::gateway::Need),
    /// The host refused the request before sending it (why, for the caller).
    Refused(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Rpc(code, message) => {
                write!(f, "the upstream answered error {}: {message}", code.0)
            }
            Failure::Needs(_, message) => write!(
                f,
                "the upstream needs a client capability the caller did not declare: {message}"
            ),
            Failure::Stopped(why) => write!(f, "{why}"),
            Failure::Unavailable(why) => write!(f, "{why}"),
            Failure::NeedsConsent(_) => f.write_str("the caller's authorization is needed"),
            Failure::Refused(why) => write!(f, "{why}"),
        }
    }
}

/// A request sent to an upstream, waiting for its answer.
pub(super) enum Sent {
    /// Written beside rmcp (a stdio upstream's `tools/call`).
    Direct(super::pipe::Pending),
    /// Sent through rmcp's service.
    Rmcp(rmcp::service::RequestHandle<RoleClient>),
}

impl Sent {
    /// The upstream's answer; `None` when it went away first.
    async fn answer(&mut self) -> Option<Result<ServerResult, ServiceError>> {
        match self {
            Sent::Direct(pending) => Some(
                pending
                    .answer()
                    .await?
                    .map(|v| ServerResult::CustomResult(rmcp::model::CustomResult(v)))
                    .map_err(ServiceError::McpError),
            ),
            Sent::Rmcp(handle) => (&mut handle.rx).await.ok(),
        }
    }

    /// Tell the upstream the request is cancelled, with `reason`.
    async fn cancel(self, reason: String) {
        match self {
            Sent::Direct(pending) => pending.cancel(&reason).await,
            Sent::Rmcp(handle) => {
                let _ = handle.cancel(Some(reason)).await;
            }
        }
    }
}

/// One connected session.
pub(super) struct Session {
    pub(super) id: u64,
    pub(super) peer: Peer<RoleClient>,
    /// Ends the rmcp service (closing the child's stdin, or the HTTP session).
    stop: Mutex<Option<rmcp::service::RunningServiceCancellationToken>>,
    /// The child (stdio): its process group is killed when the session ends or goes away.
    child: Option<child::Owned>,
    /// Where a stdio upstream's `tools/call` requests are written, beside rmcp's service loop.
    direct: Option<Arc<super::pipe::Direct>>,
    /// Where what the upstream sends during a call on this session goes (the link's, for its
    /// serving session; a caller's session has its own: request ids are per session).
    pub(super) routes: Arc<super::relay::Routes>,
}

/// A session's connection as its handshake left it.
pub(super) struct Connected {
    running: Running,
    /// The session's id.
    id: u64,
    /// The child (stdio).
    child: Option<child::Owned>,
    /// Where `tools/call` requests are written (stdio).
    direct: Option<Arc<super::pipe::Direct>>,
}

impl Session {
    /// A session over `running` (a caller's: HTTP, its own routes).
    pub(super) fn of_caller(
        id: u64,
        running: &Running,
        routes: Arc<super::relay::Routes>,
    ) -> Session {
        Session {
            id,
            peer: running.peer().clone(),
            stop: Mutex::new(Some(running.cancellation_token())),
            child: None,
            direct: None,
            routes,
        }
    }

    /// Whether the connection closed (its child died): it takes no request.
    pub(super) fn ended(&self) -> bool {
        self.peer.is_transport_closed() || self.direct.as_ref().is_some_and(|d| d.is_closed())
    }

    /// End it: its service stops and its child's process group is killed.
    pub(super) fn end(&self) {
        if let Some(stop) = lock(&self.stop).take() {
            stop.cancel();
        }
        if let Some(child) = &self.child {
            child.0.kill();
        }
    }

    /// The child's pid (stdio).
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.0.pid())
    }

    /// The child (stdio).
    pub(super) fn child(&self) -> Option<&Arc<child::Child>> {
        self.child.as_ref().map(|c| &c.0)
    }
}

/// The supervised connection to one upstream.
pub(crate) struct Link {
    pub(super) name: Arc<str>,
    pub(super) transport: Transport,
    pub(super) host: Arc<dyn HostCallbacks>,
    /// Its bounds and what it does when it fails.
    pub(super) supervision: Supervision,
    pub(super) state: Mutex<State>,
    pub(super) changed: tokio::sync::Notify,
    /// The lists read last (at the first connection, after a change or a restart).
    pub(super) latest: Mutex<Option<Manifest>>,
    /// Where what the upstream sends during a call goes: its requests in flight, by request id
    /// and progress token.
    routes: Arc<super::relay::Routes>,
    sessions: AtomicU64,
    /// The upstream answered `server/discover` with an error: it speaks 2025 (`initialize`).
    pub(super) legacy: AtomicBool,
    /// Each caller's own session (an upstream with `server.auth`): the calls go there.
    pub(super) callers: std::sync::OnceLock<super::callers::Callers>,
    /// The authorizer of the serving session when it lists as the operator (`server.auth.list_as:
    /// operator`): without the operator's connection, the link waits for it.
    pub(super) listing:
        std::sync::OnceLock<Arc<crate::access::upstream::gateway::CallerAuthorizer>>,
    pub(super) runtime: tokio::runtime::Handle,
    /// The re-reading of its lists after a `list_changed`: one at a time.
    pub(super) relists: Mutex<Relists>,
    /// Whether lists read from now on are offered to the host (a rescan).
    pub(super) announce: AtomicBool,
    /// The connection attempt in progress (its task), ended when the link is retired.
    pub(super) connecting: Mutex<Option<tokio::task::AbortHandle>>,
    /// The child of the attempt in progress (stdio), killed when the link is retired.
    pub(super) attempt: Mutex<Option<Arc<child::Child>>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Receives what the upstream sends unasked on session `session` — list changes, resource
/// updates, requests for input (log messages and progress are routed as they arrive:
/// `relay::Routes`).
pub(super) struct Handler {
    link: Weak<Link>,
    session: u64,
    /// Where the calls of this session are.
    routes: Arc<super::relay::Routes>,
    /// A caller's session (its list changes are the serving session's to read).
    caller: bool,
}

impl rmcp::ClientHandler for Handler {
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.ask("elicitation/create", &request, &context).await
    }

    // Sampling is deprecated in 2026-07-28, but the servers of 2025 still ask for it.
    #[allow(deprecated)]
    async fn create_message(
        &self,
        request: rmcp::model::CreateMessageRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.ask("sampling/createMessage", &request, &context).await
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(link) = self.link.upgrade().filter(|_| !self.caller) {
            link.host
                .announce(crate::plugins::backend::Change::ResourceUpdated(
                    params.uri.as_str().into(),
                ));
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed();
    }

    /// What the handshake says of the host: its `initialize` names the newest revision that
    /// has one (2025-11-25), never 2026-07-28 (which `server/discover` negotiates instead).
    fn get_info(&self) -> InitializeRequestParams {
        InitializeRequestParams::new(client_capabilities(), client_info())
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// Who the host says it is to an upstream.
fn client_info() -> Implementation {
    Implementation::new("mcp-host", env!("CARGO_PKG_VERSION"))
}

/// The `_meta` rmcp gives every request of a session with `peer`: on a session without a
/// handshake (2026-07-28), the protocol version, the client's info and its capabilities.
fn session_meta(peer: &Peer<RoleClient>) -> rmcp::model::JsonObject {
    let mut meta = rmcp::model::RequestMetaObject::default();
    if let Some(info) = peer.peer_info()
        && !info.protocol_version.has_initialize()
    {
        meta.set_protocol_version(info.protocol_version.clone());
        meta.set_client_info(client_info());
        meta.set_client_capabilities(client_capabilities());
    }
    meta.0.0
}

/// What the host declares to an upstream: it passes elicitation (form and URL) and sampling
/// requests to the calling client (which must have declared them itself, or the upstream gets
/// an error).
fn client_capabilities() -> ClientCapabilities {
    serde_json::from_value(serde_json::json!({
        "elicitation": {"form": {}, "url": {}},
        "sampling": {},
    }))
    .unwrap_or_default()
}

impl Handler {
    /// Pass the upstream's request `method` to the client of the call it belongs to.
    async fn ask<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        method: &str,
        params: &impl serde::Serialize,
        context: &rmcp::service::RequestContext<RoleClient>,
    ) -> Result<T, rmcp::ErrorData> {
        if self.link.upgrade().is_none() {
            return Err(rmcp::ErrorData::internal_error("mcp-host: stopping", None));
        }
        let params = serde_json::to_value(params)
            .map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
        super::relay::ask(&self.routes, method, params, &context.extensions).await
    }

    /// The upstream said a list changed (see `Link::list_changed`): the serving session's
    /// lists are re-read.
    fn list_changed(&self) {
        if let Some(link) = self.link.upgrade().filter(|_| !self.caller) {
            link.list_changed(self.session);
        }
    }

    /// The handler of caller's session `id` of `link`, its calls in `routes`.
    pub(super) fn for_caller(
        link: &Arc<Link>,
        id: u64,
        routes: Arc<super::relay::Routes>,
    ) -> Handler {
        Handler {
            link: Arc::downgrade(link),
            session: id,
            routes,
            caller: true,
        }
    }
}

/// A failure's text without the kind `LoadError` prefixes (`worker process: `).
fn reason(e: LoadError) -> String {
    match e {
        LoadError::Worker(why) => why,
        other => other.to_string(),
    }
}

impl Link {
    /// A link to upstream `name` over `transport`, supervised as `supervision` says, its
    /// connections on `runtime`; not connecting yet (see `Link::begin`).
    pub(crate) fn new(
        name: &str,
        transport: Transport,
        host: Arc<dyn HostCallbacks>,
        supervision: Supervision,
        runtime: tokio::runtime::Handle,
    ) -> Arc<Link> {
        Arc::new(Link {
            name: Arc::from(name),
            transport,
            host,
            supervision,
            state: Mutex::new(State::connecting()),
            changed: tokio::sync::Notify::new(),
            latest: Mutex::new(None),
            routes: Arc::new(super::relay::Routes::new(Arc::from(name))),
            sessions: AtomicU64::new(0),
            legacy: AtomicBool::new(false),
            callers: std::sync::OnceLock::new(),
            listing: std::sync::OnceLock::new(),
            runtime,
            relists: Mutex::default(),
            announce: AtomicBool::new(false),
            connecting: Mutex::new(None),
            attempt: Mutex::new(None),
        })
    }

    /// Run `future` on the upstream runtime and wait for it on this (non-runtime) thread;
    /// `None` when the runtime stopped first.
    pub(crate) fn block_on<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        block_on(&self.runtime, future)
    }

    /// The upstream's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The id of the newest session (the one serving, or being connected).
    pub(super) fn session_id(&self) -> u64 {
        self.sessions.load(Ordering::Acquire)
    }

    /// An HTTP upstream's endpoint.
    fn url(&self) -> Option<&str> {
        match &self.transport {
            Transport::Http(endpoint) => Some(&endpoint.url),
            Transport::Stdio { .. } => None,
        }
    }

    /// A session over a connection just made: requests written beside rmcp get the session's
    /// `_meta`, and its end is reported (see `Link::exited`).
    pub(super) fn open(self: &Arc<Self>, connected: Connected) -> Result<Arc<Session>, String> {
        let Connected {
            running,
            id,
            child,
            direct,
        } = connected;
        if let Some(direct) = &direct {
            let meta = super::pipe::SessionMeta::new(&session_meta(running.peer()))
                .map_err(|e| format!("the session's _meta: {e}"))?;
            direct.set_session_meta(meta);
        }
        let session = Arc::new(Session {
            id,
            peer: running.peer().clone(),
            stop: Mutex::new(Some(running.cancellation_token())),
            child,
            direct,
            routes: Arc::clone(&self.routes),
        });
        self.watch_session(running, id, session.child().cloned());
        Ok(session)
    }

    /// The MCP handshake, on a new connection (a new child, for stdio): the running service,
    /// its session id and child. `server/discover` first (2026-07-28), without rmcp's fixed 10 s
    /// probe timeout (a child on a busy machine may take longer to start; the caller bounds the
    /// wait); a server that answers it with an error is legacy, and remembered for restarts: a
    /// stdio child gets `initialize` on the same pipe, an HTTP upstream a new connection.
    pub(super) async fn handshake(self: &Arc<Self>) -> Result<Connected, String> {
        loop {
            // A session id per attempt: the exit of an abandoned attempt's child is not this
            // session's.
            let id = self.sessions.fetch_add(1, Ordering::AcqRel) + 1;
            let endpoint = match &self.transport {
                Transport::Stdio { argv, env, cwd, .. } => {
                    return self.handshake_stdio(id, argv, env, cwd).await;
                }
                Transport::Http(endpoint) => endpoint,
            };
            let legacy = match endpoint.lifecycle {
                super::http::Lifecycle::Auto => self.legacy.load(Ordering::Acquire),
                super::http::Lifecycle::Initialize => true,
                super::http::Lifecycle::Discover => false,
            };
            let handler = Handler {
                link: Arc::downgrade(self),
                session: id,
                routes: Arc::clone(&self.routes),
                caller: false,
            };
            let transport =
                self.routing(super::http::transport(&self.name, endpoint).map_err(reason)?);
            match handler
                .serve_with_lifecycle(transport, lifecycle(legacy))
                .await
            {
                Ok(running) => {
                    return Ok(Connected {
                        running,
                        id,
                        child: None,
                        direct: None,
                    });
                }
                Err(ClientInitializeError::JsonRpcError(_))
                    if !legacy && endpoint.lifecycle == super::http::Lifecycle::Auto =>
                {
                    self.legacy.store(true, Ordering::Release);
                }
                Err(e) => return Err(self.handshake_refused(e)),
            }
        }
    }

    /// The handshake over a new child's pipes (see `Link::handshake`): the child is started
    /// once whatever it speaks, and a failure that its exit explains reads as its exit
    /// ("exited with status 3; last stderr: …").
    async fn handshake_stdio(
        self: &Arc<Self>,
        id: u64,
        argv: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &std::path::Path,
    ) -> Result<Connected, String> {
        let spawned = self.spawn_child(id, argv, env, cwd)?;
        let child = spawned.child;
        let mut pipe = super::pipe::Pipe::new(spawned.stdout, spawned.stdin);
        let direct = pipe.direct();
        let handler = Handler {
            link: Arc::downgrade(self),
            session: id,
            routes: Arc::clone(&self.routes),
            caller: false,
        };
        let served = if self.legacy.load(Ordering::Acquire) {
            let transport = self.routing(Replay::new(pipe, None));
            handler
                .serve_with_lifecycle(transport, lifecycle(true))
                .await
        } else {
            match handshake::probe(&mut pipe, &handler.get_info()).await {
                Ok(Era::Legacy) => {
                    self.legacy.store(true, Ordering::Release);
                    let transport = self.routing(Replay::new(pipe, None));
                    handler
                        .serve_with_lifecycle(transport, lifecycle(true))
                        .await
                }
                Ok(Era::Modern(answer)) => {
                    let transport = self.routing(Replay::new(pipe, Some(*answer)));
                    handler
                        .serve_with_lifecycle(transport, lifecycle(false))
                        .await
                }
                Err(why) => return Err(explained(&child.0, why).await),
            }
        };
        match served {
            Ok(running) => Ok(Connected {
                running,
                id,
                child: Some(child),
                direct: Some(direct),
            }),
            Err(e) => Err(explained(&child.0, self.handshake_refused(e)).await),
        }
    }

    /// `transport`, routing log messages and progress as they arrive (see `relay::Routes`).
    fn routing<T>(&self, transport: T) -> super::relay::Routing<T> {
        super::relay::Routing {
            inner: transport,
            routes: Arc::clone(&self.routes),
        }
    }

    /// Why the upstream refused the handshake, with what to do about a server that asks for
    /// OAuth.
    fn handshake_refused(&self, e: ClientInitializeError) -> String {
        let authorized =
            matches!(&self.transport, Transport::Http(endpoint) if endpoint.auth.is_some());
        if let Some(challenge) = e.auth_challenge().filter(|_| !authorized) {
            return format!(
                "upstream {} requires authorization (OAuth): it answered 401 with \
                 WWW-Authenticate: {challenge}; mcp-host does not obtain tokens for \
                 upstreams: give one in server.headers (e.g. Authorization: \"Bearer \
                 ${{TOKEN}}\")",
                self.name
            );
        }
        format!(
            "its handshake failed: {}",
            super::http::init_failure(&e, self.url())
        )
    }

    /// Report session `id`'s end when its service ends: the connection closed (a child that
    /// died closes its stdout; its exit, when it comes soon, says how).
    fn watch_session(
        self: &Arc<Self>,
        running: Running,
        id: u64,
        child: Option<Arc<child::Child>>,
    ) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut how = match running.waiting().await {
                Ok(reason) => format!("connection closed ({reason:?})"),
                Err(e) => format!("connection task ended: {e}"),
            };
            if let Some(child) = child
                && let Some(exit) = child.ended_within(EXIT_GRACE).await
            {
                how = exit;
            }
            if let Some(link) = weak.upgrade() {
                link.exited(id, &how);
            }
        });
    }

    /// On a 2026-07-28 session, list changes arrive only on a `subscriptions/listen` stream:
    /// open one for the lists the upstream says can change, and re-read them on each change.
    /// (A 2025 session sends them unasked, to the handler.)
    pub(super) async fn listen_for_changes(self: &Arc<Self>, session: &Session) {
        let Some(info) = session.peer.peer_info() else {
            return;
        };
        if info.protocol_version < ProtocolVersion::V_2026_07_28 {
            return;
        }
        let caps = &info.capabilities;
        let mut filter = rmcp::model::SubscriptionFilter::builder();
        let mut any = false;
        if caps
            .tools
            .as_ref()
            .is_some_and(|t| t.list_changed == Some(true))
        {
            filter = filter.tools_list_changed();
            any = true;
        }
        if caps
            .prompts
            .as_ref()
            .is_some_and(|p| p.list_changed == Some(true))
        {
            filter = filter.prompts_list_changed();
            any = true;
        }
        if caps
            .resources
            .as_ref()
            .is_some_and(|r| r.list_changed == Some(true))
        {
            filter = filter.resources_list_changed();
            any = true;
        }
        if !any {
            return;
        }
        let listen = tokio::time::timeout(LISTEN_TIMEOUT, session.peer.listen(filter.build()));
        let mut subscription = match listen.await {
            Ok(Ok(s)) => s,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!(
                        "subscriptions/listen was not acknowledged within {} s",
                        LISTEN_TIMEOUT.as_secs()
                    ),
                };
                tracing::warn!(
                    "Upstream {}: cannot listen for list changes ({why}); its lists are read at \
                     start and after a restart only",
                    self.name
                );
                return;
            }
        };
        let weak = Arc::downgrade(self);
        let id = session.id;
        tokio::spawn(async move {
            while let Ok(Some(_change)) = subscription.next().await {
                let Some(link) = weak.upgrade() else { return };
                link.list_changed(id);
            }
        });
    }

    /// Start the child of session `id`: its stdin and stdout for the protocol, its stderr to the
    /// log (bounded lines; the last ones kept for its status), its exit reported as this
    /// session's end. Until the attempt ends, the child is the link's attempt (killed if the
    /// link is retired meanwhile).
    fn spawn_child(
        self: &Arc<Self>,
        id: u64,
        argv: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &std::path::Path,
    ) -> Result<child::Spawned, String> {
        let name = Arc::clone(&self.name);
        let log = move |pid, stderr, child: Arc<child::Child>| {
            let spawned = std::thread::Builder::new()
                .name("mcp-upstream-log".into())
                .spawn({
                    let child = Arc::clone(&child);
                    move || {
                        log_stderr(&name, pid, stderr, child.tail());
                        child.tail().finish();
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!("cannot read an upstream's stderr: {e}");
                child.tail().finish();
            }
        };
        let weak = Arc::downgrade(self);
        let on_exit = move |how: String| {
            if let Some(link) = weak.upgrade() {
                link.exited(id, &how);
            }
        };
        let sandboxed = matches!(
            self.transport,
            Transport::Stdio {
                sandboxed: true,
                ..
            }
        );
        let spawned = child::spawn(argv, env, cwd, sandboxed, log, on_exit)?;
        *lock(&self.attempt) = Some(Arc::clone(&spawned.child.0));
        Ok(spawned)
    }

    /// Whether the upstream says it serves resources: its session's `resources` capability
    /// (while no session runs — connecting or restarting — it is assumed to, and a read
    /// answered "method not found" counts as "not found").
    pub(crate) fn advertises_resources(&self) -> bool {
        match &lock(&self.state).current {
            Current::Running(session) => session
                .peer
                .peer_info()
                .is_none_or(|info| info.capabilities.resources.is_some()),
            Current::Quarantined(_) | Current::Failed(_) | Current::Retired => false,
            Current::Connecting { .. } | Current::Restarting(_) => true,
        }
    }

    /// What the serving session's upstream said of itself in its handshake (`serverInfo`,
    /// `protocolVersion`, `capabilities`), as JSON.
    pub(crate) fn server_info(&self) -> Option<Value> {
        match &lock(&self.state).current {
            Current::Running(session) => session
                .peer
                .peer_info()
                .and_then(|info| serde_json::to_value(info).ok()),
            _ => None,
        }
    }

    /// Why it is withdrawn, when it is.
    pub(crate) fn quarantined(&self) -> Option<String> {
        match &lock(&self.state).current {
            Current::Quarantined(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// The serving session, waiting (until `until`) through a restart — also one the supervisor
    /// has not begun yet: a session whose service ended (a child killed a moment ago) takes no
    /// request.
    pub(super) async fn session(&self, until: Option<Instant>) -> Result<Arc<Session>, Failure> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match &lock(&self.state).current {
                Current::Running(s) if !s.ended() => return Ok(Arc::clone(s)),
                Current::Running(_) | Current::Connecting { .. } | Current::Restarting(_) => {}
                Current::Quarantined(why) => {
                    return Err(Failure::Unavailable(format!(
                        "upstream {} is quarantined: {why}",
                        self.name
                    )));
                }
                Current::Failed(why) => {
                    return Err(Failure::Unavailable(format!(
                        "upstream {} failed: {why}",
                        self.name
                    )));
                }
                Current::Retired => {
                    return Err(Failure::Unavailable(format!(
                        "upstream {} was stopped",
                        self.name
                    )));
                }
            }
            let Some(t) = until else {
                notified.await;
                continue;
            };
            if tokio::time::timeout_at(t.into(), notified).await.is_err() {
                return Err(Failure::Unavailable(format!(
                    "upstream {} is restarting and did not come back in time",
                    self.name
                )));
            }
        }
    }

    /// Send `request` for `call`: its progress to the call's events, ended (and the upstream
    /// told with `notifications/cancelled`) when the call is cancelled or its deadline passes.
    /// A stdio upstream's `tools/call` is written beside rmcp (see `pipe::Direct`).
    pub(crate) async fn request(
        self: &Arc<Self>,
        request: &ClientRequest,
        call: &Arc<CallState>,
        trace: Option<&TraceContext>,
    ) -> Result<ServerResult, Failure> {
        if self.callers.get().is_some() {
            return self.request_as_caller(request, call, trace).await;
        }
        let progress = call.events.is_some() && call.wants.progress;
        // In flight from before it is sent: what the upstream sends about it may come at once.
        let mut entered = self.routes.enter(call);
        let sent = self
            .send(request, call, trace, progress, &mut entered)
            .await?;
        self.answer(sent, call).await
    }

    /// The answer to `sent`, a request for `call` — or, when the call is cancelled or its
    /// deadline passes first, the upstream told with `notifications/cancelled`.
    pub(super) async fn answer(
        &self,
        mut sent: Sent,
        call: &Arc<CallState>,
    ) -> Result<ServerResult, Failure> {
        let deadline = async {
            match call.deadline {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        let stopped = tokio::select! {
            answer = sent.answer() => return match answer {
                Some(Ok(result)) => Ok(result),
                Some(Err(e)) => Err(self.unavailable(e)),
                None => Err(Failure::Unavailable(format!(
                    "upstream {} went away during the request",
                    self.name
                ))),
            },
            () = call.cancel().cancelled() => "cancelled",
            () = deadline => "past its deadline",
        };
        sent.cancel(format!("mcp-host: the call was {stopped}"))
            .await;
        if stopped != "cancelled" {
            // The executor's own timeout, at the same deadline, answers the client ("timed
            // out"); this request holds its slots a little longer, as a worker call does.
            tokio::time::sleep(crate::plugins::worker::KILL_GRACE).await;
        }
        Err(Failure::Stopped(match stopped {
            "cancelled" => "the call was cancelled (the upstream was told)",
            _ => "the call ran past its deadline (the upstream was told to cancel it)",
        }))
    }

    /// Send `request` for `call` on the serving session, as `entered` in the routes: a stdio
    /// upstream's `tools/call` written beside rmcp (see `pipe::Direct`), anything else
    /// through rmcp's service.
    async fn send(
        &self,
        request: &ClientRequest,
        call: &Arc<CallState>,
        trace: Option<&TraceContext>,
        progress: bool,
        entered: &mut super::relay::Entered<'_>,
    ) -> Result<Sent, Failure> {
        let mut session = self.session(call.deadline).await?;
        loop {
            let meta = request_meta(&session, call, trace);
            // A `tools/call` over a pipe, unless it has a `_meta` of its own (rmcp merges it).
            let direct = session.direct.clone().filter(
                |_| matches!(request, ClientRequest::CallToolRequest(c) if c.params.meta.is_none()),
            );
            let (Some(direct), ClientRequest::CallToolRequest(c)) = (direct, request) else {
                let mut options = PeerRequestOptions::no_options();
                options.meta = meta;
                let handle = session
                    .peer
                    .send_request_with_option(request.clone(), options)
                    .await
                    .map_err(|e| self.unavailable(e))?;
                entered.bind(&handle.id, &handle.progress_token);
                return Ok(Sent::Rmcp(handle));
            };
            match direct
                .call(&c.params, meta.as_ref().map(|m| &m.0.0), progress)
                .await
            {
                Ok(pending) => {
                    let id = rmcp::model::NumberOrString::Number(pending.id);
                    entered.bind(&id, &rmcp::model::ProgressToken(id.clone()));
                    return Ok(Sent::Direct(pending));
                }
                // Not written: its child died a moment ago. The next session takes it.
                Err(_) if direct.is_closed() => session = self.session(call.deadline).await?,
                Err(e) => {
                    return Err(Failure::Unavailable(format!("upstream {}: {e}", self.name)));
                }
            }
        }
    }

    /// An rmcp request's failure.
    pub(super) fn unavailable(&self, e: ServiceError) -> Failure {
        match e {
            ServiceError::McpError(e) if e.code.0 == MISSING_CLIENT_CAPABILITY => {
                let required = e.data.as_ref().and_then(|d| d.get("requiredCapabilities"));
                Failure::Needs(
                    required.cloned().unwrap_or_default(),
                    e.message.into_owned(),
                )
            }
            ServiceError::McpError(e) => Failure::Rpc(e.code, e.message.into_owned()),
            other => Failure::Unavailable(format!(
                "upstream {}: {}",
                self.name,
                super::http::service_failure(&other, self.url())
            )),
        }
    }
}

/// The `_meta` of a request for `call`: the W3C trace context it continues (`traceparent`,
/// `tracestate`), and on a 2026-07-28 session the log level its client asked for (its
/// `logging/setLevel`, or its request's own `_meta` level), when the call's events go somewhere
/// and the client asked for log messages at all: the upstream sends no more than it wants; and
/// there the capabilities the calling client declared of those the host passes on
/// ([`relayed_capabilities`]), in place of the host's own.
pub(super) fn request_meta(
    session: &Session,
    call: &CallState,
    trace: Option<&TraceContext>,
) -> Option<rmcp::model::RequestMetaObject> {
    let mut meta = serde_json::Map::new();
    if let Some(trace) = trace {
        meta.insert("traceparent".into(), Value::String(trace.parent.clone()));
        if let Some(state) = &trace.state {
            meta.insert("tracestate".into(), Value::String(state.clone()));
        }
    }
    let modern = session
        .peer
        .peer_info()
        .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28);
    if modern
        && call.events.is_some()
        && let Some(level) = call.wants.log_level
    {
        meta.insert(
            "io.modelcontextprotocol/logLevel".into(),
            Value::String(level.as_str().into()),
        );
    }
    if modern {
        meta.insert(
            "io.modelcontextprotocol/clientCapabilities".into(),
            relayed_capabilities(call),
        );
    }
    (!meta.is_empty()).then(|| meta.into())
}

/// What a 2026-07-28 upstream is told of the client of `call`: the capabilities it declared
/// among those whose requests the host passes to it (elicitation, sampling, roots), none when
/// the call cannot ask. The upstream then asks no more than that client can answer, and refuses
/// (-32021) a request that needs what it lacks — as it would that client's own.
fn relayed_capabilities(call: &CallState) -> Value {
    let declared = call.input.as_ref().map(|input| input.capabilities());
    let relayed = ["elicitation", "sampling", "roots"]
        .into_iter()
        .filter_map(|key| Some((key.to_owned(), declared?.get(key)?.clone())))
        .collect();
    Value::Object(relayed)
}

/// Run `future` on `runtime` and wait for it on this thread (never one of `runtime`'s own);
/// `None` when the runtime stopped first.
pub(crate) fn block_on<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().ok()
}

/// The lifecycle of a handshake: `initialize` for a legacy (2025) upstream, else
/// `server/discover` for 2026-07-28.
pub(super) fn lifecycle(legacy: bool) -> ClientLifecycleMode {
    if legacy {
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        }
    }
}

/// Why a handshake with `child` failed: how the child ended, when it ends soon (a closed pipe
/// is explained by the exit that closed it), else `why`.
pub(super) async fn explained(child: &child::Child, why: String) -> String {
    child.ended_within(EXIT_GRACE).await.unwrap_or(why)
}

/// Log what an upstream child writes to its stderr, a line at a time, through the bounded path
/// every stranger's output takes ([`output::forward`]: escaped, cut, rate-limited, a burst's last
/// lines kept and logged with the count of the others when it ends); `tail` keeps the last lines
/// for the upstream's status when it ends (the lifecycle's hook).
fn log_stderr(name: &str, pid: u32, stderr: std::process::ChildStderr, tail: &child::Tail) {
    output::forward(
        stderr,
        |line| tail.push(line),
        |logged| match logged {
            output::Logged::Line(text) => tracing::info!(upstream = name, pid, "{text}"),
            notice => tracing::warn!(upstream = name, pid, "stderr: {notice}"),
        },
    );
}
