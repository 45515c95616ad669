//! Hostile input against a real `mcp-host serve`: each attack of issue 8 (and others of the same
//! classes) is run against the real binary over real sockets and pipes, and each test checks that
//! the attacker gets the documented answer, that the server stays responsive to everyone else
//! (`/healthz` and a normal call answer while and after it runs — checked by ordering and generous
//! deadlines, never by a clock), that no other caller's session or data is affected, and that the
//! server's peak memory (`VmHWM`) stays under 150 MB. `upstream_*` serve the hostile upstream
//! fixture (`tests/fixtures/upstream/hostile.py`) through the host, one finding of issue 51 each.

#![allow(clippy::unwrap_used)]

mod front_door;
mod http_limits;
mod store_trust;
mod upstream_api_key;
mod upstream_filters;
mod upstream_guardrails;
mod upstream_lifecycle;
mod upstream_oauth;
mod upstream_overrides;
mod upstream_sandbox;
mod upstream_stateless;
mod upstream_wire;
mod worker_wire;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use jsonwebtoken::{EncodingKey, Header, encode};
use mcp_host_tests::serve::{
    HttpConn, HttpResponse, HttpServer, START, StdioServer, WAIT, header_refs, modern_headers,
    notification, request, with_meta,
};
use mcp_host_tests::{Layout, open_gate, wait_for_file};
use serde_json::{Value, json};

/// The peak resident memory a server may reach under any of these attacks.
const MAX_PEAK_RSS_MB: u64 = 150;
/// A personal secret the victim (`alice`) authenticates with.
const ALICE: &str = "mcp_alice-hostile-suite-secret-0123456789";
/// An HS256 secret long enough to be accepted.
const HS_SECRET: &str = "hostile-suite-hs256-secret-0123456789abcdef";

fn layout(plugins: &[&str], extra: &str) -> (Layout, std::path::PathBuf) {
    let l = Layout::new();
    for p in plugins {
        l.install("d", p, None);
    }
    let cfg = l.config(&format!("tool_dirs: [d]\n{extra}"));
    (l, cfg)
}

/// `auth.secrets` with alice's secret.
fn alice_secret_config() -> String {
    format!(
        "auth:\n  secrets:\n    - {{sha256: {}, user: alice}}\n",
        mcp_host::access::auth::hash_secret(ALICE)
    )
}

/// The server's peak resident memory so far (`VmHWM`), in MB.
fn peak_rss_mb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"));
    kb / 1024
}

#[track_caller]
fn assert_peak_rss(pid: u32) {
    let peak = peak_rss_mb(pid);
    assert!(
        peak < MAX_PEAK_RSS_MB,
        "peak RSS {peak} MB, over {MAX_PEAK_RSS_MB} MB"
    );
}

fn healthz(s: &HttpServer) -> u16 {
    s.connect().request("GET", "/healthz", &[], b"").status
}

/// A tool call by `token` (or anonymously) at `path`.
fn call_at(
    s: &HttpServer,
    path: &str,
    token: Option<&str>,
    tool: &str,
    args: Value,
) -> HttpResponse {
    s.modern_at(
        path,
        token,
        "tools/call",
        json!({ "name": tool, "arguments": args }),
    )
}

/// The server answers `/healthz` and a normal call from another caller. The call is retried while
/// it is told to come back (503 with Retry-After), as a client does: a connection this test just
/// closed keeps its address's slot until the server has read the close, which a loaded machine
/// may not have done yet. A slot that is never given back still fails, at the deadline.
#[track_caller]
fn assert_serves_others(s: &HttpServer) {
    let health = s.connect().request("GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200, "{}\n{}", health.text(), s.stderr());
    let deadline = Instant::now() + START;
    let r = loop {
        let r = call_at(s, "/mcp", None, "echo", json!({ "text": "still here" }));
        if r.status != 503 || r.header("retry-after").is_none() || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.message()["result"]["content"][0]["text"], "still here");
}

/// The text of a tool result in an HTTP answer, and whether it is an error.
fn tool_text(r: &HttpResponse) -> (String, bool) {
    let m = r.message();
    let text = m["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no tool result in {m}"))
        .to_owned();
    (text, m["result"]["isError"] == true)
}

/// Wait (generously) until the server's log contains `needle`.
#[track_caller]
fn wait_for_log(s: &HttpServer, needle: &str) {
    let deadline = Instant::now() + START;
    while !s.stderr().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "the log never said {needle:?}:\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn hs256(claims: &Value) -> String {
    encode(
        &Header::default(),
        claims,
        &EncodingKey::from_secret(HS_SECRET.as_bytes()),
    )
    .unwrap()
}

fn exp() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600
}

// ---------------------------------------------------------------------------------------------
// Tool results

#[test]
fn text_tools_refuse_or_bound_amplifying_requests_before_building_the_answer() {
    let (_l, cfg) = layout(&["fixture-basic", "mcp-text"], "");
    let mut s = HttpServer::start(&cfg);
    // 90 KB that asked for a 2 GB string.
    let r = call_at(
        &s,
        "/mcp",
        None,
        "regex_replace",
        json!({"pattern": "", "text": "a".repeat(45_000), "replacement": "b".repeat(45_000), "literal": true}),
    );
    let (text, is_error) = tool_text(&r);
    assert!(
        is_error && text.contains("2025090000 bytes") && text.contains("limit"),
        "{text}"
    );
    // Nested groups repeat every match: the answer stops at the plugin's budget.
    let groups = format!("{}a{}", "(".repeat(150), ")".repeat(150));
    let r = call_at(
        &s,
        "/mcp",
        None,
        "regex_match",
        json!({"pattern": groups, "text": "a".repeat(200_000), "max_matches": 10_000}),
    );
    assert_eq!(r.status, 200);
    assert!(r.body.len() < 16 << 20, "{} bytes", r.body.len());
    assert_eq!(
        r.message()["result"]["structuredContent"]["truncated"],
        true
    );
    // `$..*` on a deep 500 KB document: each match repeats the nodes below it.
    let deep = |ones: usize| {
        format!(
            "{}{}1{}",
            "[".repeat(100),
            "1,".repeat(ones),
            "]".repeat(100)
        )
    };
    let query = |doc: String| {
        call_at(
            &s,
            "/mcp",
            None,
            "json_query",
            json!({"json": doc, "path": "$..*", "max_results": 100_000}),
        )
    };
    let (text, is_error) = tool_text(&query(deep(200_000)));
    assert!(
        is_error && text.contains("the first match would be more than"),
        "{text}"
    );
    let r = query(deep(20_000));
    assert_eq!(r.status, 200);
    assert!(r.body.len() < 16 << 20, "{} bytes", r.body.len());
    let found = &r.message()["result"]["structuredContent"];
    assert_eq!(found["truncated"], true, "{found}");
    // A query whose unions multiply the node list is refused before it runs.
    let unions = format!("$[{0}][{0}][{0}]", ["0"; 300].join(","));
    let r = call_at(
        &s,
        "/mcp",
        None,
        "json_query",
        json!({"json": "[[[1]]]", "path": unions}),
    );
    let (text, is_error) = tool_text(&r);
    assert!(is_error && text.contains("could select up to"), "{text}");
    assert_serves_others(&s);
    assert_peak_rss(s.child().id());
}

#[test]
fn a_result_over_max_result_bytes_becomes_an_error_naming_its_size_and_the_limit() {
    let (_l, cfg) = layout(&["fixture-basic"], "limits: {max_result_bytes: 1000}\n");
    let s = HttpServer::start(&cfg);
    let r = call_at(&s, "/mcp", None, "echo", json!({"text": "x".repeat(2000)}));
    let (text, is_error) = tool_text(&r);
    assert!(is_error, "{text}");
    assert!(
        text.contains("over the limit of 1000 bytes") && text.contains("limits.max_result_bytes"),
        "{text}"
    );
    assert_serves_others(&s);
}

// ---------------------------------------------------------------------------------------------
// Protocol: batches, sessions, stdio framing

#[test]
fn a_legacy_batch_longer_than_the_limit_is_refused_whole() {
    let (_l, cfg) = layout(&["fixture-basic"], "");
    let mut s = HttpServer::start(&cfg);
    let (_, session) = s.initialize("2025-03-26");
    let batch = |n: usize| {
        Value::Array(
            (0..n)
                .map(|i| request(i, "tools/list", Value::Null))
                .collect(),
        )
    };
    let r = s.post(&[("Mcp-Session-Id", &session)], &batch(2000));
    assert_eq!(r.status, 400, "{r:?}");
    let m = r.json();
    assert_eq!(m["error"]["code"], -32600);
    assert!(
        m["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_batch_len"),
        "{m}"
    );
    let r = s.post(&[("Mcp-Session-Id", &session)], &batch(3));
    assert_eq!(r.status, 200);
    assert_eq!(r.json().as_array().unwrap().len(), 3);
    assert_serves_others(&s);
    assert_peak_rss(s.child().id());
}

#[test]
fn an_initialize_flood_keeps_only_capability_names_and_evicts_only_the_flooders_sessions() {
    let (_l, cfg) = layout(
        &["fixture-basic"],
        &format!(
            // Initialize bodies this large are refused by default (http.max_other_body_bytes,
            // http_limits); allowed here to see what a session keeps of them.
            "http: {{max_sessions: 40, max_sessions_per_caller: 5, max_other_body_bytes: 4194304}}\n{}",
            alice_secret_config()
        ),
    );
    let mut s = HttpServer::start(&cfg);
    let init = |capabilities: Value, token: Option<&str>| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![];
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        let body = request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                   "clientInfo": {"name": "x".repeat(1000), "version": "0"}}),
        );
        let r = s.post(&headers, &body);
        assert_eq!(r.status, 200, "{r:?}");
        r.header("mcp-session-id").unwrap().to_owned()
    };
    let ping = |session: &str, token: Option<&str>| {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("Mcp-Session-Id", session)];
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        s.post(&headers, &request(2, "ping", Value::Null)).status
    };
    let alice = init(json!({}), Some(ALICE));
    // Eight 3.8 MB capability arrays: what a session keeps of them is their names.
    let big = json!({ "experimental": ["y".repeat(3_800_000)] });
    let first = init(big.clone(), None);
    for _ in 0..7 {
        init(big.clone(), None);
    }
    // Then a flood of small ones.
    let mut last = String::new();
    for _ in 0..200 {
        last = init(json!({"sampling": {}}), None);
    }
    assert_eq!(ping(&alice, Some(ALICE)), 200, "alice's session survived");
    assert_eq!(ping(&last, None), 200);
    assert_eq!(
        ping(&first, None),
        404,
        "the flooder's own oldest session made room"
    );
    assert_serves_others(&s);
    assert_peak_rss(s.child().id());
}

#[test]
fn stdio_refuses_an_oversized_message_while_reading_it() {
    let (_l, cfg) = layout(&["fixture-basic"], "http: {max_body_bytes: 1048576}\n");
    let mut s = StdioServer::start(&cfg);
    // A 300 MiB line, streamed: the server never holds more than the limit of it.
    let chunk = vec![b'x'; 1 << 20];
    s.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"pad\":\"");
    for _ in 0..300 {
        s.send_bytes(&chunk);
    }
    s.send_bytes(b"\"}}\n");
    let refused = s.recv(WAIT).expect("an answer to the oversized message");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("exceeds the limit of 1048576 bytes"),
        "{message}"
    );
    let r = s.call_modern(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "ok"}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "ok");
    assert_peak_rss(s.pid());
}

// ---------------------------------------------------------------------------------------------
// HTTP connections

#[test]
fn connections_that_never_finish_their_headers_are_closed_and_healthz_still_answers() {
    let (_l, cfg) = layout(
        &["fixture-basic"],
        "http: {max_connections: 8, header_read_timeout_secs: 1}\n",
    );
    let s = HttpServer::start(&cfg);
    let mut slow: Vec<TcpStream> = (0..24)
        .map(|_| {
            let mut c = TcpStream::connect(s.addr).unwrap();
            c.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .unwrap();
            c
        })
        .collect();
    // Three times the connection limit of slow sockets: /healthz waits in the backlog for a
    // slot (never an error) and is answered once the header timeout frees one.
    assert_eq!(healthz(&s), 200);
    // Each slow socket is closed by the server without an answer.
    for c in &mut slow {
        c.set_read_timeout(Some(START)).unwrap();
        let mut buf = [0u8; 64];
        match c.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("a slow connection got {other:?}"),
        }
    }
    assert_serves_others(&s);
}

#[test]
fn a_request_outlasting_the_header_timeout_is_answered_and_its_connection_closes_once_idle() {
    let (_l, cfg) = layout(&["fixture-basic"], "http: {header_read_timeout_secs: 1}\n");
    let s = HttpServer::start(&cfg);
    let mut conn = s.connect();
    conn.set_read_timeout(START);
    // Busy for 2.5 s, over the 1 s a head may take: the deadline does not run during a request.
    let params = with_meta(json!({"name": "sleep", "arguments": {"millis": 2500}}));
    let headers = modern_headers("tools/call", Some("sleep"));
    let body = request(1, "tools/call", params).to_string();
    let r = conn.post(&header_refs(&headers), body.as_bytes());
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.message()["result"]["content"][0]["text"], "slept");
    // Kept alive after its answer, then closed for sending no further head.
    assert!(
        conn.closed_by_server(),
        "an idle keep-alive connection stayed open"
    );
    assert_serves_others(&s);
}

#[test]
fn default_limits_keep_healthz_answering_under_300_stalled_connections() {
    let (_l, cfg) = layout(&["fixture-basic"], "");
    let mut s = HttpServer::start(&cfg);
    let _stalled: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut c = TcpStream::connect(s.addr).unwrap();
            c.write_all(b"GET /healthz HTTP/1.1\r\nHo").unwrap();
            c
        })
        .collect();
    assert_serves_others(&s);
    assert_peak_rss(s.child().id());
}

#[test]
fn running_out_of_file_descriptors_pauses_accepting_instead_of_spinning() {
    let (_l, cfg) = layout(&["fixture-basic"], "");
    let mut s = HttpServer::start(&cfg);
    // Plugins load after the address is logged: count descriptors once they are in, or the
    // limit below would fail their loading instead of the accepts.
    assert_serves_others(&s);
    let pid = s.child().id();
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let limit = format!("--nofile={}:{}", open + 8, open + 8);
    let status = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &limit])
        .status()
        .expect("prlimit (util-linux) is needed");
    assert!(status.success());
    let mut conns: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(s.addr).unwrap())
        .collect();
    // Make the server try to accept them all (a request on the last one).
    conns
        .last_mut()
        .unwrap()
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    wait_for_log(&s, "accept failed");
    assert!(s.stderr().contains("pausing"), "{}", s.stderr());
    drop(conns);
    // Once descriptors are free again, the server accepts and answers; what failed for want of
    // one meanwhile (the task store's file may have been opened then) is ready again.
    let deadline = Instant::now() + START;
    while healthz(&s) != 200 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_serves_others(&s);
}

#[test]
fn a_body_that_never_arrives_is_answered_408() {
    let (_l, cfg) = layout(&["fixture-basic"], "http: {body_read_timeout_secs: 1}\n");
    let s = HttpServer::start(&cfg);
    let mut c = s.connect();
    c.send(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", "100"),
        ],
        b"{\"jsonrpc\"",
    );
    let r = c.read_response();
    assert_eq!(r.status, 408, "{r:?}");
    assert!(r.text().contains("http.body_read_timeout_secs"), "{r:?}");
    assert_serves_others(&s);
}

// ---------------------------------------------------------------------------------------------
// Fair sharing

fn gate_paths(l: &Layout) -> (std::path::PathBuf, impl Fn(u32) -> std::path::PathBuf) {
    let dir = l.dir("gates");
    let started = move |i: u32| dir.join(format!("started-{i}"));
    (l.dir("gates").join("gate"), started)
}

fn wait_for_call(id: u32, gate: &Path, started: Option<&Path>) -> Value {
    let mut args = json!({ "path": gate });
    if let Some(st) = started {
        args["started"] = json!(st);
    }
    request(
        id,
        "tools/call",
        with_meta(json!({"name": "wait_for", "arguments": args})),
    )
}

#[test]
fn a_busy_plugin_does_not_hold_global_slots_other_plugins_need() {
    let (l, cfg) = layout(
        &["fixture-basic", "fixture-faulty"],
        "limits: {max_concurrent_calls: 4}\nplugins:\n  fixture-basic: {max_concurrent_calls: 2}\n",
    );
    let (gate, started) = gate_paths(&l);
    let mut s = StdioServer::start(&cfg);
    for i in 1..=6 {
        let st = started(i);
        s.send(&wait_for_call(i, &gate, (i <= 2).then_some(st.as_path())));
    }
    wait_for_file(&started(1));
    wait_for_file(&started(2));
    // Four calls wait for fixture-basic. Each line is taken up to its first wait before the next
    // is read, so they are all queued by now; none may hold one of the four global slots.
    let r = s.call_modern(7, "tools/call", json!({"name": "still_fine"}));
    assert_eq!(r["result"]["isError"], Value::Null, "{r}");
    open_gate(&gate, "open");
    for i in 1..=6 {
        assert_eq!(s.response(i)["result"]["content"][0]["text"], "open");
    }
}

#[test]
fn a_queued_call_cancelled_by_its_client_never_starts() {
    let (l, cfg) = layout(
        &["fixture-basic"],
        "plugins:\n  fixture-basic: {max_concurrent_calls: 1}\n",
    );
    let (gate, started) = gate_paths(&l);
    let mut s = StdioServer::start(&cfg);
    s.send(&wait_for_call(1, &gate, Some(&started(1))));
    wait_for_file(&started(1));
    s.send(&wait_for_call(2, &gate, Some(&started(2))));
    s.send(&notification(
        "notifications/cancelled",
        json!({"requestId": 2}),
    ));
    // The server reads its input in order: once this list is answered, the cancellation took
    // effect (otherwise a loaded machine could open the gate before the server read it).
    let listed = s.call_modern(9, "tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    s.send(&wait_for_call(3, &gate, Some(&started(3))));
    open_gate(&gate, "open");
    assert_eq!(s.response(1)["result"]["content"][0]["text"], "open");
    // Call 3 queued behind call 2: once it answers, call 2 had its turn and let it pass.
    assert_eq!(s.response(3)["result"]["content"][0]["text"], "open");
    assert!(!started(2).exists(), "the cancelled call started");
}

#[test]
fn a_queued_call_whose_http_client_went_away_never_starts() {
    let (l, cfg) = layout(
        &["fixture-basic"],
        "plugins:\n  fixture-basic: {max_concurrent_calls: 1}\n",
    );
    let (gate, started) = gate_paths(&l);
    let s = HttpServer::start_with_env(&cfg, &[("RUST_LOG", "debug")]);
    let post = |c: &mut HttpConn, id: u32, st: &Path| {
        let headers = modern_headers("tools/call", Some("wait_for"));
        let mut all = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        all.extend(header_refs(&headers));
        let body = wait_for_call(id, &gate, Some(st)).to_string();
        c.send("POST", "/mcp", &all, body.as_bytes());
    };
    let mut first = s.connect();
    post(&mut first, 1, &started(1));
    wait_for_file(&started(1));
    let mut gone = s.connect();
    post(&mut gone, 2, &started(2));
    wait_for_log(&s, "call queued");
    gone.close();
    wait_for_log(&s, "call cancelled while queued");
    let mut third = s.connect();
    post(&mut third, 3, &started(3));
    open_gate(&gate, "open");
    assert_eq!(
        first.read_response().message()["result"]["content"][0]["text"],
        "open"
    );
    assert_eq!(
        third.read_response().message()["result"]["content"][0]["text"],
        "open"
    );
    assert!(!started(2).exists(), "the abandoned call started");
}

#[test]
fn a_caller_over_its_share_gets_429_with_retry_after_and_others_are_unaffected() {
    let (l, cfg) = layout(
        &["fixture-basic"],
        &format!(
            "limits: {{per_caller: {{max_in_flight: 2}}}}\n{}",
            alice_secret_config()
        ),
    );
    let (gate, started) = gate_paths(&l);
    let s = HttpServer::start(&cfg);
    let headers = modern_headers("tools/call", Some("wait_for"));
    let mut holders: Vec<HttpConn> = (1..=2)
        .map(|i| {
            let mut c = s.connect();
            let mut all = vec![
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ];
            all.extend(header_refs(&headers));
            let body = wait_for_call(i, &gate, Some(&started(i))).to_string();
            c.send("POST", "/mcp", &all, body.as_bytes());
            c
        })
        .collect();
    wait_for_file(&started(1));
    wait_for_file(&started(2));
    let r = call_at(&s, "/mcp", None, "echo", json!({"text": "third"}));
    assert_eq!(r.status, 429, "{r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert_eq!(r.json()["error"]["code"], -32010);
    // Another caller has its own share.
    let r = call_at(&s, "/mcp", Some(ALICE), "echo", json!({"text": "alice"}));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(healthz(&s), 200);
    open_gate(&gate, "open");
    for c in &mut holders {
        assert_eq!(c.read_response().status, 200);
    }
    assert_serves_others(&s);
}

#[test]
fn a_caller_over_its_rate_gets_429_over_http_and_an_error_over_stdio() {
    let (_l, cfg) = layout(
        &["fixture-basic"],
        "limits: {per_caller: {calls_per_sec: 0.01, burst: 2}}\n",
    );
    let s = HttpServer::start(&cfg);
    for _ in 0..2 {
        let r = call_at(&s, "/mcp", None, "echo", json!({"text": "x"}));
        assert_eq!(r.status, 200);
    }
    let r = call_at(&s, "/mcp", None, "echo", json!({"text": "x"}));
    assert_eq!(r.status, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1, "{retry}");
    assert_eq!(healthz(&s), 200);
    let mut stdio = StdioServer::start(&cfg);
    for id in 1..=2 {
        let ok = stdio.call_modern(
            id,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        );
        assert_eq!(ok["result"]["content"][0]["text"], "x");
    }
    let refused = stdio.call_modern(
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
    );
    assert_eq!(refused["error"]["code"], -32010, "{refused}");
    assert!(refused["error"]["data"]["retryAfterSecs"].as_u64().unwrap() >= 1);
}

// ---------------------------------------------------------------------------------------------
// Access

#[test]
fn a_token_without_iss_is_refused_when_an_issuer_is_configured() {
    let (_l, cfg) = layout(
        &["fixture-basic"],
        &format!(
            "auth:\n  resource: http://mcp.test/mcp\n  jwt: {{hs256_secret: {HS_SECRET}, issuer: https://issuer.test}}\n"
        ),
    );
    let s = HttpServer::start(&cfg);
    let without = hs256(&json!({"sub": "alice", "aud": "http://mcp.test/mcp", "exp": exp()}));
    let r = call_at(&s, "/mcp", Some(&without), "whoami", json!({}));
    assert_eq!(r.status, 401, "{r:?}");
    let with = hs256(
        &json!({"sub": "alice", "aud": "http://mcp.test/mcp", "exp": exp(), "iss": "https://issuer.test"}),
    );
    let r = call_at(&s, "/mcp", Some(&with), "whoami", json!({}));
    assert_eq!(r.status, 200, "{r:?}");
    let padded = hs256(
        &json!({"sub": "alice ", "aud": "http://mcp.test/mcp", "exp": exp(), "iss": "https://issuer.test"}),
    );
    let r = call_at(&s, "/mcp", Some(&padded), "whoami", json!({}));
    assert_eq!(r.status, 401, "a padded user id is refused: {r:?}");
}

#[test]
fn unsafe_credentials_and_config_stop_start_up_with_the_key_named() {
    let cases = [
        (
            "auth:\n  jwt: {hs256_secret: too-short}\n".to_owned(),
            "hs256_secret",
        ),
        (
            format!(
                "auth:\n  secrets:\n    - {{sha256: {}, user: \"demo \"}}\n",
                mcp_host::access::auth::hash_secret(ALICE)
            ),
            "auth.secrets[0].user",
        ),
        (
            "limits: {max_batch_len: 5, max_batch: 5}\n".to_owned(),
            "limits.max_batch",
        ),
    ];
    for (extra, key) in cases {
        let (l, cfg) = layout(&["fixture-basic"], &extra);
        let out = l.run(&cfg, &["serve", "--stdio"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started with {extra}");
        assert!(err.contains(key), "{key} not named in: {err}");
    }
    // A tool directory entry with a misspelt key.
    let l = Layout::new();
    let cfg = l.config("tool_dirs:\n  - {path: d, prefx: x_}\n");
    let out = l.run(&cfg, &["serve", "--stdio"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started with a misspelt tool_dirs key"
    );
    assert!(
        err.contains("tool_dirs[0]") && err.contains("prefx") && err.contains("mcp-host.yaml"),
        "{err}"
    );
}

#[test]
fn nested_calls_obey_the_outer_calls_agent_view() {
    let (_l, cfg) = layout(&["fixture-basic"], "agents:\n  narrow: {allow: [shout]}\n");
    let s = HttpServer::start(&cfg);
    let r = call_at(
        &s,
        "/mcp/agents/narrow",
        None,
        "shout",
        json!({"text": "hi"}),
    );
    let (text, is_error) = tool_text(&r);
    assert!(is_error && text.contains("unknown tool: echo"), "{text}");
    let r = call_at(&s, "/mcp", None, "shout", json!({"text": "hi"}));
    assert_eq!(tool_text(&r), ("HI".to_owned(), false));
}

#[test]
fn each_agent_endpoint_has_its_own_metadata_and_audience() {
    let (_l, cfg) = layout(
        &["fixture-basic"],
        &format!(
            "auth:\n  resource: http://mcp.test/mcp\n  jwt: {{hs256_secret: {HS_SECRET}}}\nagents:\n  a: {{}}\n"
        ),
    );
    let s = HttpServer::start(&cfg);
    let doc = s
        .connect()
        .request(
            "GET",
            "/.well-known/oauth-protected-resource/mcp/agents/a",
            &[],
            b"",
        )
        .json();
    assert_eq!(doc["resource"], "http://mcp.test/mcp/agents/a");
    let doc = s
        .connect()
        .request("GET", "/.well-known/oauth-protected-resource/mcp", &[], b"")
        .json();
    assert_eq!(doc["resource"], "http://mcp.test/mcp");
    let r = s.connect().request(
        "GET",
        "/.well-known/oauth-protected-resource/elsewhere",
        &[],
        b"",
    );
    assert_eq!(r.status, 404);
    // Without a token, the agent endpoint's challenge names its own document.
    let r = call_at(&s, "/mcp/agents/a", None, "whoami", json!({}));
    assert_eq!(r.status, 401);
    assert!(
        r.header("www-authenticate")
            .unwrap()
            .contains("/.well-known/oauth-protected-resource/mcp/agents/a\""),
        "{r:?}"
    );
    let for_agent =
        hs256(&json!({"sub": "bob", "aud": "http://mcp.test/mcp/agents/a", "exp": exp()}));
    let r = call_at(&s, "/mcp/agents/a", Some(&for_agent), "whoami", json!({}));
    assert_eq!(r.status, 200, "{r:?}");
    let r = call_at(&s, "/mcp", Some(&for_agent), "whoami", json!({}));
    assert_eq!(r.status, 401, "an agent's token is not the server's: {r:?}");
    let for_server = hs256(&json!({"sub": "bob", "aud": "http://mcp.test/mcp", "exp": exp()}));
    let r = call_at(&s, "/mcp/agents/a", Some(&for_server), "whoami", json!({}));
    assert_eq!(
        r.status, 200,
        "the /mcp audience keeps working there: {r:?}"
    );
}

#[test]
fn non_ascii_origin_or_host_is_refused_not_ignored() {
    let (_l, cfg) = layout(&["fixture-basic"], "");
    let s = HttpServer::start(&cfg);
    let body = request(1, "tools/list", with_meta(json!({}))).to_string();
    for header in [
        &b"Origin: http://\xc3\xa9vil.example\r\nHost: 127.0.0.1"[..],
        &b"Host: evil.example\xff"[..],
    ] {
        let mut c = s.connect();
        let mut raw = b"POST /mcp HTTP/1.1\r\n".to_vec();
        raw.extend_from_slice(header);
        raw.extend_from_slice(
            format!(
                "\r\nContent-Type: application/json\r\nAccept: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        c.send_raw(&raw);
        let r = c.read_response();
        assert_eq!(r.status, 403, "{r:?}");
    }
    assert_serves_others(&s);
}

#[test]
fn the_runtime_directory_is_fresh_private_and_never_a_shared_one() {
    use std::os::unix::fs::PermissionsExt as _;
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let shared = l.dir("shared");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cfg = l.config("tool_dirs: [d]\nruntime_dir: shared\n");
    let out = l.run(&cfg, &["serve", "--stdio"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("writable by others"),
        "{err}"
    );
    let cfg = l.config("tool_dirs: [d]\nruntime_dir: rt\n");
    let mut s = StdioServer::start(&cfg);
    let r = s.call_modern(
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "ok"}}),
    );
    assert_eq!(r["result"]["content"][0]["text"], "ok");
    let made: Vec<_> = std::fs::read_dir(l.root.path().join("rt"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let mode = std::fs::metadata(&made[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}
