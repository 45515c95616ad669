//! The server surface beyond tools, end to end with real plugins over real pipes and sockets:
//! resources, resource templates and prompts (precedence, agent views, the caller, reload
//! announcements, subscriptions), and tools that ask the client for input — 2025 sessions answering
//! server-to-client requests on stdio and on the POST's SSE stream, 2026 input-required rounds with
//! a sealed, bound request state.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Instant;

use mcp_host_tests::serve::{
    HttpServer, LEGACY, StdioServer, WAIT, header_refs, modern_headers, notification, request,
    sse_events, with_meta,
};
use mcp_host_tests::{Layout, row};
use serde_json::{Value, json};

const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// `fixture-basic` and `fixture-conformance` in `d`, with `extra` config lines.
fn layout(extra: &str) -> (Layout, std::path::PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("d", "fixture-conformance", None);
    let cfg = l.config(&format!("tool_dirs: [d]\nstdio_user: ana\n{extra}"));
    (l, cfg)
}

/// A legacy stdio session whose client declared `capabilities`.
fn legacy_session(cfg: &Path, capabilities: Value) -> StdioServer {
    let mut s = StdioServer::start(cfg);
    let init = s.call(
        "init",
        "initialize",
        json!({
            "protocolVersion": LEGACY,
            "capabilities": capabilities,
            "clientInfo": { "name": "e2e", "version": "0" },
        }),
    );
    assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");
    assert_eq!(
        init["result"]["capabilities"]["prompts"]["listChanged"],
        true
    );
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"],
        true
    );
    s.send(&notification("notifications/initialized", Value::Null));
    s
}

fn names(list: &Value, member: &str, key: &str) -> Vec<String> {
    list["result"][member]
        .as_array()
        .unwrap_or_else(|| panic!("no {member} in {list}"))
        .iter()
        .map(|x| x[key].as_str().unwrap().to_owned())
        .collect()
}

/// The next message within [`WAIT`] that is not a response (a notification or a request).
fn next_message(s: &mut StdioServer) -> Value {
    s.recv(WAIT).expect("a message from the server")
}

// ---------------------------------------------------------------------------------------------
// Precedence, agents, the caller

#[test]
fn an_earlier_directory_overrides_a_resource_and_a_prompt_and_the_losers_are_logged() {
    let l = Layout::new();
    let winner = l.install("mine", "fixture-override", None);
    let loser = l.install("packaged", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [mine, packaged]\n");
    let (rows, log) = l.list(&cfg);
    let won = row(&rows, "basic://greeting", "libfixture_override.so");
    assert_eq!(
        (&won["kind"], &won["status"]),
        (&json!("resource"), &json!("active"))
    );
    let lost = row(&rows, "basic://greeting", "libfixture_basic.so");
    assert_eq!(lost["status"], "overridden_by");
    assert_eq!(lost["detail"], winner.to_str().unwrap());
    assert_eq!(
        row(&rows, "greet", "libfixture_basic.so")["status"],
        "overridden_by"
    );
    assert_eq!(
        row(&rows, "greet", "libfixture_override.so")["kind"],
        "prompt"
    );
    for line in [
        format!(
            "Resource basic://greeting from {} overridden by {}",
            loser.display(),
            winner.display()
        ),
        format!(
            "Prompt greet from {} overridden by {}",
            loser.display(),
            winner.display()
        ),
    ] {
        assert!(log.contains(&line), "missing {line:?} in log:\n{log}");
    }
    // What only the later directory serves is still served, and the winner answers.
    assert_eq!(
        row(&rows, "basic://echo/{text}", "libfixture_basic.so")["kind"],
        "resource_template"
    );
    let mut s = StdioServer::start(&cfg);
    let read = s.call_modern(1, "resources/read", json!({"uri": "basic://greeting"}));
    assert_eq!(
        read["result"]["contents"][0]["text"], "hello from override",
        "{read}"
    );
    let got = s.call_modern(
        2,
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": "Bo"}}),
    );
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"], "override greets Bo",
        "{got}"
    );
}

#[test]
fn agent_globs_hide_resources_templates_and_prompts_from_lists_reads_gets_and_completions() {
    let (_l, cfg) = layout(
        "agents:\n  narrow:\n    allow: [\"echo\", \"basic://greeting\", \"test_*\"]\n    deny: [\"test_simple_prompt\"]\n",
    );
    let mut s = StdioServer::start_with(&cfg, &["--agent", "narrow"], &[]);
    let resources = s.call_modern(1, "resources/list", json!({}));
    assert_eq!(names(&resources, "resources", "uri"), ["basic://greeting"]);
    assert_eq!(resources["result"]["cacheScope"], "private", "{resources}");
    let templates = s.call_modern(2, "resources/templates/list", json!({}));
    assert!(
        names(&templates, "resourceTemplates", "uriTemplate").is_empty(),
        "{templates}"
    );
    let prompts = names(
        &s.call_modern(3, "prompts/list", json!({})),
        "prompts",
        "name",
    );
    assert!(
        prompts.contains(&"test_prompt_with_arguments".to_owned()),
        "{prompts:?}"
    );
    assert!(
        !prompts
            .iter()
            .any(|p| p == "greet" || p == "test_simple_prompt"),
        "{prompts:?}"
    );
    // Hidden means absent, for every method.
    let read = s.call_modern(4, "resources/read", json!({"uri": "basic://echo/x"}));
    assert_eq!(read["error"]["code"], -32602, "{read}");
    assert_eq!(read["error"]["data"]["uri"], "basic://echo/x");
    let get = s.call_modern(
        5,
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": "x"}}),
    );
    assert_eq!(get["error"]["code"], -32602, "{get}");
    let complete = s.call_modern(
        6,
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "basic://echo/{text}"}, "argument": {"name": "text", "value": "al"}}),
    );
    assert_eq!(complete["error"]["code"], -32602, "{complete}");
    // Without the agent everything is there, and the template variable completes.
    let mut all = StdioServer::start(&cfg);
    let complete = all.call_modern(
        1,
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "basic://echo/{text}"}, "argument": {"name": "text", "value": "al"}}),
    );
    assert_eq!(
        complete["result"]["completion"]["values"],
        json!(["alpha", "alpine"]),
        "{complete}"
    );
    assert_eq!(complete["result"]["completion"]["total"], 2);
}

#[test]
fn a_resource_that_takes_the_caller_reads_as_the_verified_caller_and_refuses_anonymous_http() {
    let (_l, cfg) = layout("");
    let mut s = StdioServer::start(&cfg);
    let me = s.call_modern(1, "resources/read", json!({"uri": "basic://me"}));
    let contents = &me["result"]["contents"][0];
    let user: Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
    assert_eq!(user["user_id"], "ana", "{me}");
    assert_eq!(
        me["result"]["cacheScope"], "private",
        "a caller's read is private: {me}"
    );
    let s = HttpServer::start(&cfg);
    let anonymous = s.modern(1, "resources/read", json!({"uri": "basic://me"}));
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    assert!(anonymous.header("www-authenticate").is_some());
}

#[test]
fn prompt_arguments_are_checked_before_the_plugin_renders_and_missing_resources_differ_by_era() {
    let (_l, cfg) = layout("");
    let mut s = StdioServer::start(&cfg);
    let missing = s.call_modern(
        1,
        "prompts/get",
        json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "a"}}),
    );
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("arg2"),
        "{missing}"
    );
    let numeric = s.call_modern(
        2,
        "prompts/get",
        json!({"name": "greet", "arguments": {"name": 5}}),
    );
    assert_eq!(numeric["error"]["code"], -32602, "{numeric}");
    let modern = s.call_modern(3, "resources/read", json!({"uri": "nothing://here"}));
    assert_eq!(
        (&modern["error"]["code"], &modern["error"]["data"]["uri"]),
        (&json!(-32602), &json!("nothing://here"))
    );
    let mut legacy = legacy_session(&cfg, json!({}));
    let old = legacy.call(1, "resources/read", json!({"uri": "nothing://here"}));
    assert_eq!(
        (&old["error"]["code"], &old["error"]["data"]["uri"]),
        (&json!(-32002), &json!("nothing://here"))
    );
    // 2026 has no resources/subscribe (subscriptions/listen replaces it).
    let gone = s.call_modern(4, "resources/subscribe", json!({"uri": "basic://greeting"}));
    assert_eq!(gone["error"]["code"], -32601, "{gone}");
}

// ---------------------------------------------------------------------------------------------
// Asking the client: 2025 sessions

#[test]
fn a_legacy_stdio_client_answers_an_elicitation_request_and_the_call_completes_with_it() {
    let (_l, cfg) = layout("");
    let mut s = legacy_session(&cfg, json!({"elicitation": {}}));
    s.send(&request(
        7,
        "tools/call",
        json!({"name": "test_elicitation", "arguments": {"message": "Who?"}}),
    ));
    let asked = next_message(&mut s);
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["message"], "Who?");
    assert_eq!(asked["params"]["mode"], "form", "2025-11-25 names the mode");
    let id = asked["id"].clone();
    assert!(id.is_string() || id.is_number(), "{asked}");
    s.send(&json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {"username": "zoe", "email": "z@e.x"}}}));
    let done = s.response(7);
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("action=accept") && text.contains("zoe"),
        "{done}"
    );
}

#[test]
fn a_legacy_client_without_the_capability_is_never_asked_and_the_tool_says_why() {
    let (_l, cfg) = layout("");
    let mut s = legacy_session(&cfg, json!({}));
    let done = s.call(
        1,
        "tools/call",
        json!({"name": "test_sampling", "arguments": {"prompt": "hi"}}),
    );
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("does not support sampling/createMessage")
    );
}

#[test]
fn cancelling_a_call_that_waits_for_the_client_cancels_the_servers_request_too() {
    let (_l, cfg) = layout("");
    let mut s = legacy_session(&cfg, json!({"sampling": {}}));
    s.send(&request(
        3,
        "tools/call",
        json!({"name": "test_sampling", "arguments": {"prompt": "hi"}}),
    ));
    let asked = next_message(&mut s);
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    s.send(&notification(
        "notifications/cancelled",
        json!({"requestId": 3}),
    ));
    let deadline = Instant::now() + WAIT;
    loop {
        let m = s
            .recv(deadline.saturating_duration_since(Instant::now()))
            .expect("the server's cancellation");
        if m["method"] == "notifications/cancelled" {
            assert_eq!(m["params"]["requestId"], asked["id"], "{m}");
            break;
        }
    }
    // A late answer to the abandoned request is ignored; the connection keeps working.
    s.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "late"}, "model": "m"}}));
    let ping = s.call(4, "ping", json!({}));
    assert_eq!(ping["result"], json!({}), "{ping}");
}

#[test]
fn a_legacy_http_client_answers_sampling_sent_on_the_posts_event_stream() {
    let (_l, cfg) = layout("");
    let server = HttpServer::start(&cfg);
    let init = server.post(
        &[],
        &request(1, "initialize", json!({"protocolVersion": LEGACY, "capabilities": {"sampling": {}}, "clientInfo": {"name": "e2e", "version": "0"}})),
    );
    let session = init.header("mcp-session-id").unwrap().to_owned();
    let body = request(
        2,
        "tools/call",
        json!({"name": "test_sampling", "arguments": {"prompt": "2+2?"}}),
    )
    .to_string();
    let mut call = server.connect();
    call.send(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", &session),
        ],
        body.as_bytes(),
    );
    let head = call.read_head();
    assert_eq!(head.status, 200, "{head:?}");
    let mut events = Vec::new();
    while events.is_empty() {
        let chunk = call.read_chunk().expect("the event stream");
        events = sse_events(&String::from_utf8_lossy(&chunk));
    }
    let asked = &events[0];
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "four"}, "model": "m", "stopReason": "endTurn"}});
    let ack = server.post(&[("Mcp-Session-Id", &session)], &answer);
    assert_eq!(ack.status, 202, "{ack:?}");
    let mut rest = String::new();
    let result = loop {
        let chunk = call.read_chunk().expect("the result on the same stream");
        rest.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(done) = sse_events(&rest).into_iter().find(|e| e["id"] == 2) {
            break done;
        }
    };
    assert_eq!(
        result["result"]["content"][0]["text"], "LLM response: four",
        "{result}"
    );
}

// ---------------------------------------------------------------------------------------------
// Asking the client: 2026 input-required rounds

fn with_caps(params: Value, caps: Value) -> Value {
    let mut p = with_meta(params);
    p["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps;
    p
}

#[test]
fn a_2026_multi_round_call_carries_earlier_answers_in_a_state_bound_to_its_request_and_caller() {
    let (_l, cfg) = layout("request_state: {keys: [\"k-new\", \"k-old\"], ttl_secs: 300}\n");
    let mut s = StdioServer::start(&cfg);
    let caps = json!({"elicitation": {}});
    let call =
        |args: Value| json!({"name": "test_input_required_result_multi_round", "arguments": args});
    let r1 = s.call(1, "tools/call", with_caps(call(json!({})), caps.clone()));
    let round1 = &r1["result"];
    assert_eq!(round1["resultType"], "input_required", "{r1}");
    assert!(
        round1.get("ttlMs").is_none(),
        "input_required is never cacheable: {r1}"
    );
    assert_eq!(
        round1["inputRequests"]["step1"]["method"],
        "elicitation/create"
    );
    let state1 = round1["requestState"].as_str().unwrap().to_owned();

    let mut retry = call(json!({}));
    retry["inputResponses"] = json!({"step1": {"action": "accept", "content": {"name": "Ada"}}});
    retry["requestState"] = json!(state1);
    let r2 = s.call(2, "tools/call", with_caps(retry, caps.clone()));
    assert_eq!(r2["result"]["resultType"], "input_required", "{r2}");
    let state2 = r2["result"]["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state1, state2);
    assert!(r2["result"]["inputRequests"].get("step1").is_none(), "{r2}");

    // The state only fits its own request: another tool, other arguments, or a tampered copy.
    let mut elsewhere = json!({"name": "test_input_required_result_elicitation", "arguments": {}});
    elsewhere["requestState"] = json!(state2);
    let refused = s.call(3, "tools/call", with_caps(elsewhere, caps.clone()));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let mut tampered = call(json!({}));
    tampered["requestState"] = json!(format!("{state2}x"));
    let refused = s.call(4, "tools/call", with_caps(tampered, caps.clone()));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let mut last = call(json!({}));
    last["inputResponses"] = json!({"step2": {"action": "accept", "content": {"color": "teal"}}});
    last["requestState"] = json!(state2);
    let done = s.call(5, "tools/call", with_caps(last, caps.clone()));
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Multi-round complete for Ada who likes teal"
    );

    // Another replica with the same keys (rotated: the old key still opens) accepts the state.
    let mut other = StdioServer::start(&cfg);
    let mut again = call(json!({}));
    again["inputResponses"] = json!({"step2": {"action": "accept", "content": {"color": "red"}}});
    again["requestState"] = json!(state2);
    let done = other.call(1, "tools/call", with_caps(again, caps));
    assert_eq!(
        done["result"]["content"][0]["text"], "Multi-round complete for Ada who likes red",
        "{done}"
    );
}

#[test]
fn a_2026_question_the_client_cannot_answer_is_missing_capability_naming_it() {
    let (_l, cfg) = layout("");
    let s = HttpServer::start(&cfg);
    let params = with_caps(
        json!({"name": "test_sampling", "arguments": {"prompt": "hi"}}),
        json!({"elicitation": {}}),
    );
    let headers = modern_headers("tools/call", Some("test_sampling"));
    let resp = s.post(&header_refs(&headers), &request(1, "tools/call", params));
    assert_eq!(resp.status, 400, "{resp:?}");
    let body = resp.json();
    assert_eq!(body["error"]["code"], -32021, "{body}");
    assert_eq!(
        body["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
}

// ---------------------------------------------------------------------------------------------
// Announcements: reloads, updates, subscriptions

#[test]
fn a_plugin_with_prompts_and_resources_copied_in_is_announced_to_sessions_and_filtered_listen_streams()
 {
    let l = Layout::new();
    l.dir("d");
    let cfg = l.config("tool_dirs: [d]\n");
    let mut legacy = legacy_session(&cfg, json!({}));
    let mut listen = StdioServer::start(&cfg);
    listen.send(&request(
        "only-prompts",
        "subscriptions/listen",
        with_meta(json!({"notifications": {"promptsListChanged": true}})),
    ));
    let ack = next_message(&mut listen);
    assert_eq!(
        ack["params"]["notifications"],
        json!({"promptsListChanged": true}),
        "{ack}"
    );

    l.install("d", "fixture-basic", None);
    let mut heard = Vec::new();
    let deadline = Instant::now() + WAIT;
    while !(heard.contains(&"notifications/prompts/list_changed".to_owned())
        && heard.contains(&"notifications/resources/list_changed".to_owned())
        && heard.contains(&"notifications/tools/list_changed".to_owned()))
    {
        let m = legacy
            .recv(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|| panic!("heard only {heard:?}"));
        heard.push(m["method"].as_str().unwrap_or("").to_owned());
    }
    let note = next_message(&mut listen);
    assert_eq!(
        note["method"], "notifications/prompts/list_changed",
        "{note}"
    );
    assert_eq!(note["params"]["_meta"][SUBSCRIPTION], "only-prompts");
    // (Tools, prompts and resources changed together, and a stream gets them in that order: the
    // first message being the prompts one shows the tools one was filtered out.)
    let prompts = names(
        &legacy.call(1, "prompts/list", json!({})),
        "prompts",
        "name",
    );
    assert_eq!(prompts, ["greet"]);
}

/// Wait for `notifications/resources/updated` on `s` (after the response to `id`, or before it)
/// and give its `params`.
fn resource_update(s: &mut StdioServer, id: u64) -> Value {
    let (fired, mut seen) = s.response_within(&json!(id), WAIT);
    assert_eq!(fired["result"]["isError"], Value::Null, "{fired}");
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(m) = seen
            .iter()
            .find(|m| m["method"] == "notifications/resources/updated")
        {
            return m["params"].clone();
        }
        let m = s
            .recv(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|| panic!("no resources/updated; saw {seen:?}"));
        seen.push(m);
    }
}

#[test]
fn a_subscription_by_another_spelling_of_a_uri_hears_its_updates_and_a_listen_names_its_normal_form()
 {
    let (_l, cfg) = layout("");
    let mut legacy = legacy_session(&cfg, json!({}));
    let sub = legacy.call(
        1,
        "resources/subscribe",
        json!({"uri": "TEST://Watched-Resource"}),
    );
    assert_eq!(sub["result"], json!({}), "{sub}");
    // A URI without a normal form is refused, as a read of it is.
    let refused = legacy.call(
        2,
        "resources/subscribe",
        json!({"uri": "test://watched-resource/%2F.."}),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    legacy.send(&request(
        3,
        "tools/call",
        json!({"name": "test_update_watched_resource", "arguments": {}}),
    ));
    let update = resource_update(&mut legacy, 3);
    assert_eq!(update["uri"], "test://watched-resource", "{update}");

    // A listen stream accepts other spellings in normal form (once), and hears the update.
    let mut listen = StdioServer::start(&cfg);
    listen.send(&request(
        "watch",
        "subscriptions/listen",
        with_meta(json!({"notifications": {"resourceSubscriptions":
            ["test://./watched-resource", "Test://Watched-Resource", "test://nope",
             "test://watched-resource/..%2F"]}})),
    ));
    let ack = next_message(&mut listen);
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["test://watched-resource"]),
        "{ack}"
    );
    listen.send(&request(
        4,
        "tools/call",
        with_meta(json!({"name": "test_update_watched_resource", "arguments": {}})),
    ));
    let update = resource_update(&mut listen, 4);
    assert_eq!(update["uri"], "test://watched-resource", "{update}");
    assert_eq!(update["_meta"][SUBSCRIPTION], "watch", "{update}");
}

#[test]
fn resource_updates_reach_legacy_subscribers_and_listen_streams_that_named_the_uri() {
    let (_l, cfg) = layout("");
    let mut legacy = legacy_session(&cfg, json!({}));
    let sub = legacy.call(
        1,
        "resources/subscribe",
        json!({"uri": "test://watched-resource"}),
    );
    assert_eq!(sub["result"], json!({}), "{sub}");
    let unknown = legacy.call(2, "resources/subscribe", json!({"uri": "test://nope"}));
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");

    let s = HttpServer::start(&cfg);
    let method = "subscriptions/listen";
    let params = with_meta(
        json!({"notifications": {"resourceSubscriptions": ["test://watched-resource", "test://nope"]}}),
    );
    let mut headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("Accept", "application/json, text/event-stream".to_owned()),
    ];
    headers.extend(modern_headers(method, None));
    let mut stream = s.connect();
    stream.send(
        "POST",
        "/mcp",
        &header_refs(&headers),
        request("watch", method, params).to_string().as_bytes(),
    );
    assert_eq!(stream.read_head().status, 200);
    let mut pending = String::new();
    // Keep-alive comments come every few seconds, so the read timeout alone never fires: wait for
    // an event up to a deadline.
    let mut next_event = |pending: &mut String| -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(
                Instant::now() < deadline,
                "no event within {WAIT:?}: {pending:?}"
            );
            if let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                if let Some(e) = sse_events(&event).pop() {
                    return e;
                }
                continue;
            }
            let chunk = stream.read_chunk().expect("the listen stream");
            pending.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        }
    };
    let ack = next_event(&mut pending);
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["test://watched-resource"]),
        "{ack}"
    );

    // The update is announced by a tool of the plugin, on the stdio server and the HTTP server.
    // (The notification may come before or after the tool's response: keep both.)
    legacy.send(&request(
        3,
        "tools/call",
        json!({"name": "test_update_watched_resource", "arguments": {}}),
    ));
    let (fired, mut seen) = legacy.response_within(&json!(3), WAIT);
    assert_eq!(fired["result"]["isError"], Value::Null, "{fired}");
    let deadline = Instant::now() + WAIT;
    while !seen
        .iter()
        .any(|m| m["method"] == "notifications/resources/updated")
    {
        let m = legacy
            .recv(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|| panic!("no resources/updated; saw {seen:?}"));
        seen.push(m);
    }
    let update = seen
        .iter()
        .find(|m| m["method"] == "notifications/resources/updated")
        .unwrap();
    assert_eq!(update["params"]["uri"], "test://watched-resource");
    let headers = modern_headers("tools/call", Some("test_update_watched_resource"));
    let fired = s.post(
        &header_refs(&headers),
        &request(
            1,
            "tools/call",
            with_meta(json!({"name": "test_update_watched_resource", "arguments": {}})),
        ),
    );
    assert_eq!(fired.status, 200, "{fired:?}");
    let update = next_event(&mut pending);
    assert_eq!(
        update["method"], "notifications/resources/updated",
        "{update}"
    );
    assert_eq!(update["params"]["uri"], "test://watched-resource");
    assert_eq!(update["params"]["_meta"][SUBSCRIPTION], "watch");
}
