//! Many hosts, one service: three `mcp-host serve` replicas sharing a real Redis, behind a real
//! nginx doing plain round robin (no stickiness), driven by the official Python SDK client in
//! 2026-07-28 mode and in legacy mode (`tests/clients/fleet_client.py`): list, call, a
//! multi-round input-required call, tasks started, polled, answered and cancelled,
//! `subscriptions/listen`, a plugin dropped into the shared tool directory heard through every
//! replica, legacy sessions (elicitation, log level, resource subscriptions) served by whichever
//! replica a request reaches — then one replica is killed mid-run and the clients go on.
//!
//! Also: a replica that loses Redis keeps serving stateless calls, refuses what needs the store
//! with a clear error, and reports itself not ready on `/healthz` until Redis is back.
//!
//! Redis and nginx come from `.ci/install-services.sh`, the Python SDK from
//! `.ci/install-clients.sh`; missing ones make these tests skip, unless `MCP_TEST_REQUIRE_CLIENTS`
//! is set (`.ci/run`). The script pauses on gate files while the test acts on the fleet; every
//! wait has a generous deadline and ends as soon as its event happens.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use mcp_host_tests::clients::python;
use mcp_host_tests::fleet::{Fleet, Redis, SHARED_KEY, output_lines, redis_server, replica_config};
use mcp_host_tests::serve::{ChildGuard, HttpServer, WAIT, with_tasks};
use mcp_host_tests::{Layout, artifacts, workspace_root};
use serde_json::{Value, json};

/// The longest the client script may run (it is done in well under a minute; this only stops a
/// hung run).
const RUN: Duration = Duration::from_secs(300);

/// Copy plugin crate `krate` into tool directory `d` atomically (a rename), so no replica's
/// watcher sees a half-written file.
fn drop_plugin(l: &Layout, krate: &str) {
    let src = artifacts().plugin(krate);
    let name = src.file_name().unwrap();
    let staged = l.dir("staging").join(name);
    std::fs::copy(&src, &staged).unwrap();
    std::fs::rename(&staged, l.dir("d").join(name)).unwrap();
}

/// Run the client script against the fleet, acting on its pauses; its JSON report.
fn run_client(python: &std::path::Path, l: &Layout, fleet: &mut Fleet) -> Value {
    let gates = l.dir("gates");
    let mut child = Command::new(python)
        .arg(workspace_root().join("tests/clients/fleet_client.py"))
        .arg(fleet.url())
        .arg(&gates)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = output_lines(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut child = ChildGuard::from_child(child);
    let deadline = Instant::now() + RUN;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match stdout.recv_timeout(left) {
            Ok(line) => {
                if line == "INSTALL" {
                    drop_plugin(l, "fixture-basic");
                    std::fs::write(gates.join("installed"), "").unwrap();
                } else if let Some(name) = line.strip_prefix("KILL ") {
                    fleet.replica(name.trim()).child().kill();
                    std::fs::write(gates.join("killed"), "").unwrap();
                }
                out.push(line);
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                child.kill();
                panic!(
                    "the client did not finish within {RUN:?}; output:\n{}\n{}",
                    out.join("\n"),
                    fleet.logs()
                );
            }
        }
    }
    let status = child.wait_timeout(WAIT).expect("the client exits");
    let stderr = stderr.join().unwrap();
    assert!(
        status.success(),
        "the client failed ({status}):\n{stderr}\nstdout:\n{}\n{}",
        out.join("\n"),
        fleet.logs()
    );
    let last = out.last().map(String::as_str).unwrap_or("");
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("no JSON report ({e}):\n{}\n{stderr}", out.join("\n")))
}

fn replicas_of(records: &[Value]) -> Vec<&str> {
    records
        .iter()
        .map(|r| r["replica"].as_str().unwrap_or(""))
        .collect()
}

#[test]
fn three_replicas_behind_round_robin_nginx_serve_2026_and_legacy_clients_and_survive_losing_one() {
    let Some(python) = python() else { return };
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let Some(mut fleet) = Fleet::start(&l, 3) else {
        return;
    };
    let ready = fleet.get("/healthz");
    assert_eq!(ready.status, 200, "{ready:?}");

    let report = run_client(&python, &l, &mut fleet);
    let logs = fleet.logs();
    let ctx = format!("{report:#}\n{logs}");

    // 2026-07-28: list, call, input-required rounds, tasks, listen.
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in ["greet", "slow_compute", "confirm_delete", "failing_job"] {
        assert!(tools.contains(&t), "{t} missing: {ctx}");
    }
    assert_eq!(report["greet"], "Hello, fleet!", "{ctx}");
    assert_eq!(
        report["multi_round"], "Multi-round complete for Ada who likes teal",
        "{ctx}"
    );
    assert_eq!(report["task_result"], "Computed fleet in 0.5 s", "{ctx}");
    assert_eq!(
        report["cancel"],
        json!({"created": "working", "polled": "working", "end": "cancelled"}),
        "{ctx}"
    );
    let input = &report["input_task"];
    assert_eq!(input["keys"].as_array().unwrap().len(), 1, "{ctx}");
    assert_eq!(input["end"], "completed", "{ctx}");
    assert_eq!(input["text"], "Deleted a.txt", "{ctx}");
    let notified = input["notified"].as_array().unwrap();
    assert_eq!(notified.last().unwrap(), "completed", "{ctx}");
    assert_eq!(report["listen"], "ToolsListChanged", "{ctx}");
    // The plugin dropped into the shared directory: heard on a listen stream of each replica.
    assert_eq!(
        report["watch"],
        json!(["ToolsListChanged", "ToolsListChanged", "ToolsListChanged"]),
        "{ctx}"
    );
    assert_eq!(report["echo"], "from the new plugin", "{ctx}");

    // Legacy (2025-11-25) sessions kept in the store: any replica serves them.
    assert_eq!(report["legacy_version"], "2025-11-25", "{ctx}");
    assert!(report["legacy_tools"].as_u64().unwrap() > 10, "{ctx}");
    assert_eq!(report["legacy_greet"], "Hello, legacy!", "{ctx}");
    assert!(
        report["legacy_elicitation"]
            .as_str()
            .unwrap()
            .contains("action=accept"),
        "{ctx}"
    );
    assert_eq!(
        report["legacy_logs"],
        json!({"at_error": 0, "at_debug": 1}),
        "{ctx}"
    );
    assert_eq!(report["legacy_updated"], "test://watched-resource", "{ctx}");

    // No stickiness: before the kill, each request reached another replica than the one before,
    // and all three served both clients.
    let records = report["records"].as_array().unwrap();
    let kill_at = report["kill_at"].as_u64().unwrap() as usize;
    let before = replicas_of(&records[..kill_at]);
    assert!(
        before.iter().all(|r| !r.is_empty()),
        "unnamed replica: {ctx}"
    );
    // The legacy client opens its GET stream in the background, so its place among the records
    // depends on timing: leave it out (one request out of a round-robin cycle leaves neighbours
    // that still differ). The other requests of each client go one after the other.
    let posts: Vec<&str> = records[..kill_at]
        .iter()
        .filter(|r| r["http"] != "GET")
        .map(|r| r["replica"].as_str().unwrap_or(""))
        .collect();
    for pair in posts.windows(2) {
        assert_ne!(
            pair[0], pair[1],
            "two requests in a row on one replica: {ctx}"
        );
    }
    let [legacy_from, legacy_to] = [0, 1].map(|i| report["legacy_records"][i].as_u64().unwrap());
    let legacy: HashSet<&str> = before[legacy_from as usize..legacy_to as usize]
        .iter()
        .copied()
        .collect();
    assert_eq!(legacy.len(), 3, "legacy requests reached {legacy:?}: {ctx}");
    let modern: HashSet<&str> = before[..report["modern_records"].as_u64().unwrap() as usize]
        .iter()
        .copied()
        .collect();
    assert_eq!(modern.len(), 3, "2026 requests reached {modern:?}: {ctx}");
    for r in &records[..kill_at] {
        assert!(r["status"].as_u64().unwrap() < 500, "{r}: {ctx}");
    }

    // One replica killed mid-run: the task it ran is reported failed by the others, and both
    // clients go on with at most one retried request each.
    let after = &report["after_kill"];
    assert_eq!(after["orphan"]["status"], "failed", "{ctx}");
    assert_eq!(after["greet"], "Hello, survivor!", "{ctx}");
    assert_eq!(after["task"], "Computed after in 0.2 s", "{ctx}");
    assert_eq!(after["legacy_greet"], "Hello, legacy survivor!", "{ctx}");
    assert!(
        after["legacy_elicitation"]
            .as_str()
            .unwrap()
            .contains("action=accept"),
        "{ctx}"
    );
    assert!(after["tools"].as_u64().unwrap() > 10, "{ctx}");
    let retries = report["retries"].as_array().unwrap();
    assert!(
        retries.len() <= 2,
        "more than a retried request per client: {ctx}"
    );
    let killed = report["killed"].as_str().unwrap_or_default().to_owned();
    let survivors: HashSet<&str> = replicas_of(&records[kill_at..])
        .into_iter()
        .filter(|r| !r.is_empty())
        .collect();
    assert!(
        !survivors.contains(killed.as_str()),
        "{killed} answered after its death: {ctx}"
    );
    assert_eq!(survivors.len(), 2, "{survivors:?}: {ctx}");
    let ready = fleet.get("/healthz");
    assert_eq!(ready.status, 200, "{ready:?}");
}

/// A 2026 request declaring the tasks extension; its JSON-RPC message.
fn tasks_rpc(s: &HttpServer, method: &str, params: Value) -> Value {
    s.modern(1, method, with_tasks(params)).message()
}

#[test]
fn a_replica_that_loses_redis_serves_stateless_calls_refuses_store_requests_and_is_not_ready() {
    let Some(redis_bin) = redis_server() else {
        return;
    };
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let mut redis = Redis::start(&redis_bin);
    let cfg = replica_config(&l, &redis.url());
    let s = HttpServer::start(&cfg);
    let healthz = |s: &HttpServer| s.connect().request("GET", "/healthz", &[], b"");
    assert_eq!(healthz(&s).status, 200);
    let task = tasks_rpc(
        &s,
        "tools/call",
        json!({"name": "failing_job", "arguments": {}}),
    );
    assert_eq!(task["result"]["resultType"], "task", "{task}");

    redis.kill();
    // Not ready once the store stops answering (checked every second; wait for it).
    let deadline = Instant::now() + WAIT;
    let down = loop {
        let resp = healthz(&s);
        if resp.status == 503 {
            break resp;
        }
        assert!(
            Instant::now() < deadline,
            "still ready without Redis: {resp:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(down.text().contains("cannot be reached"), "{down:?}");
    let live = s.connect().request("GET", "/livez", &[], b"");
    assert_eq!(live.status, 200, "alive all the same: {live:?}");

    // Stateless calls go on.
    let greet = s.modern(
        2,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "offline"}}),
    );
    assert_eq!(greet.status, 200, "{greet:?}");
    assert_eq!(
        greet.message()["result"]["content"][0]["text"],
        "Hello, offline!"
    );
    // A tool that may run as a task runs without one.
    let sync = tasks_rpc(
        &s,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "sync"}}),
    );
    assert_eq!(sync["result"]["resultType"], "complete", "{sync}");
    assert_eq!(sync["result"]["content"][0]["text"], "Computed sync in 0 s");
    // What needs the store is refused with a clear error.
    let required = tasks_rpc(
        &s,
        "tools/call",
        json!({"name": "failing_job", "arguments": {}}),
    );
    assert_eq!(required["error"]["code"], -32603, "{required}");
    assert!(
        required["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be reached"),
        "{required}"
    );
    let get = tasks_rpc(&s, "tasks/get", json!({"taskId": task["result"]["taskId"]}));
    assert!(get["error"]["message"].as_str().is_some(), "{get}");
    let legacy = s.post(
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "0"}}}),
    );
    assert_eq!(legacy.status, 503, "{legacy:?} {}", legacy.text());

    // Redis back (empty): ready again, tasks again.
    redis.restart();
    let deadline = Instant::now() + WAIT;
    while healthz(&s).status != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready again:\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let again = tasks_rpc(
        &s,
        "tools/call",
        json!({"name": "failing_job", "arguments": {}}),
    );
    assert_eq!(again["result"]["resultType"], "task", "{again}");
}

/// Every 503 a replica answers while its store is down says when to retry (`Retry-After`): a
/// call that needs the store (`tasks/get`), a request in a legacy session (kept in the store), a
/// call whose budget cannot be counted (fails closed; the header says what `data.retryAfterSecs`
/// says). The soak run (`cargo bench -p mcp-host --bench soak`) found them without it.
#[test]
fn while_the_store_is_down_every_503_says_when_to_retry() {
    let Some(redis_bin) = redis_server() else {
        return;
    };
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let mut redis = Redis::start(&redis_bin);
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nstore: {}\nrequest_state: {{keys: [\"{SHARED_KEY}\"]}}\n\
         policy:\n  rules:\n    - name: greets-on-a-budget\n      when: \"tool.name == 'greet'\"\n\
         \x20     outcome: limit\n      budget: greets\n  budgets:\n    greets: {{calls: 100, per_secs: 60}}\n",
        redis.url()
    ));
    let s = HttpServer::start(&cfg);
    let (_, session) = s.initialize("2025-11-25");
    redis.kill();
    let deadline = Instant::now() + WAIT;
    while s.connect().request("GET", "/healthz", &[], b"").status != 503 {
        assert!(Instant::now() < deadline, "still ready without Redis");
        std::thread::sleep(Duration::from_millis(50));
    }
    let retry_after = |resp: &mcp_host_tests::serve::HttpResponse| {
        assert_eq!(resp.status, 503, "{resp:?} {}", resp.text());
        resp.header("retry-after")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("a 503 without Retry-After: {resp:?} {}", resp.text()))
    };
    let get = s.modern(1, "tasks/get", with_tasks(json!({"taskId": "some-task"})));
    assert!(retry_after(&get) >= 1);
    let legacy = s.post(
        &[
            ("Mcp-Session-Id", &session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    assert!(retry_after(&legacy) >= 1);
    let budget = s.modern(
        3,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "x"}}),
    );
    let secs = budget.message()["error"]["data"]["retryAfterSecs"].as_u64();
    assert_eq!(Some(retry_after(&budget)), secs, "{}", budget.text());
}
