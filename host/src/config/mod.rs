//! Configuration: YAML layers (base file, `config.{env}.yaml` overlay, `MCP_HOST_*` variables) merged
//! into one typed [`Config`].
//!
//! Each layer is checked on its own against the schema of the file format, so an unknown key or a
//! wrong type is reported with the key path and the file (or variable) it came from. Maps merge deeply;
//! lists such as `tool_dirs` are replaced. Relative paths resolve against the directory of the file
//! that set them. String values may reference the environment as `${NAME}` or `${NAME:-default}`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

/// The default configuration file, relative to the working directory.
pub const DEFAULT_CONFIG: &str = "config/mcp-host.yaml";

/// A configuration problem, naming where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
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

/// One entry of `tool_dirs`: a path, optionally with a tool-name prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDir {
    /// The directory (absolute after loading).
    pub path: PathBuf,
    /// Prepended to every tool name found in it.
    pub prefix: String,
}

/// Limits on tool calls.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            call_timeout_secs: 60.0,
            max_concurrent_calls: 64,
            max_concurrent_calls_per_plugin: 16,
            max_call_depth: 8,
            max_reloads: 500,
        }
    }
}

/// Streamable HTTP settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// The MCP endpoint path.
    pub path: String,
    /// Largest accepted request body (413 above).
    pub max_body_bytes: usize,
    /// Origins allowed besides localhost forms (exact `scheme://host[:port]`).
    pub allowed_origins: Vec<String>,
    /// Host names allowed besides localhost forms.
    pub allowed_hosts: Vec<String>,
    /// Legacy (2025) sessions kept at most.
    pub max_sessions: usize,
    /// Legacy sessions expire after this many idle seconds.
    pub session_idle_secs: u64,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            path: "/mcp".into(),
            max_body_bytes: 4 * 1024 * 1024,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_sessions: 10_000,
            session_idle_secs: 30 * 60,
        }
    }
}

/// How HTTP callers authenticate.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Deserialize)]
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

/// One agent: a named view of the tools.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    /// Tool-name globs the agent may see (all when empty).
    pub allow: Vec<String>,
    /// Tool-name globs it may not see (deny wins).
    pub deny: Vec<String>,
}

/// Per-service or per-tool overrides.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSettings {
    /// Call timeout in seconds.
    pub timeout_secs: Option<f64>,
}

/// Settings for one plugin, keyed by its name under `plugins:`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
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
}

/// The host's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file the configuration came from (`None` when defaults only).
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
    /// and host build); `None` probes every file at every start.
    pub probe_cache: Option<PathBuf>,
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
    /// Tools per `tools/list` page.
    pub list_page_size: usize,
    /// `ttlMs` on cacheable 2026 results (`server/discover`, `tools/list`).
    pub cache_ttl_ms: u64,
    /// Instructions for clients, sent in `initialize` / `server/discover`.
    pub instructions: Option<String>,
    /// Authentication of HTTP callers.
    pub auth: AuthSettings,
    /// Agents: named views of the tools.
    pub agents: BTreeMap<String, AgentSettings>,
    /// The directory relative paths in the configuration resolve against.
    pub base_dir: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            source: None,
            tool_dirs: vec![
                ToolDir {
                    path: PathBuf::from("tools"),
                    prefix: String::new(),
                },
                ToolDir {
                    path: PathBuf::from("target/release"),
                    prefix: String::new(),
                },
            ],
            limits: Limits::default(),
            plugins: BTreeMap::new(),
            probe: true,
            probe_cache: crate::plugins::probe::ProbeCache::default_path(),
            runtime_dir: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 18080)),
            http: HttpSettings::default(),
            shutdown_grace_secs: 10.0,
            stdio_user: None,
            list_page_size: 100,
            cache_ttl_ms: 0,
            instructions: None,
            auth: AuthSettings::default(),
            agents: BTreeMap::new(),
            base_dir: PathBuf::from("."),
        }
    }
}

/// The shape of one layer: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Layer {
    #[serde(alias = "MCP_TOOL_DIRS")]
    tool_dirs: Option<Vec<ToolDirEntry>>,
    limits: Option<Value>,
    plugins: Option<BTreeMap<String, Value>>,
    probe: Option<bool>,
    /// A path, or `false` to turn the cache off.
    probe_cache: Option<Value>,
    runtime_dir: Option<PathBuf>,
    listen: Option<SocketAddr>,
    http: Option<Value>,
    shutdown_grace_secs: Option<f64>,
    stdio_user: Option<String>,
    list_page_size: Option<usize>,
    cache_ttl_ms: Option<u64>,
    instructions: Option<String>,
    auth: Option<Value>,
    agents: Option<BTreeMap<String, Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ToolDirEntry {
    Path(PathBuf),
    WithPrefix {
        path: PathBuf,
        #[serde(default)]
        prefix: String,
    },
}

/// Where a layer came from, for messages and relative paths.
struct Origin {
    name: String,
    base_dir: PathBuf,
}

impl Config {
    /// Load the configuration: `path` (or [`DEFAULT_CONFIG`] when it exists), its
    /// `config.{MCP_HOST_ENV}.yaml` overlay, then `MCP_HOST_*` and `MCP_TOOL_DIRS` variables.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        Self::load_with_env(path, &vars)
    }

    /// [`Config::load`] with an explicit environment (for tests).
    pub fn load_with_env(
        path: Option<&Path>,
        vars: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let env = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let base_file = match path {
            Some(p) => Some(p.to_path_buf()),
            None => {
                let default = cwd.join(DEFAULT_CONFIG);
                default.exists().then_some(default)
            }
        };

        let mut config = Config::default();
        // Defaults resolve against the working directory.
        for dir in &mut config.tool_dirs {
            dir.path = cwd.join(&dir.path);
        }
        let mut merged = Map::new();
        config.base_dir = cwd.clone();

        if let Some(file) = &base_file {
            let file = absolute(&cwd, file);
            let dir = file.parent().map(Path::to_path_buf).unwrap_or(cwd.clone());
            config.source = Some(file.clone());
            config.base_dir = dir.clone();
            let origin = Origin {
                name: file.display().to_string(),
                base_dir: dir.clone(),
            };
            apply_file(&mut config, &mut merged, &file, &origin, &env)?;
            if let Some(env_name) = env("MCP_HOST_ENV").filter(|e| !e.is_empty()) {
                let overlay = dir.join(format!("config.{env_name}.yaml"));
                if overlay.exists() {
                    let origin = Origin {
                        name: overlay.display().to_string(),
                        base_dir: dir.clone(),
                    };
                    apply_file(&mut config, &mut merged, &overlay, &origin, &env)?;
                }
            }
        }

        // Environment variables: MCP_TOOL_DIRS (the seed's name), then MCP_HOST_<KEY>.
        let mut env_layer = Map::new();
        if let Some(v) = env("MCP_TOOL_DIRS") {
            env_layer.insert("tool_dirs".into(), list_from_env(&v));
        }
        for (name, value) in vars {
            let Some(key) = name.strip_prefix("MCP_HOST_") else {
                continue;
            };
            // Not configuration keys: the overlay selector and the CLI's `--config`.
            if key == "ENV" || key == "CONFIG" || key.is_empty() {
                continue;
            }
            let path: Vec<String> = key.split("__").map(|k| k.to_ascii_lowercase()).collect();
            let parsed = if path.len() == 1 && path[0] == "tool_dirs" {
                list_from_env(value)
            } else {
                scalar_from_env(value)
            };
            insert_path(&mut env_layer, &path, parsed);
        }
        if !env_layer.is_empty() {
            let origin = Origin {
                name: "environment (MCP_HOST_*)".into(),
                base_dir: cwd.clone(),
            };
            apply_value(&mut config, &mut merged, Value::Object(env_layer), &origin)?;
        }

        finish(&mut config, merged)?;
        // The seed's per-agent variables: ALLOWED_TOOLS_{NAME} / DISALLOWED_TOOLS_{NAME} (comma
        // separated; NAME is the agent name in upper case) replace that agent's lists.
        for (name, value) in vars {
            let (agent, allow) = if let Some(a) = name.strip_prefix("ALLOWED_TOOLS_") {
                (a, true)
            } else if let Some(a) = name.strip_prefix("DISALLOWED_TOOLS_") {
                (a, false)
            } else {
                continue;
            };
            if agent.is_empty() {
                continue;
            }
            let key = config
                .agents
                .keys()
                .find(|k| {
                    k.eq_ignore_ascii_case(agent) || k.replace('-', "_").eq_ignore_ascii_case(agent)
                })
                .cloned()
                .unwrap_or_else(|| agent.to_ascii_lowercase());
            let globs: Vec<String> = value
                .split(',')
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_owned)
                .collect();
            let entry = config.agents.entry(key).or_default();
            if allow {
                entry.allow = globs;
            } else {
                entry.deny = globs;
            }
        }
        Ok(config)
    }

    /// The settings of plugin `name` (defaults when it has no section).
    pub fn plugin(&self, name: &str) -> PluginSettings {
        self.plugins.get(name).cloned().unwrap_or_default()
    }
}

/// `p` made absolute against `cwd`, with `.` and `..` resolved lexically (no symlinks followed).
fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    use std::path::Component;
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}

fn list_from_env(v: &str) -> Value {
    let trimmed = v.trim();
    if trimmed.starts_with('[')
        && let Ok(list) = serde_saphyr::from_str::<Value>(trimmed)
    {
        return list;
    }
    let sep = if trimmed.contains(',') { ',' } else { ':' };
    Value::Array(
        trimmed
            .split(sep)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| Value::String(s.to_owned()))
            .collect(),
    )
}

fn scalar_from_env(v: &str) -> Value {
    serde_saphyr::from_str::<Value>(v).unwrap_or_else(|_| Value::String(v.to_owned()))
}

fn insert_path(map: &mut Map<String, Value>, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            map.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = map
                .entry(first.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            if let Value::Object(inner) = entry {
                insert_path(inner, rest, value);
            }
        }
    }
}

fn apply_file(
    config: &mut Config,
    merged: &mut Map<String, Value>,
    file: &Path,
    origin: &Origin,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let mut value: Value = if text.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_saphyr::from_str(&text).map_err(|e| ConfigError::Syntax {
            origin: origin.name.clone(),
            message: e.to_string(),
        })?
    };
    if value.is_null() {
        value = Value::Object(Map::new());
    }
    expand_vars(&mut value, &mut Vec::new(), origin, env)?;
    apply_value(config, merged, value, origin)
}

fn expand_vars(
    value: &mut Value,
    path: &mut Vec<String>,
    origin: &Origin,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    match value {
        Value::String(s) if s.contains("${") => {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(start) = rest.find("${") {
                out.push_str(&rest[..start]);
                let after = &rest[start + 2..];
                let Some(end) = after.find('}') else {
                    out.push_str(&rest[start..]);
                    rest = "";
                    break;
                };
                let inner = &after[..end];
                let (name, default) = match inner.split_once(":-") {
                    Some((n, d)) => (n, Some(d)),
                    None => (inner, None),
                };
                match (env(name), default) {
                    (Some(v), _) => out.push_str(&v),
                    (None, Some(d)) => out.push_str(d),
                    (None, None) => {
                        return Err(ConfigError::MissingVar {
                            origin: origin.name.clone(),
                            key: path.join("."),
                            var: name.to_owned(),
                        });
                    }
                }
                rest = &after[end + 1..];
            }
            out.push_str(rest);
            *s = out;
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                path.push(i.to_string());
                expand_vars(item, path, origin, env)?;
                path.pop();
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                path.push(k.clone());
                expand_vars(v, path, origin, env)?;
                path.pop();
            }
        }
        _ => {}
    }
    Ok(())
}

fn invalid(origin: &Origin, err: serde_path_to_error::Error<serde_json::Error>) -> ConfigError {
    let key = err.path().to_string();
    ConfigError::Invalid {
        origin: origin.name.clone(),
        key: if key == "." {
            "(top level)".into()
        } else {
            key
        },
        message: err.into_inner().to_string(),
    }
}

/// Check one layer against the schema, resolve its paths, and merge it.
fn apply_value(
    config: &mut Config,
    merged: &mut Map<String, Value>,
    value: Value,
    origin: &Origin,
) -> Result<(), ConfigError> {
    let layer: Layer =
        serde_path_to_error::deserialize(value.clone()).map_err(|e| invalid(origin, e))?;
    // Check nested sections of this layer on their own too, so errors name this file.
    if let Some(v) = &layer.limits {
        section::<Limits>(v, origin, "limits")?;
    }
    if let Some(v) = &layer.http {
        section::<HttpSettings>(v, origin, "http")?;
    }
    if let Some(v) = &layer.auth {
        section::<AuthSettings>(v, origin, "auth")?;
    }
    for (name, v) in layer.agents.iter().flatten() {
        section::<AgentSettings>(v, origin, &format!("agents.{name}"))?;
    }
    for (name, v) in layer.plugins.iter().flatten() {
        section::<PluginSettings>(v, origin, &format!("plugins.{name}"))?;
    }
    if let Some(dirs) = layer.tool_dirs {
        config.tool_dirs = dirs
            .into_iter()
            .map(|d| {
                let (path, prefix) = match d {
                    ToolDirEntry::Path(p) => (p, String::new()),
                    ToolDirEntry::WithPrefix { path, prefix } => (path, prefix),
                };
                ToolDir {
                    path: absolute(&origin.base_dir, &path),
                    prefix,
                }
            })
            .collect();
    }
    if let Some(dir) = layer.runtime_dir {
        config.runtime_dir = Some(absolute(&origin.base_dir, &dir));
    }
    if let Some(probe) = layer.probe {
        config.probe = probe;
    }
    match layer.probe_cache {
        None => {}
        Some(Value::Bool(false)) | Some(Value::Null) => config.probe_cache = None,
        Some(Value::String(p)) => {
            config.probe_cache = Some(absolute(&origin.base_dir, Path::new(&p)))
        }
        Some(other) => {
            return Err(ConfigError::Invalid {
                origin: origin.name.clone(),
                key: "probe_cache".into(),
                message: format!("expected a path or false, got {other}"),
            });
        }
    }
    if let Some(listen) = layer.listen {
        config.listen = listen;
    }
    if let Some(v) = layer.shutdown_grace_secs {
        config.shutdown_grace_secs = v;
    }
    if let Some(v) = layer.stdio_user {
        config.stdio_user = Some(v);
    }
    if let Some(v) = layer.list_page_size {
        config.list_page_size = v.max(1);
    }
    if let Some(v) = layer.cache_ttl_ms {
        config.cache_ttl_ms = v;
    }
    if let Some(v) = layer.instructions {
        config.instructions = Some(v);
    }
    if let Value::Object(map) = value {
        for key in ["limits", "plugins", "http", "auth", "agents"] {
            if let Some(v) = map.get(key) {
                let slot = merged.entry(key).or_insert(Value::Null);
                deep_merge(slot, v.clone());
            }
        }
    }
    Ok(())
}

/// Maps merge key by key; anything else (lists included) is replaced.
fn deep_merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                deep_merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn finish(config: &mut Config, merged: Map<String, Value>) -> Result<(), ConfigError> {
    let origin = Origin {
        name: "merged configuration".into(),
        base_dir: PathBuf::new(),
    };
    let present = |key: &str| merged.get(key).filter(|v| !v.is_null());
    if let Some(v) = present("limits") {
        config.limits = section(v, &origin, "limits")?;
    }
    if let Some(v) = present("http") {
        config.http = section(v, &origin, "http")?;
    }
    if let Some(v) = present("auth") {
        config.auth = section(v, &origin, "auth")?;
    }
    if let Some(Value::Object(agents)) = present("agents") {
        for (name, v) in agents {
            let settings = section(v, &origin, &format!("agents.{name}"))?;
            config.agents.insert(name.clone(), settings);
        }
    }
    if let Some(Value::Object(plugins)) = present("plugins") {
        for (name, v) in plugins {
            let settings = section(v, &origin, &format!("plugins.{name}"))?;
            config.plugins.insert(name.clone(), settings);
        }
    }
    Ok(())
}

/// Deserialize the section at `prefix` of one layer; errors name the full key path and the origin.
fn section<T: serde::de::DeserializeOwned>(
    value: &Value,
    origin: &Origin,
    prefix: &str,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let mut e = invalid(origin, e);
        if let ConfigError::Invalid { key, .. } = &mut e {
            *key = if key == "(top level)" {
                prefix.to_owned()
            } else {
                format!("{prefix}.{key}")
            };
        }
        e
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            (
                "MCP_HOST_LIMITS__MAX_CONCURRENT_CALLS".to_owned(),
                "7".to_owned(),
            ),
        ];
        let c = Config::load_with_env(Some(&base), &env).expect("load");
        assert_eq!(c.tool_dirs.len(), 1);
        assert_eq!(c.tool_dirs[0].path, tmp.path().join("c"));
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
    fn seed_alias_mcp_tool_dirs_is_accepted_in_file_and_env() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = write(tmp.path(), "mcp-host.yaml", "MCP_TOOL_DIRS:\n  - tools\n");
        let c = Config::load_with_env(Some(&base), &[]).expect("load");
        assert_eq!(c.tool_dirs[0].path, tmp.path().join("tools"));
        let env = vec![("MCP_TOOL_DIRS".to_owned(), "/x,/y".to_owned())];
        let c = Config::load_with_env(Some(&base), &env).expect("load");
        assert_eq!(c.tool_dirs.len(), 2);
        assert_eq!(c.tool_dirs[1].path, PathBuf::from("/y"));
    }
}
