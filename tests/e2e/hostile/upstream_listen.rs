//! A 2026-07-28 HTTP upstream's `subscriptions/listen` (issue 51, "a 2026-07-28 upstream that
//! never becomes ready"): an upstream that answers it as the conformance repository's reference
//! server does — a chunked `application/json` body of newline-delimited messages kept open, the
//! subscription named by the request id written as a string — is served, its list changes
//! followed and its newline-delimited call answers read; one that never acknowledges is served
//! all the same once the wait for the acknowledgment ends, with the reason in the log. Before the
//! fix the host waited for either acknowledgment for the whole 60 s start window (and its
//! listener with it), then served none of the upstream's tools.

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
    let fixture = Fixture::start("json-stream-listen");
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
    let fixture = Fixture::start("silent-listen");
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
