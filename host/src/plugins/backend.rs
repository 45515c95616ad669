//! The plugin backend seam: how a loaded plugin runs its tools, and how it reaches back into the
//! host. The in-process loader ([`super::in_process`]) runs a call on the calling thread; the
//! worker backend ([`super::worker`]) runs it in a supervised process and offers it as a future
//! ([`PluginBackend::call_async`]), so a call waiting on another process parks no host thread.
//! Nothing above the plugin layer (registry, execution, protocol) needs to know which one serves
//! a tool.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use mcp_plugin_sdk::wire::{BuildInfo, Manifest};
use serde::{Deserialize, Serialize};

use crate::plugins::call::CallState;
pub use crate::plugins::host_request::{
    DataDirError, HostRequest, HostRequestError, NestedCallError,
};

/// Why a backend could not run a call at all. A tool's own failure is not one of these: it is an
/// `Ok` result with `isError`; nor is a call that ran out of time or was cancelled (the executor
/// decides those), nor a worker that died during the call (its calls are answered with an
/// `isError` result naming the crash).
///
/// The executor shows it to the client as "the plugin could not run the tool: {error}". A new
/// backend (e.g. one forwarding to an upstream MCP server) maps its own failures onto these
/// variants, using [`PluginCallError::Plugin`] for whatever the far side reported as text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum PluginCallError {
    /// The plugin's entry point refused the call, with its own message (an unknown tool index,
    /// unreadable arguments, a panic caught at the ABI boundary).
    #[error("{0}")]
    Plugin(String),
    /// A worker was asked to run a call before its plugin was loaded.
    #[error("the plugin is not loaded yet")]
    NotLoadedYet,
    /// A plugin deferred to its first call could not be loaded then.
    #[error("plugin {plugin} could not be loaded: {reason}")]
    LoadFailed {
        /// The plugin.
        plugin: String,
        /// Why.
        reason: String,
    },
    /// The plugin's worker keeps crashing: its tools are withdrawn.
    #[error("plugin {plugin} is quarantined: {why}")]
    Quarantined {
        /// The plugin.
        plugin: String,
        /// Why it was quarantined.
        why: String,
    },
    /// The plugin version was unloaded (a rescan replaced or removed it).
    #[error("plugin {0} was unloaded")]
    Unloaded(String),
    /// The plugin's worker is restarting and was not back before the call's deadline.
    #[error("plugin {0} is restarting and did not come back in time")]
    RestartTimedOut(String),
}

/// A loaded plugin, whatever runs it.
pub trait PluginBackend: Send + Sync + std::fmt::Debug {
    /// The plugin's build fingerprint.
    fn build(&self) -> &BuildInfo;

    /// What the plugin exports (services, tools and their schemas).
    fn manifest(&self) -> &Manifest;

    /// The plugin's name.
    fn name(&self) -> &str {
        &self.manifest().plugin
    }

    /// Run tool number `index` with JSON `args` to completion, blocking the calling thread (a
    /// worker thread of the host's pool, or the thread of the call that nests this one). `call`
    /// is the call's state: cancellation, deadline, events, and what nested calls inherit.
    /// `Err` when the plugin could not run the call at all; a tool's own failure is an `Ok` result
    /// with `isError`.
    fn call_blocking(
        &self,
        index: u32,
        args: &str,
        call: &Arc<CallState>,
    ) -> Result<String, PluginCallError>;

    /// The call as a future, for a backend whose calls run elsewhere (another process): the
    /// executor prefers it to [`PluginBackend::call_blocking`] and drives it on its own task until
    /// it resolves, holding the call's permits, so a backend that ends a runaway call (by killing
    /// the process it runs in) frees them then. `None` (the default): run it with `call_blocking`.
    fn call_async(&self, index: u32, args: &str, call: &Arc<CallState>) -> Option<CallFuture> {
        let _ = (index, args, call);
        None
    }

    /// Whether a call can start at once. A plugin loaded at its first call is not ready until then
    /// (the executor runs even an `inline` tool on a pool thread while it is not).
    fn ready(&self) -> bool {
        true
    }

    /// Why its tools are withdrawn, when they are (a worker that keeps crashing is quarantined).
    fn quarantined(&self) -> Option<String> {
        None
    }

    /// How its connection to what serves it stands, for a backend that connects elsewhere (an
    /// upstream server): `None` for a plugin.
    fn connection(&self) -> Option<Connection> {
        None
    }

    /// Whether a read of a URI that nothing lists (and no listed template matches) may be
    /// offered to it: an upstream server that serves resources (unless its entry opted out);
    /// never a plugin, which declares every resource it serves.
    fn reads_unlisted_resources(&self) -> bool {
        false
    }

    /// Run the plugin's shutdown hook: the host retired this version and no call runs on it.
    fn shutdown(&self);

    /// A newer version of this backend serving different definitions over the same connection
    /// (an upstream server whose lists changed): a rescan puts it in this one's place.
    fn successor(&self) -> Option<Arc<dyn PluginBackend>> {
        None
    }
}

/// How an upstream server's connection stands (what `mcp-host list`, `check`, `/healthz` and the
/// console show), each state with the reason an operator needs, on one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Connection {
    /// Not connected yet: started (or retried) in the background.
    Connecting {
        /// When the first attempt started (milliseconds since the Unix epoch).
        since_ms: u64,
        /// Why the last attempt failed, when one did (it is being retried).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_failure: Option<String>,
    },
    /// Connected; its lists were read.
    Ready,
    /// It failed after it was ready, and is being restarted.
    Restarting {
        /// Why.
        reason: String,
    },
    /// Withdrawn after failing too often (or a storm): until the configuration changes or SIGHUP.
    Quarantined {
        /// Why.
        reason: String,
    },
    /// Its first connection failed and is not retried (a one-shot command: `list`, `check`,
    /// `call`, `pin`).
    Failed {
        /// Why.
        reason: String,
    },
    /// The host stopped it.
    Stopped,
}

impl Connection {
    /// The state's name: `connecting`, `ready`, `restarting`, `quarantined`, `failed`, `stopped`.
    pub fn state(&self) -> &'static str {
        match self {
            Connection::Connecting { .. } => "connecting",
            Connection::Ready => "ready",
            Connection::Restarting { .. } => "restarting",
            Connection::Quarantined { .. } => "quarantined",
            Connection::Failed { .. } => "failed",
            Connection::Stopped => "stopped",
        }
    }

    /// What it is and why, on one line: `connecting (since 2025-06-01T10:00:00Z, 12 s ago; last
    /// attempt: exited with status 3; last stderr: …)`, `failed: did not answer its handshake
    /// within 60 s`, `ready`.
    pub fn describe(&self) -> String {
        match (self, self.detail()) {
            (Connection::Connecting { .. }, Some(detail)) => format!("connecting ({detail})"),
            (_, Some(detail)) => format!("{}: {detail}", self.state()),
            (_, None) => self.state().to_owned(),
        }
    }

    /// Its detail: since when it is connecting (and why its last attempt failed), or why it
    /// restarts, is quarantined or failed; `None` when ready or stopped.
    pub fn detail(&self) -> Option<String> {
        match self {
            Connection::Connecting {
                since_ms,
                last_failure,
            } => {
                let now = unix_ms(std::time::SystemTime::now());
                let ago = now.saturating_sub(*since_ms) / 1000;
                let since =
                    jiff::Timestamp::from_second(i64::try_from(since_ms / 1000).unwrap_or(0))
                        .map(|t| t.to_string())
                        .unwrap_or_default();
                Some(match last_failure {
                    Some(why) => format!("since {since}, {ago} s ago; last attempt: {why}"),
                    None => format!("since {since}, {ago} s ago"),
                })
            }
            Connection::Restarting { reason }
            | Connection::Quarantined { reason }
            | Connection::Failed { reason } => Some(reason.clone()),
            Connection::Ready | Connection::Stopped => None,
        }
    }
}

/// `time` in milliseconds since the Unix epoch.
pub(crate) fn unix_ms(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A call running outside the calling thread: what it returned, or why it could not run.
pub type CallFuture =
    Pin<Box<dyn Future<Output = Result<Returned, PluginCallError>> + Send + 'static>>;

/// What a call returned (a `CallToolResult`, or an envelope's outcome): the JSON text a plugin
/// wrote, or JSON the backend already holds parsed (an upstream server's answer, read from its
/// pipe as JSON: not written out as text for the executor to read again).
#[derive(Debug, Clone, PartialEq)]
pub enum Returned {
    /// JSON text, not yet checked.
    Text(String),
    /// Parsed JSON.
    Json(serde_json::Value),
}

impl Returned {
    /// As JSON text.
    pub fn into_text(self) -> String {
        match self {
            Returned::Text(text) => text,
            Returned::Json(value) => value.to_string(),
        }
    }
}

/// What a plugin can ask of the host while it runs, whatever backend runs it.
pub trait HostCallbacks: Send + Sync {
    /// Call tool `name` with JSON `args` on behalf of `parent` (the call making the request; `None`
    /// outside any call, e.g. from a service's constructor), blocking until it answers.
    fn call_nested(
        &self,
        parent: Option<&Arc<CallState>>,
        name: &str,
        args: &str,
    ) -> Result<String, NestedCallError>;

    /// Tell every listening client about a change (a list, or one resource's contents).
    fn announce(&self, change: Change);

    /// Plugin `plugin`'s own data directory (`<data_dir>/<plugin>`), created if needed.
    fn data_dir(&self, plugin: &str) -> Result<std::path::PathBuf, DataDirError>;

    /// A plugin's health changed in a way that changes what is served (it was quarantined): the
    /// host rebuilds its tool set from the plugins it has and tells clients.
    fn plugin_health_changed(&self);

    /// What a backend serves changed (an upstream server's lists): the host rescans, so the
    /// backend can hand over its [`PluginBackend::successor`].
    fn rescan_needed(&self) {
        self.plugin_health_changed();
    }

    /// The access token of `call`'s user for credential provider `provider`, as JSON for plugin
    /// `plugin` (see `plugins::credential`); a host without users' credentials has none.
    fn credential(
        &self,
        _plugin: &str,
        _call: &Arc<CallState>,
        _provider: &str,
    ) -> Result<String, HostRequestError> {
        Err(HostRequestError::UnsupportedCallMethod(
            "credential/get".into(),
        ))
    }
}

/// A change clients may listen for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Some of the served lists changed.
    Lists {
        /// `tools/list` changed.
        tools: bool,
        /// `resources/list` or `resources/templates/list` changed.
        resources: bool,
        /// `prompts/list` changed.
        prompts: bool,
    },
    /// The contents of the resource with this URI changed.
    ResourceUpdated(Arc<str>),
}

impl Change {
    /// No list changed.
    pub const NONE: Change = Change::Lists {
        tools: false,
        resources: false,
        prompts: false,
    };

    /// Every list changed (e.g. an agent's view, which filters all of them).
    pub const ALL_LISTS: Change = Change::Lists {
        tools: true,
        resources: true,
        prompts: true,
    };
}

/// Answer `request` from plugin `plugin`, whichever backend runs it: the answer as JSON, or why
/// not. `call` is the call it is made in (the parent of a nested call; the call a call-context
/// request is about), `None` outside any call (e.g. a service's constructor) or when the call
/// already ended.
pub fn answer(
    host: &dyn HostCallbacks,
    plugin: &str,
    call: Option<&Arc<CallState>>,
    request: HostRequest,
) -> Result<String, HostRequestError> {
    let change = match request {
        HostRequest::CallTool { name, args } => {
            return Ok(host.call_nested(call, &name, &args)?);
        }
        HostRequest::DataDir => {
            return Ok(serde_json::json!(host.data_dir(plugin)?).to_string());
        }
        HostRequest::ListsChanged {
            tools,
            resources,
            prompts,
        } => Change::Lists {
            tools,
            resources,
            prompts,
        },
        HostRequest::ResourceUpdated { uri } => Change::ResourceUpdated(uri.into()),
        HostRequest::Credential { provider } => {
            return match call {
                Some(call) => host.credential(plugin, call, &provider),
                None => Err(HostRequestError::CallEnded {
                    method: "credential/get".into(),
                }),
            };
        }
        HostRequest::ClientCapabilities | HostRequest::StartTask | HostRequest::Ask { .. } => {
            return match call {
                Some(call) => call.answer(&request),
                None => Err(HostRequestError::CallEnded {
                    method: request.method().into(),
                }),
            };
        }
    };
    host.announce(change);
    Ok("null".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_says_what_it_is_and_why_on_one_line() {
        let since_ms = unix_ms(std::time::SystemTime::now()) - 12_000;
        let connecting = Connection::Connecting {
            since_ms,
            last_failure: Some("exited with status 3; last stderr: boom".into()),
        };
        let line = connecting.describe();
        assert!(line.starts_with("connecting (since 20"), "{line}");
        assert!(
            line.ends_with(" s ago; last attempt: exited with status 3; last stderr: boom)"),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
        let failed = Connection::Failed {
            reason: "did not answer its handshake within 60 s".into(),
        };
        assert_eq!(
            failed.describe(),
            "failed: did not answer its handshake within 60 s"
        );
        assert_eq!(Connection::Ready.describe(), "ready");
        assert_eq!(Connection::Ready.detail(), None);
        let json = serde_json::to_value(&failed).unwrap();
        assert_eq!(json["state"], "failed");
    }
}
