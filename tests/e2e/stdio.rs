//! The stdio transport end to end: `mcp-host serve --stdio` as a child process, newline-delimited
//! JSON-RPC over its real pipes, in both protocol eras (2026-07-28 stateless requests carrying
//! `_meta`, and legacy sessions opened by a bare `initialize`).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mcp_host_tests::serve::{
    LEGACY, MODERN, StdioServer, WAIT, layout, notification, request, result_text, with_meta,
};
use mcp_host_tests::{Layout, open_gate, wait_for_file};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Era {
    Modern,
    Legacy,
}

const ERAS: [Era; 2] = [Era::Modern, Era::Legacy];

/// A server on fixture-basic + fixture-faulty with `extra` config; legacy servers are initialized.
fn start(era: Era, extra: &str) -> (Layout, StdioServer) {
    let (l, cfg) = layout(extra);
    let mut s = StdioServer::start(&cfg);
    if era == Era::Legacy {
        let init = s.initialize(LEGACY);
        assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");
    }
    (l, s)
}

/// Request params for `era` (2026 requests carry `_meta`).
fn params(era: Era, p: Value) -> Value {
    match era {
        Era::Modern => with_meta(p),
        Era::Legacy => {
            if p.is_null() {
                json!({})
            } else {
                p
            }
        }
    }
}

fn call_tool(s: &mut StdioServer, era: Era, id: &str, name: &str, args: Value) -> Value {
    s.call(
        id,
        "tools/call",
        params(era, json!({ "name": name, "arguments": args })),
    )
}

fn error_code(resp: &Value) -> i64 {
    resp["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error response: {resp}"))
}

#[test]
fn legacy_initialize_echoes_a_supported_version_and_offers_the_newest_for_an_unknown_one() {
    let (_l, cfg) = layout("");
    let mut s = StdioServer::start(&cfg);
    let init = s.initialize("2025-06-18");
    let result = &init["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(result["serverInfo"]["name"], "mcp-host");
    assert!(result["capabilities"]["tools"].is_object(), "{init}");
    assert!(
        result.get("resultType").is_none(),
        "legacy results carry no 2026 fields: {init}"
    );
    // The connection is initialized once.
    let again = s.call(
        2,
        "initialize",
        json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}),
    );
    assert_eq!(error_code(&again), -32600, "{again}");

    let mut other = StdioServer::start(&cfg);
    let init = other.initialize("1999-01-01");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
}

#[test]
fn a_legacy_session_lists_and_calls_tools_without_meta() {
    let (_l, mut s) = start(Era::Legacy, "");
    let list = s.call(1, "tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let echo = tools
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(echo["inputSchema"]["type"], "object");
    assert!(
        list["result"].get("resultType").is_none() && list["result"].get("ttlMs").is_none(),
        "legacy tools/list has the 2025 shape: {list}"
    );
    let call = call_tool(&mut s, Era::Legacy, "2", "echo", json!({"text": "hi"}));
    assert_eq!(result_text(&call), "hi");
    assert!(call["result"].get("isError").is_none_or(|e| e == false));
    assert_eq!(s.call(3, "ping", Value::Null)["result"], json!({}));
}

#[test]
fn a_modern_client_discovers_lists_and_calls_without_a_handshake() {
    let (_l, mut s) = start(Era::Modern, "");
    let discover = s.call(1, "server/discover", with_meta(json!({})));
    let r = &discover["result"];
    let versions: Vec<&str> = r["supportedVersions"]
        .as_array()
        .unwrap_or_else(|| panic!("{discover}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        versions.contains(&MODERN) && versions.contains(&LEGACY),
        "{discover}"
    );
    assert!(r["capabilities"]["tools"].is_object(), "{discover}");
    assert_eq!(r["resultType"], "complete");
    assert!(r["ttlMs"].is_u64(), "{discover}");
    assert!(
        r["cacheScope"] == "public" || r["cacheScope"] == "private",
        "{discover}"
    );
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcp-host",
        "{discover}"
    );
    assert!(r.get("serverInfo").is_none(), "serverInfo goes in _meta");

    let list = s.call_modern(2, "tools/list", json!({}));
    let r = &list["result"];
    assert_eq!(r["resultType"], "complete", "{list}");
    assert!(r["ttlMs"].is_u64(), "{list}");
    assert!(r["cacheScope"].is_string(), "{list}");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-host"
    );
    let tools = r["tools"].as_array().unwrap();
    for name in ["echo", "count", "sleep", "explode"] {
        let t = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {list}"));
        assert!(t["description"].is_string(), "{t}");
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
    }

    let call = call_tool(&mut s, Era::Modern, "3", "echo", json!({"text": "hi"}));
    assert_eq!(result_text(&call), "hi");
    assert_eq!(call["result"]["resultType"], "complete", "{call}");
    assert_eq!(
        call["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-host"
    );
}

#[test]
fn initialize_ping_and_set_level_do_not_exist_in_2026() {
    let (_l, mut s) = start(Era::Modern, "");
    for (id, method) in [
        (1, "initialize"),
        (2, "ping"),
        (3, "logging/setLevel"),
        (4, "resources/subscribe"),
    ] {
        let resp = s.call_modern(
            id,
            method,
            json!({"protocolVersion": LEGACY, "capabilities": {}, "level": "info"}),
        );
        assert_eq!(error_code(&resp), -32601, "{method}: {resp}");
        assert_eq!(resp["id"], id);
    }
    // The failed initialize opened no session: a request without _meta is still refused.
    let bare = s.call(5, "tools/list", json!({}));
    assert_eq!(error_code(&bare), -32602, "{bare}");
}

#[test]
fn a_request_without_meta_before_initialize_is_invalid_params() {
    let (_l, mut s) = start(Era::Modern, "");
    let resp = s.call(1, "tools/list", Value::Null);
    assert_eq!(error_code(&resp), -32602, "{resp}");
    let msg = resp["error"]["message"].as_str().unwrap();
    assert!(msg.contains("_meta"), "{msg}");
    // Half a _meta (no client capabilities) is refused too.
    let half = s.call(
        2,
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}),
    );
    assert_eq!(error_code(&half), -32602, "{half}");
}

#[test]
fn an_unparsable_line_gets_a_parse_error_and_the_server_keeps_serving() {
    let (_l, mut s) = start(Era::Modern, "");
    s.send_raw("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ");
    let (resp, _) = s.response_within(&Value::Null, WAIT);
    assert_eq!(error_code(&resp), -32700, "{resp}");
    s.send_raw("this is not json");
    let (resp, _) = s.response_within(&Value::Null, WAIT);
    assert_eq!(error_code(&resp), -32700, "{resp}");
    let list = s.call_modern(2, "tools/list", json!({}));
    assert!(list["result"]["tools"].is_array(), "{list}");
}

#[test]
fn malformed_messages_get_invalid_request_with_the_id_when_known() {
    let (_l, mut s) = start(Era::Modern, "");
    let cases: [(&str, Value); 5] = [
        (
            r#"{"jsonrpc":"1.0","id":7,"method":"tools/list"}"#,
            json!(7),
        ),
        (r#"{"jsonrpc":"2.0","id":8}"#, json!(8)),
        (r#"{"jsonrpc":"2.0","id":9,"method":42}"#, json!(9)),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
            Value::Null,
        ),
        (
            r#"[{"jsonrpc":"2.0","id":10,"method":"tools/list"}]"#,
            Value::Null,
        ),
    ];
    for (line, id) in cases {
        s.send_raw(line);
        let (resp, _) = s.response_within(&id, WAIT);
        assert_eq!(error_code(&resp), -32600, "{line}: {resp}");
    }
    let ok = s.call_modern(11, "tools/list", json!({}));
    assert!(ok["result"].is_object(), "{ok}");
}

#[test]
fn unknown_methods_and_unknown_tools_are_protocol_errors_in_both_eras() {
    for era in ERAS {
        let (_l, mut s) = start(era, "");
        let resp = s.call(1, "no/such/method", params(era, json!({})));
        assert_eq!(error_code(&resp), -32601, "{era:?}: {resp}");
        let resp = call_tool(&mut s, era, "2", "no_such_tool", json!({}));
        assert_eq!(error_code(&resp), -32602, "{era:?}: {resp}");
        assert!(
            resp["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no_such_tool"),
            "{resp}"
        );
    }
}

#[test]
fn notifications_get_no_response() {
    for era in ERAS {
        let (_l, mut s) = start(era, "");
        s.send(&notification("notifications/initialized", Value::Null));
        s.send(&notification(
            "notifications/cancelled",
            json!({"requestId": 12345, "reason": "nothing to cancel"}),
        ));
        s.send(&notification("notifications/unknown", json!({})));
        s.send(&request(1, "tools/list", params(era, json!({}))));
        let first = s.recv(WAIT).expect("no response to tools/list");
        assert_eq!(
            first["id"], 1,
            "{era:?}: something answered a notification: {first}"
        );
        s.assert_quiet(Duration::from_millis(300));
    }
}

#[test]
fn arguments_that_fail_the_schema_give_an_error_result_naming_the_argument() {
    for era in ERAS {
        let (_l, mut s) = start(era, "");
        let cases = [
            ("echo", json!({"text": 42}), "text"),
            ("echo", json!({}), "text"),
            ("sleep", json!({"millis": "soon"}), "millis"),
            ("count", json!({"steps": 1000}), "steps"),
            // An argument the tool does not declare is refused, and named.
            ("echo", json!({"text": "a", "bogus": 1}), "bogus"),
        ];
        for (i, (tool, args, named)) in cases.into_iter().enumerate() {
            let resp = call_tool(&mut s, era, &format!("c{i}"), tool, args.clone());
            assert!(
                resp.get("error").is_none(),
                "{era:?} {tool} {args}: a tool-input error is a result, not a JSON-RPC error: {resp}"
            );
            assert_eq!(
                resp["result"]["isError"], true,
                "{era:?} {tool} {args}: {resp}"
            );
            let text = result_text(&resp);
            assert!(
                text.contains(named),
                "{era:?} {tool} {args}: {text:?} does not name {named}"
            );
        }
    }
}

#[test]
fn a_plugin_printing_to_stdout_does_not_corrupt_the_stream_and_the_print_goes_to_stderr() {
    for era in ERAS {
        let (_l, mut s) = start(era, "");
        let resp = call_tool(&mut s, era, "n1", "noisy", json!({}));
        assert_eq!(result_text(&resp), "quiet result");
        let resp = call_tool(&mut s, era, "n2", "noisy", json!({}));
        assert_eq!(result_text(&resp), "quiet result");
        let after = call_tool(&mut s, era, "e", "echo", json!({"text": "still clean"}));
        assert_eq!(result_text(&after), "still clean");
        // Every stdout line was parsed as JSON on the way in; none of them carries the print.
        assert!(!s.seen.is_empty());
        assert!(s.seen.iter().all(|l| !l.contains("NOISE")), "{:?}", s.seen);
        let deadline = Instant::now() + WAIT;
        while !s.stderr().contains("NOISE FROM PLUGIN STDOUT") {
            assert!(
                Instant::now() < deadline,
                "the print never reached stderr:\n{}",
                s.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn progress_notifications_arrive_before_the_result_and_increase() {
    for era in ERAS {
        let (_l, mut s) = start(era, "");
        let token = match era {
            Era::Modern => json!("tok-1"),
            Era::Legacy => json!(77),
        };
        s.send(&request(
            "p",
            "tools/call",
            params(
                era,
                json!({"name": "count", "arguments": {"steps": 5}, "_meta": {"progressToken": token}}),
            ),
        ));
        let (resp, notes) = s.response_within(&json!("p"), WAIT);
        assert_eq!(result_text(&resp), "counted to 5");
        let progress: Vec<&Value> = notes
            .iter()
            .filter(|n| n["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 5, "{era:?}: {notes:?}");
        let mut last = f64::NEG_INFINITY;
        for n in &progress {
            assert_eq!(n["params"]["progressToken"], token, "{n}");
            assert_eq!(n["params"]["total"], 5.0, "{n}");
            let p = n["params"]["progress"].as_f64().unwrap();
            assert!(p > last, "{era:?}: progress not increasing: {notes:?}");
            last = p;
        }
        // Nothing for this call comes after its result.
        s.assert_quiet(Duration::from_millis(200));
    }
}

#[test]
fn without_a_progress_token_or_log_level_a_2026_call_sends_no_notifications() {
    let (_l, mut s) = start(Era::Modern, "");
    s.send(&request(
        1,
        "tools/call",
        with_meta(json!({"name": "count", "arguments": {"steps": 3}})),
    ));
    let (resp, notes) = s.response_within(&json!(1), WAIT);
    assert_eq!(result_text(&resp), "counted to 3");
    assert!(notes.is_empty(), "{notes:?}");
    s.assert_quiet(Duration::from_millis(200));
}

#[test]
fn a_2026_call_gets_log_notifications_only_at_or_above_the_level_it_asks_for() {
    let (_l, mut s) = start(Era::Modern, "");
    let call = |s: &mut StdioServer, id: &str, level: Option<&str>| {
        let mut meta = json!({});
        if let Some(level) = level {
            meta["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        s.send(&request(
            id,
            "tools/call",
            with_meta(json!({"name": "count", "arguments": {"steps": 2}, "_meta": meta})),
        ));
        let (resp, notes) = s.response_within(&json!(id), WAIT);
        assert_eq!(result_text(&resp), "counted to 2");
        notes
    };
    let notes = call(&mut s, "a", Some("info"));
    let logs: Vec<&Value> = notes
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 2, "{notes:?}");
    assert_eq!(logs[0]["params"]["level"], "info");
    assert_eq!(logs[0]["params"]["data"], "step 1 of 2");
    assert!(
        notes
            .iter()
            .all(|n| n["method"] != "notifications/progress"),
        "no progress without a token: {notes:?}"
    );
    assert!(call(&mut s, "b", Some("warning")).is_empty());
    assert!(call(&mut s, "c", None).is_empty());
    s.assert_quiet(Duration::from_millis(200));
}

#[test]
fn a_legacy_session_gets_log_notifications_at_the_level_set_by_logging_set_level() {
    let (_l, mut s) = start(Era::Legacy, "");
    let count = |s: &mut StdioServer, id: &str| {
        s.send(&request(
            id,
            "tools/call",
            json!({"name": "count", "arguments": {"steps": 3}}),
        ));
        let (resp, notes) = s.response_within(&json!(id), WAIT);
        assert_eq!(result_text(&resp), "counted to 3");
        notes
            .into_iter()
            .filter(|n| n["method"] == "notifications/message")
            .count()
    };
    let set = s.call(1, "logging/setLevel", json!({"level": "warning"}));
    assert_eq!(set["result"], json!({}), "{set}");
    assert_eq!(count(&mut s, "quiet"), 0, "info logs above a warning level");
    let set = s.call(2, "logging/setLevel", json!({"level": "debug"}));
    assert_eq!(set["result"], json!({}), "{set}");
    assert_eq!(count(&mut s, "loud"), 3);
    let bad = s.call(3, "logging/setLevel", json!({"level": "chatty"}));
    assert_eq!(error_code(&bad), -32602, "{bad}");
}

#[test]
fn a_cancelled_notification_stops_the_running_call_and_suppresses_its_response() {
    for era in ERAS {
        // One worker: the follow-up call can only run once the cancelled one has let go of it.
        let (l, mut s) = start(era, "limits: {max_concurrent_calls: 1}\n");
        let (gate, running) = (l.root.path().join("gate"), l.root.path().join("running"));
        s.send(&request(
            "slow",
            "tools/call",
            params(
                era,
                json!({"name": "wait_for", "arguments": {"path": gate, "started": running}}),
            ),
        ));
        wait_for_file(&running);
        s.send(&notification(
            "notifications/cancelled",
            json!({"requestId": "slow", "reason": "user gave up"}),
        ));
        // The gate never opens: only the cancellation can free the single worker for this call.
        let next = call_tool(&mut s, era, "next", "sleep", json!({"millis": 10}));
        assert_eq!(result_text(&next), "slept");
        s.assert_quiet(Duration::from_millis(400));
        assert!(
            s.seen.iter().all(|l| !l.contains("\"slow\"")),
            "{era:?}: a cancelled request was answered: {:?}",
            s.seen
        );
    }
}

fn slow_call_does_not_delay_other_requests(era: Era) {
    let (l, mut s) = start(era, "");
    let (gate, running) = (l.root.path().join("gate"), l.root.path().join("running"));
    s.send(&request(
        "slow",
        "tools/call",
        params(
            era,
            json!({"name": "wait_for", "arguments": {"path": gate, "started": running}}),
        ),
    ));
    wait_for_file(&running);
    let mut quick: Vec<(&str, Value)> = vec![
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "fast"}}),
        ),
        (
            "tools/call",
            json!({"name": "sleep", "arguments": {"millis": 10}}),
        ),
    ];
    match era {
        Era::Legacy => quick.push(("ping", json!({}))),
        Era::Modern => quick.push(("server/discover", json!({}))),
    }
    // The slow call cannot end before its gate opens, so every answer here came while it ran.
    for (i, (method, p)) in quick.into_iter().enumerate() {
        let resp = s.call(i as u64, method, params(era, p));
        assert!(resp.get("result").is_some(), "{method}: {resp}");
    }
    assert!(
        s.seen.iter().all(|l| !l.contains("\"slow\"")),
        "the slow call ended before its gate opened: {:?}",
        s.seen
    );
    open_gate(&gate, "released");
    let (slow, _) = s.response_within(&json!("slow"), WAIT);
    assert_eq!(result_text(&slow), "released");
}

#[test]
fn a_slow_call_does_not_delay_other_requests_in_2026() {
    slow_call_does_not_delay_other_requests(Era::Modern);
}

#[test]
fn a_slow_call_does_not_delay_other_requests_in_a_legacy_session() {
    slow_call_does_not_delay_other_requests(Era::Legacy);
}

#[test]
fn a_hanging_tool_times_out_while_other_calls_keep_flowing() {
    for era in ERAS {
        let (_l, mut s) = start(era, "limits: {call_timeout_secs: 1}\n");
        let began = Instant::now();
        // async_sleep never looks at cancellation: only the host's timeout ends it, long before
        // the minute it asks for.
        s.send(&request(
            "hang",
            "tools/call",
            params(
                era,
                json!({"name": "async_sleep", "arguments": {"millis": 60_000}}),
            ),
        ));
        // Calls keep being answered, inline and on a worker thread, while it hangs and after.
        for n in 0..3 {
            let resp = call_tool(&mut s, era, &format!("e{n}"), "echo", json!({"text": "ok"}));
            assert_eq!(result_text(&resp), "ok");
            let resp = call_tool(
                &mut s,
                era,
                &format!("s{n}"),
                "sleep",
                json!({"millis": 10}),
            );
            assert_eq!(result_text(&resp), "slept");
        }
        let (hang, _) = s.response_within(&json!("hang"), WAIT);
        let elapsed = began.elapsed();
        assert_eq!(hang["result"]["isError"], true, "{era:?}: {hang}");
        assert_eq!(result_text(&hang), "timed out after 1 s");
        assert!(
            elapsed >= Duration::from_millis(950),
            "{era:?}: answered before its timeout, after {elapsed:?}"
        );
        let after = call_tool(&mut s, era, "after", "sleep", json!({"millis": 10}));
        assert_eq!(result_text(&after), "slept");
    }
}

#[test]
fn a_panicking_tool_gives_an_error_result_and_the_host_keeps_serving() {
    for era in ERAS {
        let (_l, mut s) = start(era, "");
        for id in ["boom1", "boom2"] {
            let resp = call_tool(&mut s, era, id, "explode", json!({}));
            assert!(resp.get("error").is_none(), "{resp}");
            assert_eq!(resp["result"]["isError"], true, "{resp}");
            assert_eq!(result_text(&resp), "tool panicked: boom from a tool");
        }
        let fine = call_tool(&mut s, era, "fine", "still_fine", json!({}));
        assert_eq!(result_text(&fine), "still fine");
        let echo = call_tool(&mut s, era, "echo", "echo", json!({"text": "alive"}));
        assert_eq!(result_text(&echo), "alive");
    }
}

#[test]
fn the_process_exits_zero_when_stdin_closes_after_finishing_in_flight_calls() {
    let (_l, mut s) = start(Era::Modern, "");
    let list = s.call_modern(1, "tools/list", json!({}));
    assert!(list["result"].is_object());
    s.send(&request(
        "last",
        "tools/call",
        with_meta(json!({"name": "sleep", "arguments": {"millis": 300}})),
    ));
    s.close_stdin();
    let (last, _) = s.response_within(&json!("last"), WAIT);
    assert_eq!(result_text(&last), "slept");
    let status = s
        .wait_exit(WAIT)
        .unwrap_or_else(|| panic!("still running after stdin closed:\n{}", s.stderr()));
    assert!(status.success(), "{status:?}\n{}", s.stderr());
}

#[test]
fn non_ascii_text_round_trips_through_echo() {
    let text = "grüße, 世界! 🎉 ∑ «ταῦ» \u{2028} tab\t quote\" backslash\\ é";
    for era in ERAS {
        let (_l, mut s) = start(era, "");
        let resp = call_tool(&mut s, era, "u", "echo", json!({ "text": text }));
        assert_eq!(result_text(&resp), text, "{era:?}");
        let shout = call_tool(&mut s, era, "s", "shout", json!({ "text": "grüße" }));
        assert_eq!(result_text(&shout), "GRÜSSE", "{era:?}");
    }
}

#[test]
fn stdio_calls_run_as_the_configured_user() {
    let (_l, mut s) = start(Era::Modern, "stdio_user: alice\n");
    let resp = call_tool(&mut s, Era::Modern, "w", "whoami", json!({}));
    assert!(resp["result"]["isError"].is_null(), "{resp}");
    assert!(result_text(&resp).contains("alice"), "{resp}");
}
