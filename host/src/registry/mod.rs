//! The registry: the tool set built from loaded plugins, with precedence, name rules, compiled input
//! validators, and a status row for every tool discovered (for `mcp-host list`).
//!
//! A registry is immutable once built; the host swaps in a new one when the tool set changes, so a
//! call never holds a lock while it runs inside a plugin.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::{Manifest, ToolDescriptor};
use serde::Serialize;
use serde_json::Value;

use crate::config::{Config, Isolation, PluginSettings};
use crate::plugins::LoadError;
use crate::plugins::discovery::Candidate;
pub use crate::plugins::slot::{FileStamp, PluginSlot};
use crate::plugins::worker::Grant;

/// One callable tool.
pub struct Tool {
    /// The name clients use (prefixes applied).
    pub name: String,
    /// The descriptor, with `name` already final.
    pub descriptor: ToolDescriptor,
    /// The plugin that serves it.
    pub slot: Arc<PluginSlot>,
    /// Its index in the plugin's manifest.
    pub index: u32,
    /// The compiled input schema.
    pub validator: jsonschema::Validator,
    /// How long a call may run.
    pub timeout: Duration,
    /// The tool as `tools/list` shows it (built once).
    pub listing: Value,
}

/// The MCP `Tool` object for a descriptor.
fn listing(d: &ToolDescriptor) -> Value {
    let mut tool = serde_json::json!({
        "name": d.name,
        "description": d.description,
        "inputSchema": d.input_schema,
    });
    if let Some(title) = &d.title {
        tool["title"] = serde_json::json!(title);
    }
    if let Some(output) = &d.output_schema {
        tool["outputSchema"] = output.clone();
    }
    if !d.annotations.is_empty()
        && let Ok(a) = serde_json::to_value(&d.annotations)
    {
        tool["annotations"] = a;
    }
    if let Some(meta) = &d.meta {
        tool["_meta"] = meta.clone();
    }
    tool
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("plugin", &self.slot.backend.name())
            .finish_non_exhaustive()
    }
}

/// What became of a discovered tool (or of a plugin file that failed).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", content = "detail", rename_all = "snake_case")]
pub enum Status {
    /// Served.
    Active,
    /// A tool of the same name from an earlier directory (or file) wins.
    OverriddenBy(PathBuf),
    /// Its service's `enabled()` said no, panicked, or its constructor failed.
    DisabledService(String),
    /// The name is not safe for every client.
    InvalidName(String),
    /// Its input schema is not a usable JSON Schema object.
    InvalidSchema(String),
    /// The plugin file failed to load.
    LoadError(String),
    /// Its plugin's worker kept crashing: the tools are withdrawn until a rescan.
    Quarantined(String),
}

/// A row of `mcp-host list`.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Tool name (prefixed); `-` for a file that failed to load.
    pub tool: String,
    /// Plugin name, when known.
    pub plugin: Option<String>,
    /// The plugin file.
    pub file: PathBuf,
    /// Its tool directory.
    pub dir: PathBuf,
    /// The service, for service tools.
    pub service: Option<String>,
    /// What became of it.
    #[serde(flatten)]
    pub status: Status,
    /// How its plugin runs.
    pub isolation: Isolation,
    /// What its plugin may reach, when sandboxed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Grant>,
}

/// Load results per candidate, in discovery order: what a registry is built from.
pub type Sources = Vec<(Candidate, Result<Arc<PluginSlot>, LoadError>)>;

/// The tool set.
#[derive(Debug, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<Tool>>,
    /// Every discovered tool and failed file, in discovery order.
    pub entries: Vec<Entry>,
    /// The plugins loaded, in discovery order.
    pub plugins: Vec<Arc<PluginSlot>>,
    /// What it was built from (to rebuild it when a plugin's health changes).
    pub(crate) sources: Sources,
}

/// Tool names every major client accepts: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs(60))
}

impl Registry {
    /// Build the tool set from load results in discovery order, logging each decision.
    pub fn build(loaded: Sources, config: &Config) -> Self {
        Self::build_logged(loaded, config, true)
    }

    /// [`Registry::build`]; `log_tools: false` leaves out the per-tool `Loaded tool` lines (rescans
    /// log one line per changed file instead).
    pub fn build_logged(loaded: Sources, config: &Config, log_tools: bool) -> Self {
        let mut registry = Registry {
            sources: loaded.clone(),
            ..Registry::default()
        };
        let mut winners: HashMap<String, PathBuf> = HashMap::new();
        for (candidate, result) in loaded {
            let slot = match result {
                Ok(slot) => slot,
                Err(e) => {
                    // Rescans log their own fresh failures (and not the known ones again).
                    if log_tools {
                        tracing::error!("Error loading plugin {}: {e}", candidate.path.display());
                    }
                    registry.entries.push(Entry {
                        tool: "-".into(),
                        plugin: None,
                        file: candidate.path.clone(),
                        dir: candidate.dir.clone(),
                        service: None,
                        status: Status::LoadError(e.to_string()),
                        isolation: candidate.isolation.unwrap_or_default(),
                        permissions: None,
                    });
                    continue;
                }
            };
            registry.add_plugin(slot, config, &mut winners, log_tools);
        }
        registry
    }

    fn add_plugin(
        &mut self,
        slot: Arc<PluginSlot>,
        config: &Config,
        winners: &mut HashMap<String, PathBuf>,
        log_tools: bool,
    ) {
        let manifest = slot.backend.manifest();
        let file = slot.candidate.path.clone();
        let settings = config.plugin(&manifest.plugin);
        if log_tools {
            log_disabled_services(manifest, &file);
        }
        let quarantined = slot.backend.quarantined();
        for (index, tool) in manifest.tools.iter().enumerate() {
            let name = format!("{}{}{}", slot.candidate.prefix, settings.prefix, tool.name);
            let mut entry = Entry {
                tool: name.clone(),
                plugin: Some(manifest.plugin.clone()),
                file: file.clone(),
                dir: slot.candidate.dir.clone(),
                service: tool.service.clone(),
                status: Status::Active,
                isolation: slot.run.isolation,
                permissions: slot.run.permissions.clone(),
            };
            let admitted = match &quarantined {
                Some(why) => Err(Status::Quarantined(why.clone())),
                None => admit(&name, tool, manifest, &file, winners),
            };
            match admitted {
                Ok(validator) => {
                    let timeout = timeout_of(tool, &settings, config.limits.call_timeout_secs);
                    let mut descriptor = tool.clone();
                    descriptor.name = name.clone();
                    if log_tools {
                        tracing::info!("Loaded tool: {name}");
                    }
                    winners.insert(name.clone(), file.clone());
                    self.tools.insert(
                        name.clone(),
                        Arc::new(Tool {
                            name,
                            listing: listing(&descriptor),
                            descriptor,
                            slot: Arc::clone(&slot),
                            index: index as u32,
                            validator,
                            timeout: secs(timeout),
                        }),
                    );
                }
                Err(status) => entry.status = status,
            }
            self.entries.push(entry);
        }
        self.plugins.push(slot);
    }

    /// The tool called `name`, if it is served.
    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.tools.get(name)
    }

    /// Served tools in name order (deterministic for `tools/list` and its cursors).
    pub fn tools(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.tools.values()
    }

    /// How many tools are served.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is served.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Whether `other` serves the same tools, listed the same way.
    pub fn same_tools(&self, other: &Registry) -> bool {
        self.tools.len() == other.tools.len()
            && self
                .tools()
                .zip(other.tools())
                .all(|(a, b)| a.listing == b.listing)
    }
}

/// Log each service whose `enabled()` said no (a warning when it failed).
fn log_disabled_services(manifest: &Manifest, file: &std::path::Path) {
    for service in manifest.services.iter().filter(|s| !s.enabled) {
        let reason = service.disabled_reason.as_deref().unwrap_or("disabled");
        if service.failed {
            tracing::warn!(
                "Skipping disabled service: {} ({reason}) in {}",
                service.name,
                file.display()
            );
        } else {
            tracing::info!("Skipping disabled service: {}", service.name);
        }
    }
}

/// Whether tool `name` (its final name) is served: its service is enabled, its name is safe for
/// every client, no earlier directory or file defined it, and its input schema compiles. The
/// compiled schema, or the status that keeps it out (logged here).
fn admit(
    name: &str,
    tool: &ToolDescriptor,
    manifest: &Manifest,
    file: &std::path::Path,
    winners: &HashMap<String, PathBuf>,
) -> Result<jsonschema::Validator, Status> {
    let service = tool
        .service
        .as_ref()
        .and_then(|s| manifest.services.iter().find(|d| &d.name == s));
    if let Some(service) = service.filter(|s| !s.enabled) {
        return Err(Status::DisabledService(
            service
                .disabled_reason
                .clone()
                .unwrap_or_else(|| "disabled".into()),
        ));
    }
    if !is_valid_tool_name(name) {
        tracing::error!(
            "Invalid tool name {name:?} in {}: names must match ^[a-zA-Z0-9_-]{{1,64}}$ \
             (clients reject '.', '::' and long names); tool not loaded",
            file.display()
        );
        return Err(Status::InvalidName(
            "must match ^[a-zA-Z0-9_-]{1,64}$".into(),
        ));
    }
    if let Some(winner) = winners.get(name) {
        tracing::warn!(
            "Tool {name} from {} overridden by {}",
            file.display(),
            winner.display()
        );
        return Err(Status::OverriddenBy(winner.clone()));
    }
    let validator = compile_schema(&tool.input_schema).map_err(|why| {
        tracing::error!(
            "Tool {name} from {} has an unusable input schema: {why}; tool not loaded",
            file.display()
        );
        Status::InvalidSchema(why)
    })?;
    if tool
        .input_schema
        .get("properties")
        .and_then(|p| p.get("user_id"))
        .is_some()
    {
        tracing::warn!(
            "Tool {name} takes a `user_id` argument: the host never fills it and any client \
             can pass someone else's id. Take `UserInfo` instead, which the host injects \
             from the verified caller"
        );
    }
    Ok(validator)
}

/// A tool's call timeout in seconds: per tool, else per service, else per plugin, else global.
fn timeout_of(tool: &ToolDescriptor, settings: &PluginSettings, global: f64) -> f64 {
    settings
        .tools
        .get(&tool.name)
        .and_then(|t| t.timeout_secs)
        .or_else(|| {
            tool.service
                .as_ref()
                .and_then(|s| settings.services.get(s))
                .and_then(|s| s.timeout_secs)
        })
        .or(settings.timeout_secs)
        .unwrap_or(global)
}

/// Compile an input schema (2020-12 unless it names another dialect; remote `$ref`s are never
/// fetched: the crate is built without its HTTP resolver).
fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("the root must be `\"type\": \"object\"`".into());
    }
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(schema)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_accepted_by_every_client() {
        assert!(is_valid_tool_name("time_now"));
        assert!(is_valid_tool_name("a-b_C9"));
        assert!(!is_valid_tool_name("self.light.on"));
        assert!(!is_valid_tool_name("ns::tool"));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name(&"x".repeat(65)));
    }
}
