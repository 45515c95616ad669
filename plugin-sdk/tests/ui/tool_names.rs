use mcp_plugin_sdk::{service, tool};

/// A name with a dot, which clients refuse.
#[tool(name = "weather.today")]
pub fn dotted() -> &'static str {
    ""
}

/// An empty name.
#[tool(name = "")]
pub fn empty() -> &'static str {
    ""
}

/// A function name longer than 64 characters.
#[tool]
pub fn a_function_name_that_goes_on_and_on_well_past_the_sixty_four_characters_clients_take() -> &'static str {
    ""
}

/// A service.
#[derive(Default)]
pub struct Lights;

#[service]
impl Lights {
    /// A service tool named like a path.
    #[tool(name = "lights::on")]
    pub fn on(&self) -> &'static str {
        ""
    }
}

fn main() {}
