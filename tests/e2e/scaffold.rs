//! `mcp-host new`, as a plugin author uses it: scaffold a crate, run its tests (the SDK's test
//! kit), `cargo build --release` it, drop the library into a tool directory as it is, and find its
//! tool listed and callable by the host, in-process and by a client over stdio.
//!
//! Without `--sdk`, `new` depends on the SDK of the checkout it is run from (or that holds the
//! executable); outside any checkout, with the SDK not on crates.io, it refuses and says what to do
//! rather than write a dependency cargo cannot resolve.
//!
//! The release build uses a target directory shared with the other tests that build (the
//! dependencies are compiled once); the test build uses the workspace's, whose debug
//! dependencies are already there.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use mcp_host_tests::serve::{StdioServer, result_text};
use mcp_host_tests::{Layout, artifacts, row, shared_target, target_dir, text};
use serde_json::{Value, json};

fn cargo(dir: &Path, args: &[&str], target: &Path) -> Output {
    let out = mcp_host_tests::cargo()
        .current_dir(dir)
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_scaffolded_plugin_tests_builds_and_is_served_as_it_is_from_a_tool_directory() {
    let work = tempfile::tempdir().unwrap();
    let crate_dir = work.path().join("hello-tools");
    // Run from the checkout without `--sdk`: it builds on this checkout's SDK.
    let out = Command::new(&artifacts().host)
        .current_dir(mcp_host_tests::workspace_root())
        .args(["new", "hello-tools", "--path"])
        .arg(&crate_dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("cargo build --release"), "{said}");
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let sdk = artifacts_sdk();
    assert!(
        manifest.contains(&format!("path = \"{}\"", sdk.display())),
        "the SDK should be this checkout's:\n{manifest}"
    );
    // A second `new` into the same place refuses rather than overwrite.
    let again = Command::new(&artifacts().host)
        .args(["new", "hello-tools", "--path"])
        .arg(&crate_dir)
        .output()
        .unwrap();
    assert!(!again.status.success());

    // Its own tests pass (they use the SDK's test kit).
    let tested = cargo(&crate_dir, &["test", "--quiet"], &target_dir());
    let report = String::from_utf8_lossy(&tested.stdout);
    assert!(report.contains("3 passed"), "{report}");

    // `cargo build --release` makes the library; copied as it is into a tool directory, it serves.
    let release = shared_target("builds");
    cargo(&crate_dir, &["build", "--release", "--quiet"], &release);
    let library = format!(
        "{}hello_tools{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    let l = Layout::new();
    std::fs::copy(
        release.join("release").join(&library),
        l.dir("tools").join(&library),
    )
    .unwrap();
    let cfg =
        l.config("tool_dirs: [tools]\nplugins:\n  hello-tools:\n    config: {greeting: Hey}\n");

    let (rows, log) = l.list(&cfg);
    assert_eq!(row(&rows, "greet", &library)["status"], "active", "{log}");
    assert_eq!(row(&rows, "greet", &library)["service"], "Greeter");
    let report = l.check(&cfg, &l.root.path().join("tools").join(&library));
    assert_eq!(report["build"]["plugin"], "hello-tools");
    assert_eq!(
        report["manifest"]["tools"][0]["inputSchema"]["properties"]["excitement"]["maximum"],
        5
    );

    let called = l.run(
        &cfg,
        &[
            "call",
            "greet",
            "--args",
            r#"{"name": "Ada"}"#,
            "--user",
            "ana",
        ],
    );
    assert!(
        called.status.success(),
        "{}",
        String::from_utf8_lossy(&called.stderr)
    );
    let result: Value = serde_json::from_slice(&called.stdout).unwrap();
    assert_eq!(
        result["structuredContent"],
        json!({"text": "Hey, Ada!", "from": "ana"})
    );
    assert_eq!(
        serde_json::from_str::<Value>(text(&result)).unwrap(),
        result["structuredContent"]
    );

    // And a client gets it over stdio.
    let mut server = StdioServer::start(&cfg);
    let listed = server.call_modern(1, "tools/list", json!({}));
    assert_eq!(listed["result"]["tools"][0]["name"], "greet", "{listed}");
    let answer = server.call_modern(
        2,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "Bob", "excitement": 3}}),
    );
    assert!(result_text(&answer).contains("Hey, Bob!!!"), "{answer}");
}

/// Outside any checkout (the executable copied away, run from an empty directory), `new` without
/// `--sdk` writes nothing and says how to get an SDK (this version is not on crates.io); with
/// `--sdk` it depends on that directory.
#[test]
fn outside_a_checkout_new_says_what_to_do_or_takes_the_sdk_given() {
    let away = tempfile::tempdir().unwrap();
    let host = away.path().join("mcp-host");
    std::fs::copy(&artifacts().host, &host).unwrap();
    let work = tempfile::tempdir().unwrap();
    let out = Command::new(&host)
        .current_dir(work.path())
        .args(["new", "lonely-tools"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("is not published on crates.io")
            && said.contains("--sdk <checkout>/plugin-sdk"),
        "{said}"
    );
    assert!(
        !work.path().join("lonely-tools").exists(),
        "nothing written"
    );

    let out = Command::new(&host)
        .current_dir(work.path())
        .args(["new", "lonely-tools", "--sdk"])
        .arg(artifacts_sdk())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest =
        std::fs::read_to_string(work.path().join("lonely-tools").join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!("path = \"{}\"", artifacts_sdk().display())),
        "{manifest}"
    );
}

/// This checkout's plugin-sdk, as `mcp-host new` names it.
fn artifacts_sdk() -> std::path::PathBuf {
    std::fs::canonicalize(mcp_host_tests::workspace_root().join("plugin-sdk")).unwrap()
}
