use mcp_plugin_sdk::tool;

/// Borrows its argument.
///
/// # Arguments
/// * `text` - The text.
#[tool]
pub fn borrowed(text: &str) -> usize {
    text.len()
}

/// Generic.
///
/// # Arguments
/// * `value` - Anything.
#[tool]
pub fn generic<T: ToString>(value: T) -> String {
    value.to_string()
}

/// A pattern instead of a name.
#[tool]
pub fn destructured((a, b): (u32, u32)) -> u32 {
    a + b
}

fn main() {}
