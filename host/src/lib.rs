//! mcp-host: serve a folder of compiled plugins as MCP tools.
//!
//! Data flows one way: [`config`] → [`plugins`] (discovery, probe, loading) → [`registry`] →
//! [`exec`] (the call path) → [`protocol`] → [`transport`] (stdio, Streamable HTTP), with [`access`]
//! (who may call what) consulted by the transports and [`store`] (tasks, and legacy sessions in a
//! fleet, shared by replicas) by the protocol and the transports. [`host`] ties loading,
//! snapshots, execution and change notification together; [`telemetry`] (metrics, traces, the
//! audit log) watches the call path. The `mcp-host` binary wires these together.

#![warn(missing_docs, unreachable_pub)]

pub mod access;
pub mod config;
pub mod exec;
pub mod host;
pub mod plugins;
pub mod protocol;
pub mod registry;
pub mod store;
pub mod telemetry;
pub mod transport;

#[cfg(test)]
mod stage_order;

pub use config::Config;
pub use host::{CallError, CallOptions, Host, HostOptions};
