//! mcp-host: serve a folder of compiled plugins as MCP tools.
//!
//! Data flows one way through the stages, each using only those below it: [`config`] →
//! [`telemetry`] → [`access`] → [`plugins`] (discovery, probe, loading, the backend seam) →
//! [`registry`] → [`exec`] (the call path) → [`store`] (tasks, sessions and the replica bus) →
//! [`host`] (snapshots, rescans, calls, change notification, the file watcher) → [`protocol`] →
//! [`transport`] (stdio, Streamable HTTP). A test (`stage_order`) reads every `crate::` path and
//! fails on one that points up the order. The `mcp-host` binary wires these together.

#![warn(missing_docs, unreachable_pub)]

pub mod access;
pub mod config;
pub mod exec;
pub mod host;
pub mod install;
pub mod plugins;
pub mod policy;
pub mod protocol;
pub mod registry;
pub mod store;
pub mod telemetry;
pub mod transport;

#[cfg(test)]
mod function_length;
#[cfg(test)]
mod stage_order;

pub use config::Config;
pub use host::{CallError, CallOptions, Host, HostOptions, RequestContext};
