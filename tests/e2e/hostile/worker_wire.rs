//! M1-M3, L5-L8: forged worker frames, endless worker output, bursts of nested calls, the worker
//! environment and descriptors. Each attack comes from `fixture-hostile` running in a worker
//! (`isolation: process`); the host must kill or refuse the worker's abuse with a clear message,
//! stay under the suite's memory bound and a bounded thread count, and keep serving `/healthz`
//! and another plugin's tools (`fixture-basic`, in-process).

use super::*;

/// A layout with `fixture-basic` in-process (`d`) and `fixture-hostile` in a `process` worker
/// (`iso`), plus `extra` configuration.
fn worker_layout(extra: &str) -> (Layout, std::path::PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("iso", "fixture-hostile", None);
    let cfg = l.config(&format!(
        "tool_dirs:\n  - d\n  - {{path: iso, isolation: process}}\n{extra}"
    ));
    (l, cfg)
}

/// The server's thread count now (`Threads` in /proc/PID/status).
fn threads(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Threads in /proc/{pid}/status"))
}

/// The worker answers again (it was restarted after being killed).
#[track_caller]
fn assert_worker_answers(s: &HttpServer, pid: u32) {
    let deadline = Instant::now() + START;
    loop {
        let r = call_at(s, "/mcp", None, "hostile_pid", json!({}));
        let (text, is_error) = tool_text(&r);
        if !is_error && text.parse::<u32>().is_ok_and(|worker| worker != pid) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the worker never came back: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_forged_frame_with_a_huge_length_prefix_kills_the_worker_and_the_host_keeps_its_memory() {
    let (_l, cfg) = worker_layout(
        "plugins:\n  fixture-hostile:\n    tools: {hostile_forge_prefix: {timeout_secs: 10}}\n",
    );
    let mut s = HttpServer::start(&cfg);
    let pid = s.child().id();
    // 200 MiB announced, 64 KiB of it sent: the old reader zero-filled a buffer for all of it.
    let r = call_at(
        &s,
        "/mcp",
        None,
        "hostile_forge_prefix",
        json!({ "len": 200u32 << 20, "sent": 64 * 1024 }),
    );
    assert_peak_rss(pid);
    let (text, is_error) = tool_text(&r);
    assert!(
        is_error && text.contains("crashed") && text.contains("over the"),
        "{text}"
    );
    wait_for_log(&s, "broken channel");
    assert_serves_others(&s);
    assert_worker_answers(&s, pid);
}

#[test]
fn an_endless_output_line_is_cut_and_the_host_keeps_its_memory() {
    let (_l, cfg) = worker_layout(
        "plugins:\n  fixture-hostile:\n    tools: {hostile_endless_line: {timeout_secs: 50}}\n",
    );
    let mut s = HttpServer::start(&cfg);
    let pid = s.child().id();
    let r = call_at(
        &s,
        "/mcp",
        None,
        "hostile_endless_line",
        json!({ "mib": 256 }),
    );
    assert_eq!(tool_text(&r), ("wrote 256 MiB".to_owned(), false));
    // The line after it arrives whole: the long one was cut, not the stream.
    wait_for_log(&s, "hostile-endless-line-done");
    assert_peak_rss(pid);
    wait_for_log(&s, "line cut");
    assert_serves_others(&s);
    assert_worker_answers(&s, pid);
}

#[test]
fn a_burst_of_forged_nested_calls_costs_a_bounded_number_of_host_threads() {
    let (_l, cfg) = worker_layout("");
    let mut s = HttpServer::start(&cfg);
    let pid = s.child().id();
    assert_worker_answers(&s, pid);
    let before = threads(pid);
    // Each nested call naps 2 s in the worker: the old host ran every one on a thread of its own.
    let burst = call_at(
        &s,
        "/mcp",
        None,
        "hostile_nested_burst",
        json!({ "count": 3000, "name": "hostile_nap", "args": "{\"ms\": 2000}" }),
    );
    assert_eq!(
        tool_text(&burst),
        ("sent 3000 nested calls".to_owned(), false)
    );
    // Watch the thread count while the burst is handled (the refusals are logged once it was).
    let mut most = before;
    let deadline = Instant::now() + START;
    while !s.stderr().contains("too many nested calls") {
        most = most.max(threads(pid));
        assert!(
            Instant::now() < deadline,
            "no refusal logged:\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..200 {
        most = most.max(threads(pid));
        std::thread::sleep(Duration::from_millis(5));
    }
    // 16 nested-call threads for the worker, and some room for the runtime's own.
    assert!(
        most <= before + 16 + 8,
        "{most} host threads under the burst (from {before})"
    );
    assert_serves_others(&s);
    assert_peak_rss(pid);
}

#[test]
fn a_process_worker_sees_only_the_base_environment_and_its_granted_variables() {
    let (_l, cfg) = worker_layout(
        "plugins:\n  fixture-hostile:\n    permissions: {env: [GRANTED_VAR, MCP_HOST_LIMITS__MAX_CALL_DEPTH]}\n",
    );
    let s = HttpServer::start_with_env(
        &cfg,
        &[
            ("HOSTILE_SUITE_SECRET", "the-host-secret"),
            ("GRANTED_VAR", "granted"),
            ("MCP_HOST_LIMITS__MAX_CALL_DEPTH", "8"),
        ],
    );
    let env = |name: &str| {
        let r = call_at(&s, "/mcp", None, "hostile_env", json!({ "name": name }));
        let (text, is_error) = tool_text(&r);
        assert!(!is_error, "{text}");
        text
    };
    assert_eq!(env("HOSTILE_SUITE_SECRET"), "(unset)");
    assert_eq!(env("MCP_HOST_LIMITS__MAX_CALL_DEPTH"), "(unset)");
    assert_eq!(env("GRANTED_VAR"), "granted");
    assert_ne!(env("PATH"), "(unset)");
}

#[test]
fn a_worker_inherits_no_descriptor_the_host_was_started_with() {
    let (l, cfg) = worker_layout("");
    let bait = l.dir("bait").join("inherited-file");
    std::fs::write(&bait, "the host's open file").unwrap();
    // The shell opens the file without close-on-exec (fd 7) and becomes the host.
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("exec 7<\"$0\"; exec \"$@\"")
        .arg(&bait)
        .arg(&mcp_host_tests::artifacts().host)
        .arg("--config")
        .arg(&cfg)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env("XDG_STATE_HOME", cfg.parent().unwrap());
    let mut s = HttpServer::spawn(cmd);
    let pid = s.child().id();
    let host_fds = std::fs::read_link(format!("/proc/{pid}/fd/7")).unwrap();
    assert_eq!(
        host_fds, bait,
        "the host itself holds the file (the bait is set)"
    );
    let r = call_at(&s, "/mcp", None, "hostile_fds", json!({}));
    let (text, is_error) = tool_text(&r);
    assert!(!is_error, "{text}");
    assert!(!text.contains("inherited-file"), "the worker holds: {text}");
}

/// A field of a /proc status file.
fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The tasks (threads of every process) of this test's real user id.
fn user_tasks() -> u64 {
    let me = std::fs::read_to_string("/proc/self/status").unwrap();
    let uid = status_field(&me, "Uid:").unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter(|status| status_field(status, "Uid:") == Some(uid))
        .map(|status| status_field(&status, "Threads:").unwrap_or(1))
        .sum()
}

/// A nap in the sandboxed copy of the plugin.
fn userns_nap(s: &HttpServer, tool: &str) -> (String, bool) {
    tool_text(&call_at(s, "/mcp", None, tool, json!({ "ms": 10 })))
}

#[test]
fn a_sandboxed_worker_cannot_make_a_user_namespace_and_has_a_task_limit() {
    // The same plugin in a process worker (the control) and in a sandboxed one: one server each,
    // since one plugin name is served from one file.
    let start = |isolation: &str| {
        let l = Layout::new();
        l.install("d", "fixture-basic", None);
        l.install("w", "fixture-hostile", None);
        let cfg = l.config(&format!(
            "data_dir: data\ntool_dirs:\n  - d\n  - {{path: w, isolation: {isolation}}}\n"
        ));
        let s = HttpServer::start(&cfg);
        (l, s)
    };
    let userns = |s: &HttpServer| {
        let r = call_at(s, "/mcp", None, "hostile_userns", json!({}));
        let (text, is_error) = tool_text(&r);
        assert!(!is_error, "{text}");
        text
    };
    let (_control_layout, control_server) = start("process");
    let control = userns(&control_server);
    assert!(control.starts_with("clone=ok clone3=ok"), "{control}");
    drop(control_server);

    let (_l, mut s) = start("sandbox");
    let pid = s.child().id();
    let sandboxed = userns(&s);
    assert!(
        sandboxed.starts_with("clone=refused(Operation not permitted")
            && sandboxed.contains("clone3=refused(Function not implemented"),
        "{sandboxed}"
    );
    // RLIMIT_NPROC: what this user runs now plus 1024 (with room for tasks that ended since).
    let nproc: u64 = sandboxed.rsplit("nproc=").next().unwrap().parse().unwrap();
    let bound = user_tasks() + 1024 + 1024;
    assert!(nproc <= bound, "RLIMIT_NPROC {nproc}, over {bound}");
    // Threads still start in the sandbox (the C library falls back from clone3 to clone): the
    // worker starts one for each call that is not inline.
    assert_eq!(userns_nap(&s, "hostile_nap"), ("rested".to_owned(), false));
    assert_serves_others(&s);
    assert_peak_rss(pid);
}

#[test]
fn nested_calls_count_against_the_outer_callers_quota() {
    // One call in flight per caller: the outer call holds it, so its nested call is refused.
    let (_l, cfg) = worker_layout("limits:\n  per_caller: {max_in_flight: 1}\n");
    let s = HttpServer::start(&cfg);
    let r = call_at(&s, "/mcp", None, "shout", json!({ "text": "hi" }));
    let (text, is_error) = tool_text(&r);
    assert!(
        is_error && text.contains("too many calls in flight"),
        "{text}"
    );
    // The slots came back: a call that does not nest still runs.
    let r = call_at(&s, "/mcp", None, "echo", json!({ "text": "alone" }));
    assert_eq!(tool_text(&r), ("alone".to_owned(), false));
}
