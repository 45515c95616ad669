//! The host's connection to one upstream MCP server, supervised like a plugin worker: the
//! session (rmcp's client over a child's pipes or over Streamable HTTP), a restart with backoff
//! when the child dies or the connection closes, quarantine after a crash loop (its tools are
//! withdrawn and clients told), requests with the call's deadline and cancellation forwarded as
//! `notifications/cancelled`, progress, log messages and requests for input passed to the
//! caller (`relay`), the child's stderr to the log, and the upstream's `list_changed` re-reading
//! its lists so the host can serve (or, under pinning, hold) what changed.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::wire::Manifest;
use rmcp::model::{
    ClientCapabilities, ClientRequest, ErrorCode, Implementation, InitializeRequestParams,
    ProtocolVersion, ServerResult,
};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt as _, NotificationContext, Peer,
    PeerRequestOptions, RoleClient, RunningService, ServiceError,
};
use serde_json::Value;

use crate::plugins::backend::HostCallbacks;
use crate::plugins::call::{CallState, TraceContext};
use crate::plugins::{LoadError, lock, output};

/// How long an upstream may take to start and answer its handshake and lists.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a 2026-07-28 upstream may take to acknowledge the `subscriptions/listen` the host
/// opens before reading its lists (the lists are read without it after that).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(15);
/// A client session's running service.
type Running = RunningService<RoleClient, Handler>;
/// A handshake attempt's result, the child's pid and where requests are written beside rmcp
/// (stdio).
type Served = (
    Result<Running, ClientInitializeError>,
    Option<u32>,
    Option<Arc<super::pipe::Direct>>,
);

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
        }
    }
}

/// A request sent to an upstream, waiting for its answer.
enum Sent {
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
struct Session {
    id: u64,
    peer: Peer<RoleClient>,
    /// Ends the rmcp service (closing the child's stdin, or the HTTP session).
    stop: Mutex<Option<rmcp::service::RunningServiceCancellationToken>>,
    /// The child's process group, for a stdio upstream.
    pid: Option<u32>,
    /// Where a stdio upstream's `tools/call` requests are written, beside rmcp's service loop.
    direct: Option<Arc<super::pipe::Direct>>,
}

/// A session's connection as its handshake left it.
struct Connected {
    running: Running,
    /// The session's id.
    id: u64,
    /// The child's process group (stdio).
    pid: Option<u32>,
    /// Where `tools/call` requests are written (stdio).
    direct: Option<Arc<super::pipe::Direct>>,
}

impl Session {
    /// Whether the connection closed (its child died): it takes no request.
    fn ended(&self) -> bool {
        self.peer.is_transport_closed() || self.direct.as_ref().is_some_and(|d| d.is_closed())
    }

    fn end(&self) {
        if let Some(stop) = lock(&self.stop).take() {
            stop.cancel();
        }
        #[cfg(unix)]
        if let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

enum Current {
    Starting,
    Running(Arc<Session>),
    Restarting,
    Quarantined(String),
    Retired,
}

struct State {
    current: Current,
    crashes: VecDeque<Instant>,
}

/// The supervised connection to one upstream.
pub(crate) struct Link {
    name: Arc<str>,
    transport: Transport,
    host: Arc<dyn HostCallbacks>,
    /// Crashes within the window that quarantine it, and the window.
    policy: (u32, Duration),
    state: Mutex<State>,
    changed: tokio::sync::Notify,
    /// The lists read after the upstream said they changed (or after a restart), when they differ
    /// from what was read before.
    latest: Mutex<Option<Manifest>>,
    /// Where what the upstream sends during a call goes: its requests in flight, by request id
    /// and progress token.
    routes: Arc<super::relay::Routes>,
    sessions: AtomicU64,
    /// The upstream answered `server/discover` with an error: it speaks 2025 (`initialize`).
    legacy: std::sync::atomic::AtomicBool,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Receives what the upstream sends unasked — list changes, resource updates, requests for
/// input (log messages and progress are routed as they arrive: `relay::Routes`).
struct Handler {
    link: Weak<Link>,
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
        if let Some(link) = self.link.upgrade() {
            link.host
                .announce(crate::plugins::backend::Change::ResourceUpdated(
                    params.uri.as_str().into(),
                ));
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.relist();
    }

    fn get_info(&self) -> InitializeRequestParams {
        InitializeRequestParams::new(client_capabilities(), client_info())
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
        let Some(link) = self.link.upgrade() else {
            return Err(rmcp::ErrorData::internal_error("mcp-host: stopping", None));
        };
        let params = serde_json::to_value(params)
            .map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
        super::relay::ask(&link.routes, method, params, &context.extensions).await
    }

    /// Read the lists again (off the handler: a request from inside it would wait on itself).
    fn relist(&self) {
        if let Some(link) = self.link.upgrade() {
            link.runtime
                .clone()
                .spawn(async move { link.relist().await });
        }
    }
}

impl Link {
    /// Connect to the upstream and read its lists (the first session).
    pub(crate) fn start(
        name: &str,
        transport: Transport,
        host: Arc<dyn HostCallbacks>,
        policy: (u32, Duration),
        runtime: tokio::runtime::Handle,
    ) -> Result<(Arc<Link>, Manifest), LoadError> {
        let link = Arc::new(Link {
            name: Arc::from(name),
            transport,
            host,
            policy,
            state: Mutex::new(State {
                current: Current::Starting,
                crashes: VecDeque::new(),
            }),
            changed: tokio::sync::Notify::new(),
            latest: Mutex::new(None),
            routes: Arc::new(super::relay::Routes::new(Arc::from(name))),
            sessions: AtomicU64::new(0),
            legacy: std::sync::atomic::AtomicBool::new(false),
            runtime,
        });
        let connecting = Arc::clone(&link);
        let started = link
            .block_on(async move {
                tokio::time::timeout(START_TIMEOUT, connecting.connect())
                    .await
                    .unwrap_or_else(|_| {
                        Err(LoadError::Worker(format!(
                            "the upstream did not answer its handshake and lists within {} s",
                            START_TIMEOUT.as_secs()
                        )))
                    })
            })
            .unwrap_or_else(|| Err(LoadError::Worker("the upstream runtime stopped".into())));
        match started {
            Ok((session, manifest)) => {
                link.adopt(session);
                Ok((link, manifest))
            }
            Err(e) => {
                lock(&link.state).current = Current::Retired;
                Err(e)
            }
        }
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

    /// An HTTP upstream's endpoint.
    fn url(&self) -> Option<&str> {
        match &self.transport {
            Transport::Http(endpoint) => Some(&endpoint.url),
            Transport::Stdio { .. } => None,
        }
    }

    /// Open a session and read the lists.
    async fn connect(self: &Arc<Self>) -> Result<(Arc<Session>, Manifest), LoadError> {
        let Connected {
            running,
            id,
            pid,
            direct,
        } = self.handshake().await?;
        if let Some(direct) = &direct {
            let meta = super::pipe::SessionMeta::new(&session_meta(running.peer()))
                .map_err(|e| LoadError::Worker(format!("the session's _meta: {e}")))?;
            direct.set_session_meta(meta);
        }
        let session = Arc::new(Session {
            id,
            peer: running.peer().clone(),
            stop: Mutex::new(Some(running.cancellation_token())),
            pid,
            direct,
        });
        self.watch_session(running, id);
        self.listen_for_changes(&session).await;
        match super::listing::read(&session.peer, &self.name).await {
            Ok(manifest) => Ok((session, manifest)),
            Err(e) => {
                session.end();
                Err(LoadError::Manifest(format!(
                    "could not read the upstream's lists: {e}"
                )))
            }
        }
    }

    /// The MCP handshake, on a new connection (a new child, for stdio): the running service,
    /// the child's pid and the session id. `server/discover` first (2026-07-28), without rmcp's
    /// fixed 10 s probe timeout (a child on a busy machine may take longer to start); a server
    /// that answers it with an error is legacy: the handshake is made again with `initialize`,
    /// and remembered for restarts.
    async fn handshake(self: &Arc<Self>) -> Result<Connected, LoadError> {
        loop {
            // A session id per attempt: the exit of an abandoned attempt's child is not this
            // session's.
            let id = self.sessions.fetch_add(1, Ordering::AcqRel) + 1;
            let legacy = self.legacy.load(Ordering::Acquire);
            let lifecycle = if legacy {
                ClientLifecycleMode::Initialize
            } else {
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                }
            };
            let (served, pid, direct) = self.serve(id, lifecycle).await?;
            match served {
                Ok(running) => {
                    return Ok(Connected {
                        running,
                        id,
                        pid,
                        direct,
                    });
                }
                Err(e) => {
                    if let Some(pid) = pid {
                        kill_group(pid);
                    }
                    let is_legacy =
                        matches!(e, rmcp::service::ClientInitializeError::JsonRpcError(_));
                    if legacy || !is_legacy {
                        return Err(self.handshake_refused(e));
                    }
                    self.legacy.store(true, Ordering::Release);
                }
            }
        }
    }

    /// One handshake attempt as session `id` over this upstream's transport: its result, and
    /// the child's pid and where requests are written beside rmcp (stdio).
    async fn serve(
        self: &Arc<Self>,
        id: u64,
        lifecycle: ClientLifecycleMode,
    ) -> Result<Served, LoadError> {
        let handler = Handler {
            link: Arc::downgrade(self),
        };
        Ok(match &self.transport {
            Transport::Stdio { argv, env, cwd } => {
                let (stdout, stdin, pid) = self.spawn_child(id, argv, env, cwd)?;
                let pipe = super::pipe::Pipe::new(stdout, stdin);
                let direct = pipe.direct();
                let served = handler
                    .serve_with_lifecycle(self.routing(pipe), lifecycle)
                    .await;
                (served, Some(pid), Some(direct))
            }
            Transport::Http(endpoint) => {
                let transport = self.routing(super::http::transport(&self.name, endpoint)?);
                (
                    handler.serve_with_lifecycle(transport, lifecycle).await,
                    None,
                    None,
                )
            }
        })
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
    fn handshake_refused(&self, e: ClientInitializeError) -> LoadError {
        if let Some(challenge) = e.auth_challenge() {
            return LoadError::Worker(format!(
                "upstream {} requires authorization (OAuth): it answered 401 with \
                 WWW-Authenticate: {challenge}; mcp-host does not obtain tokens for \
                 upstreams: give one in server.headers (e.g. Authorization: \"Bearer \
                 ${{TOKEN}}\")",
                self.name
            ));
        }
        LoadError::Worker(format!(
            "the MCP handshake failed: {}",
            super::http::init_failure(&e, self.url())
        ))
    }

    /// Report session `id`'s end when its service ends: the connection closed (a child that
    /// died closes its stdout).
    fn watch_session(self: &Arc<Self>, running: Running, id: u64) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let how = match running.waiting().await {
                Ok(reason) => format!("connection closed ({reason:?})"),
                Err(e) => format!("connection task ended: {e}"),
            };
            if let Some(link) = weak.upgrade() {
                link.exited(id, &how);
            }
        });
    }

    /// On a 2026-07-28 session, list changes arrive only on a `subscriptions/listen` stream:
    /// open one for the lists the upstream says can change, and re-read them on each change.
    /// (A 2025 session sends them unasked, to the handler.)
    async fn listen_for_changes(self: &Arc<Self>, session: &Session) {
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
        tokio::spawn(async move {
            while let Ok(Some(_change)) = subscription.next().await {
                let Some(link) = weak.upgrade() else { return };
                link.relist().await;
            }
        });
    }

    /// Start the child: its stdin and stdout for the protocol, its stderr to the log (bounded
    /// lines), its exit reported as this session's end.
    fn spawn_child(
        self: &Arc<Self>,
        id: u64,
        argv: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &std::path::Path,
    ) -> Result<(tokio::process::ChildStdout, tokio::process::ChildStdin, u32), LoadError> {
        use std::process::{Command, Stdio};
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| LoadError::Worker("no command".into()))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group, so that a launcher's children (npx starts node) end with it.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().map_err(|e| {
            LoadError::Worker(format!(
                "cannot start {}: {e}",
                argv.iter()
                    .map(|a| a.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
        })?;
        let pid = child.id();
        let io = (child.stdout.take(), child.stdin.take(), child.stderr.take());
        let (Some(stdout), Some(stdin), stderr) = io else {
            let _ = child.kill();
            return Err(LoadError::Worker("the child's pipes are missing".into()));
        };
        let name = Arc::clone(&self.name);
        if let Some(stderr) = stderr {
            let spawned = std::thread::Builder::new()
                .name("mcp-upstream-log".into())
                .spawn(move || log_stderr(&name, pid, stderr));
            if let Err(e) = spawned {
                tracing::warn!("cannot read upstream {}'s stderr: {e}", self.name);
            }
        }
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("mcp-upstream-wait".into())
            .spawn(move || {
                let how = match child.wait() {
                    Ok(status) => crate::plugins::describe_exit(status),
                    Err(e) => format!("lost: {e}"),
                };
                if let Some(link) = weak.upgrade() {
                    link.exited(id, &how);
                }
            });
        if let Err(e) = spawned {
            kill_group(pid);
            return Err(LoadError::Worker(format!("cannot watch the child: {e}")));
        }
        let stdout = tokio::process::ChildStdout::from_std(stdout)
            .map_err(|e| LoadError::Worker(format!("child stdout: {e}")))?;
        let stdin = tokio::process::ChildStdin::from_std(stdin)
            .map_err(|e| LoadError::Worker(format!("child stdin: {e}")))?;
        Ok((stdout, stdin, pid))
    }

    /// Make `session` the one serving requests.
    fn adopt(&self, session: Arc<Session>) {
        {
            let mut state = lock(&self.state);
            if !matches!(state.current, Current::Starting | Current::Restarting) {
                drop(state);
                session.end();
                return;
            }
            state.current = Current::Running(session);
        }
        self.changed.notify_waiters();
    }

    /// Session `id` ended (`how`): when it was the one serving, that is a crash: restart, or
    /// quarantine after too many.
    fn exited(self: &Arc<Self>, id: u64, how: &str) {
        let next = {
            let mut state = lock(&self.state);
            let serving = matches!(&state.current, Current::Running(s) if s.id == id);
            if !serving {
                return;
            }
            if let Current::Running(s) = &state.current {
                s.end();
            }
            tracing::error!(
                "Upstream {} failed ({how}): its requests in flight were answered with an error",
                self.name
            );
            self.crashed(&mut state, how)
        };
        self.then(next);
    }

    /// Count a crash; `Ok(delay)` to restart after, `Err(reason)` when quarantined.
    fn crashed(&self, state: &mut State, how: &str) -> Result<Duration, String> {
        let now = Instant::now();
        let (max, window) = self.policy;
        state.crashes.push_back(now);
        while state
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            state.crashes.pop_front();
        }
        let n = u32::try_from(state.crashes.len()).unwrap_or(u32::MAX);
        if n >= max {
            let reason = format!(
                "failed {n} times in {} s (last: {how})",
                window.as_secs_f64()
            );
            tracing::error!(
                "Quarantined upstream {}: {reason}; its tools are withdrawn until the \
                 configuration changes or SIGHUP",
                self.name
            );
            state.current = Current::Quarantined(reason.clone());
            Err(reason)
        } else {
            state.current = Current::Restarting;
            Ok(crate::plugins::worker::restart_backoff(n))
        }
    }

    fn then(self: &Arc<Self>, next: Result<Duration, String>) {
        self.changed.notify_waiters();
        match next {
            Err(_) => self.host.plugin_health_changed(),
            Ok(delay) => {
                let link = Arc::clone(self);
                self.runtime.spawn(async move { link.restart(delay).await });
            }
        }
    }

    async fn restart(self: Arc<Self>, delay: Duration) {
        tokio::time::sleep(delay).await;
        if !matches!(lock(&self.state).current, Current::Restarting) {
            return;
        }
        let started = tokio::time::timeout(START_TIMEOUT, self.connect())
            .await
            .unwrap_or_else(|_| Err(LoadError::Worker("restart timed out".into())));
        match started {
            Ok((session, manifest)) => {
                tracing::info!(
                    "Restarted upstream {}{}",
                    self.name,
                    session
                        .pid
                        .map(|p| format!(" (pid {p})"))
                        .unwrap_or_default()
                );
                self.adopt(session);
                self.offer(manifest);
            }
            Err(e) => {
                let next = {
                    let mut state = lock(&self.state);
                    if !matches!(state.current, Current::Restarting) {
                        return;
                    }
                    tracing::error!("Upstream {} did not restart: {e}", self.name);
                    self.crashed(&mut state, &format!("restart failed: {e}"))
                };
                self.then(next);
            }
        }
    }

    /// Read the lists again after the upstream said they changed.
    async fn relist(self: Arc<Self>) {
        let Ok(session) = self.session(Some(Instant::now() + START_TIMEOUT)).await else {
            return;
        };
        match super::listing::read(&session.peer, &self.name).await {
            Ok(manifest) => self.offer(manifest),
            Err(e) => tracing::warn!(
                "Upstream {} said its lists changed, but they could not be read: {e}",
                self.name
            ),
        }
    }

    /// Lists just read: when they differ from the newest known, keep them and ask the host to
    /// rebuild what it serves (pinning then decides whether a changed definition is served).
    fn offer(&self, manifest: Manifest) {
        {
            let mut latest = lock(&self.latest);
            if latest.as_ref() == Some(&manifest) {
                return;
            }
            *latest = Some(manifest);
        }
        tracing::info!(
            "Upstream {}'s lists changed: rebuilding what is served",
            self.name
        );
        self.host.rescan_needed();
    }

    /// The newest lists read since start, if they were read again.
    pub(crate) fn latest(&self) -> Option<Manifest> {
        lock(&self.latest).clone()
    }

    /// Whether the upstream says it serves resources: its session's `resources` capability
    /// (while no session runs — starting or restarting — it is assumed to, and a read answered
    /// "method not found" counts as "not found").
    pub(crate) fn advertises_resources(&self) -> bool {
        match &lock(&self.state).current {
            Current::Running(session) => session
                .peer
                .peer_info()
                .is_none_or(|info| info.capabilities.resources.is_some()),
            Current::Quarantined(_) | Current::Retired => false,
            Current::Starting | Current::Restarting => true,
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
    async fn session(&self, until: Option<Instant>) -> Result<Arc<Session>, Failure> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match &lock(&self.state).current {
                Current::Running(s) if !s.ended() => return Ok(Arc::clone(s)),
                Current::Running(_) | Current::Starting | Current::Restarting => {}
                Current::Quarantined(why) => {
                    return Err(Failure::Unavailable(format!(
                        "upstream {} is quarantined: {why}",
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
        &self,
        request: &ClientRequest,
        call: &Arc<CallState>,
        trace: Option<&TraceContext>,
    ) -> Result<ServerResult, Failure> {
        let progress = call.events.is_some() && call.wants.progress;
        // In flight from before it is sent: what the upstream sends about it may come at once.
        let mut entered = self.routes.enter(call);
        let mut sent = self
            .send(request, call, trace, progress, &mut entered)
            .await?;
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
    fn unavailable(&self, e: ServiceError) -> Failure {
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

    /// Stop the upstream: the current session ends (a child is killed) and nothing restarts.
    pub(crate) fn retire(&self) {
        let current = std::mem::replace(&mut lock(&self.state).current, Current::Retired);
        if let Current::Running(session) = current {
            session.end();
        }
        self.changed.notify_waiters();
    }
}

/// The `_meta` of a request for `call`: the W3C trace context it continues (`traceparent`,
/// `tracestate`), and on a 2026-07-28 session the log level its client asked for (its
/// `logging/setLevel`, or its request's own `_meta` level), when the call's events go somewhere
/// and the client asked for log messages at all: the upstream sends no more than it wants; and
/// there the capabilities the calling client declared of those the host passes on
/// ([`relayed_capabilities`]), in place of the host's own.
fn request_meta(
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

fn kill_group(pid: u32) {
    #[cfg(unix)]
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Log what an upstream child writes to its stderr, a line at a time, through the bounded path
/// every stranger's output takes ([`output::forward`]: escaped, cut, rate-limited, a burst's last
/// lines kept and logged with the count of the others when it ends).
fn log_stderr(name: &str, pid: u32, stderr: std::process::ChildStderr) {
    output::forward(
        stderr,
        |_| {},
        |logged| match logged {
            output::Logged::Line(text) => tracing::info!(upstream = name, pid, "{text}"),
            notice => tracing::warn!(upstream = name, pid, "stderr: {notice}"),
        },
    );
}
