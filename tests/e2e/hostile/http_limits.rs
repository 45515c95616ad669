//! M4, M6, M7, L3, L4, L13: legacy sessions bound to their owner, connection caps per address and caller, bounded batch answers, the metrics listener.

use super::*;

/// A personal secret of a second user (`bob`), who must not reach alice's sessions.
const BOB: &str = "mcp_bob-http-limits-secret-0123456789abcdef";

/// `auth.secrets` with alice's and bob's secrets.
fn two_users_config() -> String {
    format!(
        "auth:\n  secrets:\n    - {{sha256: {}, user: alice}}\n    - {{sha256: {}, user: bob}}\n",
        mcp_host::access::auth::hash_secret(ALICE),
        mcp_host::access::auth::hash_secret(BOB)
    )
}

/// `Authorization: Bearer <token>` and `Mcp-Session-Id: <session>`, as owned header pairs.
fn session_headers(token: Option<&str>, session: &str) -> Vec<(&'static str, String)> {
    let mut h = vec![("Mcp-Session-Id", session.to_owned())];
    if let Some(t) = token {
        h.push(("Authorization", format!("Bearer {t}")));
    }
    h
}

/// A legacy (2025-11-25) session of `token`'s user that may be asked for input.
fn legacy_session_of(s: &HttpServer, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let r = s.post(
        &[("Authorization", &auth)],
        &request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                   "clientInfo": {"name": "http-limits", "version": "0"}}),
        ),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let session = r.header("mcp-session-id").unwrap().to_owned();
    let h = session_headers(Some(token), &session);
    let ack = s.post(
        &header_refs(&h),
        &notification("notifications/initialized", Value::Null),
    );
    assert_eq!(ack.status, 202, "{ack:?}");
    session
}

// ---------------------------------------------------------------------------------------------
// M4: a legacy session answers only to its owner

#[test]
fn another_user_with_a_session_id_can_neither_use_nor_end_it_nor_answer_its_elicitation() {
    let (_l, cfg) = layout(
        &["fixture-basic", "fixture-conformance"],
        &two_users_config(),
    );
    let s = HttpServer::start(&cfg);
    let session = legacy_session_of(&s, ALICE);
    let ping = |token: Option<&str>| {
        let h = session_headers(token, &session);
        s.post(&header_refs(&h), &request(2, "ping", Value::Null))
    };
    // Bob, and an anonymous caller, with alice's session id: no such session, for every method.
    for intruder in [Some(BOB), None] {
        let r = ping(intruder);
        assert_eq!(r.status, 404, "POST with another's session: {r:?}");
        let h = session_headers(intruder, &session);
        let mut get = header_refs(&h);
        get.push(("Accept", "text/event-stream"));
        let r = s.connect().request("GET", "/mcp", &get, b"");
        assert_eq!(r.status, 404, "GET with another's session: {r:?}");
        let r = s.connect().request("DELETE", "/mcp", &header_refs(&h), b"");
        assert_eq!(r.status, 404, "DELETE of another's session: {r:?}");
    }
    assert_eq!(ping(Some(ALICE)).status, 200, "alice's session survived");
    // A plugin sees an id of its own for the session, never the one to replay.
    let h = session_headers(Some(ALICE), &session);
    let who = s.post(
        &header_refs(&h),
        &request(3, "tools/call", json!({"name": "whoami", "arguments": {}})),
    );
    let (text, is_error) = tool_text(&who);
    let who: Value = serde_json::from_str(&text).unwrap();
    assert!(!is_error && who["user_id"] == "alice", "{who}");
    let seen = who["session_id"].as_str().unwrap();
    assert!(seen.len() == 32 && seen != session, "{who}");

    // Alice's call asks her for input; bob's "accept" with her session id does not reach it.
    let mut call = s.connect();
    let h = session_headers(Some(ALICE), &session);
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend(header_refs(&h));
    let body = request(
        7,
        "tools/call",
        json!({"name": "test_elicitation", "arguments": {"message": "Delete everything?"}}),
    );
    call.send("POST", "/mcp", &all, body.to_string().as_bytes());
    let head = call.read_head();
    assert_eq!(head.status, 200, "{head:?}");
    let mut events = mcp_host_tests::serve::EventStream::new(call);
    let asked = events.next(WAIT);
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let answer = |action: &str, token: &str| {
        let h = session_headers(Some(token), &session);
        s.post(
            &header_refs(&h),
            &json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": action, "content": {"username": "mallory", "email": "m@evil.example"}}}),
        )
    };
    let injected = answer("accept", BOB);
    assert_eq!(
        injected.status, 404,
        "bob answered alice's question: {injected:?}"
    );
    let own = answer("decline", ALICE);
    assert_eq!(own.status, 202, "{own:?}");
    let done = events.next(WAIT);
    assert_eq!(done["id"], 7, "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("action=decline"), "{text}");
    assert_serves_others(&s);
}

// ---------------------------------------------------------------------------------------------
// M7: a batch's answers are bounded in total

#[test]
fn a_batchs_answers_are_bounded_in_total_and_the_rest_are_errors_naming_the_limit() {
    let (_l, cfg) = layout(&["fixture-basic", "mcp-text"], "");
    let mut s = HttpServer::start(&cfg);
    let (_, session) = s.initialize("2025-03-26");
    // 64 calls of ~3.6 KB, each answering ~1.8 MB of text (twice: text and structured content).
    let call = |i: usize| {
        request(
            i,
            "tools/call",
            json!({"name": "regex_replace", "arguments": {
                "pattern": "a", "text": "a".repeat(3000), "replacement": "b".repeat(600),
                "literal": true}}),
        )
    };
    let batch = Value::Array((0..64).map(call).collect());
    let r = s.post(&[("Mcp-Session-Id", &session)], &batch);
    assert_eq!(r.status, 200, "{:?}", r.status);
    // The default bound is limits.max_result_bytes (8 MiB): what one call may answer.
    assert!(r.body.len() < 10 << 20, "{} bytes answered", r.body.len());
    let answers = r.json();
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 64);
    assert_eq!(answers[0]["id"], 0);
    assert_eq!(
        answers[0]["result"]["isError"],
        Value::Null,
        "the first ran"
    );
    let refused: Vec<&Value> = answers
        .iter()
        .filter(|a| {
            a["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("limits.max_batch_answer_bytes"))
        })
        .collect();
    assert!(refused.len() >= 60, "{} refused", refused.len());
    assert!(refused.iter().all(|a| a["error"]["code"] == -32600));
    assert_eq!(answers[63]["id"], 63, "each refusal names its request");
    assert_serves_others(&s);
    assert_peak_rss(s.child().id());
}

// ---------------------------------------------------------------------------------------------
// M6: what one client may hold of the endpoint

/// A connection to `to` from loopback address `source` (any 127.x.y.z is this host), with a
/// receive buffer of `rcvbuf` bytes when given (a client that reads nothing fills it at once).
fn connect_from(source: [u8; 4], to: std::net::SocketAddr, rcvbuf: Option<u32>) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let stream = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        if let Some(size) = rcvbuf {
            socket.set_recv_buffer_size(size).unwrap();
        }
        socket.bind((source, 0).into()).unwrap();
        socket.connect(to).await.unwrap().into_std().unwrap()
    });
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.set_write_timeout(Some(WAIT)).unwrap();
    stream
}

/// A raw HTTP/1.1 request on `c`: `POST` with a JSON body, or `GET` without one.
fn send_raw(c: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: &str) {
    let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (k, v) in headers {
        raw.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        raw.push_str(&format!(
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    raw.push_str("\r\n");
    raw.push_str(body);
    c.write_all(raw.as_bytes()).unwrap();
}

/// The status of the response head read from `c` (its body is left unread); 0 if the server
/// closed the connection first.
fn read_status(c: &mut TcpStream) -> u16 {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match c.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            Ok(_) => return 0,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return 0,
            Err(e) => panic!(
                "no response head: {e} (so far {:?})",
                String::from_utf8_lossy(&head)
            ),
        }
    }
    let head = String::from_utf8_lossy(&head);
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The raw 2026 request for `method` (with `name`, for `tools/call`).
fn modern_raw(method: &str, params: Value) -> (Vec<(&'static str, String)>, String) {
    let params = with_meta(params);
    let headers = modern_headers(method, params.get("name").and_then(Value::as_str));
    (headers, request(1, method, params).to_string())
}

#[test]
fn one_address_holding_streams_and_connections_leaves_room_for_health_checks_and_others() {
    let (_l, cfg) = layout(
        &["fixture-basic"],
        "http: {max_connections: 20, max_streams_per_caller: 4, header_read_timeout_secs: 120}\n",
    );
    let s = HttpServer::start(&cfg);
    let (listen_headers, listen_body) = modern_raw("subscriptions/listen", json!({}));
    // 127.0.0.2 opens 20 connections, each asking for a listen stream: the review's attack took
    // every slot of `max_connections: 20` this way.
    let mut attacker: Vec<TcpStream> = (0..20)
        .map(|_| connect_from([127, 0, 0, 2], s.addr, None))
        .collect();
    for c in &mut attacker {
        send_raw(
            c,
            "POST",
            "/mcp",
            &header_refs(&listen_headers),
            &listen_body,
        );
    }
    let mut statuses: Vec<u16> = attacker.iter_mut().map(read_status).collect();
    statuses.sort_unstable();
    let count = |status: u16| statuses.iter().filter(|&&s| s == status).count();
    // Half the connections per address (10): 4 streams (its cap), 6 refused 429; the other 10
    // connections got health answers only.
    assert_eq!(
        (count(200), count(429), count(503)),
        (4, 6, 10),
        "{statuses:?}"
    );
    // 127.0.0.3 takes the other 10 slots (idle connections; accepted, in order, before any
    // connection below): every slot is taken, yet probes are answered, and anything else is
    // told to come back (503 with Retry-After), not left hanging.
    let idle: Vec<TcpStream> = (0..10)
        .map(|_| connect_from([127, 0, 0, 3], s.addr, None))
        .collect();
    assert_eq!(healthz(&s), 200, "a probe while every slot is taken");
    let livez = s.connect().request("GET", "/livez", &[], b"");
    assert_eq!(livez.status, 200);
    let r = call_at(&s, "/mcp", None, "echo", json!({"text": "no room"}));
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert!(r.text().contains("http.max_connections"), "{}", r.text());
    wait_for_log(&s, "served health answers only");
    // Once they go, everyone is served again.
    drop(idle);
    let deadline = Instant::now() + START;
    loop {
        let r = call_at(&s, "/mcp", None, "echo", json!({"text": "back"}));
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never served again: {r:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(attacker);
    assert_serves_others(&s);
}

#[test]
fn a_client_that_does_not_read_its_answer_is_closed_after_the_write_timeout() {
    let (_l, cfg) = layout(
        &["fixture-basic", "mcp-text"],
        "http: {max_connections: 4, max_connections_per_address: 1, write_timeout_secs: 1, header_read_timeout_secs: 300}\n\
         limits: {max_result_bytes: 33554432}\n\
         plugins:\n  mcp-text: {config: {max_answer_bytes: 8000000}}\n",
    );
    let s = HttpServer::start(&cfg);
    // 127.0.0.2 asks for ~16 MB (8 MB of text, twice) with a 4 KB receive buffer, and reads
    // nothing: more than the server's send buffer can take, so the answer's write waits.
    let mut stalled = connect_from([127, 0, 0, 2], s.addr, Some(4096));
    let (headers, body) = modern_raw(
        "tools/call",
        json!({"name": "regex_replace", "arguments": {
            "pattern": "a", "text": "a".repeat(8000), "replacement": "b".repeat(999),
            "literal": true}}),
    );
    send_raw(&mut stalled, "POST", "/mcp", &header_refs(&headers), &body);
    // It held its address's only slot; the write timeout gives it back.
    let (headers, body) = modern_raw(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "mine"}}),
    );
    let deadline = Instant::now() + START;
    loop {
        let mut c = connect_from([127, 0, 0, 2], s.addr, None);
        send_raw(&mut c, "POST", "/mcp", &header_refs(&headers), &body);
        let status = read_status(&mut c);
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "only health answers while the slot is held");
        assert!(
            Instant::now() < deadline,
            "the stalled client kept its slot:\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for_log(&s, "read nothing of its response");
    drop(stalled);
    assert_serves_others(&s);
}

// ---------------------------------------------------------------------------------------------
// L3, L4: the metrics endpoints

/// The address of the separate metrics listener, from the log.
fn metrics_addr(s: &HttpServer) -> std::net::SocketAddr {
    wait_for_log(s, "metrics on http://");
    let log = s.stderr();
    log.lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .parse()
        .unwrap()
}

fn scrape(addr: std::net::SocketAddr, host: Option<&str>) -> HttpResponse {
    let headers: Vec<(&str, &str)> = host.map(|h| ("Host", h)).into_iter().collect();
    HttpConn::connect(addr).request("GET", "/metrics", &headers, b"")
}

#[test]
fn metrics_refuse_a_foreign_host_on_both_listeners() {
    let (_l, cfg) = layout(&["fixture-basic"], "");
    let main = HttpServer::start(&cfg);
    let (_l2, cfg2) = layout(&["fixture-basic"], "metrics_listen: 127.0.0.1:0\n");
    let separate = HttpServer::start(&cfg2);
    for addr in [main.addr, metrics_addr(&separate)] {
        // A page of evil.example rebound to this address sends its own name.
        let r = scrape(addr, Some("evil.example"));
        assert_eq!(r.status, 403, "{r:?}");
        assert!(
            r.text().contains("Host evil.example is not allowed"),
            "{r:?}"
        );
        // A scraper names the host by its address (local here, or any IP).
        assert_eq!(scrape(addr, None).status, 200);
        assert_eq!(scrape(addr, Some("10.1.2.3:9090")).status, 200);
    }
}

#[test]
fn the_metrics_listener_closes_stalled_connections_and_a_flood_does_not_stop_it() {
    let (_l, cfg) = layout(
        &["fixture-basic"],
        "metrics_listen: 127.0.0.1:0\nhttp: {header_read_timeout_secs: 1}\n",
    );
    let s = HttpServer::start(&cfg);
    let addr = metrics_addr(&s);
    let mut stalled = HttpConn::connect(addr);
    stalled.send_raw(b"GET /metrics HTTP/1.1\r\nHo");
    stalled.set_read_timeout(START);
    assert!(
        stalled.closed_by_server(),
        "a connection that never finished its head stayed open"
    );
    // Three times the listener's connection limit of stalled sockets: a scrape waits its turn
    // in the backlog and is answered once the header timeout frees a slot.
    let _flood: Vec<TcpStream> = (0..3 * mcp_host::transport::http::metrics::MAX_CONNECTIONS)
        .map(|_| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
            c
        })
        .collect();
    let r = scrape(addr, None);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text().contains("# EOF"), "{}", r.text());
}

// ---------------------------------------------------------------------------------------------
// L13: anonymous callers behind a trusted proxy

/// An anonymous `echo` call sent with `X-Forwarded-For: forwarded`.
fn call_forwarded(s: &HttpServer, forwarded: &str) -> u16 {
    let (mut headers, body) = modern_raw(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"}}),
    );
    headers.push(("X-Forwarded-For", forwarded.to_owned()));
    s.connect()
        .post(&header_refs(&headers), body.as_bytes())
        .status
}

#[test]
fn forwarded_for_separates_anonymous_callers_only_behind_a_trusted_proxy() {
    let quota = "limits: {per_caller: {calls_per_sec: 0.01, burst: 2}}\n";
    let (_l, cfg) = layout(
        &["fixture-basic"],
        &format!("{quota}http: {{trusted_proxies: [127.0.0.1/32]}}\n"),
    );
    let behind_proxy = HttpServer::start(&cfg);
    for _ in 0..2 {
        assert_eq!(call_forwarded(&behind_proxy, "203.0.113.1"), 200);
    }
    assert_eq!(call_forwarded(&behind_proxy, "203.0.113.1"), 429);
    // A client behind the proxy writing another address in front does not escape its quota.
    assert_eq!(
        call_forwarded(&behind_proxy, "203.0.113.2, 203.0.113.1"),
        429
    );
    assert_eq!(
        call_forwarded(&behind_proxy, "203.0.113.2"),
        200,
        "another client behind the proxy has its own quota"
    );

    // The peer is not a trusted proxy: the header is ignored; both share the peer's quota.
    let (_l2, cfg2) = layout(
        &["fixture-basic"],
        &format!("{quota}http: {{trusted_proxies: [10.0.0.0/8]}}\n"),
    );
    let direct = HttpServer::start(&cfg2);
    for _ in 0..2 {
        assert_eq!(call_forwarded(&direct, "203.0.113.1"), 200);
    }
    assert_eq!(call_forwarded(&direct, "203.0.113.2"), 429);
}

// ---------------------------------------------------------------------------------------------
// Large messages that carry no payload (the initialize RSS note)

#[test]
fn large_initialize_and_other_payloadless_bodies_are_refused_before_they_are_parsed() {
    let (_l, cfg) = layout(&["fixture-basic"], "");
    let mut s = HttpServer::start(&cfg);
    // Eight 3.8 MB initialize bodies: each answered 413 naming the limit, none parsed.
    let big = request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25",
               "capabilities": {"experimental": ["y".repeat(3_800_000)]},
               "clientInfo": {"name": "x", "version": "0"}}),
    );
    for _ in 0..8 {
        let r = s.post(&[], &big);
        assert_eq!(r.status, 413, "{r:?}");
        assert!(
            r.text().contains("http.max_other_body_bytes"),
            "{}",
            r.text()
        );
    }
    // A repeated `method` does not slip a large one past the check.
    let sneaky = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"initialize","params":{{"pad":"{}"}}}}"#,
        "y".repeat(400_000)
    );
    let r = s.connect().post(&[], sneaky.as_bytes());
    assert_eq!(r.status, 413, "{r:?}");
    // A 2026 ping declaring a large body is refused by its header, before its body is read.
    let (headers, _) = modern_raw("ping", json!({}));
    let mut c = s.connect();
    let mut all = header_refs(&headers);
    all.extend([
        ("Content-Type", "application/json"),
        ("Content-Length", "3000000"),
    ]);
    c.send("POST", "/mcp", &all, b"");
    let r = c.read_response();
    assert_eq!(r.status, 413, "{r:?}");
    // A normal handshake, and a tools/call carrying 3 MB of arguments, are still served.
    s.initialize("2025-11-25");
    let r = call_at(
        &s,
        "/mcp",
        None,
        "echo",
        json!({"text": "z".repeat(3_000_000)}),
    );
    let (text, is_error) = tool_text(&r);
    assert!(!is_error && text.len() == 3_000_000);
    assert_serves_others(&s);
    assert_peak_rss(s.child().id());
}
