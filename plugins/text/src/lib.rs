//! Placeholder: being written.
use mcp_plugin_sdk::{export_plugin, tool};

/// Placeholder tool.
#[tool]
pub fn placeholder_tool() -> &'static str {
    "placeholder"
}

export_plugin!(tools: [placeholder_tool]);
