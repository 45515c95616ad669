//! An upstream's lifecycle against a real `mcp-host` and the hostile fixture
//! (`tests/fixtures/upstream/hostile.py`): a `list_changed` storm (F1), endless pages and a
//! repeated cursor (F4), a handshake that never comes (start-up, B2), a legacy stdio upstream
//! started once, an upstream that cannot start (B7), a re-list cut short by the host (B10), and
//! what `list`, `check` and `/healthz` say of each (B5). The host stays up and `/healthz`
//! answers throughout; every wait is on an event, with a generous deadline.

use super::*;

use std::collections::HashSet;
use std::path::PathBuf;

/// The hostile fixture.
fn fixture() -> PathBuf {
    mcp_host_tests::workspace_root().join("tests/fixtures/upstream/hostile.py")
}

/// A `tool_dirs` entry serving the fixture in `mode` (2025 era unless `era`), named `name`,
/// prefixed `<name>_`, leaving its evidence in `state`.
fn entry(name: &str, mode: &str, era: &str, state: &Path) -> String {
    format!(
        "  - server: {{command: [python3, {:?}, --mode, {mode}, --era, \"{era}\", --state, {:?}]}}\n    name: {name}\n    prefix: {name}_\n",
        fixture().to_string_lossy(),
        state.to_string_lossy()
    )
}

/// A layout with fixture-basic in `d` (the host's own tools, to check it still serves) and the
/// upstream `entries`, then `extra`.
fn upstream_layout(entries: &[String], extra: &str) -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config(&format!("tool_dirs:\n  - d\n{}{extra}", entries.concat()));
    (l, cfg)
}

/// The `/healthz` answer.
fn health(s: &HttpServer) -> Value {
    let r = s.connect().request("GET", "/healthz", &[], b"");
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

/// What `/healthz` says of upstream `name`: its state and detail (`None` when it does not say).
fn reported_state(s: &HttpServer, name: &str) -> Option<(String, String)> {
    let h = health(s);
    let u = h["upstreams"]
        .as_array()?
        .iter()
        .find(|u| u["name"] == name)?
        .clone();
    Some((
        u["state"].as_str()?.to_owned(),
        u["detail"].as_str()?.to_owned(),
    ))
}

/// What `/healthz` says of upstream `name`: its state and detail.
#[track_caller]
fn upstream_state(s: &HttpServer, name: &str) -> (String, String) {
    reported_state(s, name)
        .unwrap_or_else(|| panic!("/healthz says nothing of {name}: {}", health(s)))
}

/// Wait (generously) until `/healthz` says upstream `name` is in `state`, calling `each` on
/// every look; its detail then.
#[track_caller]
fn wait_for_state(s: &HttpServer, name: &str, state: &str, mut each: impl FnMut()) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        each();
        let now = reported_state(s, name);
        if let Some((now, detail)) = &now
            && now == state
        {
            return detail.clone();
        }
        assert!(
            Instant::now() < deadline,
            "upstream {name} is {now:?}, not {state}:\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server's thread count now (`Threads` in /proc/PID/status).
fn threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Threads in /proc/{pid}/status"))
}

/// Whether process `pid` is alive (a zombie is not: it has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// Wait (generously) until none of `pids` is alive.
#[track_caller]
fn wait_gone(pids: &[u32], what: &str) {
    let deadline = Instant::now() + START;
    while let Some(pid) = pids.iter().find(|p| alive(**p)) {
        assert!(
            Instant::now() < deadline,
            "{what}: process {pid} is still alive"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pids a fixture wrote, a line each, to `file` in its state directory.
fn pids(state: &Path, file: &str) -> Vec<u32> {
    std::fs::read_to_string(state.join(file))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// `mcp-host list --json` rows of upstream `name` (its `upstream:<name>` file).
fn upstream_rows(l: &Layout, cfg: &Path, name: &str) -> (Vec<Value>, String) {
    let (rows, log) = l.list(cfg);
    let file = format!("upstream:{name}");
    let mine = rows.into_iter().filter(|r| r["file"] == file).collect();
    (mine, log)
}

#[test]
fn a_list_changed_storm_costs_bounded_threads_and_quarantines_the_upstream_with_its_reason() {
    let l0 = Layout::new();
    let state = l0.dir("state");
    let (l, cfg) = upstream_layout(&[entry("storm", "storm", "2025", &state)], "");
    let mut s = HttpServer::start(&cfg);
    let pid = s.child().id();
    let mut most = 0;
    let detail = wait_for_state(&s, "storm", "quarantined", || {
        most = most.max(threads(pid));
        assert!(most < 100, "the host runs {most} threads during the storm");
    });
    assert!(
        detail.contains("sent 500 list_changed notifications in 10 s"),
        "{detail}"
    );
    assert!(most < 100, "the host ran {most} threads during the storm");
    assert_serves_others(&s);
    assert_peak_rss(pid);
    // `list` (another process, to which the upstream behaves) shows what the running server
    // quarantined, and why (B5).
    std::fs::write(state.join("calm"), "").unwrap();
    // Waits: /healthz shows the quarantine a moment before the record `list` reads is written.
    let deadline = Instant::now() + START;
    let (rows, log) = loop {
        let (rows, log) = upstream_rows(&l, &cfg, "storm");
        let quarantined = !rows.is_empty() && rows.iter().all(|r| r["status"] == "quarantined");
        if quarantined || Instant::now() >= deadline {
            break (rows, log);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!rows.is_empty(), "{log}");
    for row in &rows {
        assert_eq!(row["status"], "quarantined", "{rows:#?}");
        let why = row["detail"].as_str().unwrap();
        assert!(why.contains("list_changed notifications"), "{why}");
        assert!(why.contains(&format!("mcp-host pid {pid}")), "{why}");
    }
}

#[test]
fn endless_pages_and_a_repeated_cursor_are_refused_with_bounded_memory_while_the_host_serves() {
    let l0 = Layout::new();
    let (pages, again) = (l0.dir("pages"), l0.dir("again"));
    let (_l, cfg) = upstream_layout(
        &[
            entry("pages", "endless_pages", "2025", &pages),
            entry("again", "repeated_cursor", "2026", &again),
        ],
        "",
    );
    // The listener opens while the upstreams page on.
    let mut s = HttpServer::start(&cfg);
    assert_serves_others(&s);
    let pid = s.child().id();
    let endless = wait_for_state(&s, "pages", "quarantined", || {});
    assert!(
        endless.contains("tools/list has more than 100 pages (limits.upstream_max_list_pages)"),
        "{endless}"
    );
    let repeated = wait_for_state(&s, "again", "quarantined", || {});
    assert!(
        repeated.contains("tools/list sent a cursor it had sent before"),
        "{repeated}"
    );
    // Each attempt stopped at the bound: no more than 100 pages were asked for.
    let asked: u64 = std::fs::read_to_string(pages.join("pages"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(asked, 100);
    assert_serves_others(&s);
    assert_peak_rss(pid);
}

#[test]
fn a_handshake_that_never_comes_neither_delays_serving_nor_leaves_a_process_behind() {
    let l0 = Layout::new();
    let state = l0.dir("state");
    let (_l, cfg) = upstream_layout(
        &[entry("hang", "hang", "2025", &state)],
        "limits: {upstream_handshake_timeout_secs: 3, max_crashes: 2, crash_window_secs: 600}\n",
    );
    let s = HttpServer::start(&cfg);
    // Serving at once, the upstream still connecting.
    let (now, detail) = upstream_state(&s, "hang");
    assert_eq!(now, "connecting", "{detail}");
    assert!(detail.starts_with("connecting (since "), "{detail}");
    assert_serves_others(&s);
    // The first attempt times out: it is retried, saying why; its child's group is gone.
    let deadline = Instant::now() + Duration::from_secs(120);
    let detail = loop {
        let (now, detail) = upstream_state(&s, "hang");
        if detail.contains("last attempt") || now != "connecting" {
            break detail;
        }
        assert!(Instant::now() < deadline, "{}", s.stderr());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        detail.contains("did not answer its handshake within 3 s"),
        "{detail}"
    );
    // The child and its grandchild (the second attempt's may follow them).
    let first: Vec<u32> = pids(&state, "children").into_iter().take(2).collect();
    assert_eq!(first.len(), 2, "{first:?}");
    wait_gone(&first, "the first attempt's process group");
    // The second attempt fails the same way: quarantined, with the reason.
    let detail = wait_for_state(&s, "hang", "quarantined", || {});
    assert!(
        detail.contains("failed 2 times in 600 s (last: did not answer its handshake within 3 s"),
        "{detail}"
    );
    let all = pids(&state, "children");
    assert_eq!(all.len(), 4, "{all:?}");
    wait_gone(&all, "every attempt's process group");
    assert_serves_others(&s);
    assert_eq!(healthz(&s), 200);
}

#[test]
fn an_upstream_connecting_when_the_host_is_stopped_goes_with_it() {
    let l0 = Layout::new();
    let state = l0.dir("state");
    let (_l, cfg) = upstream_layout(&[entry("hang", "hang", "2025", &state)], "");
    let mut s = HttpServer::start(&cfg);
    wait_for_file(&state.join("children"));
    let deadline = Instant::now() + START;
    while pids(&state, "children").len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the fixture did not start its grandchild"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let children = pids(&state, "children");
    assert!(children.iter().all(|p| alive(*p)), "{children:?}");
    s.child().terminate();
    assert!(
        s.child().wait_timeout(START).is_some(),
        "the host did not stop on SIGTERM:\n{}",
        s.stderr()
    );
    wait_gone(&children, "after SIGTERM of the host");

    // `serve --stdio` stopped by SIGTERM while connecting: the same.
    let stdio_state = l0.dir("stdio-state");
    let (_l, cfg) = upstream_layout(&[entry("hang", "hang", "2025", &stdio_state)], "");
    let mut server = StdioServer::start(&cfg);
    let deadline = Instant::now() + START;
    while pids(&stdio_state, "children").len() < 2 {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    let children = pids(&stdio_state, "children");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(server.wait_exit(START).is_some(), "{}", server.stderr());
    wait_gone(&children, "after SIGTERM of serve --stdio");
}

#[test]
fn a_legacy_stdio_upstream_is_started_once_per_command_and_a_modern_one_too() {
    let l0 = Layout::new();
    let (old, new) = (l0.dir("old"), l0.dir("new"));
    let (l, cfg) = upstream_layout(
        &[
            entry("old", "plain", "2025", &old),
            entry("new", "plain", "2026", &new),
        ],
        "",
    );
    let (rows, log) = l.list(&cfg);
    for tool in ["old_echo", "new_echo"] {
        let row = rows
            .iter()
            .find(|r| r["tool"] == tool)
            .unwrap_or_else(|| panic!("no {tool}: {rows:#?}\n{log}"));
        assert_eq!(row["status"], "active", "{row}");
    }
    assert_eq!(
        pids(&old, "starts").len(),
        1,
        "list started it more than once"
    );
    assert_eq!(pids(&new, "starts").len(), 1);
    // Served: started once more each, and both eras' tools answer.
    let mut server = StdioServer::start(&cfg);
    let mut id = 0;
    for tool in ["old_echo", "new_echo"] {
        let deadline = Instant::now() + START;
        let answer = loop {
            id += 1;
            let r = server.call_modern(
                id,
                "tools/call",
                json!({"name": tool, "arguments": {"text": "once"}}),
            );
            if r.get("error").is_none() {
                break r;
            }
            assert!(Instant::now() < deadline, "{r}\n{}", server.stderr());
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(answer["result"]["content"][0]["text"], "once", "{answer}");
    }
    assert_eq!(
        pids(&old, "starts").len(),
        2,
        "serve started it more than once"
    );
    assert_eq!(pids(&new, "starts").len(), 2);
}

#[test]
fn list_and_check_say_which_upstream_failed_and_why_on_one_line() {
    let l0 = Layout::new();
    let (broken, hang) = (l0.dir("broken"), l0.dir("hang"));
    // An upstream that cannot start (the default handshake timeout: its exit comes first).
    let (l, cfg) = upstream_layout(&[entry("broken", "exit3", "2025", &broken)], "");
    let (rows, log) = upstream_rows(&l, &cfg, "broken");
    assert_eq!(rows.len(), 1, "{rows:#?}\n{log}");
    let row = &rows[0];
    assert_eq!(row["status"], "failed", "{row}");
    assert_eq!(
        row["detail"],
        "exited with status 3; last stderr: ModuleNotFoundError: No module named 'foo'",
        "{row}"
    );
    assert_eq!(row["plugin"], "broken", "{row}");
    assert_eq!(row["isolation"], "process", "{row}");
    // The table says the same, on one line.
    let out = l.run(&cfg, &["list"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|line| line.contains("upstream:broken"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains("failed (exited with status 3; last stderr: ModuleNotFoundError"),
        "{line}"
    );
    assert!(
        line.contains("broken") && line.contains("process"),
        "{line}"
    );
    // `check upstream:broken` fails with the same reason.
    let out = l.run(&cfg, &["check", "upstream:broken"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(
            "upstream broken failed: exited with status 3; last stderr: ModuleNotFoundError"
        ),
        "{err}"
    );
    // One that never answers its handshake, with a short timeout.
    let (l, cfg) = upstream_layout(
        &[entry("hang", "hang", "2025", &hang)],
        "limits: {upstream_handshake_timeout_secs: 2}\n",
    );
    let (rows, _) = upstream_rows(&l, &cfg, "hang");
    assert_eq!(rows[0]["status"], "failed", "{rows:#?}");
    assert_eq!(rows[0]["plugin"], "hang", "{rows:#?}");
    let why = rows[0]["detail"].as_str().unwrap();
    assert!(
        why.starts_with("did not answer its handshake within 2 s"),
        "{why}"
    );
    // `list` ended: the hanging upstream's group went with it.
    wait_gone(&pids(&hang, "children"), "after list");
}

#[test]
fn a_relist_cut_short_by_the_host_itself_is_not_reported_as_a_failure() {
    let l0 = Layout::new();
    let state = l0.dir("state");
    let (l, _) = upstream_layout(&[], "");
    let write = |prefix: &str| {
        l.config(&format!(
            "tool_dirs:\n  - d\n  - server: {{command: [python3, {:?}, --mode, slow_relist, --era, \"2026\", --state, {:?}]}}\n    name: slow\n    prefix: {prefix}\n",
            fixture().to_string_lossy(),
            state.to_string_lossy()
        ))
    };
    let cfg = write("a_");
    let mut s = HttpServer::start(&cfg);
    // Its list changed, and the re-list is under way (it takes the upstream 3 s) ...
    wait_for_file(&state.join("relisting"));
    // ... when a reload replaces the upstream: the host stops the old connection.
    write("b_");
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &s.child().id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let deadline = Instant::now() + START;
    while pids(&state, "starts").len() < 2 {
        assert!(Instant::now() < deadline, "{}", s.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    let starts = pids(&state, "starts");
    // The old connection is stopped; the new one says its list changed too, and its re-list
    // (3 s) ends well after the old one was cut short.
    wait_gone(&starts[..1], "the replaced upstream");
    wait_for_file(&state.join(format!("relisted-{}", starts[1])));
    assert_serves_others(&s);
    assert!(!s.stderr().contains("could not be read"), "{}", s.stderr());
    let seen: HashSet<u32> = pids(&state, "starts").into_iter().collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
}
