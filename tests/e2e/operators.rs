//! What an operator sees of a running host: Prometheus metrics after a known sequence of calls
//! (exact counts, and the exposition read by the reference OpenMetrics parser), the audit log
//! (content, and never an argument value or a token), OpenTelemetry traces exported to a real
//! OTLP/HTTP receiver, JSON logs, `mcp-host config` with secrets redacted, `--version` and shell
//! completions.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use mcp_host_tests::clients::python_with;
use mcp_host_tests::serve::{
    HttpResponse, HttpServer, WAIT, header_refs, modern_headers, request, with_meta,
};
use mcp_host_tests::{Layout, artifacts, workspace_root};
use serde_json::{Value, json};

/// A personal secret the layouts accept (its SHA-256 is in the config), for user `ana`.
const SECRET: &str = "mcp_test-operators-secret-4f1c";

fn sha256_hex(text: &str) -> String {
    mcp_host::access::auth::hash_secret(text)
}

/// fixture-basic, fixture-faulty and fixture-garbage in `d`, a file that is not a library, auth
/// with one personal secret, and `extra` (YAML lines).
fn layout(extra: &str) -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("d", "fixture-faulty", None);
    l.install("d", "fixture-garbage", None);
    let junk = format!("junk.{}", std::env::consts::DLL_EXTENSION);
    std::fs::write(l.dir("d").join(junk), b"not a shared library").unwrap();
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nauth:\n  secrets:\n    - {{sha256: {}, user: ana}}\n{extra}",
        sha256_hex(SECRET)
    ));
    (l, cfg)
}

/// A 2026 `tools/call` with extra headers.
fn call(
    server: &HttpServer,
    id: u64,
    tool: &str,
    args: Value,
    extra: &[(&str, &str)],
) -> HttpResponse {
    let params = with_meta(json!({"name": tool, "arguments": args}));
    let headers = modern_headers("tools/call", Some(tool));
    let mut headers = header_refs(&headers);
    headers.extend_from_slice(extra);
    server.post(&headers, &request(id, "tools/call", params))
}

/// `GET /metrics` on `addr`, with `headers`.
fn scrape(addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> HttpResponse {
    mcp_host_tests::serve::HttpConn::connect(addr).request("GET", "/metrics", headers, b"")
}

/// The samples of an OpenMetrics text: `name{label="value",...}` (labels sorted) → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut labels: Vec<&str> = labels.split(',').filter(|l| !l.is_empty()).collect();
        labels.sort_unstable();
        out.insert(
            format!("{name}{{{}}}", labels.join(",")),
            value.parse().unwrap(),
        );
    }
    out
}

/// The value of one series (0 when absent), labels in any order.
fn sample(all: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    labels.sort_unstable();
    all.get(&format!("{name}{{{}}}", labels.join(",")))
        .copied()
        .unwrap_or(0.0)
}

/// Run the known sequence of requests the metrics and audit tests count.
fn known_sequence(server: &HttpServer) {
    for i in 0..3 {
        let ok = call(server, i, "echo", json!({"text": "hello"}), &[]);
        assert_eq!(ok.status, 200, "{ok:?}");
    }
    // Fails the schema: the plugin does not run.
    let invalid = call(server, 10, "echo", json!({}), &[]).json();
    assert_eq!(invalid["result"]["isError"], true, "{invalid}");
    // A wrapper: `shout` calls `echo` (a nested call, one deeper).
    let shouted = call(
        server,
        11,
        "shout",
        json!({"text": "nested secret value"}),
        &[],
    )
    .json();
    assert_eq!(
        shouted["result"]["content"][0]["text"],
        "NESTED SECRET VALUE"
    );
    // A tool that panics, one whose plugin returns garbage.
    let exploded = call(server, 12, "explode", json!({}), &[]).json();
    assert_eq!(exploded["result"]["isError"], true, "{exploded}");
    let garbage = call(server, 13, "returns_garbage", json!({}), &[]).json();
    assert_eq!(garbage["result"]["isError"], true, "{garbage}");
    // A tool that needs a caller, without one, then with one.
    assert_eq!(call(server, 14, "whoami", json!({}), &[]).status, 401);
    let bearer = format!("Bearer {SECRET}");
    let me = call(
        server,
        15,
        "whoami",
        json!({}),
        &[("Authorization", &bearer)],
    )
    .json();
    assert_eq!(me["result"]["structuredContent"]["user_id"], "ana", "{me}");
    // A bad token, twice.
    for id in [16, 17] {
        let refused = call(
            server,
            id,
            "echo",
            json!({"text": "x"}),
            &[("Authorization", "Bearer mcp_nope")],
        );
        assert_eq!(refused.status, 401);
    }
    // One legacy session.
    server.initialize("2025-11-25");
}

#[test]
fn metrics_count_a_known_sequence_of_calls_exactly() {
    let (_l, cfg) = layout("");
    let server = HttpServer::start(&cfg);
    let before = samples(&scrape(server.addr, &[]).text());
    assert_eq!(
        sample(
            &before,
            "mcp_tool_calls_total",
            &[
                ("tool", "echo"),
                ("plugin", "fixture-basic"),
                ("outcome", "ok")
            ]
        ),
        0.0
    );
    known_sequence(&server);

    let resp = scrape(server.addr, &[]);
    assert_eq!(resp.status, 200);
    assert!(
        resp.header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{resp:?}"
    );
    let text = resp.text();
    assert!(text.ends_with("# EOF\n"), "{text}");
    let m = samples(&text);
    let calls = |tool: &str, plugin: &str, outcome: &str| {
        sample(
            &m,
            "mcp_tool_calls_total",
            &[("tool", tool), ("plugin", plugin), ("outcome", outcome)],
        )
    };
    // 3 direct calls and the nested one from `shout`.
    assert_eq!(calls("echo", "fixture-basic", "ok"), 4.0, "{text}");
    assert_eq!(calls("echo", "fixture-basic", "invalid_arguments"), 1.0);
    assert_eq!(calls("shout", "fixture-basic", "ok"), 1.0);
    assert_eq!(calls("explode", "fixture-faulty", "tool_error"), 1.0);
    assert_eq!(calls("returns_garbage", "garbage", "plugin_failure"), 1.0);
    assert_eq!(calls("whoami", "fixture-basic", "caller_required"), 1.0);
    assert_eq!(calls("whoami", "fixture-basic", "ok"), 1.0);
    assert_eq!(calls("echo", "fixture-basic", "timeout"), 0.0);
    let duration = |tool: &str, suffix: &str| {
        sample(
            &m,
            &format!("mcp_tool_call_duration_seconds_{suffix}"),
            &[("tool", tool), ("plugin", "fixture-basic")],
        )
    };
    assert_eq!(duration("echo", "count"), 5.0);
    assert_eq!(duration("whoami", "count"), 2.0);
    assert!(duration("echo", "sum") >= 0.0);
    // `shout` and the second `whoami` queued (echo runs inline, and so never waits for a slot).
    let queued = sample(
        &m,
        "mcp_tool_call_queue_wait_seconds_count",
        &[("plugin", "fixture-basic")],
    );
    assert_eq!(queued, 2.0, "{text}");
    assert_eq!(
        sample(
            &m,
            "mcp_tool_calls_in_flight",
            &[("plugin", "fixture-basic")]
        ),
        0.0
    );
    assert_eq!(
        sample(&m, "mcp_auth_failures_total", &[("reason", "invalid")]),
        2.0
    );
    assert_eq!(sample(&m, "mcp_sessions", &[("transport", "http")]), 1.0);
    assert_eq!(sample(&m, "mcp_plugin_images_retained", &[]), 3.0);
    assert_eq!(
        sample(&m, "mcp_plugin_load_errors_total", &[("reason", "library")]),
        1.0,
        "{text}"
    );
    assert_eq!(sample(&m, "mcp_plugin_reloads_total", &[]), 0.0);
    assert!(
        text.contains("mcp_host_build_info{version=\"0.1.0\""),
        "{text}"
    );
}

#[test]
fn metrics_on_their_own_listener_require_the_configured_token() {
    let (_l, cfg) = layout("metrics_listen: 127.0.0.1:0\nmetrics_token: scrape-me\n");
    let server = HttpServer::start(&cfg);
    let log = server.stderr();
    let addr: std::net::SocketAddr = log
        .lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no metrics address in the log:\n{log}"))
        .parse()
        .unwrap();
    assert_eq!(scrape(addr, &[]).status, 401);
    assert_eq!(
        scrape(addr, &[("Authorization", "Bearer wrong")]).status,
        401
    );
    let ok = scrape(addr, &[("Authorization", "Bearer scrape-me")]);
    assert_eq!(ok.status, 200);
    let m = samples(&ok.text());
    assert_eq!(
        sample(
            &m,
            "mcp_auth_failures_total",
            &[("reason", "metrics_token")]
        ),
        2.0
    );
    // The main listener does not serve them.
    assert_eq!(
        scrape(server.addr, &[("Authorization", "Bearer scrape-me")]).status,
        404
    );
}

#[test]
fn the_metrics_exposition_parses_with_the_reference_openmetrics_parser() {
    let Some(python) = python_with("prometheus_client", "the Python prometheus-client package")
    else {
        return;
    };
    let (_l, cfg) = layout("");
    let server = HttpServer::start(&cfg);
    known_sequence(&server);
    let text = scrape(server.addr, &[]).text();
    // prometheus_client's strict OpenMetrics parser; prints every sample as JSON.
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
"#;
    let parsed = run_with_stdin(&python, &["-c", script], &text);
    let parsed: Vec<(String, BTreeMap<String, String>, f64)> =
        serde_json::from_str(&parsed).unwrap();
    let find = |name: &str, labels: &[(&str, &str)]| {
        parsed
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
    };
    assert_eq!(
        find(
            "mcp_tool_calls_total",
            &[("tool", "echo"), ("outcome", "ok")]
        ),
        Some(4.0)
    );
    assert_eq!(find("mcp_sessions", &[("transport", "http")]), Some(1.0));
    assert_eq!(
        find("mcp_tool_call_duration_seconds_count", &[("tool", "echo")]),
        Some(5.0)
    );
}

#[test]
fn the_audit_log_has_one_record_per_call_and_never_an_argument_value_or_a_token() {
    let (l, cfg) = layout("audit_log: audit.jsonl\n");
    let server = HttpServer::start(&cfg);
    known_sequence(&server);
    drop(server);
    let text = std::fs::read_to_string(l.root.path().join("audit.jsonl")).unwrap();
    assert!(
        !text.contains("hello"),
        "an argument value is in the audit log:\n{text}"
    );
    assert!(
        !text.to_lowercase().contains("nested secret value"),
        "{text}"
    );
    assert!(
        !text.contains(SECRET) && !text.contains("mcp_nope"),
        "a token is in the audit log"
    );
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 3 echo + invalid echo + shout + nested echo + explode + garbage + 2 whoami.
    assert_eq!(records.len(), 10, "{text}");
    let echo = &records[0];
    assert_eq!(echo["tool"], "echo");
    assert_eq!(echo["plugin"], "fixture-basic");
    assert_eq!(echo["plugin_version"], "0.1.0");
    assert!(
        echo["plugin_file"]
            .as_str()
            .unwrap()
            .ends_with(&format!("fixture_basic{}", std::env::consts::DLL_SUFFIX))
    );
    assert_eq!(echo["outcome"], "ok");
    assert_eq!(echo["caller"], Value::Null);
    assert_eq!(echo["argument_bytes"], r#"{"text":"hello"}"#.len());
    assert!(echo["result_bytes"].as_u64().unwrap() > 0);
    assert!(echo["duration_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(echo["depth"], 0);
    assert!(echo["time"].as_str().unwrap().ends_with('Z'), "{echo}");
    let outcomes: Vec<(&str, &str, u64)> = records
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
                r["depth"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("echo", "ok", 0),
            ("echo", "ok", 0),
            ("echo", "ok", 0),
            ("echo", "invalid_arguments", 0),
            // The nested call ends first.
            ("echo", "ok", 1),
            ("shout", "ok", 0),
            ("explode", "tool_error", 0),
            ("returns_garbage", "plugin_failure", 0),
            ("whoami", "caller_required", 0),
            ("whoami", "ok", 0),
        ]
    );
    assert_eq!(records[8]["result_bytes"], Value::Null);
    assert_eq!(records[9]["caller"], "ana");
    assert!(records[9]["queue_ms"].as_f64().is_some());
}

#[test]
fn json_logs_are_one_object_per_line() {
    let (l, cfg) = layout("log_format: json\n");
    let out = l.run(&cfg, &["list"]);
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let loaded = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Error loading plugin"))
        })
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(loaded["level"], "ERROR");
    assert!(loaded["timestamp"].is_string());
}

fn run_with_stdin(exe: &std::path::Path, args: &[&str], input: &str) -> String {
    use std::io::Write as _;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The OTLP receiver (`tests/otlp/receiver.py`), killed on drop; its spans arrive on a channel.
struct Receiver {
    child: std::process::Child,
    port: u16,
    spans: std::sync::mpsc::Receiver<Value>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    fn start(python: &std::path::Path) -> Receiver {
        let mut child = Command::new(python)
            .arg(workspace_root().join("tests/otlp/receiver.py"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let port = first
            .strip_prefix("listening on ")
            .unwrap()
            .parse()
            .unwrap();
        let (tx, spans) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str(&line).unwrap());
            }
        });
        Receiver { child, port, spans }
    }

    /// Spans until `done` says the set is complete (or the deadline passes: a failure).
    fn collect(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = std::time::Instant::now() + WAIT;
        let mut all = Vec::new();
        while !done(&all) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.spans.recv_timeout(left) {
                Ok(span) => all.push(span),
                Err(_) => panic!("the receiver did not get the expected spans: {all:#?}"),
            }
        }
        all
    }
}

#[test]
fn traces_follow_the_clients_traceparent_from_the_header_or_meta_to_a_real_otlp_receiver() {
    let Some(python) = python_with(
        "opentelemetry.proto",
        "the Python opentelemetry-proto package",
    ) else {
        return;
    };
    let receiver = Receiver::start(&python);
    let (_l, cfg) = layout(&format!(
        "traces:\n  otlp_endpoint: http://127.0.0.1:{}\n  service_name: mcp-host-e2e\n",
        receiver.port
    ));
    // Spans are exported in batches every 100 ms (the SDK's `OTEL_BSP_SCHEDULE_DELAY`), so they
    // are awaited while the server runs: a request's spans close only once its connection let go
    // of its response, which a loaded machine may not get to before a shutdown.
    let mut server = HttpServer::start_with_env(&cfg, &[("OTEL_BSP_SCHEDULE_DELAY", "100")]);
    let header_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let header_parent = "00f067aa0ba902b7";
    let traceparent = format!("00-{header_trace}-{header_parent}-01");
    let shouted = call(
        &server,
        1,
        "shout",
        json!({"text": "hi"}),
        &[("traceparent", &traceparent)],
    );
    assert_eq!(shouted.status, 200);
    let meta_trace = "0af7651916cd43dd8448eb211c80319c";
    let meta_parent = "b7ad6b7169203331";
    let params = with_meta(json!({
        "name": "echo",
        "arguments": {"text": "hi"},
        "_meta": {"traceparent": format!("00-{meta_trace}-{meta_parent}-01")},
    }));
    let headers = modern_headers("tools/call", Some("echo"));
    let echoed = server.post(&header_refs(&headers), &request(2, "tools/call", params));
    assert_eq!(echoed.status, 200);

    let count =
        |spans: &[Value], trace: &str| spans.iter().filter(|s| s["trace_id"] == trace).count();
    // shout: request, execute_tool, validate, queue, plugin, nested execute_tool (+ validate, plugin);
    // echo (inline): request, execute_tool, validate, plugin.
    let spans = receiver.collect(|s| count(s, header_trace) >= 8 && count(s, meta_trace) >= 4);
    server.child().terminate();
    assert!(
        server.child().wait_timeout(WAIT).is_some(),
        "the server did not stop"
    );
    let find = |trace: &str, name: &str| -> Vec<&Value> {
        spans
            .iter()
            .filter(|s| s["trace_id"] == trace && s["name"] == name)
            .collect()
    };
    let request = find(header_trace, "tools/call shout");
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    assert_eq!(request["parent_span_id"], header_parent);
    assert_eq!(request["kind"], 2, "a server span");
    assert_eq!(request["resource"]["service.name"], "mcp-host-e2e");
    assert_eq!(request["attributes"]["mcp.method.name"], "tools/call");
    let shout = find(header_trace, "execute_tool shout");
    assert_eq!(shout.len(), 1, "{spans:#?}");
    assert_eq!(shout[0]["parent_span_id"], request["span_id"]);
    assert_eq!(shout[0]["attributes"]["gen_ai.tool.name"], "shout");
    assert_eq!(shout[0]["attributes"]["mcp_host.plugin"], "fixture-basic");
    assert_eq!(shout[0]["attributes"]["mcp_host.outcome"], "ok");
    let phases: Vec<&str> = spans
        .iter()
        .filter(|s| s["parent_span_id"] == shout[0]["span_id"])
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for phase in ["validate", "queue", "plugin"] {
        assert!(phases.contains(&phase), "{phase} missing: {phases:?}");
    }
    let plugin = spans
        .iter()
        .find(|s| s["parent_span_id"] == shout[0]["span_id"] && s["name"] == "plugin")
        .unwrap();
    let nested = find(header_trace, "execute_tool echo");
    assert_eq!(nested.len(), 1, "{spans:#?}");
    assert_eq!(
        nested[0]["parent_span_id"], plugin["span_id"],
        "the nested call runs inside the plugin phase"
    );

    let echo_request = find(meta_trace, "tools/call echo");
    assert_eq!(echo_request.len(), 1, "{spans:#?}");
    assert_eq!(echo_request[0]["parent_span_id"], meta_parent);
    let echo = find(meta_trace, "execute_tool echo");
    assert_eq!(echo[0]["parent_span_id"], echo_request[0]["span_id"]);
}

#[test]
fn config_prints_the_effective_layered_configuration_with_secrets_redacted() {
    let l = Layout::new();
    l.dir("d");
    let cfg = l.config(
        "tool_dirs: [d]\nauth:\n  jwt:\n    hs256_secret: ${OPS_JWT_SECRET}\nmetrics_token: tok-tok-tok\n\
         plugins:\n  mcp-text:\n    config: {hmac_key: hmac-key-value, greeting: hello}\n",
    );
    let out = Command::new(&artifacts().host)
        .args(["--config", cfg.to_str().unwrap(), "config", "--json"])
        .env("OPS_JWT_SECRET", "jwt-secret-value")
        .env("MCP_HOST_LIMITS__CALL_TIMEOUT_SECS", "7")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for secret in ["jwt-secret-value", "tok-tok-tok", "hmac-key-value"] {
        assert!(!text.contains(secret), "{secret} printed:\n{text}");
    }
    let printed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(printed["auth"]["jwt"]["hs256_secret"], "<redacted>");
    assert_eq!(
        printed["plugins"]["mcp-text"]["config"]["greeting"],
        "hello"
    );
    assert_eq!(
        printed["limits"]["call_timeout_secs"], 7.0,
        "the environment layer"
    );
    assert_eq!(
        printed["tool_dirs"][0]["path"],
        l.root.path().join("d").to_str().unwrap()
    );
    assert_eq!(
        printed["listen"], "127.0.0.1:18080",
        "defaults are filled in"
    );

    // The YAML form is a configuration file the host loads.
    let yaml = Command::new(&artifacts().host)
        .args(["--config", cfg.to_str().unwrap(), "config"])
        .env("OPS_JWT_SECRET", "jwt-secret-value")
        .output()
        .unwrap();
    assert!(yaml.status.success());
    let again = l.root.path().join("printed.yaml");
    std::fs::write(&again, &yaml.stdout).unwrap();
    let reread = Command::new(&artifacts().host)
        .args(["--config", again.to_str().unwrap(), "config", "--json"])
        .output()
        .unwrap();
    assert!(
        reread.status.success(),
        "{}",
        String::from_utf8_lossy(&reread.stderr)
    );
    let reread: Value = serde_json::from_slice(&reread.stdout).unwrap();
    assert_eq!(reread["tool_dirs"], printed["tool_dirs"]);
    assert_eq!(reread["plugins"], printed["plugins"]);
}

/// B1: an upstream server's secrets — `server.env` tokens, `server.headers.Authorization` and
/// other headers that name a secret, a `--token` argument — are redacted in both forms of
/// `mcp-host config`, by the rule `mcp-host import` uses, and the rest of the entry is printed.
#[test]
fn config_redacts_upstream_secrets_in_yaml_and_json() {
    let l = Layout::new();
    let cfg = l.config(
        r#"tool_dirs:
  - name: github
    server:
      command: [npx, -y, "@modelcontextprotocol/server-github", --token, arg-token-value]
      env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${OPS_GH_TOKEN}", LOG_LEVEL: debug}
  - name: remote
    server:
      url: https://tools.example/mcp
      headers: {Authorization: "Bearer ${OPS_BEARER}", X-Api-Key: api-key-value, X-Team: blue}
"#,
    );
    let secrets = [
        "gh-token-value",
        "bearer-value",
        "api-key-value",
        "arg-token-value",
    ];
    for args in [&["config", "--json"][..], &["config"][..]] {
        let out = Command::new(&artifacts().host)
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .env("OPS_GH_TOKEN", "gh-token-value")
            .env("OPS_BEARER", "bearer-value")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for secret in secrets {
            assert!(
                !text.contains(secret),
                "{args:?}: {secret} printed:\n{text}"
            );
        }
        for kept in [
            "LOG_LEVEL",
            "debug",
            "X-Team",
            "blue",
            "server-github",
            "tools.example",
        ] {
            assert!(text.contains(kept), "{args:?}: {kept} not printed:\n{text}");
        }
    }
}

/// The host's first allocator arena is 64 MiB, set before the standard library's start-up
/// allocates (README, Performance); an operator's `MIMALLOC_ARENA_RESERVE` wins. mimalloc reports
/// its options on stderr with `MIMALLOC_VERBOSE`.
#[test]
fn the_allocator_reserves_a_small_first_arena_unless_the_operator_sets_one() {
    let reserve = |env: Option<&str>| {
        let mut cmd = Command::new(&artifacts().host);
        cmd.arg("--version").env("MIMALLOC_VERBOSE", "1");
        match env {
            Some(v) => cmd.env("MIMALLOC_ARENA_RESERVE", v),
            None => cmd.env_remove("MIMALLOC_ARENA_RESERVE"),
        };
        let out = cmd.output().unwrap();
        assert!(out.status.success());
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        log.lines()
            .find(|l| l.contains("option 'arena_reserve'"))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no arena_reserve option in mimalloc's report: {log}"))
    };
    assert!(reserve(None).ends_with(": 65536 KiB"), "{}", reserve(None));
    let operator = reserve(Some("256MiB"));
    assert!(operator.ends_with(": 262144 KiB"), "{operator}");
}

#[test]
fn version_prints_the_build_fingerprint_and_completions_name_every_command() {
    let out = Command::new(&artifacts().host)
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&out.stdout);
    let build = mcp_plugin_sdk::wire::BuildInfo::host();
    assert!(
        version.starts_with("mcp-host 0.1.0 (plugin ABI v1, plugin SDK "),
        "{version}"
    );
    assert!(
        version.contains(&build.sdk_version) && version.contains(&build.target),
        "{version}"
    );

    let out = Command::new(&artifacts().host)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout);
    for command in [
        "serve",
        "list",
        "check",
        "call",
        "secret",
        "new",
        "config",
        "completions",
    ] {
        assert!(
            script.contains(command),
            "{command} missing from the bash completions"
        );
    }
    assert!(
        script.contains("complete -F"),
        "not a bash completion script"
    );
}

// ---------------------------------------------------------------------------------------------
// The first hour (issue 36)

/// `mcp-host <args>` in `dir` with `config` (when given), the caller's `MCP_*` variables removed:
/// (exit code, stdout, stderr).
fn host_in(
    dir: &std::path::Path,
    config: Option<&std::path::Path>,
    args: &[&str],
) -> (i32, String, String) {
    host_without(dir, config, args, &[])
}

/// [`host_in`] without the variables `unset`.
fn host_without(
    dir: &std::path::Path,
    config: Option<&std::path::Path>,
    args: &[&str],
    unset: &[&str],
) -> (i32, String, String) {
    let mut cmd = Command::new(&artifacts().host);
    for var in unset {
        cmd.env_remove(var);
    }
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    cmd.args(args)
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .env("XDG_STATE_HOME", dir)
        .stdin(Stdio::null());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MCP_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `mcp-host --config <cfg> serve <args>` with the test's environment, as an [`HttpServer`].
fn serve_http(l: &Layout, cfg: &std::path::Path, args: &[&str]) -> HttpServer {
    let mut cmd = Command::new(&artifacts().host);
    cmd.arg("--config")
        .arg(cfg)
        .arg("serve")
        .args(args)
        .env("RUST_LOG", "info")
        .env("XDG_STATE_HOME", l.root.path());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MCP_") {
            cmd.env_remove(k);
        }
    }
    HttpServer::spawn(cmd)
}

#[test]
fn listen_takes_a_bare_port_or_localhost_and_a_wrong_value_shows_the_forms() {
    let l = Layout::new();
    l.dir("d");
    // `serve --listen localhost:PORT` and `--listen PORT` bind the loopback address.
    for form in ["localhost:{}", "{}"] {
        let port = free_port();
        let cfg = l.config("tool_dirs: [d]\nstore: memory\n");
        let server = serve_http(
            &l,
            &cfg,
            &["--listen", &form.replace("{}", &port.to_string())],
        );
        assert_eq!(
            server.addr,
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            "{form}"
        );
        let health = server.connect().request("GET", "/healthz", &[], b"");
        assert_eq!(health.status, 200, "{form}");
    }
    // The key `listen` takes the same forms, a YAML port number too.
    for (yaml, want) in [
        ("listen: 19205", "127.0.0.1:19205"),
        ("listen: localhost:19206", "127.0.0.1:19206"),
        ("listen: \"19207\"", "127.0.0.1:19207"),
        ("listen: \"[::1]:19208\"", "[::1]:19208"),
        ("metrics_listen: 19209", "127.0.0.1:19209"),
    ] {
        let cfg = l.config(&format!("tool_dirs: [d]\n{yaml}\n"));
        let (code, out, err) = host_in(l.root.path(), Some(&cfg), &["config", "--json"]);
        assert_eq!(code, 0, "{yaml}: {err}");
        let printed: Value = serde_json::from_str(&out).unwrap();
        let key = yaml.split(':').next().unwrap();
        assert_eq!(printed[key], want, "{yaml}");
    }
    // A wrong value says which forms are accepted, on the command line and in the file.
    let cfg = l.config("tool_dirs: [d]\n");
    let (code, _, err) = host_in(
        l.root.path(),
        Some(&cfg),
        &["serve", "--listen", "nowhere:80"],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("nowhere:80") && err.contains("localhost:PORT") && err.contains("[IPv6]:PORT"),
        "{err}"
    );
    let cfg = l.config("tool_dirs: [d]\nlisten: localhost\n");
    let (code, _, err) = host_in(l.root.path(), Some(&cfg), &["config"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("`listen`") && err.contains("localhost:PORT") && err.contains("mcp-host.yaml"),
        "{err}"
    );
}

#[test]
fn a_new_secrets_snippet_turns_auth_on_and_serve_says_what_authentication_is_in_force() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let (code, out, err) = host_in(l.root.path(), None, &["secret", "new", "--user", "ana"]);
    assert_eq!(code, 0, "{err}");
    let secret = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("mcp_") && !l.contains(' '))
        .unwrap_or_else(|| panic!("no secret in {out}"))
        .to_owned();
    // The snippet, pasted as it is, under the tool directories.
    let snippet = &out[out
        .find("auth:\n")
        .unwrap_or_else(|| panic!("no snippet: {out}"))..];
    let snippet: String = snippet
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(snippet.contains("  require_auth: true\n"), "{out}");
    let cfg = l.config(&format!("tool_dirs: [d]\nstore: memory\n{snippet}"));
    let server = serve_http(&l, &cfg, &["--listen", "127.0.0.1:0"]);
    let echo = |token: Option<&str>| {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let extra: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("Authorization", b)])
            .unwrap_or_default();
        call(&server, 1, "echo", json!({"text": "hi"}), &extra).status
    };
    assert_eq!(echo(None), 401, "anonymous calls are refused");
    assert_eq!(echo(Some(&secret)), 200);
    let log = server.stderr();
    assert!(
        log.contains("authentication: 1 personal secret; anonymous calls refused"),
        "{log}"
    );
    drop(server);

    // Secrets without `require_auth` (a second one for bob): anonymous calls still succeed, and
    // the log says so, counting the secrets.
    let open = snippet.replace("  require_auth: true\n", "");
    let bob = format!(
        "    - {{ sha256: \"{}\", user: bob }}\n",
        sha256_hex("mcp_bob-second-secret")
    );
    let cfg = l.config(&format!("tool_dirs: [d]\nstore: memory\n{open}{bob}"));
    let server = serve_http(&l, &cfg, &["--listen", "127.0.0.1:0"]);
    let log = server.stderr();
    assert!(
        log.contains("WARN")
            && log.contains("authentication: 2 personal secrets; anonymous calls allowed")
            && log.contains("auth.require_auth: true"),
        "{log}"
    );
}

#[test]
fn missing_tool_directories_an_empty_tool_set_and_a_stdio_without_caller_are_warned() {
    let l = Layout::new();
    l.dir("empty");
    let cfg = l.config("tool_dirs: [nope, empty]\nstore: memory\n");
    let (code, _, err) = host_without(
        l.root.path(),
        Some(&cfg),
        &["serve", "--stdio", "--no-watch"],
        &["USER"],
    );
    assert_eq!(code, 0, "{err}");
    let missing = l.root.path().join("nope");
    assert!(
        err.lines().any(|line| line.contains("WARN")
            && line.contains(&format!(
                "Tool directory {} does not exist",
                missing.display()
            ))
            && line.contains(&format!("config file {}", cfg.display()))
            && line.contains(&format!(
                "relative paths resolve against {}",
                l.root.path().display()
            ))),
        "{err}"
    );
    assert!(
        err.lines().any(|line| line.contains("WARN")
            && line.contains("No tools to serve")
            && line.contains(&l.root.path().join("empty").display().to_string())),
        "{err}"
    );
    assert!(
        err.contains("without a caller") && err.contains("stdio_user"),
        "{err}"
    );

    // From a directory without a configuration: the defaults, and where they were looked for.
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, _, err) = host_in(elsewhere.path(), None, &["list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("No tools to serve")
            && err.contains("no config file")
            && err.contains("config/mcp-host.yaml")
            && err.contains(&elsewhere.path().display().to_string()),
        "{err}"
    );
}

#[test]
fn a_plugin_authors_inner_loop_needs_no_configuration_and_check_speaks_plainly() {
    let l = Layout::new();
    let basic = l.install("d", "fixture-basic", None);
    let basic = basic.to_str().unwrap();
    let nowhere = tempfile::tempdir().unwrap();
    let here = nowhere.path();

    // `new` (run outside any checkout, by the checkout's executable) depends on the SDK of the
    // checkout the executable lies in, by path; its README calls the build.
    let krate = here.join("my-tools");
    let sdk = std::fs::canonicalize(workspace_root().join("plugin-sdk")).unwrap();
    let root = std::fs::canonicalize(workspace_root()).unwrap();
    let host_in_checkout = std::fs::canonicalize(&artifacts().host)
        .unwrap()
        .starts_with(&root);
    let mut args = vec!["new", "my-tools", "--path", krate.to_str().unwrap()];
    if !host_in_checkout {
        // A target directory outside the checkout: the executable is in none.
        args.extend(["--sdk", sdk.to_str().unwrap()]);
    }
    let (code, out, err) = host_in(here, None, &args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("call --plugin target/release/"), "{out}");
    let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!(
            "mcp-plugin-sdk = {{ path = \"{}\" }}",
            sdk.display()
        )),
        "{manifest}"
    );
    let readme = std::fs::read_to_string(krate.join("README.md")).unwrap();
    assert!(
        readme.contains("mcp-host call --plugin target/release/"),
        "{readme}"
    );

    // Without a configuration `call` finds nothing, and says how to call a build directly.
    let (code, _, err) = host_in(here, None, &["call", "echo", "--args", r#"{"text": "hi"}"#]);
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown tool") && err.contains("--plugin"),
        "{err}"
    );
    let (code, out, err) = host_in(
        here,
        None,
        &[
            "call",
            "--plugin",
            basic,
            "echo",
            "--args",
            r#"{"text": "hi"}"#,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["content"][0]["text"], "hi", "{result}");
    let (code, _, err) = host_in(here, None, &["call", "--plugin", basic, "ecoh"]);
    assert_eq!(code, 2);
    assert!(err.contains("Did you mean `echo`?"), "{err}");
    let (code, _, err) = host_in(here, None, &["call", "--plugin", basic, "whoami"]);
    assert_eq!(code, 2);
    assert!(err.contains("--user NAME"), "{err}");
    let (code, out, err) = host_in(
        here,
        None,
        &["call", "--plugin", basic, "whoami", "--user", "ada"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ada"), "{out}");

    // `check --json` is the full report; on a terminal the default is a short summary.
    let (code, out, err) = host_in(here, None, &["check", "--json", basic]);
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["manifest"]["plugin"], "fixture-basic");
    assert_eq!(report["refused"], json!([]));
    // util-linux `script` gives the command a terminal.
    let script = ["/usr/bin/script", "/bin/script"]
        .into_iter()
        .map(std::path::Path::new)
        .find(|p| p.exists());
    if script.is_none() {
        eprintln!("skipping the terminal summary: util-linux `script` is not installed");
    }
    if let Some(script) = script {
        let command = format!("{} check {basic}", artifacts().host.display());
        let out = Command::new(script)
            .args(["-qec", &command, "/dev/null"])
            .current_dir(here)
            .output()
            .unwrap();
        let summary = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{summary}");
        assert!(
            summary.contains("plugin fixture-basic 0.1.0")
                && summary.contains("9 tools:")
                && summary.contains("echo")
                && summary.contains("--json")
                && !summary.contains("inputSchema"),
            "{summary}"
        );
        assert!(summary.lines().count() < 40, "{summary}");
    }

    // A plugin with a name the registry refuses fails its check, naming it.
    let faulty = l.install("d", "fixture-faulty", None);
    let (code, _, err) = host_in(here, None, &["check", "--json", faulty.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("would not serve 1 of its names")
            && err.contains("tool bad.name: invalid name"),
        "{err}"
    );
}

#[test]
fn error_messages_lead_with_what_to_do_and_say_each_thing_once() {
    let l = Layout::new();
    let here = l.root.path();
    // A file that is not there is not a copy problem.
    let (code, _, err) = host_in(here, None, &["check", "libnothere.so"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("libnothere.so: cannot read the plugin file")
            && !err.contains("runtime directory"),
        "{err}"
    );
    // A missing config file: the OS error once.
    let (code, _, err) = host_in(here, Some(&here.join("nope.yaml")), &["list"]);
    assert_eq!(code, 2);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    // A library that is not a plugin: the hint first, no NUL byte, the symbol once.
    let lib = l.dir("d").join(format!(
        "{}notaplugin.{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_EXTENSION
    ));
    let some_library = std::fs::read_dir(mcp_host_tests::target_dir().join("debug").join("deps"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.extension()
                .is_some_and(|e| e == std::env::consts::DLL_EXTENSION)
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains("async_trait"))
        });
    if let Some(library) = some_library {
        std::fs::copy(library, &lib).unwrap();
        let (code, _, err) = host_in(here, None, &["check", lib.to_str().unwrap()]);
        assert_eq!(code, 1);
        assert!(!err.contains('\0'), "{err:?}");
        assert!(
            err.contains(
                "not built with mcp-plugin-sdk: end the crate's lib.rs with `export_plugin!()`"
            ),
            "{err}"
        );
        assert_eq!(err.matches("_1as_0lib_1header").count(), 1, "{err}");
    }
    // An ABI mismatch says which SDK to rebuild against.
    let mismatch = l.install("d", "fixture-abi-mismatch", None);
    let (code, _, err) = host_in(here, None, &["check", mismatch.to_str().unwrap()]);
    assert_eq!(code, 1);
    let sdk = mcp_plugin_sdk::wire::BuildInfo::host().sdk_version;
    assert!(
        err.contains(&format!("rebuild the plugin against mcp-plugin-sdk {sdk}"))
            && !err.contains("Error:"),
        "{err}"
    );
    // Seconds are seconds; an unknown key or tool gets the near one.
    let cfg = l.config("limits: {call_timeout_secs: 5s}\n");
    let (_, _, err) = host_in(here, Some(&cfg), &["config"]);
    assert!(err.contains("expected a number of seconds"), "{err}");
    let cfg = l.config("limits: {max_call_dept: 3}\n");
    let (_, _, err) = host_in(here, Some(&cfg), &["config"]);
    assert!(
        err.contains("unknown field `max_call_dept` (did you mean `max_call_depth`?)"),
        "{err}"
    );
}

#[test]
fn a_reload_that_turns_a_service_on_counts_the_tools_it_adds() {
    let l = Layout::new();
    l.install("d", "mcp-text", None);
    let cfg = l.config("tool_dirs: [d]\nstore: memory\n");
    let server = serve_http(&l, &cfg, &["--listen", "127.0.0.1:0"]);
    // mcp-text's signing service is on once it has a key.
    l.config("tool_dirs: [d]\nstore: memory\nplugins:\n  mcp-text:\n    config: {hmac_key: k3y}\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let line = loop {
        let log = server.stderr();
        if let Some(line) = log
            .lines()
            .find(|l| l.contains("Reloaded plugin") && l.contains("mcp_text"))
        {
            break line.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no reload:\n{log}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let added: usize = line
        .split(": +")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(added > 0, "{line}");
}

#[test]
fn an_overridden_tool_is_warned_once_not_at_every_rescan() {
    let l = Layout::new();
    l.install("a", "fixture-basic", None);
    l.install("b", "fixture-override", None);
    let cfg = l.config("tool_dirs: [a, b]\nstore: memory\nload_on_first_call: false\n");
    let mut cmd = Command::new(&artifacts().host);
    cmd.arg("--config")
        .arg(&cfg)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info,mcp_host::host::watch=debug")
        .env("XDG_STATE_HOME", l.root.path());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MCP_") {
            cmd.env_remove(k);
        }
    }
    let mut server = HttpServer::spawn(cmd);
    let rescans = |log: &str| log.lines().filter(|l| l.contains("rescan: ")).count();
    let wait = |server: &HttpServer, n: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while rescans(&server.stderr()) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "no rescan #{n}:\n{}",
                server.stderr()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    wait(&server, 1);
    let hup = Command::new("kill")
        .args(["-HUP", &server.child().id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait(&server, 2);
    let log = server.stderr();
    let warned = log
        .lines()
        .filter(|l| {
            l.contains("WARN") && l.contains("Tool echo from") && l.contains("overridden by")
        })
        .count();
    assert_eq!(warned, 1, "{log}");
}

#[test]
fn an_upstream_call_carries_the_hosts_own_span_as_its_traceparent_when_spans_are_exported() {
    let Some(python) = python_with(
        "opentelemetry.proto",
        "the Python opentelemetry-proto package",
    ) else {
        return;
    };
    let Some(py) = mcp_host_tests::clients::python() else {
        return;
    };
    let receiver = Receiver::start(&python);
    let l = Layout::new();
    let cfg = l.config(&format!(
        "traces:\n  otlp_endpoint: http://127.0.0.1:{}\n  service_name: mcp-host-e2e\n\
         tool_dirs:\n  - server: {{command: [{:?}, {:?}]}}\n    name: py\n    prefix: py_\n",
        receiver.port,
        py.to_string_lossy(),
        workspace_root()
            .join("tests/fixtures/upstream/server.py")
            .to_string_lossy()
    ));
    let mut server = mcp_host_tests::serve::StdioServer::start_with(
        &cfg,
        &[],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let client_span = "b7ad6b7169203331";
    let resp = server.call_modern(
        1,
        "tools/call",
        json!({"name": "py_trace", "arguments": {},
               "_meta": {"traceparent": format!("00-{trace}-{client_span}-01")}}),
    );
    let seen: Value = serde_json::from_str(
        resp["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{resp}")),
    )
    .unwrap();
    let parent = seen["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("{seen}"));
    let parts: Vec<&str> = parent.split('-').collect();
    assert_eq!(parts.len(), 4, "{parent}");
    assert_eq!(parts[1], trace, "the client's trace goes on: {parent}");
    assert_ne!(
        parts[2], client_span,
        "under the host's span, not the client's: {parent}"
    );
    // That span is one the host exported, in the client's trace.
    let spans = receiver.collect(|s| s.iter().any(|s| s["span_id"] == parts[2]));
    let host_span = spans.iter().find(|s| s["span_id"] == parts[2]).unwrap();
    assert_eq!(host_span["trace_id"], trace, "{host_span}");
    assert_eq!(host_span["name"], "execute_tool py_trace", "{host_span}");
}
