use mcp_plugin_sdk::service;

/// Options are not taken.
#[derive(Default)]
pub struct Named;

#[service(name = "other")]
impl Named {}

/// On a function.
#[service]
pub fn not_an_impl() {}

/// On a trait impl.
#[derive(Default)]
pub struct Traited;

#[service]
impl Clone for Traited {
    fn clone(&self) -> Self {
        Traited
    }
}

fn main() {}
