use mcp_plugin_sdk::{JsonSchema, prompt, tool};
use serde::Deserialize;

/// The arguments.
#[derive(Deserialize, JsonSchema)]
pub struct Query {
    /// What to find.
    pub text: String,
}

/// Another JSON parameter next to the struct.
///
/// # Arguments
/// * `limit` - How many.
#[tool]
pub fn with_another(#[args] query: Query, limit: u32) -> String {
    format!("{} {limit}", query.text)
}

/// Bounds belong on the struct's fields.
#[tool]
pub fn with_bounds(#[args] #[arg(min = 1)] query: Query) -> String {
    query.text
}

/// `#[args]` takes no options.
#[tool]
pub fn with_options(#[args(strict)] query: Query) -> String {
    query.text
}

/// A reference.
#[tool]
pub fn by_reference(#[args] query: &Query) -> String {
    query.text.clone()
}

/// Prompts take string arguments.
#[prompt]
pub fn in_a_prompt(#[args] query: Query) -> String {
    query.text
}

fn main() {}
