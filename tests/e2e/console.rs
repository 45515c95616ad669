//! The operator console (`/ui`) in a real browser: headless Chromium driven over WebDriver
//! (`tests/clients/console_browser.py`, Selenium and Debian's chromium-driver) against a real
//! `mcp-host serve` with the packaged plugins, a directory overriding a fixture's tool, a crash
//! plugin quarantined by real crashes, a pinned plugin whose definition drifted, a running task
//! and two agents. Screenshots go to `target/e2e/console/` (kept as CI artifacts). The HTTP-level
//! guarantees (login required, 401 for the JSON endpoints, CSRF and Origin checks, read-only
//! callers) are checked with raw requests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mcp_host_tests::clients::{python_with, require_or_skip};
use mcp_host_tests::serve::{
    HttpResponse, HttpServer, header_refs, modern_headers, request, result_text, with_meta,
    with_tasks,
};
use mcp_host_tests::{Layout, patch_bytes, target_dir, workspace_root};
use serde_json::{Value, json};

const ADMIN: &str = "mcp_console-admin-secret-7d2a";
const READER: &str = "mcp_console-reader-secret-91be";
/// A value in the upstream's environment the console must never show.
const UPSTREAM_SECRET: &str = "upstream-env-secret-5c0f";

/// Python with Selenium, and the browser and its driver.
fn browser_tools() -> Option<PathBuf> {
    let driver = Path::new("/usr/bin/chromedriver");
    let browser = Path::new("/usr/bin/chromium").exists() && driver.exists();
    let what = "chromium and chromium-driver (.ci/install-services.sh)";
    require_or_skip(what, browser.then(|| driver.to_path_buf()))?;
    python_with("selenium", "Selenium (.ci/install-clients.sh)")
}

/// An anonymous login on `conn` (no authentication configured): its cookie and session.
fn anonymous_login(conn: &mut mcp_host_tests::serve::HttpConn) -> (String, Value) {
    let page = conn.request("GET", "/ui/", &[], b"");
    assert_eq!(page.status, 200);
    let cookie = page
        .header("set-cookie")
        .expect("a login cookie")
        .split(';')
        .next()
        .expect("a value")
        .to_owned();
    let session = conn
        .request("GET", "/ui/api/session", &[("Cookie", &cookie)], b"")
        .json();
    (cookie, session)
}

/// The layout: fixture-override before fixture-basic and the packaged time and text plugins (its
/// `echo` and `current_time` win), the catalog pinned under `enforce` and then rug-pulled, the
/// crash fixture in worker processes, the conformance fixture (tasks, questions), the Python SDK
/// server as an upstream (its `py_echo` held for an admin's approval in the console); two users and
/// two agents.
fn layout() -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("local", "fixture-override", None);
    l.install("d", "fixture-basic", None);
    l.install("packaged", "mcp-time", None);
    l.install("packaged", "mcp-text", None);
    let catalog = l.install("catalog", "fixture-catalog", Some("libcat.so"));
    l.install("iso", "fixture-crash", None);
    l.install("jobs", "fixture-conformance", None);
    let hash = mcp_host::access::auth::hash_secret;
    // The tests' Python SDK server as an upstream, with a secret in its environment.
    let python = workspace_root().join(".ci/.tools/venv/bin/python");
    let script = workspace_root().join("tests/fixtures/upstream/server.py");
    let cfg = l.config(&format!(
        "tool_dirs: [local, d, packaged, {{path: catalog, pinning: enforce}}, \
         {{path: iso, isolation: process}}, jobs, \
         {{server: {{command: [{python:?}, {script:?}], env: {{UPSTREAM_TOKEN: {UPSTREAM_SECRET}}}}}, \
         name: py, prefix: py_}}]\n\
         plugins:\n  fixture-catalog:\n    config: {{count: 2}}\n\
         \x20 py:\n    overrides: {{tools: {{add: {{name: py_sum, description: Sum two integers.}}}}}}\n\
         limits: {{max_crashes: 3, crash_window_secs: 600, call_timeout_secs: 900}}\n\
         auth:\n  require_auth: true\n  secrets:\n    - {{sha256: {}, user: alice}}\n    - {{sha256: {}, user: bob}}\n\
         agents:\n  ops: {{allow: [convert_time, current_time, echo]}}\n  finder: {{tools: search}}\n\
         console: {{admins: [alice]}}\naudit_log: {}\n\
         policy:\n  rules:\n    - {{name: upstream-needs-a-yes, when: \"tool.name == 'py_echo'\", \
         outcome: approve, approver: console, show: [text]}}\n",
        hash(ADMIN),
        hash(READER),
        l.root.path().join("audit.jsonl").display(),
    ));
    let pinned = l.run(&cfg, &["pin"]);
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    // The catalog changes a description after it was pinned: held under `enforce`.
    patch_bytes(&catalog, b"CATALOG-EDITION-0001", b"CATALOG-EDITION-0002");
    (l, cfg)
}

/// A 2026 `tools/call` with `secret`.
fn call(s: &HttpServer, tool: &str, arguments: Value, tasks: bool) -> Value {
    let params = json!({ "name": tool, "arguments": arguments });
    let params = if tasks { with_tasks(params) } else { params };
    s.modern_at("/mcp", Some(ADMIN), "tools/call", params)
        .message()
}

/// A console request with `headers` (and the login cookie when given).
fn ui(
    s: &HttpServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse {
    s.connect().request(method, path, headers, body.as_bytes())
}

/// Log in as `secret` over HTTP: the cookie header value and the CSRF token.
fn login(s: &HttpServer, secret: &str) -> (String, String) {
    let origin = format!("http://{}", s.addr);
    let resp = ui(
        s,
        "POST",
        "/ui/api/login",
        &[("Origin", &origin), ("Content-Type", "application/json")],
        &json!({ "token": secret }).to_string(),
    );
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let set = resp
        .header("set-cookie")
        .expect("a login cookie")
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(set.contains(attribute), "{set}");
    }
    let cookie = set.split(';').next().expect("a cookie value").to_owned();
    let session = ui(s, "GET", "/ui/api/session", &[("Cookie", &cookie)], "").json();
    let csrf = session["csrf"].as_str().expect("a CSRF token").to_owned();
    (cookie, csrf)
}

#[test]
fn without_a_login_pages_redirect_and_the_json_answers_401_and_cross_site_or_tokenless_posts_are_refused()
 {
    let (_l, cfg) = layout();
    let s = HttpServer::start(&cfg);
    let page = ui(&s, "GET", "/ui/", &[], "");
    assert_eq!(
        (page.status, page.header("location")),
        (303, Some("/ui/login"))
    );
    for view in [
        "session", "overview", "sources", "agents", "trust", "tasks", "calls",
    ] {
        let resp = ui(&s, "GET", &format!("/ui/api/{view}"), &[], "");
        assert_eq!(resp.status, 401, "{view}");
    }
    let login_page = ui(&s, "GET", "/ui/login", &[], "");
    let csp = login_page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    // Wrong credentials are refused, and so is a login posted from another site.
    let origin = format!("http://{}", s.addr);
    let json_ct = ("Content-Type", "application/json");
    let bad = ui(
        &s,
        "POST",
        "/ui/api/login",
        &[("Origin", &origin), json_ct],
        r#"{"token":"mcp_wrong"}"#,
    );
    assert_eq!(bad.status, 401);
    let body = json!({ "token": ADMIN }).to_string();
    let cross = ui(
        &s,
        "POST",
        "/ui/api/login",
        &[("Origin", "http://evil.example"), json_ct],
        &body,
    );
    assert_eq!(cross.status, 403);

    let (cookie, csrf) = login(&s, ADMIN);
    let rpc = json!({ "method": "tools/call", "params": { "name": "echo", "arguments": { "text": "x" } } })
        .to_string();
    let with = |origin: &str, token: &str| {
        ui(
            &s,
            "POST",
            "/ui/api/rpc",
            &[
                ("Cookie", &cookie),
                ("Origin", origin),
                ("X-Console-Csrf", token),
                json_ct,
            ],
            &rpc,
        )
    };
    assert_eq!(
        with("http://evil.example", &csrf).status,
        403,
        "cross-site POST"
    );
    assert_eq!(with(&origin, "").status, 403, "POST without the CSRF token");
    let ok = with(&origin, &csrf);
    assert_eq!(ok.status, 200);
    assert_eq!(
        ok.json()["response"]["result"]["content"][0]["text"],
        "override: x"
    );

    // Accepting a definition other than the one reviewed is refused.
    let stale =
        json!({ "section": "tool", "name": "catalog_edition", "sha256": "sha256:00" }).to_string();
    let admin_headers = [
        ("Cookie", cookie.as_str()),
        ("Origin", origin.as_str()),
        ("X-Console-Csrf", csrf.as_str()),
        json_ct,
    ];
    let refused = ui(&s, "POST", "/ui/api/pins/accept", &admin_headers, &stale);
    assert_eq!(refused.status, 409);
    assert!(String::from_utf8_lossy(&refused.body).contains("changed again since you reviewed it"));

    // bob may look and call, not act.
    let (bob, bob_csrf) = login(&s, READER);
    let session = ui(&s, "GET", "/ui/api/session", &[("Cookie", &bob)], "").json();
    assert_eq!(
        (session["user"].as_str(), session["admin"].as_bool()),
        (Some("bob"), Some(false))
    );
    let headers = [
        ("Cookie", bob.as_str()),
        ("Origin", origin.as_str()),
        ("X-Console-Csrf", bob_csrf.as_str()),
        json_ct,
    ];
    let refused = ui(&s, "POST", "/ui/api/quarantine/retry", &headers, "{}");
    assert_eq!(refused.status, 403);
    let tasks = ui(&s, "GET", "/ui/api/tasks", &[("Cookie", &bob)], "").json();
    assert_eq!(tasks["all"], false, "bob sees his own tasks only: {tasks}");
    let as_alice = json!({ "method": "tools/list", "as": "alice" }).to_string();
    assert_eq!(
        ui(&s, "POST", "/ui/api/rpc", &headers, &as_alice).status,
        403
    );
    // Logging out ends the login.
    let out = ui(
        &s,
        "POST",
        "/ui/api/logout",
        &[("Cookie", &cookie), ("Origin", &origin)],
        "",
    );
    assert_eq!(out.status, 200);
    assert_eq!(
        ui(&s, "GET", "/ui/api/session", &[("Cookie", &cookie)], "").status,
        401
    );
}

#[test]
fn every_page_and_action_works_in_headless_chromium() {
    let Some(python) = browser_tools() else {
        return;
    };
    let (l, cfg) = layout();
    let s = HttpServer::start(&cfg);
    // The upstream connects in the background: its tools are on the pages once it is served.
    wait_until("the upstream's tools are served", || {
        let listed = s.modern_at("/mcp", Some(ADMIN), "tools/list", json!({}));
        mcp_host_tests::serve::tool_names(&listed.message()).contains(&"py_echo".to_owned())
    });
    // Quarantine the crash plugin with three real crashes.
    for _ in 0..3 {
        let m = call(&s, "segfault", json!({}), false);
        assert!(m["result"]["isError"].as_bool().unwrap_or(false), "{m}");
    }
    wait_until("the crash plugin is quarantined", || {
        call(&s, "pid", json!({}), false)["error"]["code"] == -32602
    });
    // A task that runs until cancelled.
    let task = call(
        &s,
        "slow_compute",
        json!({ "seconds": 600, "label": "long" }),
        true,
    );
    let task = task["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{task}"))
        .to_owned();

    let shots = target_dir().join("e2e/console");
    let _ = std::fs::remove_dir_all(&shots);
    let setup = json!({
        "base": format!("http://{}/ui", s.addr),
        "mcp": format!("http://{}/mcp", s.addr),
        "admin": ADMIN,
        "reader": READER,
        "task": task,
        "shots": shots,
        "secret": UPSTREAM_SECRET,
    });
    let out = Command::new(python)
        .arg(workspace_root().join("tests/clients/console_browser.py"))
        .arg(setup.to_string())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && out.stdout.starts_with(b"ok"),
        "the browser run failed (screenshots in {}):\n{log}\nhost log:\n{}",
        shots.display(),
        s.stderr()
    );
    // Accepting the drift wrote the new definition to the lock file, and the reload serves it.
    let lock = std::fs::read_to_string(l.root.path().join("mcp-host.lock")).unwrap();
    assert!(lock.contains("CATALOG-EDITION-0002") && !lock.contains("CATALOG-EDITION-0001"));
    let listed = s
        .modern_at("/mcp", Some(ADMIN), "tools/list", json!({}))
        .message();
    assert!(listed.to_string().contains("catalog_edition"), "{listed}");
    // The task is cancelled, and every action is in the audit log, with who took it.
    let mut headers = modern_headers("tasks/get", Some(&task));
    headers.push(("Authorization", format!("Bearer {ADMIN}")));
    let params = with_meta(with_tasks(json!({ "taskId": task })));
    let got = s
        .post(&header_refs(&headers), &request(1, "tasks/get", params))
        .message();
    assert_eq!(got["result"]["status"], "cancelled", "{got}");
    let audit = std::fs::read_to_string(l.root.path().join("audit.jsonl")).unwrap();
    let actions: Vec<Value> = audit
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r.get("action").is_some())
        .collect();
    for (action, target) in [
        ("console.login", "-"),
        ("console.cancel_task", task.as_str()),
        ("console.accept_pin", "catalog_edition"),
        ("console.call_as", "as bob"),
        ("console.approve_call", "a1"),
        ("console.refuse_call", "a2"),
    ] {
        assert!(
            actions.iter().any(|r| r["action"] == action
                && r["target"] == target
                && r["outcome"] == "ok"
                && r["caller"] == "alice"),
            "no {action} of {target} in {audit}"
        );
    }
    for shot in [
        "login",
        "overview",
        "sources",
        "agents-ops",
        "playground-call",
        "trust",
        "live-calls",
        "approvals",
    ] {
        assert!(
            shots.join(format!("{shot}.png")).is_file(),
            "no screenshot {shot}"
        );
    }
}

/// Poll `check` every 100 ms until it holds, for up to a minute.
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn on_an_address_of_its_own_the_console_is_only_there_and_mcp_only_on_the_main_listener() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let port = mcp_host_tests::fleet::free_port();
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nconsole: {{listen: \"127.0.0.1:{port}\"}}\n"
    ));
    let s = HttpServer::start(&cfg);
    assert_eq!(
        ui(&s, "GET", "/ui/", &[], "").status,
        404,
        "the main listener has no console"
    );
    let own: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    wait_until("the console's own listener logs its address", || {
        s.stderr().contains(&format!(
            "the operator console is served at http://{own}/ui/"
        ))
    });
    let mut conn = mcp_host_tests::serve::HttpConn::connect(own);
    // A visitor a proxy forwarded is not on this machine: no anonymous login, whatever the socket.
    let forwarded = conn.request("GET", "/ui/", &[("X-Forwarded-For", "203.0.113.9")], b"");
    assert_eq!(
        (forwarded.status, forwarded.header("location")),
        (303, Some("/ui/login"))
    );
    // No authentication configured: a loopback visitor gets an anonymous, read-only login.
    let (_, session) = anonymous_login(&mut conn);
    assert_eq!(
        (session["user"].clone(), session["admin"].clone()),
        (Value::Null, json!(false))
    );
    assert_eq!(conn.request("POST", "/mcp", &[], b"{}").status, 404);
    // A console path over the MCP endpoint's is refused at load.
    let clash = l.config("tool_dirs: [d]\nconsole: {path: /mcp}\n");
    let out = l.run(&clash, &["config"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("overlaps the MCP endpoint's path /mcp"),
        "{err}"
    );
}

#[test]
fn with_redis_the_tasks_view_lists_every_replicas_tasks_and_cancels_them_there() {
    let Some(bin) = mcp_host_tests::fleet::redis_server() else {
        return;
    };
    let redis = mcp_host_tests::fleet::Redis::start(&bin);
    let l = Layout::new();
    l.install("jobs", "fixture-conformance", None);
    let store = format!(
        "store: {}\nrequest_state: {{keys: [\"console-test-key-0123456789abcdef\"]}}\n",
        redis.url()
    );
    let cfg = l.config(&format!(
        "tool_dirs: [jobs]\n{store}limits: {{call_timeout_secs: 900}}\nconsole: {{anonymous_admin: true}}\n"
    ));
    let (a, b) = (HttpServer::start(&cfg), HttpServer::start(&cfg));
    let params = with_tasks(
        json!({ "name": "slow_compute", "arguments": { "seconds": 600, "label": "r" } }),
    );
    let task = a.modern(1, "tools/call", params).message();
    let task = task["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{task}"))
        .to_owned();
    // Replica b's console lists the task replica a runs, and cancels it there.
    let mut conn = b.connect();
    let (cookie, session) = anonymous_login(&mut conn);
    assert_eq!(session["admin"], true, "{session}");
    let listed = conn
        .request("GET", "/ui/api/tasks", &[("Cookie", &cookie)], b"")
        .json();
    let row = listed["tasks"]
        .as_array()
        .and_then(|t| t.iter().find(|r| r["id"] == task.as_str()));
    assert_eq!(
        row.map(|r| r["status"].clone()),
        Some(json!("working")),
        "{listed}"
    );
    let origin = format!("http://{}", b.addr);
    let csrf = session["csrf"].as_str().expect("a CSRF token");
    let headers = [
        ("Cookie", cookie.as_str()),
        ("Origin", origin.as_str()),
        ("X-Console-Csrf", csrf),
    ];
    let body = json!({ "id": task }).to_string();
    let cancelled = conn.request("POST", "/ui/api/tasks/cancel", &headers, body.as_bytes());
    assert_eq!(
        cancelled.status,
        200,
        "{}",
        String::from_utf8_lossy(&cancelled.body)
    );
    wait_until("replica a reports the task cancelled", || {
        let got = a
            .modern(2, "tasks/get", with_tasks(json!({ "taskId": task })))
            .message();
        got["result"]["status"] == "cancelled"
    });
}

/// The call waiting for approval in `s`'s console as seen by `cookie`'s login (the first one).
fn waiting_approval(s: &HttpServer, cookie: &str) -> Value {
    let mut seen = Value::Null;
    wait_until("a call waits for approval in the console", || {
        let listed = ui(s, "GET", "/ui/api/approvals", &[("Cookie", cookie)], "").json();
        seen = listed["approvals"][0].clone();
        !seen.is_null()
    });
    seen
}

/// An admin's answer to approval `id`, as the console page posts it.
fn answer_approval(s: &HttpServer, login: &(String, String), id: &str, approve: bool) -> u16 {
    let origin = format!("http://{}", s.addr);
    let headers = [
        ("Cookie", login.0.as_str()),
        ("X-Console-Csrf", login.1.as_str()),
        ("Origin", origin.as_str()),
        ("Content-Type", "application/json"),
    ];
    let body = json!({ "id": id, "approve": approve }).to_string();
    ui(s, "POST", "/ui/api/approvals/answer", &headers, &body).status
}

#[test]
fn a_rule_answered_in_the_console_holds_the_call_until_an_admin_approves_or_refuses_it() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let hash = mcp_host::access::auth::hash_secret;
    let audit = l.root.path().join("audit.jsonl");
    let policy = "policy:\n  approval_timeout_secs: 5\n  rules:\n    - {name: unattended, \
                  when: \"tool.name == 'echo'\", outcome: approve, approver: console, show: [text]}\n";
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nauth:\n  require_auth: true\n  secrets:\n    - {{sha256: {}, user: alice}}\n    \
         - {{sha256: {}, user: bob}}\nconsole: {{admins: [alice]}}\naudit_log: {}\n{policy}",
        hash(ADMIN),
        hash(READER),
        audit.display(),
    ));
    let s = HttpServer::start(&cfg);
    let (alice, bob) = (login(&s, ADMIN), login(&s, READER));
    let echo = |text: &str| {
        let params = json!({ "name": "echo", "arguments": { "text": text } });
        s.modern_at("/mcp", Some(READER), "tools/call", params)
            .message()
    };
    std::thread::scope(|scope| {
        // bob's agent calls: the call waits; the console shows it with the shown field, and bob
        // sees his own call but may not answer it.
        let call = scope.spawn(|| echo("ship it"));
        let waiting = waiting_approval(&s, &alice.0);
        assert_eq!(
            (&waiting["name"], &waiting["rule"], &waiting["user"]),
            (&json!("echo"), &json!("unattended"), &json!("bob")),
            "{waiting}"
        );
        assert_eq!(waiting["shown"], json!({ "text": "ship it" }), "{waiting}");
        let id = waiting["id"].as_str().expect("an id").to_owned();
        assert_eq!(waiting_approval(&s, &bob.0)["id"], json!(id));
        assert_eq!(answer_approval(&s, &bob, &id, true), 403);
        assert_eq!(answer_approval(&s, &alice, &id, true), 200);
        let done = call.join().expect("the call");
        assert_eq!(result_text(&done), "ship it", "{done}");
        assert_eq!(answer_approval(&s, &alice, &id, true), 409, "answered once");

        // Refused by alice: a tool error naming who refused.
        let call = scope.spawn(|| echo("drop the table"));
        let waiting = waiting_approval(&s, &alice.0);
        let id = waiting["id"].as_str().expect("an id");
        assert_eq!(answer_approval(&s, &alice, id, false), 200);
        let refused = call.join().expect("the call");
        assert!(
            refused["result"]["isError"] == true
                && refused
                    .to_string()
                    .contains("alice refused it in the console"),
            "{refused}"
        );
    });

    // Nobody answers: refused at the approval timeout, and the console no longer lists it.
    let unanswered = echo("anyone?");
    assert!(
        unanswered.to_string().contains("no admin answered"),
        "{unanswered}"
    );
    let listed = ui(&s, "GET", "/ui/api/approvals", &[("Cookie", &alice.0)], "").json();
    assert_eq!(listed["approvals"], json!([]), "{listed}");

    // The audit log has the calls' decisions and the admin's answers, with who gave them.
    let records: Vec<Value> = std::fs::read_to_string(&audit)
        .expect("the audit log")
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    for (action, outcome) in [
        ("console.approve_call", "ok"),
        ("console.refuse_call", "ok"),
        ("console.approve_call", "refused"),
    ] {
        assert!(
            records.iter().any(|r| r["action"] == action
                && r["outcome"] == outcome
                && r["caller"] == if outcome == "ok" { "alice" } else { "bob" }),
            "no {action} {outcome} in {records:?}"
        );
    }
    assert!(
        !records
            .iter()
            .any(|r| r.to_string().contains("drop the table")),
        "an argument value reached the audit log"
    );

    // A rule answered in the console with nobody allowed to answer there does not load.
    let nobody = l.config(&format!("tool_dirs: [d]\n{policy}"));
    let out = l.run(&nobody, &["config"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("rule `unattended` is answered in the console"),
        "{err}"
    );
}
