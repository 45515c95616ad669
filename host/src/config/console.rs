//! The `console` section: the operator console and tool playground served in the browser.

use serde::{Deserialize, Serialize};

/// The operator console and tool playground (`/ui`), served by the HTTP transport.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleSettings {
    /// Serve the console: `true`, `false`, or unset for "only when it listens on a loopback
    /// address" (`listen`, or `console.listen`).
    pub enabled: Option<bool>,
    /// Where it is served (a path of its own, not under `http.path`).
    pub path: String,
    /// Serve it on this address of its own instead of the main listener (e.g. `127.0.0.1:18081`);
    /// then it is on by default when this address is a loopback one.
    pub listen: Option<std::net::SocketAddr>,
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
            listen: None,
            admins: Vec::new(),
            anonymous_admin: false,
            session_minutes: 8 * 60,
        }
    }
}

impl ConsoleSettings {
    /// Whether the console is served when the host listens on `listen` (the console's own
    /// address, when it has one, decides instead).
    pub fn serves(&self, listen: &std::net::SocketAddr) -> bool {
        let address = self.listen.unwrap_or(*listen);
        self.enabled.unwrap_or_else(|| address.ip().is_loopback())
    }
}
