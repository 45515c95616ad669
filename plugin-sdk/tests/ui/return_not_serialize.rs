use mcp_plugin_sdk::{JsonSchema, tool};

/// `JsonSchema` but not `Serialize`.
#[derive(JsonSchema)]
#[schemars(crate = "mcp_plugin_sdk::schemars")]
pub struct Forecast {
    pub celsius: f64,
}

/// Returns a struct that cannot become JSON.
#[tool]
pub fn forecast() -> Forecast {
    Forecast { celsius: 21.0 }
}

/// Neither derive.
pub struct Bare;

/// Returns a struct with neither derive.
#[tool]
pub async fn bare() -> Bare {
    Bare
}

fn main() {}
