//! Tool search end to end: agents with `tools: search` against a real `mcp-host serve` — a thousand
//! generated tools (fixture-catalog copied into twenty tool directories under twenty prefixes)
//! listed at a fraction of the bytes, found by plain-words queries and called through the call tool
//! within the agent's view; and the packaged plugins' tools found by twenty-one natural-language
//! questions, each with the right tool in the top three. How fast a search runs is measured by
//! `cargo bench -p mcp-host --bench search`, never asserted here.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use mcp_host_tests::Layout;
use mcp_host_tests::serve::{HttpServer, StdioServer, with_meta};
use serde_json::{Value, json};

/// Tool directories of the generated set, and tools per copy (49 generated + `catalog_edition`).
const COPIES: usize = 20;
const PER_COPY: usize = 50;

/// Twenty catalog copies, `s00_` to `s19_`, and an agent `finder` in search mode that may not see
/// `s19_*` and always lists `s00_catalog_edition`.
fn thousand_tools() -> (Layout, PathBuf) {
    let l = Layout::new();
    let mut dirs = Vec::new();
    for i in 0..COPIES {
        l.install(&format!("c{i:02}"), "fixture-catalog", None);
        dirs.push(format!("{{path: c{i:02}, prefix: s{i:02}_}}"));
    }
    let cfg = l.config(&format!(
        "tool_dirs: [{}]\nplugins:\n  fixture-catalog:\n    config: {{count: {}}}\nagents:\n  finder:\n    tools: search\n    deny: [\"s19_*\"]\n    always_list: [s00_catalog_edition]\n",
        dirs.join(", "),
        PER_COPY - 1
    ));
    (l, cfg)
}

/// `tools/list` at `path`, every page: the tools and the bytes of the response bodies.
fn list_all(server: &HttpServer, path: &str) -> (Vec<Value>, usize) {
    let (mut tools, mut bytes, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let params = cursor.map_or_else(|| json!({}), |c| json!({ "cursor": c }));
        let resp = server.modern_at(path, None, "tools/list", params);
        assert_eq!(resp.status, 200, "{resp:?}");
        bytes += resp.body.len();
        let body = resp.json();
        tools.extend(body["result"]["tools"].as_array().unwrap().iter().cloned());
        match body["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (tools, bytes),
        }
    }
}

fn names(tools: &[Value]) -> Vec<&str> {
    tools.iter().map(|t| t["name"].as_str().unwrap()).collect()
}

/// The result of `tools/call` of `name` at the agent endpoint.
fn call(server: &HttpServer, name: &str, arguments: Value) -> Value {
    let resp = server.modern_at(
        "/mcp/agents/finder",
        None,
        "tools/call",
        json!({ "name": name, "arguments": arguments }),
    );
    resp.message()
}

#[test]
fn in_search_mode_the_list_of_a_thousand_tools_costs_under_five_percent_of_its_bytes() {
    let (_l, cfg) = thousand_tools();
    let server = HttpServer::start(&cfg);
    let (full, full_bytes) = list_all(&server, "/mcp");
    assert_eq!(full.len(), COPIES * PER_COPY);
    let (small, small_bytes) = list_all(&server, "/mcp/agents/finder");
    assert_eq!(
        names(&small),
        ["call_tool", "s00_catalog_edition", "search_tools"]
    );
    assert!(
        small_bytes * 20 < full_bytes,
        "search-mode list {small_bytes} bytes vs full list {full_bytes} bytes"
    );
    for tool in &small {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
}

#[test]
fn search_finds_tools_by_plain_words_and_the_call_tool_keeps_to_the_agents_view() {
    let (_l, cfg) = thousand_tools();
    let server = HttpServer::start(&cfg);

    // Twenty copies of `summarize_payment` (nineteen visible) match best; the agent's denied copy
    // never shows.
    let found = call(
        &server,
        "search_tools",
        json!({"query": "write a short summary of a card payment and its refund", "limit": 20}),
    );
    let tools = found["result"]["structuredContent"]["tools"]
        .as_array()
        .unwrap();
    let found_names = names(tools);
    assert_eq!(found_names.len(), 20, "{found}");
    assert!(
        found_names[..19]
            .iter()
            .all(|n| n.ends_with("_summarize_payment")),
        "{found_names:?}\nserver log:\n{}",
        server.stderr()
    );
    assert!(
        !found_names.iter().any(|n| n.starts_with("s19_")),
        "{found_names:?}"
    );
    // Each match comes with what it takes to call it.
    assert!(
        tools[0]["description"]
            .as_str()
            .unwrap()
            .contains("card or bank payment")
    );
    assert_eq!(tools[0]["inputSchema"]["type"], "object");
    let text: Value =
        serde_json::from_str(found["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&text, &found["result"]["structuredContent"]);

    // The call tool: a visible tool runs, with its arguments validated against its own schema.
    let ok = call(
        &server,
        "call_tool",
        json!({"name": "s03_list_invoice", "arguments": {"id": "A-1042"}}),
    );
    assert_eq!(
        ok["result"]["content"][0]["text"],
        r#"{"arguments":{"id":"A-1042"},"tool":"list_invoice"}"#,
        "{ok}"
    );
    let invalid = call(
        &server,
        "call_tool",
        json!({"name": "s03_list_invoice", "arguments": {}}),
    );
    assert_eq!(invalid["result"]["isError"], true, "{invalid}");
    assert!(
        invalid["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("id"),
        "{invalid}"
    );
    // A tool outside the agent's view does not exist for the call tool either.
    let hidden = call(
        &server,
        "call_tool",
        json!({"name": "s19_list_invoice", "arguments": {"id": "x"}}),
    );
    assert_eq!(hidden["result"]["isError"], true, "{hidden}");
    assert_eq!(
        hidden["result"]["content"][0]["text"],
        "Unknown tool: s19_list_invoice (search_tools finds the tools you can call)"
    );
    // Direct calls keep working for visible tools, and stay refused for hidden ones.
    let direct = call(&server, "s05_get_alert", json!({"since": "2026-01-31"}));
    assert_eq!(
        direct["result"]["content"][0]["text"],
        r#"{"arguments":{"since":"2026-01-31"},"tool":"get_alert"}"#,
        "{direct}"
    );
    let refused = call(&server, "s19_get_alert", json!({"since": "2026-01-31"}));
    assert_eq!(
        refused["error"]["message"], "Unknown tool: s19_get_alert",
        "{refused}"
    );
    // Bad search arguments are results the model can read.
    let bad = call(&server, "search_tools", json!({"query": "x", "limit": 0}));
    assert_eq!(bad["result"]["isError"], true, "{bad}");
}

/// What a user might ask, and the packaged tool that answers it: every packaged tool once.
const QUESTIONS: [(&str, &str); 21] = [
    ("what time is it in Tokyo", "current_time"),
    ("hash this text with sha256", "hash_text"),
    ("convert 3pm Paris time to New York", "convert_time"),
    ("how many days until Christmas", "time_between"),
    ("add 90 minutes to a meeting time", "add_duration"),
    ("find the time zone name for Kolkata", "list_time_zones"),
    ("show the time for everyone on the team", "world_clock"),
    ("pretty print this JSON", "json_format"),
    ("extract all prices from a JSON document", "json_query"),
    (
        "find all email addresses in a text with a regular expression",
        "regex_match",
    ),
    (
        "replace every date in the text with a pattern",
        "regex_replace",
    ),
    ("encode bytes as base64", "base64_encode"),
    ("decode a base64 string", "base64_decode"),
    ("count the words and lines in a text", "text_stats"),
    ("sign a message with HMAC", "hmac_sign"),
    ("check that a webhook signature is valid", "hmac_verify"),
    ("log my weight this morning", "record_reading"),
    (
        "which health indicators do I track",
        "query_health_indicators",
    ),
    (
        "list my heart rate readings from last week",
        "query_readings",
    ),
    (
        "on how many days did I walk more than 10000 steps",
        "count_readings_above_goal",
    ),
    ("delete a wrong reading", "delete_reading"),
];

#[test]
fn for_each_of_twenty_one_questions_the_right_packaged_tool_ranks_in_the_top_three() {
    let l = Layout::new();
    for krate in ["mcp-time", "mcp-text", "mcp-series"] {
        l.install("d", krate, None);
    }
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nplugins:\n  mcp-time:\n    config:\n      world_clock: [UTC, Asia/Tokyo]\n  mcp-series:\n    config:\n      database: {}\n  mcp-text:\n    config:\n      hmac_key: \"0123456789abcdef0123456789abcdef\"\nagents:\n  finder:\n    tools: search\n",
        l.root.path().join("series.db").display()
    ));
    let mut s = StdioServer::start_with(&cfg, &["--agent", "finder"], &[]);
    let listed = s.call(0, "tools/list", with_meta(json!({})));
    assert_eq!(
        names(listed["result"]["tools"].as_array().unwrap()),
        ["call_tool", "search_tools"]
    );
    let mut misses = Vec::new();
    for (i, (question, tool)) in QUESTIONS.iter().enumerate() {
        let resp = s.call(
            i as i64 + 1,
            "tools/call",
            with_meta(
                json!({"name": "search_tools", "arguments": {"query": question, "limit": 3}}),
            ),
        );
        let found: Vec<String> = resp["result"]["structuredContent"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{resp}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        if !found.iter().any(|f| f == tool) {
            misses.push(format!("{question:?}: want {tool}, got {found:?}"));
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}
