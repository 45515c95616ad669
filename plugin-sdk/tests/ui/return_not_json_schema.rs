use mcp_plugin_sdk::{Serialize, tool};

/// `Serialize` but not `JsonSchema`.
#[derive(Serialize)]
#[serde(crate = "mcp_plugin_sdk::serde")]
pub struct Forecast {
    pub celsius: f64,
}

/// Returns a struct without a schema.
#[tool]
pub fn forecast() -> Forecast {
    Forecast { celsius: 21.0 }
}

/// The same inside a `Result`.
#[tool]
pub fn maybe_forecast() -> Result<Forecast, String> {
    Ok(Forecast { celsius: 21.0 })
}

fn main() {}
