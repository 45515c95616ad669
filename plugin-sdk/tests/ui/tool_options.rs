use mcp_plugin_sdk::tool;

/// An option that does not exist.
#[tool(readonly)]
pub fn misspelt_option() -> &'static str {
    ""
}

/// A `name` that is not a string.
#[tool(name = 5)]
pub fn numeric_name() -> &'static str {
    ""
}

/// An `#[arg]` option that does not exist.
///
/// # Arguments
/// * `days` - How many days.
#[tool]
pub fn misspelt_arg(#[arg(minimum = 1)] days: u32) -> u32 {
    days
}

/// An `#[arg(header)]` that is not a string.
///
/// # Arguments
/// * `region` - The region.
#[tool]
pub fn numeric_header(#[arg(header = 5)] region: String) -> String {
    region
}

/// A task support level that does not exist.
#[tool(task = "always")]
pub fn unknown_task_level() -> &'static str {
    ""
}

/// `ask_first` without `task`.
#[tool(ask_first)]
pub fn ask_first_without_task() -> &'static str {
    ""
}

/// A task that promises to be quick.
#[tool(task, inline)]
pub fn inline_task() -> &'static str {
    ""
}

fn main() {}
