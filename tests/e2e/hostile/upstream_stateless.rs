//! 2026-07-28 HTTP upstreams (issue 51, "a 2026-07-28 upstream that never becomes ready").
//!
//! `subscriptions/listen`: an upstream that answers it as the conformance repository's reference
//! server does — a chunked `application/json` body of newline-delimited messages kept open, the
//! subscription named by the request id written as a string — is served, its list changes
//! followed and its newline-delimited call answers read; one that never acknowledges is served
//! all the same once the wait for the acknowledgment ends, with the reason in the log. Before the
//! fix the host waited for either acknowledgment for the whole 60 s start window (and its
//! listener with it), then served none of the upstream's tools.
//!
//! Client capabilities: a request made for a call tells the upstream what the calling client
//! declared (of what the host passes on), not the host's own, and an upstream's -32021 reaches a
//! 2026 client as the host's -32021. Before, the upstream was told the host's and ran the tool.

use std::process::{Child, Command};

use super::*;

/// A hostile fixture serving Streamable HTTP on a port of its own; killed when dropped.
struct Fixture {
    child: Child,
    port: u16,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Fixture {
    /// `hostile.py --era 2026 --mode MODE --http PORT`, once it accepts connections.
    fn start(mode: &str) -> Fixture {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = mcp_host_tests::workspace_root().join("tests/fixtures/upstream/hostile.py");
        let child = Command::new("python3")
            .arg(script)
            .args(["--era", "2026", "--mode", mode, "--http", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let fixture = Fixture { child, port };
        let deadline = Instant::now() + START;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the fixture did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        fixture
    }

    /// A configuration serving it as upstream `hostile`.
    fn config(&self, l: &Layout) -> std::path::PathBuf {
        l.config(&format!(
            "tool_dirs:\n  - server: {{url: \"http://127.0.0.1:{}/mcp\"}}\n    name: hostile\n",
            self.port
        ))
    }
}

/// The names of the tools `s` serves.
fn served(s: &HttpServer) -> Vec<String> {
    mcp_host_tests::serve::tool_names(&s.modern(1, "tools/list", json!({})).message())
}

/// Wait (generously) until `s` serves tool `name`.
#[track_caller]
fn wait_for_tool(s: &HttpServer, name: &str) {
    let deadline = Instant::now() + START;
    while !served(s).iter().any(|t| t == name) {
        assert!(
            Instant::now() < deadline,
            "{name} was never served ({:?}):\n{}",
            served(s),
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_upstream_answering_listen_on_a_json_stream_is_served_and_its_changes_followed() {
    let fixture = Fixture::start("json_stream_listen");
    let l = Layout::new();
    let s = HttpServer::start(&fixture.config(&l));
    wait_for_tool(&s, "echo");
    assert_eq!(healthz(&s), 200);
    // A call answered by a newline-delimited body (a log message, then the result).
    let r = call_at(&s, "/mcp", None, "chatty", json!({}));
    assert_eq!(tool_text(&r), ("chatted".to_owned(), false), "{r:?}");
    // A change announced on the listen stream is followed: the new tool is served.
    assert!(!served(&s).iter().any(|t| t == "grown"));
    let r = call_at(&s, "/mcp", None, "grow", json!({}));
    assert_eq!(tool_text(&r), ("grown".to_owned(), false), "{r:?}");
    wait_for_tool(&s, "grown");
    let r = call_at(&s, "/mcp", None, "grown", json!({}));
    assert_eq!(tool_text(&r).0, "I was added");
    assert!(
        !s.stderr().contains("cannot listen for list changes"),
        "{}",
        s.stderr()
    );
    assert_serves_others(&s);
}

#[test]
fn an_upstream_that_never_acknowledges_listen_is_served_and_the_log_says_why() {
    let fixture = Fixture::start("silent_listen");
    let l = Layout::new();
    let s = HttpServer::start(&fixture.config(&l));
    wait_for_tool(&s, "echo");
    wait_for_log(
        &s,
        "Upstream hostile: cannot listen for list changes (subscriptions/listen was not \
         acknowledged within 15 s)",
    );
    assert_serves_others(&s);
}

/// A 2026 `tools/call` of `name` whose client declared `capabilities`.
fn call_declaring(s: &HttpServer, name: &str, capabilities: Value) -> HttpResponse {
    let meta = json!({ "io.modelcontextprotocol/clientCapabilities": capabilities });
    s.modern(
        1,
        "tools/call",
        json!({"name": name, "arguments": {}, "_meta": meta}),
    )
}

#[test]
fn an_upstream_is_told_the_calling_clients_capabilities_and_its_32021_reaches_the_client() {
    let fixture = Fixture::start("needs_sampling");
    let l = Layout::new();
    let s = HttpServer::start(&fixture.config(&l));
    wait_for_tool(&s, "needs_sampling");
    // A client that declared nothing: the upstream is told nothing (not the host's own).
    let r = call_declaring(&s, "seen_capabilities", json!({}));
    assert_eq!(tool_text(&r), ("{}".to_owned(), false), "{r:?}");
    // What the host passes on of what the client declared, and nothing else.
    let declared = json!({"sampling": {}, "roots": {}, "experimental": {"x": {}}});
    let r = call_declaring(&s, "seen_capabilities", declared);
    assert_eq!(tool_text(&r).0, r#"{"roots": {}, "sampling": {}}"#, "{r:?}");
    // The upstream's -32021 reaches a client without sampling as the host's own.
    let r = call_declaring(&s, "needs_sampling", json!({}));
    assert_eq!(r.status, 400, "{r:?}");
    let m = r.message();
    assert_eq!(m["error"]["code"], -32021, "{m}");
    assert_eq!(
        m["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{m}"
    );
    let r = call_declaring(&s, "needs_sampling", json!({"sampling": {}}));
    assert_eq!(tool_text(&r), ("sampled".to_owned(), false), "{r:?}");
    assert_serves_others(&s);
}
