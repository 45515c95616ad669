use mcp_plugin_sdk::service;

#[derive(Default)]
pub struct Undocumented;

#[service]
impl Undocumented {
    /// A tool.
    pub fn tool(&self) -> u32 {
        1
    }

    pub fn helper_without_skip(&self, text: &str) -> usize {
        text.len()
    }
}

#[derive(Default)]
pub struct BorrowingHelper;

#[service]
impl BorrowingHelper {
    /// Documented, but takes a reference: a helper that wants `#[tool(skip)]`.
    pub fn helper(&self, text: &str) -> usize {
        text.len()
    }
}

#[derive(Default)]
pub struct Mutable;

#[service]
impl Mutable {
    /// Mutates the service.
    pub fn bump(&mut self) -> u32 {
        1
    }
}

#[derive(Default)]
pub struct PrivateTool;

#[service]
impl PrivateTool {
    /// Private, but marked as a tool.
    #[tool]
    fn hidden(&self) -> u32 {
        1
    }
}

fn main() {}
