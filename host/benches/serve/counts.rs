//! Section `counts` of the serving bench: what the kernel does for the host, counted (the speed
//! guard's second half, beside instructions). Per `tools/call` of `echo`, one at a time, over
//! stdio and over one keep-alive HTTP connection, host against the bare echo of the same run:
//!
//! - **system calls** of the server process, every thread (`strace -f -c`; a run of `counted()`
//!   calls and one of five times as many, the difference over the extra calls, so start-up and
//!   exit cancel out);
//! - **waits**: voluntary context switches of every thread (`/proc/PID/task/*/status`) over a
//!   window of calls after a warm-up, no tracer attached — each is a thread that blocked and has
//!   to be woken again (a wake-up between the runtime, the blocking pool and reader threads).
//!
//! And a start over stdio (`initialize`, `notifications/initialized`, `tools/list` answered, the
//! packaged plugins, probe cache warm) against rmcp's own server (`tests/fixtures/rmcp-upstream`)
//! doing the same: resident memory after the answer, page faults and threads, the system calls
//! and instructions of the whole run (start, the three messages, exit).
//!
//! One at a time because that is what makes these counts repeatable: with requests in flight, how
//! many a read or a wake-up serves depends on timing, so on the machine's load. Each count can be
//! guarded: `MCP_BENCH_MAX_{STDIO,HTTP}_{SYSCALL,WAIT}_RATIO` (against the bare echo),
//! `MCP_BENCH_MAX_RSS_RATIO` (against rmcp's server) and `MCP_BENCH_MAX_START_RSS_MB` (a stated
//! bound; with it alone rmcp's server is not built) fail the run when exceeded.

use std::io::Write as _;
use std::path::Path;
use std::process::ChildStdin;
use std::time::Instant;

use super::common::kernel::{self, PerCall, Switches, Syscalls};
use super::common::process::{
    Lines, STEP_TIMEOUT, Server, children, counted_instructions, server_command, under_callgrind,
};
use super::{
    Env, LEGACY, Memory, counted, echo_body, exchange, guard, host_http_request, response_id,
    stdio_call,
};
use tokio::net::TcpStream;

/// Calls made before a window of waits is counted (the runtime's threads started, caches filled).
const WARM_UP_CALLS: u64 = 200;

/// A stdio server's pipes, driven one message at a time.
struct Client {
    stdin: ChildStdin,
    lines: Lines,
    next_id: u64,
}

impl Client {
    fn of(server: &mut Server) -> Client {
        Client {
            stdin: server.stdin.take().unwrap(),
            lines: Lines::new(server.stdout.take().unwrap()),
            next_id: 1,
        }
    }

    /// `count` `tools/call`s of `echo`, each answered before the next is sent.
    fn calls(&mut self, count: u64) {
        for _ in 0..count {
            self.stdin.write_all(&stdio_call(self.next_id)).unwrap();
            let line = self
                .lines
                .next_line(Instant::now() + 10 * STEP_TIMEOUT)
                .unwrap();
            assert_eq!(
                response_id(line),
                self.next_id,
                "{}",
                String::from_utf8_lossy(line)
            );
            self.next_id += 1;
        }
    }

    /// Send `message` (one line); wait for its answer when it has an id.
    fn message(&mut self, message: &str, answered: bool) -> String {
        self.stdin.write_all(message.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        if !answered {
            return String::new();
        }
        let line = self
            .lines
            .next_line(Instant::now() + 10 * STEP_TIMEOUT)
            .unwrap();
        String::from_utf8_lossy(line).into_owned()
    }
}

/// The system calls of `exe args...` (stdio) serving `count` calls under strace, to its exit.
fn stdio_syscalls(exe: &Path, args: &[&str], count: u64, out: &Path) -> Syscalls {
    let mut server = Server::spawn(
        "stdio server under strace",
        kernel::under_strace(exe, args, out),
    );
    let mut client = Client::of(&mut server);
    client.calls(count);
    drop(client);
    assert!(
        server.exited_within(10 * STEP_TIMEOUT),
        "{} did not exit",
        server.name
    );
    Syscalls::read(out)
}

/// The voluntary and involuntary context switches per call of `exe args...` (stdio, pinned as in
/// the load runs) over `count` calls after a warm-up.
fn stdio_waits(env: &Env, exe: &Path, args: &[&str], count: u64) -> (f64, f64) {
    let mut cmd = server_command(exe, args, env.place, true);
    cmd.env("RUST_LOG", "info");
    let mut server = Server::spawn("stdio server (waits)", cmd);
    let pid = server.pid();
    let mut client = Client::of(&mut server);
    client.calls(WARM_UP_CALLS);
    let before = Switches::of(pid);
    client.calls(count);
    let during = Switches::of(pid).since(before);
    per_call(during, count)
}

fn per_call(s: Switches, count: u64) -> (f64, f64) {
    (
        s.voluntary as f64 / count as f64,
        s.involuntary as f64 / count as f64,
    )
}

/// The system calls of the HTTP server `exe args...` serving `count` calls under strace, to its
/// exit on SIGTERM.
fn http_syscalls(env: &Env, exe: &Path, args: &[&str], count: u64, out: &Path) -> Syscalls {
    let server = Server::spawn(
        "HTTP server under strace",
        kernel::under_strace(exe, args, out),
    );
    let addr = server.wait_listening();
    http_serial(env, addr, count, None);
    // strace's child is the server: SIGTERM to it, and strace writes its counts as it ends.
    let traced = *children(server.pid())
        .first()
        .expect("the server under strace");
    // SAFETY: signalling a live process of ours (strace's child, not reaped while strace runs).
    unsafe { libc::kill(traced as libc::pid_t, libc::SIGTERM) };
    let mut server = server;
    assert!(
        server.exited_within(10 * STEP_TIMEOUT),
        "{} did not exit",
        server.name
    );
    Syscalls::read(out)
}

/// `count` `tools/call`s of `echo` over one keep-alive connection to `addr`, one at a time. With
/// `waits: Some(pid)`, [`WARM_UP_CALLS`] calls first, and the switches of `pid` over the `count`.
fn http_serial(env: &Env, addr: std::net::SocketAddr, count: u64, waits: Option<u32>) -> Switches {
    let request = host_http_request(addr, "tools/call", Some("echo"), &echo_body());
    env.rt.block_on(async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (mut buf, mut consumed) = (Vec::new(), 0);
        let warm_up = if waits.is_some() { WARM_UP_CALLS } else { 0 };
        let mut before = Switches::default();
        for i in 0..warm_up + count {
            if i == warm_up
                && let Some(pid) = waits
            {
                before = Switches::of(pid);
            }
            let (status, _, body) = exchange(&mut stream, &mut buf, &mut consumed, &request)
                .await
                .unwrap();
            assert!(status == 200 && body.contains("hello"), "{status}: {body}");
        }
        waits.map_or_else(Switches::default, |pid| Switches::of(pid).since(before))
    })
}

/// Waits per call of the HTTP server `exe args...` (pinned as in the load runs).
fn http_waits(env: &Env, exe: &Path, args: &[&str], count: u64) -> (f64, f64) {
    let mut cmd = server_command(exe, args, env.place, true);
    cmd.env("RUST_LOG", "info");
    let server = Server::spawn("HTTP server (waits)", cmd);
    let addr = server.wait_listening();
    per_call(http_serial(env, addr, count, Some(server.pid())), count)
}

/// One transport's counts, host and bare echo.
struct Transport {
    syscalls: (PerCall, PerCall),
    waits: ((f64, f64), (f64, f64)),
}

/// Counts over stdio: strace's runs of `counted()` and five times as many calls, and the waits
/// over `5 × counted()` calls.
fn stdio_counts(env: &Env, dir: &Path) -> Transport {
    let me = std::env::current_exe().unwrap();
    let host = [
        "--config",
        env.echo_config.as_str(),
        "serve",
        "--stdio",
        "--no-watch",
    ];
    let n = counted();
    let syscalls = |exe: &Path, args: &[&str], name: &str| {
        // A first traced start does more (the plugin's copy and probe looked at afresh): thrown
        // away, so that the two runs compared start alike.
        stdio_syscalls(exe, args, n, &dir.join(format!("{name}-first")));
        let few = stdio_syscalls(exe, args, n, &dir.join(format!("{name}-few")));
        let more = stdio_syscalls(exe, args, 5 * n, &dir.join(format!("{name}-more")));
        more.per_call(&few, 4 * n)
    };
    // Untraced first: the host's first start with this configuration probes the fixture in a
    // child process, which strace would count.
    let waits = (
        stdio_waits(env, &env.exe, &host, 5 * n),
        stdio_waits(env, &me, &["--baseline-stdio"], 5 * n),
    );
    Transport {
        syscalls: (
            syscalls(&env.exe, &host, "host-stdio"),
            syscalls(&me, &["--baseline-stdio"], "bare-stdio"),
        ),
        waits,
    }
}

/// Counts over HTTP, as [`stdio_counts`].
fn http_counts(env: &Env, dir: &Path) -> Transport {
    let me = std::env::current_exe().unwrap();
    let host = [
        "--config",
        env.echo_config.as_str(),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--no-watch",
    ];
    let bare = ["--baseline-server", "0"];
    let n = counted();
    let syscalls = |exe: &Path, args: &[&str], name: &str| {
        // As over stdio: a first traced start thrown away.
        http_syscalls(env, exe, args, n, &dir.join(format!("{name}-first")));
        let few = http_syscalls(env, exe, args, n, &dir.join(format!("{name}-few")));
        let more = http_syscalls(env, exe, args, 5 * n, &dir.join(format!("{name}-more")));
        more.per_call(&few, 4 * n)
    };
    let waits = (
        http_waits(env, &env.exe, &host, 5 * n),
        http_waits(env, &me, &bare, 5 * n),
    );
    Transport {
        syscalls: (
            syscalls(&env.exe, &host, "host-http"),
            syscalls(&me, &bare, "bare-http"),
        ),
        waits,
    }
}

/// The rows of one transport's counts, and their guards.
fn transport_rows(what: &str, key: &str, t: &Transport, rows: &mut Vec<String>) -> Vec<String> {
    let ((host_sys, bare_sys), ((host_v, host_i), (bare_v, bare_i))) = (&t.syscalls, t.waits);
    rows.push(format!(
        "| system calls per {what} `tools/call` echo, one at a time (strace, all threads) | {:.1} ({}) (bare echo: {:.1}; {}; {:.2}×) | | |",
        host_sys.total,
        host_sys.top(6),
        bare_sys.total,
        bare_sys.top(4),
        host_sys.total / bare_sys.total
    ));
    rows.push(format!(
        "| waits (voluntary context switches, all threads) per {what} `tools/call` echo, one at a time | {host_v:.2} (bare echo: {bare_v:.2}; {:.2}×); preempted: {host_i:.2} (bare {bare_i:.2}) | | |",
        host_v / bare_v
    ));
    let mut failed = Vec::new();
    failed.extend(guard(
        &format!("MCP_BENCH_MAX_{key}_SYSCALL_RATIO"),
        &format!("{what} system calls per call"),
        host_sys.total,
        bare_sys.total,
    ));
    failed.extend(guard(
        &format!("MCP_BENCH_MAX_{key}_WAIT_RATIO"),
        &format!("{what} waits per call"),
        host_v,
        bare_v,
    ));
    failed
}

/// A start's counts: memory, page faults and threads once `tools/list` is answered (the process
/// left running), and the system calls and instructions of a whole run (to its exit).
struct Start {
    memory: Memory,
    faults: u64,
    threads: usize,
    syscalls: u64,
    instructions: u64,
}

/// The three messages of a start, each answered message waited for: `initialize`,
/// `notifications/initialized`, `tools/list`; the `tools/list` answer.
fn start_exchange(client: &mut Client) -> String {
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{LEGACY}","capabilities":{{}},"clientInfo":{{"name":"bench","version":"0"}}}}}}"#
    );
    let answer = client.message(&init, true);
    assert!(answer.contains(r#""result""#), "initialize: {answer}");
    client.message(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        false,
    );
    let list = client.message(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        true,
    );
    assert!(list.contains(r#""tools":[{"#), "tools/list: {list}");
    list
}

/// Run `cmd` (a stdio server) through a start; `live` reads the process after the answer.
fn through_start(cmd: std::process::Command, live: impl FnOnce(u32)) {
    let mut server = Server::spawn("stdio server (start)", cmd);
    let mut client = Client::of(&mut server);
    start_exchange(&mut client);
    live(server.pid());
    drop(client);
    assert!(
        server.exited_within(10 * STEP_TIMEOUT),
        "{} did not exit",
        server.name
    );
}

/// [`Start`] of `exe args...`: one plain run (also warming the probe cache and the page cache),
/// a measured one, then a run under strace and one under callgrind.
fn start_counts(env: &Env, exe: &Path, args: &[&str], dir: &Path, name: &str) -> Start {
    let plain = || {
        let mut cmd = server_command(exe, args, env.place, false);
        cmd.env("RUST_LOG", "info");
        cmd
    };
    through_start(plain(), |_| {});
    let mut live = None;
    through_start(plain(), |pid| {
        std::thread::sleep(std::time::Duration::from_millis(200));
        live = Some((Memory::of(pid), kernel::faults(pid).0, kernel::threads(pid)));
    });
    let (memory, faults, threads) = live.unwrap();
    let strace_out = dir.join(format!("{name}-start-strace"));
    through_start(kernel::under_strace(exe, args, &strace_out), |_| {});
    let callgrind_out = dir.join(format!("{name}-start-callgrind"));
    through_start(under_callgrind(exe, args, &callgrind_out), |_| {});
    Start {
        memory,
        faults,
        threads,
        syscalls: Syscalls::read(&strace_out).total,
        instructions: counted_instructions(&callgrind_out),
    }
}

/// The start rows (host against rmcp's server, or against the stated bound alone) and the memory
/// guards: `MCP_BENCH_MAX_RSS_RATIO` (against rmcp's server) and `MCP_BENCH_MAX_START_RSS_MB` (a
/// bound of its own: what CI sets, sparing it a release build of rmcp's server).
fn start_rows(env: &Env, rmcp: Option<&Path>, dir: &Path, rows: &mut Vec<String>) -> Vec<String> {
    let host_args = [
        "--config",
        env.packaged_config.as_str(),
        "serve",
        "--stdio",
        "--no-watch",
    ];
    let host = start_counts(env, &env.exe, &host_args, dir, "host");
    let anchor = rmcp.map(|rmcp| start_counts(env, rmcp, &[], dir, "rmcp"));
    let mb = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let mut failed = Vec::new();
    if let Some(max) = std::env::var("MCP_BENCH_MAX_START_RSS_MB")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        let rss = mb(host.memory.rss);
        if rss > max {
            failed.push(format!(
                "speed guard: resident memory after start: {rss:.1} MB, over the allowed {max} MB \
                 (MCP_BENCH_MAX_START_RSS_MB)"
            ));
        } else {
            eprintln!(
                "speed guard: resident memory after start {rss:.1} MB (allowed {max} MB, \
                 MCP_BENCH_MAX_START_RSS_MB)"
            );
        }
    }
    let Some(anchor) = anchor else {
        rows.push(format!(
            "| start over stdio: resident memory once `tools/list` is answered (packaged plugins) | {} | | |",
            host.memory.show()
        ));
        rows.push(format!(
            "| start over stdio: page faults / threads at the answer; system calls / instructions of the whole run (start, `initialize`, `tools/list`, exit) | {} / {} ; {} / {:.2}M | | |",
            host.faults,
            host.threads,
            host.syscalls,
            host.instructions as f64 / 1e6
        ));
        return failed;
    };
    let ratio = |a: f64, b: f64| format!("{:.2}×", a / b);
    rows.push(format!(
        "| start over stdio: resident memory once `tools/list` is answered (packaged plugins) | {} (rmcp's server: {}; {}) | ≤ 1.3× | {} |",
        host.memory.show(),
        anchor.memory.show(),
        ratio(host.memory.rss as f64, anchor.memory.rss as f64),
        super::verdict(host.memory.rss as f64 <= 1.3 * anchor.memory.rss as f64)
    ));
    rows.push(format!(
        "| start over stdio: page faults / threads at the answer; system calls / instructions of the whole run (start, `initialize`, `tools/list`, exit) | {} / {} ; {} / {:.2}M (rmcp's server: {} / {} ; {} / {:.2}M) | | |",
        host.faults,
        host.threads,
        host.syscalls,
        host.instructions as f64 / 1e6,
        anchor.faults,
        anchor.threads,
        anchor.syscalls,
        anchor.instructions as f64 / 1e6
    ));
    failed.extend(guard(
        "MCP_BENCH_MAX_RSS_RATIO",
        "resident memory after start (against rmcp's server)",
        host.memory.rss as f64,
        anchor.memory.rss as f64,
    ));
    failed
}

/// Section `counts`; exits with a failure when a guard set by the environment fails (after every
/// row is printed, so the table says what moved).
pub fn bench_counts(env: &Env, rows: &mut Vec<String>) -> Vec<String> {
    if !kernel::strace_installed() || !super::valgrind_installed() {
        eprintln!("counts: skipped (strace and valgrind are needed)");
        let guarded = std::env::vars().any(|(k, _)| {
            k.starts_with("MCP_BENCH_MAX_")
                && (k.contains("SYSCALL") || k.contains("WAIT") || k.contains("RSS"))
        });
        return if guarded {
            vec!["count guard: strace and valgrind are needed".into()]
        } else {
            Vec::new()
        };
    }
    // rmcp's server is built (a release build of its own) unless only the stated bound is asked for.
    let bound_only = std::env::var_os("MCP_BENCH_MAX_START_RSS_MB").is_some()
        && std::env::var_os("MCP_BENCH_MAX_RSS_RATIO").is_none();
    let rmcp = (!bound_only)
        .then(|| super::common::build_release(&["fixture-rmcp-upstream"]).join("rmcp-upstream"));
    let dir = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    let stdio = stdio_counts(env, dir.path());
    failed.extend(transport_rows("stdio", "STDIO", &stdio, rows));
    let http = http_counts(env, dir.path());
    failed.extend(transport_rows("HTTP", "HTTP", &http, rows));
    failed.extend(start_rows(env, rmcp.as_deref(), dir.path(), rows));
    failed
}
