//! Locating the external MCP clients (Python SDK, Node + TypeScript SDK, the conformance suite) and
//! running `mcp-host serve` for them.
//!
//! The clients come from `.ci/install-clients.sh` (or `MCP_TEST_PYTHON` / `MCP_TEST_NODE`). Where one is
//! missing, a test skips with a message — unless `MCP_TEST_REQUIRE_CLIENTS` is set (`.ci/run` sets it),
//! which turns the skip into a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{artifacts, workspace_root};

/// `Some(found)`, or `None` after printing why the test skips (a failure when clients are required).
pub fn require_or_skip(what: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    if found.is_none() {
        assert!(
            std::env::var_os("MCP_TEST_REQUIRE_CLIENTS").is_none(),
            "{what} is required (MCP_TEST_REQUIRE_CLIENTS is set) but missing: run .ci/install-clients.sh"
        );
        eprintln!("skipping: {what} not installed (run .ci/install-clients.sh)");
    }
    found
}

/// Python with the `mcp` SDK.
pub fn python() -> Option<PathBuf> {
    python_with("mcp", "the Python MCP SDK")
}

/// The tests' Python (`MCP_TEST_PYTHON`, else `.ci/.tools/venv`) if it can import `module`, or a
/// skip naming `what` (a failure when clients are required).
pub fn python_with(module: &str, what: &str) -> Option<PathBuf> {
    let candidate = std::env::var_os("MCP_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".ci/.tools/venv/bin/python"));
    let ok = Command::new(&candidate)
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    require_or_skip(what, ok.then_some(candidate))
}

/// Node 22 and the `node_modules` holding the TypeScript SDK.
pub fn node() -> Option<(PathBuf, PathBuf)> {
    let node = std::env::var_os("MCP_TEST_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".ci/.tools/bin/node"));
    let modules = workspace_root().join(".ci/.tools/tssdk/node_modules");
    let ok = node.exists() && modules.join("@modelcontextprotocol/sdk").exists();
    require_or_skip("Node with the TypeScript MCP SDK", ok.then_some(node)).map(|n| (n, modules))
}

/// A `mcp-host serve` child process, killed on drop.
#[derive(Debug)]
pub struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `mcp-host serve --listen 127.0.0.1:0` on `cfg`; returns the process and its MCP URL.
pub fn http_server(cfg: &Path) -> (Server, String) {
    use std::io::BufRead;
    let mut child = Command::new(&artifacts().host)
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        // The default task store lives in the state directory: the test's own.
        .env("XDG_STATE_HOME", cfg.parent().unwrap())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let url = line
                .split("listening on ")
                .nth(1)
                .map(|u| u.trim().to_owned());
            let _ = tx.send((url, line));
        }
    });
    let mut log = Vec::new();
    let url = loop {
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok((Some(url), _)) => break url,
            Ok((None, line)) => log.push(line),
            Err(e) => panic!(
                "server did not report its address ({e}): {}",
                log.join("\n")
            ),
        }
    };
    (Server(child), url)
}

/// The command line of `mcp-host serve --stdio` on `cfg`.
pub fn stdio_command(cfg: &Path) -> Vec<String> {
    vec![
        // The default task store lives in the state directory: the test's own.
        "env".into(),
        format!("XDG_STATE_HOME={}", cfg.parent().unwrap().display()),
        artifacts().host.display().to_string(),
        "--config".into(),
        cfg.display().to_string(),
        "serve".into(),
        "--stdio".into(),
    ]
}

/// The conformance runner (`tests/conformance/run.sh`) when Node 22 and the suite are installed.
pub fn conformance_runner() -> Option<PathBuf> {
    let tools = workspace_root().join(".ci/.tools/bin");
    let ok = ["node", "conformance-2025-11-25", "conformance-2026-07-28"]
        .iter()
        .all(|b| tools.join(b).exists());
    require_or_skip(
        "the MCP conformance suite",
        ok.then(|| workspace_root().join("tests/conformance/run.sh")),
    )
}

/// The conformance suite's client-mode runner (`tests/conformance/run-client.sh`) when Node 22
/// and both suites are installed.
pub fn conformance_client_runner() -> Option<PathBuf> {
    conformance_runner().map(|_| workspace_root().join("tests/conformance/run-client.sh"))
}

/// A reference server of the conformance repository (github.com/modelcontextprotocol/conformance),
/// staged outside this repository: the directory environment variable `var` names, holding its
/// `examples/servers/typescript` files (`everything-server.ts`, `package.json`) with their
/// `node_modules` installed (`tsx` among them); `None` after a one-line skip message when `var`
/// is not set.
///
/// The one explicit exception to [`require_or_skip`]: these servers are on no package registry,
/// nothing of the conformance repository may be committed here, and CI cannot reach it, so an
/// unset variable skips even when `MCP_TEST_REQUIRE_CLIENTS` is set. A variable that names a
/// directory without the server fails the test (it was meant to run).
pub fn conformance_reference(var: &str, what: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os(var).map(PathBuf::from) else {
        eprintln!(
            "skipping: {var} is not set (it must name a directory holding the conformance \
             repository's {what} examples/servers/typescript: everything-server.ts and its \
             installed node_modules)"
        );
        return None;
    };
    for needed in ["everything-server.ts", "node_modules/.bin/tsx"] {
        assert!(
            dir.join(needed).exists(),
            "{var}={} has no {needed}: it must hold the conformance repository's {what} \
             examples/servers/typescript with its node_modules installed",
            dir.display()
        );
    }
    Some(dir)
}

/// The MCP Inspector's launcher (run with `--cli`).
pub fn inspector() -> Option<PathBuf> {
    let bin = workspace_root().join(".ci/.tools/bin/mcp-inspector");
    require_or_skip("the MCP Inspector", bin.exists().then_some(bin))
}

/// Run `tests/clients/<script>` with Python `py`, in `mode`, against `target` (a URL, or a
/// command serving MCP on stdio): the one JSON object it prints. Fails the test when the client
/// fails.
pub fn python_report(py: &Path, script: &str, mode: &str, target: &[String]) -> serde_json::Value {
    let out = Command::new(py)
        .arg(crate::workspace_root().join("tests/clients").join(script))
        .arg(mode)
        .args(target)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} {mode}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}
