//! The 2026-07-28 tasks extension end to end against one `mcp-host serve` over real HTTP, with the
//! conformance fixture's task tools: a task created by `tools/call`, polled with `tasks/get` to
//! its result; cancelled; the task-required error; a task asking the client for input
//! (`input_required`, answered with `tasks/update`); its status notifications on a
//! `subscriptions/listen` stream; and the SQLite store across a restart (a finished result is
//! still there, a task that was running when the host was killed is reported failed).
//!
//! Every wait ends as soon as its event happens, up to a generous deadline ([`WAIT`]).

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mcp_host_tests::Layout;
use mcp_host_tests::serve::{HttpResponse, HttpServer, TASKS_EXTENSION, WAIT, with_tasks};
use serde_json::{Value, json};

/// fixture-conformance (whose task tools the suite's scenarios call) in a tool directory, with
/// `extra` config lines; short leases, so an abandoned task is reported failed soon.
fn layout(extra: &str) -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-conformance", None);
    let cfg = l.config(&format!(
        "tool_dirs: [d]\ntasks: {{lease_secs: 1, poll_interval_ms: 100}}\n{extra}"
    ));
    (l, cfg)
}

/// A 2026 request declaring the extension; its JSON-RPC message.
fn rpc(s: &HttpServer, method: &str, params: Value) -> (HttpResponse, Value) {
    let resp = s.modern(1, method, with_tasks(params));
    let message = resp.message();
    (resp, message)
}

/// `tools/call` of `name` declaring the extension: the created task (checked to be one).
fn start_task(s: &HttpServer, name: &str, arguments: Value) -> Value {
    let (resp, m) = rpc(
        s,
        "tools/call",
        json!({ "name": name, "arguments": arguments }),
    );
    assert_eq!(resp.status, 200, "{m}");
    let task = m["result"].clone();
    assert_eq!(task["resultType"], "task", "{m}");
    assert!(
        task["taskId"].as_str().is_some_and(|t| t.len() >= 16),
        "{m}"
    );
    for absent in [
        "result",
        "error",
        "inputRequests",
        "requestState",
        "content",
    ] {
        assert!(task.get(absent).is_none(), "{absent} in {m}");
    }
    task
}

fn get(s: &HttpServer, id: &str) -> Value {
    let (resp, m) = rpc(s, "tasks/get", json!({ "taskId": id }));
    assert_eq!(resp.status, 200, "{m}");
    assert_eq!(m["result"]["resultType"], "complete", "{m}");
    assert_eq!(m["result"]["taskId"], id, "{m}");
    m["result"].clone()
}

/// Poll `tasks/get` until the task's status is one of `statuses` (up to [`WAIT`]).
#[track_caller]
fn wait_status(s: &HttpServer, id: &str, statuses: &[&str]) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let task = get(s, id);
        if statuses.iter().any(|st| task["status"] == *st) {
            return task;
        }
        assert!(
            Instant::now() < deadline,
            "task {id} not {statuses:?} within {WAIT:?}: {task}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An empty acknowledgement (`resultType: complete`, nothing else but `_meta`).
#[track_caller]
fn assert_ack(message: &Value) {
    let mut result = message["result"].clone();
    if let Some(r) = result.as_object_mut() {
        r.remove("_meta");
    }
    assert_eq!(result, json!({"resultType": "complete"}), "{message}");
}

const TERMINAL: &[&str] = &["completed", "failed", "cancelled"];

#[test]
fn a_task_tool_answers_with_a_task_that_tasks_get_follows_to_its_result() {
    let (_l, cfg) = layout("");
    let s = HttpServer::start(&cfg);
    let task = start_task(&s, "slow_compute", json!({"seconds": 0.3, "label": "pi"}));
    let id = task["taskId"].as_str().unwrap();
    assert!(
        ["working", "completed"].contains(&task["status"].as_str().unwrap()),
        "{task}"
    );
    // Durable before the answer: readable at once.
    let first = get(&s, id);
    assert_eq!(first["createdAt"], task["createdAt"], "{first}");
    assert!(first["ttlMs"].as_u64().is_some_and(|t| t > 0), "{first}");
    let done = wait_status(&s, id, TERMINAL);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Computed pi in 0.3 s");
    assert!(done.get("error").is_none(), "{done}");

    // Without the extension the same tool answers the call itself.
    let plain = s.modern(
        2,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "e"}}),
    );
    let m = plain.message();
    assert_eq!(m["result"]["resultType"], "complete", "{m}");
    assert_eq!(m["result"]["content"][0]["text"], "Computed e in 0 s");
}

#[test]
fn a_cancelled_task_stops_and_stays_cancelled_and_unknown_ids_are_invalid_params() {
    let (_l, cfg) = layout("");
    let s = HttpServer::start(&cfg);
    let task = start_task(&s, "slow_compute", json!({"seconds": 60, "label": "long"}));
    let id = task["taskId"].as_str().unwrap();
    assert_eq!(get(&s, id)["status"], "working");
    let (resp, ack) = rpc(&s, "tasks/cancel", json!({ "taskId": id }));
    assert_eq!(resp.status, 200, "{ack}");
    assert_ack(&ack);
    let ended = wait_status(&s, id, TERMINAL);
    assert_eq!(ended["status"], "cancelled", "{ended}");
    // Cancelling a finished task is acknowledged and changes nothing.
    let (_, again) = rpc(&s, "tasks/cancel", json!({ "taskId": id }));
    assert_ack(&again);
    assert_eq!(get(&s, id)["status"], "cancelled");
    // The server keeps running tasks.
    let next = start_task(&s, "slow_compute", json!({"seconds": 0, "label": "next"}));
    let done = wait_status(&s, next["taskId"].as_str().unwrap(), TERMINAL);
    assert_eq!(done["status"], "completed", "{done}");

    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let (_, m) = rpc(&s, method, json!({ "taskId": "no-such-task" }));
        assert_eq!(m["error"]["code"], -32602, "{method}: {m}");
    }
}

#[test]
fn a_task_required_tool_without_the_extension_is_32021_and_with_it_ends_with_an_error_result() {
    let (_l, cfg) = layout("");
    let s = HttpServer::start(&cfg);
    let resp = s.modern(
        1,
        "tools/call",
        json!({"name": "failing_job", "arguments": {}}),
    );
    let m = resp.message();
    assert_eq!(resp.status, 400, "{m}");
    assert_eq!(m["error"]["code"], -32021, "{m}");
    assert!(
        m["error"]["data"]["requiredCapabilities"]["extensions"]
            .get(TASKS_EXTENSION)
            .is_some(),
        "{m}"
    );
    // tasks/* without the extension: the same error, before the id is looked up.
    let get = s.modern(2, "tasks/get", json!({"taskId": "whatever"}));
    assert_eq!(get.message()["error"]["code"], -32021, "{get:?}");

    let task = start_task(&s, "failing_job", json!({}));
    let done = wait_status(&s, task["taskId"].as_str().unwrap(), TERMINAL);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("simulated tool error"),
        "{done}"
    );
}

#[test]
fn a_task_that_asks_goes_input_required_and_tasks_update_lets_it_finish_with_notifications() {
    let (_l, cfg) = layout("");
    let s = HttpServer::start(&cfg);
    let task = start_task(&s, "confirm_delete", json!({"filename": "a.txt"}));
    let id = task["taskId"].as_str().unwrap();
    let waiting = wait_status(&s, id, &["input_required", "completed", "failed"]);
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    let requests = waiting["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{waiting}");
    let (key, question) = requests.iter().next().unwrap();
    assert_eq!(question["method"], "elicitation/create", "{waiting}");

    // A listen stream following the task hears every change from here on.
    let mut stream = s.listen(
        "follow",
        with_tasks(json!({"notifications": {"taskIds": [id]}})),
    );
    let ack = stream.next(WAIT);
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "{ack}"
    );

    // An answer to a key never asked is ignored (still acknowledged).
    let (_, ignored) = rpc(
        &s,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"unknown-key": {"ignored": true}}}),
    );
    assert_ack(&ignored);
    assert_eq!(get(&s, id)["status"], "input_required");

    let answer = json!({"action": "accept", "content": {"confirm": true}});
    let (_, ack) = rpc(
        &s,
        "tasks/update",
        json!({"taskId": id, "inputResponses": { key.clone(): answer }}),
    );
    assert_ack(&ack);

    let mut statuses = Vec::new();
    let last = loop {
        let note = stream.wait_for("notifications/tasks", WAIT);
        assert_eq!(note["params"]["taskId"], id, "{note}");
        let status = note["params"]["status"].as_str().unwrap().to_owned();
        statuses.push(status.clone());
        if TERMINAL.contains(&status.as_str()) {
            break note;
        }
    };
    assert_eq!(last["params"]["status"], "completed", "{statuses:?}");
    assert_eq!(
        last["params"]["result"]["content"][0]["text"],
        "Deleted a.txt"
    );
    // The notification carries what tasks/get says.
    let done = get(&s, id);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"], last["params"]["result"]);
}

#[test]
fn a_listen_stream_asking_for_task_ids_without_the_extension_is_refused() {
    let (_l, cfg) = layout("");
    let s = HttpServer::start(&cfg);
    let resp = s.modern(
        1,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": ["x"]}}),
    );
    let m = resp.message();
    assert_eq!(m["error"]["code"], -32021, "{m}");
}

#[test]
fn the_sqlite_store_keeps_finished_results_across_a_restart_and_fails_tasks_the_host_left() {
    let (l, cfg) = layout("store: sqlite:state/tasks.sqlite\n");
    let mut s = HttpServer::start(&cfg);
    let finished = start_task(&s, "slow_compute", json!({"seconds": 0, "label": "kept"}));
    let finished = finished["taskId"].as_str().unwrap().to_owned();
    assert_eq!(wait_status(&s, &finished, TERMINAL)["status"], "completed");
    let running = start_task(&s, "slow_compute", json!({"seconds": 600, "label": "lost"}));
    let running = running["taskId"].as_str().unwrap().to_owned();
    assert_eq!(get(&s, &running)["status"], "working");
    assert!(l.root.path().join("state/tasks.sqlite").exists());

    // A crash: no chance to write anything down.
    s.child().kill();
    let s = HttpServer::start(&cfg);
    let kept = get(&s, &finished);
    assert_eq!(kept["status"], "completed", "{kept}");
    assert_eq!(kept["result"]["content"][0]["text"], "Computed kept in 0 s");
    // The running task's lease runs out (nobody renews it): failed, with a reason.
    let lost = wait_status(&s, &running, TERMINAL);
    assert_eq!(lost["status"], "failed", "{lost}");
    assert!(lost["error"]["code"].is_i64(), "{lost}");
    assert!(
        lost["statusMessage"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{lost}"
    );
}
