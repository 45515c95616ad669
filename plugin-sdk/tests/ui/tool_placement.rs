use mcp_plugin_sdk::tool;

/// Not a function.
#[tool]
pub struct NotAFunction;

/// An impl block wants `#[service]`.
#[derive(Default)]
pub struct Store;

#[tool]
impl Store {
    /// Count.
    pub fn count(&self) -> u32 {
        0
    }
}

/// A method outside a service.
pub struct Plain;

impl Plain {
    /// Count.
    #[tool]
    pub fn count(&self) -> u32 {
        0
    }
}

fn main() {}
