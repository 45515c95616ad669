//! Transports: how MCP messages reach the [`crate::protocol`] engine — newline-delimited JSON-RPC
//! over stdio, and Streamable HTTP.

mod core;
pub mod http;
pub mod stdio;
pub mod stdout_guard;
