//! The Streamable HTTP transport end to end: `mcp-host serve --listen 127.0.0.1:0` as a child
//! process and a raw HTTP/1.1 client on real sockets. 2026-07-28 requests carry `_meta` plus the
//! `MCP-Protocol-Version` / `Mcp-Method` / `Mcp-Name` headers; legacy clients open a session with a
//! bare `initialize` and send its `Mcp-Session-Id`.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mcp_host_tests::serve::{
    HttpConn, HttpResponse, HttpServer, LEGACY, MODERN, WAIT, header_refs, layout, modern_headers,
    notification, request, result_text, with_meta,
};
use mcp_host_tests::{Layout, open_gate, wait_for_file};
use serde_json::{Value, json};

fn start(extra: &str) -> (Layout, HttpServer) {
    let (l, cfg) = layout(extra);
    (l, HttpServer::start(&cfg))
}

/// The JSON-RPC error code of a JSON error response, checking the status and content type.
fn rpc_error(resp: &HttpResponse, status: u16) -> i64 {
    assert_eq!(resp.status, status, "{resp:?} {}", resp.text());
    assert_eq!(resp.content_type(), "application/json", "{resp:?}");
    let body = resp.json();
    body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error response: {body}"))
}

/// A 2026 request with explicit headers (Content-Type and Accept are added).
fn post_with(s: &HttpServer, headers: &[(&str, &str)], body: &Value) -> HttpResponse {
    s.post(headers, body)
}

fn echo_body(id: i64, text: &str) -> Value {
    request(
        id,
        "tools/call",
        with_meta(json!({"name": "echo", "arguments": {"text": text}})),
    )
}

fn legacy_post(s: &HttpServer, session: &str, body: &Value) -> HttpResponse {
    s.post(
        &[
            ("Mcp-Session-Id", session),
            ("MCP-Protocol-Version", LEGACY),
        ],
        body,
    )
}

#[test]
fn modern_discover_list_and_a_plain_call_are_answered_as_json() {
    let (_l, s) = start("");
    let discover = s.modern(1, "server/discover", json!({}));
    assert_eq!(discover.status, 200, "{discover:?}");
    assert_eq!(discover.content_type(), "application/json");
    let d = discover.json();
    assert_eq!(d["id"], 1);
    let r = &d["result"];
    assert!(
        r["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!(MODERN)),
        "{d}"
    );
    assert_eq!(r["resultType"], "complete");
    assert!(r["ttlMs"].is_u64() && r["cacheScope"].is_string(), "{d}");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-host"
    );

    let list = s.modern(2, "tools/list", json!({}));
    assert_eq!(list.status, 200);
    assert_eq!(list.content_type(), "application/json");
    let l = list.json();
    assert_eq!(l["result"]["resultType"], "complete", "{l}");
    assert!(
        l["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "echo"),
        "{l}"
    );

    let call = s.modern(
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "grüße 世界 🎉"}}),
    );
    assert_eq!(call.status, 200, "{call:?}");
    assert_eq!(call.content_type(), "application/json", "{call:?}");
    let c = call.json();
    assert_eq!(result_text(&c), "grüße 世界 🎉");
    assert_eq!(c["result"]["resultType"], "complete");
}

#[test]
fn a_call_that_reports_progress_is_streamed_as_sse_with_notifications_before_the_result() {
    let (_l, s) = start("");
    let resp = s.modern(
        7,
        "tools/call",
        json!({"name": "count", "arguments": {"steps": 4}, "_meta": {"progressToken": "pt"}}),
    );
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.content_type(), "text/event-stream", "{resp:?}");
    assert_eq!(resp.header("x-accel-buffering"), Some("no"));
    let events = resp.events();
    let (last, notes) = events.split_last().unwrap();
    assert_eq!(last["id"], 7, "the result ends the stream: {events:?}");
    assert_eq!(result_text(last), "counted to 4");
    assert_eq!(notes.len(), 4, "{events:?}");
    let mut prev = f64::NEG_INFINITY;
    for n in notes {
        assert_eq!(n["method"], "notifications/progress", "{n}");
        assert_eq!(n["params"]["progressToken"], "pt");
        let p = n["params"]["progress"].as_f64().unwrap();
        assert!(p > prev, "{events:?}");
        prev = p;
    }
}

#[test]
fn log_notifications_are_streamed_only_when_the_request_sets_a_log_level() {
    let (_l, s) = start("");
    let plain = s.modern(
        1,
        "tools/call",
        json!({"name": "count", "arguments": {"steps": 2}}),
    );
    assert_eq!(plain.status, 200);
    assert_eq!(
        plain.content_type(),
        "application/json",
        "no logLevel, no progressToken: nothing to stream: {}",
        plain.text()
    );
    assert_eq!(result_text(&plain.json()), "counted to 2");

    let logged = s.modern(
        2,
        "tools/call",
        json!({"name": "count", "arguments": {"steps": 2},
               "_meta": {"io.modelcontextprotocol/logLevel": "info"}}),
    );
    assert_eq!(logged.content_type(), "text/event-stream", "{logged:?}");
    let events = logged.events();
    let logs: Vec<&Value> = events
        .iter()
        .filter(|e| e["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 2, "{events:?}");
    assert_eq!(logs[1]["params"]["data"], "step 2 of 2");
    assert_eq!(result_text(events.last().unwrap()), "counted to 2");
}

#[test]
fn a_missing_protocol_version_header_is_a_400_header_mismatch() {
    let (_l, s) = start("");
    let resp = post_with(
        &s,
        &[("Mcp-Method", "tools/list")],
        &request(5, "tools/list", with_meta(json!({}))),
    );
    assert_eq!(rpc_error(&resp, 400), -32020);
    assert_eq!(resp.json()["id"], 5, "errors echo the request id");
}

#[test]
fn a_protocol_version_header_that_differs_from_meta_is_a_400_header_mismatch() {
    let (_l, s) = start("");
    let resp = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", LEGACY),
            ("Mcp-Method", "tools/list"),
        ],
        &request(1, "tools/list", with_meta(json!({}))),
    );
    assert_eq!(rpc_error(&resp, 400), -32020);
}

#[test]
fn an_mcp_method_header_that_differs_from_the_body_is_a_400_header_mismatch() {
    let (_l, s) = start("");
    let resp = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/list"),
            ("Mcp-Name", "echo"),
        ],
        &echo_body(1, "x"),
    );
    assert_eq!(rpc_error(&resp, 400), -32020);
    let missing = post_with(
        &s,
        &[("MCP-Protocol-Version", MODERN)],
        &request(2, "tools/list", with_meta(json!({}))),
    );
    assert_eq!(rpc_error(&missing, 400), -32020);
}

#[test]
fn an_mcp_name_header_that_differs_or_is_missing_is_a_400_header_mismatch() {
    let (_l, s) = start("");
    let wrong = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "shout"),
        ],
        &echo_body(1, "x"),
    );
    assert_eq!(rpc_error(&wrong, 400), -32020);
    let missing = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
        ],
        &echo_body(2, "x"),
    );
    assert_eq!(rpc_error(&missing, 400), -32020);
    // Names are compared case-sensitively.
    let case = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "ECHO"),
        ],
        &echo_body(3, "x"),
    );
    assert_eq!(rpc_error(&case, 400), -32020);
}

#[test]
fn a_base64_encoded_mcp_name_is_decoded_and_invalid_base64_is_refused() {
    let (_l, s) = start("");
    let ok = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "=?base64?ZWNobw==?="),
        ],
        &echo_body(1, "decoded"),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(result_text(&ok.json()), "decoded");
    // Surrounding whitespace is not part of the value.
    let spaced = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "  tools/call "),
            ("Mcp-Name", " echo"),
        ],
        &echo_body(2, "spaced"),
    );
    assert_eq!(spaced.status, 200, "{}", spaced.text());
    let bad = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "=?base64?!!not base64!!?="),
        ],
        &echo_body(3, "x"),
    );
    assert_eq!(rpc_error(&bad, 400), -32020);
}

#[test]
fn an_argument_mirrored_in_an_mcp_param_header_must_match_it_and_be_sent_with_it() {
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let s = HttpServer::start(&l.config("tool_dirs: [d]\n"));
    let call = |id: i64, region: Option<&str>, header: Option<&str>| {
        let mut headers = vec![
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "test_header_param"),
        ];
        headers.extend(header.map(|h| ("Mcp-Param-Region", h)));
        let arguments = region.map_or(json!({}), |r| json!({ "region": r }));
        post_with(
            &s,
            &headers,
            &request(
                id,
                "tools/call",
                with_meta(json!({"name": "test_header_param", "arguments": arguments})),
            ),
        )
    };
    // Its value may be base64-encoded.
    let ok = call(1, Some("eu-west"), Some("eu-west"));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert!(result_text(&ok.json()).contains("eu-west"), "{}", ok.text());
    let encoded = call(2, Some("eu-west"), Some("=?base64?ZXUtd2VzdA==?="));
    assert_eq!(encoded.status, 200, "{}", encoded.text());
    // The same tool again: what its schema declares was read at its first call and kept.
    for (id, region, header) in [
        (3, Some("eu-west"), Some("us-east")),
        (4, Some("eu-west"), None),
        (5, None, Some("eu-west")),
    ] {
        let resp = call(id, region, header);
        assert_eq!(rpc_error(&resp, 400), -32020, "{region:?} / {header:?}");
        let message = resp.json()["error"]["message"].to_string();
        assert!(message.contains("Mcp-Param-Region"), "{message}");
    }
}

#[test]
fn an_unsupported_version_is_a_400_naming_the_supported_and_requested_versions() {
    let (_l, s) = start("");
    let mut body = request(4, "tools/list", with_meta(json!({})));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let resp = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", "1900-01-01"),
            ("Mcp-Method", "tools/list"),
        ],
        &body,
    );
    assert_eq!(rpc_error(&resp, 400), -32022);
    let err = resp.json()["error"].clone();
    assert_eq!(err["data"]["requested"], "1900-01-01", "{err}");
    let supported = err["data"]["supported"].as_array().unwrap();
    assert!(supported.contains(&json!(MODERN)), "{err}");
    assert_eq!(resp.json()["id"], 4);
}

#[test]
fn a_request_without_meta_is_a_400_invalid_params() {
    let (_l, s) = start("");
    let resp = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/list"),
        ],
        &request(1, "tools/list", json!({})),
    );
    assert_eq!(rpc_error(&resp, 400), -32602);
    let resp = post_with(
        &s,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/list"),
        ],
        &request(
            2,
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}),
        ),
    );
    assert_eq!(rpc_error(&resp, 400), -32602);
}

#[test]
fn unknown_and_removed_methods_are_404_method_not_found() {
    let (_l, s) = start("");
    for (id, method) in [
        (1, "unknown/method"),
        (2, "initialize"),
        (3, "ping"),
        (4, "logging/setLevel"),
        (5, "resources/subscribe"),
    ] {
        let resp = s.modern(id, method, json!({"level": "info"}));
        assert_eq!(rpc_error(&resp, 404), -32601, "{method}");
        assert_eq!(resp.json()["id"], id);
    }
}

#[test]
fn an_unknown_tool_is_invalid_params_and_bad_arguments_are_an_error_result() {
    let (_l, s) = start("");
    let unknown = s.modern(1, "tools/call", json!({"name": "nope", "arguments": {}}));
    assert_eq!(rpc_error(&unknown, 400), -32602);
    let bad = s.modern(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "a", "extra": true}}),
    );
    assert_eq!(bad.status, 200, "{}", bad.text());
    let b = bad.json();
    assert_eq!(b["result"]["isError"], true, "{b}");
    assert!(result_text(&b).contains("extra"), "{b}");
}

#[test]
fn a_notification_is_accepted_with_202_and_an_empty_body() {
    let (_l, s) = start("");
    for method in [
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/whatever",
    ] {
        let resp = post_with(
            &s,
            &[("MCP-Protocol-Version", MODERN), ("Mcp-Method", method)],
            &notification(method, json!({"requestId": 1})),
        );
        assert_eq!(resp.status, 202, "{method}: {resp:?}");
        assert!(resp.body.is_empty(), "{method}: {}", resp.text());
    }
}

#[test]
fn a_panicking_tool_gives_an_error_result_and_the_server_keeps_serving() {
    let (_l, s) = start("");
    let boom = s.modern(1, "tools/call", json!({"name": "explode"}));
    assert_eq!(boom.status, 200);
    let b = boom.json();
    assert_eq!(b["result"]["isError"], true, "{b}");
    assert_eq!(result_text(&b), "tool panicked: boom from a tool");
    let fine = s.modern(2, "tools/call", json!({"name": "still_fine"}));
    assert_eq!(result_text(&fine.json()), "still fine");
}

#[test]
fn a_hanging_tool_times_out_while_other_calls_keep_flowing() {
    let (_l, s) = start("limits: {call_timeout_secs: 1}\n");
    let began = Instant::now();
    let mut hang = s.connect();
    // async_sleep never looks at cancellation: only the host's timeout ends it, long before the
    // minute it asks for.
    let body = request(
        1,
        "tools/call",
        with_meta(json!({"name": "async_sleep", "arguments": {"millis": 60_000}})),
    );
    let h = modern_headers("tools/call", Some("async_sleep"));
    let mut headers = header_refs(&h);
    headers.push(("Content-Type", "application/json"));
    hang.send("POST", "/mcp", &headers, body.to_string().as_bytes());
    let echo = s.modern(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "ok"}}),
    );
    assert_eq!(result_text(&echo.json()), "ok");
    let worker = s.modern(
        3,
        "tools/call",
        json!({"name": "sleep", "arguments": {"millis": 10}}),
    );
    assert_eq!(result_text(&worker.json()), "slept");
    let resp = hang.read_response();
    let elapsed = began.elapsed();
    let r = resp.json();
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(result_text(&r), "timed out after 1 s");
    assert!(
        elapsed >= Duration::from_millis(950),
        "answered before its timeout, after {elapsed:?}"
    );
    // Its thread still sleeps; calls keep getting workers.
    let after = s.modern(
        4,
        "tools/call",
        json!({"name": "sleep", "arguments": {"millis": 10}}),
    );
    assert_eq!(result_text(&after.json()), "slept");
}

#[test]
fn a_legacy_initialize_opens_a_session_that_later_requests_use() {
    let (_l, s) = start("");
    let (init, session) = s.initialize(LEGACY);
    let i = init.json();
    assert_eq!(i["result"]["protocolVersion"], LEGACY, "{i}");
    assert_eq!(i["result"]["serverInfo"]["name"], "mcp-host");
    assert!(session.len() >= 16, "{session:?}");

    let list = legacy_post(&s, &session, &request(2, "tools/list", json!({})));
    assert_eq!(list.status, 200, "{}", list.text());
    let l = list.json();
    assert!(l["result"]["tools"].is_array(), "{l}");
    assert!(l["result"].get("resultType").is_none(), "{l}");

    let call = legacy_post(
        &s,
        &session,
        &request(
            3,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hé"}}),
        ),
    );
    assert_eq!(result_text(&call.json()), "hé");
    let ping = legacy_post(&s, &session, &request(4, "ping", Value::Null));
    assert_eq!(ping.json()["result"], json!({}));
    // A legacy client may omit MCP-Protocol-Version.
    let bare = s.post(
        &[("Mcp-Session-Id", &session)],
        &request(5, "ping", Value::Null),
    );
    assert_eq!(bare.json()["result"], json!({}), "{}", bare.text());

    // Progress over a legacy session is streamed too.
    let progress = legacy_post(
        &s,
        &session,
        &request(
            6,
            "tools/call",
            json!({"name": "count", "arguments": {"steps": 2}, "_meta": {"progressToken": 1}}),
        ),
    );
    assert_eq!(progress.content_type(), "text/event-stream");
    let events = progress.events();
    assert!(
        events
            .iter()
            .filter(|e| e["method"] == "notifications/progress")
            .count()
            == 2,
        "{events:?}"
    );
    assert_eq!(result_text(events.last().unwrap()), "counted to 2");

    // An unknown tool in a legacy session is a JSON-RPC error (HTTP 200: 404 would mean "session gone").
    let unknown = legacy_post(
        &s,
        &session,
        &request(7, "tools/call", json!({"name": "nope"})),
    );
    assert_eq!(rpc_error(&unknown, 200), -32602);
    let unsupported = s.post(
        &[
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "1900-01-01"),
        ],
        &request(8, "ping", Value::Null),
    );
    assert_eq!(rpc_error(&unsupported, 400), -32600);
}

#[test]
fn a_legacy_initialize_echoes_a_supported_version_and_offers_the_newest_for_an_unknown_one() {
    let (_l, s) = start("");
    let (init, _) = s.initialize("2025-06-18");
    assert_eq!(init.json()["result"]["protocolVersion"], "2025-06-18");
    let (init, _) = s.initialize("1999-01-01");
    assert_eq!(init.json()["result"]["protocolVersion"], "2025-11-25");
}

#[test]
fn an_unknown_session_id_is_404() {
    let (_l, s) = start("");
    let resp = legacy_post(
        &s,
        "00000000000000000000000000000000",
        &request(1, "tools/list", json!({})),
    );
    assert_eq!(resp.status, 404, "{}", resp.text());
}

#[test]
fn delete_ends_a_session_and_later_requests_with_it_get_404() {
    let (_l, s) = start("");
    let (_, session) = s.initialize(LEGACY);
    let ok = legacy_post(&s, &session, &request(1, "ping", Value::Null));
    assert_eq!(ok.status, 200);
    let del = s
        .connect()
        .request("DELETE", "/mcp", &[("Mcp-Session-Id", &session)], b"");
    assert_eq!(del.status, 200, "{del:?}");
    let gone = legacy_post(&s, &session, &request(2, "ping", Value::Null));
    assert_eq!(gone.status, 404, "{}", gone.text());
    let again = s
        .connect()
        .request("DELETE", "/mcp", &[("Mcp-Session-Id", &session)], b"");
    assert_eq!(again.status, 404);
    let none = s.connect().request("DELETE", "/mcp", &[], b"");
    assert_eq!(none.status, 405);
}

#[test]
fn get_with_a_session_opens_an_event_stream_and_without_one_is_405() {
    let (_l, s) = start("");
    let (mut conn, head) = s.open_legacy_get_stream(LEGACY);
    assert_eq!(head.status, 200, "{head:?}");
    let ct = head
        .headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.as_str());
    assert_eq!(ct, Some("text/event-stream"), "{head:?}");
    let first = conn.read_chunk().expect("the stream ended at once");
    assert!(
        String::from_utf8_lossy(&first).starts_with(':'),
        "{first:?}"
    );
    conn.close();

    let no_session = s
        .connect()
        .request("GET", "/mcp", &[("Accept", "text/event-stream")], b"");
    assert_eq!(no_session.status, 405, "{no_session:?}");
    let unknown = s.connect().request(
        "GET",
        "/mcp",
        &[("Mcp-Session-Id", "nope"), ("Accept", "text/event-stream")],
        b"",
    );
    assert_eq!(unknown.status, 404);
}

#[test]
fn a_foreign_origin_or_host_is_403_and_a_localhost_origin_is_accepted() {
    let (_l, s) = start("");
    let body = request(1, "server/discover", with_meta(json!({})));
    let h = modern_headers("server/discover", None);
    let base = header_refs(&h);
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut all = base.clone();
        all.extend_from_slice(extra);
        s.post(&all, &body)
    };
    let evil = with(&[("Origin", "http://evil.example.com")]);
    assert_eq!(evil.status, 403, "{evil:?}");
    let rebinding = with(&[
        ("Host", "evil.example.com"),
        ("Origin", "http://evil.example.com"),
    ]);
    assert_eq!(rebinding.status, 403, "{rebinding:?}");
    let host = with(&[("Host", "evil.example.com:80")]);
    assert_eq!(host.status, 403, "{host:?}");
    let lookalike = with(&[("Origin", "http://localhost.evil.example.com")]);
    assert_eq!(lookalike.status, 403, "{lookalike:?}");
    for origin in [
        "http://localhost:3000",
        "http://127.0.0.1:9999",
        "http://[::1]:8080",
    ] {
        let local = s.post(&[base.as_slice(), &[("Origin", origin)]].concat(), &body);
        assert_eq!(local.status, 200, "{origin}: {local:?}");
    }
    let local_host = with(&[("Host", "localhost")]);
    assert_eq!(local_host.status, 200, "{local_host:?}");
}

#[test]
fn a_body_over_the_cap_is_413_whether_declared_or_streamed() {
    let (_l, s) = start("http: {max_body_bytes: 1024}\n");
    let big = echo_body(1, &"x".repeat(2000)).to_string();
    let h = modern_headers("tools/call", Some("echo"));
    let mut headers = header_refs(&h);
    headers.push(("Content-Type", "application/json"));
    let declared = s
        .connect()
        .request("POST", "/mcp", &headers, big.as_bytes());
    assert_eq!(declared.status, 413, "{declared:?}");

    // Chunked, with no Content-Length: the cap applies while reading.
    let mut chunked = Vec::new();
    for part in big.as_bytes().chunks(300) {
        chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        chunked.extend_from_slice(part);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let mut streamed_headers = headers.clone();
    streamed_headers.push(("Transfer-Encoding", "chunked"));
    let streamed = s
        .connect()
        .request("POST", "/mcp", &streamed_headers, &chunked);
    assert_eq!(streamed.status, 413, "{streamed:?}");

    let small = s.modern(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x".repeat(500)}}),
    );
    assert_eq!(small.status, 200, "{}", small.text());
}

#[test]
fn malformed_json_is_a_400_parse_error_and_a_wrong_content_type_is_415() {
    let (_l, s) = start("");
    let h = modern_headers("tools/list", None);
    let mut headers = header_refs(&h);
    headers.push(("Content-Type", "application/json"));
    let resp = s
        .connect()
        .request("POST", "/mcp", &headers, b"{\"jsonrpc\": \"2.0\", ");
    assert_eq!(rpc_error(&resp, 400), -32700);
    assert_eq!(resp.json()["id"], Value::Null);
    headers.pop();
    headers.push(("Content-Type", "text/plain"));
    let body = request(1, "tools/list", with_meta(json!({}))).to_string();
    let wrong = s
        .connect()
        .request("POST", "/mcp", &headers, body.as_bytes());
    assert_eq!(wrong.status, 415, "{wrong:?}");
}

#[test]
fn requests_share_one_keep_alive_connection_across_json_and_sse_responses() {
    let (_l, s) = start("");
    let mut conn = s.connect();
    let h = modern_headers("tools/list", None);
    let list_headers = header_refs(&h);
    let list = request(1, "tools/list", with_meta(json!({}))).to_string();
    let first = conn.post(&list_headers, list.as_bytes());
    assert_eq!(first.status, 200);
    let h = modern_headers("tools/call", Some("count"));
    let count_headers = header_refs(&h);
    let count = request(
        2,
        "tools/call",
        with_meta(
            json!({"name": "count", "arguments": {"steps": 2}, "_meta": {"progressToken": 2}}),
        ),
    )
    .to_string();
    let second = conn.post(&count_headers, count.as_bytes());
    assert_eq!(second.content_type(), "text/event-stream");
    assert_eq!(result_text(&second.message()), "counted to 2");
    let third = conn.post(&list_headers, list.as_bytes());
    assert_eq!(third.status, 200);
    assert!(third.json()["result"]["tools"].is_array());
    let health = conn.request("GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200);
}

#[test]
fn healthz_is_200_and_other_paths_are_404() {
    let (_l, s) = start("");
    let health = s.connect().request("GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
    let other = s.connect().request("POST", "/elsewhere", &[], b"{}");
    assert_eq!(other.status, 404);
}

#[test]
fn closing_the_event_stream_of_a_call_cancels_it_and_frees_its_worker() {
    // One worker: the follow-up call can only run once the streaming call has let go of it.
    let (_l, s) = start("limits: {max_concurrent_calls: 1}\n");
    let mut conn = s.connect();
    let h = modern_headers("tools/call", Some("tick"));
    let mut headers = header_refs(&h);
    headers.push(("Content-Type", "application/json"));
    let body = request(
        1,
        "tools/call",
        with_meta(
            json!({"name": "tick", "arguments": {"millis": 600_000}, "_meta": {"progressToken": "t"}}),
        ),
    );
    conn.send("POST", "/mcp", &headers, body.to_string().as_bytes());
    let head = conn.read_head();
    assert_eq!(head.status, 200);
    let first = conn.read_chunk().expect("no first event");
    let events = mcp_host_tests::serve::sse_events(&String::from_utf8_lossy(&first));
    assert_eq!(events[0]["method"], "notifications/progress", "{events:?}");
    conn.close();

    assert_the_only_worker_is_free(&s);
}

/// With `max_concurrent_calls: 1`, a short call is answered only if the abandoned one (whose
/// gate never opens) was cancelled and let go of the single worker.
fn assert_the_only_worker_is_free(s: &HttpServer) {
    let next = s.modern(
        2,
        "tools/call",
        json!({"name": "sleep", "arguments": {"millis": 10}}),
    );
    assert_eq!(result_text(&next.json()), "slept");
}

/// Start a 2026 `wait_for` call on `conn` (JSON response) and wait until it runs.
fn start_gated_call(conn: &mut HttpConn, l: &Layout) {
    let (gate, running) = (l.root.path().join("gate"), l.root.path().join("running"));
    let h = modern_headers("tools/call", Some("wait_for"));
    let mut headers = header_refs(&h);
    headers.push(("Content-Type", "application/json"));
    let body = request(
        1,
        "tools/call",
        with_meta(json!({"name": "wait_for", "arguments": {"path": gate, "started": running}})),
    );
    conn.send("POST", "/mcp", &headers, body.to_string().as_bytes());
    wait_for_file(&running);
}

#[test]
fn dropping_the_connection_of_a_pending_json_call_cancels_it() {
    let (l, s) = start("limits: {max_concurrent_calls: 1}\n");
    let mut conn = s.connect();
    start_gated_call(&mut conn, &l);
    conn.close();

    assert_the_only_worker_is_free(&s);
}

#[test]
fn a_legacy_cancelled_notification_stops_the_named_call() {
    let (l, s) = start("limits: {max_concurrent_calls: 1}\n");
    let (_, session) = s.initialize(LEGACY);
    let mut slow = s.connect();
    let (gate, running) = (l.root.path().join("gate"), l.root.path().join("running"));
    let body = request(
        "slow",
        "tools/call",
        json!({"name": "wait_for", "arguments": {"path": gate, "started": running}}),
    );
    slow.send(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", LEGACY),
        ],
        body.to_string().as_bytes(),
    );
    wait_for_file(&running);
    let cancel = legacy_post(
        &s,
        &session,
        &notification("notifications/cancelled", json!({"requestId": "slow"})),
    );
    assert_eq!(cancel.status, 202);
    // The gate never opens: only the cancellation can free the single worker for this call.
    let next = legacy_post(
        &s,
        &session,
        &request(
            2,
            "tools/call",
            json!({"name": "sleep", "arguments": {"millis": 10}}),
        ),
    );
    assert_eq!(result_text(&next.json()), "slept");
    // The cancelled POST is closed out too (it cannot be left hanging).
    let closed = slow.read_response();
    assert!(closed.status < 500, "{closed:?}");
}

#[test]
fn sigterm_lets_an_in_flight_call_finish_refuses_new_connections_and_exits_zero() {
    let (l, mut s) = start("");
    let mut conn = s.connect();
    start_gated_call(&mut conn, &l);
    s.child().terminate();
    // The listener closes while the call is still in flight (its gate is shut).
    let deadline = Instant::now() + WAIT;
    loop {
        if std::net::TcpStream::connect_timeout(&s.addr, Duration::from_millis(200)).is_err() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still accepting connections after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    open_gate(&l.root.path().join("gate"), "released");
    let resp = conn.read_response();
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(result_text(&resp.json()), "released");
    let status = s
        .child()
        .wait_timeout(WAIT)
        .unwrap_or_else(|| panic!("still running after SIGTERM:\n{}", s.stderr()));
    assert!(status.success(), "{status:?}\n{}", s.stderr());
}

#[test]
fn concurrent_calls_on_separate_connections_run_in_parallel() {
    let (l, s) = start("");
    let gate = l.root.path().join("gate");
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let (s, gate) = (&s, &gate);
                let running = l.root.path().join(format!("running-{i}"));
                scope.spawn(move || {
                    s.modern(
                        i,
                        "tools/call",
                        json!({"name": "wait_for", "arguments": {"path": gate, "started": running}}),
                    )
                })
            })
            .collect();
        // All four run at once: each has started while the gate they wait on is still shut.
        for i in 0..4 {
            wait_for_file(&l.root.path().join(format!("running-{i}")));
        }
        open_gate(&gate, "released");
        for h in handles {
            let resp = h.join().unwrap();
            assert_eq!(result_text(&resp.json()), "released");
        }
    });
}

#[test]
fn the_response_type_depends_only_on_whether_the_request_sent_notifications() {
    // Regression: the reply raced the notification channel. A request whose notifier closed first
    // was answered `200 text/event-stream` even when it was a 400 error, and a fast call whose reply
    // was seen first lost its queued progress notifications. Several connections at once and busy
    // CPUs (so server threads get preempted) make both races likely.
    let (_l, s) = start("");
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let clients: Vec<_> = (0..4)
            .map(|t| {
                let s = &s;
                scope.spawn(move || {
                    let mut conn = s.connect();
                    let unknown_h = modern_headers("tools/call", Some("nope"));
                    let echo_h = modern_headers("tools/call", Some("echo"));
                    let count_h = modern_headers("tools/call", Some("count"));
                    for i in 0..60 {
                        let what = format!("thread {t} round {i}");
                        let unknown = request(
                            i,
                            "tools/call",
                            with_meta(json!({"name": "nope", "arguments": {}})),
                        );
                        let resp =
                            conn.post(&header_refs(&unknown_h), unknown.to_string().as_bytes());
                        assert_eq!(rpc_error(&resp, 400), -32602, "{what}");

                        let echo = echo_body(i, "plain").to_string();
                        let resp = conn.post(&header_refs(&echo_h), echo.as_bytes());
                        assert_eq!(resp.status, 200, "{what}");
                        assert_eq!(resp.content_type(), "application/json", "{what}");

                        let count = request(
                            i,
                            "tools/call",
                            with_meta(json!({"name": "count", "arguments": {"steps": 2},
                                             "_meta": {"progressToken": i}})),
                        );
                        let resp = conn.post(&header_refs(&count_h), count.to_string().as_bytes());
                        assert_eq!(
                            resp.content_type(),
                            "text/event-stream",
                            "{what}: {}",
                            resp.text()
                        );
                        let events = resp.events();
                        assert_eq!(events.len(), 3, "{what}: {events:?}");
                        assert_eq!(result_text(&events[2]), "counted to 2", "{what}");
                    }
                })
            })
            .collect();
        let results: Vec<_> = clients.into_iter().map(|c| c.join()).collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
    });
}
