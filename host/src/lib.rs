//! mcp-host: serve a folder of compiled plugins as MCP tools.
//!
//! Data flows one way: [`config`] → [`discovery`] (+ [`probe`], [`plugin`]) → [`registry`] →
//! [`host`] (the call path) → [`protocol`] → [`transport`] (stdio, Streamable HTTP). The `mcp-host` binary wires these together;
//! everything here is usable as a library.

pub mod agents;
pub mod auth;
pub mod config;
pub mod discovery;
pub mod executor;
pub mod host;
pub mod host_api;
pub mod plugin;
pub mod probe;
pub mod protocol;
pub mod registry;
pub mod stdout_guard;
pub mod transport;
pub mod watch;

pub use config::Config;
pub use host::{CallError, CallOptions, Host, HostOptions};
