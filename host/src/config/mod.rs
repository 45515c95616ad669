//! Configuration: YAML layers (base file, `config.{env}.yaml` overlay, `MCP_HOST_*` variables) merged
//! into one typed [`Config`].
//!
//! Each layer is checked on its own against the schema of the file format, so an unknown key or a
//! wrong type is reported with the key path and the file (or variable) it came from. Maps merge deeply;
//! lists such as `tool_dirs` are replaced. Relative paths resolve against the directory of the file
//! that set them. String values may reference the environment as `${NAME}` or `${NAME:-default}`.
//! The types live here; how layers are read, checked and merged lives in `layers`.

mod console;
pub mod definitions;
mod guardrails;
pub mod import;
pub mod installed;
mod isolation;
mod layers;
mod listen;
pub mod lock;
mod overrides;
mod policy;
pub mod reference;
pub mod secrets;
mod suggest;
pub mod tls;
pub mod upstream_auth;

pub use console::ConsoleSettings;
pub use definitions::{
    ArgumentOverride, DefinitionOverrides, EntryOverride, HintOverrides, ToolOverride,
};
pub use guardrails::{
    FILTER_KEY_PREFIX, GUARDRAIL_DETECTORS, GUARDRAIL_GROUPS, GuardAction, Guardrails, filter_key,
};
pub use isolation::{Connect, Endpoint, Isolation, Permissions, WorkerLimits};
pub use layers::REGISTRY_TOKEN_VAR;
pub use listen::{LISTEN_FORMS, ListenError, parse_listen};
pub use overrides::Overrides;
pub use policy::{Approver, Budget, Policed, PolicyRule, PolicySettings, RuleOutcome};
pub use suggest::did_you_mean;
pub use upstream_auth::{
    ConsentSettings, ListAs, ServerAuth, ServerAuthMode, SessionSettings, SubjectTokenType,
    TokenEndpointAuth, TokenExchange, UpstreamAuthSettings, VaultSettings,
};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default configuration file, relative to the working directory.
pub const DEFAULT_CONFIG: &str = "config/mcp-host.yaml";

/// A configuration problem, naming where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("cannot read config file {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (in the message, not a separate source: a chain would print it twice).
        reason: std::io::Error,
    },
    /// A file is not valid YAML.
    #[error("{origin}: not valid YAML: {message}")]
    Syntax {
        /// File or variable.
        origin: String,
        /// The parser's message.
        message: String,
    },
    /// A key is unknown or has the wrong type.
    #[error("{origin}: key `{key}`: {message}")]
    Invalid {
        /// File or variable.
        origin: String,
        /// Dotted key path.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A `${NAME}` reference names an unset variable.
    #[error("{origin}: key `{key}` references ${{{var}}}, which is not set")]
    MissingVar {
        /// File or variable.
        origin: String,
        /// Dotted key path.
        key: String,
        /// The variable.
        var: String,
    },
}

/// One entry of `tool_dirs`: a path, optionally with a tool-name prefix, a selection of files, an
/// isolation and its own trust rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ToolDir {
    /// The directory (relative to the configuration file). An entry may also be the path alone.
    pub path: PathBuf,
    /// Prepended to every tool name found in it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// Globs of library names to take from it (a file's name without the platform's `lib` prefix
    /// and library extension: `mcp_time` for `libmcp_time.so`); empty takes every library.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// How its plugins run; a plugin's own `isolation` may raise it, never lower it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// Whether its plugins must carry a valid signature by a key of `trust.keys` (unset: the
    /// global `trust.require_signature`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_signature: Option<bool>,
    /// How the definitions its plugins serve are checked against the lock file (unset: the global
    /// `trust.pinning`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinning: Option<PinMode>,
    /// What the host does with a definition its plugins serve that hides characters or speaks to
    /// the model (unset: the global `trust.definition_scan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub definition_scan: Option<ScanMode>,
    /// It may not exist yet (e.g. the operator's own directory in the packaged configuration):
    /// then start-up notes it instead of warning, and plugins dropped there once it is made are
    /// served.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// An upstream MCP server served from this entry instead of a directory (`path` is then
    /// `upstream:<name>`, an identity, not a file): a command run as a supervised child speaking
    /// MCP on its stdin and stdout, or a Streamable HTTP endpoint. See
    /// `docs/operators/upstream-servers.md`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<UpstreamServer>,
    /// The upstream's name (required with `server`): what `list`, metrics, audit, agents and
    /// `plugins.<name>` settings know it by, as a plugin's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// How to reach an upstream MCP server (`tool_dirs[].server`): exactly one of `command` (stdio)
/// and `url` (Streamable HTTP). String values may use `${VAR}` like the rest of the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamServer {
    /// The command and its arguments (argv; no shell): the child speaks MCP on stdin and stdout,
    /// its stderr goes to the host's log.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Environment variables added to the child's allow-listed environment (`PATH`, `HOME`,
    /// `LANG`, ... and `plugins.<name>.permissions.env`; never the host's whole environment).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The child's working directory (relative to the configuration file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// A Streamable HTTP endpoint (`https://…/mcp`, or `http://` on a trusted network).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent with every request to `url` (e.g. `Authorization: "Bearer
    /// ${TOOLS_TOKEN}"`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Which redirects from `url` are followed: `none` (unset: a 3xx is an error naming its
    /// `Location`, since a redirect would carry `headers` and every request's body elsewhere) or
    /// `same_origin` (to the same scheme, host and port only; never from https to http).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_redirects: Option<FollowRedirects>,
    /// Whether a `resources/read` of a URI that nothing lists and no listed template matches is
    /// offered to this upstream (in `tool_dirs` order, after the entries before it said "not
    /// found"); unset is `true`. `false` keeps it to the resources it lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unlisted_resources: Option<bool>,
    /// How `url` authorizes its callers: unset, with the `headers` alone (one identity for
    /// everyone); `{mode: oauth}`, each caller's own OAuth token (see
    /// docs/operators/upstream-auth.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<ServerAuth>,
}

impl UpstreamServer {
    /// A name to suggest for an entry that has none: the package or program for a command
    /// (`@modelcontextprotocol/server-filesystem` gives `filesystem`), the host for a URL.
    pub fn suggested_name(&self) -> String {
        let clean = |s: &str| -> String {
            let s = s
                .trim_start_matches("mcp-server-")
                .trim_start_matches("server-")
                .trim_start_matches("mcp-")
                .trim_end_matches("-mcp")
                .trim_end_matches(".py")
                .trim_end_matches(".js");
            s.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect()
        };
        if let Some(url) = &self.url {
            let host = url.split("://").nth(1).unwrap_or(url);
            let host = host.split(['/', ':']).next().unwrap_or(host);
            return clean(host.split('.').next().unwrap_or(host));
        }
        let arg = self
            .command
            .iter()
            .skip(1)
            .rev()
            .find(|a| !a.starts_with('-') && !a.starts_with('/') && !a.starts_with('.'))
            .or(self.command.first());
        arg.map(|a| {
            let base = a.rsplit('/').next().unwrap_or(a);
            let base = base
                .split('@')
                .next()
                .filter(|b| !b.is_empty())
                .unwrap_or(base);
            clean(base)
        })
        .unwrap_or_else(|| "upstream".into())
    }
}

/// Which redirects an HTTP upstream's client follows (`server.follow_redirects`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FollowRedirects {
    /// None: a 3xx is an error naming its `Location`.
    #[default]
    None,
    /// Those to the endpoint's own origin (scheme, host and port); never another, never from
    /// https to http.
    SameOrigin,
}

/// How served definitions (tools, resources, prompts) are checked against the lock file that
/// `mcp-host pin` writes.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PinMode {
    /// Not checked.
    #[default]
    Off,
    /// A definition that differs from the lock, or is not in it, is served and logged.
    Warn,
    /// A definition that differs from the lock, or is not in it, is not served until re-pinned.
    Enforce,
}

/// What the host does with a served definition (tool, prompt, resource: as clients are shown it,
/// overrides applied) in which the definition scan finds hidden characters (Unicode tag,
/// zero-width or bidi control characters) or instructions aimed at the model. See
/// `docs/operators/trust.md`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ScanMode {
    /// Not scanned.
    Off,
    /// Served, and each finding logged.
    #[default]
    Warn,
    /// Not served (held, as a definition not as pinned is under `enforce`) until the definition
    /// or an override of it no longer has the finding.
    Hold,
}

/// What the host trusts: signing keys, and whether plugins must be signed and their definitions
/// pinned (defaults for every tool directory; an entry of `tool_dirs` may set its own).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TrustSettings {
    /// Public keys plugins may be signed with, by name (the name is what `list` and `check` show
    /// as the signer): minisign public keys, the base64 line of the `.pub` file `mcp-host keygen`
    /// writes.
    pub keys: BTreeMap<String, String>,
    /// Plugins must carry a valid detached signature (`<file>.minisig`) by one of `keys`.
    pub require_signature: bool,
    /// How served definitions are checked against the lock file.
    pub pinning: PinMode,
    /// The lock file (relative to the configuration file; default `mcp-host.lock` beside it).
    pub lock_file: Option<PathBuf>,
    /// What is done with a served definition that hides characters or speaks to the model.
    pub definition_scan: ScanMode,
}

impl ToolDir {
    /// The compiled `files` globs: `None` takes every library.
    pub fn file_selection(&self) -> Result<Option<globset::GlobSet>, globset::Error> {
        if self.files.is_empty() {
            return Ok(None);
        }
        let mut set = globset::GlobSetBuilder::new();
        for glob in &self.files {
            set.add(globset::Glob::new(glob)?);
        }
        set.build().map(Some)
    }
}

/// How the identity path of an upstream server entry begins (`upstream:<name>`): what `list`
/// shows as its file and directory.
pub const UPSTREAM_PATH_PREFIX: &str = "upstream:";

impl ToolDir {
    /// Whether the entry is an upstream server (not a directory).
    pub fn is_upstream(&self) -> bool {
        self.server.is_some()
    }
}

/// The packaged plugins, as the default configuration selects them from `target/release` (which
/// also holds the SDK's proc-macro library and, after a workspace build, the test fixtures).
pub const PACKAGED_PLUGINS: &[&str] = &["mcp_time", "mcp_text", "mcp_series"];

/// Limits on tool calls.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Seconds before a call is answered `timed out` and its cancellation flag set.
    pub call_timeout_secs: f64,
    /// Calls running at once across all plugins; more wait in a queue.
    pub max_concurrent_calls: usize,
    /// Calls running at once in one plugin; more wait in a queue.
    pub max_concurrent_calls_per_plugin: usize,
    /// Nesting depth of tools calling tools.
    pub max_call_depth: u32,
    /// Plugin images loaded over the process's life (libraries are never unloaded, so each reload
    /// keeps its old image mapped); past this, reloads stop and the log asks for a restart.
    pub max_reloads: usize,
    /// Largest tool result, in bytes of the plugin's result JSON; a larger result becomes an
    /// `isError` result naming its size and the limit.
    pub max_result_bytes: usize,
    /// Most JSON values in one tool result (a parsed value takes 32 bytes or more, so a result of
    /// many tiny values costs far more memory than its size); more become an `isError` result.
    pub max_result_values: usize,
    /// Most messages in one JSON-RPC batch (2025-03-26 sessions); a longer batch is refused whole.
    pub max_batch_len: usize,
    /// Most bytes of one batch's answers together (unset: `max_result_bytes`); the requests left
    /// once they reach it are not run and each is answered an error naming this limit.
    pub max_batch_answer_bytes: Option<usize>,
    /// What one caller may have running, and how often it may call.
    pub per_caller: PerCallerLimits,
    /// Address space of each plugin worker process, in MiB (`RLIMIT_AS`).
    pub memory_mb: Option<u64>,
    /// CPU seconds over a worker's life (`RLIMIT_CPU`).
    pub cpu_secs: Option<u64>,
    /// Open files of each worker (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// Crashes of one plugin's workers within `crash_window_secs` that quarantine it.
    pub max_crashes: u32,
    /// The window `max_crashes` counts in, in seconds.
    pub crash_window_secs: f64,
    /// Seconds an upstream server has to answer its handshake (a stdio child counted from its
    /// start); past it the attempt fails ("did not answer its handshake"), its child's process
    /// group is killed, and it counts as a crash. Applies to upstreams started after a change.
    pub upstream_handshake_timeout_secs: f64,
    /// Seconds one reading of an upstream's lists may take, every page of every list (at start,
    /// after a restart and after a `list_changed`); past it the reading fails and counts as a
    /// crash.
    pub upstream_list_timeout_secs: f64,
    /// Pages one upstream list (`tools/list`, `resources/list`, …) may have; a list with more
    /// (or that sends a cursor it sent before) is refused and counts as a crash.
    pub upstream_max_list_pages: usize,
    /// Tools, resources, resource templates and prompts one upstream may list, together.
    pub upstream_max_definitions: usize,
    /// Bytes of JSON the definitions one upstream lists may take, together.
    pub upstream_max_list_bytes: usize,
    /// Sizes `mcp-host add` and `update` accept from a registry, a URL or a file.
    pub packages: installed::PackageLimits,
}

impl Limits {
    /// The bound of one batch's answers together: `max_batch_answer_bytes`, else
    /// `max_result_bytes` (a batch answers no more than one call may).
    pub fn batch_answer_bytes(&self) -> usize {
        self.max_batch_answer_bytes
            .unwrap_or(self.max_result_bytes)
            .max(1)
    }

    /// The worker limits set here (the defaults for every worker).
    pub fn worker(&self) -> WorkerLimits {
        WorkerLimits {
            memory_mb: self.memory_mb,
            cpu_secs: self.cpu_secs,
            open_files: self.open_files,
        }
    }
}

/// Fair sharing between callers: a caller is the verified user, else the agent, else the remote
/// address (stdio: the connection).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PerCallerLimits {
    /// Tool calls one caller may have in flight (running or queued); more are refused (HTTP 429).
    pub max_in_flight: usize,
    /// Sustained tool calls per second one caller may start (unset: no rate limit).
    pub calls_per_sec: Option<f64>,
    /// Calls a caller may start at once above the sustained rate (the bucket's size).
    pub burst: u32,
}

impl Default for PerCallerLimits {
    fn default() -> Self {
        PerCallerLimits {
            max_in_flight: 32,
            calls_per_sec: None,
            burst: 20,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            call_timeout_secs: 60.0,
            max_concurrent_calls: 64,
            max_concurrent_calls_per_plugin: 16,
            max_call_depth: 8,
            max_reloads: 500,
            max_result_bytes: 8 * 1024 * 1024,
            max_result_values: 250_000,
            max_batch_len: 64,
            max_batch_answer_bytes: None,
            per_caller: PerCallerLimits::default(),
            memory_mb: None,
            cpu_secs: None,
            open_files: None,
            max_crashes: 5,
            crash_window_secs: 60.0,
            upstream_handshake_timeout_secs: 60.0,
            upstream_list_timeout_secs: 60.0,
            upstream_max_list_pages: 100,
            upstream_max_definitions: 10_000,
            upstream_max_list_bytes: 16 * 1024 * 1024,
            packages: installed::PackageLimits::default(),
        }
    }
}

/// Streamable HTTP settings.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// The MCP endpoint path.
    pub path: String,
    /// Largest accepted request body (413 above).
    pub max_body_bytes: usize,
    /// Largest body of any other message than a request that carries a caller's payload
    /// (`tools/call`, `prompts/get`, `resources/read`, `completion/complete`, `tasks/…`), a
    /// client's response or a batch: `initialize`, `ping`, lists and the like are small, and a
    /// larger one is refused (413) without being parsed.
    pub max_other_body_bytes: usize,
    /// Origins allowed besides localhost forms (exact `scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// Host names allowed besides localhost forms.
    pub allowed_hosts: Vec<String>,
    /// Legacy (2025) sessions kept at most.
    pub max_sessions: usize,
    /// Legacy sessions expire after this many idle seconds.
    pub session_idle_secs: u64,
    /// Legacy sessions one caller (verified user, else agent, else remote address) keeps at most;
    /// its own least recently used session makes room for a new one.
    pub max_sessions_per_caller: usize,
    /// Connections served at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Seconds a connection has to send a complete request head, counted from when it opened or
    /// from its previous response (so it also closes idle keep-alive connections).
    pub header_read_timeout_secs: u64,
    /// Seconds a request has to send its whole body (408 after).
    pub body_read_timeout_secs: u64,
    /// Connections one remote address may hold (unset: half of `max_connections`); a trusted
    /// proxy's are not counted. Beyond it, as beyond `max_connections`, a connection only gets
    /// `/healthz`, `/livez` and `/metrics` answered (503 otherwise) and is closed after one answer.
    pub max_connections_per_address: Option<usize>,
    /// Connections kept beyond `max_connections` for those health answers, so that probes are
    /// answered while every other slot is taken (read at start).
    pub health_connections: usize,
    /// Long-lived streams (`subscriptions/listen`, legacy GET streams) one caller may hold open;
    /// more are refused with 429.
    pub max_streams_per_caller: usize,
    /// Seconds a response may wait for a client that does not read it before its connection is
    /// closed.
    pub write_timeout_secs: u64,
    /// Proxies (`ADDR/PREFIX` or `ADDR`) whose `X-Forwarded-For` names the client: only for a
    /// connection from one of them does that header decide an anonymous caller's address (quotas,
    /// legacy session owner); their connections are not counted per address.
    #[schemars(with = "Vec<String>")]
    pub trusted_proxies: Vec<Cidr>,
}

impl HttpSettings {
    /// The connections one remote address may hold.
    pub fn connections_per_address(&self) -> usize {
        self.max_connections_per_address
            .unwrap_or(self.max_connections / 2)
            .max(1)
    }

    /// Whether `ip` is one of `trusted_proxies`.
    pub fn is_trusted_proxy(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted_proxies.iter().any(|net| net.0.contains(&ip))
    }
}

/// Why a file may not serve the plugin it names: the plugin's settings are bound to other files
/// (`plugins.<name>.from`) or signers (`plugins.<name>.signed_by`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// The file is not one of (or in one of) the bound files and directories.
    #[error(
        "{} calls itself plugin {plugin}, whose settings are bound to {} (plugins.{plugin}.from); \
         it is not one of them",
        file.display(),
        bound.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NotFrom {
        /// The file.
        file: PathBuf,
        /// The plugin it names.
        plugin: String,
        /// The files and directories its settings are bound to.
        bound: Vec<PathBuf>,
    },
    /// The file is not signed by one of the bound signers.
    #[error(
        "{} calls itself plugin {plugin}, whose settings are bound to files signed by {} \
         (plugins.{plugin}.signed_by); it is {}",
        file.display(),
        signers.join(", "),
        signer.as_ref().map_or("not signed".to_owned(), |s| format!("signed by {s}"))
    )]
    NotSignedBy {
        /// The file.
        file: PathBuf,
        /// The plugin it names.
        plugin: String,
        /// The `trust.keys` entries its settings are bound to.
        signers: Vec<String>,
        /// Who signed the file, if anyone.
        signer: Option<String>,
    },
}

/// A network of addresses, `ADDR/PREFIX` or a single `ADDR`, as a string in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(pub ipnet::IpNet);

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let net = match s.parse::<ipnet::IpNet>() {
            Ok(net) => net,
            Err(_) => s
                .parse::<std::net::IpAddr>()
                .map(ipnet::IpNet::from)
                .map_err(|_| format!("expected ADDR/PREFIX or an IP address, got {s:?}"))?,
        };
        Ok(Cidr(net.trunc()))
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            path: "/mcp".into(),
            max_body_bytes: 4 * 1024 * 1024,
            max_other_body_bytes: 256 * 1024,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_sessions: 10_000,
            session_idle_secs: 30 * 60,
            max_sessions_per_caller: 64,
            max_connections: 1024,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 30,
            max_connections_per_address: None,
            health_connections: 16,
            max_streams_per_caller: 16,
            write_timeout_secs: 30,
            trusted_proxies: Vec::new(),
        }
    }
}

/// How 2026 `requestState` values (input-required rounds) are sealed.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RequestStateSettings {
    /// HMAC keys (use `${ENV_VAR}`): the first seals, any opens (rotation). Every replica behind one
    /// endpoint needs the same list. Empty: a random key per process (a single server only).
    pub keys: Vec<String>,
    /// How long a client may take to answer a round, in seconds.
    pub ttl_secs: u64,
}

impl Default for RequestStateSettings {
    fn default() -> Self {
        RequestStateSettings {
            keys: Vec::new(),
            ttl_secs: 600,
        }
    }
}

/// Where tasks (and, in a fleet, legacy sessions) are kept: the `store` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSetting {
    /// Embedded SQLite in this file (`sqlite:PATH`), or at the default place (`sqlite`: the
    /// user's state directory, `$XDG_STATE_HOME/mcp-host/tasks.sqlite`).
    Sqlite(Option<PathBuf>),
    /// In memory: nothing outlives the process (`memory`).
    Memory,
    /// Redis at this URL (`redis://…`, `rediss://…` over TLS, `redis+unix://…`), shared by every
    /// replica. Credentials go in the URL (`rediss://user:${REDIS_PASSWORD}@host:6380/0`); they
    /// are never shown (`/healthz`, logs, `mcp-host config`).
    Redis(String),
}

impl StoreSetting {
    /// Parse a `store` value; `base_dir` resolves a relative SQLite path.
    pub fn parse(value: &str, base_dir: &std::path::Path) -> Result<Self, String> {
        let value = value.trim();
        if value == "sqlite" {
            return Ok(StoreSetting::Sqlite(None));
        }
        if value == "memory" {
            return Ok(StoreSetting::Memory);
        }
        if let Some(path) = value.strip_prefix("sqlite:").filter(|p| !p.is_empty()) {
            return Ok(StoreSetting::Sqlite(Some(base_dir.join(path))));
        }
        if ["redis://", "rediss://", "redis+unix://"]
            .iter()
            .any(|scheme| value.starts_with(scheme))
        {
            return Ok(StoreSetting::Redis(value.to_owned()));
        }
        // Of a URL, only the scheme is named: the rest may hold a password.
        let shown = value.split_once("://").map_or_else(
            || format!("{value:?}"),
            |(scheme, _)| format!("a {scheme}:// URL"),
        );
        Err(format!(
            "expected `sqlite`, `sqlite:PATH`, `memory`, or a `redis://`, `rediss://` (TLS) or \
             `redis+unix://` URL, got {shown}"
        ))
    }
}

impl std::fmt::Display for StoreSetting {
    /// The `store` value this setting parses from.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSetting::Sqlite(None) => f.write_str("sqlite"),
            StoreSetting::Sqlite(Some(path)) => write!(f, "sqlite:{}", path.display()),
            StoreSetting::Memory => f.write_str("memory"),
            StoreSetting::Redis(url) => f.write_str(url),
        }
    }
}

impl Serialize for StoreSetting {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Bounds and timing of tasks (the 2026 tasks extension).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TaskSettings {
    /// How long a task and its result are kept, from its creation (`ttlMs`).
    pub ttl_secs: u64,
    /// How often clients are asked to poll (`pollIntervalMs`).
    pub poll_interval_ms: u64,
    /// Tasks one caller may have stored (running or finished, until they expire); more are
    /// refused (HTTP 429, -32010).
    pub max_per_caller: usize,
    /// Tasks stored in total; more are refused (HTTP 429, -32010).
    pub max_tasks: usize,
    /// Largest result a task keeps, in bytes of its JSON; a task whose result is larger fails
    /// with an error naming its size and the limit (the result is not stored).
    pub max_result_bytes: usize,
    /// Seconds a replica's claim on a running task lasts without renewal: a task whose replica
    /// stopped (crashed, killed, lost its store) is reported failed once its claim runs out.
    pub lease_secs: u64,
    /// Bytes the stored task records of one caller may take in total (arguments, answers and
    /// results, until they expire): a new task over it is refused (HTTP 429, -32010), a result
    /// that would pass it fails its task.
    pub max_bytes_per_caller: u64,
    /// Bytes the stored task records of all callers may take in total, refused or failed alike.
    pub max_total_bytes: u64,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            ttl_secs: 3600,
            poll_interval_ms: 500,
            max_per_caller: 256,
            max_tasks: 100_000,
            max_result_bytes: 1024 * 1024,
            lease_secs: 10,
            max_bytes_per_caller: 64 * 1024 * 1024,
            max_total_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// How HTTP callers authenticate.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// Every HTTP request needs a valid token, not only calls of tools that take `UserInfo`.
    pub require_auth: bool,
    /// This server's resource URI: the audience JWTs must name (RFC 8707) and the `resource` of the
    /// protected-resource metadata. Default: `http://<listen><http.path>`.
    pub resource: Option<String>,
    /// Authorization servers advertised in `/.well-known/oauth-protected-resource`.
    pub authorization_servers: Vec<String>,
    /// JWT verification.
    pub jwt: JwtSettings,
    /// Personal MCP secrets (only their SHA-256 is stored).
    pub secrets: Vec<SecretEntry>,
}

/// JWT verification keys and rules.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct JwtSettings {
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// HS256 shared secret (use `${ENV_VAR}`).
    pub hs256_secret: Option<String>,
    /// RS256 / ES256 public keys as PEM files (relative to the config file).
    pub public_keys: Vec<PathBuf>,
    /// A local JWKS file (relative to the config file).
    pub jwks_file: Option<PathBuf>,
    /// The claim naming the agent a token is bound to.
    pub agent_claim: String,
    /// Clock skew tolerated for `exp` / `nbf`, in seconds.
    pub leeway_secs: u64,
}

impl Default for JwtSettings {
    fn default() -> Self {
        JwtSettings {
            issuer: None,
            hs256_secret: None,
            public_keys: Vec::new(),
            jwks_file: None,
            agent_claim: "agent".into(),
            leeway_secs: 30,
        }
    }
}

/// One personal MCP secret: its SHA-256 and who it belongs to.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretEntry {
    /// Hex SHA-256 of the secret.
    pub sha256: String,
    /// The user it authenticates.
    pub user: String,
    /// The agent it is bound to, if any.
    #[serde(default)]
    pub agent: Option<String>,
    /// RFC 3339 expiry, if any.
    #[serde(default)]
    pub expires: Option<String>,
}

/// How the log is written.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The `traces` section: OpenTelemetry spans over OTLP/HTTP.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TraceSettings {
    /// Where spans go: an OTLP/HTTP endpoint, e.g. `http://127.0.0.1:4318` (`/v1/traces` is added
    /// when the URL has no path). Tracing is off without one.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// The share of the traces started here that are kept (a client's sampled `traceparent` is
    /// always followed).
    pub sample_ratio: f64,
}

impl Default for TraceSettings {
    fn default() -> Self {
        TraceSettings {
            otlp_endpoint: None,
            service_name: "mcp-host".into(),
            sample_ratio: 1.0,
        }
    }
}

/// One agent: a named view of the tools.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    /// Tool-name globs the agent may see (all when empty).
    pub allow: Vec<String>,
    /// Tool-name globs it may not see (deny wins).
    pub deny: Vec<String>,
    /// How `tools/list` shows the agent its tools: all of them, or a search tool and a call tool.
    pub tools: ToolsMode,
    /// With `tools: search`: globs of tools listed all the same (besides the search and call tools).
    pub always_list: Vec<String>,
    /// What this agent is shown of tools, over the source's and the global overrides (tools by
    /// the name they are served under without overrides; tools only: every agent is shown the
    /// same prompts and resources). See `docs/operators/overrides.md`.
    #[serde(skip_serializing_if = "DefinitionOverrides::is_empty")]
    pub overrides: DefinitionOverrides,
    /// The guardrails on the results this agent gets, over the source's and the global ones
    /// (tools by the name clients call them by). See `docs/operators/guardrails.md`.
    #[serde(skip_serializing_if = "Guardrails::is_empty")]
    pub guardrails: Guardrails,
}

/// How an agent's `tools/list` shows its tools.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ToolsMode {
    /// Every tool the agent may see.
    #[default]
    All,
    /// A small fixed set: a search tool (query → the best-matching tools with their schemas), a call
    /// tool (name + arguments), and the agent's `always_list` tools. Every visible tool stays
    /// callable directly.
    Search,
}

/// Per-service or per-tool overrides.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallSettings {
    /// Call timeout in seconds.
    pub timeout_secs: Option<f64>,
}

/// Settings for one plugin, keyed by its name under `plugins:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PluginSettings {
    /// Prepended to the plugin's tool names (after the directory's prefix).
    pub prefix: String,
    /// Call timeout for all its tools, in seconds.
    pub timeout_secs: Option<f64>,
    /// Calls running at once in this plugin.
    pub max_concurrent_calls: Option<usize>,
    /// Overrides per service name.
    pub services: BTreeMap<String, CallSettings>,
    /// Overrides per tool name (the plugin's own name, before prefixes).
    pub tools: BTreeMap<String, CallSettings>,
    /// The plugin's own configuration section, handed to it as JSON.
    pub config: Value,
    /// How it runs: raises its tool directory's `isolation`, never lowers it (default
    /// `in_process`).
    pub isolation: Option<Isolation>,
    /// The tool directories or plugin files that may serve this plugin name (empty: any). A file
    /// elsewhere that calls itself by this name is refused, so it never gets these settings —
    /// permissions, data directory, configuration. Relative paths resolve like `tool_dirs`.
    pub from: Vec<PathBuf>,
    /// The `trust.keys` entries a file serving this plugin name must be signed by (empty: any
    /// file, signed or not).
    pub signed_by: Vec<String>,
    /// Limits of its worker process (over the global `limits`).
    pub limits: WorkerLimits,
    /// What it may reach when sandboxed.
    pub permissions: Permissions,
    /// Run `sandbox` with what the kernel offers when it cannot enforce every permission (no
    /// Landlock, or an older one), instead of refusing to start the plugin.
    pub allow_weaker_sandbox: bool,
    /// Its data directory (default `<data_dir>/<plugin>`), handed to it by the host API and
    /// granted read and write when sandboxed.
    pub data_dir: Option<PathBuf>,
    /// What clients are shown of its tools, prompts and resources, and the arguments the host
    /// fixes or fills (tools and prompts by the plugin's own names, before prefixes), over the
    /// global `overrides`. See `docs/operators/overrides.md`.
    #[serde(skip_serializing_if = "DefinitionOverrides::is_empty")]
    pub overrides: DefinitionOverrides,
    /// The guardrails on its tools' results (tools by the plugin's own names, before prefixes
    /// and overrides), over the global `guardrails`. See `docs/operators/guardrails.md`.
    #[serde(skip_serializing_if = "Guardrails::is_empty")]
    pub guardrails: Guardrails,
}

/// The default probe cache (`probe_cache`): `$XDG_CACHE_HOME/mcp-host/probed` or
/// `~/.cache/mcp-host/probed`.
pub fn default_probe_cache() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("mcp-host").join("probed"))
}

/// The host's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Config {
    /// The file the configuration came from (`None` when defaults only).
    #[serde(skip)]
    #[schemars(skip)]
    pub source: Option<PathBuf>,
    /// Tool directories in precedence order.
    pub tool_dirs: Vec<ToolDir>,
    /// Call limits.
    pub limits: Limits,
    /// Per-plugin settings.
    pub plugins: BTreeMap<String, PluginSettings>,
    /// Probe each plugin in a child process before loading it in-process.
    pub probe: bool,
    /// Where files that passed the probe are remembered across runs (by path, size, mtime, inode
    /// and host build), with the private copies beside it. Default:
    /// `$XDG_CACHE_HOME/mcp-host/probed` (`~/.cache/mcp-host/probed`); `false` probes every file at
    /// every start.
    pub probe_cache: Option<PathBuf>,
    /// `serve` loads a plugin that allows it (`export_plugin!(load: on_first_call, ...)`) at its
    /// first call, from the manifest it exported at an earlier start (remembered beside the probe
    /// cache); `false` loads every plugin at start.
    pub load_on_first_call: bool,
    /// Where plugins keep their data: each plugin gets `<data_dir>/<plugin name>`
    /// ([`mcp_plugin_sdk::HostApi::data_dir`]), created when it first asks. Default:
    /// `$XDG_DATA_HOME/mcp-host` (`~/.local/share/mcp-host`), or `data` beside the configuration
    /// file when there is no home directory.
    pub data_dir: PathBuf,
    /// Where private copies of plugin files are made (a fresh directory under the system's temp dir
    /// when unset).
    pub runtime_dir: Option<PathBuf>,
    /// Address the HTTP transport listens on.
    pub listen: SocketAddr,
    /// HTTP transport settings.
    pub http: HttpSettings,
    /// Seconds shutdown waits for in-flight requests.
    pub shutdown_grace_secs: f64,
    /// The user id stdio callers run as (default: `$USER`).
    pub stdio_user: Option<String>,
    /// Entries per page of the list methods.
    pub list_page_size: usize,
    /// `ttlMs` on cacheable 2026 results (`server/discover`, the lists, `resources/read`).
    pub cache_ttl_ms: u64,
    /// Instructions for clients, sent in `initialize` / `server/discover`.
    pub instructions: Option<String>,
    /// Authentication of HTTP callers.
    pub auth: AuthSettings,
    /// Sealing of 2026 `requestState` values.
    pub request_state: RequestStateSettings,
    /// Agents: named views of the tools.
    pub agents: BTreeMap<String, AgentSettings>,
    /// What clients are shown of any source's tools, prompts and resources, and the arguments the
    /// host fixes or fills (by the name served without overrides); a source's own
    /// (`plugins.<name>.overrides`) and an agent's (`agents.<name>.overrides`) take precedence.
    /// See `docs/operators/overrides.md`.
    pub overrides: DefinitionOverrides,
    /// Guardrails on results: the detectors (credentials, personal data, prompt injection) run
    /// over what tools return and what a finding does (`flag`, `redact`, `block`), for every
    /// tool and per tool; a source's (`plugins.<name>.guardrails`) and an agent's
    /// (`agents.<name>.guardrails`) take precedence. See `docs/operators/guardrails.md`.
    pub guardrails: Guardrails,
    /// Call policy: rules over the caller, the tool and the arguments; budgets.
    pub policy: PolicySettings,
    /// The operator console and tool playground in the browser.
    pub console: ConsoleSettings,
    /// How the log is written.
    pub log_format: LogFormat,
    /// Where the audit log goes (`stderr`, or a file); no audit log when unset.
    pub audit_log: Option<PathBuf>,
    /// A separate address serving `/metrics` (then the main listener does not).
    pub metrics_listen: Option<SocketAddr>,
    /// A bearer token `/metrics` requires, when set.
    pub metrics_token: Option<String>,
    /// OpenTelemetry traces.
    pub traces: TraceSettings,
    /// Signing keys, signature requirements and pinning.
    pub trust: TrustSettings,
    /// The lock file's pinned definitions (read with the configuration when pinning is on in any
    /// tool directory; empty otherwise).
    #[serde(skip)]
    #[schemars(skip)]
    pub pins: Arc<lock::PinLock>,
    /// Where tasks (and, with Redis, legacy sessions) are kept: `sqlite` (the user's state
    /// directory, `$XDG_STATE_HOME/mcp-host/tasks.sqlite`), `sqlite:PATH`, `memory`, or a
    /// `redis://` URL shared by every replica.
    #[schemars(with = "String")]
    pub store: StoreSetting,
    /// Bounds and timing of tasks.
    pub tasks: TaskSettings,
    /// How the credentials the host obtains for users of upstream servers are kept (the token
    /// vault).
    pub upstream_auth: UpstreamAuthSettings,
    /// This replica's name in the `Mcp-Replica` response header and the log (default: random).
    pub replica: Option<String>,
    /// The directory relative paths in the configuration resolve against.
    #[serde(skip)]
    #[schemars(skip)]
    pub base_dir: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            source: None,
            tool_dirs: vec![
                ToolDir {
                    path: PathBuf::from("tools"),
                    optional: true,
                    ..ToolDir::default()
                },
                ToolDir {
                    path: PathBuf::from("target/release"),
                    files: PACKAGED_PLUGINS.iter().map(|s| (*s).to_owned()).collect(),
                    ..ToolDir::default()
                },
            ],
            limits: Limits::default(),
            plugins: BTreeMap::new(),
            probe: true,
            probe_cache: default_probe_cache(),
            load_on_first_call: true,
            data_dir: default_data_dir(&|name| std::env::var(name).ok(), Path::new(".")),
            runtime_dir: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 18080)),
            http: HttpSettings::default(),
            shutdown_grace_secs: 10.0,
            stdio_user: None,
            list_page_size: 100,
            cache_ttl_ms: 0,
            instructions: None,
            auth: AuthSettings::default(),
            request_state: RequestStateSettings::default(),
            agents: BTreeMap::new(),
            overrides: DefinitionOverrides::default(),
            guardrails: Guardrails::default(),
            policy: PolicySettings::default(),
            console: ConsoleSettings::default(),
            log_format: LogFormat::Text,
            audit_log: None,
            metrics_listen: None,
            metrics_token: None,
            traces: TraceSettings::default(),
            trust: TrustSettings::default(),
            pins: Arc::default(),
            store: StoreSetting::Sqlite(None),
            tasks: TaskSettings::default(),
            upstream_auth: UpstreamAuthSettings::default(),
            replica: None,
            base_dir: PathBuf::from("."),
        }
    }
}

/// The platform's data directory for mcp-host: `$XDG_DATA_HOME/mcp-host`, else
/// `~/.local/share/mcp-host` (`~/Library/Application Support/mcp-host` on macOS,
/// `%LOCALAPPDATA%\mcp-host` on Windows), else `data` in `config_dir` when there is no home.
pub fn default_data_dir(env: &dyn Fn(&str) -> Option<String>, config_dir: &Path) -> PathBuf {
    let absolute = |name: &str| env(name).map(PathBuf::from).filter(|p| p.is_absolute());
    let platform = if cfg!(windows) {
        absolute("LOCALAPPDATA")
    } else if cfg!(target_os = "macos") {
        absolute("HOME").map(|h| h.join("Library").join("Application Support"))
    } else {
        absolute("XDG_DATA_HOME").or_else(|| absolute("HOME").map(|h| h.join(".local/share")))
    };
    platform.map_or_else(|| config_dir.join("data"), |dir| dir.join("mcp-host"))
}

impl Config {
    /// The keys that apply at start only and differ in `new`: a reload keeps running with the
    /// old value of each (the listener, the session store, the worker pool and the runtime
    /// directory are built once); everything else applies at the reload.
    pub fn start_only_changes(&self, new: &Config) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let mut check = |key: &'static str, differs: bool| {
            if differs {
                changed.push(key);
            }
        };
        check("listen", self.listen != new.listen);
        check("http.path", self.http.path != new.http.path);
        check(
            "http.max_sessions",
            self.http.max_sessions != new.http.max_sessions,
        );
        check(
            "http.session_idle_secs",
            self.http.session_idle_secs != new.http.session_idle_secs,
        );
        check(
            "shutdown_grace_secs",
            self.shutdown_grace_secs != new.shutdown_grace_secs,
        );
        check("stdio_user", self.stdio_user != new.stdio_user);
        check("runtime_dir", self.runtime_dir != new.runtime_dir);
        check("data_dir", self.data_dir != new.data_dir);
        check("log_format", self.log_format != new.log_format);
        check("audit_log", self.audit_log != new.audit_log);
        check("metrics_listen", self.metrics_listen != new.metrics_listen);
        check("traces", self.traces != new.traces);
        check("probe", self.probe != new.probe);
        check("probe_cache", self.probe_cache != new.probe_cache);
        check(
            "load_on_first_call",
            self.load_on_first_call != new.load_on_first_call,
        );
        check(
            "limits.max_concurrent_calls",
            self.limits.max_concurrent_calls != new.limits.max_concurrent_calls,
        );
        check(
            "http.max_sessions_per_caller",
            self.http.max_sessions_per_caller != new.http.max_sessions_per_caller,
        );
        check(
            "http.max_connections",
            self.http.max_connections != new.http.max_connections,
        );
        check(
            "http.health_connections",
            self.http.health_connections != new.http.health_connections,
        );
        check(
            "http.header_read_timeout_secs",
            self.http.header_read_timeout_secs != new.http.header_read_timeout_secs,
        );
        check("store", self.store != new.store);
        check("replica", self.replica != new.replica);
        changed
    }

    /// The settings of plugin `name` (defaults when it has no section).
    pub fn plugin(&self, name: &str) -> PluginSettings {
        self.plugins.get(name).cloned().unwrap_or_default()
    }

    /// How plugin `name`, found in a directory with isolation `dir`, runs: the stronger of its own
    /// setting and its directory's (default in-process). A plugin's name is what its file says
    /// of itself, so its own setting can raise the isolation its directory asks for, never lower
    /// it.
    pub fn isolation(&self, name: &str, dir: Option<Isolation>) -> Isolation {
        let own = self.plugins.get(name).and_then(|p| p.isolation);
        own.max(dir).unwrap_or_default()
    }

    /// How upstream server `name` from an entry with isolation `entry` runs: like a plugin, but
    /// never in the host (`process` at least).
    pub fn upstream_isolation(&self, name: &str, entry: Option<Isolation>) -> Isolation {
        self.isolation(name, entry).max(Isolation::Process)
    }

    /// Whether the file `file`, found in tool directory `dir` and signed by the `trust.keys`
    /// entry `signer` (when signed), may serve plugin `name`: always, unless the plugin's
    /// settings are bound to other files (`from`) or signers (`signed_by`). The error says why
    /// not, naming the binding.
    pub fn check_binding(
        &self,
        name: &str,
        file: &std::path::Path,
        dir: &std::path::Path,
        signer: Option<&str>,
    ) -> Result<(), BindingError> {
        let Some(settings) = self.plugins.get(name) else {
            return Ok(());
        };
        if !settings.from.is_empty() && !settings.from.iter().any(|f| f == file || f == dir) {
            return Err(BindingError::NotFrom {
                file: file.to_path_buf(),
                plugin: name.to_owned(),
                bound: settings.from.clone(),
            });
        }
        if !settings.signed_by.is_empty()
            && !signer.is_some_and(|s| settings.signed_by.iter().any(|k| k == s))
        {
            return Err(BindingError::NotSignedBy {
                file: file.to_path_buf(),
                plugin: name.to_owned(),
                signers: settings.signed_by.clone(),
                signer: signer.map(str::to_owned),
            });
        }
        Ok(())
    }

    /// Whether some plugin chooses its isolation by name (so a file's plugin name must be known
    /// before it is loaded).
    pub fn isolates_by_name(&self) -> bool {
        self.plugins.values().any(|p| p.isolation.is_some())
    }

    /// The resource limits of plugin `name`'s worker process.
    pub fn worker_limits(&self, name: &str) -> WorkerLimits {
        self.plugins
            .get(name)
            .map(|p| p.limits.or(&self.limits.worker()))
            .unwrap_or_else(|| self.limits.worker())
    }

    /// Plugin `name`'s data directory: its own `data_dir`, else `<data_dir>/<name>`.
    pub fn plugin_data_dir(&self, name: &str) -> PathBuf {
        self.plugins
            .get(name)
            .and_then(|p| p.data_dir.clone())
            .unwrap_or_else(|| self.data_dir.join(name))
    }

    /// The `tool_dirs` entry a plugin was found in: by its position, checked against its path
    /// (`None` for a file outside the tool directories, e.g. `mcp-host check` of any file).
    pub fn tool_dir(&self, index: usize, path: &std::path::Path) -> Option<&ToolDir> {
        self.tool_dirs
            .get(index)
            .filter(|d| d.path == path)
            .or_else(|| self.tool_dirs.iter().find(|d| d.path == path))
    }

    /// Whether plugins in tool directory number `index` (at `path`) must be signed.
    pub fn requires_signature(&self, index: usize, path: &std::path::Path) -> bool {
        self.tool_dir(index, path)
            .and_then(|d| d.require_signature)
            .unwrap_or(self.trust.require_signature)
    }

    /// How definitions served from tool directory number `index` (at `path`) are pinned.
    pub fn pinning(&self, index: usize, path: &std::path::Path) -> PinMode {
        self.tool_dir(index, path)
            .and_then(|d| d.pinning)
            .unwrap_or(self.trust.pinning)
    }

    /// What is done with a suspicious definition served from tool directory number `index`.
    pub fn definition_scan(&self, index: usize, path: &std::path::Path) -> ScanMode {
        self.tool_dir(index, path)
            .and_then(|d| d.definition_scan)
            .unwrap_or(self.trust.definition_scan)
    }

    /// Whether any tool directory checks definitions against the lock file.
    pub fn pinning_in_use(&self) -> bool {
        self.trust.pinning != PinMode::Off
            || self
                .tool_dirs
                .iter()
                .any(|d| d.pinning.is_some_and(|m| m != PinMode::Off))
    }

    /// The lock file `mcp-host pin` writes and pinning reads.
    pub fn lock_path(&self) -> PathBuf {
        self.base_dir.join(
            self.trust
                .lock_file
                .as_deref()
                .unwrap_or(std::path::Path::new(lock::DEFAULT_LOCK_FILE)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn layers_merge_maps_and_replace_lists_with_paths_relative_to_their_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = write(
            tmp.path(),
            "mcp-host.yaml",
            "tool_dirs: [a, b]\nlimits: {call_timeout_secs: 5}\nplugins:\n  time: {prefix: t_, config: {zones: [UTC]}}\n",
        );
        write(
            tmp.path(),
            "config.prod.yaml",
            "tool_dirs: [c]\nplugins:\n  time: {timeout_secs: 2}\n",
        );
        let env = vec![
            ("MCP_HOST_ENV".to_owned(), "prod".to_owned()),
            // Read by `publish`/`add`, not a key: it must not stop the configuration loading.
            (REGISTRY_TOKEN_VAR.to_owned(), "token".to_owned()),
            (
                "MCP_HOST_LIMITS__MAX_CONCURRENT_CALLS".to_owned(),
                "7".to_owned(),
            ),
        ];
        let c = Config::load_with_env(Some(&base), &env).expect("load");
        // The configured directory, then the managed one `mcp-host add` installs into.
        assert_eq!(c.tool_dirs.len(), 2);
        assert_eq!(c.tool_dirs[0].path, tmp.path().join("c"));
        assert_eq!(c.tool_dirs[1].path, c.installed_dir());
        assert_eq!(c.tool_dirs[1].isolation, Some(Isolation::Sandbox));
        assert_eq!(c.tool_dirs[1].require_signature, Some(true));
        assert_eq!(c.limits.call_timeout_secs, 5.0);
        assert_eq!(c.limits.max_concurrent_calls, 7);
        let time = c.plugin("time");
        assert_eq!(time.prefix, "t_");
        assert_eq!(time.timeout_secs, Some(2.0));
        assert_eq!(time.config["zones"][0], "UTC");
    }

    #[test]
    fn unknown_key_is_an_error_naming_key_and_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = write(tmp.path(), "mcp-host.yaml", "limits: {call_timeout: 5}\n");
        let err = Config::load_with_env(Some(&base), &[])
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("mcp-host.yaml"), "{err}");
        assert!(err.contains("limits.call_timeout"), "{err}");
    }

    #[test]
    fn unknown_key_in_a_tool_dir_entry_is_an_error_naming_key_and_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = write(
            tmp.path(),
            "mcp-host.yaml",
            "tool_dirs:\n  - a\n  - {path: x, prefx: y}\n",
        );
        let err = Config::load_with_env(Some(&base), &[])
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("mcp-host.yaml"), "{err}");
        assert!(
            err.contains("tool_dirs[1]") && err.contains("prefx"),
            "{err}"
        );
        let ok = write(
            tmp.path(),
            "ok.yaml",
            "tool_dirs: [a, {path: b, prefix: p_}]\n",
        );
        let c = Config::load_with_env(Some(&ok), &[]).expect("load");
        assert_eq!(c.tool_dirs[1].prefix, "p_");
    }

    #[test]
    fn follow_redirects_is_an_http_upstreams_key() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let stdio = write(
            tmp.path(),
            "stdio.yaml",
            "tool_dirs:\n  - server: {command: [x], follow_redirects: same_origin}\n    name: s\n",
        );
        let err = Config::load_with_env(Some(&stdio), &[])
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("tool_dirs.0.server.follow_redirects"), "{err}");
        let http = write(
            tmp.path(),
            "http.yaml",
            "tool_dirs:\n  - server: {url: \"https://h/mcp\", follow_redirects: same_origin}\n    name: h\n",
        );
        let c = Config::load_with_env(Some(&http), &[]).expect("load");
        let server = c.tool_dirs[0].server.as_ref().expect("server");
        assert_eq!(server.follow_redirects, Some(FollowRedirects::SameOrigin));
    }

    #[test]
    fn trust_rules_apply_per_tool_directory_and_a_bad_key_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let key = "RWRoQRdNYXnVZsdtQ5F58D2Y2XFX7zMNw9qjO3uzqwcBNqO8xwKGUWt6";
        let base = write(
            tmp.path(),
            "mcp-host.yaml",
            &format!(
                "tool_dirs:\n  - {{path: a, require_signature: false, pinning: warn}}\n  - b\n\
                 trust:\n  keys: {{release: \"{key}\"}}\n  require_signature: true\n  pinning: enforce\n"
            ),
        );
        let c = Config::load_with_env(Some(&base), &[]).expect("load");
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        assert!(!c.requires_signature(0, &a) && c.requires_signature(1, &b));
        assert_eq!(c.pinning(0, &a), PinMode::Warn);
        assert_eq!(c.pinning(1, &b), PinMode::Enforce);
        // A file outside the tool directories (`mcp-host check`) follows the global rules.
        assert!(c.requires_signature(usize::MAX, &tmp.path().join("elsewhere")));
        assert_eq!(c.lock_path(), tmp.path().join("mcp-host.lock"));
        assert!(
            c.pins
                .problem
                .as_deref()
                .is_some_and(|p| p.contains("does not exist"))
        );

        let bad = write(
            tmp.path(),
            "bad.yaml",
            "trust:\n  keys: {release: not-a-key}\n",
        );
        let err = Config::load_with_env(Some(&bad), &[])
            .expect_err("bad key")
            .to_string();
        assert!(
            err.contains("bad.yaml") && err.contains("trust.keys.release"),
            "{err}"
        );
        let typo = write(
            tmp.path(),
            "typo.yaml",
            "tool_dirs: [{path: a, pining: warn}]\n",
        );
        let err = Config::load_with_env(Some(&typo), &[])
            .expect_err("typo")
            .to_string();
        assert!(err.contains("pining"), "{err}");
    }

    #[test]
    fn wrong_type_is_an_error_naming_key() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = write(tmp.path(), "mcp-host.yaml", "probe: sometimes\n");
        let err = Config::load_with_env(Some(&base), &[])
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("probe"), "{err}");
    }

    #[test]
    fn env_references_expand_and_missing_ones_fail() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = write(
            tmp.path(),
            "mcp-host.yaml",
            "plugins:\n  x: {config: {key: \"${SECRET}\", other: \"${NOPE:-fallback}\"}}\n",
        );
        let env = vec![("SECRET".to_owned(), "s3cret".to_owned())];
        let c = Config::load_with_env(Some(&base), &env).expect("load");
        assert_eq!(c.plugin("x").config["key"], "s3cret");
        assert_eq!(c.plugin("x").config["other"], "fallback");
        let err = Config::load_with_env(Some(&base), &[]).expect_err("missing var");
        assert!(err.to_string().contains("SECRET"), "{err}");
    }

    #[test]
    fn data_dir_defaults_to_the_platform_data_dir_else_beside_the_config() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = write(tmp.path(), "mcp-host.yaml", "");
        let var = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let c = Config::load_with_env(Some(&base), &[var("XDG_DATA_HOME", "/xdg")]).expect("load");
        if cfg!(all(unix, not(target_os = "macos"))) {
            assert_eq!(c.data_dir, PathBuf::from("/xdg/mcp-host"));
            let c = Config::load_with_env(Some(&base), &[var("HOME", "/home/ana")]).expect("load");
            assert_eq!(c.data_dir, PathBuf::from("/home/ana/.local/share/mcp-host"));
        }
        let c = Config::load_with_env(Some(&base), &[]).expect("load");
        assert_eq!(c.data_dir, tmp.path().join("data"));
        write(tmp.path(), "mcp-host.yaml", "data_dir: state\n");
        let c = Config::load_with_env(Some(&base), &[var("HOME", "/home/ana")]).expect("load");
        assert_eq!(c.data_dir, tmp.path().join("state"));
    }

    #[test]
    fn seed_alias_mcp_tool_dirs_is_accepted_in_file_and_env() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = write(tmp.path(), "mcp-host.yaml", "MCP_TOOL_DIRS:\n  - tools\n");
        let c = Config::load_with_env(Some(&base), &[]).expect("load");
        assert_eq!(c.tool_dirs[0].path, tmp.path().join("tools"));
        let env = vec![("MCP_TOOL_DIRS".to_owned(), "/x,/y".to_owned())];
        let c = Config::load_with_env(Some(&base), &env).expect("load");
        assert_eq!(c.tool_dirs.len(), 3);
        assert_eq!(c.tool_dirs[1].path, PathBuf::from("/y"));
    }
}
