//! Result filters (issue 54): an organisation's own detector written as a plugin's `#[filter]`
//! (fixture-filters), named by the guardrails as `plugin:fixture-filters/<filter>`, over a
//! plugin's result (fixture-basic's `echo`) and an upstream's (the hostile fixture's `leak`),
//! over stdio and HTTP, with the filter's plugin in-process and in a sandboxed worker: what it
//! finds is redacted (text and `structuredContent`) or blocks the result, like a built-in
//! detector's finding; its filters are never served as tools. A filter that panics, hangs past
//! its timeout, answers garbage, or whose plugin is missing fails closed (the result is blocked with an error
//! naming the filter, never the content) while the host keeps serving everything else.

use mcp_host_tests::serve::{LEGACY, MODERN};

use super::upstream_overrides::Client;
use super::*;

const TICKETS: &str = "plugin:fixture-filters/ticket_ids";

/// A layout serving fixture-basic from `d`, fixture-filters from `f` (isolated as `isolation`)
/// and `hostile.py --mode leaky` (era `era`) as `gh` (prefix `gh_`), with an audit log, and
/// `extra`.
fn layout(era: &str, isolation: &str, extra: &str) -> (Layout, std::path::PathBuf) {
    let script = mcp_host_tests::workspace_root().join("tests/fixtures/upstream/hostile.py");
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("f", "fixture-filters", None);
    let cfg = l.config(&format!(
        "tool_dirs:\n  - d\n  - {{path: f, isolation: {isolation}}}\n  - server: {{command: [python3, {:?}, --mode, leaky, --era, \"{era}\"]}}\n    \
         name: gh\n    prefix: gh_\naudit_log: audit.jsonl\n{extra}",
        script.to_string_lossy()
    ));
    (l, cfg)
}

/// The ticket filter redacts everywhere, and blocks the upstream's `leak`.
const REDACT_AND_BLOCK: &str = "guardrails:\n  detect: {\"plugin:fixture-filters/ticket_ids\": redact}\n  \
     tools:\n    gh_leak: {\"plugin:fixture-filters/ticket_ids\": block}\n";

#[track_caller]
fn result_of(response: &Value) -> &Value {
    assert!(response.get("error").is_none(), "{response}");
    &response["result"]
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// Every check of a filter that redacts and blocks, on `client`.
fn filtered(mut client: Client) {
    let tools = client.tools_with("gh_leak");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"ticket_of"), "{names:?}");
    for filter in ["ticket_ids", "explode", "hang", "garbage"] {
        assert!(!names.iter().any(|n| n.contains(filter)), "{names:?}");
    }
    // A plugin's result: each ticket id redacted, the finding in `_meta`.
    let said = client.call(
        1,
        "echo",
        json!({"text": "fix TCK-42 then TCK-7, not TCK-x"}),
    );
    let said = result_of(&said);
    assert_eq!(
        text_of(said),
        format!("fix [REDACTED:{TICKETS}] then [REDACTED:{TICKETS}], not TCK-x"),
        "{said}"
    );
    let findings = &said["_meta"]["mcp-host/guardrails"]["findings"];
    assert_eq!(
        findings,
        &json!([{"detector": TICKETS, "group": "plugin", "count": 2, "action": "redact"}]),
        "{said}"
    );
    // The filter's own plugin's tool, filtered like any other.
    let own = client.call(2, "ticket_of", json!({"id": 5}));
    assert_eq!(
        text_of(result_of(&own)),
        format!("see [REDACTED:{TICKETS}]")
    );
    // An upstream's result: blocked, the error names the filter and never the content.
    let leaked = client.call(3, "gh_leak", json!({"text": "about TCK-9"}));
    let leaked = result_of(&leaked);
    assert_eq!(leaked["isError"], true, "{leaked}");
    assert!(text_of(leaked).contains(TICKETS), "{leaked}");
    assert!(!leaked.to_string().contains("TCK-9"), "{leaked}");
    // Clean results pass untouched.
    let clean = client.call(4, "gh_leak", json!({"text": "all clear"}));
    let clean = result_of(&clean);
    assert_eq!(text_of(clean), "all clear", "{clean}");
    assert!(clean.get("isError").is_none_or(|e| e == false), "{clean}");
    assert!(
        clean["_meta"].get("mcp-host/guardrails").is_none(),
        "{clean}"
    );
    // A filter is not a tool a client can call.
    let called = client.call(5, "ticket_ids", json!({"texts": ["TCK-1"]}));
    let refused = called.get("error").is_some() || called["result"]["isError"] == true;
    assert!(refused, "{called}");
}

/// The audit log names the filter's findings, never what it found.
fn audited(l: &Layout) {
    let text = std::fs::read_to_string(l.root.path().join("audit.jsonl")).unwrap();
    assert!(
        !text.contains("TCK-42") && !text.contains("TCK-9"),
        "{text}"
    );
    assert!(text.contains(TICKETS), "{text}");
}

#[test]
fn a_plugin_filter_redacts_and_blocks_results_over_stdio_in_process() {
    for (era, upstream_era) in [(LEGACY, "2026"), (MODERN, "2025")] {
        let (l, cfg) = layout(upstream_era, "in_process", REDACT_AND_BLOCK);
        filtered(Client::stdio_serving(&cfg, era, "echo"));
        audited(&l);
    }
}

#[test]
fn a_plugin_filter_redacts_and_blocks_results_over_http_in_a_sandboxed_worker() {
    for (era, upstream_era) in [(LEGACY, "2025"), (MODERN, "2026")] {
        let (l, cfg) = layout(upstream_era, "sandbox", REDACT_AND_BLOCK);
        filtered(Client::http(&cfg, era));
        audited(&l);
    }
}

/// `echo` through the panicking filter, `gh_leak` through the hanging one (1 s timeout), `count`
/// through a plugin that does not exist, `tick` through one that answers garbage; `ticket_of`
/// and `noisy` through none.
const FAILING: &str = "guardrails:\n  tools:\n    echo: {\"plugin:fixture-filters/explode\": flag}\n    \
     gh_leak: {\"plugin:fixture-filters/hang\": flag}\n    \
     count: {\"plugin:nobody/tickets\": flag}\n    \
     tick: {\"plugin:fixture-filters/garbage\": redact}\n\
     plugins:\n  fixture-filters:\n    tools:\n      hang: {timeout_secs: 1}\n";

/// Every check of filters that cannot answer, on `client`; with `same_process`, the filters'
/// own plugin's tool too (in a worker, the host kills the worker that ignored the hanging
/// filter's cancellation, which may fail a call running in it then).
fn failing_closed(mut client: Client, same_process: bool) {
    client.tools_with("gh_leak");
    for round in 0..2 {
        let id = round * 10;
        // The second time, a worker that ran the hanging filter may still be being replaced:
        // the call fails (closed) either way.
        let hung = if round == 0 {
            "timed out"
        } else {
            "could not check it"
        };
        for (n, tool, args, filter, why) in [
            (
                1,
                "echo",
                json!({"text": "secret words"}),
                "explode",
                "failed",
            ),
            (2, "gh_leak", json!({"text": "secret words"}), "hang", hung),
            (3, "count", json!({"steps": 1}), "", "not loaded"),
            (6, "tick", json!({"millis": 1}), "garbage", "not a verdict"),
        ] {
            let blocked = client.call(id + n, tool, args);
            let blocked = result_of(&blocked);
            assert_eq!(blocked["isError"], true, "{tool}: {blocked}");
            let said = text_of(blocked);
            assert!(
                said.contains(filter) && said.contains(why),
                "{tool}: {said}\n{}",
                client.stderr()
            );
            assert!(!said.contains("secret words"), "{said}");
        }
        // The host, and the filters' own plugin, keep serving.
        if same_process {
            let fine = client.call(id + 4, "ticket_of", json!({"id": 1}));
            assert_eq!(text_of(result_of(&fine)), "see TCK-1");
        }
        let noisy = client.call(id + 5, "noisy", json!({}));
        assert_eq!(text_of(result_of(&noisy)), "quiet result");
    }
}

#[test]
fn a_filter_that_panics_hangs_or_is_missing_fails_closed_and_the_host_keeps_serving() {
    let (_l, cfg) = layout("2026", "in_process", FAILING);
    failing_closed(Client::stdio_serving(&cfg, MODERN, "echo"), true);
    let (_l, cfg) = layout("2025", "sandbox", FAILING);
    failing_closed(Client::http(&cfg, LEGACY), false);
}
