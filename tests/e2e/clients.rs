//! Interop with the official clients: the Python SDK (`mcp` 2.x, in 2026-07-28 and legacy mode) and the
//! TypeScript SDK (2025-11-25) list and call every packaged tool over real stdio pipes and real HTTP,
//! list and read resources and templates, get and complete prompts, and answer a tool's elicitation
//! and sampling requests (2026: input-required rounds; 2025: requests on the call's stream).
//!
//! The clients come from `.ci/install-clients.sh` (or `MCP_TEST_PYTHON` / `MCP_TEST_NODE`). Where they
//! are missing these tests skip with a message — unless `MCP_TEST_REQUIRE_CLIENTS` is set, as `.ci/run`
//! does, which turns a skip into a failure.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

use mcp_host_tests::clients::{http_server, node, python, stdio_command};
use mcp_host_tests::{Layout, workspace_root};
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

/// The packaged plugins plus `fixture-basic` (echo, count) and `fixture-conformance` (resources,
/// prompts, the tools that ask the client), with the gated services enabled.
fn layout() -> (Layout, PathBuf) {
    let l = Layout::new();
    for p in [
        "mcp-time",
        "mcp-text",
        "fixture-basic",
        "fixture-conformance",
    ] {
        l.install("d", p, None);
    }
    let cfg = l.config(
        "tool_dirs: [d]\nplugins:\n  mcp-time: {config: {world_clock: [UTC, Asia/Tokyo]}}\n  mcp-text: {config: {hmac_key: k}}\n",
    );
    (l, cfg)
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
    check_surface(report);
    let zone = &report["reads"]["time://zones/Asia/Tokyo"];
    assert!(
        zone["text"].as_str().unwrap().contains("Asia/Tokyo"),
        "{report}"
    );
    let zones = report["zone_completion"].as_array().unwrap();
    assert!(zones.iter().any(|z| z == "Europe/Paris"), "{report}");
    assert!(
        zones
            .iter()
            .all(|z| z.as_str().unwrap().starts_with("Europe/Pa")),
        "{report}"
    );
    assert!(
        report["calls"]["test_sampling"]["text"]
            .as_str()
            .unwrap()
            .contains("sampled answer to: capital of France?"),
        "{report}"
    );
    assert!(
        report["calls"]["test_elicitation"]["text"]
            .as_str()
            .unwrap()
            .contains("py-user"),
        "{report}"
    );
}

/// What both clients report about resources, prompts and completions.
fn check_surface(report: &Value) {
    let has = |key: &str, item: &str| {
        report[key]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == item))
    };
    for uri in ["time://zones", "test://static-text", "test://static-binary"] {
        assert!(has("resources", uri), "{uri} missing: {report}");
    }
    for t in ["time://zones/{+zone}", "test://template/{id}/data"] {
        assert!(has("templates", t), "{t} missing: {report}");
    }
    assert!(has("prompts", "test_prompt_with_arguments"), "{report}");
    let reads = &report["reads"];
    assert_eq!(
        reads["time://zones"]["mime"], "application/json",
        "{report}"
    );
    assert!(
        reads["time://zones"]["text"]
            .as_str()
            .unwrap()
            .contains("Africa/Abidjan"),
        "{report}"
    );
    assert_eq!(
        reads["test://static-text"]["text"],
        "This is the content of the static text resource."
    );
    assert_eq!(
        reads["test://template/123/data"]["uri"],
        "test://template/123/data"
    );
    assert!(
        reads["test://template/123/data"]["text"]
            .as_str()
            .unwrap()
            .contains("123")
    );
    assert_eq!(
        report["missing"]["data"]["uri"], "test://nonexistent",
        "{report}"
    );
    assert_eq!(
        report["prompt_text"],
        "Prompt with arguments: arg1='a', arg2='b'"
    );
    assert_eq!(
        report["completion"],
        serde_json::json!(["testValue1", "testValue2"])
    );
    assert_eq!(
        report["calls"]["test_sampling"]["is_error"], false,
        "{report}"
    );
    assert_eq!(
        report["calls"]["test_elicitation"]["is_error"], false,
        "{report}"
    );
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
fn python_sdk_uses_tools_resources_prompts_and_answers_questions_over_stdio_in_2026_mode() {
    let (_l, cfg) = layout();
    if let Some(r) = python_client("2026-07-28", &stdio_command(&cfg)) {
        check_python_report(&r, "2026-07-28");
        assert_eq!(r["missing"]["code"], -32602, "2026 resource-not-found: {r}");
    }
}

#[test]
fn python_sdk_uses_tools_resources_prompts_and_answers_questions_over_stdio_in_legacy_mode() {
    let (_l, cfg) = layout();
    if let Some(r) = python_client("legacy", &stdio_command(&cfg)) {
        check_python_report(&r, "2025-11-25");
        assert_eq!(
            r["missing"]["code"], -32002,
            "legacy resource-not-found: {r}"
        );
    }
}

#[test]
fn python_sdk_uses_tools_resources_prompts_and_answers_questions_over_http_in_2026_mode() {
    let (_l, cfg) = layout();
    let (_server, url) = http_server(&cfg);
    if let Some(r) = python_client("2026-07-28", &[url]) {
        check_python_report(&r, "2026-07-28");
    }
}

#[test]
fn python_sdk_uses_tools_resources_prompts_and_answers_questions_over_http_in_legacy_mode() {
    let (_l, cfg) = layout();
    let (_server, url) = http_server(&cfg);
    if let Some(r) = python_client("legacy", &[url]) {
        check_python_report(&r, "2025-11-25");
    }
}

#[test]
fn python_sdk_in_auto_mode_discovers_and_picks_2026_for_tools_resources_and_prompts() {
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
    check_surface(report);
    assert_eq!(
        report["missing"]["code"], -32002,
        "legacy resource-not-found: {report}"
    );
    assert!(
        report["calls"]["test_sampling"]["text"]
            .as_str()
            .unwrap()
            .contains("ts sampled: capital of France?"),
        "{report}"
    );
    assert!(
        report["calls"]["test_elicitation"]["text"]
            .as_str()
            .unwrap()
            .contains("ts-user"),
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
fn typescript_sdk_uses_tools_resources_prompts_and_answers_questions_over_stdio() {
    let (_l, cfg) = layout();
    if let Some(r) = ts_client(&stdio_command(&cfg)) {
        check_ts_report(&r);
    }
}

#[test]
fn typescript_sdk_uses_tools_resources_prompts_and_answers_questions_over_http() {
    let (_l, cfg) = layout();
    let (_server, url) = http_server(&cfg);
    if let Some(r) = ts_client(&[url]) {
        check_ts_report(&r);
    }
}

/// `mcp-inspector --cli <method args> -- <target>` as JSON.
fn inspector_cli(l: &Layout, args: &[&str], target: &[String]) -> Option<Value> {
    let bin = mcp_host_tests::clients::inspector()?;
    let mut cmd = Command::new(bin);
    cmd.arg("--cli").args(args).arg("--").args(target).env(
        "MCP_CATALOG_PATH",
        l.root.path().join("inspector-catalog.json"),
    );
    Some(run_json(cmd))
}

fn check_inspector(l: &Layout, target: &[String]) {
    let Some(list) = inspector_cli(l, &["--method", "tools/list"], target) else {
        return;
    };
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(PACKAGED.iter().all(|t| names.contains(t)), "{names:?}");
    for (tool, arg) in [
        ("current_time", "zone=Asia/Tokyo"),
        ("hash_text", "text=hello"),
        ("text_stats", "text=a b c"),
    ] {
        let r = inspector_cli(
            l,
            &[
                "--method",
                "tools/call",
                "--tool-name",
                tool,
                "--tool-arg",
                arg,
            ],
            target,
        )
        .unwrap();
        assert_ne!(r["isError"], true, "{tool}: {r}");
        assert!(r["structuredContent"].is_object(), "{tool}: {r}");
    }
}

#[test]
fn mcp_inspector_cli_lists_and_calls_packaged_tools_over_stdio() {
    let (l, cfg) = layout();
    check_inspector(&l, &stdio_command(&cfg));
}

#[test]
fn mcp_inspector_cli_lists_and_calls_packaged_tools_over_http() {
    let (l, cfg) = layout();
    let (_server, url) = http_server(&cfg);
    check_inspector(&l, &[url]);
}
