//! Benchmark: what mcp-host adds in front of an upstream MCP server over stdio — the official
//! Python SDK server of the tests (`tests/fixtures/upstream/server.py`, run by the Python of
//! `.ci/.tools/venv`, which `.ci/install-clients.sh` installs) called directly, against the same
//! server as a `tool_dirs` upstream of `mcp-host serve --stdio`, in one run.
//!
//! Measures, for a 2026-07-28 `tools/call` of `echo` (`py_echo` through the host, which speaks
//! 2026-07-28 to its upstream too; `MCP_BENCH_ERA=2025-11-25` for 2025 sessions on both sides):
//! latency one call at a time (p50, p99 of 400 after 50 warm-up calls; the direct and the host's
//! calls take turns) and the added p50; calls per second with 16 in flight on the one pipe (in
//! four alternating rounds of 400) and the CPU time, the waits (voluntary context switches) and
//! the reads per call of the server, the host and the host's upstream; the host's resident memory with the upstream connected and idle, against a
//! host serving nothing.
//!
//! Run: `cargo bench -p mcp-host --bench upstream` (`MCP_BENCH_HOST=PATH` measures that host
//! executable instead of building one). Prints a Markdown table; docs/performance.md quotes it.
//! Without the Python venv it says so and measures nothing.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use common::process::{Lines, status_bytes};
use serde_json::{Value, json};

const WARM_UP: usize = 50;
const MEASURED: usize = 400;
const IN_FLIGHT: usize = 16;
const THROUGHPUT_CALLS: usize = 1_600;
/// Alternating rounds of the throughput measurement.
const ROUNDS: usize = 4;

/// A stdio MCP server spoken to in 2026-07-28 (every request's `_meta` says so), as mcp-host
/// speaks to its upstreams, or in a 2025-11-25 session.
struct Session {
    child: Child,
    stdin: ChildStdin,
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
        let stdin = child.stdin.take().unwrap();
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
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
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

/// p50 and p99 of one-at-a-time calls, each session's calls taking turns (the machine's load
/// then falls on both alike): `(direct, through)`.
fn latency(direct: &mut Session, through: &mut Session) -> [(Duration, Duration); 2] {
    for _ in 0..WARM_UP {
        direct.request("tools/call", echo("echo"));
        through.request("tools/call", echo("py_echo"));
    }
    let timed = |s: &mut Session, tool: &str| {
        let start = Instant::now();
        let r = s.request("tools/call", echo(tool));
        assert_ne!(r["result"]["isError"], true, "{r}");
        start.elapsed()
    };
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..MEASURED {
        times[0].push(timed(direct, "echo"));
        times[1].push(timed(through, "py_echo"));
    }
    times.map(|mut t| {
        t.sort();
        (t[MEASURED / 2], t[MEASURED * 99 / 100])
    })
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
        t += per_round as f64 / throughput(through, "py_echo", per_round);
    }
    let total = (per_round * ROUNDS) as f64;
    (total / d, total / t)
}

/// A host serving the Python server as upstream `py` (or nothing), started from `config`.
fn host(exe: &Path, dir: &Path, python: Option<(&Path, &Path)>, modern: bool) -> Session {
    let entries = match python {
        Some((py, script)) => format!(
            "tool_dirs:\n  - server: {{command: [{:?}, {:?}]}}\n    name: py\n    prefix: py_\n",
            py, script
        ),
        None => "tool_dirs: []\n".to_owned(),
    };
    let config = dir.join(if python.is_some() {
        "up.yaml"
    } else {
        "none.yaml"
    });
    std::fs::write(&config, format!("{entries}stdio_user: bench\n")).unwrap();
    let mut cmd = Command::new(exe);
    cmd.arg("--config")
        .arg(&config)
        .args(["serve", "--stdio"])
        .env("RUST_LOG", "error");
    Session::start(cmd, modern)
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let python = std::env::var_os("MCP_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".ci/.tools/venv/bin/python"));
    if !python.is_file() {
        println!(
            "upstream bench: no Python with the MCP SDK at {} (run .ci/install-clients.sh); nothing measured",
            python.display()
        );
        return;
    }
    let script = root.join("tests/fixtures/upstream/server.py");
    // `MCP_BENCH_HOST=PATH` measures that build of the host (another commit's) instead.
    let exe = std::env::var_os("MCP_BENCH_HOST")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::build_release(&["mcp-host"]).join("mcp-host"));
    let dir = tempfile::tempdir().unwrap();

    // The era of both sessions: 2026-07-28 (as the host speaks to its upstream: like with
    // like), or `MCP_BENCH_ERA=2025-11-25`.
    let modern = std::env::var("MCP_BENCH_ERA").map_or(true, |era| era != "2025-11-25");
    let mut direct = Session::start(
        {
            let mut cmd = Command::new(&python);
            cmd.arg(&script);
            cmd
        },
        modern,
    );
    let mut through = host(&exe, dir.path(), Some((&python, &script)), modern);
    // The host connects its upstreams as it starts: wait for `py_echo` to be listed.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = through.request("tools/list", json!({}));
        let tools = listed["result"]["tools"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if tools.iter().any(|t| t["name"] == "py_echo") {
            break;
        }
        assert!(Instant::now() < deadline, "py_echo never listed: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let [(direct_p50, direct_p99), (host_p50, host_p99)] = latency(&mut direct, &mut through);
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
    let idle_with = status_bytes(through.child.id(), "VmRSS");
    let bare = host(&exe, dir.path(), None, modern);
    let idle_without = status_bytes(bare.child.id(), "VmRSS");

    println!(
        "| measurement (Python SDK server over stdio, `tools/call` echo, {}) | direct | through mcp-host | |",
        if modern { "2026-07-28" } else { "2025-11-25" }
    );
    println!("|---|---|---|---|");
    println!(
        "| latency, one call at a time (p50 / p99 of {MEASURED}) | {} / {} | {} / {} | added p50: {} |",
        micros(direct_p50),
        micros(direct_p99),
        micros(host_p50),
        micros(host_p99),
        micros(host_p50.saturating_sub(direct_p50)),
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
        "| host resident memory, idle | | {:.1} MB with the upstream, {:.1} MB without | {:.2} MB for the upstream |",
        idle_with as f64 / 1e6,
        idle_without as f64 / 1e6,
        (idle_with as f64 - idle_without as f64) / 1e6
    );
}
