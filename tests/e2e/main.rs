//! The end-to-end tests: the real `mcp-host` binary and real plugins in real directories, over real
//! pipes and sockets. One test binary, a module per area; run one area with
//! `cargo test -p mcp-host-tests --test e2e <area>::`.

mod auth;
mod clients;
mod compat;
mod conformance;
mod conformance_reference;
mod console;
mod discovery;
mod docs;
mod first_run;
mod fleet;
mod hostile;
mod http;
mod import;
mod install;
mod isolation;
mod lazy;
mod oauth_fixtures;
mod operators;
mod policy;
mod reload;
mod scaffold;
mod sdk;
mod search;
mod stdio;
mod surface;
mod tasks;
mod trust;
mod upstream;
mod upstream_identity;
mod upstream_oauth;
mod upstream_oauth_gaps;
mod vault;
mod workers;
