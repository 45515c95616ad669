//! Interop with the official clients: the Python SDK (`mcp` 2.x, in 2026-07-28 and legacy mode) and the
//! TypeScript SDK (2025-11-25) list and call every packaged tool over real stdio pipes and real HTTP.
//!
//! The clients come from `.ci/install-clients.sh` (or `MCP_TEST_PYTHON` / `MCP_TEST_NODE`). Where they
//! are missing these tests skip with a message — unless `MCP_TEST_REQUIRE_CLIENTS` is set, as `.ci/run`
//! does, which turns a skip into a failure.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use mcp_host_tests::{Layout, artifacts, workspace_root};
use serde_json::Value;

const PACKAGED: &[&str] = &[
    "current_time",
    "convert_time",
    "list_time_zones",
    "time_between",
    "add_duration",
    "world_clock",
    "text_stats",
    "json_query",
    "json_format",
    "regex_match",
    "regex_replace",
    "hash_text",
    "base64_encode",
    "base64_decode",
    "hmac_sign",
    "hmac_verify",
];

fn require_or_skip(what: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    if found.is_none() {
        assert!(
            std::env::var_os("MCP_TEST_REQUIRE_CLIENTS").is_none(),
            "{what} is required (MCP_TEST_REQUIRE_CLIENTS is set) but missing: run .ci/install-clients.sh"
        );
        eprintln!("skipping: {what} not installed (run .ci/install-clients.sh)");
    }
    found
}

fn python() -> Option<PathBuf> {
    let candidate = std::env::var_os("MCP_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".ci/.tools/venv/bin/python"));
    let ok = Command::new(&candidate)
        .args(["-c", "import mcp"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    require_or_skip("the Python MCP SDK", ok.then_some(candidate))
}

fn node() -> Option<(PathBuf, PathBuf)> {
    let node = std::env::var_os("MCP_TEST_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".ci/.tools/bin/node"));
    let modules = workspace_root().join(".ci/.tools/tssdk/node_modules");
    let ok = node.exists() && modules.join("@modelcontextprotocol/sdk").exists();
    require_or_skip("Node with the TypeScript MCP SDK", ok.then_some(node)).map(|n| (n, modules))
}

/// The packaged plugins plus `fixture-basic` (echo, count), with the gated services enabled.
fn layout() -> (Layout, PathBuf) {
    let l = Layout::new();
    for p in ["mcp-time", "mcp-text", "fixture-basic"] {
        l.install("d", p, None);
    }
    let cfg = l.config(
        "tool_dirs: [d]\nplugins:\n  mcp-time: {config: {world_clock: [UTC, Asia/Tokyo]}}\n  mcp-text: {config: {hmac_key: k}}\n",
    );
    (l, cfg)
}

struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http_server(cfg: &std::path::Path) -> (Server, String) {
    use std::io::BufRead;
    let mut child = Command::new(&artifacts().host)
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
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

fn stdio_command(cfg: &std::path::Path) -> Vec<String> {
    vec![
        artifacts().host.display().to_string(),
        "--config".into(),
        cfg.display().to_string(),
        "serve".into(),
        "--stdio".into(),
    ]
}

fn run_json(mut cmd: Command) -> Value {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {}\nstdout: {stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("bad report ({e}): {stdout}"))
}

fn check_python_report(report: &Value, expected_version: &str) {
    assert_eq!(report["protocol_version"], expected_version, "{report}");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in PACKAGED {
        assert!(tools.contains(t), "{t} missing from {tools:?}");
        let call = &report["calls"][t];
        assert_eq!(call["is_error"], false, "{t}: {call}");
    }
    assert_eq!(report["calls"]["echo"]["text"], "grüße ✓");
    assert_eq!(report["calls"]["echo_bad_args"]["is_error"], true);
    let progress: Vec<f64> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_f64().unwrap())
        .collect();
    assert_eq!(progress, vec![1.0, 2.0, 3.0], "{report}");
}

fn python_client(mode: &str, target: &[String]) -> Option<Value> {
    let py = python()?;
    let mut cmd = Command::new(py);
    cmd.arg(workspace_root().join("tests/clients/python_client.py"))
        .arg(mode)
        .args(target);
    Some(run_json(cmd))
}

#[test]
fn python_sdk_calls_every_packaged_tool_over_stdio_in_2026_mode() {
    let (_l, cfg) = layout();
    if let Some(r) = python_client("2026-07-28", &stdio_command(&cfg)) {
        check_python_report(&r, "2026-07-28");
    }
}

#[test]
fn python_sdk_calls_every_packaged_tool_over_stdio_in_legacy_mode() {
    let (_l, cfg) = layout();
    if let Some(r) = python_client("legacy", &stdio_command(&cfg)) {
        check_python_report(&r, "2025-11-25");
    }
}

#[test]
fn python_sdk_calls_every_packaged_tool_over_http_in_2026_mode() {
    let (_l, cfg) = layout();
    let (_server, url) = http_server(&cfg);
    if let Some(r) = python_client("2026-07-28", &[url]) {
        check_python_report(&r, "2026-07-28");
    }
}

#[test]
fn python_sdk_calls_every_packaged_tool_over_http_in_legacy_mode() {
    let (_l, cfg) = layout();
    let (_server, url) = http_server(&cfg);
    if let Some(r) = python_client("legacy", &[url]) {
        check_python_report(&r, "2025-11-25");
    }
}

#[test]
fn python_sdk_in_auto_mode_discovers_and_picks_2026() {
    let (_l, cfg) = layout();
    let (_server, url) = http_server(&cfg);
    if let Some(r) = python_client("auto", &[url]) {
        check_python_report(&r, "2026-07-28");
    }
}

fn check_ts_report(report: &Value) {
    for t in ["current_time", "json_query", "hash_text", "echo", "count"] {
        assert_eq!(report["calls"][t]["is_error"], false, "{t}: {report}");
    }
    assert_eq!(report["calls"]["echo"]["text"], "grüße ✓");
    assert_eq!(report["progress"].as_array().unwrap().len(), 2, "{report}");
    let tools = report["tools"].as_array().unwrap();
    assert!(
        PACKAGED.iter().all(|t| tools.iter().any(|x| x == t)),
        "{report}"
    );
}

fn ts_client(target: &[String]) -> Option<Value> {
    let (node, modules) = node()?;
    let mut cmd = Command::new(node);
    cmd.arg(workspace_root().join("tests/clients/ts_client.mjs"))
        .args(target)
        .env("NODE_PATH", modules);
    Some(run_json(cmd))
}

#[test]
fn typescript_sdk_lists_and_calls_tools_over_stdio() {
    let (_l, cfg) = layout();
    if let Some(r) = ts_client(&stdio_command(&cfg)) {
        check_ts_report(&r);
    }
}

#[test]
fn typescript_sdk_lists_and_calls_tools_over_http() {
    let (_l, cfg) = layout();
    let (_server, url) = http_server(&cfg);
    if let Some(r) = ts_client(&[url]) {
        check_ts_report(&r);
    }
}
