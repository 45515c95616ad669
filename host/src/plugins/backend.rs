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

use crate::plugins::call::CallState;

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
    ) -> Result<String, String>;

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

    /// Run the plugin's shutdown hook: the host retired this version and no call runs on it.
    fn shutdown(&self);

    /// A newer version of this backend serving different definitions over the same connection
    /// (an upstream server whose lists changed): a rescan puts it in this one's place.
    fn successor(&self) -> Option<Arc<dyn PluginBackend>> {
        None
    }
}

/// A call running outside the calling thread: the `CallToolResult` JSON, or why it could not run.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'static>>;

/// What a plugin can ask of the host while it runs, whatever backend runs it.
pub trait HostCallbacks: Send + Sync {
    /// Call tool `name` with JSON `args` on behalf of `parent` (the call making the request; `None`
    /// outside any call, e.g. from a service's constructor), blocking until it answers.
    fn call_nested(
        &self,
        parent: Option<&Arc<CallState>>,
        name: &str,
        args: &str,
    ) -> Result<String, String>;

    /// Tell every listening client about a change (a list, or one resource's contents).
    fn announce(&self, change: Change);

    /// Plugin `plugin`'s own data directory (`<data_dir>/<plugin>`), created if needed.
    fn data_dir(&self, plugin: &str) -> Result<std::path::PathBuf, String>;

    /// A plugin's health changed in a way that changes what is served (it was quarantined): the
    /// host rebuilds its tool set from the plugins it has and tells clients.
    fn plugin_health_changed(&self);

    /// What a backend serves changed (an upstream server's lists): the host rescans, so the
    /// backend can hand over its [`PluginBackend::successor`].
    fn rescan_needed(&self) {
        self.plugin_health_changed();
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

/// Answer a host-API request plugin `plugin` makes (`notify_*_changed`, `notify_resource_updated`,
/// `data_dir`), whichever backend runs it: the answer as JSON, or why not.
pub fn host_request(
    host: &dyn HostCallbacks,
    plugin: &str,
    method: &str,
    params: &str,
) -> Result<String, String> {
    let lists = |tools, resources, prompts| Change::Lists {
        tools,
        resources,
        prompts,
    };
    let change = match method {
        "notify_tools_changed" => lists(true, false, false),
        "notify_resources_changed" => lists(false, true, false),
        "notify_prompts_changed" => lists(false, false, true),
        "notify_resource_updated" => {
            let params: serde_json::Value = serde_json::from_str(params).unwrap_or_default();
            match params.get("uri").and_then(serde_json::Value::as_str) {
                Some(uri) => Change::ResourceUpdated(uri.into()),
                None => return Err("notify_resource_updated needs a \"uri\"".into()),
            }
        }
        "data_dir" => {
            return host
                .data_dir(plugin)
                .map(|dir| serde_json::json!(dir).to_string());
        }
        other => return Err(format!("unsupported host method: {other}")),
    };
    host.announce(change);
    Ok("null".into())
}
