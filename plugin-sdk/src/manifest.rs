//! The manifest: what a plugin tells the host about its services and tools, as JSON.
//!
//! The manifest is the part of the interface that is allowed to grow: new optional fields are added with
//! `#[serde(default)]` so older hosts ignore them and newer hosts read older plugins.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything a plugin exports, produced by `init`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The plugin's name (crate name unless overridden in `export_plugin!`).
    pub plugin: String,
    /// The plugin's own version.
    pub version: String,
    /// The SDK version it was built with.
    pub sdk_version: String,
    /// Every service, enabled or not, in declaration order.
    #[serde(default)]
    pub services: Vec<ServiceDescriptor>,
    /// Every tool, in declaration order; a tool's position is its id in calls.
    #[serde(default)]
    pub tools: Vec<ToolDescriptor>,
    /// Every resource and resource template, in declaration order; a resource's position is its id
    /// in [`CallEnvelope`]s (plugins built before resources existed have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceDescriptor>,
    /// Every prompt, in declaration order; a prompt's position is its id in [`CallEnvelope`]s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<PromptDescriptor>,
    /// The plugin allows the host to run its `init` at its first call instead of at start
    /// (`export_plugin!(load: on_first_call, ...)`): what it exports depends only on its file and
    /// its configuration, and nothing it does at `init` must happen before a call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub load_on_first_call: bool,
    /// What the plugin asks to reach when it runs sandboxed (`export_plugin!(permissions: {...})`);
    /// plugins built before declarations existed, and those that need nothing, declare nothing.
    #[serde(default, skip_serializing_if = "DeclaredPermissions::is_empty")]
    pub permissions: DeclaredPermissions,
}

/// The permissions a plugin declares it needs (`export_plugin!(permissions: { read: [...],
/// write: [...], net: [...], env: [...] })`). A declaration grants nothing by itself: the host shows
/// it (`mcp-host check`, `mcp-host add`), and a plugin installed with `mcp-host add` runs sandboxed
/// with exactly these grants unless the operator configures `plugins.<name>.permissions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredPermissions {
    /// Absolute paths (files, or directories with everything beneath) it reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Absolute paths it reads, writes, creates and removes (its data directory is always granted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
    /// TCP endpoints it connects to: `"host:port"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net: Vec<String>,
    /// Environment variables it reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Credential providers whose token of the calling user it asks for
    /// ([`crate::CallContext::credential`]): the host refuses any other. Hosts before this field
    /// ignore it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
}

impl DeclaredPermissions {
    /// True when nothing is declared (the field is then left out of the manifest).
    pub fn is_empty(&self) -> bool {
        self.read.is_empty()
            && self.write.is_empty()
            && self.net.is_empty()
            && self.env.is_empty()
            && self.credentials.is_empty()
    }
}

impl Manifest {
    /// The service of `tool` when that service is disabled (its tools are not served).
    pub fn disabled_service_of(&self, tool: &ToolDescriptor) -> Option<&ServiceDescriptor> {
        let name = tool.service.as_deref()?;
        self.services
            .iter()
            .find(|s| s.name == name)
            .filter(|s| !s.enabled)
    }
}

/// A named group of tools with an `enabled()` gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceDescriptor {
    /// The service's name: the type name of its `impl` block.
    pub name: String,
    /// The doc comment on the `impl` block, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the service was enabled and constructed; its tools are callable only then.
    pub enabled: bool,
    /// Why it is not enabled: `enabled() returned false`, a panic, or a constructor error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Whether the reason is a failure (a panic or constructor error) rather than a plain opt-out.
    #[serde(default)]
    pub failed: bool,
}

/// How a tool is offered to MCP clients, plus what the host must inject into its calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDescriptor {
    /// The tool's name as clients see it (before any host prefix).
    pub name: String,
    /// The service it belongs to; `None` for a free `#[tool]` function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, for the model: the doc comment before its first `# ` section.
    pub description: String,
    /// JSON Schema (2020-12) of the arguments, object root.
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`, when the tool returns a struct.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Behaviour hints for clients.
    #[serde(default, skip_serializing_if = "Annotations::is_empty")]
    pub annotations: Annotations,
    /// Passed through to the tool's `_meta`.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// Whether the tool takes the caller (`UserInfo`): `None`, `Optional` or `Required`.
    #[serde(default)]
    pub caller: CallerNeed,
    /// The tool promised to return quickly without blocking, so the host may run it inline.
    #[serde(default)]
    pub inline: bool,
    /// Client capabilities the tool needs (e.g. `{"sampling": {}}`): a client that did not declare
    /// them gets a "missing required client capability" error instead of a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_client_capabilities: Option<Value>,
    /// Whether the tool runs as a task for 2026-07-28 clients that declare the tasks extension
    /// (plugins built before tasks existed: never).
    #[serde(default, skip_serializing_if = "TaskSupport::is_forbidden")]
    pub task_support: TaskSupport,
    /// The tool asks its questions before it becomes a task: the host runs it in the request (its
    /// questions go back as input-required rounds) until it calls `CallContext::start_task`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask_first: bool,
    /// A result filter (`#[filter]`), not a tool: the host never serves it (it is never in
    /// `tools/list` and no client calls it); it runs it over tool results when the guardrails
    /// name it (`plugin:<plugin>/<filter>`). Hosts before filters serve it as a tool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub filter: bool,
}

/// Whether a tool runs as a task (the 2026-07-28 tasks extension): `#[tool(task)]`,
/// `#[tool(task = "required")]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskSupport {
    /// Never a task: the call is answered when it finishes.
    #[default]
    Forbidden,
    /// A task when the client declares the tasks extension; otherwise answered when it finishes.
    Optional,
    /// Always a task: a client without the tasks extension is refused (-32021).
    Required,
}

impl TaskSupport {
    /// True for [`TaskSupport::Forbidden`] (the field is then left out of the manifest).
    pub fn is_forbidden(&self) -> bool {
        *self == TaskSupport::Forbidden
    }
}

impl ToolDescriptor {
    /// The MCP `Tool` object `tools/list` shows for this tool: `name`, `description`,
    /// `inputSchema`, and `title`, `outputSchema`, `annotations` and `_meta` when set.
    ///
    /// ```
    /// use mcp_plugin_sdk::json;
    /// use mcp_plugin_sdk::wire::ToolDescriptor;
    /// let d: ToolDescriptor = serde_json::from_value(json!({
    ///     "name": "add", "description": "Add.", "service": "Math", "caller": "none",
    ///     "inputSchema": {"type": "object"},
    /// })).unwrap();
    /// assert_eq!(d.listing(), json!({"name": "add", "description": "Add.", "inputSchema": {"type": "object"}}));
    /// ```
    pub fn listing(&self) -> Value {
        serde_json::to_value(self.listed(&self.name)).unwrap_or_default()
    }

    /// The same `Tool` object under the name `name` (the host's, with prefixes), borrowing from
    /// the descriptor: serialise it to write the listing without building a JSON tree. Its members
    /// come in the order a JSON object of them would have (sorted).
    ///
    /// ```
    /// use mcp_plugin_sdk::json;
    /// use mcp_plugin_sdk::wire::ToolDescriptor;
    /// let d: ToolDescriptor = serde_json::from_value(json!({
    ///     "name": "add", "description": "Add.", "inputSchema": {"type": "object"},
    ///     "annotations": {"readOnlyHint": true},
    /// })).unwrap();
    /// assert_eq!(
    ///     serde_json::to_string(&d.listed("math_add")).unwrap(),
    ///     r#"{"annotations":{"readOnlyHint":true},"description":"Add.","inputSchema":{"type":"object"},"name":"math_add"}"#
    /// );
    /// ```
    pub fn listed<'a>(&'a self, name: &'a str) -> ToolListing<'a> {
        self.listed_with_schema(name, &self.input_schema)
    }

    /// [`ToolDescriptor::listed`] with `input_schema` in place of the descriptor's own: the same
    /// schema in another form, e.g. JSON text already written (`serde_json::value::RawValue`) when
    /// the caller needs that text for something else too.
    ///
    /// ```
    /// use mcp_plugin_sdk::json;
    /// use mcp_plugin_sdk::wire::ToolDescriptor;
    /// let d: ToolDescriptor = serde_json::from_value(json!({
    ///     "name": "add", "description": "Add.", "inputSchema": {"type": "object"},
    /// })).unwrap();
    /// let strict = json!({"type": "object", "additionalProperties": false});
    /// assert_eq!(
    ///     serde_json::to_string(&d.listed_with_schema("add", &strict)).unwrap(),
    ///     r#"{"description":"Add.","inputSchema":{"additionalProperties":false,"type":"object"},"name":"add"}"#
    /// );
    /// ```
    pub fn listed_with_schema<'a, S: ?Sized>(
        &'a self,
        name: &'a str,
        input_schema: &'a S,
    ) -> ToolListing<'a, S> {
        ToolListing {
            meta: self.meta.as_ref(),
            annotations: (!self.annotations.is_empty()).then_some(&self.annotations),
            description: &self.description,
            input_schema,
            name,
            output_schema: self.output_schema.as_ref(),
            title: self.title.as_deref(),
        }
    }
}

/// A tool as `tools/list` shows it, borrowed from its [`ToolDescriptor`] ([`ToolDescriptor::listed`]);
/// `S` is the input schema's form (a JSON tree unless given otherwise).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolListing<'a, S: ?Sized = Value> {
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a Annotations>,
    description: &'a str,
    input_schema: &'a S,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_schema: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a str>,
}

impl<S: ?Sized> Clone for ToolListing<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: ?Sized> Copy for ToolListing<'_, S> {}

/// Whether every major client accepts `name` as a tool name: `^[a-zA-Z0-9_-]{1,64}$` (no `.`, no
/// `::`, at most 64 characters). The host serves no tool whose final name breaks the rule.
///
/// ```
/// use mcp_plugin_sdk::wire::is_valid_tool_name;
/// assert!(is_valid_tool_name("time_now") && is_valid_tool_name("a-b_C9"));
/// assert!(!is_valid_tool_name("self.light.on") && !is_valid_tool_name("ns::tool"));
/// assert!(!is_valid_tool_name("") && !is_valid_tool_name(&"x".repeat(65)));
/// ```
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// MCP tool annotations (all hints; clients must not rely on them for security).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it twice with the same arguments has no additional effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl Annotations {
    /// True when no hint is set (the field is then left out of `tools/list`).
    pub fn is_empty(&self) -> bool {
        *self == Annotations::default()
    }
}

/// Whether a tool needs the authenticated caller injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CallerNeed {
    /// The tool does not take `UserInfo`.
    #[default]
    None,
    /// The tool takes `Option<UserInfo>`.
    Optional,
    /// The tool takes `UserInfo`: the host must have a verified caller.
    Required,
}

/// A resource (a fixed URI) or a resource template (an RFC 6570 URI template such as
/// `series://readings/{indicator}`) a plugin serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDescriptor {
    /// The resource's URI, or the template's URI template when `template` is set.
    pub uri: String,
    /// Whether `uri` is a URI template whose variables the read fills in.
    #[serde(default)]
    pub template: bool,
    /// A programmatic name.
    pub name: String,
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it holds: the doc comment before its first `# ` section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The MIME type of its contents, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The service it belongs to; `None` for a free `#[resource]` function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Whether a read needs the caller (`UserInfo`).
    #[serde(default)]
    pub caller: CallerNeed,
    /// Passed through as `_meta`.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// The template variables that have a completion function.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completions: Vec<String>,
}

/// A prompt a plugin serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptDescriptor {
    /// The prompt's name as clients see it (before any host prefix).
    pub name: String,
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is for: the doc comment before its first `# ` section.
    pub description: String,
    /// Its arguments, in declaration order.
    #[serde(default)]
    pub arguments: Vec<PromptArgument>,
    /// The service it belongs to; `None` for a free `#[prompt]` function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Whether it needs the caller (`UserInfo`).
    #[serde(default)]
    pub caller: CallerNeed,
    /// Passed through as `_meta`.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// The arguments that have a completion function.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completions: Vec<String>,
}

/// One argument of a prompt (MCP `PromptArgument`); values are strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptArgument {
    /// The argument's name.
    pub name: String,
    /// What it is, from the `# Arguments` section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether it must be given (a `String` parameter; `Option<String>` is optional).
    #[serde(default)]
    pub required: bool,
}

/// The tool index the host passes to `call` for everything that is not a tool call: `args` is then
/// a JSON [`CallEnvelope`] and the result a JSON [`EnvelopeOutcome`]. Plugins built before resources
/// and prompts existed never receive it (their manifests declare none).
pub const ENVELOPE_INDEX: u32 = u32::MAX;

/// What the host asks of a plugin through [`ENVELOPE_INDEX`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method")]
pub enum CallEnvelope {
    /// Read resource number `index` (for a template: with its `variables` filled from `uri`).
    #[serde(rename = "resources/read")]
    ReadResource {
        /// The resource's position in the manifest.
        index: u32,
        /// The URI read.
        uri: String,
        /// A template's variables, by name.
        #[serde(default)]
        variables: serde_json::Map<String, Value>,
    },
    /// Get prompt number `index` with `arguments`.
    #[serde(rename = "prompts/get")]
    GetPrompt {
        /// The prompt's position in the manifest.
        index: u32,
        /// Its arguments, by name (string values).
        #[serde(default)]
        arguments: serde_json::Map<String, Value>,
    },
    /// Complete `argument` of prompt or resource template number `index`.
    #[serde(rename = "completion/complete")]
    Complete {
        /// Whether `index` is a prompt or a resource.
        target: CompletionTarget,
        /// The prompt's or resource's position in the manifest.
        index: u32,
        /// The argument (or template variable) being completed.
        argument: String,
        /// What the user typed so far.
        value: String,
        /// Arguments already chosen, by name.
        #[serde(default)]
        context: serde_json::Map<String, Value>,
    },
}

/// What a completion is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CompletionTarget {
    /// A prompt argument.
    Prompt,
    /// A resource template variable.
    Resource,
}

/// The answer to a [`CallEnvelope`]: `{"ok": result}` or `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EnvelopeOutcome {
    /// The MCP result (`ReadResourceResult`, `GetPromptResult`, or a `completion` object).
    Ok(Value),
    /// Why there is none.
    Error(EnvelopeError),
}

/// Why a [`CallEnvelope`] produced no result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvelopeError {
    /// What kind of failure.
    pub kind: EnvelopeErrorKind,
    /// For humans.
    pub message: String,
}

/// The kinds of [`EnvelopeError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvelopeErrorKind {
    /// The resource does not exist (a template read found nothing).
    NotFound,
    /// The arguments are not acceptable (the function returned `Err`).
    Invalid,
    /// The function panicked or its answer could not be built.
    Failed,
}
