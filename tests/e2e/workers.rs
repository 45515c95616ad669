//! Isolated plugins end to end: plugins in supervised worker processes (`isolation: process` and
//! `sandbox`), loaded from real tool directories, called through the library host and through
//! `mcp-host serve` over real pipes and sockets — while the fixture plugin crashes its worker every
//! way it can, hangs past its deadline, and tries to reach what its sandbox does not grant.
//!
//! Every wait is for an event, with a generous deadline ([`WAIT`]); nothing here asserts how fast
//! anything happens (`cargo bench -p mcp-host --bench isolation` measures that).

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcp_host::access::Identity;
use mcp_host::access::agents::Agent;
use mcp_host::config::AgentSettings;
use mcp_host::exec::{CallEvent, CancelFlag};
use mcp_host::{CallOptions, Host, RequestContext};
use mcp_host_tests::serve::{
    HttpServer, LEGACY, StdioServer, WAIT, header_refs, modern_headers, notification, request,
    with_meta,
};
use mcp_host_tests::{Layout, artifacts, open_gate, row, runtime, text, wait_for_file};
use mcp_plugin_sdk::UserInfo;
use serde_json::{Value, json};

const CRASH_LIB: &str = "libfixture_crash.so";
const BASIC_LIB: &str = "libfixture_basic.so";
const LIST_CHANGED: &str = "notifications/tools/list_changed";

/// Call `probe` every 20 ms until it returns `Some` or [`WAIT`] has passed.
fn poll<T>(mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process ids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still show its status as Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

fn call(rt: &tokio::runtime::Runtime, host: &Host, tool: &str, args: Value) -> Value {
    rt.block_on(host.call(tool, Some(args), CallOptions::default()))
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The library host with worker processes

#[test]
fn an_isolated_plugin_runs_in_its_own_process_with_progress_logs_nested_calls_and_cancellation() {
    let l = Layout::new();
    l.install("iso", "fixture-basic", None);
    l.install("iso", "fixture-crash", None);
    let cfg = l.config("tool_dirs:\n  - {path: iso, isolation: process}\n");
    let host = l.host(&cfg);
    let rt = runtime();

    // Its own process, not the host's.
    let worker: u32 = text(&call(&rt, &host, "pid", json!({}))).parse().unwrap();
    assert_ne!(worker, std::process::id());
    assert_eq!(
        text(&call(&rt, &host, "echo", json!({"text": "héllo"}))),
        "héllo"
    );

    // Progress and log events come back to the caller, in order, before the result.
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let opts = CallOptions {
        events: Some(Arc::new(move |e| sink.lock().unwrap().push(e))),
        ..CallOptions::default()
    };
    let counted = rt
        .block_on(host.call("count", Some(json!({"steps": 3})), opts))
        .unwrap();
    assert_eq!(text(&counted), "counted to 3");
    let events = events.lock().unwrap().clone();
    let progress: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            CallEvent::Progress { progress, .. } => Some(*progress),
            _ => None,
        })
        .collect();
    assert_eq!(progress, [1.0, 2.0, 3.0], "{events:?}");
    assert!(events.iter().any(
        |e| matches!(e, CallEvent::Log { message, logger, .. } if message == "step 3 of 3" && logger == "count")
    ));

    // A nested call goes through the host (and here back into the same worker).
    assert_eq!(
        text(&call(&rt, &host, "shout", json!({"text": "hi"}))),
        "HI"
    );
    // ... where the agent's view applies: a tool hidden from the agent does not exist for it.
    let agent = Agent::new(
        "no-echo",
        &AgentSettings {
            deny: vec!["echo".into()],
            ..AgentSettings::default()
        },
    )
    .unwrap();
    let hidden = rt
        .block_on(host.call(
            "shout",
            Some(json!({"text": "hi"})),
            CallOptions::for_request(Arc::new(RequestContext {
                identity: Identity {
                    agent: Some(Arc::new(agent)),
                    ..Identity::default()
                },
                ..RequestContext::default()
            })),
        ))
        .unwrap();
    assert_eq!(hidden["isError"], true, "{hidden}");
    assert!(text(&hidden).contains("unknown tool: echo"), "{hidden}");

    // The verified caller crosses to the worker; an async tool runs on the plugin's own runtime.
    let me = rt
        .block_on(host.call(
            "whoami",
            None,
            CallOptions::for_request(Arc::new(RequestContext::for_caller(Some(UserInfo::new(
                "ana",
            ))))),
        ))
        .unwrap();
    assert_eq!(me["structuredContent"]["user_id"], "ana", "{me}");
    assert_eq!(
        text(&call(&rt, &host, "async_sleep", json!({"millis": 1}))),
        "async slept 1 ms"
    );

    // Cancellation reaches the plugin in the worker.
    let (gate, started) = (l.root.path().join("gate"), l.root.path().join("started"));
    let cancel = CancelFlag::new();
    let pending = rt.spawn({
        let (host, cancel) = (host.clone(), cancel.clone());
        let args = json!({"path": gate, "started": started});
        async move {
            host.call(
                "wait_for",
                Some(args),
                CallOptions::for_request(Arc::new(RequestContext {
                    cancel,
                    ..RequestContext::default()
                })),
            )
            .await
        }
    });
    wait_for_file(&started);
    cancel.cancel();
    let cancelled = rt.block_on(pending).unwrap().unwrap();
    assert_eq!(text(&cancelled), "cancelled");

    // `mcp-host list` shows how each plugin runs.
    let (rows, _) = l.list(&cfg);
    assert_eq!(row(&rows, "pid", CRASH_LIB)["isolation"], "process");
    assert_eq!(row(&rows, "echo", BASIC_LIB)["isolation"], "process");
    host.shutdown();
}

#[test]
fn a_call_past_its_deadline_gets_its_worker_killed_which_frees_its_slot_for_the_next_call() {
    let l = Layout::new();
    l.install("iso", "fixture-crash", None);
    // One call at a time: the next call can only run once the hung one has given its slot back.
    let cfg = l.config(
        "tool_dirs:\n  - {path: iso, isolation: process}\nplugins:\n  fixture-crash:\n    max_concurrent_calls: 1\n    tools: {hang: {timeout_secs: 0.5}}\n",
    );
    let host = l.host(&cfg);
    let rt = runtime();
    let before: u32 = text(&call(&rt, &host, "pid", json!({}))).parse().unwrap();
    let hung = call(&rt, &host, "hang", json!({}));
    assert_eq!(text(&hung), "timed out after 0.5 s", "{hung}");
    // Held in-process, the slot would never come back; here the worker is killed and restarted.
    let after = call(&rt, &host, "pid", json!({}));
    assert_ne!(text(&after).parse::<u32>().unwrap(), before, "{after}");
    assert!(
        poll(|| (!alive(before)).then_some(())).is_some(),
        "the hung worker {before} still runs"
    );
    host.shutdown();
}

// ---------------------------------------------------------------------------------------------
// Crashes under load, quarantine and recovery (mcp-host serve)

/// A 2026 `tools/call` over HTTP on a fresh connection; the result (or error) object.
fn http_call(server: &HttpServer, name: &str, args: Value) -> Value {
    let params = with_meta(json!({"name": name, "arguments": args}));
    let headers = modern_headers("tools/call", Some(name));
    server
        .post(&header_refs(&headers), &request(1, "tools/call", params))
        .message()
}

#[test]
fn crashes_of_every_kind_fail_only_their_own_calls_while_sixteen_clients_keep_using_another_plugin()
{
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("iso", "fixture-crash", None);
    let cfg = l.config(
        "tool_dirs:\n  - d\n  - {path: iso, isolation: process}\nlimits: {memory_mb: 512, max_crashes: 100}\nplugins:\n  fixture-crash:\n    tools: {hang: {timeout_secs: 1}}\n",
    );
    let mut server = HttpServer::start(&cfg);
    let server_pid = server.child().id();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..16)
        .map(|i| {
            let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
            let addr = server.addr;
            std::thread::spawn(move || {
                let mut conn = mcp_host_tests::serve::HttpConn::connect(addr);
                let headers = modern_headers("tools/call", Some("echo"));
                let mut n = 0u64;
                while !stop.load(Ordering::Acquire) {
                    n += 1;
                    let text = format!("client {i} call {n}");
                    let body = request(
                        n,
                        "tools/call",
                        with_meta(json!({"name": "echo", "arguments": {"text": text}})),
                    );
                    let resp = conn.post(&header_refs(&headers), body.to_string().as_bytes());
                    let answer = resp.message();
                    if resp.status == 200 && answer["result"]["content"][0]["text"] == text.as_str()
                    {
                        ok.fetch_add(1, Ordering::AcqRel);
                    } else {
                        failed.fetch_add(1, Ordering::AcqRel);
                        eprintln!("client {i}: unexpected answer {} {answer}", resp.status);
                    }
                }
            })
        })
        .collect();

    // The worker answering `pid` (`None` when the call met a worker being killed).
    let pid_of = |server: &HttpServer| -> Option<u32> {
        let r = http_call(server, "pid", json!({}));
        r["result"]["content"][0]["text"]
            .as_str()
            .and_then(|p| p.parse().ok())
    };
    let mut worker = pid_of(&server).unwrap_or_else(|| panic!("no pid:\n{}", server.stderr()));
    let ways = [
        (
            "segfault",
            json!({}),
            "plugin fixture-crash crashed (SIGSEGV)",
        ),
        ("abort", json!({}), "plugin fixture-crash crashed (SIGABRT)"),
        (
            "exit",
            json!({"code": 3}),
            "plugin fixture-crash crashed (exited with status 3)",
        ),
        // Past `limits.memory_mb` the allocator fails, which aborts.
        (
            "allocate",
            json!({}),
            "plugin fixture-crash crashed (SIGABRT)",
        ),
        ("hang", json!({}), "timed out after 1 s"),
    ];
    for round in 0..2 {
        for (tool, args, expected) in &ways {
            let r = http_call(&server, tool, args.clone());
            assert_eq!(r["result"]["isError"], true, "{tool}: {r}");
            assert_eq!(
                r["result"]["content"][0]["text"], *expected,
                "round {round}, {tool}: {r}"
            );
            // The plugin answers again, from a new worker (a hung call's worker is killed once the
            // grace after its deadline has passed; until then the old one answers).
            worker = poll(|| pid_of(&server).filter(|p| *p != worker))
                .unwrap_or_else(|| panic!("round {round}, {tool}: no new worker answered"));
        }
    }
    stop.store(true, Ordering::Release);
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(
        failed.load(Ordering::Acquire),
        0,
        "calls to the other plugin failed"
    );
    assert!(ok.load(Ordering::Acquire) > 0);
    // The host never went down.
    assert!(server.child().wait_timeout(Duration::ZERO).is_none());
    assert_eq!(server.child().id(), server_pid);
    let log = server.stderr();
    assert!(
        log.contains("Plugin fixture-crash crashed (SIGSEGV)"),
        "{log}"
    );
    assert!(
        log.contains("memory allocation of"),
        "the worker's own message is logged:\n{log}"
    );
    assert!(log.contains("hang is 2 s past its deadline"), "{log}");
}

/// A legacy stdio session that keeps the notifications it sees.
struct Session {
    s: StdioServer,
    next: u64,
    notes: Vec<Value>,
}

impl Session {
    fn start(config: &Path) -> Self {
        let mut s = StdioServer::start(config);
        s.initialize(LEGACY);
        Session {
            s,
            next: 0,
            notes: Vec::new(),
        }
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = json!(self.next);
        self.s.send(&request(id.clone(), method, params));
        let (resp, notes) = self.s.response_within(&id, WAIT);
        self.notes.extend(notes);
        resp
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.rpc("tools/call", json!({"name": tool, "arguments": args}))
    }

    fn tools(&mut self) -> Vec<String> {
        self.rpc("tools/list", json!({}))["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Wait for a `list_changed` (one already seen counts, and is consumed).
    fn heard_list_changed(&mut self) -> bool {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(i) = self.notes.iter().position(|n| n["method"] == LIST_CHANGED) {
                self.notes.remove(i);
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if let Some(m) = self.s.recv(left.min(Duration::from_millis(50)))
                && m.get("method").is_some()
            {
                self.notes.push(m);
            }
        }
    }

    /// Crash the worker `n` times with a segfault.
    fn crash(&mut self, n: usize) {
        for _ in 0..n {
            let r = self.call("segfault", json!({}));
            assert_eq!(
                r["result"]["content"][0]["text"],
                "plugin fixture-crash crashed (SIGSEGV)",
                "{r}\n{}",
                self.s.stderr()
            );
        }
    }
}

fn replace_atomically(src: &Path, dest: &Path) {
    let tmp = dest.with_file_name(".replacement.tmp");
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dest).unwrap();
}

#[test]
fn a_crash_loop_quarantines_the_plugin_until_its_file_changes_or_sighup() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let file = l.install("iso", "fixture-crash", None);
    let cfg = l.config(
        "tool_dirs:\n  - d\n  - {path: iso, isolation: process}\nlimits: {max_crashes: 3, crash_window_secs: 600}\n",
    );
    let mut c = Session::start(&cfg);
    assert!(c.tools().contains(&"pid".to_owned()));
    c.crash(3);
    assert!(
        c.heard_list_changed(),
        "no list_changed after the quarantine"
    );
    let tools = c.tools();
    assert!(
        !tools.contains(&"pid".to_owned()) && tools.contains(&"echo".to_owned()),
        "{tools:?}"
    );
    assert_eq!(c.call("pid", json!({}))["error"]["code"], -32602);
    // Waits: stderr is read on its own thread, so the line may trail the answers above.
    assert!(
        c.s.logged("Quarantined plugin fixture-crash: crashed 3 times in 600 s (last: SIGSEGV)"),
        "{}",
        c.s.stderr()
    );
    // `mcp-host list` says so too, while the server runs.
    let (rows, _) = l.list(&cfg);
    let quarantined = row(&rows, "pid", CRASH_LIB);
    assert_eq!(quarantined["status"], "quarantined", "{quarantined}");
    assert!(
        quarantined["detail"]
            .as_str()
            .unwrap()
            .contains("crashed 3 times"),
        "{quarantined}"
    );
    assert_eq!(
        text(&c.call("echo", json!({"text": "still"}))["result"]),
        "still"
    );

    // A new file is another chance.
    replace_atomically(&artifacts().plugin("fixture-crash"), &file);
    assert!(
        c.heard_list_changed(),
        "no list_changed after the file changed"
    );
    assert!(c.tools().contains(&"pid".to_owned()));
    assert!(c.call("pid", json!({}))["result"]["isError"].is_null());

    // So is SIGHUP, with the same file. (Every notification sent so far came before the last
    // answer: forget them.)
    c.notes.clear();
    c.crash(3);
    assert!(c.heard_list_changed());
    assert!(!c.tools().contains(&"pid".to_owned()));
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &c.s.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    assert!(c.heard_list_changed(), "no list_changed after SIGHUP");
    assert!(c.call("pid", json!({}))["result"]["isError"].is_null());
    let (rows, _) = l.list(&cfg);
    assert_eq!(row(&rows, "pid", CRASH_LIB)["status"], "active");
}

#[test]
fn replacing_an_isolated_plugin_starts_a_new_worker_and_stops_the_old_one_after_its_last_call() {
    let l = Layout::new();
    let file = l.install("iso", "fixture-basic", None);
    let marker = l.root.path().join("retired");
    let cfg = l.config(&format!(
        "tool_dirs:\n  - {{path: iso, isolation: process}}\nplugins:\n  fixture-basic:\n    config: {{shutdown_marker: {}}}\n",
        marker.display()
    ));
    let mut c = Session::start(&cfg);
    let old_workers = children(c.s.pid());
    assert_eq!(old_workers.len(), 1, "{old_workers:?}");
    let old = old_workers[0];
    // A long call on the old version.
    let (gate, started) = (l.root.path().join("gate"), l.root.path().join("started"));
    c.s.send(&request(
        "long",
        "tools/call",
        json!({"name": "wait_for", "arguments": {"path": gate, "started": started}}),
    ));
    wait_for_file(&started);
    replace_atomically(&artifacts().plugin("fixture-basic"), &file);
    // New calls go to the new version (in a new worker) while the old one finishes its call.
    assert!(
        poll(|| {
            let r = c.call("echo", json!({"text": "new"}));
            (r["result"]["content"][0]["text"] == "new" && children(c.s.pid()).len() == 2)
                .then_some(())
        })
        .is_some(),
        "no new worker: {:?}\n{}",
        children(c.s.pid()),
        c.s.stderr()
    );
    assert!(alive(old), "the old worker stopped before its call ended");
    assert!(
        !marker.exists(),
        "the old version retired before its call ended"
    );
    open_gate(&gate, "finished on the old version");
    let (long, _) = c.s.response_within(&json!("long"), WAIT);
    assert_eq!(
        long["result"]["content"][0]["text"],
        "finished on the old version"
    );
    // Then it runs the plugin's shutdown hook and exits: its image is really gone.
    assert!(
        poll(|| marker.exists().then_some(())).is_some(),
        "no shutdown hook ran"
    );
    assert!(
        poll(|| {
            let now = children(c.s.pid());
            (now.len() == 1 && now[0] != old).then_some(())
        })
        .is_some(),
        "the old worker {old} still runs: {:?}",
        children(c.s.pid())
    );
}

// ---------------------------------------------------------------------------------------------
// Sandbox

/// A TCP server on 127.0.0.1 that answers each connection's first line with `hi`.
fn greeter() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut line = String::new();
            let mut reader = BufReader::new(&stream);
            if reader.read_line(&mut line).is_ok() {
                let _ = (&stream).write_all(b"hi\n");
            }
        }
    });
    addr
}

fn sandbox_layout(permissions: &str) -> (Layout, PathBuf, PathBuf) {
    let l = Layout::new();
    let file = l.install("sb", "fixture-crash", None);
    std::fs::write(l.dir("granted").join("in.txt"), "granted content").unwrap();
    std::fs::write(l.dir("secret").join("key.txt"), "secret content").unwrap();
    l.dir("out");
    let cfg = l.config(&format!(
        "data_dir: data\ntool_dirs:\n  - {{path: sb, isolation: sandbox}}\nplugins:\n  fixture-crash:\n    permissions:\n{permissions}"
    ));
    (l, cfg, file)
}

/// The text of a call's result over stdio, and whether it is an error.
fn outcome(s: &mut StdioServer, id: &str, tool: &str, args: Value) -> (String, bool) {
    let r = s.call_modern(id, "tools/call", json!({"name": tool, "arguments": args}));
    let result = &r["result"];
    (
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}\n{}", s.stderr()))
            .to_owned(),
        result["isError"] == true,
    )
}

#[test]
fn a_sandboxed_plugin_reaches_what_it_is_granted_and_the_kernel_refuses_the_rest() {
    let (granted_port, other_port) = (greeter(), greeter());
    let (l, cfg, _) = sandbox_layout(&format!(
        "      read: [granted]\n      write: [out]\n      connect: [\"127.0.0.1:{}\"]\n      env: [GRANTED_VAR]\n",
        granted_port.port()
    ));
    let mut s = StdioServer::start_with(
        &cfg,
        &[],
        &[("GRANTED_VAR", "visible"), ("SECRET_TOKEN", "hunter2")],
    );
    let root = l.root.path();
    let denied = |(text, error): (String, bool), what: &str| {
        assert!(
            error && text.contains(what),
            "expected {what:?}, got {text:?}"
        );
    };
    let allowed = |(text, error): (String, bool), want: &str| {
        assert!(
            !error && text.contains(want),
            "expected {want:?}, got {text:?}"
        );
    };
    allowed(
        outcome(
            &mut s,
            "r1",
            "read_file",
            json!({"path": root.join("granted/in.txt")}),
        ),
        "granted content",
    );
    denied(
        outcome(
            &mut s,
            "r2",
            "read_file",
            json!({"path": root.join("secret/key.txt")}),
        ),
        "Permission denied",
    );
    denied(
        outcome(&mut s, "r3", "read_file", json!({"path": "/etc/passwd"})),
        "Permission denied",
    );
    allowed(
        outcome(
            &mut s,
            "w1",
            "write_file",
            json!({"path": root.join("out/new.txt"), "content": "x"}),
        ),
        "wrote",
    );
    assert_eq!(
        std::fs::read_to_string(root.join("out/new.txt")).unwrap(),
        "x"
    );
    denied(
        outcome(
            &mut s,
            "w2",
            "write_file",
            json!({"path": root.join("secret/new.txt"), "content": "x"}),
        ),
        "Permission denied",
    );
    denied(
        outcome(
            &mut s,
            "w3",
            "write_file",
            json!({"path": root.join("granted/in.txt"), "content": "x"}),
        ),
        "Permission denied",
    );
    // Its data directory (`<data_dir>/<plugin>`) is granted without asking.
    allowed(
        outcome(
            &mut s,
            "w4",
            "write_file",
            json!({"path": root.join("data/fixture-crash/state"), "content": "x"}),
        ),
        "wrote",
    );
    allowed(
        outcome(
            &mut s,
            "c1",
            "connect",
            json!({"addr": granted_port.to_string()}),
        ),
        "connected: hi",
    );
    denied(
        outcome(
            &mut s,
            "c2",
            "connect",
            json!({"addr": other_port.to_string()}),
        ),
        "Permission denied",
    );
    denied(
        outcome(&mut s, "x1", "exec", json!({"program": "/bin/true"})),
        "Operation not permitted",
    );
    allowed(
        outcome(&mut s, "e1", "env_var", json!({"name": "GRANTED_VAR"})),
        "visible",
    );
    allowed(
        outcome(&mut s, "e2", "env_var", json!({"name": "SECRET_TOKEN"})),
        "(unset)",
    );
    allowed(
        outcome(&mut s, "e3", "env_var", json!({"name": "HOME"})),
        "(unset)",
    );

    // `list` and `check --permissions` show the grant.
    let (rows, _) = l.list(&cfg);
    let r = row(&rows, "read_file", CRASH_LIB);
    assert_eq!(r["isolation"], "sandbox", "{r}");
    assert_eq!(
        r["permissions"]["connect"],
        json!([granted_port.to_string()]),
        "{r}"
    );
    assert_eq!(r["permissions"]["env"], json!(["GRANTED_VAR"]), "{r}");
    let out = l.run(
        &cfg,
        &[
            "check",
            "--permissions",
            root.join("sb").join(CRASH_LIB).to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let check: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(check["run"]["isolation"], "sandbox", "{check}");
    assert_eq!(
        check["run"]["permissions"]["read"],
        json!([root.join("granted")]),
        "{check}"
    );
    assert_eq!(check["run"]["permissions"]["exec"], false, "{check}");
}

#[test]
fn a_sandbox_granting_exec_and_any_connection_lets_the_plugin_run_programs_and_connect_anywhere() {
    let addr = greeter();
    let (l, cfg, _) = sandbox_layout("      connect: any\n      exec: true\n");
    let mut s = StdioServer::start(&cfg);
    let (out, error) = outcome(
        &mut s,
        "x",
        "exec",
        json!({"program": "/bin/echo", "args": ["ran"]}),
    );
    assert!(!error && out == "ran", "{out}");
    let (out, error) = outcome(&mut s, "c", "connect", json!({"addr": addr.to_string()}));
    assert!(!error && out == "connected: hi", "{out}");
    // Files stay denied: only the network and programs were granted.
    let (out, error) = outcome(
        &mut s,
        "r",
        "read_file",
        json!({"path": l.root.path().join("secret/key.txt")}),
    );
    assert!(error && out.contains("Permission denied"), "{out}");
}

#[test]
fn an_isolated_plugin_serves_resources_and_prompts_and_asks_the_client_through_its_worker() {
    let l = Layout::new();
    l.install("iso", "fixture-conformance", None);
    let cfg = l.config("tool_dirs:\n  - {path: iso, isolation: process}\n");
    let mut s = StdioServer::start(&cfg);
    let init = s.call(
        "init",
        "initialize",
        json!({
            "protocolVersion": LEGACY,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "e2e", "version": "0"},
        }),
    );
    assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");
    s.send(&notification("notifications/initialized", Value::Null));

    // A resource read and a prompt travel to the worker and back like tool calls.
    let read = s.call("r", "resources/read", json!({"uri": "test://static-text"}));
    assert!(read["result"]["contents"][0]["text"].is_string(), "{read}");
    let prompt = s.call("p", "prompts/get", json!({"name": "test_simple_prompt"}));
    assert!(prompt["result"]["messages"][0].is_object(), "{prompt}");

    // The worker's tool asks the client (an elicitation request the host sends on its behalf),
    // and the answer reaches the plugin in its process.
    s.send(&request(
        7,
        "tools/call",
        json!({"name": "test_elicitation", "arguments": {"message": "Who?"}}),
    ));
    let asked = s.recv(WAIT).expect("the elicitation request");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["message"], "Who?");
    s.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"username": "zoe", "email": "z@e.x"}}}));
    let done = s.response(7);
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("action=accept") && text.contains("zoe"),
        "{done}"
    );
}
