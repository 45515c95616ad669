//! The subcommands of the `mcp-host` binary, one module each; `main.rs` parses and dispatches.

pub(crate) mod config;
pub(crate) mod inspect;
pub(crate) mod install;
pub(crate) mod keygen;
pub(crate) mod new;
pub(crate) mod pin;
pub(crate) mod policy;
pub(crate) mod secret;
pub(crate) mod serve;
pub(crate) mod sign;
