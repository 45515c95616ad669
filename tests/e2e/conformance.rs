//! The official MCP conformance suite (`@modelcontextprotocol/conformance`) against `mcp-host serve`
//! with the conformance fixture plugin, for 2025-11-25 (suite 0.1.16) and 2026-07-28 (suite
//! 0.2.0-alpha.12). Only scenarios needing features mcp-host does not have are expected to fail; they
//! are listed, with reasons, in `tests/conformance/expected-*.yml`. A listed scenario that starts
//! passing fails the run too, so the baseline cannot go stale.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use mcp_host_tests::Layout;
use mcp_host_tests::clients::{conformance_runner, http_server};

fn run_suite(revision: &str) {
    let Some(runner) = conformance_runner() else {
        return;
    };
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (_server, url) = http_server(&cfg);
    let out = Command::new("bash")
        .arg(runner)
        .arg(&url)
        .arg(revision)
        .env("CONFORMANCE_OUT", l.root.path().join("results"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "conformance {revision} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn official_conformance_suite_passes_for_2025_11_25() {
    run_suite("2025-11-25");
}

#[test]
fn official_conformance_suite_passes_for_2026_07_28() {
    run_suite("2026-07-28");
}
