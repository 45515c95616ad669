//! The `mcp-host` command line: wiring only; the work lives in the library.

mod allocator;
mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::{Arc, LazyLock};

use clap::{CommandFactory as _, Parser, Subcommand};
use mcp_host::config::LogFormat;
use mcp_host::telemetry::{AuditLog, Telemetry, logging};
use mcp_host::{Config, Host, HostOptions};

/// mimalloc rather than glibc's malloc (see [`allocator`]).
#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

/// `mcp-host --version`: the version and the build fingerprint plugins must match.
fn version() -> &'static str {
    static VERSION: LazyLock<String> = LazyLock::new(|| {
        let build = mcp_plugin_sdk::wire::BuildInfo::host();
        format!(
            "{} (plugin ABI v{}, plugin SDK {}, target {})",
            env!("CARGO_PKG_VERSION"),
            build.abi,
            build.sdk_version,
            build.target
        )
    });
    &VERSION
}

#[derive(Parser, Debug)]
#[command(
    name = "mcp-host",
    version = version(),
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
enum PolicyCommand {
    /// Print which call policy rule matches a call and its outcome, without calling the tool.
    Test {
        /// The caller's user id.
        #[arg(long = "as", value_name = "USER")]
        user: String,
        /// The agent the call comes through.
        #[arg(long)]
        agent: Option<String>,
        /// The caller's JWT claims as a JSON object (what rules read as `caller.claims`).
        #[arg(long, value_name = "JSON")]
        claims: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The tool name.
        tool: String,
        /// The call's arguments as a JSON object.
        #[arg(default_value = "{}")]
        args: String,
    },
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve MCP: Streamable HTTP (default 127.0.0.1:18080/mcp) or stdio.
    Serve {
        /// HTTP address to listen on, over the config's `listen` (also at every reload): PORT,
        /// localhost:PORT (both 127.0.0.1), IP:PORT or [IPv6]:PORT.
        #[arg(long, conflicts_with = "stdio", value_name = "ADDR", value_parser = mcp_host::config::parse_listen)]
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
    /// The upstream token vault: who is connected where, key rotation, revoking a user.
    Vault {
        #[command(subcommand)]
        command: cli::vault::VaultCommand,
    },
    /// List every discovered tool with its plugin, directory, service and status.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// List the plugins `mcp-host add` installed instead: source, digest, signer, permissions.
        #[arg(long)]
        installed: bool,
    },
    /// Publish a plugin as a signed OCI package: one library per platform (`FILE` for this
    /// platform, `PLATFORM=FILE` for others, e.g. `macos-aarch64=libx.dylib`), then the reference.
    Publish {
        /// The secret key signing every build (from `mcp-host keygen`).
        #[arg(long)]
        key: PathBuf,
        /// The secret key's password is in this environment variable.
        #[arg(long)]
        password_env: Option<String>,
        /// The plugin manifest JSON to publish (default: what this platform's build reports,
        /// which then must be among the files).
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// The builds, then the reference (`registry/repository:tag`).
        #[arg(required = true, num_args = 2.., value_name = "FILE... REF")]
        args: Vec<String>,
    },
    /// Install a plugin: an OCI reference, a library file (`./libx.so`, with `libx.so.minisig`
    /// beside it). Verified against `trust.keys`, probed, and shown before it is installed.
    Add {
        /// The reference or file.
        source: String,
        /// Install without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Remove a plugin `mcp-host add` installed.
    Remove {
        /// The plugin's name.
        name: String,
    },
    /// Update installed plugins (or one) from where they came, showing the definition and
    /// permission changes first.
    Update {
        /// The plugin's name (default: every installed plugin).
        name: Option<String>,
        /// Update without asking.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Accept a new version signed by another trusted key than the installed one.
        #[arg(long)]
        allow_new_signer: bool,
    },
    /// Test-load one plugin file and print its manifest, or the exact error.
    Check {
        /// The plugin file.
        file: PathBuf,
        /// Print how it runs instead: its isolation, worker limits and sandbox permissions.
        #[arg(long)]
        permissions: bool,
        /// Print the full report as JSON (the default when stdout is not a terminal; on a
        /// terminal the default is a summary).
        #[arg(long)]
        json: bool,
    },
    /// Call a tool in-process and print its result (for plugin authors).
    Call {
        /// The tool name.
        tool: String,
        /// Take the tool from this plugin file only, instead of the configured tool directories
        /// (e.g. `--plugin target/release/libmy_tools.so` in the plugin's crate).
        #[arg(long, value_name = "FILE")]
        plugin: Option<PathBuf>,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Call as this user (for tools that take `UserInfo`).
        #[arg(long)]
        user: Option<String>,
    },
    /// Connect to an MCP server as its client: discover it, authorize when it asks (OAuth in
    /// the terminal), list its tools (resources, prompts) and call them — to try a server
    /// before adding it as an upstream.
    Connect(Box<cli::connect::ConnectArgs>),
    /// Call policy: test which rule matches a call.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Print the effective configuration (every layer merged, defaults filled in), secrets
    /// redacted.
    Config {
        /// Print JSON instead of YAML.
        #[arg(long)]
        json: bool,
        /// Print the reference of every configuration key (Markdown) instead.
        #[arg(long, conflicts_with = "json")]
        reference: bool,
    },
    /// Print a shell completion script (e.g. `mcp-host completions bash > /etc/bash_completion.d/mcp-host`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Create a plugin crate: one service, one documented tool, tests on the SDK's test kit.
    New {
        /// The plugin's (and crate's) name, e.g. `my-tools`.
        name: String,
        /// The directory to create (default: `./<name>`).
        #[arg(long)]
        path: Option<PathBuf>,
        /// The SDK to build against: a `plugin-sdk` directory (default: that of the mcp-host
        /// checkout this executable or the current directory is in).
        #[arg(long, value_name = "DIR")]
        sdk: Option<PathBuf>,
    },
    /// Make a key pair for signing plugins: OUT.key (secret) and OUT.pub, and print the
    /// `trust.keys` line.
    Keygen {
        /// Path of the key pair, without extension.
        #[arg(long)]
        out: PathBuf,
        /// The key's name in `trust.keys` (default: the file name of OUT).
        #[arg(long)]
        name: Option<String>,
        /// Protect the secret key with the password in this environment variable.
        #[arg(long, conflicts_with = "no_password")]
        password_env: Option<String>,
        /// Store the secret key without a password (e.g. for a CI secret store).
        #[arg(long)]
        no_password: bool,
        /// Replace existing key files.
        #[arg(long)]
        force: bool,
    },
    /// Sign plugin files: write FILE.minisig beside each.
    Sign {
        /// The secret key (from `mcp-host keygen`, or minisign's).
        #[arg(long)]
        key: PathBuf,
        /// The secret key's password is in this environment variable.
        #[arg(long)]
        password_env: Option<String>,
        /// Plugin files to sign.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Make `tool_dirs` entries for the MCP servers another host runs (secrets become `${NAME}`
    /// references) and print them, or append them to a configuration file.
    Import {
        #[command(subcommand)]
        source: cli::import::Source,
    },
    /// Record every served tool, resource and prompt definition in the lock file.
    Pin {
        /// Show what differs from the lock file (old and new text) instead; exit 1 if anything does.
        #[arg(long)]
        diff: bool,
    },
    /// (internal) Probe plugin files in this process; used by the host before loading.
    #[command(hide = true)]
    Probe {
        /// How to confine this process before opening any file (JSON from the host).
        #[arg(long)]
        confine: Option<String>,
        /// Files to probe.
        files: Vec<PathBuf>,
    },
    /// (internal) Serve one isolated plugin over the channel on stdin; started by the host.
    #[command(hide = true)]
    Worker,
    /// (internal) Confine this process, then run an upstream server's command in its place;
    /// started by the host.
    #[command(hide = true)]
    UpstreamExec {
        /// How to confine this process (JSON from the host).
        #[arg(long)]
        confine: Option<String>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// The log for a command that does not export traces (`default` applies without `RUST_LOG`).
fn init_logging(default: &str, format: LogFormat) {
    // Without an OTLP endpoint no exporter is set up, so this cannot fail.
    let _ = logging::init(default, format, &Default::default());
}

fn host_options() -> HostOptions {
    HostOptions {
        probe_exe: std::env::current_exe().ok(),
        telemetry: None,
        load_on_first_call: false,
        overrides: Default::default(),
        // Commands that read the tool set once wait for each upstream (ready or failed).
        connect_upstreams_in_background: false,
    }
}

/// Host options whose telemetry writes the configured audit log (commands that run tools).
fn audited_host_options(config: &Config) -> anyhow::Result<HostOptions> {
    let audit =
        match &config.audit_log {
            Some(path) => Some(AuditLog::open(path).map_err(|e| {
                anyhow::anyhow!("cannot open the audit log {}: {e}", path.display())
            })?),
            None => None,
        };
    Ok(HostOptions {
        telemetry: Some(Arc::new(Telemetry::new(audit))),
        ..host_options()
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcp-host: {}", cli::error_text(&e));
            ExitCode::from(2)
        }
    };
    // Whatever upstream server this process started and did not stop yet goes with it (its
    // whole process group), whichever way the command ended.
    mcp_host::plugins::upstream::kill_all();
    code
}

/// The real stdout, for this command's output only: fd 1 is pointed at stderr first, so anything a
/// plugin prints lands there instead of in machine-readable output.
fn protected_stdout() -> Box<dyn std::io::Write> {
    mcp_host::transport::stdout_guard::take_stdout()
        .map(|f| Box::new(std::io::LineWriter::new(f)) as Box<dyn std::io::Write>)
        .unwrap_or_else(|_| Box::new(std::io::stdout()))
}

/// Run one command: one arm per command, each handing its arguments to the step that runs it.
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config_path = cli.config.as_deref();
    match cli.command {
        Command::Serve {
            listen,
            stdio,
            agent,
            no_watch,
        } => serve_command(config_path, listen, stdio, agent, !no_watch),
        Command::Secret {
            command:
                SecretCommand::New {
                    user,
                    agent,
                    expires,
                },
        } => cli::secret::new_secret(&user, agent.as_deref(), expires.as_deref()),
        Command::Config { json, reference } => config_command(config_path, json, reference),
        Command::Vault { command } => {
            let config = Config::load(config_path)?;
            init_logging("warn", config.log_format);
            cli::vault::run(config, command, &mut protected_stdout())
        }
        Command::Connect(args) => {
            // The OAuth engine's steps at info; the connection's own failures are in the report.
            init_logging(
                "warn,rmcp=off,mcp_host::plugins::upstream::supervise=off,mcp_host::access::upstream=info",
                LogFormat::Text,
            );
            cli::connect::connect(*args, &mut protected_stdout())
        }
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "mcp-host",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::New { name, path, sdk } => cli::new::new_plugin(
            cli::new::NewArgs { name, path, sdk },
            &mut std::io::stdout(),
        ),
        command @ (Command::Worker | Command::UpstreamExec { .. } | Command::Probe { .. }) => {
            child_command(command)
        }
        Command::List {
            json,
            installed: false,
        } => list_command(config_path, json),
        command @ (Command::List { .. }
        | Command::Publish { .. }
        | Command::Add { .. }
        | Command::Remove { .. }
        | Command::Update { .. }) => package_command(config_path, command),
        Command::Check {
            file,
            permissions,
            json,
        } => check_command(config_path, &file, permissions, json),
        command @ (Command::Keygen { .. } | Command::Sign { .. }) => key_command(command),
        Command::Pin { diff } => {
            let config = Config::load(config_path)?;
            init_logging("warn", config.log_format);
            cli::pin::pin(config, diff, &mut protected_stdout())
        }
        Command::Policy { command } => policy_command(config_path, command),
        Command::Import { source } => {
            init_logging("warn", LogFormat::default());
            cli::import::import(source, &mut std::io::stdout())
        }
        Command::Call {
            tool,
            plugin,
            args,
            user,
        } => call_command(config_path, &tool, plugin.as_deref(), &args, user),
    }
}

/// The commands the host runs itself as, in a child process: `worker`, `upstream-exec`, `probe`.
fn child_command(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Worker => Ok(mcp_host::plugins::worker::run_worker()),
        Command::UpstreamExec { confine, command } => {
            // Returns only when the command could not be run.
            let why = mcp_host::plugins::upstream::confine::run_upstream_exec(
                confine.as_deref(),
                &command,
            );
            eprintln!("mcp-host upstream-exec: {why}");
            Ok(ExitCode::from(126))
        }
        Command::Probe { confine, files } => {
            let out = &mut protected_stdout();
            mcp_host::plugins::probe::run_probe_child(&files, confine.as_deref(), out)?;
            Ok(ExitCode::SUCCESS)
        }
        _ => unreachable!("child_command is called for child process commands only"),
    }
}

/// The commands of signing keys: `keygen` (a key pair, its secret key protected by a password
/// unless `--no-password`) and `sign`.
fn key_command(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Keygen {
            out,
            name,
            password_env,
            no_password,
            force,
        } => {
            let password = cli::keygen::Password::from_args(password_env.as_deref(), no_password)?;
            cli::keygen::keygen(&out, name.as_deref(), password, force)
        }
        Command::Sign {
            key,
            password_env,
            files,
        } => {
            let password = cli::keygen::Password::from_args(password_env.as_deref(), false)
                .unwrap_or(cli::keygen::Password::None);
            cli::sign::sign(&key, password, &files)
        }
        _ => unreachable!("key_command is called for key commands only"),
    }
}

/// `mcp-host policy test`: which rule matches a call, and what it decides.
fn policy_command(
    config_path: Option<&std::path::Path>,
    command: PolicyCommand,
) -> anyhow::Result<ExitCode> {
    let PolicyCommand::Test {
        user,
        agent,
        claims,
        json,
        tool,
        args,
    } = command;
    let config = Config::load(config_path)?;
    init_logging("warn", config.log_format);
    let probe = cli::policy::Probe {
        user: &user,
        agent: agent.as_deref(),
        claims: claims.as_deref(),
        tool: &tool,
        args: &args,
        json,
    };
    cli::policy::test(config, host_options(), &probe, &mut protected_stdout())
}

/// The commands of installed plugin packages: `list --installed`, `publish`, `add`, `remove`,
/// `update`.
fn package_command(
    config_path: Option<&std::path::Path>,
    command: Command,
) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    init_logging("warn", config.log_format);
    let out = &mut protected_stdout();
    match command {
        Command::Publish {
            key,
            password_env,
            manifest,
            args,
        } => {
            let password = cli::keygen::Password::from_args(password_env.as_deref(), false)
                .unwrap_or(cli::keygen::Password::None);
            cli::install::publish(&config, &args, &key, password, manifest.as_deref(), out)
        }
        Command::Add { source, yes } => cli::install::add(&config, &source, yes, out),
        Command::Remove { name } => cli::install::remove(&config, &name, out),
        Command::Update {
            name,
            yes,
            allow_new_signer,
        } => cli::install::update(&config, name.as_deref(), yes, allow_new_signer, out),
        Command::List { json, .. } => cli::install::list_installed(&config, json, out),
        _ => unreachable!("package_command is called for package commands only"),
    }
}

/// `mcp-host serve`: the host on stdio or Streamable HTTP until it is stopped.
fn serve_command(
    config_path: Option<&std::path::Path>,
    listen: Option<std::net::SocketAddr>,
    stdio: bool,
    agent: Option<String>,
    watch: bool,
) -> anyhow::Result<ExitCode> {
    let args = cli::serve::ServeArgs {
        listen,
        stdio,
        agent,
        watch,
    };
    cli::serve::serve(config_path, args)
}

/// `mcp-host config`: the configuration reference (`--reference`), or the configuration in force.
fn config_command(
    config_path: Option<&std::path::Path>,
    json: bool,
    reference: bool,
) -> anyhow::Result<ExitCode> {
    if reference {
        print!("{}", mcp_host::config::reference::markdown());
        return Ok(ExitCode::SUCCESS);
    }
    let config = Config::load(config_path)?;
    cli::config::print(&config, json, &mut std::io::stdout())
}

/// `mcp-host list`: start a host and list what it serves.
fn list_command(config_path: Option<&std::path::Path>, json: bool) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    init_logging("warn", config.log_format);
    let host = Host::start(config, host_options())?;
    let printed = cli::inspect::print_list(&host, json, &mut protected_stdout());
    host.shutdown();
    printed?;
    Ok(ExitCode::SUCCESS)
}

/// `mcp-host check FILE`: a summary on a terminal, JSON otherwise (or with `--json`).
fn check_command(
    config_path: Option<&std::path::Path>,
    file: &std::path::Path,
    permissions: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    init_logging("warn", config.log_format);
    let format = if json || !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        cli::inspect::CheckFormat::Json
    } else {
        cli::inspect::CheckFormat::Summary
    };
    cli::inspect::check(&config, file, permissions, format, &mut protected_stdout())
}

/// `mcp-host call TOOL`: one call through an audited host (of one plugin file's directory, with
/// `--plugin`).
fn call_command(
    config_path: Option<&std::path::Path>,
    tool: &str,
    plugin: Option<&std::path::Path>,
    args: &str,
    user: Option<String>,
) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(config_path)?;
    if let Some(file) = plugin {
        config.tool_dirs = vec![cli::inspect::plugin_dir(file)?];
    }
    init_logging("warn", config.log_format);
    let options = audited_host_options(&config)?;
    cli::inspect::call(config, options, tool, args, user, &mut protected_stdout())
}
