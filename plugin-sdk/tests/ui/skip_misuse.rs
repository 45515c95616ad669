use mcp_plugin_sdk::{service, tool};

/// `skip` on a free function.
#[tool(skip)]
pub fn free_helper() -> u32 {
    1
}

#[derive(Default)]
pub struct WithOptions;

#[service]
impl WithOptions {
    /// `skip` with another option.
    #[tool(skip, name = "renamed")]
    pub fn helper(&self) -> u32 {
        1
    }
}

#[derive(Default)]
pub struct Private;

#[service]
impl Private {
    #[tool(skip)]
    fn helper(&self) -> u32 {
        1
    }
}

#[derive(Default)]
pub struct Hook;

#[service]
impl Hook {
    /// The gate, marked as a tool.
    #[tool]
    pub fn enabled() -> bool {
        true
    }
}

#[derive(Default)]
pub struct Twice;

#[service]
impl Twice {
    /// Two attributes.
    #[tool(read_only)]
    #[tool(idempotent)]
    pub fn twice(&self) -> u32 {
        1
    }
}

fn main() {}
