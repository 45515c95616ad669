//! Upstream MCP servers served through the host, against real servers: a FastMCP server on the
//! official Python SDK (`tests/fixtures/upstream/server.py`, over stdio and Streamable HTTP) and
//! the npm servers `@modelcontextprotocol/server-everything` and `server-filesystem`. Tools,
//! resources and prompts go through with prefixes; the filesystem server runs sandboxed; a killed
//! upstream is restarted, a hanging call ends at its deadline, a changed definition is held under
//! pinning, entries override each other in list order, agents and tool search see upstream tools,
//! resources an upstream serves but does not list are read from the upstreams in list order
//! (under agents' views, the call policy and the entry's opt-out), and the official Python client
//! drives the aggregate.
//!
//! The servers come from `.ci/install-clients.sh`; where they are missing these tests skip with a
//! message, unless `MCP_TEST_REQUIRE_CLIENTS` is set. `serve` connects upstreams in the
//! background: each test waits until the tools it uses are served (`wait_for_tools`).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mcp_host_tests::clients::{python, require_or_skip};
use mcp_host_tests::serve::{START, StdioServer, WAIT, request, with_meta};
use mcp_host_tests::{Layout, workspace_root};
use serde_json::{Value, json};

/// The Python upstream's script.
fn script() -> PathBuf {
    workspace_root().join("tests/fixtures/upstream/server.py")
}

/// The installed npm server `name`'s entry point, run with the machine's `node`.
fn npm_server(name: &str) -> Option<PathBuf> {
    let entry = workspace_root().join(format!(
        ".ci/.tools/upstreams/node_modules/@modelcontextprotocol/{name}/dist/index.js"
    ));
    let node = Command::new("node").arg("--version").output();
    let ok = entry.is_file() && node.is_ok_and(|o| o.status.success());
    require_or_skip(
        &format!("the npm MCP server {name} (and node)"),
        ok.then_some(entry),
    )
}

/// A YAML flow list of strings.
fn argv(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The `tool_dirs` entry of the Python upstream over stdio.
fn py_entry(py: &Path, extra: &str) -> String {
    format!(
        "  - server: {{command: {}}}\n    name: py\n    prefix: py_\n{extra}",
        argv(&[&py.to_string_lossy(), &script().to_string_lossy()])
    )
}

/// Call `name` with `args` (2026-07-28) and return the result object.
fn call(server: &mut StdioServer, id: u64, name: &str, args: Value) -> Value {
    let resp = server.call_modern(id, "tools/call", json!({"name": name, "arguments": args}));
    assert!(
        resp.get("error").is_none(),
        "{name}: {resp}\n{}",
        server.stderr()
    );
    resp["result"].clone()
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn tool_names(server: &mut StdioServer, id: u64) -> Vec<String> {
    let resp = server.call_modern(id, "tools/list", json!({}));
    resp["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{resp}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn stdio_upstreams_serve_tools_resources_and_prompts_under_their_prefixes() {
    let Some(py) = python() else { return };
    let Some(everything) = npm_server("server-everything") else {
        return;
    };
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n{}  - server: {{command: {}}}\n    name: everything\n    prefix: ev_\n",
        py_entry(&py, ""),
        argv(&["node", &everything.to_string_lossy(), "stdio"])
    ));
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_echo", "py_add", "ev_get-sum", "ev_echo"]);
    let names = tool_names(&mut server, 1);
    for t in ["py_echo", "py_add", "ev_get-sum", "ev_echo"] {
        assert!(names.iter().any(|n| n == t), "{t} not in {names:?}");
    }
    assert_eq!(
        call(&mut server, 2, "py_add", json!({"a": 2, "b": 40}))["structuredContent"]["result"],
        42
    );
    let sum = call(&mut server, 3, "ev_get-sum", json!({"a": 2, "b": 3}));
    assert!(text(&sum).contains('5'), "{sum}");
    // Arguments are checked against the upstream's schema before anything is forwarded.
    let bad = call(&mut server, 4, "py_add", json!({"a": "two", "b": 3}));
    assert_eq!(bad["isError"], true, "{bad}");

    // Resources (fixed and templated) and prompts pass through.
    let read = server.call_modern(5, "resources/read", json!({"uri": "greeting://hello"}));
    assert_eq!(
        read["result"]["contents"][0]["text"], "Hello from Python",
        "{read}"
    );
    let templated =
        server.call_modern(6, "resources/read", json!({"uri": "greeting://person/Ada"}));
    assert_eq!(
        templated["result"]["contents"][0]["text"], "Hello, Ada",
        "{templated}"
    );
    let prompt = server.call_modern(
        7,
        "prompts/get",
        json!({"name": "py_review", "arguments": {"code": "fn main() {}"}}),
    );
    let message = prompt["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or("");
    assert!(message.contains("fn main() {}"), "{prompt}");
    let ev_prompt = server.call_modern(8, "prompts/get", json!({"name": "ev_simple-prompt"}));
    assert!(ev_prompt["result"]["messages"].is_array(), "{ev_prompt}");

    // Progress from the upstream reaches the client, under the client's own token.
    server.send(&request(
        9,
        "tools/call",
        with_meta(json!({
            "name": "py_slow",
            "arguments": {"seconds": 2},
            "_meta": {"progressToken": "tok-9"},
        })),
    ));
    let (resp, notes) = server.response_within(&json!(9), WAIT);
    assert_eq!(text(&resp["result"]), "slept 2 s", "{resp}");
    let progress: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "no progress in {notes:?}");
    assert_eq!(progress[0]["params"]["progressToken"], "tok-9");
}

#[test]
fn an_upstream_killed_mid_call_fails_that_call_and_a_restarted_child_serves_the_next() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let cfg = l.config(&format!("tool_dirs:\n{}", py_entry(&py, "")));
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_pid", "py_slow"]);
    let pid = call(&mut server, 1, "py_pid", json!({}))["structuredContent"]["result"]
        .as_i64()
        .unwrap();
    server.send(&request(
        2,
        "tools/call",
        with_meta(json!({"name": "py_slow", "arguments": {"seconds": 60}})),
    ));
    // The call is running once the upstream reports progress.
    server.send(&request(
        3,
        "tools/call",
        with_meta(json!({"name": "py_echo", "arguments": {"text": "before"}})),
    ));
    let _ = server.response_within(&json!(3), WAIT);
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (resp, _) = server.response_within(&json!(2), WAIT);
    assert_eq!(resp["result"]["isError"], true, "{resp}");
    // The next call waits through the restart and is served by a new child.
    let after = call(&mut server, 4, "py_pid", json!({}));
    let new_pid = after["structuredContent"]["result"].as_i64().unwrap_or(pid);
    assert_ne!(new_pid, pid, "{after}\n{}", server.stderr());
    assert!(
        server.logged("Restarted upstream py"),
        "{}",
        server.stderr()
    );
}

#[test]
fn a_hanging_upstream_call_ends_at_its_deadline_and_the_host_keeps_serving() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n{}plugins:\n  py:\n    tools:\n      slow: {{timeout_secs: 1}}\n",
        py_entry(&py, "")
    ));
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_slow", "py_echo"]);
    let started = Instant::now();
    let hung = call(&mut server, 1, "py_slow", json!({"seconds": 120}));
    assert_eq!(hung["isError"], true, "{hung}");
    assert!(text(&hung).contains("timed out"), "{hung}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(
        text(&call(
            &mut server,
            2,
            "py_echo",
            json!({"text": "still here"})
        )),
        "still here"
    );
}

#[test]
fn a_definition_changed_after_start_is_held_under_pinning_enforce() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n{}",
        py_entry(&py, "    pinning: enforce\n")
    ));
    let pinned = l.run(&cfg, &["pin"]);
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_echo", "py_mutate"]);
    assert!(tool_names(&mut server, 1).contains(&"py_echo".to_owned()));
    assert_eq!(
        text(&call(&mut server, 3, "py_mutate", json!({}))),
        "mutated"
    );
    // The host re-reads the upstream's list and rebuilds what it serves; the changed echo is held.
    let deadline = Instant::now() + WAIT;
    let mut id = 10;
    loop {
        id += 1;
        let names = tool_names(&mut server, id);
        if !names.contains(&"py_echo".to_owned()) {
            assert!(names.contains(&"py_add".to_owned()), "{names:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "py_echo still served:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        server.logged("is held (pinning: enforce)"),
        "{}",
        server.stderr()
    );
}

#[test]
fn entries_override_each_other_in_list_order_in_both_directions() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let entry = |extra: &str| {
        format!(
            "  - server: {{command: {}}}\n    name: py\n{extra}",
            argv(&[&py.to_string_lossy(), &script().to_string_lossy()])
        )
    };
    // The directory first: its echo wins.
    let cfg = l.config(&format!("tool_dirs:\n  - d\n{}", entry("")));
    let (rows, log) = l.list(&cfg);
    let echo: Vec<&Value> = rows.iter().filter(|r| r["tool"] == "echo").collect();
    assert_eq!(echo.len(), 2, "{rows:#?}\n{log}");
    let from_dir = echo.iter().find(|r| r["plugin"] != "py").unwrap();
    let from_py = echo.iter().find(|r| r["plugin"] == "py").unwrap();
    assert_eq!(from_dir["status"], "active", "{rows:#?}");
    assert_ne!(from_py["status"], "active", "{rows:#?}");
    // The upstream first: its echo wins.
    let cfg = l.config(&format!("tool_dirs:\n{}  - d\n", entry("")));
    let mut server = StdioServer::start(&cfg);
    // Until the upstream connects, the directory's echo is served; then the upstream's.
    server.wait_for_tools(&["add"]);
    let echoed = call(&mut server, 1, "echo", json!({"text": "who"}));
    assert_eq!(text(&echoed), "who");
    assert!(
        echoed
            .get("structuredContent")
            .is_none_or(|s| s["result"] == "who"),
        "{echoed}"
    );
    drop(server);
    let (rows, _) = l.list(&cfg);
    let winner = rows
        .iter()
        .find(|r| r["tool"] == "echo" && r["status"] == "active")
        .unwrap();
    assert_eq!(winner["plugin"], "py", "{rows:#?}");
}

#[test]
fn agents_see_upstream_tools_through_their_views_and_search_finds_them() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n{}agents:\n  adder:\n    allow: [\"py_add\"]\n  finder:\n    tools: search\n",
        py_entry(&py, "")
    ));
    let mut adder = StdioServer::start_with(&cfg, &["--agent", "adder"], &[]);
    adder.wait_for_tools(&["py_add"]);
    assert_eq!(tool_names(&mut adder, 1), ["py_add"]);
    let hidden = adder.call_modern(
        2,
        "tools/call",
        json!({"name": "py_echo", "arguments": {"text": "x"}}),
    );
    assert!(hidden.get("error").is_some(), "{hidden}");
    drop(adder);
    let mut finder = StdioServer::start_with(&cfg, &["--agent", "finder"], &[]);
    // The agent sees search tools only: search until the upstream's tools are indexed.
    let deadline = Instant::now() + WAIT;
    for id in 1.. {
        let found = call(
            &mut finder,
            id,
            "search_tools",
            json!({"query": "add two integers", "limit": 3}),
        );
        let first = &found["structuredContent"]["tools"][0]["name"];
        if first == "py_add" {
            break;
        }
        assert!(Instant::now() < deadline, "{found}\n{}", finder.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_filesystem_server_runs_sandboxed_reading_only_inside_its_grant() {
    let Some(filesystem) = npm_server("server-filesystem") else {
        return;
    };
    let l = Layout::new();
    let granted = l.dir("granted");
    let other = l.dir("other");
    std::fs::write(granted.join("in.txt"), "inside").unwrap();
    std::fs::write(other.join("out.txt"), "outside").unwrap();
    // The server itself would allow both directories; the sandbox grants only one.
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {{command: {}}}\n    name: filesystem\n    prefix: fs_\n    isolation: sandbox\nplugins:\n  filesystem:\n    permissions: {{read: [{granted:?}]}}\n",
        argv(&[
            "node",
            &filesystem.to_string_lossy(),
            &granted.to_string_lossy(),
            &other.to_string_lossy()
        ])
    ));
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["fs_read_text_file"]);
    let inside = call(
        &mut server,
        1,
        "fs_read_text_file",
        json!({"path": granted.join("in.txt")}),
    );
    assert_eq!(text(&inside), "inside", "{inside}\n{}", server.stderr());
    let outside = call(
        &mut server,
        2,
        "fs_read_text_file",
        json!({"path": other.join("out.txt")}),
    );
    assert_eq!(outside["isError"], true, "{outside}");
    assert!(!text(&outside).contains("outside"), "{outside}");
}

#[test]
fn a_sandboxed_upstream_cannot_run_programs_or_connect_out() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let data = l.dir("data");
    std::fs::write(data.join("secret.txt"), "secret").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cfg = l.config(&format!(
        "tool_dirs:\n{}",
        py_entry(&py, "    isolation: sandbox\n")
    ));
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_echo", "py_run_shell", "py_connect", "py_read"]);
    assert_eq!(
        text(&call(&mut server, 1, "py_echo", json!({"text": "up"}))),
        "up"
    );
    let shell = text(&call(&mut server, 2, "py_run_shell", json!({})));
    assert!(shell.starts_with("denied"), "{shell}");
    let connect = text(&call(&mut server, 3, "py_connect", json!({"port": port})));
    assert!(connect.starts_with("denied"), "{connect}");
    let read = text(&call(
        &mut server,
        4,
        "py_read",
        json!({"path": data.join("secret.txt")}),
    ));
    assert!(read.starts_with("denied"), "{read}");
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the child on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start an HTTP upstream server (`cmd`, its output discarded) and wait until it accepts
/// connections on `port`; killed when dropped.
fn http_upstream(mut cmd: Command, port: u16) -> Killed {
    let upstream = Killed(
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the HTTP upstream did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    upstream
}

#[test]
fn an_http_upstream_is_served_and_the_python_client_drives_the_aggregate() {
    let Some(py) = python() else { return };
    let port = free_port();
    let mut cmd = Command::new(&py);
    cmd.arg(script()).args(["--http", &port.to_string()]);
    let _upstream = http_upstream(cmd, port);
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {{url: \"http://127.0.0.1:{port}/mcp\", headers: {{X-Test: \"on\"}}}}\n    name: remote\n    prefix: http_\n{}",
        py_entry(&py, "")
    ));
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["http_add", "http_chatty", "py_echo"]);
    assert_eq!(
        call(&mut server, 1, "http_add", json!({"a": 1, "b": 2}))["structuredContent"]["result"],
        3,
        "{}",
        server.stderr()
    );
    // Its log messages come on the call's own response stream: they reach that call's client.
    server.send(&request(
        2,
        "tools/call",
        with_meta(json!({
            "name": "http_chatty",
            "arguments": {},
            "_meta": {"io.modelcontextprotocol/logLevel": "debug"},
        })),
    ));
    let (resp, notes) = server.response_within(&json!(2), WAIT);
    assert_eq!(text(&resp["result"]), "logged", "{resp}");
    let logs = notes
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .count();
    assert_eq!(logs, 2, "{notes:?}\n{}", server.stderr());
    drop(server);
    // The official Python client against the aggregate (stdio upstream + HTTP upstream).
    let out = Command::new(&py)
        .arg(workspace_root().join("tests/clients/upstream_client.py"))
        .arg(&mcp_host_tests::artifacts().host)
        .arg("--config")
        .arg(&cfg)
        .arg("serve")
        .arg("--stdio")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["py_add"], "5", "{report}");
    assert_eq!(report["http_echo"], "over http", "{report}");
    assert_eq!(report["greeting"], "Hello from Python", "{report}");
}

#[test]
fn an_upstreams_log_messages_reach_the_calling_client_at_its_level_with_the_trace_context() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let cfg = l.config(&format!("tool_dirs:\n{}", py_entry(&py, "")));
    // 2026-07-28: the request's own level (info) lets the info message through, not the debug one.
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_chatty", "py_trace"]);
    server.send(&request(
        1,
        "tools/call",
        with_meta(json!({
            "name": "py_chatty",
            "arguments": {},
            "_meta": {"io.modelcontextprotocol/logLevel": "info"},
        })),
    ));
    let (resp, notes) = server.response_within(&json!(1), WAIT);
    assert_eq!(text(&resp["result"]), "logged", "{resp}");
    let logs: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 1, "{notes:?}\n{}", server.stderr());
    assert_eq!(logs[0]["params"]["data"], "upstream says hello");
    assert_eq!(logs[0]["params"]["level"], "info");
    assert_eq!(logs[0]["params"]["logger"], "chatty-logger");

    // The caller's W3C trace context reaches the upstream in the `_meta` of its tools/call.
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let traced = call(&mut server, 2, "py_trace", json!({}));
    assert_eq!(
        text(&traced),
        r#"{"traceparent": null, "tracestate": null}"#
    );
    let resp = server.call_modern(
        3,
        "tools/call",
        json!({"name": "py_trace", "arguments": {},
               "_meta": {"traceparent": parent, "tracestate": "vendor=on"}}),
    );
    let seen: Value = serde_json::from_str(&text(&resp["result"])).unwrap();
    assert_eq!(
        seen,
        json!({"traceparent": parent, "tracestate": "vendor=on"}),
        "{resp}"
    );
    drop(server);

    // A 2025 session: `logging/setLevel debug` lets both through, as notifications of the call.
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_chatty"]);
    server.initialize("2025-11-25");
    let set = server.call(2, "logging/setLevel", json!({"level": "debug"}));
    assert!(set.get("error").is_none(), "{set}");
    server.send(&request(
        3,
        "tools/call",
        json!({"name": "py_chatty", "arguments": {}}),
    ));
    let (resp, notes) = server.response_within(&json!(3), WAIT);
    assert_eq!(text(&resp["result"]), "logged", "{resp}");
    let data: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .map(|n| &n["params"]["data"])
        .collect();
    assert_eq!(
        data,
        [
            &json!("upstream says hello"),
            &json!("upstream debug detail")
        ],
        "{notes:?}"
    );
}

/// What the Python upstream saw in the `_meta` of its `tools/call` of `wants` (its log level,
/// whether it had a progress token), called as request `id` with the client's `meta` (2026-07-28;
/// `None`: a 2025 session's call).
fn upstream_saw(server: &mut StdioServer, id: u64, meta: Option<Value>) -> Value {
    let resp = match meta {
        Some(meta) => server.call_modern(
            id,
            "tools/call",
            json!({"name": "py_wants", "arguments": {}, "_meta": meta}),
        ),
        None => server.call(
            id,
            "tools/call",
            json!({"name": "py_wants", "arguments": {}}),
        ),
    };
    serde_json::from_str(&text(&resp["result"])).unwrap_or_else(|e| panic!("{e}: {resp}"))
}

#[test]
fn an_upstream_is_asked_for_the_events_its_client_asked_for_and_no_more() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let cfg = l.config(&format!("tool_dirs:\n{}", py_entry(&py, "")));
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_wants"]);
    let cases = [
        // Neither a level nor a progress token: the upstream is asked for neither.
        (json!({}), json!({"logLevel": null, "progressToken": false})),
        // The client's own level, not `debug`.
        (
            json!({"io.modelcontextprotocol/logLevel": "warning"}),
            json!({"logLevel": "warning", "progressToken": false}),
        ),
        // Progress only: a token, no level.
        (
            json!({"progressToken": "p-3"}),
            json!({"logLevel": null, "progressToken": true}),
        ),
        (
            json!({"progressToken": 4, "io.modelcontextprotocol/logLevel": "debug"}),
            json!({"logLevel": "debug", "progressToken": true}),
        ),
    ];
    for (id, (meta, expected)) in (1..).zip(cases) {
        assert_eq!(upstream_saw(&mut server, id, Some(meta)), expected);
    }
    drop(server);

    // A 2025 session: its `logging/setLevel` (info until set).
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["py_wants"]);
    server.initialize("2025-11-25");
    assert_eq!(
        upstream_saw(&mut server, 2, None),
        json!({"logLevel": "info", "progressToken": false})
    );
    let set = server.call(3, "logging/setLevel", json!({"level": "error"}));
    assert!(set.get("error").is_none(), "{set}");
    assert_eq!(
        upstream_saw(&mut server, 4, None),
        json!({"logLevel": "error", "progressToken": false})
    );
}

/// The official Python client, in `mode`, against the host serving server-everything (`ev_`):
/// its report.
fn input_client(mode: &str, py: &Path, cfg: &Path) -> Value {
    let target = mcp_host_tests::clients::stdio_command(cfg);
    mcp_host_tests::clients::python_report(py, "upstream_input_client.py", mode, &target)
}

#[test]
fn upstreams_elicitation_and_sampling_reach_the_python_client_in_both_eras() {
    let Some(py) = python() else { return };
    let Some(everything) = npm_server("server-everything") else {
        return;
    };
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {{command: {}}}\n    name: everything\n    prefix: ev_\n{}",
        argv(&["node", &everything.to_string_lossy(), "stdio"]),
        py_entry(&py, "")
    ));
    for (mode, version) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let report = input_client(mode, &py, &cfg);
        assert_eq!(report["protocol_version"], version, "{report}");
        let elicited = &report["elicitation"];
        assert_eq!(elicited["is_error"], false, "{mode}: {report}");
        let elicited = elicited["text"].as_str().unwrap();
        assert!(
            elicited.contains("Name: Ada Lovelace") && elicited.contains("ada@example.com"),
            "{mode}: {report}"
        );
        let sampled = &report["sampling"];
        assert_eq!(sampled["is_error"], false, "{mode}: {report}");
        assert!(
            sampled["text"].as_str().unwrap().contains(
                "sampled answer to: Resource trigger-sampling-request context: capital of France?"
            ),
            "{mode}: {report}"
        );
        // The Python upstream speaks 2026-07-28: its question is an input_required result.
        assert_eq!(report["greet"]["is_error"], false, "{mode}: {report}");
        assert_eq!(report["greet"]["text"], "Hello, Ada", "{mode}: {report}");
        // And from `prompts/get` and `resources/read` (a resource template's).
        assert_eq!(report["prompt"], "Welcome, Ada", "{mode}: {report}");
        assert_eq!(
            report["resource"], "Hello from Paris, Ada",
            "{mode}: {report}"
        );
    }
}

#[test]
fn a_client_without_the_capability_gets_an_error_not_a_hang() {
    let Some(everything) = npm_server("server-everything") else {
        return;
    };
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {{command: {}}}\n    name: everything\n    prefix: ev_\n",
        argv(&["node", &everything.to_string_lossy(), "stdio"])
    ));
    let mut server = StdioServer::start(&cfg);
    // The upstream registers its elicitation tool once it knows the host can answer it.
    let deadline = Instant::now() + START;
    let mut id = 100;
    while !tool_names(&mut server, id).contains(&"ev_trigger-elicitation-request".to_owned()) {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(200));
        id += 1;
    }
    // A 2026 client that declared no elicitation: the call fails at once, naming the capability.
    let resp = server.call_modern(
        1,
        "tools/call",
        json!({"name": "ev_trigger-elicitation-request", "arguments": {}}),
    );
    let error = resp
        .get("error")
        .cloned()
        .unwrap_or_else(|| resp["result"].clone());
    assert!(error.to_string().contains("elicitation"), "{resp}");
}

/// A host serving `cfg` over stdio, in a 2025-11-25 session whose client declares elicitation,
/// once it serves the tools of `ready`.
fn eliciting_session(cfg: &Path, ready: &[&str]) -> StdioServer {
    let mut server = StdioServer::start(cfg);
    server.wait_for_tools(ready);
    let init = server.call(
        "init",
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "e2e", "version": "0"},
        }),
    );
    assert!(init.get("error").is_none(), "{init}");
    server.send(&mcp_host_tests::serve::notification(
        "notifications/initialized",
        Value::Null,
    ));
    server
}

/// A 2025 session (declaring elicitation) with the host serving `entry` as `ev_`, once the
/// upstream's elicitation tool is served.
fn session_asking_everything(l: &Layout, entry: &str) -> StdioServer {
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {entry}\n    name: everything\n    prefix: ev_\n"
    ));
    let mut server = eliciting_session(&cfg, &[]);
    let deadline = Instant::now() + START;
    let mut id = 100;
    while !tool_names_legacy(&mut server, id).contains(&"ev_trigger-elicitation-request".to_owned())
    {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(200));
        id += 1;
    }
    server
}

/// Start server-everything's long-running operation as request 1 and wait for its progress
/// (so it is in flight), then ask for its elicitation tool as request 2; the messages seen.
fn long_call_then_elicitation(server: &mut StdioServer) -> Vec<Value> {
    server.send(&request(
        1,
        "tools/call",
        json!({"name": "ev_trigger-long-running-operation", "arguments": {"duration": 10, "steps": 10},
               "_meta": {"progressToken": "long"}}),
    ));
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|m: &Value| m["method"] == "notifications/progress")
    {
        seen.push(server.recv(WAIT).expect("no progress from the long call"));
    }
    server.send(&request(
        2,
        "tools/call",
        json!({"name": "ev_trigger-elicitation-request", "arguments": {}}),
    ));
    seen
}

#[test]
fn a_question_from_a_stdio_upstream_with_several_calls_in_flight_is_refused_not_guessed() {
    let Some(everything) = npm_server("server-everything") else {
        return;
    };
    let l = Layout::new();
    let command = argv(&["node", &everything.to_string_lossy(), "stdio"]);
    let mut server = session_asking_everything(&l, &format!("{{command: {command}}}"));
    let seen = long_call_then_elicitation(&mut server);
    let (resp, notes) = server.response_within(&json!(2), WAIT);
    let answer = resp.to_string();
    assert!(
        answer.contains("in flight") && answer.contains("does not say which one"),
        "{resp}"
    );
    // The client was never asked.
    assert!(
        !notes
            .iter()
            .chain(&seen)
            .any(|m| m["method"] == "elicitation/create"),
        "{notes:?}"
    );
    let (long, _) = server.response_within(&json!(1), WAIT);
    assert!(long.get("error").is_none(), "{long}");
}

#[test]
fn over_http_an_upstreams_question_reaches_its_own_call_among_several() {
    let Some(everything) = npm_server("server-everything") else {
        return;
    };
    let port = free_port();
    let mut cmd = Command::new("node");
    cmd.arg(&everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string());
    let _upstream = http_upstream(cmd, port);
    let l = Layout::new();
    let url = format!("{{url: \"http://127.0.0.1:{port}/mcp\"}}");
    let mut server = session_asking_everything(&l, &url);
    long_call_then_elicitation(&mut server);
    // The question comes on request 2's own stream: the host asks this client, and answers it.
    let (mut answered, mut long) = (None, None);
    while answered.is_none() || long.is_none() {
        let message = server.recv(WAIT).expect("neither a question nor an answer");
        if message["method"] == "elicitation/create" {
            server.send(&json!({"jsonrpc": "2.0", "id": message["id"],
                "result": {"action": "accept", "content": {"name": "Ada Lovelace"}}}));
        } else if message.get("method").is_none() && message["id"] == 2 {
            answered = Some(message);
        } else if message.get("method").is_none() && message["id"] == 1 {
            long = Some(message);
        }
    }
    let answered = answered.unwrap().to_string();
    assert!(answered.contains("Name: Ada Lovelace"), "{answered}");
    let long = long.unwrap();
    assert!(long.get("error").is_none(), "{long}");
}

/// `tools/list` on a 2025 session: the names.
fn tool_names_legacy(server: &mut StdioServer, id: u64) -> Vec<String> {
    let resp = server.call(id, "tools/list", json!({}));
    resp["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{resp}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The `tool_dirs` entry of the Python upstream with `FIXTURE_TAG=tag` (name `p<tag>`, prefix
/// `<tag>_`): it serves `fixture://unlisted/<n>` and `fixture://<tag>/<n>` without listing them.
fn tagged_entry(py: &Path, tag: &str, extra: &str) -> String {
    format!(
        "  - server: {{command: {}, env: {{FIXTURE_TAG: {tag}}}{extra}}}\n    name: p{tag}\n    prefix: {tag}_\n",
        argv(&[&py.to_string_lossy(), &script().to_string_lossy()])
    )
}

#[test]
fn unlisted_resources_are_read_from_the_upstreams_in_order_by_the_python_client_in_both_eras() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n{}{}",
        tagged_entry(&py, "a", ""),
        tagged_entry(&py, "b", "")
    ));
    let target = mcp_host_tests::clients::stdio_command(&cfg);
    for (mode, version, not_found) in [
        ("legacy", "2025-11-25", -32002),
        ("2026-07-28", "2026-07-28", -32602),
    ] {
        let r = mcp_host_tests::clients::python_report(
            &py,
            "upstream_unlisted_client.py",
            mode,
            &target,
        );
        assert_eq!(r["protocol_version"], version, "{r}");
        // A tool's link to a resource its upstream does not list: the link reads.
        assert_eq!(r["link"], "fixture://unlisted/7", "{mode}: {r}");
        let listed: Vec<&str> = r["listed"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(!listed.contains(&"fixture://unlisted/7"), "{mode}: {r}");
        // Both upstreams serve it: the first in `tool_dirs` answers.
        assert_eq!(r["linked"], "unlisted 7 from a", "{mode}: {r}");
        // Only the second serves it: the first says "not found", the second answers.
        assert_eq!(r["reads"]["fixture://b/3"], "3 from b", "{mode}: {r}");
        // The second lists it, the first would serve it unlisted: the listed resource wins.
        assert!(listed.contains(&"fixture://unlisted/listed-by-b"), "{r}");
        assert_eq!(
            r["reads"]["fixture://unlisted/listed-by-b"], "listed by b",
            "{mode}: {r}"
        );
        // Nobody serves it: the usual not-found error.
        assert_eq!(
            r["reads"]["fixture://nobody/1"]["code"], not_found,
            "{mode}: {r}"
        );
    }
}

/// Read `uri` on a 2026-07-28 request: the result's text, or the error.
fn read_unlisted(server: &mut StdioServer, id: u64, uri: &str) -> Result<String, Value> {
    let resp = server.call_modern(id, "resources/read", json!({ "uri": uri }));
    match resp.get("error") {
        Some(e) => Err(e.clone()),
        None => Ok(resp["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{resp}"))
            .to_owned()),
    }
}

#[test]
fn unlisted_reads_follow_agents_views_the_call_policy_and_the_entries_opt_out() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    let cfg = l.config(&format!(
        "tool_dirs:\n{}{}{}\
         agents:\n  not-b:\n    deny: [\"fixture://b/*\"]\n\
         policy:\n  rules:\n    - name: no-nines\n      on: [resources]\n      \
         when: \"resource.uri.startsWith('fixture://unlisted/9')\"\n      outcome: deny\n      \
         message: \"no nines\"\n",
        tagged_entry(&py, "a", ""),
        tagged_entry(&py, "b", ""),
        tagged_entry(&py, "c", ", unlisted_resources: false")
    ));
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["a_report", "b_report", "c_report"]);
    assert_eq!(
        read_unlisted(&mut server, 1, "fixture://b/3"),
        Ok("3 from b".into())
    );
    // The call policy sees the URI read, as for a listed resource.
    let denied = read_unlisted(&mut server, 2, "fixture://unlisted/9").unwrap_err();
    assert_eq!(denied["code"], -32602, "{denied}");
    assert_eq!(denied["data"]["rule"], "no-nines", "{denied}");
    assert!(
        denied["message"].as_str().unwrap().contains("no nines"),
        "{denied}"
    );
    // An entry that opted out is not asked (its listed resources are still served).
    let opted_out = read_unlisted(&mut server, 3, "fixture://c/1").unwrap_err();
    assert_eq!(opted_out["code"], -32602, "{opted_out}");
    assert_eq!(opted_out["data"]["uri"], "fixture://c/1", "{opted_out}");
    assert_eq!(
        read_unlisted(&mut server, 4, "fixture://unlisted/listed-by-c"),
        Ok("listed by c".into())
    );
    drop(server);

    // An agent whose view denies the URI cannot read it, nor subscribe to it.
    let mut agent = StdioServer::start_with(&cfg, &["--agent", "not-b"], &[]);
    agent.wait_for_tools(&["a_report", "b_report", "c_report"]);
    let hidden = read_unlisted(&mut agent, 1, "fixture://b/3").unwrap_err();
    assert_eq!(hidden["code"], -32602, "{hidden}");
    assert_eq!(
        read_unlisted(&mut agent, 2, "fixture://unlisted/7"),
        Ok("unlisted 7 from a".into())
    );
    drop(agent);
    let mut legacy = StdioServer::start_with(&cfg, &["--agent", "not-b"], &[]);
    legacy.wait_for_tools(&["a_report", "b_report", "c_report"]);
    legacy.initialize("2025-11-25");
    let read = legacy.call(1, "resources/read", json!({"uri": "fixture://b/3"}));
    assert_eq!(read["error"]["code"], -32002, "{read}");
    let subscribed = legacy.call(2, "resources/subscribe", json!({"uri": "fixture://b/3"}));
    assert_eq!(subscribed["error"]["code"], -32002, "{subscribed}");
    let subscribed = legacy.call(
        3,
        "resources/subscribe",
        json!({"uri": "fixture://unlisted/7"}),
    );
    assert!(subscribed.get("error").is_none(), "{subscribed}");
    let read = legacy.call(4, "resources/read", json!({"uri": "fixture://unlisted/7"}));
    assert_eq!(
        read["result"]["contents"][0]["text"], "unlisted 7 from a",
        "{read}"
    );
}

#[test]
fn an_approval_for_an_unlisted_read_is_asked_once_though_each_upstream_asked_is_policed() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    // A short approval timeout: a second question left unanswered refuses the read soon.
    let cfg = l.config(&format!(
        "tool_dirs:\n{}{}\
         policy:\n  approval_timeout_secs: 5\n  rules:\n    - name: b-needs-a-yes\n      \
         on: [resources]\n      when: \"resource.uri.startsWith('fixture://b/')\"\n      \
         outcome: approve\n",
        tagged_entry(&py, "a", ""),
        tagged_entry(&py, "b", "")
    ));
    let mut legacy = eliciting_session(&cfg, &["a_report", "b_report"]);
    // Upstream `a` is policed (and asks), says not found; `b` is policed and serves it.
    legacy.send(&request(
        1,
        "resources/read",
        json!({"uri": "fixture://b/3"}),
    ));
    let asked = legacy.recv(WAIT).expect("the approval question");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let message = asked["params"]["message"].as_str().unwrap();
    assert!(message.contains("fixture://b/3"), "{message}");
    legacy.send(&json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"action": "accept", "content": {"approve": true}}}));
    let (read, seen) = legacy.response_within(&json!(1), WAIT);
    assert_eq!(
        read["result"]["contents"][0]["text"],
        "3 from b",
        "{read}\n{seen:?}\n{}",
        legacy.stderr()
    );
    assert!(
        seen.iter().all(|m| m["method"] != "elicitation/create"),
        "asked again: {seen:?}"
    );
}
