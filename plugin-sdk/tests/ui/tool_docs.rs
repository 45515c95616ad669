use mcp_plugin_sdk::tool;

#[tool]
pub fn undocumented() -> String {
    String::new()
}

/// Documented, but not its second parameter.
///
/// # Arguments
/// * `city` - The city.
#[tool]
pub fn half_documented(city: String, days: u32) -> String {
    format!("{city} {days}")
}

fn main() {}
