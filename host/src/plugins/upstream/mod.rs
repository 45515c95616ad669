//! Upstream MCP servers as tool sources: an entry of `tool_dirs` with `server:` (a command run as
//! a supervised child speaking MCP on its pipes, or a Streamable HTTP endpoint) is served like a
//! plugin named after the entry's `name` — its manifest synthesised from the upstream's lists
//! ([`listing`]), its calls, resource reads, prompts and completions forwarded through rmcp's
//! client ([`link`]; [`http`] builds an HTTP upstream's; [`supervise`] keeps the connection up —
//! made in the background, every wait bounded, restarted and quarantined like a worker;
//! [`child`] owns a stdio child's process, [`handshake`] decides its era on its one pipe), and a
//! stdio child confined before it runs ([`confine`]). Everything the host does around a plugin
//! call (names and prefixes, agents,
//! pinning, quotas, timeouts, metrics and audit) applies unchanged, because the registry and the
//! executor see one more [`PluginBackend`].

mod answers;
mod callers;
mod child;
pub mod client;
pub mod confine;
mod consent;
mod credentialed;
mod handshake;
mod http;
mod link;
mod listing;
mod pipe;
mod relay;
mod supervise;

pub use child::kill_all;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::wire::{
    BuildInfo, CallEnvelope, CompletionTarget, ENVELOPE_INDEX, EnvelopeError, EnvelopeErrorKind,
    EnvelopeOutcome, Manifest,
};
use rmcp::model::{CallToolRequestParams, ClientRequest, ErrorCode, Request, ServerResult};
use serde_json::{Value, json};

use self::link::{Failure, Link, Transport};
use self::supervise::Supervision;
use crate::access::upstream::gateway::CallerAuthorizer;
use crate::config::{Config, Isolation};
use crate::plugins::LoadError;
use crate::plugins::backend::{
    CallFuture, Connection, HostCallbacks, PluginBackend, PluginCallError, Returned,
};
use crate::plugins::call::{CallState, TraceContext};
use crate::plugins::discovery::UpstreamEntry;
use crate::plugins::worker::{RunSpec, WorkerCommand, wire_limits, worker_env};

/// Environment variables a sandboxed upstream keeps besides its `permissions.env` and the
/// entry's `env` (what a runtime needs to start; none of them carries a secret).
const SANDBOX_ENV: &[&str] = &["PATH", "LANG", "LANGUAGE", "LC_*", "TZ"];

/// The runtime upstream sessions run on: their own, so that a host started outside any runtime
/// (`mcp-host list`) or on a current-thread one can still wait for them. One thread drives every
/// upstream's connection (rmcp's service loops, their pipes and sockets): a message to or from an
/// upstream is a few microseconds of work there, and a single thread is woken once per message,
/// where the workers of a multi-threaded runtime woke and parked each other around every one
/// (most of the CPU time an upstream call cost the host).
/// Run `future` on the upstreams' runtime (where users' upstream credentials are obtained) and
/// wait for it, from a thread outside it (a plugin's call); `None` if it could not run.
pub(crate) fn block_on_upstreams<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    let runtime = runtime().ok()?;
    link::block_on(runtime, future)
}

fn runtime() -> Result<&'static tokio::runtime::Handle, LoadError> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Handle, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .thread_name("mcp-upstream")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("mcp-upstream".into())
                .spawn(move || runtime.block_on(std::future::pending::<()>()))
                .map_err(|e| e.to_string())?;
            Ok(handle)
        })
        .as_ref()
        .map_err(|e| LoadError::Worker(format!("cannot start the upstream runtime: {e}")))
}

/// How upstream `name` from `candidate`'s entry runs: as a plugin of that name would, never in
/// the host.
pub(crate) fn run_spec(
    config: &Config,
    entry: &UpstreamEntry,
    path: &Path,
    dir: Option<Isolation>,
) -> RunSpec {
    let isolation = config.upstream_isolation(&entry.name, dir);
    let mut spec = RunSpec::of(config, &entry.name, path, Some(isolation));
    if entry.server.url.is_some() {
        // Nothing runs here to limit or confine.
        spec.limits = None;
        spec.permissions = None;
    }
    spec
}

/// An upstream server served as a plugin.
pub(crate) struct Upstream {
    build: BuildInfo,
    manifest: Arc<Manifest>,
    link: Arc<Link>,
    /// Whether reads of URIs nothing lists may be offered to it (`server.unlisted_resources`).
    unlisted: bool,
    /// Whether this version's [`Link`] is retired with it (not when a successor took it over).
    owns_link: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.link.name())
            .finish_non_exhaustive()
    }
}

/// How [`start`] starts an upstream.
pub(crate) struct StartOptions<'a> {
    /// The `mcp-host` executable, which confines a stdio child before it runs the command
    /// (without it, the command runs unconfined: refused under `sandbox`).
    pub(crate) exe: Option<&'a Path>,
    /// Serving: the connection is made in the background, a failed first connection is retried
    /// (and quarantined like a crash loop), and the lists are offered to the host as they come.
    /// Otherwise (a one-shot command) the caller waits with [`Upstream::settled`], and a failed
    /// first connection is final.
    pub(crate) background: bool,
    /// Where a quarantine is recorded for `mcp-host list`: the configuration file and the
    /// entry's `upstream:<name>`.
    pub(crate) record: Option<(PathBuf, PathBuf)>,
    /// Users' upstream credentials, for an upstream with `server.auth`.
    pub(crate) credentials: crate::access::upstream::gateway::CredentialSlot,
}

/// Start the upstream of `entry` (run as `spec` says) connecting, in the background: this
/// returns at once, serving nothing until its lists are read (see [`Upstream::settled`] and
/// [`PluginBackend::successor`]).
pub(crate) fn start(
    entry: &UpstreamEntry,
    spec: &RunSpec,
    config: &Config,
    host: Arc<dyn HostCallbacks>,
    options: StartOptions<'_>,
) -> Result<Upstream, LoadError> {
    let transport = match &entry.server.url {
        Some(url) => Transport::Http(http::Endpoint {
            url: url.clone(),
            headers: entry
                .server
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            redirects: entry.server.follow_redirects.unwrap_or_default(),
            lifecycle: http::Lifecycle::Auto,
            auth: None,
        }),
        None => stdio_transport(entry, spec, config, options.exe)?,
    };
    let (transport, callers) = per_caller(entry, transport, &options.credentials)?;
    let supervision = supervision(config, options.background, options.record);
    let runtime = runtime()?.clone();
    let link = Link::new(&entry.name, transport, host, supervision, runtime);
    if let Some((callers, listing)) = callers {
        link.serve_callers(callers);
        if let Some(listing) = listing {
            let _ = link.listing.set(listing);
        }
    }
    if options.background {
        link.announce();
    }
    link.begin();
    Ok(Upstream::of(link, unlisted(entry), None))
}

/// The callers' sessions of `entry`'s HTTP upstream with `server.auth` (their tokens from
/// `credentials`), and the authorizer its serving session lists with (`list_as: operator`: the
/// operator's connection), put on `transport`. Without `server.auth`: `transport` as it is.
#[allow(clippy::type_complexity)]
fn per_caller(
    entry: &UpstreamEntry,
    mut transport: Transport,
    credentials: &crate::access::upstream::gateway::CredentialSlot,
) -> Result<
    (
        Transport,
        Option<(callers::Callers, Option<Arc<CallerAuthorizer>>)>,
    ),
    LoadError,
> {
    let (Some(auth), Transport::Http(endpoint)) = (&entry.server.auth, &mut transport) else {
        return Ok((transport, None));
    };
    // The listing identity: the operator's connection, or the host's service identity (stage
    // 5: `list_as: service`, and `mode: client_credentials`, whose calls all go as the service).
    use crate::access::upstream::Principal;
    let lister = match auth.lister() {
        crate::config::ListAs::Operator => Some(Principal::operator()),
        crate::config::ListAs::Service => Some(Principal::service()),
        crate::config::ListAs::None => None,
    };
    let listing = lister.map(|who| {
        Arc::new(CallerAuthorizer::new(
            Arc::clone(credentials),
            who,
            &entry.name,
        ))
    });
    endpoint.auth = listing
        .clone()
        .map(|l| l as Arc<dyn crate::access::upstream::Authorizer>);
    if auth.mode == crate::config::ServerAuthMode::ClientCredentials {
        // One identity for every caller: the serving session serves the calls.
        return Ok((transport, None));
    }
    let pool = http::pool(&entry.name, endpoint.redirects)
        .map_err(|e| LoadError::Worker(format!("cannot build the HTTP client: {e}")))?;
    let callers = callers::Callers::new(Arc::clone(credentials), pool);
    Ok((transport, Some((callers, listing))))
}

/// Whether reads of URIs nothing lists may be offered to `entry`'s upstream.
fn unlisted(entry: &UpstreamEntry) -> bool {
    entry.server.unlisted_resources != Some(false)
}

/// How a link is supervised, from the configuration's limits.
fn supervision(
    config: &Config,
    background: bool,
    record: Option<(PathBuf, PathBuf)>,
) -> Supervision {
    let limits = &config.limits;
    let secs = |secs: f64, default: u64| {
        Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|d| !d.is_zero())
            .unwrap_or(Duration::from_secs(default))
    };
    Supervision {
        handshake: secs(limits.upstream_handshake_timeout_secs, 60),
        lists: listing::Bounds {
            timeout: secs(limits.upstream_list_timeout_secs, 60),
            max_pages: limits.upstream_max_list_pages.max(1),
            max_definitions: limits.upstream_max_definitions,
            max_bytes: limits.upstream_max_list_bytes,
        },
        crashes: (limits.max_crashes, secs(limits.crash_window_secs, 60)),
        retry_first: background,
        record,
    }
}

/// The child of a stdio upstream: the helper that confines it (limits; Landlock and seccomp
/// under `sandbox`) then runs the command, with the allow-listed environment.
fn stdio_transport(
    entry: &UpstreamEntry,
    spec: &RunSpec,
    config: &Config,
    exe: Option<&Path>,
) -> Result<Transport, LoadError> {
    let server = &entry.server;
    let cwd = server
        .cwd
        .clone()
        .unwrap_or_else(|| config.base_dir.clone());
    let env = upstream_env(entry, spec, config);
    let program = server
        .command
        .first()
        .ok_or_else(|| LoadError::Worker("server.command is empty".into()))?;
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .and_then(|(_, v)| v.to_str());
    let binary = confine::resolve_program(program, path, &cwd).ok_or_else(|| {
        LoadError::Worker(format!(
            "cannot find the program {program} (on PATH {} or from {})",
            path.unwrap_or("(unset)"),
            cwd.display()
        ))
    })?;
    let sandbox = (spec.isolation == Isolation::Sandbox).then(|| {
        confine::upstream_sandbox(
            config,
            &entry.name,
            &binary,
            &server.command,
            &cwd,
            server.cwd.as_deref(),
        )
    });
    if sandbox.is_some() {
        // The data directory is granted writable: make it exist, as for plugin workers.
        let _ = std::fs::create_dir_all(config.plugin_data_dir(&entry.name));
    }
    let confinement = confine::ExecConfinement {
        limits: spec.limits.as_ref().map(wire_limits),
        temp_dir: sandbox
            .as_ref()
            .map(|_| confine::temp_dir(config, &entry.name)),
        sandbox,
    };
    let sandboxed = confinement.sandbox.is_some();
    let mut argv = confined_argv(exe, spec.isolation, &confinement, binary)?;
    argv.extend(server.command.iter().skip(1).map(OsString::from));
    Ok(Transport::Stdio {
        argv,
        env,
        cwd,
        sandboxed,
    })
}

/// A stdio upstream's environment: the host's, filtered to what a worker of the same isolation
/// keeps, then `server.env`.
fn upstream_env(
    entry: &UpstreamEntry,
    spec: &RunSpec,
    config: &Config,
) -> Vec<(OsString, OsString)> {
    let mut keep = worker_env(spec, config, &entry.name);
    if spec.isolation == Isolation::Sandbox {
        keep.extend(SANDBOX_ENV.iter().map(|s| (*s).to_owned()));
    }
    let filter = WorkerCommand {
        exe: PathBuf::new(),
        env: keep,
        max_frame: 0,
    };
    let mut env = filter.environment(std::env::vars_os());
    env.extend(
        entry
            .server
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    env
}

/// The start of the child's command line: `mcp-host upstream-exec --confine <json> -- <binary>`
/// when the host's executable is known, else `binary` itself (refused under `sandbox`, which
/// needs the helper).
fn confined_argv(
    exe: Option<&Path>,
    isolation: Isolation,
    confinement: &confine::ExecConfinement,
    binary: PathBuf,
) -> Result<Vec<OsString>, LoadError> {
    match exe {
        Some(exe) => {
            let json = serde_json::to_string(confinement).unwrap_or_default();
            Ok(vec![
                exe.as_os_str().to_owned(),
                "upstream-exec".into(),
                "--confine".into(),
                json.into(),
                "--".into(),
                binary.into_os_string(),
            ])
        }
        None if isolation == Isolation::Sandbox => Err(LoadError::Sandbox(
            "sandbox refused: confining an upstream needs the mcp-host executable \
             (HostOptions::probe_exe)"
                .into(),
        )),
        None => Ok(vec![binary.into_os_string()]),
    }
}

/// What a one-shot command waits for an upstream beyond its handshake and lists timeouts.
const SETTLE_MARGIN: Duration = Duration::from_secs(5);

impl Upstream {
    /// The version of `link`'s upstream serving `manifest` (its lists not read yet: nothing).
    fn of(link: Arc<Link>, unlisted: bool, manifest: Option<Manifest>) -> Upstream {
        let manifest = manifest.unwrap_or_else(|| listing::empty(link.name()));
        Upstream {
            build: BuildInfo {
                plugin: link.name().to_owned(),
                plugin_version: manifest.version.clone(),
                ..BuildInfo::host()
            },
            manifest: Arc::new(manifest),
            link,
            unlisted,
            owns_link: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Wait (on this thread, never the upstream runtime's) until the upstream is connected or
    /// has failed — within its handshake and lists timeouts — and from then on offer its list
    /// changes to the host: this version, serving the lists read (a one-shot command reads the
    /// upstreams' real state; see `mcp-host list`).
    pub(crate) fn settled(self) -> Upstream {
        let supervision = &self.link.supervision;
        let until =
            Instant::now() + supervision.handshake + supervision.lists.timeout + SETTLE_MARGIN;
        self.link.wait_settled(until);
        self.link.announce();
        match self.link.latest() {
            Some(manifest) => Upstream::of(Arc::clone(&self.link), self.unlisted, Some(manifest)),
            None => self,
        }
    }

    /// Forward tool call `index` or an envelope (resource read, prompt, completion).
    async fn forward(
        link: Arc<Link>,
        manifest: Arc<Manifest>,
        index: u32,
        args: String,
        call: Arc<CallState>,
        trace: Option<TraceContext>,
    ) -> Result<Returned, String> {
        let trace = trace.as_ref();
        if index == ENVELOPE_INDEX {
            let envelope: CallEnvelope =
                serde_json::from_str(&args).map_err(|e| format!("unreadable request: {e}"))?;
            let outcome = envelope_outcome(&link, &manifest, envelope, &call, trace).await;
            return serde_json::to_value(&outcome)
                .map(Returned::Json)
                .map_err(|e| e.to_string());
        }
        let tool = manifest
            .tools
            .get(index as usize)
            .ok_or_else(|| format!("no tool number {index}"))?;
        let arguments = listing::arguments(&args)?;
        call_tool(&link, &tool.name, arguments, &call, trace).await
    }

    /// The call as a future, driven by whoever awaits it (the executor's task, holding the
    /// call's permits): nothing runs before it is first polled, and no task of its own is
    /// spawned — its request goes to the upstream's connection, on the upstream runtime, and the
    /// answer wakes the caller's task straight.
    fn future(&self, index: u32, args: &str, call: &Arc<CallState>) -> CallFuture {
        let (link, manifest) = (Arc::clone(&self.link), Arc::clone(&self.manifest));
        let (args, call) = (args.to_owned(), Arc::clone(call));
        let trace = trace_context(&call);
        Box::pin(async move {
            Self::forward(link, manifest, index, args, call, trace)
                .await
                .map_err(PluginCallError::Plugin)
        })
    }
}

/// How many `input_required` rounds a 2026-07-28 upstream may ask for in one request.
const MAX_UPSTREAM_ROUNDS: usize = 8;

/// Why an upstream request (with its `input_required` rounds) produced no result.
enum Unanswered {
    /// The request failed (see [`Failure`]).
    Failed(Failure),
    /// The upstream asked for input and the client's answers could not be had (in a 2026 round,
    /// the questions went into the round's `input_required` result), or it asked too often.
    Asked(String),
}

/// Send `request` for `call`: the upstream's result as JSON, without the `resultType` the 2026
/// revision adds (the host writes its own for its clients). The questions of a 2026-07-28
/// upstream's `input_required` result are put to the calling client like a plugin's (a 2025
/// request, or this call's own round) and the request made again with the answers and the
/// upstream's `requestState`.
async fn answered(
    link: &Arc<Link>,
    mut request: ClientRequest,
    call: &Arc<CallState>,
    trace: Option<&TraceContext>,
) -> Result<Value, Unanswered> {
    let name = link.name();
    let mut consents = 0;
    for _ in 0..MAX_UPSTREAM_ROUNDS {
        let result = match link.request(&request, call, trace).await {
            Err(Failure::Needs(required, message)) => {
                return Err(needs(call, name, &required, &message).await);
            }
            // The caller's own authorization first (`server.auth`), then the request again.
            Err(Failure::NeedsConsent(need)) => {
                consents += 1;
                consent::authorize(link, call, need, consents).await?;
                continue;
            }
            result => result,
        };
        let mut value = result_json(result.map_err(Unanswered::Failed)?);
        if value.get("resultType").and_then(Value::as_str) != Some("input_required") {
            if let Value::Object(map) = &mut value {
                map.remove("resultType");
                own_server_info(map);
            }
            return Ok(value);
        }
        let asked: rmcp::model::InputRequiredResult = serde_json::from_value(value)
            .map_err(|e| Unanswered::Asked(format!("upstream {name} asked unreadably: {e}")))?;
        let requests = match serde_json::to_value(asked.input_requests.unwrap_or_default()) {
            Ok(Value::Object(requests)) => requests,
            _ => serde_json::Map::new(),
        };
        let answers = relay::put(call, requests)
            .await
            .map_err(|e| Unanswered::Asked(format!("upstream {name} asked: {e}")))?;
        let (answers, state) = (Some(answers.into_iter().collect()), asked.request_state);
        match &mut request {
            ClientRequest::CallToolRequest(r) => {
                (r.params.input_responses, r.params.request_state) = (answers, state);
            }
            ClientRequest::GetPromptRequest(r) => {
                (r.params.input_responses, r.params.request_state) = (answers, state);
            }
            ClientRequest::ReadResourceRequest(r) => {
                (r.params.input_responses, r.params.request_state) = (answers, state);
            }
            _ => {
                return Err(Unanswered::Asked(format!(
                    "upstream {name} asked for input in answer to a request that cannot carry it"
                )));
            }
        }
    }
    Err(Unanswered::Asked(format!(
        "upstream {name} asked for input more than {MAX_UPSTREAM_ROUNDS} times in one request"
    )))
}

/// The upstream refused a request for capabilities (`required`) the calling client did not
/// declare: the call fails as a plugin's call fails when it asks a question needing one — the
/// question for each capability the client lacks is put to it and refused, so that a 2026 client
/// gets -32021 naming them (see `protocol::input::round_end`), where a question the client could
/// answer is never asked.
async fn needs(call: &Arc<CallState>, name: &str, required: &Value, message: &str) -> Unanswered {
    let declared = call
        .input
        .as_ref()
        .map(|input| input.capabilities().clone())
        .unwrap_or_default();
    let lacking: serde_json::Map<String, Value> = [
        ("sampling", "sampling/createMessage", "tools"),
        ("elicitation", "elicitation/create", "url"),
        ("roots", "roots/list", ""),
    ]
    .into_iter()
    .filter_map(|(capability, method, sub)| {
        let wanted = required.get(capability)?;
        let params = match wanted.get(sub) {
            Some(_) if sub == "url" => json!({"mode": "url"}),
            Some(_) => json!({ sub: {} }),
            None => json!({}),
        };
        let lacks = !mcp_plugin_sdk::wire::declares(&declared, method, &params);
        lacks.then(|| {
            (
                capability.to_owned(),
                json!({"method": method, "params": params}),
            )
        })
    })
    .collect();
    if !lacking.is_empty() {
        let _ = relay::put(call, lacking).await;
    }
    Unanswered::Asked(format!(
        "upstream {name} refused: it needs a client capability the caller did not declare \
         ({message})"
    ))
}

/// Where a result's `_meta` names the server that made it.
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The host's own `serverInfo` where an upstream's result names its server (`_meta`'s
/// `io.modelcontextprotocol/serverInfo`, which 2026 servers put in every result): a client is
/// told of the server it speaks to, the host, in every era — a 2025 session's results and `mcp-host
/// call`'s would pass the upstream's on (a 2026 response is given the host's as it is written).
/// One lookup when there is none; nothing else of the result is touched.
fn own_server_info(result: &mut serde_json::Map<String, Value>) {
    static HOST: OnceLock<Value> = OnceLock::new();
    if let Some(Value::Object(meta)) = result.get_mut("_meta")
        && let Some(info) = meta.get_mut(META_SERVER_INFO)
    {
        *info = HOST
            .get_or_init(|| json!({"name": "mcp-host", "version": env!("CARGO_PKG_VERSION")}))
            .clone();
    }
}

/// An upstream's result as JSON: as it came (see [`pipe`]), or encoded from rmcp's types (an
/// HTTP upstream's, and a stdio one's rmcp could not match by id).
fn result_json(result: ServerResult) -> Value {
    match result {
        ServerResult::CustomResult(rmcp::model::CustomResult(value)) => value,
        typed => serde_json::to_value(typed).unwrap_or_default(),
    }
}

/// Call tool `name` upstream with `arguments`: its result as the JSON it came as (a tool error
/// result when the upstream refused the call or its questions went unanswered).
async fn call_tool(
    link: &Arc<Link>,
    name: &str,
    arguments: serde_json::Map<String, Value>,
    call: &Arc<CallState>,
    trace: Option<&TraceContext>,
) -> Result<Returned, String> {
    let failed = |message: String| Ok(Returned::Json(crate::plugins::call::error_result(&message)));
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
    let request = ClientRequest::CallToolRequest(Request::new(params));
    match answered(link, request, call, trace).await {
        Ok(result) => Ok(Returned::Json(result)),
        Err(Unanswered::Failed(Failure::Rpc(code, message))) => failed(format!(
            "upstream {} refused the call ({}): {message}",
            link.name(),
            code.0
        )),
        Err(Unanswered::Failed(Failure::Refused(why))) => failed(why),
        Err(Unanswered::Failed(e)) => Err(e.to_string()),
        Err(Unanswered::Asked(why)) => failed(why),
    }
}

/// The trace context an upstream request continues: the host's span for the call when spans
/// are exported (the upstream's spans then sit under the host's), else the caller's own
/// `traceparent`, passed on as it came.
fn trace_context(call: &CallState) -> Option<TraceContext> {
    crate::telemetry::trace::propagation(&tracing::Span::current())
        .or_else(|| call.request.trace.clone())
}

/// What an envelope (resource read, prompt, completion) comes to upstream; a 2026-07-28
/// upstream's questions in answer to a resource read or a prompt go to the client as a tool
/// call's do ([`answered`]).
async fn envelope_outcome(
    link: &Arc<Link>,
    manifest: &Manifest,
    envelope: CallEnvelope,
    call: &Arc<CallState>,
    trace: Option<&TraceContext>,
) -> EnvelopeOutcome {
    let failed = |kind, message: String| EnvelopeOutcome::Error(EnvelopeError { kind, message });
    let what = envelope_method(&envelope);
    let request = match envelope_request(manifest, &envelope) {
        Ok(request) => request,
        Err(error) => return EnvelopeOutcome::Error(error),
    };
    match answered(link, request, call, trace).await {
        Ok(mut value) => {
            if matches!(envelope, CallEnvelope::Complete { .. }) {
                value = value
                    .get("completion")
                    .cloned()
                    .unwrap_or(json!({"values": []}));
            }
            EnvelopeOutcome::Ok(value)
        }
        Err(Unanswered::Failed(Failure::Rpc(code, message))) => {
            failed(error_kind(what, code), message)
        }
        Err(Unanswered::Failed(e)) => failed(EnvelopeErrorKind::Failed, e.to_string()),
        Err(Unanswered::Asked(why)) => failed(EnvelopeErrorKind::Failed, why),
    }
}

/// What an upstream's JSON-RPC error `code` to `method` means to the host. "Not found" —
/// which decides whether a read of a URI nothing lists goes on to the next upstream — is
/// -32002, or for `resources/read` the invalid-params error some SDKs send for an unknown URI
/// (the Python SDK's) and "method not found" (a server without resources).
fn error_kind(method: &str, code: ErrorCode) -> EnvelopeErrorKind {
    match code {
        ErrorCode::RESOURCE_NOT_FOUND => EnvelopeErrorKind::NotFound,
        ErrorCode::INVALID_PARAMS | ErrorCode::METHOD_NOT_FOUND if method == "resources/read" => {
            EnvelopeErrorKind::NotFound
        }
        ErrorCode::INVALID_PARAMS => EnvelopeErrorKind::Invalid,
        _ => EnvelopeErrorKind::Failed,
    }
}

/// The MCP method an envelope is forwarded as.
fn envelope_method(envelope: &CallEnvelope) -> &'static str {
    match envelope {
        CallEnvelope::ReadResource { .. } => "resources/read",
        CallEnvelope::GetPrompt { .. } => "prompts/get",
        CallEnvelope::Complete { .. } => "completion/complete",
    }
}

/// The upstream request an envelope makes; the error when it names an entry the upstream did
/// not list, or its parameters do not make a valid request.
fn envelope_request(
    manifest: &Manifest,
    envelope: &CallEnvelope,
) -> Result<ClientRequest, EnvelopeError> {
    let invalid = |e: serde_json::Error| EnvelopeError {
        kind: EnvelopeErrorKind::Invalid,
        message: format!("{}: {e}", envelope_method(envelope)),
    };
    match envelope {
        CallEnvelope::ReadResource { uri, .. } => serde_json::from_value(json!({"uri": uri}))
            .map(|p| ClientRequest::ReadResourceRequest(Request::new(p)))
            .map_err(invalid),
        CallEnvelope::GetPrompt { index, arguments } => {
            serde_json::from_value(prompt_params(manifest, *index, arguments)?)
                .map(|p| ClientRequest::GetPromptRequest(Request::new(p)))
                .map_err(invalid)
        }
        CallEnvelope::Complete {
            target,
            index,
            argument,
            value,
            context,
        } => {
            let params = complete_params(manifest, *target, *index, argument, value, context)?;
            serde_json::from_value(params)
                .map(|p| ClientRequest::CompleteRequest(Request::new(p)))
                .map_err(invalid)
        }
    }
}

/// The envelope's entry number `index` is not in the upstream's lists.
fn no_entry(what: &str, index: u32) -> EnvelopeError {
    EnvelopeError {
        kind: EnvelopeErrorKind::Failed,
        message: format!("no {what} number {index}"),
    }
}

/// `prompts/get`'s parameters for prompt number `index`: prompt arguments are strings.
fn prompt_params(
    manifest: &Manifest,
    index: u32,
    arguments: &serde_json::Map<String, Value>,
) -> Result<Value, EnvelopeError> {
    let prompt = manifest
        .prompts
        .get(index as usize)
        .ok_or_else(|| no_entry("prompt", index))?;
    let arguments: serde_json::Map<String, Value> = arguments
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), Value::String(text))
        })
        .collect();
    Ok(json!({"name": prompt.name, "arguments": arguments}))
}

/// `completion/complete`'s parameters: the prompt or resource (`target` number `index`) it
/// completes for, the argument and its value, and the context's arguments when there are any.
fn complete_params(
    manifest: &Manifest,
    target: CompletionTarget,
    index: u32,
    argument: &str,
    value: &str,
    context: &serde_json::Map<String, Value>,
) -> Result<Value, EnvelopeError> {
    let reference = match target {
        CompletionTarget::Prompt => manifest
            .prompts
            .get(index as usize)
            .map(|p| json!({"type": "ref/prompt", "name": p.name})),
        CompletionTarget::Resource => manifest
            .resources
            .get(index as usize)
            .map(|r| json!({"type": "ref/resource", "uri": r.uri})),
    };
    let reference = reference.ok_or_else(|| no_entry("entry", index))?;
    let mut params = json!({
        "ref": reference,
        "argument": {"name": argument, "value": value},
    });
    if !context.is_empty() {
        params["context"] = json!({"arguments": context});
    }
    Ok(params)
}

impl PluginBackend for Upstream {
    fn build(&self) -> &BuildInfo {
        &self.build
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn call_blocking(
        &self,
        index: u32,
        args: &str,
        call: &Arc<CallState>,
    ) -> Result<String, PluginCallError> {
        let future = self.future(index, args, call);
        let rt = runtime().map_err(|e| PluginCallError::Plugin(e.to_string()))?;
        let returned = link::block_on(rt, future).unwrap_or_else(|| {
            Err(PluginCallError::Plugin(
                "the upstream runtime stopped".into(),
            ))
        });
        returned.map(Returned::into_text)
    }

    fn call_async(&self, index: u32, args: &str, call: &Arc<CallState>) -> Option<CallFuture> {
        Some(self.future(index, args, call))
    }

    fn quarantined(&self) -> Option<String> {
        self.link.quarantined()
    }

    fn connection(&self) -> Option<Connection> {
        Some(self.link.connection())
    }

    fn reads_unlisted_resources(&self) -> bool {
        self.unlisted && self.link.advertises_resources()
    }

    fn shutdown(&self) {
        if self.owns_link.load(std::sync::atomic::Ordering::Acquire) {
            self.link.retire();
        }
    }

    fn successor(&self) -> Option<Arc<dyn PluginBackend>> {
        let latest = self.link.latest()?;
        if latest == *self.manifest {
            return None;
        }
        // The successor takes the connection over: retiring this version must not end it.
        self.owns_link
            .store(false, std::sync::atomic::Ordering::Release);
        Some(Arc::new(Upstream::of(
            Arc::clone(&self.link),
            self.unlisted,
            Some(latest),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstreams_not_found_answers_to_a_read_are_told_apart_from_its_failures() {
        use EnvelopeErrorKind::{Failed, Invalid, NotFound};
        let read = "resources/read";
        assert_eq!(error_kind(read, ErrorCode::RESOURCE_NOT_FOUND), NotFound);
        assert_eq!(error_kind(read, ErrorCode::INVALID_PARAMS), NotFound);
        assert_eq!(error_kind(read, ErrorCode::METHOD_NOT_FOUND), NotFound);
        assert_eq!(error_kind(read, ErrorCode::INTERNAL_ERROR), Failed);
        assert_eq!(
            error_kind("prompts/get", ErrorCode::INVALID_PARAMS),
            Invalid
        );
        assert_eq!(
            error_kind("prompts/get", ErrorCode::METHOD_NOT_FOUND),
            Failed
        );
    }
}
