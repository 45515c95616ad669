//! The plugin backend seam: how a loaded plugin runs its tools, and how it reaches back into the
//! host. The in-process loader ([`super::in_process`]) implements it today; a backend that runs
//! plugins in supervised worker processes implements the same trait, and nothing above the plugin
//! layer (registry, execution, protocol) needs to know which one serves a tool.

use std::sync::Arc;

use mcp_plugin_sdk::wire::{BuildInfo, Manifest};

use crate::exec::CallState;

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

    /// Run the plugin's shutdown hook: the host retired this version and no call runs on it.
    fn shutdown(&self);
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
    ) -> Result<String, String>;

    /// Tell every listening client about a change (a list, or one resource's contents).
    fn announce(&self, change: Change);

    /// Plugin `plugin`'s own data directory (`<data_dir>/<plugin>`), created if needed.
    fn data_dir(&self, plugin: &str) -> Result<std::path::PathBuf, String>;
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
    /// Every list changed (e.g. an agent's view, which filters all of them).
    pub const ALL_LISTS: Change = Change::Lists {
        tools: true,
        resources: true,
        prompts: true,
    };
}
