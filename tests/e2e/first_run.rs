//! A new user's first run, as the README's first command does it on a fresh clone:
//! `cargo build --release && ./target/release/mcp-host serve`, with the default configuration.
//!
//! The checkout is a copy of this one's files (what `git ls-files` lists, uncommitted changes
//! included, nothing ignored) in a temporary directory; its `target` is a shared directory of the
//! workspace's target, so a second run reuses the first one's build. Before serving, the release
//! directory gets what a workspace build leaves beside the packaged plugins: a test fixture (the SDK's
//! proc-macro library is there anyway). The server must serve exactly the packaged plugins, log no
//! ERROR or WARN line, and keep its data in the data directory, not in the working directory.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use mcp_host_tests::serve::{HttpServer, result_text};
use mcp_host_tests::{artifacts, fresh_checkout, shared_target};

use serde_json::{Value, json};

fn library(name: &str) -> String {
    format!(
        "{}{name}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// `mcp-host args...` from the release build, run in `checkout` as a new user whose home is `home`:
/// no XDG directories, no `RUST_LOG`, no `MCP_*` variable of this environment.
fn as_new_user(checkout: &Path, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(checkout.join("target/release/mcp-host"));
    cmd.current_dir(checkout)
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("RUST_LOG");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MCP_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// A file copied into the shared release directory for the length of the test, then removed.
///
/// The place may hold cargo's own output: an uplifted library is a hard link to the one in
/// `deps/`, so copying over it would write the debug build into cargo's release artifact too, and
/// cargo, seeing its output newer than its sources, would keep serving it. That is how the serving
/// bench's instruction guard (built into the same directory) once measured the debug echo fixture
/// (45.4k instructions a stdio call instead of 21.4k). The link is removed first, and so is the
/// copy at the end.
struct Placed(std::path::PathBuf);

impl Placed {
    fn copy(from: &Path, to: &Path) -> Placed {
        match std::fs::remove_file(to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{}: {e}", to.display()),
        }
        std::fs::copy(from, to).unwrap();
        Placed(to.to_path_buf())
    }
}

impl Drop for Placed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `cargo build --release` in `checkout`, as the README says (no target override, no flags).
fn build_release(checkout: &Path) {
    // A user's shell has no target override nor any variable cargo sets for a test.
    let mut build = mcp_host_tests::cargo();
    build.current_dir(checkout).args(["build", "--release"]);
    let status = build.status().unwrap();
    assert!(status.success(), "cargo build --release failed");
}

#[test]
fn readme_first_command_serves_the_packaged_plugins_only_and_logs_no_error_or_warning() {
    let checkout = fresh_checkout(&shared_target("builds"));
    let root = checkout.path();
    build_release(root);
    let release = root.join("target/release");
    for packaged in ["mcp_time", "mcp_text", "mcp_series"] {
        assert!(
            release.join(library(packaged)).is_file(),
            "{packaged} not built"
        );
    }
    // What else a workspace build leaves in target/release: a test fixture (its `echo` tool must not
    // be served) next to the SDK's proc-macro library, which the release build itself puts there.
    let _fixture = Placed::copy(
        &artifacts().plugin("fixture-basic"),
        &release.join(library("fixture_basic")),
    );
    assert!(release.join(library("mcp_plugin_sdk_macros")).is_file());

    // A user's home: the data directory and the probe cache go below it.
    let home = tempfile::tempdir().unwrap();
    let server = HttpServer::spawn(as_new_user(
        root,
        home.path(),
        &["serve", "--listen", "127.0.0.1:0"],
    ));

    let listed = server.modern(1, "tools/list", json!({})).json();
    let names: BTreeSet<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let expected: BTreeSet<&str> = [
        // mcp-time
        "add_duration",
        "convert_time",
        "current_time",
        "list_time_zones",
        "time_between",
        "world_clock",
        // mcp-text (hmac_sign / hmac_verify stay off without a key)
        "base64_decode",
        "base64_encode",
        "hash_text",
        "json_format",
        "json_query",
        "regex_match",
        "regex_replace",
        "text_stats",
        // mcp-series
        "count_readings_above_goal",
        "delete_reading",
        "query_health_indicators",
        "query_readings",
        "record_reading",
    ]
    .into();
    assert_eq!(names, expected, "{listed:#}");

    let now = server.modern(
        2,
        "tools/call",
        json!({"name": "current_time", "arguments": {"zone": "UTC"}}),
    );
    let now: Value = now.json();
    assert_eq!(now["result"]["isError"], Value::Null, "{now}");
    assert!(result_text(&now).contains("\"zone\":\"UTC\""), "{now}");

    // The series database is made at the first series call, in the platform data directory, not
    // where the server was started: a call as the demo user (as the README shows) creates it.
    let called = as_new_user(
        root,
        home.path(),
        &[
            "call",
            "query_health_indicators",
            "--args",
            "{}",
            "--user",
            "demo",
        ],
    )
    .output()
    .unwrap();
    let printed = String::from_utf8_lossy(&called.stdout);
    assert!(
        called.status.success() && printed.contains("heart_rate"),
        "mcp-host call failed: {printed}\n{}",
        String::from_utf8_lossy(&called.stderr)
    );
    let database = home
        .path()
        .join(".local/share/mcp-host/mcp-series/series.db");
    if cfg!(all(unix, not(target_os = "macos"))) {
        assert!(database.is_file(), "{} missing", database.display());
    }
    assert!(
        !root.join("data").exists(),
        "data written into the checkout"
    );
    assert!(
        !root.join("series.db").exists(),
        "data written into the checkout"
    );

    let log = server.stderr();
    let noisy: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" ERROR ") || l.contains(" WARN "))
        .collect();
    assert!(
        noisy.is_empty(),
        "the first run logged:\n{}",
        noisy.join("\n")
    );
    assert!(log.contains("Serving 19 tools from 3 plugins"), "{log}");
}
