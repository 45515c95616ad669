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
pub mod scan;
pub mod search;
pub mod shape;
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

use crate::config::{Config, Isolation, PluginSettings, ScanMode};
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
    /// How it is served under overrides (none applies: `None`, and it is served as its source
    /// says).
    shaped: Option<Box<Shaped>>,
}

/// A tool served under overrides (`config::DefinitionOverrides`).
#[derive(Debug)]
pub struct Shaped {
    /// The definition clients see, when the overrides change it for them (`None`: an agent's
    /// overrides only, the source's for everyone else).
    served: Option<ToolDescriptor>,
    /// What the host does with a call's arguments.
    pub injection: shape::Injection,
    /// The merged overrides it is served under (an agent's own go over these).
    merged: crate::config::ToolOverride,
    /// The source's definition and the overrides' pinned form.
    pub overridden: Overridden,
}

/// What a definition served under overrides was before them, and the overrides as pinned.
#[derive(Debug)]
pub struct Overridden {
    /// Its name (or URI) before overrides, prefixes applied.
    pub original: String,
    /// The source's definition as it would be listed without overrides.
    pub source_listing: Listing,
    /// The overrides' pinned form ([`shape::pinned`]; for a prompt or resource, the override).
    pub pin: Value,
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
    /// The tool as clients see it (the served name is [`Tool::name`]: prefixes and overrides
    /// applied): what the plugin declared — borrowed from the plugin's manifest, never copied —
    /// unless overrides change it.
    pub fn descriptor(&self) -> &ToolDescriptor {
        match self.shaped.as_ref().and_then(|s| s.served.as_ref()) {
            Some(served) => served,
            None => self.source_descriptor(),
        }
    }

    /// What the plugin or upstream declared for it, whatever the overrides.
    pub fn source_descriptor(&self) -> &ToolDescriptor {
        &self.slot.backend.manifest().tools[self.index as usize]
    }

    /// The source's own name for it (before prefixes and overrides): what policy rules see as
    /// `tool.source_name`.
    pub fn source_name(&self) -> &str {
        &self.source_descriptor().name
    }

    /// How it is served under overrides, if any apply.
    pub fn shaped(&self) -> Option<&Shaped> {
        self.shaped.as_deref()
    }

    /// What the host does with its calls' arguments, when it fixes, fills or withholds any.
    pub fn injection(&self) -> Option<&shape::Injection> {
        self.shaped
            .as_deref()
            .map(|s| &s.injection)
            .filter(|i| !i.is_empty())
    }

    /// Its name before overrides (prefixes applied).
    pub fn original_name(&self) -> &str {
        self.shaped
            .as_deref()
            .map_or(&self.name, |s| &s.overridden.original)
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
    /// What it was before overrides, when it is served under them.
    pub overridden: Option<Box<Overridden>>,
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
    /// What it was before overrides, when it is served under them.
    pub overridden: Option<Box<Overridden>>,
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
    /// An upstream server not connected yet (since when, and why its last attempt failed).
    Connecting(String),
    /// An upstream server that failed after it was ready and is being restarted (why).
    Restarting(String),
    /// An upstream server whose first connection failed (why), in a one-shot command.
    Failed(String),
    /// Its definition is not as pinned in the lock file, and its directory's pinning is
    /// `enforce`: not served until re-pinned.
    Held(String),
    /// Its overrides cannot apply to it (an argument it does not have, a required one hidden
    /// without a value): not served, rather than served without them.
    BadOverride(String),
    /// The definition scan found hidden characters or instructions to the model in it, and its
    /// directory's `definition_scan` is `hold`: not served (what was found).
    Suspicious(String),
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
    /// Its name before overrides (prefixes applied), when it is served under overrides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// What clients are shown of it under the overrides, when they change it (`source` is the
    /// source's definition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exposed: Option<Exposed>,
}

/// A definition as its source serves it and as clients are shown it under overrides.
#[derive(Debug, Clone, Serialize)]
pub struct Exposed {
    /// The source's definition (the list entry under the name it has without overrides).
    pub source: Value,
    /// What clients without overrides of their own are shown.
    pub served: Value,
    /// What each agent with overrides of its own is shown, by agent.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, Value>,
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

/// An admitted tool's place in its manifest, its schema as listed, its call timeout, and how
/// overrides shape it.
struct ServedTool {
    index: usize,
    schema: Listing,
    timeout: Duration,
    shaped: Option<Box<Shaped>>,
}

/// What admitting a tool takes from the build: the names won so far, the schema checks, and
/// whether each served tool is logged.
struct Admission<'w, 'm> {
    winners: &'w mut Winners<'m>,
    checks: &'w mut checked::SchemaChecks,
    log_tools: bool,
}

/// The overrides that apply to one tool: the source's over the global ones, and each agent's own.
struct ToolOverrides {
    merged: crate::config::ToolOverride,
    agents: BTreeMap<String, crate::config::ToolOverride>,
}

impl ToolOverrides {
    /// Those of the tool the source calls `source`, served as `base` without overrides.
    fn of(config: &Config, settings: &PluginSettings, base: &str, source: &str) -> Self {
        let global = config.overrides.tools.get(base);
        let merged = match (settings.overrides.tools.get(source), global) {
            (Some(own), Some(global)) => own.over(global),
            (Some(one), None) | (None, Some(one)) => one.clone(),
            (None, None) => crate::config::ToolOverride::default(),
        };
        let agents = config
            .agents
            .iter()
            .filter_map(|(agent, s)| Some((agent.clone(), s.overrides.tools.get(base)?.clone())))
            .collect();
        ToolOverrides { merged, agents }
    }

    /// How `tool` (served as `base` without overrides) is served under them: `None` when none
    /// applies; an error when they cannot apply to it. An agent's own are checked when its view
    /// is built.
    fn shape(self, tool: &ToolDescriptor, base: &str) -> Result<Option<Box<Shaped>>, String> {
        if self.merged.is_empty() && self.agents.is_empty() {
            return Ok(None);
        }
        let (served, injection) = if self.merged.is_empty() {
            (None, shape::Injection::default())
        } else {
            let (served, injection) = shape::shape(tool, &self.merged)?;
            (Some(served), injection)
        };
        Ok(Some(Box::new(Shaped {
            served,
            injection,
            overridden: Overridden {
                original: base.to_owned(),
                source_listing: Listing::of(&tool.listed(base)),
                pin: shape::pinned(&self.merged, &self.agents),
            },
            merged: self.merged,
        })))
    }
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
    /// The tool sets of the agents whose overrides of their own change what they see.
    views: HashMap<String, AgentTools>,
    /// Definitions not as pinned in the lock file: held (pinning `enforce`) or served anyway
    /// (`warn`).
    pub drifts: Vec<Drift>,
    /// The plugins' result filters (`#[filter]`), by their guardrails key
    /// (`plugin:<plugin>/<filter>`): never served as tools.
    pub filters: HashMap<String, Filter>,
}

/// A plugin's result filter: called like its tools (same timeouts, isolation and sandbox), never
/// served as one.
#[derive(Debug, Clone)]
pub struct Filter {
    /// The plugin that has it.
    pub slot: Arc<PluginSlot>,
    /// Its index in the plugin's manifest (its call id).
    pub index: u32,
    /// How long a run may take (the plugin's timeout, or its `tools.<filter>.timeout_secs`).
    pub timeout: Duration,
}

/// The tools of an agent whose overrides of its own change what it sees: every served tool, those
/// it overrides as it sees them.
#[derive(Debug, Default)]
struct AgentTools {
    tools: BTreeMap<String, Arc<Tool>>,
    search: std::sync::OnceLock<search::ToolIndex>,
}

/// The tools as one caller sees them (before its agent's `allow` and `deny`): every caller's, or
/// those of an agent with overrides of its own ([`Registry::view`]).
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    tools: &'a BTreeMap<String, Arc<Tool>>,
    search: &'a std::sync::OnceLock<search::ToolIndex>,
}

impl<'a> View<'a> {
    /// The tool called `name` here, if it is served.
    pub fn get(&self, name: &str) -> Option<&'a Arc<Tool>> {
        self.tools.get(name)
    }

    /// Its tools in name order.
    pub fn tools(&self) -> impl Iterator<Item = &'a Arc<Tool>> + use<'a> {
        self.tools.values()
    }

    /// Its tools in name order after `key` (all of them for `None`), found by seeking.
    pub fn tools_after(&self, key: Option<&str>) -> impl Iterator<Item = &'a Arc<Tool>> + use<'a> {
        after(self.tools, key)
    }

    /// The search index of its tools (built on first use, then kept with the tool set).
    pub fn search_index(&self) -> &'a search::ToolIndex {
        let tools = self.tools;
        self.search
            .get_or_init(|| search::ToolIndex::build(tools.values()))
    }
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
        registry.apply_scan(config, memory);
        registry.add_views(config, memory);
        registry.describe_overrides();
        registry
    }

    /// The tools as the agent called `agent` (none: a caller without one) sees them: its own
    /// overrides applied, when it has some.
    pub fn view(&self, agent: Option<&str>) -> View<'_> {
        // No agent has overrides of its own (the common case): no lookup at all.
        let own = agent.filter(|_| !self.views.is_empty());
        match own.and_then(|a| self.views.get(a)) {
            Some(own) => View {
                tools: &own.tools,
                search: &own.search,
            },
            None => View {
                tools: &self.tools,
                search: &self.search,
            },
        }
    }

    /// The tool set of each agent with overrides of its own: every served tool (pinning's held
    /// ones are gone already), those it overrides as it sees them. An override that cannot apply
    /// leaves the tool out of the agent's set (never served without it); a name taken in the set
    /// keeps the later one out (logged).
    fn add_views(&mut self, config: &Config, memory: &BuildMemory) {
        for (agent, settings) in &config.agents {
            let own = &settings.overrides.tools;
            if own.is_empty() {
                continue;
            }
            let mut tools = self.tools.clone();
            let mut shaped = Vec::new();
            for tool in self.tools.values() {
                let Some(o) = own.get(tool.original_name()) else {
                    continue;
                };
                tools.remove(&tool.name);
                match agent_tool(tool, o) {
                    Ok(variant) => shaped.push(variant),
                    Err(why) => {
                        let line = format!(
                            "Tool {} is not shown to agent {agent}: its overrides \
                             (agents.{agent}.overrides) cannot apply: {why}",
                            tool.name
                        );
                        if memory.first_report(&line) {
                            tracing::error!("{line}");
                        }
                    }
                }
            }
            for variant in shaped {
                if let Some(taken) = tools.get(&variant.name) {
                    let line = format!(
                        "Tool {} is not shown to agent {agent} as {}: {} is that name in its view",
                        variant.original_name(),
                        variant.name,
                        taken.original_name()
                    );
                    if memory.first_report(&line) {
                        tracing::error!("{line}");
                    }
                    continue;
                }
                tools.insert(variant.name.clone(), Arc::new(variant));
            }
            let set = AgentTools {
                tools,
                search: std::sync::OnceLock::new(),
            };
            self.views.insert(agent.clone(), set);
        }
    }

    /// Fill each served definition's row with what it was before overrides and what clients
    /// are shown (for `mcp-host list`, the console).
    fn describe_overrides(&mut self) {
        for i in 0..self.entries.len() {
            let entry = &self.entries[i];
            if entry.status != Status::Active {
                continue;
            }
            let (overridden, listing) = match entry.kind {
                Kind::Tool => match self.tools.get(&entry.tool) {
                    Some(t) => (t.shaped.as_deref().map(|s| &s.overridden), &t.listing),
                    None => continue,
                },
                Kind::Resource => match self.resources.get(&entry.tool) {
                    Some(r) => (r.overridden.as_deref(), &r.listing),
                    None => continue,
                },
                Kind::ResourceTemplate => match self.templates.get(&entry.tool) {
                    Some(r) => (r.overridden.as_deref(), &r.listing),
                    None => continue,
                },
                Kind::Prompt => match self.prompts.get(&entry.tool) {
                    Some(p) => (p.overridden.as_deref(), &p.listing),
                    None => continue,
                },
            };
            let Some(overridden) = overridden else {
                continue;
            };
            let agents = self
                .views
                .iter()
                .filter(|_| entry.kind == Kind::Tool)
                .filter_map(|(agent, set)| {
                    let own = set.tools.values().find(|t| {
                        t.original_name() == overridden.original
                            && t.slot.candidate.path == entry.file
                            && !self.tools.get(&t.name).is_some_and(|b| Arc::ptr_eq(b, t))
                    })?;
                    Some((agent.clone(), own.listing.value()))
                })
                .collect();
            let exposed = Exposed {
                source: overridden.source_listing.value(),
                served: listing.value(),
                agents,
            };
            let original = overridden.original.clone();
            self.entries[i].original = Some(original);
            self.entries[i].exposed = Some(exposed);
        }
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
                    // An upstream is its entry's name, run as upstreams run (never in the host).
                    let (plugin, isolation) = match &candidate.upstream {
                        Some(u) => (
                            Some(u.name.clone()),
                            config.upstream_isolation(&u.name, candidate.isolation),
                        ),
                        None => (None, candidate.isolation.unwrap_or_default()),
                    };
                    self.entries.push(Entry {
                        tool: "-".into(),
                        kind: Kind::Tool,
                        plugin,
                        file: candidate.path.clone(),
                        dir: candidate.dir.clone(),
                        service: None,
                        signer: None,
                        status: Status::LoadError(e.to_string()),
                        isolation,
                        permissions: None,
                        declared: Default::default(),
                        original: None,
                        exposed: None,
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
            let legacy = config.pins.version < crate::config::lock::LOCK_VERSION;
            let Some((section, slot, now)) = self.pin_of(entry.kind, &entry.tool, legacy) else {
                continue;
            };
            let mode = config.pinning(slot.candidate.dir_index, &slot.candidate.dir);
            if mode == PinMode::Off {
                continue;
            }
            if legacy && memory.first_report("legacy lock") {
                tracing::warn!(
                    "The lock file is of format {} and does not pin the definitions' _meta; run \
                     `mcp-host pin` to write format {}",
                    config.pins.version,
                    crate::config::lock::LOCK_VERSION
                );
            }
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
            held.push(self.hold(i, &line, Status::Held(summary), memory));
        }
        for (kind, name) in held {
            self.unserve(kind, &name);
        }
    }

    /// The served `kind` called `name`: its part of the lock, plugin, and pin as it is served
    /// now (`legacy`: without `_meta`, to compare with a lock of format 1).
    fn pin_of(
        &self,
        kind: Kind,
        name: &str,
        legacy: bool,
    ) -> Option<(pins::Section, &Arc<PluginSlot>, crate::config::lock::Pin)> {
        use pins::Section;
        let (section, slot, listing, overridden) = match kind {
            Kind::Tool => self.tools.get(name).map(|t| {
                let overridden = t.shaped.as_deref().map(|s| &s.overridden);
                (Section::Tools, &t.slot, &t.listing, overridden)
            }),
            Kind::Resource => self.resources.get(name).map(|r| {
                let overridden = r.overridden.as_deref();
                (Section::Resources, &r.slot, &r.listing, overridden)
            }),
            Kind::ResourceTemplate => self.templates.get(name).map(|r| {
                let overridden = r.overridden.as_deref();
                (Section::Resources, &r.slot, &r.listing, overridden)
            }),
            Kind::Prompt => self.prompts.get(name).map(|p| {
                let overridden = p.overridden.as_deref();
                (Section::Prompts, &p.slot, &p.listing, overridden)
            }),
        }?;
        Some((section, slot, pin(slot, listing, overridden, legacy)))
    }

    /// Mark entry `i` held with `status`, logging `line` once; its kind and name, to unserve.
    fn hold(
        &mut self,
        i: usize,
        line: &str,
        status: Status,
        memory: &BuildMemory,
    ) -> (Kind, String) {
        if memory.first_report(line) {
            tracing::error!("{line}");
        }
        let entry = &mut self.entries[i];
        entry.status = status;
        (entry.kind, entry.tool.clone())
    }

    /// Scan every served definition as clients are shown it ([`scan`]): one with hidden
    /// characters or instructions to the model is logged (`definition_scan: warn`) or held
    /// (`hold`), its row saying what was found.
    fn apply_scan(&mut self, config: &Config, memory: &BuildMemory) {
        let mut held = Vec::new();
        for i in 0..self.entries.len() {
            let entry = &self.entries[i];
            if entry.status != Status::Active {
                continue;
            }
            let Some((slot, listing)) = self.served_listing(entry.kind, &entry.tool) else {
                continue;
            };
            let mode = config.definition_scan(slot.candidate.dir_index, &slot.candidate.dir);
            if mode == ScanMode::Off || !scan::may_find(listing.text()) {
                continue;
            }
            let found = scan::scan(&listing.value());
            if found.is_empty() {
                continue;
            }
            let what = format!(
                "{} {} from {}",
                entry.kind.label(),
                entry.tool,
                slot.candidate.path.display()
            );
            let summary = found.join("; ");
            if mode == ScanMode::Warn {
                let line = format!(
                    "{what} is served although the definition scan found {summary} (definition_scan: warn)"
                );
                if memory.first_report(&line) {
                    tracing::warn!("{line}");
                }
                continue;
            }
            let line = format!(
                "{what} is held (definition_scan: hold): the definition scan found {summary}; it \
                 is not served until its definition (or an override of it) no longer has it"
            );
            held.push(self.hold(i, &line, Status::Suspicious(summary), memory));
        }
        for (kind, name) in held {
            self.unserve(kind, &name);
        }
    }

    /// The served `kind` called `name`: its plugin and list entry.
    fn served_listing(&self, kind: Kind, name: &str) -> Option<(&Arc<PluginSlot>, &Listing)> {
        match kind {
            Kind::Tool => self.tools.get(name).map(|t| (&t.slot, &t.listing)),
            Kind::Resource => self.resources.get(name).map(|r| (&r.slot, &r.listing)),
            Kind::ResourceTemplate => self.templates.get(name).map(|r| (&r.slot, &r.listing)),
            Kind::Prompt => self.prompts.get(name).map(|p| (&p.slot, &p.listing)),
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

    /// What is served, as `mcp-host pin` records it in the lock file: each definition as its
    /// source serves it, and apart the overrides it is served under.
    pub fn pins(&self) -> crate::config::lock::PinLock {
        let mut lock = pins::empty_lock();
        for t in self.tools() {
            let overridden = t.shaped.as_deref().map(|s| &s.overridden);
            let pin = pin(&t.slot, &t.listing, overridden, false);
            pins::insert(&mut lock, pins::Section::Tools, &t.name, pin);
        }
        for r in self.resources().chain(self.templates()) {
            let pin = pin(&r.slot, &r.listing, r.overridden.as_deref(), false);
            pins::insert(&mut lock, pins::Section::Resources, &r.uri, pin);
        }
        for p in self.prompts() {
            let pin = pin(&p.slot, &p.listing, p.overridden.as_deref(), false);
            pins::insert(&mut lock, pins::Section::Prompts, &p.name, pin);
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
            if tool.filter {
                // A result filter is never a tool; a quarantined plugin's is missing (the
                // guardrails naming it then block).
                if quarantined.is_none()
                    && let Ok(index) = u32::try_from(index)
                {
                    let key = format!(
                        "{}{}/{}",
                        crate::config::FILTER_KEY_PREFIX,
                        manifest.plugin,
                        tool.name
                    );
                    let timeout = secs(timeout_of(&tool.name, None, &settings, global));
                    let slot = Arc::clone(&slot);
                    self.filters.insert(
                        key,
                        Filter {
                            slot,
                            index,
                            timeout,
                        },
                    );
                }
                continue;
            }
            let base = format!("{}{}{}", slot.candidate.prefix, settings.prefix, tool.name);
            if let Some(why) = &quarantined {
                let mut entry = self.entry(&slot, Kind::Tool, &base, tool.service.as_ref());
                entry.status = Status::Quarantined(why.clone());
                self.entries.push(entry);
                continue;
            }
            let overrides = ToolOverrides::of(config, &settings, &base, &tool.name);
            let timeout = secs(timeout_of(
                &tool.name,
                tool.service.as_ref(),
                &settings,
                global,
            ));
            let mut admission = Admission {
                winners: &mut *winners,
                checks: &mut *checks,
                log_tools,
            };
            self.add_tool(&slot, index, base, overrides, timeout, &mut admission);
        }
        self.add_connection(&slot);
        match quarantined {
            Some(why) => self.add_quarantined(&slot, &why),
            None => {
                if slot.candidate.upstream.is_some() {
                    self.fallbacks.push(Fallback {
                        slot: Arc::clone(&slot),
                        timeout: secs(timeout_of("", None, &settings, global)),
                    });
                }
                self.add_resources(&slot, config, &settings, global, winners, log_tools);
                self.add_prompts(&slot, config, &settings, global, winners, log_tools);
            }
        }
        self.plugins.push(slot);
    }

    /// Add tool number `index` of `slot` (served as `base` without overrides) under its
    /// `overrides`: admitted and served under its final name, or given the status that keeps it
    /// out (overrides that cannot apply keep it out, and its name, rather than serve it without
    /// them).
    fn add_tool(
        &mut self,
        slot: &Arc<PluginSlot>,
        index: usize,
        base: String,
        overrides: ToolOverrides,
        timeout: Duration,
        admission: &mut Admission<'_, '_>,
    ) {
        let manifest = slot.backend.manifest();
        let tool = &manifest.tools[index];
        let file = &slot.candidate.path;
        let name = overrides
            .merged
            .name
            .clone()
            .unwrap_or_else(|| base.clone());
        let mut entry = self.entry(slot, Kind::Tool, &name, tool.service.as_ref());
        let shaped = match overrides.shape(tool, &base) {
            Ok(shaped) => shaped,
            Err(why) => {
                let line = format!(
                    "Tool {base} from {}: its overrides cannot apply: {why}; tool not served",
                    file.display()
                );
                if admission.winners.memory.first_report(&line) {
                    tracing::error!("{line}");
                }
                admission.winners.tools.entry(name).or_insert(file.clone());
                entry.original = Some(base);
                entry.status = Status::BadOverride(why);
                self.entries.push(entry);
                return;
            }
        };
        let served = shaped
            .as_ref()
            .and_then(|s| s.served.as_ref())
            .unwrap_or(tool);
        // Written once, for the schema check's digest and for the listing.
        let schema = Listing::of(&served.input_schema);
        let admitted = admit(
            &name,
            served,
            schema.text(),
            manifest,
            file,
            admission.winners,
            admission.checks,
        );
        match admitted {
            Ok(()) => {
                if shaped.is_some() {
                    entry.original = Some(base);
                }
                let served = ServedTool {
                    index,
                    schema,
                    timeout,
                    shaped,
                };
                self.serve_tool(slot, name, served, admission.winners, admission.log_tools);
            }
            Err(status) => entry.status = status,
        }
        self.entries.push(entry);
    }

    /// Serve admitted tool `name` (its final name) of `slot`, the first of that name.
    fn serve_tool(
        &mut self,
        slot: &Arc<PluginSlot>,
        name: String,
        served: ServedTool,
        winners: &mut Winners<'_>,
        log_tools: bool,
    ) {
        let source = &slot.backend.manifest().tools[served.index];
        let shown = served
            .shaped
            .as_ref()
            .and_then(|s| s.served.as_ref())
            .unwrap_or(source);
        let listing = Listing::of(&shown.listed_with_schema(&name, served.schema.raw()));
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
                shaped: served.shaped,
            }),
        );
    }

    /// An upstream server that serves nothing because it is not connected (connecting, failed,
    /// quarantined, restarting before it ever listed anything): a row says so, and why.
    fn add_connection(&mut self, slot: &Arc<PluginSlot>) {
        use crate::plugins::backend::Connection;
        let Some(connection) = slot.backend.connection() else {
            return;
        };
        let manifest = slot.backend.manifest();
        let empty = manifest.tools.is_empty()
            && manifest.resources.is_empty()
            && manifest.prompts.is_empty();
        let detail = connection.detail().unwrap_or_default();
        let status = match connection {
            Connection::Connecting { .. } => Status::Connecting(detail),
            Connection::Failed { .. } => Status::Failed(detail),
            Connection::Quarantined { .. } if empty => Status::Quarantined(detail),
            Connection::Restarting { .. } if empty => Status::Restarting(detail),
            _ => return,
        };
        let mut entry = self.entry(slot, Kind::Tool, "-", None);
        entry.status = status;
        self.entries.push(entry);
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
            original: None,
            exposed: None,
        }
    }

    fn add_resources(
        &mut self,
        slot: &Arc<PluginSlot>,
        config: &Config,
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
            let file = &slot.candidate.path;
            match admit_named(kind, &d.uri, d.service.as_ref(), manifest, file, winners)
                .and_then(|()| compile_uri(d, file))
            {
                Ok(template) => {
                    if log {
                        tracing::info!("Loaded {}: {}", kind.label().to_lowercase(), d.uri);
                    }
                    winners
                        .resources
                        .insert(d.uri.clone(), slot.candidate.path.clone());
                    let o = entry_override(
                        &config.overrides,
                        &settings.overrides,
                        true,
                        &d.uri,
                        &d.uri,
                    );
                    let (served, overridden) = overridden_resource(d, o);
                    let resource = Arc::new(Resource {
                        uri: d.uri.clone(),
                        key: resource_key(d, winners.memory),
                        listing: Listing::of(&resource_listing(&served)),
                        overridden,
                        descriptor: served,
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
        config: &Config,
        settings: &PluginSettings,
        global: f64,
        winners: &mut Winners<'_>,
        log: bool,
    ) {
        let manifest = slot.backend.manifest();
        for (index, d) in manifest.prompts.iter().enumerate() {
            let base = format!("{}{}{}", slot.candidate.prefix, settings.prefix, d.name);
            let o = entry_override(
                &config.overrides,
                &settings.overrides,
                false,
                &base,
                &d.name,
            );
            let (name, served, overridden) = overridden_prompt(base, d, o);
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
                            listing: Listing::of(&prompt_listing(&name, &served)),
                            name,
                            overridden,
                            descriptor: served,
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

/// `tool` as an agent with its own overrides `own` of it sees it: `own` over the overrides it is
/// served under, applied to its source's definition.
fn agent_tool(tool: &Tool, own: &crate::config::ToolOverride) -> Result<Tool, String> {
    let merged = match tool.shaped.as_deref() {
        Some(s) => own.over(&s.merged),
        None => own.clone(),
    };
    let source = tool.source_descriptor();
    let (served, injection) = shape::shape(source, &merged)?;
    let name = merged
        .name
        .clone()
        .unwrap_or_else(|| tool.original_name().to_owned());
    if !is_valid_tool_name(&name) {
        return Err(format!("{name:?} is not a valid tool name"));
    }
    let listing = Listing::of(&served.listed(&name));
    let overridden = Overridden {
        original: tool.original_name().to_owned(),
        source_listing: Listing::of(&source.listed(tool.original_name())),
        pin: Value::Null,
    };
    Ok(Tool {
        name,
        slot: Arc::clone(&tool.slot),
        index: tool.index,
        validator: std::sync::OnceLock::new(),
        timeout: tool.timeout,
        listing,
        series: std::sync::OnceLock::new(),
        header_params: std::sync::OnceLock::new(),
        shaped: Some(Box::new(Shaped {
            served: Some(served),
            injection,
            merged,
            overridden,
        })),
    })
}

/// The override of a prompt (`resource: false`, by its name `base` without overrides, `source`
/// its source's own) or of a resource (by URI): the source's over the global one.
fn entry_override(
    global: &crate::config::DefinitionOverrides,
    own: &crate::config::DefinitionOverrides,
    resource: bool,
    base: &str,
    source: &str,
) -> Option<crate::config::EntryOverride> {
    let (global, own) = if resource {
        (global.resources.get(base), own.resources.get(source))
    } else {
        (global.prompts.get(base), own.prompts.get(source))
    };
    match (own, global) {
        (Some(own), Some(global)) => Some(own.over(global)),
        (one, other) => one.or(other).cloned(),
    }
}

/// Resource `d`'s URI template compiled (`None`: a plain resource), or why its URI is refused.
fn compile_uri(
    d: &ResourceDescriptor,
    file: &std::path::Path,
) -> Result<Option<UriTemplate>, Status> {
    let compiled = if d.template {
        UriTemplate::parse(&d.uri)
            .map(Some)
            .map_err(|e| e.to_string())
    } else if is_valid_uri(&d.uri) {
        Ok(None)
    } else {
        Err("not an absolute URI (scheme:...)".to_owned())
    };
    compiled.map_err(|why| {
        tracing::error!(
            "Invalid resource URI {:?} in {}: {why}",
            d.uri,
            file.display()
        );
        Status::InvalidName(why)
    })
}

/// Prompt `d` (served as `base` without overrides) as the override `o` (if any) shows it: its
/// name, its definition, and what it was before.
fn overridden_prompt(
    base: String,
    d: &PromptDescriptor,
    o: Option<crate::config::EntryOverride>,
) -> (String, PromptDescriptor, Option<Box<Overridden>>) {
    let Some(o) = o else {
        return (base, d.clone(), None);
    };
    let mut served = d.clone();
    served.title = o.title.clone().or_else(|| d.title.clone());
    if let Some(description) = &o.description {
        served.description = description.clone();
    }
    let name = o.name.clone().unwrap_or_else(|| base.clone());
    let overridden = Box::new(Overridden {
        source_listing: Listing::of(&prompt_listing(&base, d)),
        original: base,
        pin: serde_json::to_value(o).unwrap_or_default(),
    });
    (name, served, Some(overridden))
}

/// Resource `d` as the override `o` (if any) shows it, and what it was before.
fn overridden_resource(
    d: &ResourceDescriptor,
    o: Option<crate::config::EntryOverride>,
) -> (ResourceDescriptor, Option<Box<Overridden>>) {
    let Some(o) = o else {
        return (d.clone(), None);
    };
    let mut served = d.clone();
    served.name = o.name.clone().unwrap_or_else(|| d.name.clone());
    served.title = o.title.clone().or_else(|| d.title.clone());
    served.description = o.description.clone().or_else(|| d.description.clone());
    let overridden = Box::new(Overridden {
        original: d.uri.clone(),
        source_listing: Listing::of(&resource_listing(d)),
        pin: serde_json::to_value(o).unwrap_or_default(),
    });
    (served, Some(overridden))
}

/// The pin of a definition `slot` serves, listed as `listing`: its source's definition (the
/// listing itself, unless `overridden` says what it was before overrides) and the overrides'
/// pinned form.
fn pin(
    slot: &PluginSlot,
    listing: &Listing,
    overridden: Option<&Overridden>,
    legacy: bool,
) -> crate::config::lock::Pin {
    let source = overridden.map_or(listing, |o| &o.source_listing);
    crate::config::lock::Pin::new(
        slot.backend.name(),
        pins::definition(&source.value(), legacy),
    )
    .with_override(overridden.map(|o| o.pin.clone()))
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
