//! The frozen binary interface between `mcp-host` and a plugin.
//!
//! Everything here crosses a `dlopen` boundary between two separately compiled Rust programs, so it is
//! built from [`abi_stable`] types whose layout is checked when the host loads a plugin. The ABI is
//! deliberately tiny: a plugin is four functions, the host is two small trait objects, and everything
//! with structure (the manifest, arguments, results, the caller) travels as JSON text. New capabilities
//! are new JSON fields or new `method` names for the `request` escape hatches, never a changed type.
//!
//! # The evolution rule
//!
//! Types in this module are never changed once released: not a field, not a method, not an order.
//! abi_stable refuses a plugin whose root module is missing a trailing field, so even an "additive"
//! change would strand every plugin already built. When an incompatible change is unavoidable:
//!
//! 1. add a new root module type (`PluginModV2`, exported under a new symbol by the SDK);
//! 2. the host tries `V2` first and falls back to [`PluginModV1`] on the same library header;
//! 3. [`ABI_VERSION`] names the newest root module the SDK exports.
//!
//! Plugins built against an older SDK keep loading into newer hosts for the whole life of a major
//! version. The [`BuildInfo`] fingerprint (SDK version, target triple) is checked at load so that a
//! plugin built for another platform is refused with a readable message instead of a layout dump.

// `#[sabi_trait]` generates the FFI vtables with `unsafe` code; this module is one of the two places
// (with the host's loader) where the project allows it.
#![allow(unsafe_code, non_local_definitions)]

use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    sabi_trait,
    sabi_types::{RRef, VersionStrings},
    std_types::{RBox, RResult, RStr, RString},
};
use serde::{Deserialize, Serialize};

/// The version of the root-module interface the SDK exports (see the evolution rule above).
pub const ABI_VERSION: u32 = 1;

/// The version of this SDK crate, recorded in every plugin's [`BuildInfo`].
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The target triple this SDK (and so the plugin or host linking it) was compiled for.
pub const TARGET: &str = env!("MCP_SDK_TARGET");

/// The root module every plugin exports (interface version 1, frozen).
///
/// Plugin authors never build this by hand: [`export_plugin!`](crate::export_plugin) does.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModV1Ref)))]
#[sabi(missing_field(panic))]
pub struct PluginModV1 {
    /// The build fingerprint as JSON ([`BuildInfo`]). Must not run plugin code beyond constants.
    pub build_info: extern "C" fn() -> RString,
    /// Initialise the plugin: construct its services, evaluate their `enabled()` hooks and return the
    /// manifest as JSON ([`crate::wire::Manifest`]). Called once per loaded image.
    pub init: extern "C" fn(host: HostApiBox) -> RResult<RString, RString>,
    /// Call tool number `tool` (its index in the manifest's `tools`) with JSON `args` and the caller as
    /// JSON (empty when there is none). Returns a `CallToolResult` as JSON; `Err` only when the call
    /// could not be dispatched at all.
    pub call: extern "C" fn(
        tool: u32,
        args: RStr<'_>,
        caller: RStr<'_>,
        ctx: CallContextRef<'_>,
    ) -> RResult<RString, RString>,
    /// Called once when the host retires this image (after its last call), so the plugin can stop
    /// threads and close files. The image itself stays mapped: libraries are never unloaded.
    #[sabi(last_prefix_field)]
    pub shutdown: extern "C" fn(),
}

impl RootModule for PluginModV1Ref {
    declare_root_module_statics! {PluginModV1Ref}
    const BASE_NAME: &'static str = "mcp_host_plugin";
    const NAME: &'static str = "mcp_host_plugin_v1";
    // The interface version, not the crate version: SDK releases that keep this module unchanged
    // stay loadable by each other. abi_stable requires the same major version from 1.0 on.
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("1.0.0");
}

/// What the host hands a plugin at `init` (frozen; extend through [`HostApiFfi::request`]).
#[sabi_trait]
pub trait HostApiFfi: Send + Sync {
    /// The plugin's own section of the host configuration, as JSON (`null` when absent).
    fn config(&self) -> RString;
    /// Write to the host's log: `level` is a [`crate::LogLevel`] number, `service` may be empty.
    fn log(&self, level: u8, service: RStr<'_>, message: RStr<'_>);
    /// Call another tool by name with JSON arguments; returns its `CallToolResult` as JSON, or an error
    /// text when it cannot be called. Inside a tool call the nested call inherits the caller.
    fn call_tool(&self, name: RStr<'_>, args: RStr<'_>) -> RResult<RString, RString>;
    /// Extension point: a host capability named by `method`, JSON in and out. Unknown methods answer
    /// `Err("unsupported host method: …")`, so a newer plugin can probe an older host.
    #[sabi(last_prefix_field)]
    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString>;
}

/// The owned host API object a plugin keeps for its lifetime.
pub type HostApiBox = HostApiFfi_TO<'static, RBox<()>>;

/// What the host hands each tool call (frozen; extend through [`CallContextFfi::request`]).
#[sabi_trait]
pub trait CallContextFfi {
    /// Whether the client cancelled the call or its deadline passed.
    fn is_cancelled(&self) -> bool;
    /// Report progress; `total` and `message` are optional (NaN / empty when absent).
    fn progress(&self, progress: f64, total: f64, message: RStr<'_>);
    /// Send a log message to the client that made this call (a [`crate::LogLevel`] number).
    fn log(&self, level: u8, message: RStr<'_>);
    /// Extension point for per-call capabilities (e.g. asking the client for input), JSON in and out.
    #[sabi(last_prefix_field)]
    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString>;
}

/// The borrowed call context passed to [`PluginModV1::call`].
pub type CallContextRef<'a> = CallContextFfi_TO<'a, RRef<'a, ()>>;

/// A plugin's build fingerprint, checked by the host before `init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildInfo {
    /// Root-module interface version ([`ABI_VERSION`]).
    pub abi: u32,
    /// SDK crate version the plugin was built with.
    pub sdk_version: String,
    /// Target triple the plugin was built for.
    pub target: String,
    /// The plugin's name (its crate name unless the export macro overrides it).
    pub plugin: String,
    /// The plugin's own version.
    pub plugin_version: String,
}

impl BuildInfo {
    /// The fingerprint of the code calling it: used by the host to describe itself.
    pub fn host() -> Self {
        BuildInfo {
            abi: ABI_VERSION,
            sdk_version: SDK_VERSION.to_owned(),
            target: TARGET.to_owned(),
            plugin: String::new(),
            plugin_version: String::new(),
        }
    }

    /// Why a plugin with this fingerprint cannot run in a host with fingerprint `host`, if it cannot.
    ///
    /// ```
    /// use mcp_plugin_sdk::wire::BuildInfo;
    /// let host = BuildInfo::host();
    /// let mut plugin = BuildInfo { plugin: "demo".into(), plugin_version: "1.0.0".into(), ..host.clone() };
    /// assert!(plugin.incompatibility(&host).is_none());
    /// plugin.target = "aarch64-apple-darwin".into();
    /// assert!(plugin.incompatibility(&host).unwrap().contains("aarch64-apple-darwin"));
    /// ```
    pub fn incompatibility(&self, host: &BuildInfo) -> Option<String> {
        if self.target != host.target {
            return Some(format!(
                "built for target {} but this host runs on {}",
                self.target, host.target
            ));
        }
        if self.abi > host.abi {
            return Some(format!(
                "built with plugin ABI v{} (SDK {}), this host speaks up to v{} (SDK {}): upgrade mcp-host",
                self.abi, self.sdk_version, host.abi, host.sdk_version
            ));
        }
        let major = |v: &str| -> Option<(u64, u64)> {
            let mut parts = v.split('.').map(|p| p.parse::<u64>().ok());
            Some((parts.next()??, parts.next()??))
        };
        match (major(&self.sdk_version), major(&host.sdk_version)) {
            (Some((pm, pn)), Some((hm, hn))) if pm != hm || (pm == 0 && pn != hn) => Some(format!(
                "built with SDK {} which is not compatible with this host's SDK {} \
                 (same major version required; on 0.x the same minor)",
                self.sdk_version, host.sdk_version
            )),
            (None, _) => Some(format!("unreadable SDK version {:?}", self.sdk_version)),
            _ => None,
        }
    }
}
