//! The `mcp-host` command line: wiring only; the work lives in the library.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use mcp_host::exec::CallEvent;
use mcp_host::host::CallOptions;
use mcp_host::registry::Status;
use mcp_host::{Config, Host, HostOptions};
use mcp_plugin_sdk::UserInfo;
use serde_json::Value;

#[derive(Parser, Debug)]
#[command(
    name = "mcp-host",
    version,
    about = "Serve a folder of compiled plugins as MCP tools"
)]
struct Cli {
    /// Configuration file (default: config/mcp-host.yaml when it exists).
    #[arg(long, global = true, env = "MCP_HOST_CONFIG")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum SecretCommand {
    /// Print a fresh secret once, and the config entry (its hash) to add under `auth.secrets`.
    New {
        /// The user the secret authenticates.
        #[arg(long)]
        user: String,
        /// Bind the secret to this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Lifetime, e.g. `30d`, `12h`, `2w`.
        #[arg(long)]
        expires: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve MCP: Streamable HTTP (default 127.0.0.1:18080/mcp) or stdio.
    Serve {
        /// HTTP address to listen on (overrides the config's `listen`).
        #[arg(long, conflicts_with = "stdio")]
        listen: Option<std::net::SocketAddr>,
        /// Serve newline-delimited JSON-RPC on stdin/stdout instead of HTTP.
        #[arg(long)]
        stdio: bool,
        /// With --stdio: serve this agent's view of the tools.
        #[arg(long, requires = "stdio")]
        agent: Option<String>,
        /// Do not watch the tool directories and the config file for changes (SIGHUP still rescans).
        #[arg(long)]
        no_watch: bool,
    },
    /// Manage personal MCP secrets.
    Secret {
        #[command(subcommand)]
        command: SecretCommand,
    },
    /// List every discovered tool with its plugin, directory, service and status.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Test-load one plugin file and print its manifest, or the exact error.
    Check {
        /// The plugin file.
        file: PathBuf,
    },
    /// Call a tool in-process and print its result (for plugin authors).
    Call {
        /// The tool name.
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Call as this user (for tools that take `UserInfo`).
        #[arg(long)]
        user: Option<String>,
    },
    /// (internal) Probe plugin files in this process; used by the host before loading.
    #[command(hide = true)]
    Probe {
        /// Files to probe.
        files: Vec<PathBuf>,
    },
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn host_options() -> HostOptions {
    HostOptions {
        probe_exe: std::env::current_exe().ok(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcp-host: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The real stdout, for this command's output only: fd 1 is pointed at stderr first, so anything a
/// plugin prints lands there instead of in machine-readable output.
fn protected_stdout() -> Box<dyn std::io::Write> {
    mcp_host::transport::stdout_guard::take_stdout()
        .map(|f| Box::new(std::io::LineWriter::new(f)) as Box<dyn std::io::Write>)
        .unwrap_or_else(|_| Box::new(std::io::stdout()))
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Serve {
        listen,
        stdio,
        agent,
        no_watch,
    } = cli.command
    {
        return serve(cli.config.as_deref(), listen, stdio, agent, !no_watch);
    }
    if let Command::Secret {
        command:
            SecretCommand::New {
                user,
                agent,
                expires,
            },
    } = cli.command
    {
        return new_secret(&user, agent.as_deref(), expires.as_deref());
    }
    let mut out = protected_stdout();
    match cli.command {
        Command::Serve { .. } | Command::Secret { .. } => unreachable!("handled above"),
        Command::Probe { files } => {
            mcp_host::plugins::probe::run_probe_child(&files, &mut out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::List { json } => {
            init_logging("warn");
            let config = Config::load(cli.config.as_deref())?;
            let host = Host::start(config, host_options())?;
            print_list(&host, json, &mut out)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { file } => {
            init_logging("warn");
            let config = Config::load(cli.config.as_deref())?;
            check(&config, &file, &mut out)
        }
        Command::Call { tool, args, user } => {
            init_logging("warn");
            let config = Config::load(cli.config.as_deref())?;
            let args: Value = serde_json::from_str(&args).context("--args is not valid JSON")?;
            let host = Host::start(config, host_options())?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let opts = CallOptions {
                caller: user.map(UserInfo::new),
                events: Some(std::sync::Arc::new(|event| match event {
                    CallEvent::Progress {
                        progress,
                        total,
                        message,
                    } => eprintln!(
                        "progress: {progress}{} {}",
                        total.map(|t| format!("/{t}")).unwrap_or_default(),
                        message.unwrap_or_default()
                    ),
                    CallEvent::Log { level, message, .. } => {
                        eprintln!("log [{}]: {message}", level.as_str())
                    }
                })),
                ..CallOptions::default()
            };
            let result = runtime.block_on(host.call(&tool, Some(args), opts));
            host.shutdown();
            match result {
                Ok(result) => {
                    writeln!(out, "{}", serde_json::to_string_pretty(&result)?)?;
                    let failed = result.get("isError").and_then(Value::as_bool) == Some(true);
                    Ok(if failed {
                        ExitCode::FAILURE
                    } else {
                        ExitCode::SUCCESS
                    })
                }
                Err(e) => {
                    eprintln!("mcp-host: {e}");
                    Ok(ExitCode::from(2))
                }
            }
        }
    }
}

fn new_secret(user: &str, agent: Option<&str>, expires: Option<&str>) -> anyhow::Result<ExitCode> {
    use mcp_host::access::auth;
    let secret = auth::new_secret().map_err(|e| anyhow::anyhow!("no OS randomness: {e}"))?;
    let expires_at = match expires {
        Some(lifetime) => {
            let secs = auth::parse_lifetime(lifetime)
                .with_context(|| format!("--expires {lifetime:?}: use e.g. 30d, 12h, 2w"))?;
            let at = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(i64::try_from(secs)?))?;
            Some(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        }
        None => None,
    };
    let mut entry = format!(
        "    - {{ sha256: \"{}\", user: {}",
        auth::hash_secret(&secret),
        serde_json::to_string(user)?
    );
    if let Some(agent) = agent {
        entry.push_str(&format!(", agent: {}", serde_json::to_string(agent)?));
    }
    if let Some(at) = &expires_at {
        entry.push_str(&format!(", expires: \"{at}\""));
    }
    entry.push_str(" }");
    let mut out = protected_stdout();
    writeln!(
        out,
        "Secret (shown once; the config keeps only its hash):\n\n    {secret}\n"
    )?;
    writeln!(
        out,
        "Add to your config file:\n\nauth:\n  secrets:\n{entry}"
    )?;
    writeln!(
        out,
        "\nClients send it as `Authorization: Bearer {}…`.",
        &secret[..8]
    )?;
    Ok(ExitCode::SUCCESS)
}

fn serve(
    config_path: Option<&std::path::Path>,
    listen: Option<std::net::SocketAddr>,
    stdio: bool,
    agent: Option<String>,
    watch: bool,
) -> anyhow::Result<ExitCode> {
    use mcp_host::protocol::Protocol;
    use mcp_host::transport;
    use std::time::Duration;

    // stdout belongs to the protocol: take it before anything (a plugin above all) can print.
    let protocol_out = if stdio {
        Some(mcp_host::transport::stdout_guard::take_stdout().context("cannot protect stdout")?)
    } else {
        None
    };
    init_logging("info");
    let mut config = Config::load(config_path)?;
    if let Some(addr) = listen {
        config.listen = addr;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("mcp-host")
        .build()?;
    let host = Host::start(config.clone(), host_options())?;
    if let Some(name) = &agent {
        host.access()
            .agent(name)
            .with_context(|| format!("--agent {name}: no such agent in the configuration"))?;
    }
    // Set up watching beside serving, off the start-up path. The watcher's first act, once its
    // watches are in place, is a full reload (configuration and files): a change made in between
    // is applied then.
    let watcher: std::sync::Arc<std::sync::OnceLock<mcp_host::plugins::watch::Watcher>> =
        Default::default();
    if watch {
        let (host, slot) = (host.clone(), std::sync::Arc::clone(&watcher));
        std::thread::spawn(move || match mcp_host::plugins::watch::watch(host) {
            Ok(w) => {
                let _ = slot.set(w);
            }
            Err(e) => tracing::warn!("hot reload disabled: cannot watch files: {e}"),
        });
    }
    let protocol = Protocol::new(host.clone());
    let grace =
        Duration::try_from_secs_f64(config.shutdown_grace_secs).unwrap_or(Duration::from_secs(10));
    let result = runtime.block_on(async {
        spawn_sighup_rescan(host.clone(), std::sync::Arc::clone(&watcher));
        match protocol_out {
            Some(out) => {
                let user = config
                    .stdio_user
                    .clone()
                    .or_else(|| std::env::var("USER").ok())
                    .filter(|u| !u.is_empty());
                tracing::info!(
                    "serving MCP on stdio (caller: {})",
                    user.as_deref().unwrap_or("none")
                );
                transport::stdio::serve(
                    protocol,
                    std::io::stdin(),
                    out,
                    transport::stdio::StdioOptions {
                        caller: user.map(|u| {
                            let mut caller = UserInfo::new(u);
                            caller.agent = agent.clone();
                            caller
                        }),
                        agent,
                        max_message_bytes: config.http.max_body_bytes,
                        grace,
                    },
                )
                .await
            }
            None => {
                let listener = transport::http::bind(config.listen)
                    .await
                    .with_context(|| format!("cannot listen on {}", config.listen))?;
                let addr = listener.local_addr()?;
                tracing::info!("listening on http://{addr}{}", config.http.path);
                let options = transport::http::HttpOptions {
                    settings: config.http.clone(),
                    grace,
                    ..Default::default()
                };
                transport::http::serve(protocol, listener, options, shutdown_signal()).await
            }
        }
        .map_err(anyhow::Error::from)
    });
    host.shutdown();
    runtime.shutdown_timeout(Duration::from_millis(200));
    result?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// SIGHUP: rescan the tool directories and re-read the configuration.
fn spawn_sighup_rescan(
    host: Host,
    watcher: std::sync::Arc<std::sync::OnceLock<mcp_host::plugins::watch::Watcher>>,
) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: rescanning");
            match watcher.get() {
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

fn print_list(host: &Host, json: bool, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let registry = host.registry();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&registry.entries)?)?;
        return Ok(());
    }
    let rows: Vec<[String; 5]> = registry
        .entries
        .iter()
        .map(|e| {
            let status = match &e.status {
                Status::Active => "active".to_owned(),
                Status::OverriddenBy(p) => format!("overridden by {}", p.display()),
                Status::DisabledService(why) => format!("disabled service ({why})"),
                Status::InvalidName(why) => format!("invalid name ({why})"),
                Status::InvalidSchema(why) => format!("invalid schema ({why})"),
                Status::LoadError(why) => format!("load error: {why}"),
            };
            [
                e.tool.clone(),
                status,
                e.service.clone().unwrap_or_else(|| "-".into()),
                e.plugin.clone().unwrap_or_else(|| "-".into()),
                e.file.display().to_string(),
            ]
        })
        .collect();
    let header = ["TOOL", "STATUS", "SERVICE", "PLUGIN", "FILE"].map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count()).min(60);
        }
    }
    for row in std::iter::once(&header).chain(rows.iter()) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    if rows.is_empty() {
        writeln!(
            out,
            "(no plugins found in: {})",
            host.config()
                .tool_dirs
                .iter()
                .map(|d| d.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    Ok(())
}

fn check(
    config: &Config,
    file: &std::path::Path,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let report = mcp_host::host::check_file(config, file, &host_options());
    match report {
        Ok(manifest) => {
            writeln!(out, "{}", serde_json::to_string_pretty(&manifest)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            Ok(ExitCode::FAILURE)
        }
    }
}
