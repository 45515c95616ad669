//! Reading the configuration's layers: the base file, its `config.{env}.yaml` overlay and the
//! `MCP_HOST_*` variables, each checked on its own (so an error names its file or variable and
//! key), `${NAME}` references expanded, paths resolved against the file that set them, then merged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{
    AgentSettings, AuthSettings, Config, ConfigError, ConsoleSettings, DEFAULT_CONFIG,
    HttpSettings, Isolation, Limits, LogFormat, PinMode, PluginSettings, PolicySettings,
    RequestStateSettings, StoreSetting, TaskSettings, ToolDir, TraceSettings, TrustSettings,
    UpstreamAuthSettings,
};

/// The shape of one layer: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Layer {
    #[serde(alias = "MCP_TOOL_DIRS")]
    tool_dirs: Option<Vec<ToolDirEntry>>,
    limits: Option<Value>,
    plugins: Option<BTreeMap<String, Value>>,
    probe: Option<bool>,
    load_on_first_call: Option<bool>,
    /// A path, or `false` to turn the cache off.
    probe_cache: Option<Value>,
    runtime_dir: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    listen: Option<super::listen::ListenAddr>,
    http: Option<Value>,
    shutdown_grace_secs: Option<f64>,
    stdio_user: Option<String>,
    list_page_size: Option<usize>,
    cache_ttl_ms: Option<u64>,
    instructions: Option<String>,
    auth: Option<Value>,
    request_state: Option<Value>,
    agents: Option<BTreeMap<String, Value>>,
    overrides: Option<Value>,
    guardrails: Option<Value>,
    policy: Option<Value>,
    console: Option<Value>,
    log_format: Option<LogFormat>,
    /// `stderr`, or a file path.
    audit_log: Option<PathBuf>,
    metrics_listen: Option<super::listen::ListenAddr>,
    metrics_token: Option<String>,
    traces: Option<Value>,
    trust: Option<Value>,
    store: Option<String>,
    tasks: Option<Value>,
    upstream_auth: Option<Value>,
    replica: Option<String>,
}

/// One `tool_dirs` entry: a path, or `{path, prefix, require_signature, pinning}` whose keys are
/// checked like every other key (an untagged enum would let `{path: x, prefx: y}` through as a
/// plain path).
#[derive(Debug)]
enum ToolDirEntry {
    Path(PathBuf),
    /// Boxed: an entry with a `server` is far larger than a path.
    Detailed(Box<DetailedToolDir>),
}

/// `{path, prefix?, files?, isolation?, require_signature?, pinning?, optional?}`; any other key is refused,
/// naming it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DetailedToolDir {
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    server: Option<super::UpstreamServer>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    files: Vec<String>,
    #[serde(default)]
    isolation: Option<Isolation>,
    #[serde(default)]
    require_signature: Option<bool>,
    #[serde(default)]
    pinning: Option<PinMode>,
    #[serde(default)]
    definition_scan: Option<super::ScanMode>,
    #[serde(default)]
    optional: bool,
}

impl<'de> Deserialize<'de> for ToolDirEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        match Value::deserialize(deserializer)? {
            Value::String(path) => Ok(ToolDirEntry::Path(PathBuf::from(path))),
            map @ Value::Object(_) => serde_json::from_value(map)
                .map(|d| ToolDirEntry::Detailed(Box::new(d)))
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "expected a path, {{path, prefix, files, isolation, require_signature, pinning, \
                 definition_scan, optional}} or {{server, name, prefix, isolation, pinning, \
                 definition_scan}}, \
                 got {other}"
            ))),
        }
    }
}

/// A `tool_dirs` entry written as a map: a directory (`path`), or an upstream server (`server`
/// with its `name`), checked for the keys that do not go together.
fn tool_dir_entry(
    mut d: DetailedToolDir,
    i: usize,
    origin: &Origin,
) -> Result<ToolDir, ConfigError> {
    let invalid = |key: &str, message: String| ConfigError::Invalid {
        origin: origin.name.clone(),
        key: format!("tool_dirs.{i}{key}"),
        message,
    };
    match d.server.take() {
        None => directory_entry(d, origin, &invalid),
        Some(server) => upstream_entry(d, server, origin, &invalid),
    }
}

/// A `ConfigError::Invalid` at a key below the `tool_dirs` entry being read.
type Invalid<'a> = &'a dyn Fn(&str, String) -> ConfigError;

/// A `tool_dirs` map without `server`: a tool directory, which needs `path`.
fn directory_entry(
    d: DetailedToolDir,
    origin: &Origin,
    invalid: Invalid<'_>,
) -> Result<ToolDir, ConfigError> {
    let path = d.path.ok_or_else(|| {
        invalid(
            "",
            "an entry needs `path` (a tool directory) or `server` (an upstream MCP server)".into(),
        )
    })?;
    if let Some(name) = d.name {
        return Err(invalid(
            ".name",
            format!("`name` ({name}) names an upstream server: it needs `server`"),
        ));
    }
    Ok(ToolDir {
        path: absolute(&origin.base_dir, &path),
        prefix: d.prefix,
        files: d.files,
        isolation: d.isolation,
        require_signature: d.require_signature,
        pinning: d.pinning,
        definition_scan: d.definition_scan,
        optional: d.optional,
        server: None,
        name: None,
    })
}

/// A `tool_dirs` map with `server`: an upstream MCP server, with its `name`.
fn upstream_entry(
    d: DetailedToolDir,
    mut server: super::UpstreamServer,
    origin: &Origin,
    invalid: Invalid<'_>,
) -> Result<ToolDir, ConfigError> {
    upstream_keys(&d, &server, invalid)?;
    let name = upstream_name(d.name, &server, invalid)?;
    upstream_isolation(d.isolation, &server, invalid)?;
    server.cwd = server.cwd.map(|c| absolute(&origin.base_dir, &c));
    Ok(ToolDir {
        path: PathBuf::from(format!("{}{name}", super::UPSTREAM_PATH_PREFIX)),
        prefix: d.prefix,
        files: Vec::new(),
        isolation: d.isolation,
        require_signature: None,
        pinning: d.pinning,
        definition_scan: d.definition_scan,
        optional: false,
        server: Some(server),
        name: Some(name),
    })
}

/// An upstream entry has no directory's keys, and its server is a command or a URL.
fn upstream_keys(
    d: &DetailedToolDir,
    server: &super::UpstreamServer,
    invalid: Invalid<'_>,
) -> Result<(), ConfigError> {
    if d.path.is_some() {
        return Err(invalid(
            ".path",
            "an entry is a directory (`path`) or an upstream server (`server`), not both".into(),
        ));
    }
    if !d.files.is_empty() || d.require_signature.is_some() || d.optional {
        return Err(invalid(
            "",
            "`files`, `require_signature` and `optional` apply to directories, not to an \
             upstream server"
                .into(),
        ));
    }
    if let Some(auth) = &server.auth {
        if let Some((key, message)) = auth.problem(server.url.as_deref()) {
            return Err(invalid(&format!(".server.auth{key}"), message));
        }
        if server
            .headers
            .keys()
            .any(|h| h.eq_ignore_ascii_case("authorization"))
        {
            return Err(invalid(
                ".server.headers",
                "an `Authorization` header and `server.auth` do not go together: with `auth`, \
                 each caller's own token is sent"
                    .into(),
            ));
        }
    }
    if server.url.is_none() && server.follow_redirects.is_some() {
        return Err(invalid(
            ".server.follow_redirects",
            "applies to an HTTP upstream (`url`)".into(),
        ));
    }
    match (server.command.is_empty(), &server.url) {
        (false, None) | (true, Some(_)) => Ok(()),
        (true, None) => Err(invalid(
            ".server",
            "needs `command` (a stdio server, as argv) or `url` (Streamable HTTP)".into(),
        )),
        (false, Some(_)) => Err(invalid(
            ".server",
            "has both `command` and `url`: an upstream is one or the other".into(),
        )),
    }
}

/// An upstream's `name`: present, and letters, digits, `-`, `_` and `.` not starting with `.`.
fn upstream_name(
    name: Option<String>,
    server: &super::UpstreamServer,
    invalid: Invalid<'_>,
) -> Result<String, ConfigError> {
    let name = name.filter(|n| !n.is_empty()).ok_or_else(|| {
        invalid(
            ".name",
            format!(
                "an upstream server needs a `name` (what list, metrics, agents and \
                 plugins.<name> know it by), e.g. `name: {}`",
                server.suggested_name()
            ),
        )
    })?;
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !plain || name.starts_with('.') {
        return Err(invalid(
            ".name",
            format!("{name:?}: use letters, digits, `-`, `_` and `.`"),
        ));
    }
    Ok(name)
}

/// An upstream runs outside the host, and only a child process (stdio) can be sandboxed.
fn upstream_isolation(
    isolation: Option<Isolation>,
    server: &super::UpstreamServer,
    invalid: Invalid<'_>,
) -> Result<(), ConfigError> {
    if isolation == Some(Isolation::InProcess) {
        return Err(invalid(
            ".isolation",
            "an upstream server always runs outside the host: `process` or `sandbox`".into(),
        ));
    }
    if server.url.is_some() && isolation == Some(Isolation::Sandbox) {
        return Err(invalid(
            ".isolation",
            "`sandbox` confines a child process; an HTTP upstream runs elsewhere".into(),
        ));
    }
    Ok(())
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
        config.base_dir = cwd.clone();
        let config_dir = base_file
            .as_deref()
            .and_then(|f| absolute(&cwd, f).parent().map(Path::to_path_buf))
            .unwrap_or_else(|| cwd.clone());
        config.data_dir = super::default_data_dir(&env, &config_dir);
        let mut merged = Map::new();
        if let Some(file) = &base_file {
            apply_files(&mut config, &mut merged, &absolute(&cwd, file), &env)?;
        }
        let env_layer = env_layer(vars);
        if !env_layer.is_empty() {
            let origin = Origin {
                name: "environment (MCP_HOST_*)".into(),
                base_dir: cwd.clone(),
            };
            apply_value(&mut config, &mut merged, Value::Object(env_layer), &origin)?;
        }
        finish(&mut config, merged)?;
        super::installed::add_installed_dir(&mut config);
        apply_agent_vars(&mut config, vars);
        if config.pinning_in_use() {
            config.pins = std::sync::Arc::new(super::lock::PinLock::read(&config.lock_path()));
        }
        Ok(config)
    }
}

/// The base file and its `config.{MCP_HOST_ENV}.yaml` overlay (when both the variable and the file
/// exist).
fn apply_files(
    config: &mut Config,
    merged: &mut Map<String, Value>,
    file: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| config.base_dir.clone());
    config.source = Some(file.to_path_buf());
    config.base_dir = dir.clone();
    let origin = Origin {
        name: file.display().to_string(),
        base_dir: dir.clone(),
    };
    apply_file(config, merged, file, &origin, env)?;
    if let Some(env_name) = env("MCP_HOST_ENV").filter(|e| !e.is_empty()) {
        let overlay = dir.join(format!("config.{env_name}.yaml"));
        if overlay.exists() {
            let origin = Origin {
                name: overlay.display().to_string(),
                base_dir: dir,
            };
            apply_file(config, merged, &overlay, &origin, env)?;
        }
    }
    Ok(())
}

/// The variable holding a bearer token for OCI registries (`mcp-host publish`/`add`): read by the
/// install stage, never a configuration key.
pub const REGISTRY_TOKEN_VAR: &str = "MCP_HOST_REGISTRY_TOKEN";

/// `MCP_HOST_*` variables that are not configuration keys: the overlay selector, the CLI's
/// `--config`, and the registry token.
const NOT_KEYS: &[&str] = &["ENV", "CONFIG", "REGISTRY_TOKEN"];

/// The environment's layer: `MCP_TOOL_DIRS` (the seed's name), then `MCP_HOST_<KEY>` with nested
/// keys joined by `__`.
fn env_layer(vars: &[(String, String)]) -> Map<String, Value> {
    let mut layer = Map::new();
    if let Some((_, v)) = vars.iter().find(|(k, _)| k == "MCP_TOOL_DIRS") {
        layer.insert("tool_dirs".into(), list_from_env(v));
    }
    for (name, value) in vars {
        let Some(key) = name.strip_prefix("MCP_HOST_") else {
            continue;
        };
        if NOT_KEYS.contains(&key) || key.is_empty() {
            continue;
        }
        let path: Vec<String> = key.split("__").map(|k| k.to_ascii_lowercase()).collect();
        let parsed = if path.len() == 1 && path[0] == "tool_dirs" {
            list_from_env(value)
        } else {
            scalar_from_env(value)
        };
        insert_path(&mut layer, &path, parsed);
    }
    layer
}

/// The seed's per-agent variables: `ALLOWED_TOOLS_{NAME}` / `DISALLOWED_TOOLS_{NAME}` (comma
/// separated; NAME is the agent name in upper case) replace that agent's lists.
fn apply_agent_vars(config: &mut Config, vars: &[(String, String)]) {
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
    let text = std::fs::read_to_string(file).map_err(|reason| ConfigError::Read {
        path: file.to_path_buf(),
        reason,
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
                // `${caller.user}` and the like are no variable (a name has no `.`): an override
                // fills them at each call, from the verified caller.
                if name.starts_with("caller.") {
                    out.push_str(&rest[start..start + 2 + end + 1]);
                    rest = &after[end + 1..];
                    continue;
                }
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
    let mut message = super::suggest::with_suggestion(err.into_inner().to_string());
    if key.ends_with("secs") {
        // `expected f64` (or u64) is what the type says; what the key wants is a duration.
        message = message
            .replace(
                "expected f64",
                "expected a number of seconds (e.g. 30 or 2.5)",
            )
            .replace(
                "expected u64",
                "expected a whole number of seconds (e.g. 30)",
            );
    }
    ConfigError::Invalid {
        origin: origin.name.clone(),
        key: if key == "." {
            "(top level)".into()
        } else {
            key
        },
        message,
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
    check_sections(&layer, origin)?;
    apply_layer(config, layer, origin)?;
    if let Value::Object(map) = value {
        for key in [
            "limits",
            "plugins",
            "http",
            "auth",
            "request_state",
            "agents",
            "overrides",
            "guardrails",
            "policy",
            "console",
            "traces",
            "trust",
            "tasks",
            "upstream_auth",
        ] {
            if let Some(v) = map.get(key) {
                let slot = merged.entry(key).or_insert(Value::Null);
                deep_merge(slot, v.clone());
            }
        }
    }
    Ok(())
}

/// Check a layer's nested sections on their own too, so errors name this layer's file.
fn check_sections(layer: &Layer, origin: &Origin) -> Result<(), ConfigError> {
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
    if let Some(v) = &layer.request_state {
        section::<RequestStateSettings>(v, origin, "request_state")?;
    }
    if let Some(v) = &layer.traces {
        section::<TraceSettings>(v, origin, "traces")?;
    }
    if let Some(v) = &layer.tasks {
        section::<TaskSettings>(v, origin, "tasks")?;
    }
    if let Some(v) = &layer.upstream_auth {
        check_upstream_auth(
            &section::<UpstreamAuthSettings>(v, origin, "upstream_auth")?,
            origin,
        )?;
    }
    if let Some(v) = &layer.policy {
        section::<PolicySettings>(v, origin, "policy")?;
    }
    if let Some(v) = &layer.console {
        check_console(&section::<ConsoleSettings>(v, origin, "console")?, origin)?;
    }
    for (name, v) in layer.agents.iter().flatten() {
        let prefix = format!("agents.{name}");
        let agent = section::<AgentSettings>(v, origin, &prefix)?;
        check_overrides(&agent.overrides, origin, &prefix)?;
        check_guardrails(&agent.guardrails, origin, &prefix)?;
    }
    if let Some(v) = &layer.overrides {
        check_overrides(&section(v, origin, "overrides")?, origin, "")?;
    }
    if let Some(v) = &layer.guardrails {
        check_guardrails(&section(v, origin, "guardrails")?, origin, "")?;
    }
    if let Some(v) = &layer.trust {
        check_trust(&section::<TrustSettings>(v, origin, "trust")?, origin)?;
    }
    for (name, v) in layer.plugins.iter().flatten() {
        let prefix = format!("plugins.{name}");
        let plugin = section::<PluginSettings>(v, origin, &prefix)?;
        check_overrides(&plugin.overrides, origin, &prefix)?;
        check_guardrails(&plugin.guardrails, origin, &prefix)?;
    }
    Ok(())
}

/// Whether every key of the guardrails under `prefix` (`""` for the top-level `guardrails`)
/// names a detector or a group.
fn check_guardrails(
    guardrails: &super::Guardrails,
    origin: &Origin,
    prefix: &str,
) -> Result<(), ConfigError> {
    let Some(key) = guardrails.unknown_key() else {
        return Ok(());
    };
    let name = key.rsplit('.').next().unwrap_or(&key).to_owned();
    let mut known: Vec<&str> = super::GUARDRAIL_GROUPS.to_vec();
    known.extend_from_slice(super::GUARDRAIL_DETECTORS);
    let at = if prefix.is_empty() {
        "guardrails".to_owned()
    } else {
        format!("{prefix}.guardrails")
    };
    Err(ConfigError::Invalid {
        origin: origin.name.clone(),
        key: format!("{at}.{key}"),
        message: format!(
            "`{name}` names no detector nor group (known: {})",
            known.join(", ")
        ),
    })
}

/// The checks of [`DefinitionOverrides::check`] on the overrides under `prefix` (`""` for the
/// top-level `overrides`), naming the key.
fn check_overrides(
    overrides: &super::DefinitionOverrides,
    origin: &Origin,
    prefix: &str,
) -> Result<(), ConfigError> {
    let checked = if prefix.starts_with("agents.") {
        overrides.check_agent()
    } else {
        overrides.check()
    };
    checked.map_err(|(key, message)| {
        let dot = if prefix.is_empty() { "" } else { "." };
        ConfigError::Invalid {
            origin: origin.name.clone(),
            key: format!("{prefix}{dot}overrides.{key}"),
            message,
        }
    })
}

/// Set the top-level keys a layer has (paths resolved against its file): where plugins come from
/// and how they load, then how the host serves.
fn apply_layer(config: &mut Config, mut layer: Layer, origin: &Origin) -> Result<(), ConfigError> {
    apply_loading(config, &mut layer, origin)?;
    apply_serving(config, &mut layer, origin)
}

/// The keys of where plugins come from and how they load: `tool_dirs`, `data_dir`,
/// `runtime_dir`, `probe`, `load_on_first_call`, `probe_cache`.
fn apply_loading(
    config: &mut Config,
    layer: &mut Layer,
    origin: &Origin,
) -> Result<(), ConfigError> {
    if let Some(dirs) = layer.tool_dirs.take() {
        config.tool_dirs = tool_dirs(dirs, origin)?;
    }
    if let Some(dir) = layer.data_dir.take() {
        config.data_dir = absolute(&origin.base_dir, &dir);
    }
    if let Some(dir) = layer.runtime_dir.take() {
        config.runtime_dir = Some(absolute(&origin.base_dir, &dir));
    }
    if let Some(probe) = layer.probe.take() {
        config.probe = probe;
    }
    if let Some(lazy) = layer.load_on_first_call.take() {
        config.load_on_first_call = lazy;
    }
    match layer.probe_cache.take() {
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
    Ok(())
}

/// A layer's `tool_dirs`, resolved against its file, each `files` selection checked.
fn tool_dirs(dirs: Vec<ToolDirEntry>, origin: &Origin) -> Result<Vec<ToolDir>, ConfigError> {
    let dirs: Vec<ToolDir> = dirs
        .into_iter()
        .enumerate()
        .map(|(i, d)| match d {
            ToolDirEntry::Path(p) => Ok(ToolDir {
                path: absolute(&origin.base_dir, &p),
                ..ToolDir::default()
            }),
            ToolDirEntry::Detailed(d) => tool_dir_entry(*d, i, origin),
        })
        .collect::<Result<_, _>>()?;
    for (i, dir) in dirs.iter().enumerate() {
        dir.file_selection().map_err(|e| ConfigError::Invalid {
            origin: origin.name.clone(),
            key: format!("tool_dirs.{i}.files"),
            message: e.to_string(),
        })?;
    }
    Ok(dirs)
}

/// The keys of how the host serves: listening, shutdown, stdio user, paging, caching,
/// instructions, logs, audit, metrics, store and replica.
fn apply_serving(
    config: &mut Config,
    layer: &mut Layer,
    origin: &Origin,
) -> Result<(), ConfigError> {
    if let Some(listen) = layer.listen.take() {
        config.listen = listen.0;
    }
    if let Some(v) = layer.shutdown_grace_secs.take() {
        config.shutdown_grace_secs = v;
    }
    if let Some(v) = layer.stdio_user.take() {
        config.stdio_user = Some(v);
    }
    if let Some(v) = layer.list_page_size.take() {
        config.list_page_size = v.max(1);
    }
    if let Some(v) = layer.cache_ttl_ms.take() {
        config.cache_ttl_ms = v;
    }
    if let Some(v) = layer.instructions.take() {
        config.instructions = Some(v);
    }
    if let Some(v) = layer.log_format.take() {
        config.log_format = v;
    }
    if let Some(v) = layer.audit_log.take() {
        config.audit_log = Some(if v == Path::new("stderr") {
            v
        } else {
            absolute(&origin.base_dir, &v)
        });
    }
    if let Some(v) = layer.metrics_listen.take() {
        config.metrics_listen = Some(v.0);
    }
    if let Some(v) = layer.metrics_token.take() {
        config.metrics_token = Some(v).filter(|t| !t.is_empty());
    }
    if let Some(v) = layer.store.take() {
        config.store =
            StoreSetting::parse(&v, &origin.base_dir).map_err(|message| ConfigError::Invalid {
                origin: origin.name.clone(),
                key: "store".into(),
                message,
            })?;
    }
    if let Some(v) = layer.replica.take() {
        config.replica = Some(v).filter(|r| !r.trim().is_empty());
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
    if let Some(v) = present("request_state") {
        config.request_state = section(v, &origin, "request_state")?;
    }
    if let Some(v) = present("traces") {
        config.traces = section(v, &origin, "traces")?;
    }
    if let Some(v) = present("trust") {
        config.trust = section(v, &origin, "trust")?;
        check_trust(&config.trust, &origin)?;
    }
    if let Some(v) = present("tasks") {
        config.tasks = section(v, &origin, "tasks")?;
    }
    if let Some(v) = present("upstream_auth") {
        config.upstream_auth = section(v, &origin, "upstream_auth")?;
        check_upstream_auth(&config.upstream_auth, &origin)?;
    }
    if let Some(v) = present("policy") {
        config.policy = section(v, &origin, "policy")?;
    }
    if let Some(v) = present("console") {
        config.console = section(v, &origin, "console")?;
        check_console(&config.console, &origin)?;
    }
    check_console_beside_mcp(config, &origin)?;
    check_console_approvers(config, &origin)?;
    check_upstream_auth_required(config, &origin)?;
    finish_agents_and_shaping(config, &present, &origin)?;
    if let Some(Value::Object(plugins)) = present("plugins") {
        for (name, v) in plugins {
            let prefix = format!("plugins.{name}");
            let mut settings: PluginSettings = section(v, &origin, &prefix)?;
            check_overrides(&settings.overrides, &origin, &prefix)?;
            check_guardrails(&settings.guardrails, &origin, &prefix)?;
            // Permission paths and the data directory resolve like every path of the file.
            let base = config.base_dir.clone();
            let grant = &mut settings.permissions;
            let paths = grant.read.iter_mut().chain(grant.write.iter_mut());
            for path in paths.chain(grant.unix_sockets.iter_mut()) {
                *path = absolute(&base, path);
            }
            if let Some(dir) = &mut settings.data_dir {
                *dir = absolute(&base, dir);
            }
            for path in &mut settings.from {
                *path = absolute(&base, path);
            }
            config.plugins.insert(name.clone(), settings);
        }
    }
    Ok(())
}

/// The merged `agents`, `overrides` and `guardrails` (`present` gives a merged key's value).
fn finish_agents_and_shaping<'m>(
    config: &mut Config,
    present: &dyn Fn(&str) -> Option<&'m Value>,
    origin: &Origin,
) -> Result<(), ConfigError> {
    if let Some(Value::Object(agents)) = present("agents") {
        for (name, v) in agents {
            let prefix = format!("agents.{name}");
            let settings: AgentSettings = section(v, origin, &prefix)?;
            check_overrides(&settings.overrides, origin, &prefix)?;
            check_guardrails(&settings.guardrails, origin, &prefix)?;
            config.agents.insert(name.clone(), settings);
        }
    }
    if let Some(v) = present("overrides") {
        config.overrides = section(v, origin, "overrides")?;
        check_overrides(&config.overrides, origin, "")?;
    }
    if let Some(v) = present("guardrails") {
        config.guardrails = section(v, origin, "guardrails")?;
        check_guardrails(&config.guardrails, origin, "")?;
    }
    Ok(())
}

/// `console.path` is a path of its own: absolute, and neither a prefix of nor under another
/// endpoint.
fn check_console(console: &ConsoleSettings, origin: &Origin) -> Result<(), ConfigError> {
    let path = console.path.as_str();
    let reserved = ["/metrics", "/healthz", "/livez", "/.well-known"];
    let problem = if !path.starts_with('/') || path.len() < 2 || path.ends_with('/') {
        Some("must start with `/`, name something, and not end with `/` (e.g. `/ui`)")
    } else if path.contains(['?', '#', ' ']) {
        Some("must be a plain path")
    } else if reserved
        .iter()
        .any(|r| r.starts_with(path) || path.starts_with(r))
    {
        Some("must not overlap /metrics, /healthz, /livez or /.well-known")
    } else {
        None
    };
    match problem {
        Some(message) => Err(ConfigError::Invalid {
            origin: origin.name.clone(),
            key: "console.path".into(),
            message: format!("{path}: {message}"),
        }),
        None => Ok(()),
    }
}

/// The console's path and the MCP endpoint's do not overlap (the console would shadow it).
fn check_console_beside_mcp(config: &Config, origin: &Origin) -> Result<(), ConfigError> {
    let (console, mcp) = (config.console.path.as_str(), config.http.path.as_str());
    let under = |a: &str, b: &str| a == b || a.strip_prefix(b).is_some_and(|r| r.starts_with('/'));
    if under(console, mcp) || under(mcp, console) {
        return Err(ConfigError::Invalid {
            origin: origin.name.clone(),
            key: "console.path".into(),
            message: format!("{console} overlaps the MCP endpoint's path {mcp} (http.path)"),
        });
    }
    Ok(())
}

/// A rule answered in the console needs somebody there to answer it: an admin.
fn check_console_approvers(config: &Config, origin: &Origin) -> Result<(), ConfigError> {
    let console = &config.console;
    let rule = config
        .policy
        .rules
        .iter()
        .find(|r| r.approver == crate::config::Approver::Console);
    match rule {
        Some(rule) if console.admins.is_empty() && !console.anonymous_admin => {
            Err(ConfigError::Invalid {
                origin: origin.name.clone(),
                key: "policy.rules".into(),
                message: format!(
                    "rule `{}` is answered in the console (approver: console), but nobody may \
                     answer there: name its admins in console.admins",
                    rule.name
                ),
            })
        }
        _ => Ok(()),
    }
}

/// Every key of `upstream_auth.vault.keys` must be the base64 of 32 bytes, listed once (checked
/// here, so a bad key stops start-up naming its place in the list, never its value).
fn check_upstream_auth(
    settings: &UpstreamAuthSettings,
    origin: &Origin,
) -> Result<(), ConfigError> {
    settings
        .vault
        .check_keys()
        .map_err(|(key, message)| ConfigError::Invalid {
            origin: origin.name.clone(),
            key: format!("upstream_auth.vault.{key}"),
            message,
        })
}

/// Once an upstream has `server.auth`: the host needs an origin for its callback
/// (`upstream_auth.public_url`, else `auth.resource`'s), and vault keys where the store outlives
/// the process ([`crate::config::VaultSettings::check_required`]).
fn check_upstream_auth_required(config: &Config, origin: &Origin) -> Result<(), ConfigError> {
    let invalid = |key: &str, message: String| ConfigError::Invalid {
        origin: origin.name.clone(),
        key: key.into(),
        message,
    };
    let settings = &config.upstream_auth;
    if let Some(problem) = settings.public_url_problem() {
        return Err(invalid("upstream_auth.public_url", problem));
    }
    let users: Vec<&str> = config
        .tool_dirs
        .iter()
        .filter(|d| d.server.as_ref().is_some_and(|s| s.auth.is_some()))
        .filter_map(|d| d.name.as_deref())
        .collect();
    let Some(first) = users.first() else {
        return Ok(());
    };
    if settings
        .public_url(config.auth.resource.as_deref())
        .is_none()
    {
        return Err(invalid(
            "upstream_auth.public_url",
            format!(
                "upstream {first} has `server.auth`: set upstream_auth.public_url to the origin \
                 users' browsers reach this host at (e.g. https://mcp.example.com): \
                 authorization servers send them back to <public_url>/oauth/callback"
            ),
        ));
    }
    settings
        .vault
        .check_required(&config.store, &users)
        .map_err(|message| invalid("upstream_auth.vault.keys", message))
}

/// Every key of `trust.keys` must be a minisign public key (checked here, so a typo stops start-up
/// naming the key instead of refusing every plugin later).
fn check_trust(trust: &TrustSettings, origin: &Origin) -> Result<(), ConfigError> {
    for (name, key) in &trust.keys {
        if let Err(e) = minisign::PublicKey::from_base64(key.trim()) {
            return Err(ConfigError::Invalid {
                origin: origin.name.clone(),
                key: format!("trust.keys.{name}"),
                message: format!(
                    "not a minisign public key (the base64 line of the .pub file \
                     `mcp-host keygen` writes): {e}"
                ),
            });
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
