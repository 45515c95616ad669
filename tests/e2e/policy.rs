//! Call policy end to end: the real `mcp-host` binary serving the packaged `mcp-text` plugin under
//! rules that read the caller, the tool and the arguments — deny with the operator's message,
//! per-agent allow, a budget exhausted then refilled (JSON-RPC error with `retryAfter`, 429 over
//! HTTP), approval accepted, declined and impossible (2025 sessions) and as a 2026 input-required
//! round, a bad rule refused at start and at reload, the audit log and metrics, and
//! `mcp-host policy test`.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcp_host_tests::Layout;
use mcp_host_tests::serve::{HttpServer, LEGACY, StdioServer, notification, request, with_meta};
use serde_json::{Value, json};

/// The key of the approval question in `inputRequests` / `inputResponses`.
const APPROVAL_KEY: &str = "mcp-host.policy.approval";

/// The rules most tests use: long `regex_replace` texts denied, `json_format` approved by a
/// human, `regex_match` allowed for the `billing` agent only, `json_query` on a budget.
const RULES: &str = r#"
policy:
  rules:
    - name: short-texts-only
      when: "tool.name == 'regex_replace' && size(args.text) > 64"
      outcome: deny
      message: "regex_replace takes texts of at most 64 characters here"
    - name: billing-may-match
      when: "tool.name == 'regex_match' && caller.agent == 'billing'"
      outcome: allow
    - name: nobody-else-matches
      when: "tool.name == 'regex_match'"
      outcome: deny
      message: "regex_match is for the billing agent"
    - name: formatting-needs-a-yes
      when: "tool.name == 'json_format'"
      outcome: approve
      show: [indent]
    - name: queries-on-a-budget
      when: "tool.name == 'json_query'"
      outcome: limit
      budget: queries
  budgets:
    queries: {calls: 2, per_secs: 4}
agents:
  billing:
    allow: ["*"]
"#;

/// `mcp-text` in `d`, the caller `ana` on stdio, an audit log, and `extra` config lines.
fn layout(extra: &str) -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("d", "mcp-text", None);
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nstdio_user: ana\naudit_log: audit.jsonl\n{extra}"
    ));
    (l, cfg)
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {response}"))
        .to_owned()
}

/// A legacy stdio session whose client declared `capabilities`.
fn legacy_session(cfg: &Path, args: &[&str], capabilities: Value) -> StdioServer {
    let mut s = StdioServer::start_with(cfg, args, &[]);
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
    s.send(&notification("notifications/initialized", Value::Null));
    s
}

/// The audit records written so far.
fn audit(cfg: &Path) -> Vec<Value> {
    let path = cfg.parent().unwrap().join("audit.jsonl");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Wait (generously) until an audit record satisfies `want`.
fn audited(cfg: &Path, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(r) = audit(cfg).into_iter().find(|r| want(r)) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no such audit record: {:?}",
            audit(cfg)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_argument_based_rule_denies_a_packaged_tools_call_with_the_operators_message() {
    let (_l, cfg) = layout(RULES);
    let mut s = legacy_session(&cfg, &[], json!({}));
    let long = "x".repeat(65);
    let denied = s.call(
        1,
        "tools/call",
        call(
            "regex_replace",
            json!({"pattern": "x", "text": long, "replacement": "y"}),
        ),
    );
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(
        text_of(&denied),
        "regex_replace takes texts of at most 64 characters here"
    );
    // The same tool with a short text runs: the rule read the argument, not just the name.
    let ran = s.call(
        2,
        "tools/call",
        call(
            "regex_replace",
            json!({"pattern": "x", "text": "xax", "replacement": "y"}),
        ),
    );
    assert_ne!(ran["result"]["isError"], true, "{ran}");
    assert!(text_of(&ran).contains("yay"), "{ran}");
    let record = audited(&cfg, |r| r["outcome"] == "denied");
    assert_eq!(record["policy_rule"], "short-texts-only", "{record}");
    assert_eq!(record["policy"], "denied");
    assert_eq!(record["caller"], "ana");
}

#[test]
fn a_rule_allows_one_agent_what_a_later_rule_denies_everyone_else() {
    let (_l, cfg) = layout(RULES);
    let args = json!({"pattern": "a+", "text": "caaat"});
    let mut plain = legacy_session(&cfg, &[], json!({}));
    let denied = plain.call(1, "tools/call", call("regex_match", args.clone()));
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert_eq!(text_of(&denied), "regex_match is for the billing agent");
    let mut billing = legacy_session(&cfg, &["--agent", "billing"], json!({}));
    let allowed = billing.call(1, "tools/call", call("regex_match", args));
    assert_ne!(allowed["result"]["isError"], true, "{allowed}");
    assert!(text_of(&allowed).contains("aaa"), "{allowed}");
}

#[test]
fn a_budget_runs_out_with_retry_after_then_refills_and_http_answers_429() {
    let (_l, cfg) = layout(RULES);
    let mut s = legacy_session(&cfg, &[], json!({}));
    let query = || call("json_query", json!({"json": "{\"a\": 1}", "path": "$.a"}));
    for id in 1..=2 {
        let ok = s.call(id, "tools/call", query());
        assert_ne!(ok["result"]["isError"], true, "{ok}");
        assert!(ok.get("error").is_none(), "{ok}");
    }
    let refused = s.call(3, "tools/call", query());
    let error = &refused["error"];
    assert!(error.is_object(), "{refused}");
    let retry = error["data"]["retryAfter"].as_u64().expect("retryAfter");
    assert!((1..=4).contains(&retry), "{refused}");
    assert_eq!(error["data"]["budget"], "queries");
    assert_eq!(error["data"]["rule"], "queries-on-a-budget");
    // After the advertised wait a call is admitted again (retried until a generous deadline, so
    // a slow machine only makes it slower).
    std::thread::sleep(Duration::from_secs(retry));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut id = 10;
    loop {
        let again = s.call(id, "tools/call", query());
        if again.get("error").is_none() {
            assert_ne!(again["result"]["isError"], true, "{again}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the budget never refilled: {again}"
        );
        std::thread::sleep(Duration::from_secs(1));
        id += 1;
    }

    // Over HTTP the refusal is a 429 with Retry-After (anonymous callers share one bucket here).
    let http = HttpServer::start(&cfg);
    let mut statuses = Vec::new();
    for i in 0..3 {
        let resp = http.modern(i, "tools/call", query());
        statuses.push(resp.status);
        if resp.status == 429 {
            let body = resp.json();
            assert!(
                body["error"]["data"]["retryAfter"].as_u64().is_some(),
                "{body}"
            );
            assert!(resp.header("retry-after").is_some(), "{:?}", resp.headers);
        }
    }
    assert_eq!(statuses, [200, 200, 429]);
    let metrics = mcp_host_tests::serve::HttpConn::connect(http.addr)
        .request("GET", "/metrics", &[], b"")
        .text();
    assert!(
        metrics.contains(
            "mcp_policy_rule_decisions_total{rule=\"queries-on-a-budget\",decision=\"limited\"} 1"
        ),
        "{metrics}"
    );
}

#[test]
fn a_bytes_budget_counts_argument_bytes_and_refuses_one_call_larger_than_all_of_it() {
    let (_l, cfg) = layout(
        "policy:\n  rules:\n    - name: matching-by-volume\n      \
         when: \"tool.name == 'regex_match'\"\n      outcome: limit\n      budget: volume\n  \
         budgets:\n    volume: {bytes: 400, per_secs: 3600}\n",
    );
    let mut s = legacy_session(&cfg, &[], json!({}));
    // {"pattern":"a","text":"<150 x>"}: 175 bytes of compact JSON.
    let text = "x".repeat(150);
    let args = json!({"pattern": "a", "text": text});
    for id in 1..=2 {
        let ok = s.call(id, "tools/call", call("regex_match", args.clone()));
        assert!(ok.get("error").is_none(), "{ok}");
        assert_ne!(ok["result"]["isError"], true, "{ok}");
    }
    // 350 of 400 bytes used: a third call of the same size must wait for the window to refill.
    let refused = s.call(3, "tools/call", call("regex_match", args.clone()));
    let error = &refused["error"];
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("400 bytes of arguments per 3600 s")),
        "{refused}"
    );
    assert!(error["data"]["retryAfter"].as_u64().is_some(), "{refused}");
    assert_eq!(error["data"]["budget"], "volume");
    // A small call still fits what is left.
    let small = s.call(
        4,
        "tools/call",
        call("regex_match", json!({"pattern": "a", "text": "a"})),
    );
    assert!(small.get("error").is_none(), "{small}");
    // One call larger than the whole budget is refused outright, saying so.
    let huge = json!({"pattern": "a", "text": "y".repeat(500)});
    let refused = s.call(5, "tools/call", call("regex_match", huge));
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("over the 400 bytes of arguments")),
        "{refused}"
    );
    // Other tools draw nothing from it.
    let other = s.call(
        6,
        "tools/call",
        call("json_query", json!({"json": "{\"a\": 1}", "path": "$.a"})),
    );
    assert!(other.get("error").is_none(), "{other}");
}

#[test]
fn a_legacy_client_approves_or_declines_and_one_without_elicitation_is_refused() {
    let (_l, cfg) = layout(RULES);
    let format = || {
        call(
            "json_format",
            json!({"json": "{\"b\":1,\"a\":2}", "indent": 4}),
        )
    };

    let mut s = legacy_session(&cfg, &[], json!({"elicitation": {}}));
    s.send(&request(1, "tools/call", format()));
    let asked = s
        .recv(Duration::from_secs(30))
        .expect("the approval question");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let message = asked["params"]["message"].as_str().unwrap();
    assert!(message.contains("json_format"), "{message}");
    assert!(message.contains("indent: 4"), "{message}");
    s.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"approve": true}}}));
    let done = s.response(1);
    assert_ne!(done["result"]["isError"], true, "{done}");
    assert!(text_of(&done).contains("\"a\""), "{done}");

    s.send(&request(2, "tools/call", format()));
    let asked = s
        .recv(Duration::from_secs(30))
        .expect("the second question");
    s.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "decline"}}));
    let refused = s.response(2);
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let why = text_of(&refused);
    assert!(
        why.contains("formatting-needs-a-yes") && why.contains("declined"),
        "{why}"
    );

    let mut bare = legacy_session(&cfg, &[], json!({}));
    let refused = bare.call(1, "tools/call", format());
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        text_of(&refused).contains("does not support elicitation"),
        "{refused}"
    );

    let approved = audited(&cfg, |r| r["policy"] == "approved");
    assert_eq!(approved["policy_rule"], "formatting-needs-a-yes");
    assert_eq!(approved["outcome"], "ok");
    audited(&cfg, |r| r["policy"] == "refused");
}

#[test]
fn an_approval_nobody_answers_is_refused_at_its_timeout_and_a_late_answer_changes_nothing() {
    let (_l, cfg) = layout(
        "policy:\n  rules:\n    - name: formatting-needs-a-yes\n      \
         when: \"tool.name == 'json_format'\"\n      outcome: approve\n  \
         approval_timeout_secs: 1\n",
    );
    let mut s = legacy_session(&cfg, &[], json!({"elicitation": {}}));
    let format = call("json_format", json!({"json": "{\"a\":1}"}));
    s.send(&request(1, "tools/call", format.clone()));
    let asked = s
        .recv(Duration::from_secs(30))
        .expect("the approval question");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    // Nobody answers: the call ends refused once the second has passed (waited for as an event,
    // with a generous deadline, never timed).
    let (refused, _) = s.response_within(&json!(1), Duration::from_secs(60));
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let why = text_of(&refused);
    assert!(
        why.contains("formatting-needs-a-yes") && why.contains("no answer came in time"),
        "{why}"
    );
    // The answer that comes too late approves nothing, and the session goes on serving.
    s.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"approve": true}}}));
    let listed = s.call(2, "tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let refused = audited(&cfg, |r| r["policy"] == "refused");
    assert_eq!(refused["policy_rule"], "formatting-needs-a-yes");
    assert_ne!(refused["outcome"], "ok", "{refused}");
}

/// `params` as a 2026 request from a client with `caps`.
fn with_caps(params: Value, caps: Value) -> Value {
    let mut p = with_meta(params);
    p["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps;
    p
}

#[test]
fn a_2026_client_gets_an_input_required_round_and_its_yes_runs_the_call() {
    let (_l, cfg) = layout(RULES);
    let mut s = StdioServer::start(&cfg);
    let caps = json!({"elicitation": {}});
    let format = || call("json_format", json!({"json": "[1,2]", "indent": 2}));
    let first = s.call(1, "tools/call", with_caps(format(), caps.clone()));
    let round = &first["result"];
    assert_eq!(round["resultType"], "input_required", "{first}");
    assert_eq!(
        round["inputRequests"][APPROVAL_KEY]["method"], "elicitation/create",
        "{first}"
    );
    let state = round["requestState"].as_str().unwrap().to_owned();

    let mut no = format();
    no["inputResponses"] =
        json!({APPROVAL_KEY: {"action": "accept", "content": {"approve": false}}});
    no["requestState"] = json!(state.clone());
    let refused = s.call(2, "tools/call", with_caps(no, caps.clone()));
    assert_eq!(refused["result"]["isError"], true, "{refused}");

    let mut yes = format();
    yes["inputResponses"] =
        json!({APPROVAL_KEY: {"action": "accept", "content": {"approve": true}}});
    yes["requestState"] = json!(state);
    let done = s.call(3, "tools/call", with_caps(yes, caps));
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_ne!(done["result"]["isError"], true, "{done}");
}

#[test]
fn a_rule_that_does_not_compile_stops_start_up_naming_it_and_its_position() {
    let (l, cfg) = layout(
        "policy:\n  rules:\n    - name: broken-rule\n      when: \"args.text ==\"\n      outcome: allow\n",
    );
    let out = l.run(&cfg, &["serve", "--stdio"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken-rule"), "{stderr}");
    assert!(stderr.contains("1:"), "the position: {stderr}");
    // B8: the message, and the CEL code frame under it, once.
    assert_eq!(stderr.matches("does not compile").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("| args.text ==").count(), 1, "{stderr}");
    // A rule naming a budget that does not exist: said once, by `list` too.
    let cfg = l.config(
        "tool_dirs: [d]\npolicy:\n  rules:\n    - name: on-a-budget\n      outcome: limit\n      \
         budget: nope\n",
    );
    let out = l.run(&cfg, &["list"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("budget `nope` is not defined").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_reload_with_a_bad_rule_keeps_the_rules_in_force_and_a_good_one_replaces_them() {
    let deny_all = |message: &str| {
        format!(
            "tool_dirs: [d]\nstdio_user: ana\npolicy:\n  rules:\n    - name: no-replace\n      \
             when: \"tool.name == 'regex_replace'\"\n      outcome: deny\n      message: \"{message}\"\n"
        )
    };
    let l = Layout::new();
    l.install("d", "mcp-text", None);
    let cfg = l.config(&deny_all("first rules"));
    let mut s = legacy_session(&cfg, &[], json!({}));
    let replace = || {
        call(
            "regex_replace",
            json!({"pattern": "a", "text": "a", "replacement": "b"}),
        )
    };
    assert_eq!(text_of(&s.call(1, "tools/call", replace())), "first rules");

    l.config(
        "tool_dirs: [d]\nstdio_user: ana\npolicy:\n  rules:\n    - name: typo\n      \
         when: \"tool.name = \"\n      outcome: deny\n",
    );
    assert!(
        s.logged("Not applying the changed configuration"),
        "{}",
        s.stderr()
    );
    assert!(s.stderr().contains("typo"), "{}", s.stderr());
    assert_eq!(text_of(&s.call(2, "tools/call", replace())), "first rules");

    l.config(&deny_all("second rules"));
    assert!(s.logged("Call policy reloaded"), "{}", s.stderr());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut id = 3;
    loop {
        let text = text_of(&s.call(id, "tools/call", replace()));
        if text == "second rules" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new rule never applied: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
        id += 1;
    }
}

#[test]
fn policy_test_prints_the_matching_rule_and_outcome_without_calling() {
    let (l, cfg) = layout(RULES);
    let long = format!(
        "{{\"pattern\": \"x\", \"text\": \"{}\", \"replacement\": \"\"}}",
        "x".repeat(70)
    );
    let out = l.run(
        &cfg,
        &["policy", "test", "--as", "ana", "regex_replace", &long],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rule: short-texts-only"), "{text}");
    assert!(text.contains("outcome: deny"), "{text}");
    assert!(text.contains("at most 64 characters"), "{text}");

    let out = l.run(
        &cfg,
        &[
            "policy",
            "test",
            "--as",
            "ana",
            "--agent",
            "billing",
            "--json",
            "regex_match",
            r#"{"pattern": "a", "text": "a"}"#,
        ],
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["rule"], "billing-may-match", "{json}");
    assert_eq!(json["outcome"], "allow");

    let out = l.run(&cfg, &["policy", "test", "--as", "ana", "json_query", "{}"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("outcome: limit") && text.contains("queries"),
        "{text}"
    );

    let out = l.run(
        &cfg,
        &["policy", "test", "--as", "ana", "no_such_tool", "{}"],
    );
    assert!(!out.status.success());
}

#[test]
fn policy_test_tries_a_rule_with_the_claims_given() {
    let (l, cfg) = layout(
        "policy:\n  rules:\n    - name: reviewers-match\n      \
         when: \"tool.name == 'regex_match' && has(caller.claims.groups) && 'reviewer' in caller.claims.groups\"\n      \
         outcome: allow\n    - name: nobody-else-matches\n      \
         when: \"tool.name == 'regex_match'\"\n      outcome: deny\n      message: \"reviewers only\"\n",
    );
    let args = r#"{"pattern": "a", "text": "a"}"#;
    let decide = |claims: Option<&str>| {
        let mut argv = vec!["policy", "test", "--as", "ana", "--json"];
        if let Some(c) = claims {
            argv.extend(["--claims", c]);
        }
        argv.extend(["regex_match", args]);
        let out = l.run(&cfg, &argv);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        (json["rule"].clone(), json["outcome"].clone())
    };
    assert_eq!(
        decide(Some(r#"{"groups": ["reviewer", "ops"]}"#)),
        (json!("reviewers-match"), json!("allow"))
    );
    assert_eq!(
        decide(Some(r#"{"groups": ["ops"]}"#)),
        (json!("nobody-else-matches"), json!("deny"))
    );
    assert_eq!(decide(None), (json!("nobody-else-matches"), json!("deny")));
    let out = l.run(
        &cfg,
        &[
            "policy",
            "test",
            "--as",
            "ana",
            "--claims",
            "[1]",
            "regex_match",
            args,
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--claims must be a JSON object"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_tool_calling_a_tool_is_policed_as_its_caller() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config(
        "tool_dirs: [d]\nstdio_user: ana\npolicy:\n  rules:\n    - name: no-secrets\n      \
         when: \"tool.name == 'echo' && args.text.contains('secret') && caller.user == 'ana'\"\n      \
         outcome: deny\n      message: \"no secrets through echo\"\n",
    );
    let mut s = legacy_session(&cfg, &[], json!({}));
    let fine = s.call(1, "tools/call", call("shout", json!({"text": "hi"})));
    assert_eq!(text_of(&fine), "HI", "{fine}");
    // `shout` itself matches no rule; the `echo` it calls does, as `ana`.
    let denied = s.call(2, "tools/call", call("shout", json!({"text": "a secret"})));
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert!(
        text_of(&denied).contains("no secrets through echo"),
        "{denied}"
    );
}

/// Rules on resource reads and prompts — of a plugin (`fixture-conformance`) and of an upstream
/// server (the Python SDK server, prefix `py_`) — beside a rule without `on`, which still polices
/// tool calls only.
const READS_AND_PROMPTS: &str = r#"
policy:
  rules:
    - name: no-static-text
      on: [resources]
      when: "resource.uri == 'test://static-text'"
      outcome: deny
      message: "static text is off limits"
    - name: asked-reads
      on: [resources]
      when: "resource.uri.startsWith('test://template/ask')"
      outcome: approve
      show: [id]
    - name: template-reads-on-a-budget
      on: [resources]
      when: "resource.uri.startsWith('test://template/')"
      outcome: limit
      budget: reads
    - name: no-deny-argument
      on: [prompts]
      when: "prompt.name == 'test_prompt_with_arguments' && args.arg1 == 'deny'"
      outcome: deny
      message: "not this argument"
    - name: asked-prompts
      on: [prompts]
      when: "has(args.arg1) && args.arg1 == 'ask'"
      outcome: approve
      show: [arg2]
    - name: prompts-on-a-budget
      on: [prompts]
      when: "prompt.name == 'test_prompt_with_arguments'"
      outcome: limit
      budget: prompts
    - name: not-through-the-upstream
      on: [resources, prompts]
      when: "kind == 'resource' && resource.plugin == 'py' && resource.uri.endsWith('/Eve') || kind == 'prompt' && prompt.plugin == 'py' && args.code.contains('rm -rf')"
      outcome: deny
      message: "not through the upstream"
    - name: tools-as-before
      when: "tool.name == 'test_simple_text'"
      outcome: deny
      message: "tools are policed as before"
  budgets:
    reads: {calls: 2, per_secs: 3600}
    prompts: {calls: 2, per_secs: 3600}
"#;

/// The Python client's report of `tests/clients/policy_client.py` in `mode` over stdio.
fn policy_client(mode: &str, py: &Path, cfg: &Path) -> Value {
    let target = mcp_host_tests::clients::stdio_command(cfg);
    mcp_host_tests::clients::python_report(py, "policy_client.py", mode, &target)
}

/// Step `i` was refused with JSON-RPC `code`, its message containing `says` (and `rule` in
/// `data.rule` when given).
fn refused_step(report: &Value, i: usize, code: i64, says: &str, rule: &str) {
    let s = &report["steps"][i];
    assert_eq!(s["ok"], false, "step {i}: {report}");
    assert_eq!(s["code"], code, "step {i}: {report}");
    let message = s["message"].as_str().unwrap_or("");
    assert!(message.contains(says), "step {i}: {message}");
    assert_eq!(s["data"]["rule"], rule, "step {i}: {report}");
}

#[test]
fn rules_deny_limit_and_approve_resource_reads_and_prompts_for_the_python_client_in_both_eras() {
    let Some(py) = mcp_host_tests::clients::python() else {
        return;
    };
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let upstream = mcp_host_tests::workspace_root().join("tests/fixtures/upstream/server.py");
    let cfg = l.config(&format!(
        "tool_dirs:\n  - d\n  - server: {{command: [{:?}, {:?}]}}\n    name: py\n    prefix: py_\n\
         stdio_user: ana\n{READS_AND_PROMPTS}",
        py.to_string_lossy(),
        upstream.to_string_lossy()
    ));
    for (mode, version) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let r = policy_client(mode, &py, &cfg);
        assert_eq!(r["protocol_version"], version, "{r}");
        let ok = |i: usize, has: &str| {
            let s = &r["steps"][i];
            assert_eq!(s["ok"], true, "{mode} step {i}: {r}");
            assert!(
                s["text"].as_str().unwrap_or("").contains(has),
                "{mode} step {i}: {r}"
            );
        };
        // A read: denied; two on the budget, the third refused with retryAfter; approved, refused.
        refused_step(&r, 0, -32602, "static text is off limits", "no-static-text");
        ok(1, "");
        ok(2, "");
        let limited = &r["steps"][3];
        assert_eq!(limited["code"], -32010, "{mode}: {r}");
        assert!(limited["data"]["retryAfter"].as_u64().is_some(), "{r}");
        assert_eq!(limited["data"]["rule"], "template-reads-on-a-budget");
        ok(4, "ask-yes");
        refused_step(
            &r,
            5,
            -32602,
            "needs approval (policy rule `asked-reads`)",
            "asked-reads",
        );
        // A prompt: the same three outcomes.
        refused_step(&r, 6, -32602, "not this argument", "no-deny-argument");
        ok(7, "arg1='ask'");
        refused_step(
            &r,
            8,
            -32602,
            "needs approval (policy rule `asked-prompts`)",
            "asked-prompts",
        );
        ok(9, "arg1='a'");
        ok(10, "arg1='a'");
        assert_eq!(r["steps"][11]["code"], -32010, "{mode}: {r}");
        assert_eq!(r["steps"][11]["data"]["rule"], "prompts-on-a-budget");
        // An upstream server's read and prompt, before it is asked.
        ok(12, "Hello, Ada");
        refused_step(
            &r,
            13,
            -32602,
            "not through the upstream",
            "not-through-the-upstream",
        );
        ok(14, "fn main() {}");
        refused_step(
            &r,
            15,
            -32602,
            "not through the upstream",
            "not-through-the-upstream",
        );
        // A rule without `on` polices tool calls, as it always did.
        assert_eq!(r["steps"][16]["ok"], false, "{r}");
        assert_eq!(r["steps"][16]["text"], "tools are policed as before");
        // The human was asked four times, shown the fields the rules chose.
        let questions: Vec<&str> = r["questions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(questions.len(), 4, "{mode}: {questions:?}");
        assert!(
            questions[0].contains("test://template/ask-yes/data")
                && questions[0].contains("id: \"ask-yes\""),
            "{questions:?}"
        );
        assert!(
            questions[2].contains("test_prompt_with_arguments")
                && questions[2].contains("arg2: \"yes\""),
            "{questions:?}"
        );
    }
}

/// Rules on `fixture-conformance`'s static text and its prompt with arguments, for the audit log.
const AUDITED_READS_AND_PROMPTS: &str = r#"
policy:
  rules:
    - name: no-static-text
      on: [resources]
      when: "resource.uri == 'test://static-text'"
      outcome: deny
      message: "static text is off limits"
    - name: no-deny-argument
      on: [prompts]
      when: "prompt.name == 'test_prompt_with_arguments' && args.arg1 == 'deny'"
      outcome: deny
    - name: asked-prompts
      on: [prompts]
      when: "args.arg1 == 'ask'"
      outcome: approve
    - name: one-prompt-an-hour
      on: [prompts]
      when: "prompt.name == 'test_prompt_with_arguments'"
      outcome: limit
      budget: prompts
  budgets:
    prompts: {calls: 1, per_secs: 3600}
agents:
  reader:
    allow: ["*"]
"#;

#[test]
fn decisions_on_resource_reads_and_prompts_land_in_the_audit_log_without_argument_values() {
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nstdio_user: ana\naudit_log: audit.jsonl\n{AUDITED_READS_AND_PROMPTS}"
    ));
    let mut s = legacy_session(&cfg, &["--agent", "reader"], json!({}));
    let read = s.call(1, "resources/read", json!({"uri": "test://static-text"}));
    assert!(
        read["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("off limits"),
        "{read}"
    );
    let prompt = |arg1: &str| {
        json!({"name": "test_prompt_with_arguments",
               "arguments": {"arg1": arg1, "arg2": format!("hush-{arg1}")}})
    };
    let denied = s.call(2, "prompts/get", prompt("deny"));
    assert!(denied["error"].is_object(), "{denied}");
    // The client cannot be asked (no elicitation): refused.
    let refused = s.call(3, "prompts/get", prompt("ask"));
    assert!(refused["error"].is_object(), "{refused}");
    let ran = s.call(4, "prompts/get", prompt("a"));
    assert!(ran["result"]["messages"].is_array(), "{ran}");
    let limited = s.call(5, "prompts/get", prompt("b"));
    assert_eq!(
        limited["error"]["data"]["rule"], "one-prompt-an-hour",
        "{limited}"
    );

    let read = audited(&cfg, |r| r["request"] == "resources/read");
    assert_eq!(read["resource"], "test://static-text", "{read}");
    assert_eq!(read["policy_rule"], "no-static-text", "{read}");
    assert_eq!(read["policy"], "denied", "{read}");
    assert_eq!(read["caller"], "ana", "{read}");
    assert_eq!(read["agent"], "reader", "{read}");
    assert_eq!(read["plugin"], "fixture-conformance", "{read}");
    assert!(read.get("prompt").is_none(), "{read}");
    let decided = |rule: &str, policy: &str| {
        let r = audited(&cfg, |r| {
            r["request"] == "prompts/get" && r["policy"] == policy
        });
        assert_eq!(r["policy_rule"], rule, "{r}");
        assert_eq!(r["prompt"], "test_prompt_with_arguments", "{r}");
        assert_eq!(r["caller"], "ana", "{r}");
    };
    decided("no-deny-argument", "denied");
    decided("asked-prompts", "refused");
    decided("one-prompt-an-hour", "allowed");
    decided("one-prompt-an-hour", "limited");
    let text = std::fs::read_to_string(cfg.parent().unwrap().join("audit.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 5, "one record per decision: {text}");
    assert!(
        !text.contains("hush"),
        "an argument's value in the audit log: {text}"
    );
}

#[test]
fn a_completion_of_a_prompt_or_template_the_policy_denies_shows_no_values() {
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let cfg = l.config(
        r#"tool_dirs: [d]
stdio_user: ana
policy:
  rules:
    - name: no-locked-prompts
      on: [prompts]
      when: "prompt.name == 'test_prompt_with_arguments' && has(args.arg2) && args.arg2 == 'locked'"
      outcome: deny
    - name: no-templates-for-outsiders
      on: [resources]
      when: "caller.agent == 'outsider' && resource.uri.startsWith('test://template/')"
      outcome: deny
agents:
  outsider:
    allow: ["*"]
"#,
    );
    let prompt = |arg2: &str| {
        json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
               "argument": {"name": "arg1", "value": "test"},
               "context": {"arguments": {"arg2": arg2}}})
    };
    let template = json!({"ref": {"type": "ref/resource", "uri": "test://template/{id}/data"},
                          "argument": {"name": "id", "value": "1"}});
    let values = |r: &Value| r["result"]["completion"]["values"].clone();
    let mut s = StdioServer::start(&cfg);
    let open = s.call_modern(1, "completion/complete", prompt("open"));
    assert_eq!(values(&open), json!(["testValue1", "testValue2"]), "{open}");
    let locked = s.call_modern(2, "completion/complete", prompt("locked"));
    assert_eq!(values(&locked), json!([]), "{locked}");
    assert_eq!(locked["result"]["completion"]["total"], 0, "{locked}");
    let ids = s.call_modern(3, "completion/complete", template.clone());
    assert_eq!(values(&ids), json!(["123"]), "{ids}");

    let mut outsider = StdioServer::start_with(&cfg, &["--agent", "outsider"], &[]);
    let none = outsider.call_modern(1, "completion/complete", template);
    assert_eq!(values(&none), json!([]), "{none}");
    let read = outsider.call_modern(
        2,
        "resources/read",
        json!({"uri": "test://template/123/data"}),
    );
    assert_eq!(
        read["error"]["data"]["rule"], "no-templates-for-outsiders",
        "{read}"
    );
}

/// A file tree (`srv/payroll/salaries.txt`, `srv/public/notes.txt`) in `l`, served by the naive
/// Python file server (`tests/fixtures/upstream/files.py`, upstream `files`) beside
/// `fixture-conformance`, with `extra` config lines (`{root}` in them is the tree's `file://` URI);
/// the tree's `file://` URI.
fn file_server(l: &Layout, py: &Path, extra: &str) -> (PathBuf, String) {
    let srv = l.dir("srv");
    for (dir, file, text) in [
        ("payroll", "salaries.txt", "ana: 9000"),
        ("public", "notes.txt", "hello"),
    ] {
        std::fs::create_dir_all(srv.join(dir)).unwrap();
        std::fs::write(srv.join(dir).join(file), text).unwrap();
    }
    let root = format!("file://{}", srv.display());
    l.install("d", "fixture-conformance", None);
    let files = mcp_host_tests::workspace_root().join("tests/fixtures/upstream/files.py");
    let cfg = l.config(&format!(
        "tool_dirs:\n  - d\n  - server: {{command: [{:?}, {:?}]}}\n    name: files\n    \
         prefix: files_\nstdio_user: ana\naudit_log: audit.jsonl\n{}",
        py.to_string_lossy(),
        files.to_string_lossy(),
        extra.replace("{root}", &root)
    ));
    (cfg, root)
}

/// Read `uri` on a 2026-07-28 request: the result's text, or the error.
fn read(s: &mut StdioServer, id: u64, uri: &str) -> Result<String, Value> {
    let resp = s.call_modern(id, "resources/read", json!({ "uri": uri }));
    match resp.get("error") {
        Some(e) => Err(e.clone()),
        None => Ok(resp["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{resp}"))
            .to_owned()),
    }
}

/// Spellings of `{root}/payroll/salaries.txt` (`root` a `file://` URI) that a file server reads
/// as that file.
fn payroll_spellings(root: &str) -> Vec<String> {
    let path = root.trim_start_matches("file://");
    vec![
        format!("{root}/payroll/salaries.txt"),
        format!("{root}//payroll/salaries.txt"),
        format!("{root}/./payroll/salaries.txt"),
        format!("{root}/public/../payroll/salaries.txt"),
        format!("{root}/public/%2E%2E/payroll/salaries.txt"),
        format!("{root}/%70ayroll/salaries.txt"),
        format!("FILE://{path}/payroll/salaries.txt"),
        format!("file://LocalHost{path}/payroll/salaries.txt"),
    ]
}

/// The docs' payroll rule, and a rule on the URI as sent.
const PAYROLL_RULES: &str = r#"
policy:
  rules:
    - name: no-payroll-files
      on: [resources]
      when: "resource.uri.startsWith('{root}/payroll/')"
      outcome: deny
      message: "payroll files are for HR"
    - name: no-climbing
      on: [resources]
      when: "resource.raw.contains('/../')"
      outcome: deny
      message: "no climbing"
"#;

#[test]
fn a_payroll_rule_holds_for_every_spelling_of_its_uri_and_rules_see_the_uri_as_sent() {
    let Some(py) = mcp_host_tests::clients::python() else {
        return;
    };
    let l = Layout::new();
    let (cfg, root) = file_server(&l, &py, PAYROLL_RULES);
    let mut s = StdioServer::start(&cfg);
    let mut id = 0;
    let mut get = |uri: &str| {
        id += 1;
        read(&mut s, id, uri)
    };
    for uri in payroll_spellings(&root) {
        let denied = get(&uri).expect_err(&uri);
        assert_eq!(
            denied["data"]["rule"], "no-payroll-files",
            "{uri}: {denied}"
        );
        assert!(
            denied["message"]
                .as_str()
                .unwrap()
                .contains("payroll files are for HR"),
            "{uri}: {denied}"
        );
    }
    // What has no normal form is refused, not guessed at (the file server would read payroll).
    for uri in [
        format!("{root}/public%2F..%2Fpayroll/salaries.txt"),
        format!("{root}/public/..%2fpayroll/salaries.txt"),
        "file:///../../../../../../../etc/hostname".to_owned(),
    ] {
        let refused = get(&uri).expect_err(&uri);
        assert_eq!(refused["code"], -32602, "{uri}: {refused}");
        assert_eq!(refused["data"]["uri"], uri.as_str(), "{refused}");
        let message = refused["message"].as_str().unwrap();
        assert!(message.contains("Invalid resource URI"), "{message}");
        assert!(refused["data"].get("rule").is_none(), "{refused}");
    }
    // `resource.raw` is the URI as sent: a climb that lands outside payroll is still seen.
    let climbed = get(&format!("{root}/payroll/../public/notes.txt")).unwrap_err();
    assert_eq!(climbed["data"]["rule"], "no-climbing", "{climbed}");
    assert!(
        climbed["message"].as_str().unwrap().contains("no climbing"),
        "{climbed}"
    );
    // The upstream is asked for the normal form — what the rules judged.
    assert_eq!(
        get(&format!("{root}/public//./notes.txt")),
        Ok(format!("{root}/public/notes.txt -> hello"))
    );
    // A listed resource, read by another spelling, is asked for as its server lists it.
    assert_eq!(get("files://box/./Listed"), Ok("listed".into()));
    assert_eq!(get("FILES://BOX/Listed"), Ok("listed".into()));
    let text = get("TEST://static-text").unwrap();
    assert!(text.contains("static text resource"), "{text}");
    // The audit record names the URI read, and the one sent when it differs.
    let sent = format!("{root}/public/%2E%2E/payroll/salaries.txt");
    let record = audited(&cfg, |r| r["resource_raw"] == sent.as_str());
    assert_eq!(
        record["resource"],
        format!("{root}/payroll/salaries.txt"),
        "{record}"
    );
    assert_eq!(record["policy_rule"], "no-payroll-files", "{record}");
    let plain = audited(&cfg, |r| {
        r["resource"] == format!("{root}/payroll/salaries.txt").as_str()
            && r.get("resource_raw").is_none()
    });
    assert_eq!(plain["policy"], "denied", "{plain}");
}

#[test]
fn agents_views_of_resources_see_every_spelling_as_its_normal_form() {
    let Some(py) = mcp_host_tests::clients::python() else {
        return;
    };
    let l = Layout::new();
    let agents = "agents:\n  outsider:\n    deny: [\"{root}/payroll/*\"]\n  \
                  boxed:\n    allow: [\"files://box/*\", \"test://static-text\"]\n";
    let (cfg, root) = file_server(&l, &py, agents);
    let mut outsider = StdioServer::start_with(&cfg, &["--agent", "outsider"], &[]);
    for (i, uri) in payroll_spellings(&root).iter().enumerate() {
        let hidden = read(&mut outsider, i as u64 + 1, uri).expect_err(uri);
        assert_eq!(hidden["code"], -32602, "{uri}: {hidden}");
        assert_eq!(hidden["data"]["uri"], uri.as_str(), "{uri}: {hidden}");
        assert!(
            hidden["message"].as_str().unwrap().contains("not found"),
            "{uri}: {hidden}"
        );
    }
    assert_eq!(
        read(&mut outsider, 100, &format!("{root}/public/notes.txt")),
        Ok(format!("{root}/public/notes.txt -> hello"))
    );
    drop(outsider);

    // An allow list in normal form admits every spelling, and lists what it admits.
    let mut boxed = StdioServer::start_with(&cfg, &["--agent", "boxed"], &[]);
    assert_eq!(
        read(&mut boxed, 1, "Files://Box/Listed"),
        Ok("listed".into())
    );
    assert_eq!(
        read(&mut boxed, 2, "files://BOX/Listed"),
        Ok("listed".into())
    );
    let text = read(&mut boxed, 3, "Test://Static-Text").unwrap();
    assert!(text.contains("static text resource"), "{text}");
    let listed = boxed.call_modern(4, "resources/list", json!({}));
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert_eq!(
        uris,
        ["Files://Box/Listed", "test://static-text"],
        "{listed}"
    );
    let outside = read(&mut boxed, 5, &format!("{root}/public/notes.txt")).unwrap_err();
    assert_eq!(outside["code"], -32602, "{outside}");
}

#[test]
fn a_call_missing_a_required_argument_gets_the_schema_error_and_costs_no_budget_or_question() {
    let (_l, cfg) = layout(
        r#"
policy:
  rules:
    - name: short-texts-only
      when: "tool.name == 'regex_replace' && size(args.text) > 64"
      outcome: deny
    - name: formatting-needs-a-yes
      when: "tool.name == 'json_format'"
      outcome: approve
    - name: one-query
      when: "tool.name == 'json_query'"
      outcome: limit
      budget: one
  budgets:
    one: {calls: 1, per_secs: 3600}
"#,
    );
    let mut s = legacy_session(&cfg, &[], json!({"elicitation": {}}));
    let invalid = |response: &Value, tool: &str, argument: &str| {
        assert_eq!(response["result"]["isError"], true, "{response}");
        let text = text_of(response);
        assert!(
            text.contains(&format!("Invalid arguments for tool {tool}"))
                && text.contains(argument)
                && !text.contains("could not be evaluated"),
            "{text}"
        );
    };
    // The rule reads `args.text`: the call is answered by the schema, not by the rule failing.
    let no_text = s.call(
        1,
        "tools/call",
        call("regex_replace", json!({"pattern": "x", "replacement": "y"})),
    );
    invalid(&no_text, "regex_replace", "text");
    // An approval is not asked for a call that cannot run: the answer comes, no question.
    s.send(&request(
        2,
        "tools/call",
        call("json_format", json!({"indent": 4})),
    ));
    let first = s.recv(Duration::from_secs(30)).expect("an answer");
    assert_eq!(first["id"], 2, "a question before the answer: {first}");
    invalid(&first, "json_format", "json");
    // Nor is a budget drawn on: two invalid calls, then the one call the budget allows runs.
    for id in [3, 4] {
        let no_path = s.call(id, "tools/call", call("json_query", json!({"json": "{}"})));
        invalid(&no_path, "json_query", "path");
    }
    let ran = s.call(
        5,
        "tools/call",
        call("json_query", json!({"json": "{\"a\": 1}", "path": "$.a"})),
    );
    assert!(ran.get("error").is_none(), "{ran}");
    assert_ne!(ran["result"]["isError"], true, "{ran}");
    let limited = s.call(
        6,
        "tools/call",
        call("json_query", json!({"json": "{\"a\": 1}", "path": "$.a"})),
    );
    assert_eq!(limited["error"]["code"], -32010, "{limited}");
}

/// Two replicas on one Redis, with budgets on `fixture-basic`'s tools: calls per window
/// (`echo`, `tick`) and calls at once (`wait_for`).
fn shared_budget_replicas(l: &Layout, redis: &mcp_host_tests::fleet::Redis) -> [HttpServer; 2] {
    l.install("d", "fixture-basic", None);
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nstore: {}\nrequest_state: {{keys: [\"{}\"]}}\n\
         policy:\n  rules:\n    - name: echoes-on-a-budget\n      when: \"tool.name == 'echo'\"\n      \
         outcome: limit\n      budget: echoes\n    - name: ticks-on-a-budget\n      \
         when: \"tool.name == 'tick'\"\n      outcome: limit\n      budget: ticks\n    \
         - name: one-wait-at-a-time\n      when: \"tool.name == 'wait_for'\"\n      outcome: limit\n      \
         budget: one-at-a-time\n  budgets:\n    echoes: {{calls: 3, per_secs: 3600}}\n    \
         ticks: {{calls: 100, per_secs: 60}}\n    one-at-a-time: {{concurrent: 1}}\n",
        redis.url(),
        mcp_host_tests::fleet::SHARED_KEY
    ));
    ["r1", "r2"].map(|r| HttpServer::start_with_env(&cfg, &[("MCP_HOST_REPLICA", r)]))
}

/// A 2026 `tools/call` of `name` with `args` on `s`: the HTTP status and the body.
fn call_on(s: &HttpServer, id: u64, name: &str, args: Value) -> (u16, Value) {
    let resp = s.modern(id, "tools/call", call(name, args));
    (resp.status, resp.json())
}

/// Start a 2026 `wait_for` call (request `id`) on `s` and wait until it runs: the connection its
/// answer comes on, and the gate file that ends it.
fn start_gated_call(
    s: &HttpServer,
    l: &Layout,
    id: u64,
) -> (mcp_host_tests::serve::HttpConn, PathBuf) {
    let (gate, running) = (l.root.path().join("gate"), l.root.path().join("running"));
    let h = mcp_host_tests::serve::modern_headers("tools/call", Some("wait_for"));
    let mut headers = mcp_host_tests::serve::header_refs(&h);
    headers.push(("Content-Type", "application/json"));
    let args = json!({"path": gate, "started": running});
    let body = request(id, "tools/call", with_meta(call("wait_for", args)));
    let mut conn = s.connect();
    conn.send("POST", "/mcp", &headers, body.to_string().as_bytes());
    mcp_host_tests::wait_for_file(&running);
    (conn, gate)
}

/// `body` is a JSON-RPC error whose message contains `text`.
#[track_caller]
fn error_says(body: &Value, text: &str) {
    let message = body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains(text), "{body}");
}

/// Wait (generously) until `s`'s readiness is `status` (Redis lost or back).
fn ready_becomes(s: &HttpServer, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let resp = s.connect().request("GET", "/healthz", &[], b"");
        if resp.status == status {
            return;
        }
        assert!(Instant::now() < deadline, "readiness stays {resp:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_budget_is_shared_by_two_replicas_on_one_redis_and_refuses_while_redis_is_gone() {
    let Some(redis_bin) = mcp_host_tests::fleet::redis_server() else {
        return;
    };
    let l = Layout::new();
    let mut redis = mcp_host_tests::fleet::Redis::start(&redis_bin);
    let [r1, r2] = shared_budget_replicas(&l, &redis);
    let echo = || json!({"text": "hi"});
    // Three calls in the window, spent across both replicas; the fourth is refused on either.
    for (id, s) in [(1, &r1), (2, &r2), (3, &r1)] {
        let (status, body) = call_on(s, id, "echo", echo());
        assert_eq!(status, 200, "{body}");
        assert_ne!(body["result"]["isError"], true, "{body}");
    }
    for (id, s) in [(4, &r2), (5, &r1)] {
        let (status, body) = call_on(s, id, "echo", echo());
        assert_eq!(status, 429, "{body}");
        let retry = body["error"]["data"]["retryAfter"].as_u64().unwrap();
        // 3 calls per hour: the next one is about 20 minutes away.
        assert!((1000..=1200).contains(&retry), "{body}");
        assert_eq!(body["error"]["data"]["budget"], "echoes");
    }
    // A tool's call of `echo` (`shout` calls it) draws on the same shared budget, waited for on
    // the plugin's thread.
    let (status, body) = call_on(&r2, 55, "shout", echo());
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert!(
        text_of(&body).contains("budget `echoes` is exhausted"),
        "{body}"
    );

    // One call at once across the fleet: while r1 runs one, r2's is refused; then it runs.
    let (mut held, gate) = start_gated_call(&r1, &l, 6);
    let (status, body) = call_on(&r2, 7, "wait_for", json!({"path": gate}));
    assert_eq!(status, 429, "{body}");
    error_says(&body, "1 calls at once");
    mcp_host_tests::open_gate(&gate, "opened");
    assert_eq!(held.read_response().status, 200);
    // Its slot is given back once the call ended (retried: the release is not the answer).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = call_on(&r2, 8, "wait_for", json!({"path": gate}));
        if status == 200 {
            assert_eq!(text_of(&body), "opened", "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot never came back: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Redis gone: a budgeted call is refused (fails closed, 503 with retryAfter); a call no
    // budget covers still runs; once Redis is back, budgets count again.
    redis.kill();
    ready_becomes(&r2, 503);
    let (status, body) = call_on(&r2, 9, "tick", json!({"millis": 1}));
    assert_eq!(status, 503, "{body}");
    error_says(&body, "budget `ticks` cannot be counted");
    assert!(
        body["error"]["data"]["retryAfter"].as_u64().is_some(),
        "{body}"
    );
    let (status, body) = call_on(&r2, 10, "sleep", json!({"millis": 1}));
    assert_eq!(status, 200, "{body}");
    redis.restart();
    ready_becomes(&r2, 200);
    let (status, body) = call_on(&r2, 11, "tick", json!({"millis": 1}));
    assert_eq!(status, 200, "{body}");
    assert_ne!(body["result"]["isError"], true, "{body}");
}

#[test]
fn a_stopped_replicas_running_call_stops_counting_once_its_lease_runs_out() {
    let Some(redis_bin) = mcp_host_tests::fleet::redis_server() else {
        return;
    };
    let l = Layout::new();
    let redis = mcp_host_tests::fleet::Redis::start(&redis_bin);
    let [mut r1, r2] = shared_budget_replicas(&l, &redis);
    // r1 runs the one call the fleet allows at once, and is killed while it runs.
    let (_held, gate) = start_gated_call(&r1, &l, 1);
    r1.child().kill();
    mcp_host_tests::open_gate(&gate, "opened");
    let (status, body) = call_on(&r2, 2, "wait_for", json!({"path": gate}));
    assert_eq!(status, 429, "the slot is still leased: {body}");
    // Nobody renews it: within its 30 s lease (waited for generously) r2's call is admitted.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut id = 3;
    loop {
        let (status, body) = call_on(&r2, id, "wait_for", json!({"path": gate}));
        if status == 200 {
            assert_eq!(text_of(&body), "opened", "{body}");
            break;
        }
        assert_eq!(status, 429, "{body}");
        assert!(Instant::now() < deadline, "the slot never expired: {body}");
        std::thread::sleep(Duration::from_secs(1));
        id += 1;
    }
}
