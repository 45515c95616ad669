//! The registry: what the loaded plugins serve — tools, resources, resource templates and prompts —
//! with precedence (the first directory wins, per tool name, resource URI, template and prompt
//! name; the loser is logged), name rules, input schemas checked against the meta-schema (those
//! known to pass are remembered across runs: `checked`) and compiled at a tool's first call, URI
//! templates, pinning against the lock file ([`pins`]), a search index of the tools ([`search`],
//! built on first use), and a status row for everything discovered (for `mcp-host list`).
//!
//! A registry is immutable once built; the host swaps in a new one when the set changes, so a call
//! never holds a lock while it runs inside a plugin.

mod checked;
pub mod pins;
pub mod search;
pub mod template;
pub mod uri;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mcp_plugin_sdk::validation::InputValidator;
pub use mcp_plugin_sdk::wire::is_valid_tool_name;
use mcp_plugin_sdk::wire::{Manifest, PromptDescriptor, ResourceDescriptor, ToolDescriptor};
use serde::Serialize;
use serde_json::{Map, Value, json};

use template::UriTemplate;

use crate::config::{Config, Isolation, PluginSettings};
pub use crate::plugins::slot::{FileStamp, PluginSlot};
use crate::plugins::worker::Grant;

/// One callable tool.
pub struct Tool {
    /// The name clients use (prefixes applied).
    pub name: String,
    /// The plugin that serves it.
    pub slot: Arc<PluginSlot>,
    /// Its index in the plugin's manifest.
    pub index: u32,
    /// The compiled input schema.
    /// The input schema, compiled at the first call (a host serving thousands of tools compiles
    /// only the ones called; the schema was checked against the meta-schema at load).
    validator: std::sync::OnceLock<Result<InputValidator, String>>,
    /// How long a call may run.
    pub timeout: Duration,
    /// The tool as `tools/list` shows it (written once).
    pub listing: Listing,
    /// Its metric series, looked up at its first call.
    pub series: std::sync::OnceLock<crate::telemetry::metrics::ToolSeries>,
    /// Its arguments mirrored in `Mcp-Param-{Name}` headers, found at its first call.
    header_params: std::sync::OnceLock<Box<[HeaderParam]>>,
}

/// An argument whose schema names an `x-mcp-header`: 2026 HTTP clients mirror it in the
/// `Mcp-Param-{header}` header.
#[derive(Debug)]
pub struct HeaderParam {
    /// The argument's name.
    pub argument: String,
    /// The `{Name}` of its header.
    pub header: String,
}

impl Tool {
    /// What the plugin declared for it (the served name is [`Tool::name`]: prefixes applied).
    /// Borrowed from the plugin's manifest, never copied.
    pub fn descriptor(&self) -> &ToolDescriptor {
        &self.slot.backend.manifest().tools[self.index as usize]
    }

    /// The arguments mirrored in headers (read from the input schema at the first call, not at
    /// every one: a schema's properties are walked once).
    pub fn header_params(&self) -> &[HeaderParam] {
        self.header_params.get_or_init(|| {
            let properties = self.descriptor().input_schema.get("properties");
            properties
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(argument, schema)| {
                    let header = schema.get("x-mcp-header")?.as_str()?;
                    Some(HeaderParam {
                        argument: argument.clone(),
                        header: header.to_owned(),
                    })
                })
                .collect()
        })
    }

    /// The compiled input schema (compiled on first use, the failure logged once), or why it does
    /// not compile.
    pub fn validator(&self) -> Result<&InputValidator, &str> {
        self.validator
            .get_or_init(|| {
                InputValidator::compile(&self.descriptor().input_schema).inspect_err(|why| {
                    tracing::error!(
                        tool = %self.name,
                        "the input schema passed the meta-schema but does not compile: {why}"
                    );
                })
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("plugin", &self.slot.backend.name())
            .finish_non_exhaustive()
    }
}

/// A resource or resource template a plugin serves.
pub struct Resource {
    /// The URI (or URI template) as the plugin declared it: listed, pinned, and sent back to the
    /// plugin when a client reads the resource (by any spelling of it).
    pub uri: String,
    /// What a client's URI is compared with, and agents' views see: a fixed URI's normal form
    /// ([`uri::normalize`]; as declared when it has none), a template as declared.
    pub key: String,
    /// The descriptor.
    pub descriptor: ResourceDescriptor,
    /// The plugin that serves it.
    pub slot: Arc<PluginSlot>,
    /// Its index in the plugin's manifest.
    pub index: u32,
    /// How long a read may run.
    pub timeout: Duration,
    /// The compiled template (templates only).
    pub template: Option<UriTemplate>,
    /// The resource as `resources/list` (or `resources/templates/list`) shows it.
    pub listing: Listing,
}

impl std::fmt::Debug for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

/// An upstream server a read of a URI nothing lists is offered to.
#[derive(Debug, Clone)]
pub struct Fallback {
    /// The upstream.
    pub slot: Arc<PluginSlot>,
    /// How long a read may run (the upstream's `timeout_secs`, else the global one).
    pub timeout: Duration,
}

/// Where a read of a URI goes ([`Registry::route`]).
#[derive(Debug)]
pub enum Route<'a> {
    /// A listed resource, or the first visible listed template that matches (with its
    /// variables).
    Listed(Arc<Resource>, Map<String, Value>),
    /// Nothing lists it and no listed template matches: the upstreams to offer it to, in order
    /// (none when no upstream reads unlisted URIs, or the caller may not see the URI).
    Unlisted(Vec<&'a Fallback>),
    /// It is listed (or a listed template matches it) but not for this caller: not found.
    Hidden,
}

/// A prompt a plugin serves.
pub struct Prompt {
    /// The name clients use (prefixes applied).
    pub name: String,
    /// The descriptor.
    pub descriptor: PromptDescriptor,
    /// The plugin that serves it.
    pub slot: Arc<PluginSlot>,
    /// Its index in the plugin's manifest.
    pub index: u32,
    /// How long rendering may run.
    pub timeout: Duration,
    /// The prompt as `prompts/list` shows it.
    pub listing: Listing,
}

impl std::fmt::Debug for Prompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompt")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// An entry as the list methods show it (an MCP `Tool`, `Resource`, `ResourceTemplate` or
/// `Prompt` object), written as JSON text once when the registry is built: a list page copies the
/// text, and nothing keeps a tree of it.
pub struct Listing(Box<serde_json::value::RawValue>);

impl Listing {
    /// `entry` written as JSON text.
    pub fn of(entry: &impl Serialize) -> Listing {
        // Writing JSON values and borrowed descriptors cannot fail (string keys, no maps of other
        // keys); `null` stands in all the same.
        Listing(
            serde_json::value::to_raw_value(entry)
                .unwrap_or_else(|_| serde_json::value::RawValue::NULL.to_owned()),
        )
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// The JSON text, to be written as it is inside other JSON.
    fn raw(&self) -> &serde_json::value::RawValue {
        &self.0
    }

    /// As a JSON tree (for pinning and search results, which pick members from it).
    pub fn value(&self) -> Value {
        serde_json::from_str(self.text()).unwrap_or(Value::Null)
    }
}

impl PartialEq for Listing {
    fn eq(&self, other: &Listing) -> bool {
        self.text() == other.text()
    }
}

impl std::fmt::Debug for Listing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// What a client's URI is compared with for resource `d` ([`Resource::key`]). A template whose
/// literal start is not in normal form matches no client's URI there (they are normalised before
/// they are matched): logged.
fn resource_key(d: &ResourceDescriptor, memory: &BuildMemory) -> String {
    if d.template {
        let start = &d.uri[..d.uri.find('{').unwrap_or(d.uri.len())];
        if let Ok(normal) = uri::normalize(start)
            && normal != start
        {
            let line = format!(
                "Resource template {:?} does not start in normal form ({normal:?}): URIs are \
                 normalised before they are matched, so none starting {start:?} matches it",
                d.uri
            );
            if memory.first_report(&line) {
                tracing::warn!("{line}");
            }
        }
        return d.uri.clone();
    }
    uri::normalize(&d.uri).map_or_else(|_| d.uri.clone(), std::borrow::Cow::into_owned)
}

/// The MCP `Resource` / `ResourceTemplate` object for a descriptor.
fn resource_listing(d: &ResourceDescriptor) -> Value {
    let mut r = if d.template {
        json!({ "uriTemplate": d.uri, "name": d.name })
    } else {
        json!({ "uri": d.uri, "name": d.name })
    };
    for (key, value) in [
        ("title", &d.title),
        ("description", &d.description),
        ("mimeType", &d.mime_type),
    ] {
        if let Some(v) = value {
            r[key] = json!(v);
        }
    }
    if let Some(meta) = &d.meta {
        r["_meta"] = meta.clone();
    }
    r
}

/// The MCP `Prompt` object for a descriptor named `name`.
fn prompt_listing(name: &str, d: &PromptDescriptor) -> Value {
    let arguments: Vec<Value> = d
        .arguments
        .iter()
        .map(|a| {
            let mut arg = json!({ "name": a.name, "required": a.required });
            if let Some(text) = &a.description {
                arg["description"] = json!(text);
            }
            arg
        })
        .collect();
    let mut p = json!({ "name": name, "description": d.description, "arguments": arguments });
    if let Some(title) = &d.title {
        p["title"] = json!(title);
    }
    if let Some(meta) = &d.meta {
        p["_meta"] = meta.clone();
    }
    p
}

/// Whether `uri` is an absolute URI (`scheme:` then anything, RFC 3986 scheme characters).
fn is_valid_uri(uri: &str) -> bool {
    uri.split_once(':').is_some_and(|(scheme, rest)| {
        !rest.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    }) && !uri.chars().any(char::is_whitespace)
}

/// What kind of thing a row of `mcp-host list` is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A tool.
    #[default]
    Tool,
    /// A resource with a fixed URI.
    Resource,
    /// A resource template.
    ResourceTemplate,
    /// A prompt.
    Prompt,
}

impl Kind {
    fn is_tool(&self) -> bool {
        *self == Kind::Tool
    }

    /// How log lines name it.
    fn label(self) -> &'static str {
        match self {
            Kind::Tool => "Tool",
            Kind::Resource => "Resource",
            Kind::ResourceTemplate => "Resource template",
            Kind::Prompt => "Prompt",
        }
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
    /// Its definition is not as pinned in the lock file, and its directory's pinning is
    /// `enforce`: not served until re-pinned.
    Held(String),
}

/// A row of `mcp-host list`.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Tool name (prefixed), prompt name, or resource URI (template); `-` for a file that failed
    /// to load.
    pub tool: String,
    /// What it is (left out for tools).
    #[serde(skip_serializing_if = "Kind::is_tool")]
    pub kind: Kind,
    /// Plugin name, when known.
    pub plugin: Option<String>,
    /// The plugin file.
    pub file: PathBuf,
    /// Its tool directory.
    pub dir: PathBuf,
    /// The service, for service tools.
    pub service: Option<String>,
    /// The name (in `trust.keys`) of the key that signed its plugin file, when signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// What became of it.
    #[serde(flatten)]
    pub status: Status,
    /// How its plugin runs.
    pub isolation: Isolation,
    /// What its plugin may reach, when sandboxed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Grant>,
    /// What its plugin declares it needs (`export_plugin!(permissions: {...})`).
    #[serde(skip_serializing_if = "mcp_plugin_sdk::wire::DeclaredPermissions::is_empty")]
    pub declared: mcp_plugin_sdk::wire::DeclaredPermissions,
}

pub use crate::plugins::Sources;

/// What the registries a host builds remember from one build to the next (every rescan and
/// refresh builds a new one): the input schemas known to pass the meta-schema check, and the
/// problems already logged. Each host owns one, so two hosts in one process share neither.
#[derive(Debug, Default)]
pub struct BuildMemory {
    checks: Mutex<Option<checked::SchemaChecks>>,
    reported: Mutex<HashSet<String>>,
}

impl BuildMemory {
    /// Whether `message` is logged for the first time by these builds: a rescan rebuilds the
    /// whole tool set, and a problem already reported (same definition, same pin) is not repeated.
    fn first_report(&self, message: &str) -> bool {
        self.reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(message.to_owned())
    }
}

/// An admitted tool's place in its manifest, its schema as listed, and its call timeout.
struct ServedTool {
    index: usize,
    schema: Listing,
    timeout: Duration,
}

/// The tool set.
#[derive(Debug, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<Tool>>,
    resources: BTreeMap<String, Arc<Resource>>,
    /// The same by [`Resource::key`] (the first declared of several spellings of one URI).
    by_key: HashMap<String, Arc<Resource>>,
    /// Templates by URI template, and in precedence order (a read takes the first that matches).
    templates: BTreeMap<String, Arc<Resource>>,
    template_order: Vec<Arc<Resource>>,
    prompts: BTreeMap<String, Arc<Prompt>>,
    /// The upstream servers a read of a URI nothing lists is offered to, in `tool_dirs` order.
    fallbacks: Vec<Fallback>,
    /// Resources and templates held by pinning: not served, and not offered to upstreams as
    /// unlisted either.
    withheld: Vec<Arc<Resource>>,
    /// Every discovered tool and failed file, in discovery order.
    pub entries: Vec<Entry>,
    /// The plugins loaded, in discovery order.
    pub plugins: Vec<Arc<PluginSlot>>,
    /// What it was built from (to rebuild it when a plugin's health changes).
    pub(crate) sources: Sources,
    /// The tools' search index, built when first searched.
    search: std::sync::OnceLock<search::ToolIndex>,
    /// Definitions not as pinned in the lock file: held (pinning `enforce`) or served anyway
    /// (`warn`).
    pub drifts: Vec<Drift>,
}

/// A definition that differs from its pin, and what pinning did about it.
#[derive(Debug, Clone)]
pub struct Drift {
    /// How it differs.
    pub difference: pins::Difference,
    /// Held (not served) rather than served with a warning.
    pub held: bool,
    /// The plugin file serving it.
    pub file: PathBuf,
}

/// The values of `map` whose keys come after `key` (all of them for `None`).
fn after<'a, V>(
    map: &'a BTreeMap<String, V>,
    key: Option<&str>,
) -> impl Iterator<Item = &'a V> + use<'a, V> {
    use std::ops::Bound;
    let start = key.map_or(Bound::Unbounded, Bound::Excluded);
    map.range::<str, _>((start, Bound::Unbounded))
        .map(|(_, v)| v)
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs(60))
}

impl Registry {
    /// Build the tool set from load results in discovery order, logging each decision; `memory`
    /// is what earlier builds of the same host learnt.
    pub fn build(loaded: Sources, config: &Config, memory: &BuildMemory) -> Self {
        Self::build_logged(loaded, config, memory, true)
    }

    /// [`Registry::build`]; `log_tools: false` leaves out the per-tool `Loaded tool` lines (rescans
    /// log one line per changed file instead).
    pub fn build_logged(
        loaded: Sources,
        config: &Config,
        memory: &BuildMemory,
        log_tools: bool,
    ) -> Self {
        let mut registry = Registry {
            sources: loaded.clone(),
            ..Registry::default()
        };
        let mut winners = Winners::new(memory);
        checked::with_checks(&memory.checks, config.probe_cache.as_deref(), |checks| {
            registry.add_all(loaded, config, &mut winners, checks, memory, log_tools);
        });
        registry.apply_pins(config, memory);
        registry
    }

    /// Add every loaded plugin (and a row for each file that failed), in discovery order.
    fn add_all(
        &mut self,
        loaded: Sources,
        config: &Config,
        winners: &mut Winners<'_>,
        checks: &mut checked::SchemaChecks,
        memory: &BuildMemory,
        log_tools: bool,
    ) {
        // A plugin name chooses settings (grants, data directory, config): a second file calling
        // itself by a name already served is flagged (bind the name with `from` / `signed_by` to
        // refuse impostors). Serving one build under several prefixes is legitimate.
        let mut names: HashMap<String, PathBuf> = HashMap::new();
        for (candidate, result) in loaded {
            if let Ok(slot) = &result {
                match names.get(slot.backend.name()) {
                    Some(first) => {
                        let line = format!(
                            "Plugin name {} is served from {} and also from {}: both get the \
                             settings of plugins.{}; if one is not meant to, bind the name to its \
                             files or signer (plugins.{}.from / signed_by)",
                            slot.backend.name(),
                            first.display(),
                            candidate.path.display(),
                            slot.backend.name(),
                            slot.backend.name()
                        );
                        if memory.first_report(&line) {
                            tracing::warn!("{line}");
                        }
                    }
                    None => {
                        names.insert(slot.backend.name().to_owned(), candidate.path.clone());
                    }
                }
            }
            let slot = match result {
                Ok(slot) => slot,
                Err(e) => {
                    // Rescans log their own fresh failures (and not the known ones again).
                    if log_tools {
                        tracing::error!("Error loading plugin {}: {e}", candidate.path.display());
                    }
                    self.entries.push(Entry {
                        tool: "-".into(),
                        kind: Kind::Tool,
                        plugin: None,
                        file: candidate.path.clone(),
                        dir: candidate.dir.clone(),
                        service: None,
                        signer: None,
                        status: Status::LoadError(e.to_string()),
                        isolation: candidate.isolation.unwrap_or_default(),
                        permissions: None,
                        declared: Default::default(),
                    });
                    continue;
                }
            };
            self.add_plugin(slot, config, winners, checks, log_tools);
        }
    }

    /// Hold (under `enforce`) or report (under `warn`) every served definition that is not as
    /// pinned in `config.pins`, per the pinning of the directory its plugin came from. A held
    /// definition keeps its name: nothing from a later directory is served in its place.
    fn apply_pins(&mut self, config: &Config, memory: &BuildMemory) {
        use crate::config::PinMode;
        if !config.pinning_in_use() {
            return;
        }
        if let Some(problem) = &config.pins.problem
            && memory.first_report(problem)
        {
            tracing::error!("{problem}: every definition under pinning is new to it");
        }
        let mut held = Vec::new();
        for i in 0..self.entries.len() {
            let entry = &self.entries[i];
            if entry.status != Status::Active {
                continue;
            }
            let Some((section, slot, listing)) = self.served(entry.kind, &entry.tool) else {
                continue;
            };
            let mode = config.pinning(slot.candidate.dir_index, &slot.candidate.dir);
            if mode == PinMode::Off {
                continue;
            }
            let legacy = config.pins.version < crate::config::lock::LOCK_VERSION;
            if legacy && memory.first_report("legacy lock") {
                tracing::warn!(
                    "The lock file is of format {} and does not pin the definitions' _meta; run \
                     `mcp-host pin` to write format {}",
                    config.pins.version,
                    crate::config::lock::LOCK_VERSION
                );
            }
            let now = crate::config::lock::Pin::new(
                slot.backend.name(),
                pins::definition(&listing.value(), legacy),
            );
            let pinned = section.of(&config.pins).get(&entry.tool);
            let Some(difference) =
                pins::Difference::between(section, &entry.tool, pinned, Some(&now))
            else {
                continue;
            };
            let what = format!(
                "{} {} from {}",
                entry.kind.label(),
                entry.tool,
                slot.candidate.path.display()
            );
            let summary = difference.summary();
            self.drifts.push(Drift {
                difference,
                held: mode != PinMode::Warn,
                file: slot.candidate.path.clone(),
            });
            if mode == PinMode::Warn {
                let line = format!("{what} is served although {summary} (pinning: warn)");
                if memory.first_report(&line) {
                    tracing::warn!("{line}");
                }
                continue;
            }
            let line = format!(
                "{what} is held (pinning: enforce): {summary}; it is not served until \
                 `mcp-host pin` records it"
            );
            if memory.first_report(&line) {
                tracing::error!("{line}");
            }
            held.push((entry.kind, entry.tool.clone()));
            self.entries[i].status = Status::Held(summary);
        }
        for (kind, name) in held {
            self.unserve(kind, &name);
        }
    }

    /// The served `kind` called `name`: its part of the lock, plugin and list entry.
    fn served(
        &self,
        kind: Kind,
        name: &str,
    ) -> Option<(pins::Section, &Arc<PluginSlot>, &Listing)> {
        use pins::Section;
        match kind {
            Kind::Tool => self
                .tools
                .get(name)
                .map(|t| (Section::Tools, &t.slot, &t.listing)),
            Kind::Resource => self
                .resources
                .get(name)
                .map(|r| (Section::Resources, &r.slot, &r.listing)),
            Kind::ResourceTemplate => self
                .templates
                .get(name)
                .map(|r| (Section::Resources, &r.slot, &r.listing)),
            Kind::Prompt => self
                .prompts
                .get(name)
                .map(|p| (Section::Prompts, &p.slot, &p.listing)),
        }
    }

    /// Stop serving the `kind` called `name`.
    fn unserve(&mut self, kind: Kind, name: &str) {
        match kind {
            Kind::Tool => {
                self.tools.remove(name);
            }
            Kind::Resource => {
                if let Some(held) = self.resources.remove(name) {
                    if self
                        .by_key
                        .get(&held.key)
                        .is_some_and(|r| Arc::ptr_eq(r, &held))
                    {
                        self.by_key.remove(&held.key);
                    }
                    self.withheld.push(held);
                }
            }
            Kind::ResourceTemplate => {
                self.withheld.extend(self.templates.remove(name));
                self.template_order.retain(|t| t.uri != name);
            }
            Kind::Prompt => {
                self.prompts.remove(name);
            }
        }
    }

    /// What is served, as `mcp-host pin` records it in the lock file.
    pub fn pins(&self) -> crate::config::lock::PinLock {
        use crate::config::lock::Pin;
        let mut lock = pins::empty_lock();
        let pin = |slot: &PluginSlot, listing: &Listing| {
            Pin::new(
                slot.backend.name(),
                pins::definition(&listing.value(), false),
            )
        };
        for t in self.tools() {
            pins::insert(
                &mut lock,
                pins::Section::Tools,
                &t.name,
                pin(&t.slot, &t.listing),
            );
        }
        for r in self.resources().chain(self.templates()) {
            pins::insert(
                &mut lock,
                pins::Section::Resources,
                &r.uri,
                pin(&r.slot, &r.listing),
            );
        }
        for p in self.prompts() {
            pins::insert(
                &mut lock,
                pins::Section::Prompts,
                &p.name,
                pin(&p.slot, &p.listing),
            );
        }
        lock
    }

    /// Add what one loaded plugin serves: its tools (each admitted or given the status that keeps
    /// it out), then its resources and prompts — or, for a quarantined plugin, a row for each
    /// saying why nothing of it is served.
    fn add_plugin(
        &mut self,
        slot: Arc<PluginSlot>,
        config: &Config,
        winners: &mut Winners<'_>,
        checks: &mut checked::SchemaChecks,
        log_tools: bool,
    ) {
        let manifest = slot.backend.manifest();
        let settings = config.plugin(&manifest.plugin);
        if log_tools {
            log_disabled_services(manifest, &slot.candidate.path);
        }
        let global = config.limits.call_timeout_secs;
        let quarantined = slot.backend.quarantined();
        for (index, tool) in manifest.tools.iter().enumerate() {
            let name = format!("{}{}{}", slot.candidate.prefix, settings.prefix, tool.name);
            let mut entry = self.entry(&slot, Kind::Tool, &name, tool.service.as_ref());
            let admitted = match &quarantined {
                Some(why) => Err(Status::Quarantined(why.clone())),
                None => {
                    // Written once, for the schema check's digest and for the listing.
                    let schema = Listing::of(&tool.input_schema);
                    admit(
                        &name,
                        tool,
                        schema.text(),
                        manifest,
                        &slot.candidate.path,
                        winners,
                        checks,
                    )
                    .map(|()| schema)
                }
            };
            match admitted {
                Ok(schema) => {
                    let timeout = timeout_of(&tool.name, tool.service.as_ref(), &settings, global);
                    let served = ServedTool {
                        index,
                        schema,
                        timeout: secs(timeout),
                    };
                    self.serve_tool(&slot, name, tool, served, winners, log_tools);
                }
                Err(status) => entry.status = status,
            }
            self.entries.push(entry);
        }
        match quarantined {
            Some(why) => self.add_quarantined(&slot, &why),
            None => {
                if slot.candidate.upstream.is_some() {
                    self.fallbacks.push(Fallback {
                        slot: Arc::clone(&slot),
                        timeout: secs(timeout_of("", None, &settings, global)),
                    });
                }
                self.add_resources(&slot, &settings, global, winners, log_tools);
                self.add_prompts(&slot, &settings, global, winners, log_tools);
            }
        }
        self.plugins.push(slot);
    }

    /// Serve admitted tool `name` (its final name) of `slot`, the first of that name.
    fn serve_tool(
        &mut self,
        slot: &Arc<PluginSlot>,
        name: String,
        tool: &ToolDescriptor,
        served: ServedTool,
        winners: &mut Winners<'_>,
        log_tools: bool,
    ) {
        let listing = Listing::of(&tool.listed_with_schema(&name, served.schema.raw()));
        if log_tools {
            tracing::info!("Loaded tool: {name}");
        }
        winners
            .tools
            .insert(name.clone(), slot.candidate.path.clone());
        self.tools.insert(
            name.clone(),
            Arc::new(Tool {
                name,
                listing,
                slot: Arc::clone(slot),
                index: served.index as u32,
                validator: std::sync::OnceLock::new(),
                timeout: served.timeout,
                series: std::sync::OnceLock::new(),
                header_params: std::sync::OnceLock::new(),
            }),
        );
    }

    /// Nothing of a quarantined plugin is served: a row per resource and prompt says why.
    fn add_quarantined(&mut self, slot: &Arc<PluginSlot>, why: &str) {
        let manifest = slot.backend.manifest();
        for d in &manifest.resources {
            let kind = if d.template {
                Kind::ResourceTemplate
            } else {
                Kind::Resource
            };
            let mut entry = self.entry(slot, kind, &d.uri, d.service.as_ref());
            entry.status = Status::Quarantined(why.to_owned());
            self.entries.push(entry);
        }
        for d in &manifest.prompts {
            let mut entry = self.entry(slot, Kind::Prompt, &d.name, d.service.as_ref());
            entry.status = Status::Quarantined(why.to_owned());
            self.entries.push(entry);
        }
    }

    /// The `mcp-host list` row of something `slot` serves, active until told otherwise.
    fn entry(&self, slot: &PluginSlot, kind: Kind, name: &str, service: Option<&String>) -> Entry {
        Entry {
            tool: name.to_owned(),
            kind,
            plugin: Some(slot.backend.name().to_owned()),
            file: slot.candidate.path.clone(),
            dir: slot.candidate.dir.clone(),
            service: service.cloned(),
            signer: slot.signer.as_ref().map(|s| s.key.clone()),
            status: Status::Active,
            isolation: slot.run.isolation,
            permissions: slot.run.permissions.clone(),
            declared: slot.backend.manifest().permissions.clone(),
        }
    }

    fn add_resources(
        &mut self,
        slot: &Arc<PluginSlot>,
        settings: &PluginSettings,
        global: f64,
        winners: &mut Winners<'_>,
        log: bool,
    ) {
        let manifest = slot.backend.manifest();
        for (index, d) in manifest.resources.iter().enumerate() {
            let kind = if d.template {
                Kind::ResourceTemplate
            } else {
                Kind::Resource
            };
            let mut entry = self.entry(slot, kind, &d.uri, d.service.as_ref());
            let compiled = if d.template {
                UriTemplate::parse(&d.uri)
                    .map(Some)
                    .map_err(|e| e.to_string())
            } else if is_valid_uri(&d.uri) {
                Ok(None)
            } else {
                Err("not an absolute URI (scheme:...)".to_owned())
            };
            match admit_named(
                kind,
                &d.uri,
                d.service.as_ref(),
                manifest,
                &slot.candidate.path,
                winners,
            )
            .and_then(|()| {
                compiled.map_err(|why| {
                    tracing::error!(
                        "Invalid resource URI {:?} in {}: {why}",
                        d.uri,
                        slot.candidate.path.display()
                    );
                    Status::InvalidName(why)
                })
            }) {
                Ok(template) => {
                    if log {
                        tracing::info!("Loaded {}: {}", kind.label().to_lowercase(), d.uri);
                    }
                    winners
                        .resources
                        .insert(d.uri.clone(), slot.candidate.path.clone());
                    let resource = Arc::new(Resource {
                        uri: d.uri.clone(),
                        key: resource_key(d, winners.memory),
                        listing: Listing::of(&resource_listing(d)),
                        descriptor: d.clone(),
                        slot: Arc::clone(slot),
                        index: index as u32,
                        timeout: secs(timeout_of(&d.name, d.service.as_ref(), settings, global)),
                        template,
                    });
                    if d.template {
                        self.template_order.push(Arc::clone(&resource));
                        self.templates.insert(d.uri.clone(), resource);
                    } else {
                        self.add_key(&resource, winners.memory);
                        self.resources.insert(d.uri.clone(), resource);
                    }
                }
                Err(status) => entry.status = status,
            }
            self.entries.push(entry);
        }
    }

    fn add_prompts(
        &mut self,
        slot: &Arc<PluginSlot>,
        settings: &PluginSettings,
        global: f64,
        winners: &mut Winners<'_>,
        log: bool,
    ) {
        let manifest = slot.backend.manifest();
        for (index, d) in manifest.prompts.iter().enumerate() {
            let name = format!("{}{}{}", slot.candidate.prefix, settings.prefix, d.name);
            let mut entry = self.entry(slot, Kind::Prompt, &name, d.service.as_ref());
            let file = &slot.candidate.path;
            let admitted = if is_valid_tool_name(&name) {
                admit_named(
                    Kind::Prompt,
                    &name,
                    d.service.as_ref(),
                    manifest,
                    file,
                    winners,
                )
            } else {
                tracing::error!(
                    "Invalid prompt name {name:?} in {}: names must match ^[a-zA-Z0-9_-]{{1,64}}$",
                    file.display()
                );
                Err(Status::InvalidName(
                    "must match ^[a-zA-Z0-9_-]{1,64}$".into(),
                ))
            };
            match admitted {
                Ok(()) => {
                    if log {
                        tracing::info!("Loaded prompt: {name}");
                    }
                    winners.prompts.insert(name.clone(), file.clone());
                    self.prompts.insert(
                        name.clone(),
                        Arc::new(Prompt {
                            listing: Listing::of(&prompt_listing(&name, d)),
                            name,
                            descriptor: d.clone(),
                            slot: Arc::clone(slot),
                            index: index as u32,
                            timeout: secs(timeout_of(
                                &d.name,
                                d.service.as_ref(),
                                settings,
                                global,
                            )),
                        }),
                    );
                }
                Err(status) => entry.status = status,
            }
            self.entries.push(entry);
        }
    }

    /// The resource a client's URI in normal form names ([`Resource::key`]), if one is served.
    pub fn resource(&self, key: &str) -> Option<&Arc<Resource>> {
        self.by_key.get(key)
    }

    /// Index `resource` by its key, unless an earlier resource has that key (another spelling of
    /// the same URI: reads go to the earlier one).
    fn add_key(&mut self, resource: &Arc<Resource>, memory: &BuildMemory) {
        match self.by_key.get(&resource.key) {
            Some(earlier) => {
                let line = format!(
                    "Resource {:?} of {} is {:?} of {} spelt another way: reads of it go to the \
                     latter",
                    resource.uri,
                    resource.slot.backend.name(),
                    earlier.uri,
                    earlier.slot.backend.name()
                );
                if memory.first_report(&line) {
                    tracing::warn!("{line}");
                }
            }
            None => {
                self.by_key
                    .insert(resource.key.clone(), Arc::clone(resource));
            }
        }
    }

    /// Served resources in URI order.
    pub fn resources(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.resources.values()
    }

    /// The template with this exact URI template.
    pub fn template(&self, uri_template: &str) -> Option<&Arc<Resource>> {
        self.templates.get(uri_template)
    }

    /// Served templates in URI-template order.
    pub fn templates(&self) -> impl Iterator<Item = &Arc<Resource>> {
        self.templates.values()
    }

    /// What serves a read of `uri` — a client's URI in normal form ([`uri::normalize`]): the
    /// resource with that key, else the first template in precedence order that matches it and
    /// that `visible` accepts, with the template's variables.
    pub fn resolve(
        &self,
        uri: &str,
        visible: impl Fn(&Resource) -> bool,
    ) -> Option<(Arc<Resource>, Map<String, Value>)> {
        if let Some(r) = self.by_key.get(uri).filter(|r| visible(r)) {
            return Some((Arc::clone(r), Map::new()));
        }
        self.template_order
            .iter()
            .filter(|t| visible(t))
            .find_map(|t| {
                let vars = t.template.as_ref()?.matches(uri)?;
                Some((Arc::clone(t), vars))
            })
    }

    /// Where a read of `uri` (in normal form) goes for a caller who may see the URIs (and URI
    /// templates) `visible` accepts (it is handed [`Resource::key`]s and `uri`): what
    /// [`Registry::resolve`] finds; else, when nothing lists the URI and no listed template
    /// matches it (whoever may see them; pinning's held ones too), the upstreams that read
    /// unlisted URIs, in `tool_dirs` order — none for a URI the caller may not see or that is not
    /// an absolute URI.
    pub fn route(&self, uri: &str, visible: impl Fn(&str) -> bool) -> Route<'_> {
        if let Some((resource, variables)) = self.resolve(uri, |r| visible(&r.key)) {
            return Route::Listed(resource, variables);
        }
        let matches = |r: &Arc<Resource>| match &r.template {
            Some(template) => template.matches(uri).is_some(),
            None => r.key == uri,
        };
        let listed = self.by_key.contains_key(uri)
            || self.template_order.iter().any(matches)
            || self.withheld.iter().any(matches);
        if listed {
            return Route::Hidden;
        }
        if !visible(uri) || !is_valid_uri(uri) {
            return Route::Unlisted(Vec::new());
        }
        Route::Unlisted(
            self.fallbacks
                .iter()
                .filter(|f| f.slot.backend.reads_unlisted_resources())
                .collect(),
        )
    }

    /// The prompt called `name`, if it is served.
    pub fn prompt(&self, name: &str) -> Option<&Arc<Prompt>> {
        self.prompts.get(name)
    }

    /// Served prompts in name order.
    pub fn prompts(&self) -> impl Iterator<Item = &Arc<Prompt>> {
        self.prompts.values()
    }

    /// The tool called `name`, if it is served.
    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.tools.get(name)
    }

    /// Served tools in name order (deterministic for `tools/list` and its cursors).
    pub fn tools(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.tools.values()
    }

    /// Served tools in name order after `key` (all of them for `None`), found by seeking.
    pub fn tools_after<'a>(
        &'a self,
        key: Option<&str>,
    ) -> impl Iterator<Item = &'a Arc<Tool>> + use<'a> {
        after(&self.tools, key)
    }

    /// Served resources in URI order after `key`.
    pub fn resources_after<'a>(
        &'a self,
        key: Option<&str>,
    ) -> impl Iterator<Item = &'a Arc<Resource>> + use<'a> {
        after(&self.resources, key)
    }

    /// Served resource templates in URI-template order after `key`.
    pub fn templates_after<'a>(
        &'a self,
        key: Option<&str>,
    ) -> impl Iterator<Item = &'a Arc<Resource>> + use<'a> {
        after(&self.templates, key)
    }

    /// Served prompts in name order after `key`.
    pub fn prompts_after<'a>(
        &'a self,
        key: Option<&str>,
    ) -> impl Iterator<Item = &'a Arc<Prompt>> + use<'a> {
        after(&self.prompts, key)
    }

    /// The search index of the served tools (built on first use, then kept with this tool set).
    pub fn search_index(&self) -> &search::ToolIndex {
        self.search
            .get_or_init(|| search::ToolIndex::build(self.tools.values()))
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
        self.tools()
            .map(|t| &t.listing)
            .eq(other.tools().map(|t| &t.listing))
    }

    /// Whether `other` serves the same resources and templates, listed the same way.
    pub fn same_resources(&self, other: &Registry) -> bool {
        self.resources()
            .chain(self.templates())
            .map(|r| &r.listing)
            .eq(other
                .resources()
                .chain(other.templates())
                .map(|r| &r.listing))
    }

    /// Whether `other` serves the same prompts, listed the same way.
    pub fn same_prompts(&self, other: &Registry) -> bool {
        self.prompts()
            .map(|p| &p.listing)
            .eq(other.prompts().map(|p| &p.listing))
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

/// Which file won each name so far, per namespace, in one build; and what the host's builds
/// already logged.
struct Winners<'m> {
    tools: HashMap<String, PathBuf>,
    /// Resource URIs and URI templates.
    resources: HashMap<String, PathBuf>,
    prompts: HashMap<String, PathBuf>,
    memory: &'m BuildMemory,
}

impl<'m> Winners<'m> {
    /// No names won yet, in a build of the host that owns `memory`.
    fn new(memory: &'m BuildMemory) -> Self {
        Winners {
            tools: HashMap::new(),
            resources: HashMap::new(),
            prompts: HashMap::new(),
            memory,
        }
    }

    /// `Ok` when no earlier directory or file serves `name` of `kind`; else the status that
    /// keeps `file`'s out (logged).
    fn first(&self, kind: Kind, name: &str, file: &std::path::Path) -> Result<(), Status> {
        let won = match kind {
            Kind::Tool => &self.tools,
            Kind::Resource | Kind::ResourceTemplate => &self.resources,
            Kind::Prompt => &self.prompts,
        };
        match won.get(name) {
            Some(winner) => {
                log_override(self.memory, kind.label(), name, file, winner);
                Err(Status::OverriddenBy(winner.clone()))
            }
            None => Ok(()),
        }
    }
}

/// Log that `name` from `file` is overridden by the one from `winner`: a warning the first time
/// the host's builds (`memory`) see it, then (every rescan rebuilds the tool set) a debug line.
fn log_override(
    memory: &BuildMemory,
    label: &str,
    name: &str,
    file: &std::path::Path,
    winner: &std::path::Path,
) {
    let key = format!("{label}\0{name}\0{}\0{}", file.display(), winner.display());
    if memory.first_report(&key) {
        tracing::warn!(
            "{label} {name} from {} overridden by {} (said once; `mcp-host list` shows it)",
            file.display(),
            winner.display()
        );
    } else {
        tracing::debug!(
            "{label} {name} from {} overridden by {}",
            file.display(),
            winner.display()
        );
    }
}

/// Whether `name` (a resource URI or template, or a prompt name) of `kind` is served: its service
/// is enabled and no earlier directory or file defined it. The status that keeps it out (logged).
fn admit_named(
    kind: Kind,
    name: &str,
    service: Option<&String>,
    manifest: &Manifest,
    file: &std::path::Path,
    winners: &Winners<'_>,
) -> Result<(), Status> {
    service_enabled(service, manifest)?;
    winners.first(kind, name, file)
}

/// `Err` with the reason when `service` (of `manifest`) is disabled.
fn service_enabled(service: Option<&String>, manifest: &Manifest) -> Result<(), Status> {
    let service = service.and_then(|s| manifest.services.iter().find(|d| &d.name == s));
    match service.filter(|s| !s.enabled) {
        Some(service) => Err(Status::DisabledService(
            service
                .disabled_reason
                .clone()
                .unwrap_or_else(|| "disabled".into()),
        )),
        None => Ok(()),
    }
}

/// Whether tool `name` (its final name) is served: its service is enabled, its name is safe for
/// every client, no earlier directory or file defined it, and its input schema compiles. The
/// compiled schema, or the status that keeps it out (logged here). `schema_text` is the tool's input
/// schema as JSON text.
fn admit(
    name: &str,
    tool: &ToolDescriptor,
    schema_text: &str,
    manifest: &Manifest,
    file: &std::path::Path,
    winners: &Winners<'_>,
    checks: &mut checked::SchemaChecks,
) -> Result<(), Status> {
    service_enabled(tool.service.as_ref(), manifest)?;
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
    winners.first(Kind::Tool, name, file)?;
    checks
        .check(&tool.input_schema, schema_text)
        .map_err(|why| {
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
    Ok(())
}

/// A call's timeout in seconds: per tool (by the plugin's own name for it), else per service,
/// else per plugin, else global.
fn timeout_of(name: &str, service: Option<&String>, settings: &PluginSettings, global: f64) -> f64 {
    settings
        .tools
        .get(name)
        .and_then(|t| t.timeout_secs)
        .or_else(|| {
            service
                .and_then(|s| settings.services.get(s))
                .and_then(|s| s.timeout_secs)
        })
        .or(settings.timeout_secs)
        .unwrap_or(global)
}

#[cfg(test)]
mod tests {
    use super::BuildMemory;

    #[test]
    fn a_problem_is_reported_once_per_host_not_once_per_process() {
        let (first_host, second_host) = (BuildMemory::default(), BuildMemory::default());
        assert!(first_host.first_report("tool x is held"));
        assert!(!first_host.first_report("tool x is held"));
        assert!(second_host.first_report("tool x is held"));
        assert!(first_host.first_report("tool y is held"));
    }
}
