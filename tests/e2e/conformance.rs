//! The official MCP conformance suite (`@modelcontextprotocol/conformance`) against `mcp-host serve`
//! with the conformance fixture plugin, for 2025-11-25 (suite 0.1.16) and 2026-07-28 (suite
//! 0.2.0-alpha.12), and that suite's tasks extension scenarios against one server and through
//! nginx in front of three replicas sharing Redis (`tests/src/fleet.rs`); and the suite's client
//! mode with `mcp-host connect` as the client (`tests/conformance/run-client.sh`: every client
//! scenario of each revision's frozen requirement set, one at a time, and the extension ones).
//! Only scenarios needing features mcp-host does not have are expected to fail; they are listed,
//! with reasons, in `tests/conformance/expected-*.yml`. A listed scenario that starts passing
//! fails the run too, so the baseline cannot go stale.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use mcp_host_tests::clients::{conformance_client_runner, conformance_runner, http_server};
use mcp_host_tests::fleet::Fleet;
use mcp_host_tests::{Layout, artifacts};

/// Run `tests/conformance/run.sh URL REVISION`; fails the test when the suite does.
fn run(runner: &Path, url: &str, revision: &str, out: &Path) {
    let out = Command::new("bash")
        .arg(runner)
        .arg(url)
        .arg(revision)
        .env("CONFORMANCE_OUT", out)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "conformance {revision} against {url} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run_suite(revision: &str) {
    let Some(runner) = conformance_runner() else {
        return;
    };
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (_server, url) = http_server(&cfg);
    run(&runner, &url, revision, &l.root.path().join("results"));
}

#[test]
fn official_conformance_suite_passes_for_2025_11_25() {
    run_suite("2025-11-25");
}

#[test]
fn official_conformance_suite_passes_for_2026_07_28() {
    run_suite("2026-07-28");
}

#[test]
fn official_conformance_tasks_scenarios_pass_against_one_server() {
    run_suite("tasks");
}

#[test]
fn official_conformance_tasks_scenarios_pass_through_nginx_in_front_of_three_replicas_on_redis() {
    let Some(runner) = conformance_runner() else {
        return;
    };
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let Some(fleet) = Fleet::start(&l, 3) else {
        return;
    };
    run(
        &runner,
        &fleet.url(),
        "tasks",
        &l.root.path().join("results"),
    );
}

/// Run `tests/conformance/run-client.sh REVISION` with the host built for the tests as the
/// client; fails the test when the run does (an unlisted failure, or a listed scenario passing).
fn run_client_suite(revision: &str) {
    // One revision at a time: `sse-retry` times the client's reconnection (500 ms, -50/+200 ms),
    // which two runs side by side on a loaded machine could push out.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let Some(runner) = conformance_client_runner() else {
        return;
    };
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let results = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(&runner)
        .arg(revision)
        .env("MCP_HOST_BIN", &artifacts().host)
        .env("CONFORMANCE_OUT", results.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    eprintln!("{report}");
    assert!(
        out.status.success(),
        "conformance client {revision} failed:\n{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every required scenario ran (the list comes from the suite, so an empty one would pass).
    assert!(report.matches(" PASS ").count() >= 18, "{report}");
}

#[test]
fn official_conformance_client_suite_passes_for_2025_11_25() {
    run_client_suite("2025-11-25");
}

#[test]
fn official_conformance_client_suite_passes_for_2026_07_28() {
    run_client_suite("2026-07-28");
}
