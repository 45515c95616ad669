use mcp_plugin_sdk::{export_plugin, tool};

/// Say hello.
#[tool]
pub fn hello() -> &'static str {
    "hello"
}

export_plugin!(load: lazily, tools: [hello]);

fn main() {}
