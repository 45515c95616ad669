//! `mcp-host serve`: the host on stdio or Streamable HTTP, with hot reload, SIGHUP rescans and a
//! graceful shutdown on SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use mcp_host::host::watch::{self, Watcher};
use mcp_host::protocol::Protocol;
use mcp_host::telemetry::logging;
use mcp_host::transport;
use mcp_host::{Config, Host};
use mcp_plugin_sdk::UserInfo;

/// What `serve` was asked for.
pub(crate) struct ServeArgs {
    pub(crate) listen: Option<SocketAddr>,
    pub(crate) stdio: bool,
    pub(crate) agent: Option<String>,
    pub(crate) watch: bool,
}

/// Run the server until stdin closes (stdio) or a shutdown signal (HTTP): protect stdout, read
/// the configuration and start logging, build the runtime, start the host on it, serve, then
/// shut down.
pub(crate) fn serve(config_path: Option<&Path>, args: ServeArgs) -> anyhow::Result<ExitCode> {
    // stdout belongs to the protocol: take it before anything (a plugin above all) can print.
    let protocol_out = if args.stdio {
        Some(transport::stdout_guard::take_stdout().context("cannot protect stdout")?)
    } else {
        None
    };
    let mut config = Config::load(config_path)?;
    // Flushes the spans still buffered when serving ends.
    let logging = logging::init("info", config.log_format, &config.traces)?;
    if logging.tracing()
        && let Some(endpoint) = &config.traces.otlp_endpoint
    {
        tracing::info!("exporting traces to {endpoint}");
    }
    // The command line's layer: over the configuration now and at every reload.
    let overrides = mcp_host::config::Overrides {
        listen: args.listen,
    };
    overrides.apply(&mut config);
    let runtime = runtime_for(args.stdio)?;
    let host = start_host(&runtime, &config, overrides)?;
    if let Some(name) = &args.agent {
        host.access()
            .agent(name)
            .with_context(|| format!("--agent {name}: no such agent in the configuration"))?;
    }
    let watcher = start_watching(&host, args.watch);
    let result = runtime.block_on(serve_until_stopped(
        &host,
        &config,
        protocol_out,
        args.agent,
        watcher.clone(),
    ));
    host.shutdown();
    runtime.shutdown_timeout(Duration::from_millis(200));
    result?;
    tracing::info!("stopped");
    drop(logging);
    Ok(ExitCode::SUCCESS)
}

/// The async runtime. stdio serves one client, whose requests mostly finish on the thread that
/// reads them (tool calls run on the executor's pool either way): the runtime needs no threads of
/// its own. A multi-threaded runtime started at once would make every later memory-map change of
/// start-up interrupt its idle workers' CPUs.
fn runtime_for(stdio: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if stdio {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(mcp_host::exec::cores());
        builder
    };
    builder.enable_all().thread_name("mcp-host").build()
}

/// Start the host on a thread of the runtime's blocking pool, while the runtime runs: plugin
/// workers' channels are read on it, their first answers included.
fn start_host(
    runtime: &tokio::runtime::Runtime,
    config: &Config,
    overrides: mcp_host::config::Overrides,
) -> anyhow::Result<Host> {
    let options = mcp_host::HostOptions {
        // Serving: plugins that allow it load at their first call.
        load_on_first_call: true,
        overrides,
        ..crate::audited_host_options(config)?
    };
    let start = {
        let config = config.clone();
        move || Host::start(config, options)
    };
    Ok(runtime
        .block_on(async { tokio::task::spawn_blocking(start).await })
        .context("starting the host")??)
}

/// Serve on stdio (`protocol_out`) or HTTP, with the store, SIGHUP rescans, the metrics listener
/// and the announcement relay, until the transport ends; then stop the tasks.
async fn serve_until_stopped(
    host: &Host,
    config: &Config,
    protocol_out: Option<std::fs::File>,
    agent: Option<String>,
    watcher: Option<Arc<Watcher>>,
) -> anyhow::Result<()> {
    let grace =
        Duration::try_from_secs_f64(config.shutdown_grace_secs).unwrap_or(Duration::from_secs(10));
    let protocol = open_store(host, config).await?;
    spawn_sighup_rescan(host.clone(), watcher);
    if let Some(addr) = config.metrics_listen {
        let listener = transport::http::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (metrics_listen)"))?;
        tracing::info!("metrics on http://{}/metrics", listener.local_addr()?);
        tokio::spawn(transport::http::metrics::serve(host.clone(), listener));
    }
    let relay = {
        let protocol = protocol.clone();
        tokio::spawn(async move { protocol.relay_announcements().await })
    };
    let served = match protocol_out {
        Some(out) => serve_stdio(protocol.clone(), out, config, agent, grace).await,
        None => serve_http(protocol.clone(), config, grace).await,
    };
    relay.abort();
    protocol.stop_tasks().await;
    served
}

/// The protocol engine over `host` with the configured store (tasks; legacy sessions and events
/// between replicas with Redis).
async fn open_store(host: &Host, config: &Config) -> anyhow::Result<Protocol> {
    let replica = mcp_host::store::bus::replica_name(config.replica.as_deref());
    // A shared store without request_state.keys is refused by `open` (its records could not be
    // authenticated).
    let store = mcp_host::store::Store::open(&config.store, &replica, &config.request_state.keys)
        .await
        .context("cannot open the task store (the `store` key)")?;
    tracing::info!("replica {replica}; task store: {}", store.describe());
    Ok(Protocol::with_store(host.clone(), store))
}

/// Watch beside serving: the watches are set up on the watcher's thread, off the start-up path, and
/// its first act once they are in place is a full reload (configuration and files), which applies
/// a change made in between.
fn start_watching(host: &Host, enabled: bool) -> Option<Arc<Watcher>> {
    if !enabled {
        return None;
    }
    match watch::watch_in_background(host.clone()) {
        Ok(w) => Some(Arc::new(w)),
        Err(e) => {
            tracing::warn!("hot reload disabled: cannot start the watcher: {e}");
            None
        }
    }
}

async fn serve_stdio(
    protocol: Protocol,
    out: std::fs::File,
    config: &Config,
    agent: Option<String>,
    grace: Duration,
) -> anyhow::Result<()> {
    let user = config
        .stdio_user
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .filter(|u| !u.is_empty());
    if let Some(u) = &user
        && !mcp_host::access::auth::valid_user_id(u)
    {
        anyhow::bail!(
            "stdio_user {u:?} has leading or trailing whitespace: user ids are taken exactly as \
             given, so fix the configuration (or $USER)"
        );
    }
    match &user {
        Some(u) => tracing::info!("serving MCP on stdio (caller: {u})"),
        None => tracing::warn!(
            "serving MCP on stdio without a caller: $USER is not set and the configuration has \
             no `stdio_user`, so tools that take the caller (UserInfo) refuse every call; set \
             `stdio_user: NAME` in the configuration"
        ),
    }
    let options = transport::stdio::StdioOptions {
        caller: user.map(|u| {
            let mut caller = UserInfo::new(u);
            caller.agent = agent.clone();
            caller
        }),
        agent,
        max_message_bytes: config.http.max_body_bytes,
        grace,
    };
    Ok(transport::stdio::serve(protocol, std::io::stdin(), out, options).await?)
}

async fn serve_http(protocol: Protocol, config: &Config, grace: Duration) -> anyhow::Result<()> {
    let listener = transport::http::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    log_authentication(&config.auth);
    tracing::info!("listening on http://{addr}{}", config.http.path);
    let options = transport::http::HttpOptions {
        settings: config.http.clone(),
        grace,
        metrics: config.metrics_listen.is_none(),
        ..Default::default()
    };
    Ok(transport::http::serve(protocol, listener, options, shutdown_signal()).await?)
}

/// Say at start what authentication is in force: the credentials configured, and whether
/// anonymous calls are refused (a warning when credentials are configured but anonymous calls are
/// still allowed, or when every call is refused for want of any credential).
fn log_authentication(auth: &mcp_host::config::AuthSettings) {
    let what = credentials(auth);
    let credentials = !what.is_empty();
    let what = if credentials {
        what.join(", ")
    } else {
        "no credentials".to_owned()
    };
    match (credentials, auth.require_auth) {
        (true, true) => {
            tracing::info!("authentication: {what}; anonymous calls refused (auth.require_auth)")
        }
        (true, false) => tracing::warn!(
            "authentication: {what}; anonymous calls allowed: tools that do not take the caller \
             answer anyone (set `auth.require_auth: true` to refuse them)"
        ),
        (false, true) => tracing::warn!(
            "authentication: {what}, but auth.require_auth is set: every call is refused (add \
             `auth.secrets` from `mcp-host secret new`, or `auth.jwt`)"
        ),
        (false, false) => tracing::info!("authentication: {what}; anonymous calls allowed"),
    }
}

/// The credentials `auth` accepts, each kind counted with its own noun: `2 personal secrets`, `a
/// JWT HS256 secret`, `1 JWT public key`, `JWKS file PATH`; none when it accepts none.
fn credentials(auth: &mcp_host::config::AuthSettings) -> Vec<String> {
    let counted = |n: usize, noun: &str| format!("{n} {noun}{}", if n == 1 { "" } else { "s" });
    let mut kinds = Vec::new();
    if !auth.secrets.is_empty() {
        kinds.push(counted(auth.secrets.len(), "personal secret"));
    }
    let jwt = &auth.jwt;
    if jwt.hs256_secret.as_ref().is_some_and(|s| !s.is_empty()) {
        kinds.push("a JWT HS256 secret".to_owned());
    }
    if !jwt.public_keys.is_empty() {
        kinds.push(counted(jwt.public_keys.len(), "JWT public key"));
    }
    if let Some(file) = &jwt.jwks_file {
        kinds.push(format!("JWKS file {}", file.display()));
    }
    kinds
}

/// SIGHUP: rescan the tool directories and re-read the configuration.
fn spawn_sighup_rescan(host: Host, watcher: Option<Arc<Watcher>>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: rescanning");
            host.retry_quarantined();
            match &watcher {
                Some(w) => w.rescan(),
                None => {
                    let host = host.clone();
                    let _ = tokio::task::spawn_blocking(move || host.reload()).await;
                }
            }
        }
    });
    #[cfg(not(unix))]
    let _ = (host, watcher);
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(json: serde_json::Value) -> mcp_host::config::AuthSettings {
        serde_json::from_value(json).expect("auth settings")
    }

    #[test]
    fn the_authentication_summary_counts_each_kind_with_its_own_noun() {
        let secret = |user: &str| serde_json::json!({"sha256": "00", "user": user});
        assert!(credentials(&auth(serde_json::json!({}))).is_empty());
        assert_eq!(
            credentials(&auth(serde_json::json!({"secrets": [secret("a")]}))),
            ["1 personal secret"]
        );
        assert_eq!(
            credentials(&auth(serde_json::json!({
                "secrets": [secret("a"), secret("b")],
                "jwt": {"hs256_secret": "s", "public_keys": ["k1", "k2"]},
            }))),
            [
                "2 personal secrets",
                "a JWT HS256 secret",
                "2 JWT public keys"
            ]
        );
    }
}
