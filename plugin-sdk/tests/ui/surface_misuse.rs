use mcp_plugin_sdk::{prompt, resource, tool};

/// A resource without its URI.
#[resource]
pub fn no_uri() -> String {
    String::new()
}

/// A template variable without a parameter.
#[resource(uri = "x://items/{id}")]
pub fn missing_variable() -> String {
    String::new()
}

/// A parameter that is not a template variable.
#[resource(uri = "x://items")]
pub fn stray_parameter(id: String) -> String {
    id
}

/// A prompt argument that is not a string.
///
/// # Arguments
/// * `days` - How many days.
#[prompt]
pub fn numeric_argument(days: u32) -> String {
    days.to_string()
}

/// A prompt argument without documentation.
#[prompt]
pub fn undocumented_argument(topic: String) -> String {
    topic
}

/// Completion on a tool argument.
///
/// # Arguments
/// * `zone` - A zone.
#[tool]
pub fn completed_tool_argument(#[arg(complete = zones)] zone: String) -> String {
    zone
}

fn zones(_: &mcp_plugin_sdk::CompletionRequest) -> Vec<String> {
    Vec::new()
}

fn main() {}
