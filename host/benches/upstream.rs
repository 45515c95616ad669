//! Benchmark: what mcp-host adds in front of an upstream MCP server over stdio — a server
//! called directly, against the same server as a `tool_dirs` upstream of `mcp-host serve
//! --stdio`, in one run. Two servers, each measured on its own: the official Python SDK server
//! of the tests (`tests/fixtures/upstream/server.py`, run by the Python of `.ci/.tools/venv`,
//! which `.ci/install-clients.sh` installs; 1–2 ms a call), and a server on rmcp's server side
//! (`tests/fixtures/rmcp-upstream`, built by this bench; microseconds a call, so the host's part
//! is not lost in the server's). `MCP_BENCH_UPSTREAMS=python` or `=rmcp` measures one.
//!
//! Measures, for a 2026-07-28 `tools/call` of `echo` (`up_echo` through the host, which speaks
//! 2026-07-28 to its upstream too; `MCP_BENCH_ERA=2025-11-25` for 2025 sessions on both sides):
//! latency one call at a time (p50, p99 of 400 after 50 warm-up calls, `MCP_BENCH_CALLS=N` for
//! N; the direct and the host's calls take turns) and the added p50; calls per second with 16 in
//! flight on the one pipe (in four alternating rounds of 400) and the CPU time, the waits
//! (voluntary context switches) and the reads per call of the server, the host and the host's
//! upstream; the host's resident memory with the upstream connected and idle, against a host
//! serving nothing, and per idle upstream connection (a host with [`MANY`] upstreams of the same
//! server against a host with one); with valgrind installed, the instructions the host runs per
//! call (callgrind).
//!
//! For scale, the same calls also go through a **bare relay** (this bench re-run as a process that
//! only copies lines between its pipes and the server's, one blocked thread each way): what any
//! process in the middle adds on this machine, the floor under the host's added latency.
//!
//! Run: `cargo bench -p mcp-host --bench upstream` (`MCP_BENCH_HOST=PATH` measures that host
//! executable instead of building one). Prints a Markdown table per server; docs/performance.md
//! quotes them. Without the Python venv it says so and measures the rmcp server only.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use common::process::{Lines, counted_instructions, status_bytes, under_callgrind};
use serde_json::{Value, json};

const WARM_UP: usize = 50;
/// Calls timed one at a time per session (`MCP_BENCH_CALLS` to change: the added p50 is a
/// difference of two 1–2 ms medians, so a few thousand narrow it).
const MEASURED: usize = 400;
const IN_FLIGHT: usize = 16;
const THROUGHPUT_CALLS: usize = 1_600;
/// Alternating rounds of the throughput measurement.
const ROUNDS: usize = 4;
/// Upstreams of the host whose resident memory gives the memory per idle upstream connection.
const MANY: usize = 5;
/// Set in the environment of this bench re-run as a bare relay in front of the command after it.
const RELAY_VAR: &str = "MCP_BENCH_RELAY";

/// A stdio MCP server spoken to in 2026-07-28 (every request's `_meta` says so), as mcp-host
/// speaks to its upstreams, or in a 2025-11-25 session.
struct Session {
    child: Child,
    /// `None` once closed ([`Session::close`]).
    stdin: Option<ChildStdin>,
    lines: Lines,
    next_id: u64,
    /// The `_meta` of every request (2026-07-28).
    meta: Option<Value>,
}

impl Session {
    fn start(mut cmd: Command, modern: bool) -> Session {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = Lines::new(child.stdout.take().unwrap());
        let mut s = Session {
            child,
            stdin,
            lines,
            next_id: 1,
            meta: None,
        };
        if modern {
            s.meta = Some(json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "upstream-bench", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            }));
            s.request("server/discover", json!({}));
            return s;
        }
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "upstream-bench", "version": "1"}});
        s.request("initialize", init);
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(&line).unwrap();
        stdin.flush().unwrap();
    }

    /// Close its stdin and wait for it to exit (as a stdio server does at the end of its input).
    fn close(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Send a request and return its id.
    fn post(&mut self, method: &str, mut params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if let Some(meta) = &self.meta {
            params["_meta"] = meta.clone();
        }
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next response (notifications skipped).
    fn response(&mut self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let line = self.lines.next_line(deadline).unwrap();
            let message: Value = serde_json::from_slice(line).unwrap();
            if message.get("id").is_some() && message.get("method").is_none() {
                return message;
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.post(method, params);
        let response = self.response();
        assert!(response.get("error").is_none(), "{response}");
        response
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn echo(tool: &str) -> Value {
    json!({"name": tool, "arguments": {"text": "hello, upstream"}})
}

/// p50 and p99 of one-at-a-time calls, the sessions' calls taking turns (the machine's load then
/// falls on all alike): `(direct, relay, through)`.
fn latency(sessions: [(&mut Session, &str); 3], measured: usize) -> [(Duration, Duration); 3] {
    let mut sessions = sessions;
    for _ in 0..WARM_UP {
        for (s, tool) in sessions.iter_mut() {
            s.request("tools/call", echo(tool));
        }
    }
    let timed = |s: &mut Session, tool: &str| {
        let start = Instant::now();
        let r = s.request("tools/call", echo(tool));
        assert_ne!(r["result"]["isError"], true, "{r}");
        start.elapsed()
    };
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..measured {
        for (i, (s, tool)) in sessions.iter_mut().enumerate() {
            times[i].push(timed(s, tool));
        }
    }
    times.map(|mut t| {
        t.sort();
        (t[measured / 2], t[measured * 99 / 100])
    })
}

/// How many calls [`latency`] times per session: `MCP_BENCH_CALLS`, else [`MEASURED`].
fn measured() -> usize {
    std::env::var("MCP_BENCH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(MEASURED)
}

/// Run as a bare relay: start the command given as arguments and copy lines between this
/// process's stdin/stdout and its, one blocked thread each way, each line one `write`.
fn relay() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut child = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let from_child = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        copy_lines(
            std::io::BufReader::new(from_child),
            &mut std::io::stdout().lock(),
        )
    });
    copy_lines(std::io::stdin().lock(), &mut to_child);
    let _ = child.kill();
    let _ = child.wait();
}

/// Copy lines from `from` to `to` until either side closes.
fn copy_lines(mut from: impl std::io::BufRead, to: &mut impl Write) {
    let mut line = Vec::new();
    loop {
        line.clear();
        match from.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if to.write_all(&line).and_then(|()| to.flush()).is_err() {
            return;
        }
    }
}

/// Calls per second of `calls` calls of `tool` with `IN_FLIGHT` requests outstanding on the pipe.
fn throughput(s: &mut Session, tool: &str, calls: usize) -> f64 {
    let start = Instant::now();
    let mut sent = 0;
    for _ in 0..IN_FLIGHT {
        s.post("tools/call", echo(tool));
        sent += 1;
    }
    for _ in 0..calls {
        s.response();
        if sent < calls {
            s.post("tools/call", echo(tool));
            sent += 1;
        }
    }
    calls as f64 / start.elapsed().as_secs_f64()
}

/// Calls per second `(direct, through)`, measured in [`ROUNDS`] alternating rounds (so that a
/// change in the machine's load falls on both), each rate the total over its rounds.
fn throughputs(direct: &mut Session, through: &mut Session) -> (f64, f64) {
    let per_round = THROUGHPUT_CALLS / ROUNDS;
    let (mut d, mut t) = (0.0, 0.0);
    for _ in 0..ROUNDS {
        d += per_round as f64 / throughput(direct, "echo", per_round);
        t += per_round as f64 / throughput(through, "up_echo", per_round);
    }
    let total = (per_round * ROUNDS) as f64;
    (total / d, total / t)
}

/// An upstream server measured: what it is called in the tables, and its command.
struct Server {
    label: &'static str,
    command: Vec<PathBuf>,
}

impl Server {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..]);
        cmd
    }
}

/// A host serving `upstreams` copies of `server` (`up`, `up2`, … with prefixes `up_`, `up2_`,
/// …), or nothing, each listed before this returns.
fn host(exe: &Path, dir: &Path, server: &Server, upstreams: usize, modern: bool) -> Session {
    let config = host_config(dir, server, upstreams);
    let mut cmd = Command::new(exe);
    cmd.arg("--config").arg(&config).args(["serve", "--stdio"]);
    started(cmd, upstreams, modern)
}

/// The configuration of a host serving `upstreams` copies of `server` (see [`host`]).
fn host_config(dir: &Path, server: &Server, upstreams: usize) -> PathBuf {
    let mut config = String::from(if upstreams == 0 {
        "tool_dirs: []\n"
    } else {
        "tool_dirs:\n"
    });
    let command = server.command.iter().map(|a| format!("{a:?}"));
    let command = command.collect::<Vec<_>>().join(", ");
    for name in (1..=upstreams).map(upstream_name) {
        config += &format!(
            "  - server: {{command: [{command}]}}\n    name: {name}\n    prefix: {name}_\n"
        );
    }
    let file = dir.join(format!("host-{upstreams}.yaml"));
    std::fs::write(&file, format!("{config}stdio_user: bench\n")).unwrap();
    file
}

/// The host `cmd` started, once it lists its last upstream's `echo`.
fn started(mut cmd: Command, upstreams: usize, modern: bool) -> Session {
    cmd.env("RUST_LOG", "error");
    let mut session = Session::start(cmd, modern);
    // The host connects its upstreams in the background: wait for every one's `echo`.
    let wanted: Vec<String> = (1..=upstreams)
        .map(|n| format!("{}_echo", upstream_name(n)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !wanted.is_empty() {
        let listed = session.request("tools/list", json!({}));
        let tools = listed["result"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if wanted
            .iter()
            .all(|w| tools.iter().any(|t| t["name"] == w.as_str()))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{wanted:?} never listed: {listed}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    session
}

/// Instructions the host `exe` runs per call of `server`'s `echo` with [`IN_FLIGHT`] in flight
/// (valgrind's callgrind, the upstream not traced): the difference of a run of 600 calls and one
/// of 100, so that start-up and the listing fall out. `None` without valgrind.
fn instructions(exe: &Path, dir: &Path, server: &Server, modern: bool) -> Option<f64> {
    Command::new("valgrind").arg("--version").output().ok()?;
    let config = host_config(dir, server, 1);
    let counted = |calls: usize| {
        let out = dir.join(format!("callgrind-{calls}.out"));
        let args = ["--config", config.to_str().unwrap(), "serve", "--stdio"];
        let mut session = started(under_callgrind(exe, &args, &out), 1, modern);
        throughput(&mut session, "up_echo", calls);
        session.close();
        counted_instructions(&out)
    };
    let (few, many) = (counted(100), counted(600));
    Some(many.saturating_sub(few) as f64 / 500.0)
}

/// The name of the host's `n`th upstream (from 1): `up`, `up2`, ….
fn upstream_name(n: usize) -> String {
    if n == 1 {
        "up".into()
    } else {
        format!("up{n}")
    }
}

/// The (first) child process of `pid`: a host's upstream.
fn children(pid: u32) -> u32 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .find_map(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Nanoseconds process `pid`'s threads have run (`/proc/PID/task/*/schedstat`).
fn cpu_ns(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Voluntary context switches of process `pid`'s threads (each a wait for something: a read
/// that found nothing, a lock), and the read system calls it made (`/proc/PID/io`).
fn waits_reads(pid: u32) -> [u64; 2] {
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let waits = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .map(|s| field(&s, "voluntary_ctxt_switches:"))
        .sum();
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    [waits, field(&io, "syscr:")]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    if std::env::var_os(RELAY_VAR).is_some() {
        return relay();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let wanted = std::env::var("MCP_BENCH_UPSTREAMS").unwrap_or_else(|_| "python,rmcp".into());
    let wanted: Vec<&str> = wanted.split(',').map(str::trim).collect();
    let mut servers = Vec::new();
    if wanted.contains(&"python") {
        let python = std::env::var_os("MCP_TEST_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join(".ci/.tools/venv/bin/python"));
        if python.is_file() {
            let script = root.join("tests/fixtures/upstream/server.py");
            servers.push(Server {
                label: "Python SDK server",
                command: vec![python, script],
            });
        } else {
            println!(
                "upstream bench: no Python with the MCP SDK at {} (run .ci/install-clients.sh); the Python server not measured",
                python.display()
            );
        }
    }
    if wanted.contains(&"rmcp") {
        let dir = common::build_release(&["fixture-rmcp-upstream"]);
        servers.push(Server {
            label: "rmcp server",
            command: vec![dir.join("rmcp-upstream")],
        });
    }
    // `MCP_BENCH_HOST=PATH` measures that build of the host (another commit's) instead.
    let exe = std::env::var_os("MCP_BENCH_HOST")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::build_release(&["mcp-host"]).join("mcp-host"));
    // The era of both sessions: 2026-07-28 (as the host speaks to its upstream: like with
    // like), or `MCP_BENCH_ERA=2025-11-25`.
    let modern = std::env::var("MCP_BENCH_ERA").map_or(true, |era| era != "2025-11-25");
    let measured = measured();
    for server in &servers {
        measure(&exe, server, modern, measured);
    }
}

/// Measure `server` directly, through the bare relay and through the host `exe`, and print its
/// table.
fn measure(exe: &Path, server: &Server, modern: bool, measured: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut direct = Session::start(server.command(), modern);
    let mut relayed = Session::start(
        {
            let mut cmd = Command::new(std::env::current_exe().unwrap());
            cmd.env(RELAY_VAR, "1").args(&server.command);
            cmd
        },
        modern,
    );
    let mut through = host(exe, dir.path(), server, 1, modern);

    let [
        (direct_p50, direct_p99),
        (relay_p50, relay_p99),
        (host_p50, host_p99),
    ] = latency(
        [
            (&mut direct, "echo"),
            (&mut relayed, "echo"),
            (&mut through, "up_echo"),
        ],
        measured,
    );
    drop(relayed);
    // CPU time per call over the throughput rounds: the direct server's, the host's own and its
    // upstream's (the host's child).
    let upstream = children(through.child.id());
    let pids = [direct.child.id(), through.child.id(), upstream];
    let before = pids.map(cpu_ns);
    let waited = pids.map(waits_reads);
    let (direct_rate, host_rate) = throughputs(&mut direct, &mut through);
    let calls = (THROUGHPUT_CALLS / ROUNDS * ROUNDS) as f64;
    let [direct_cpu, host_cpu, upstream_cpu] =
        [0, 1, 2].map(|i| cpu_ns(pids[i]).saturating_sub(before[i]) as f64 / 1e3 / calls);
    let [direct_wr, host_wr, upstream_wr] = [0, 1, 2].map(|i| {
        let now = waits_reads(pids[i]);
        [0, 1].map(|k| now[k].saturating_sub(waited[i][k]) as f64 / calls)
    });
    drop(through);
    // Resident memory of idle hosts just started (no call made): none, one and [`MANY`] upstreams.
    let one = host(exe, dir.path(), server, 1, modern);
    let idle_with = status_bytes(one.child.id(), "VmRSS");
    drop(one);
    let bare = host(exe, dir.path(), server, 0, modern);
    let idle_without = status_bytes(bare.child.id(), "VmRSS");
    drop(bare);
    let many = host(exe, dir.path(), server, MANY, modern);
    let idle_many = status_bytes(many.child.id(), "VmRSS");
    drop(many);
    let instructions = instructions(exe, dir.path(), server, modern);

    println!(
        "\n| measurement ({} over stdio, `tools/call` echo, {}) | direct | through mcp-host | |",
        server.label,
        if modern { "2026-07-28" } else { "2025-11-25" }
    );
    println!("|---|---|---|---|");
    println!(
        "| latency, one call at a time (p50 / p99 of {}) | {} / {} | {} / {} | added p50: {} |",
        measured,
        micros(direct_p50),
        micros(direct_p99),
        micros(host_p50),
        micros(host_p99),
        micros(host_p50.saturating_sub(direct_p50)),
    );
    println!(
        "| latency through a bare relay (p50 / p99 of {}) | | {} / {} | added p50: {}; the host over the relay: {} |",
        measured,
        micros(relay_p50),
        micros(relay_p99),
        micros(relay_p50.saturating_sub(direct_p50)),
        micros(host_p50.saturating_sub(relay_p50)),
    );
    println!(
        "| calls per second, {IN_FLIGHT} in flight | {direct_rate:.0} | {host_rate:.0} | {:.2}× |",
        host_rate / direct_rate
    );
    println!(
        "| CPU time per call, {IN_FLIGHT} in flight | the server: {direct_cpu:.1} µs | the host: {host_cpu:.1} µs; its upstream: {upstream_cpu:.1} µs | |"
    );
    println!(
        "| waits (voluntary context switches) / reads per call, {IN_FLIGHT} in flight | the server: {:.2} / {:.2} | the host: {:.2} / {:.2}; its upstream: {:.2} / {:.2} | |",
        direct_wr[0], direct_wr[1], host_wr[0], host_wr[1], upstream_wr[0], upstream_wr[1]
    );
    println!(
        "| host resident memory, idle (just started) | | {:.1} MB with the upstream, {:.1} MB serving nothing | {:.2} MB for the first upstream |",
        idle_with as f64 / 1e6,
        idle_without as f64 / 1e6,
        (idle_with as f64 - idle_without as f64) / 1e6
    );
    println!(
        "| host resident memory per idle upstream connection | | {:.1} MB with {MANY} upstreams | {:.2} MB each (({MANY} − 1) more than one) |",
        idle_many as f64 / 1e6,
        (idle_many as f64 - idle_with as f64) / 1e6 / (MANY - 1) as f64
    );
    if let Some(per_call) = instructions {
        println!(
            "| instructions per call in the host (callgrind, {IN_FLIGHT} in flight, 600 calls less 100) | | {:.1}k | |",
            per_call / 1e3
        );
    }
}
