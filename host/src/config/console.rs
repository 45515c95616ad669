//! The `console` section: the operator console and tool playground served in the browser.

use serde::{Deserialize, Serialize};

/// The operator console and tool playground (`/ui`), served by the HTTP transport.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleSettings {
    /// Serve the console: `true`, `false`, or unset for "only when `listen` is a loopback address".
    pub enabled: Option<bool>,
    /// Where it is served on the main listener (a path of its own, not under `http.path`).
    pub path: String,
    /// Users (verified user ids) who may act, not only look: accept a pinned definition that
    /// changed, give a quarantined plugin another chance, cancel anyone's task, and call tools as
    /// another configured user in the playground.
    pub admins: Vec<String>,
    /// Without authentication configured (no secrets, no JWT keys), everyone reaching the console
    /// on loopback is an admin. Off by default: the console is read-only then (the playground
    /// still calls tools as the anonymous caller).
    pub anonymous_admin: bool,
    /// Minutes a console login lasts.
    pub session_minutes: u64,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        ConsoleSettings {
            enabled: None,
            path: "/ui".to_owned(),
            admins: Vec::new(),
            anonymous_admin: false,
            session_minutes: 8 * 60,
        }
    }
}

impl ConsoleSettings {
    /// Whether the console is served when the host listens on `listen`.
    pub fn serves(&self, listen: &std::net::SocketAddr) -> bool {
        self.enabled.unwrap_or_else(|| listen.ip().is_loopback())
    }
}
