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
        let mut tool = serde_json::json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        });
        if let Some(title) = &self.title {
            tool["title"] = serde_json::json!(title);
        }
        if let Some(output) = &self.output_schema {
            tool["outputSchema"] = output.clone();
        }
        if !self.annotations.is_empty()
            && let Ok(a) = serde_json::to_value(&self.annotations)
        {
            tool["annotations"] = a;
        }
        if let Some(meta) = &self.meta {
            tool["_meta"] = meta.clone();
        }
        tool
    }
}

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
