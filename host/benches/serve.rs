//! Benchmark: serving throughput and latency of `mcp-host` over Streamable HTTP and stdio against a
//! bare hyper + serde_json JSON-RPC echo server, plus cold start and idle memory.
//!
//! Run: `cargo bench -p mcp-host --bench serve` (builds the release host and plugins into
//! `target/bench` first). Prints a Markdown table; every figure comes from this one run, so the ratios
//! compare like with like.
//!
//! Placement: every server process runs pinned to the first allowed CPU (`taskset -c`, or
//! `sched_setaffinity` in a `pre_exec` hook when `taskset` is missing) and the load generator runs in
//! this process pinned to the second, so the server never competes with its own client for a core.
//! Cold-start runs always pin in `pre_exec`, so the measured time is `mcp-host`'s and not `taskset`'s
//! own exec.
//!
//! - HTTP: 16 keep-alive connections in a closed loop from a hand-written HTTP/1.1 client over tokio
//!   (pre-built request bytes, `Content-Length` framing) on a current-thread runtime; a warm-up, then a
//!   fixed window; requests/s and per-request latency percentiles. The baseline is this same binary
//!   re-executed as `--baseline-server PORT`: hyper 1.x http1 + serde_json, the same multi-thread
//!   tokio runtime as `mcp-host`; it gets the same request headers (ignoring the MCP ones) and a plain
//!   JSON-RPC body without `_meta`. Rounds alternate baseline and host; the best round of each counts
//!   (interference from other processes only ever slows a round down).
//! - stdio: newline-delimited 2026 `tools/call` of `echo`; 32 requests kept in flight (matched by id),
//!   then one at a time.
//! - Cold start: spawn `serve --stdio` over the packaged plugins, send `tools/list` at once, time the
//!   answer; then the idle resident set size of that process, and of an HTTP server after one request.
//! - Isolated: the echo fixture in a worker process (`isolation: process`, then `sandbox`) beside the
//!   same fixture in-process, HTTP rounds alternating the three servers, then stdio one at a time;
//!   server CPU counts the host and its workers, and the worker's RSS is reported.
//!
//! Environment: `MCP_BENCH_ROUNDS` (HTTP rounds per server, default 2), `MCP_BENCH_SECS` (measuring
//! window per HTTP round / stdio phase, default 5 / 3), `MCP_BENCH_ONLY` (comma-separated sections:
//! `http`, `stdio`, `cold`, `isolated`; default all), `MCP_BENCH_HOST_EXE` (benchmark this
//! `mcp-host` binary instead of the one built into `target/bench`).
//!
//! Besides wall-clock figures, each load phase reports the server's CPU time (user + system, all its
//! threads) per request. It moves much less than throughput when other processes compete for the
//! machine (±10-20 % rather than 2-3×), so it is the one to compare between builds on a busy host;
//! alternate the builds (`MCP_BENCH_HOST_EXE`) and compare each with the baseline of its own run.

#![allow(clippy::unwrap_used)]
// CPU affinity, poll(2) and PR_SET_PDEATHSIG go through libc.
#![allow(unsafe_code)]

mod common;

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const CONNECTIONS: usize = 16;
const IN_FLIGHT: usize = 32;
const WARM_UP: Duration = Duration::from_secs(1);
const COLD_RUNS: usize = 10;
/// Longest wait for any single step outside a measuring loop (start-up, one response, exit).
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

// ---------------------------------------------------------------------------------------------
// Build, placement, child processes
// ---------------------------------------------------------------------------------------------

fn build_release() -> PathBuf {
    common::build_release(&["mcp-host", "fixture-basic", "mcp-time", "mcp-text"])
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bitmask the kernel fills; its size is passed along.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pin the calling thread (and the threads and processes it starts afterwards) to `cpu`.
fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: as above; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Placement {
    /// Where servers run (`None`: unpinned, fewer than two CPUs allowed).
    server: Option<usize>,
    /// Where this process's load generator runs.
    client: Option<usize>,
    /// Pin servers with `taskset -c` (else `sched_setaffinity` in `pre_exec`).
    taskset: bool,
}

fn placement() -> Placement {
    let cpus = allowed_cpus();
    let taskset = Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if cpus.len() < 2 {
        eprintln!(
            "warning: fewer than two CPUs allowed ({cpus:?}); server and client are not pinned"
        );
        return Placement {
            server: None,
            client: None,
            taskset,
        };
    }
    Placement {
        server: Some(cpus[0]),
        client: Some(cpus[1]),
        taskset,
    }
}

/// A command for `exe args`, pinned to the server CPU. The child also gets SIGKILL if this process
/// dies, so an interrupted benchmark leaves no server behind.
fn server_command(exe: &Path, args: &[&str], place: Placement, use_taskset: bool) -> Command {
    let mut cmd = match place.server {
        Some(cpu) if use_taskset && place.taskset => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu.to_string()).arg(exe);
            c
        }
        _ => Command::new(exe),
    };
    cmd.args(args);
    let pin = if use_taskset && place.taskset {
        None
    } else {
        place.server
    };
    // SAFETY: only async-signal-safe calls (prctl, sched_setaffinity on a stack bitmask) between fork
    // and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(cpu) = pin {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd
}

/// A child process that is killed and reaped when dropped (also on panic).
struct Server {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    /// The last lines of its stderr (for error messages).
    log: Arc<Mutex<Vec<String>>>,
    /// Receives lines containing `listening on` (HTTP servers).
    listening: mpsc::Receiver<String>,
    /// A stdio server: the end of its stdin stops it.
    stdio: bool,
}

impl Server {
    fn spawn(name: &'static str, mut cmd: Command) -> Server {
        let stdio = cmd.get_args().any(|a| a == "--stdio");
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        eprintln!("started {name}: pid {}", child.id());
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, listening) = mpsc::channel();
        {
            // Drain stderr for the whole life of the child so its pipe never fills.
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if line.contains("listening on ") {
                        let _ = tx.send(line.clone());
                    }
                    let mut log = log.lock().unwrap();
                    if log.len() == 50 {
                        log.remove(0);
                    }
                    log.push(line);
                }
            });
        }
        Server {
            name,
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            log,
            listening,
            stdio,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The address from the `listening on http://ADDR/mcp` line.
    fn wait_listening(&self) -> SocketAddr {
        let line = self
            .listening
            .recv_timeout(STEP_TIMEOUT)
            .unwrap_or_else(|e| {
                panic!(
                    "{} did not report its address ({e}):\n{}",
                    self.name,
                    self.log()
                )
            });
        line.split("listening on http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("cannot parse the address in {line:?}"))
    }

    /// Resident set size in bytes (`VmRSS`).
    fn rss(&self) -> u64 {
        status_bytes(self.pid(), "VmRSS")
    }
}

impl Server {
    /// Wait up to `limit` for the child to exit; true when it has.
    fn exited_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return true,
                Ok(None) if Instant::now() >= deadline => return false,
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
}

impl Drop for Server {
    /// Stop the child gracefully, so `mcp-host` removes its runtime directory: the end of stdin for a
    /// stdio server, SIGTERM otherwise (or if that did not work); SIGKILL when it has still not
    /// exited after a few seconds.
    fn drop(&mut self) {
        drop(self.stdin.take());
        if self.stdio && self.exited_within(Duration::from_secs(3)) {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: signalling our own child, which has not been reaped yet (so the pid is its).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        if self.exited_within(Duration::from_secs(3)) {
            return;
        }
        let _ = self.child.kill();
        if !self.exited_within(Duration::from_secs(5)) {
            eprintln!("warning: {} (pid {}) did not exit", self.name, self.pid());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The baseline server: bare hyper 1.x + serde_json
// ---------------------------------------------------------------------------------------------

async fn baseline_handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let (status, answer) = match serde_json::from_slice::<Value>(&body) {
        Ok(v) => {
            let id = v.get("id").cloned().unwrap_or(Value::Null);
            let params = v.get("params");
            let is_echo = v.get("method").and_then(Value::as_str) == Some("tools/call")
                && params.and_then(|p| p.get("name")).and_then(Value::as_str) == Some("echo");
            match params
                .and_then(|p| p.get("arguments"))
                .and_then(|a| a.get("text"))
                .and_then(Value::as_str)
            {
                Some(text) if is_echo => (
                    200,
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}}),
                ),
                _ => (
                    400,
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "not an echo call"}}),
                ),
            }
        }
        Err(e) => (
            400,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": e.to_string()}}),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(serde_json::to_vec(&answer).unwrap())));
    *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// `--baseline-server PORT`: serve until killed. Same runtime flavour as `mcp-host serve` (multi-thread;
/// pinned to one CPU it runs one worker, like the host).
fn baseline_server(port: u16) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        eprintln!("listening on http://{}/mcp", listener.local_addr().unwrap());
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(
                        TokioIo::new(stream),
                        hyper::service::service_fn(baseline_handle),
                    )
                    .await;
            });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// HTTP load generator
// ---------------------------------------------------------------------------------------------

fn http_request(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut req = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    req.into_bytes()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Read one `Content-Length`-framed response from `stream` into `buf` (which keeps any bytes past
/// it); returns the status and the body's range in `buf` before those bytes are dropped by the next
/// call.
async fn read_response(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    consumed: &mut usize,
) -> std::io::Result<(u16, std::ops::Range<usize>)> {
    buf.drain(..*consumed);
    *consumed = 0;
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    loop {
        if let Some(head_end) = find(buf, b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..head_end]).map_err(|e| bad(e.to_string()))?;
            let status = head
                .get(9..12)
                .and_then(|s| s.parse::<u16>().ok())
                .ok_or_else(|| bad(format!("bad status line in {head:?}")))?;
            let length = head
                .split("\r\n")
                .skip(1)
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .ok_or_else(|| bad(format!("response without Content-Length: {head:?}")))?;
            let body = head_end + 4..head_end + 4 + length;
            if buf.len() >= body.end {
                *consumed = body.end;
                return Ok((status, body));
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
    }
}

/// One request on a fresh connection: status and body.
async fn http_once(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let work = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        stream.write_all(request).await?;
        let (mut buf, mut consumed) = (Vec::new(), 0);
        let (status, body) = read_response(&mut stream, &mut buf, &mut consumed).await?;
        Ok::<_, std::io::Error>((status, String::from_utf8_lossy(&buf[body]).into_owned()))
    };
    tokio::time::timeout(STEP_TIMEOUT, work)
        .await
        .expect("HTTP request timed out")
        .expect("HTTP request failed")
}

/// CPU time (user + system) process `pid` has used so far, all threads included.
fn own_cpu_time(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may contain spaces): state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// The live children of process `pid` (an `mcp-host`'s plugin workers).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
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

/// CPU time of process `pid` and its live children (plugin workers), all threads included.
fn cpu_time(pid: u32) -> Duration {
    std::iter::once(pid)
        .chain(children(pid))
        .map(own_cpu_time)
        .sum()
}

/// A `/proc/<pid>/status` field in bytes (`VmRSS`, `RssAnon`, ...).
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

struct LoadResult {
    /// Completed requests per second in the measuring window.
    rate: f64,
    /// Latencies (ns) of the requests completed in the window, sorted.
    latencies: Vec<u64>,
    /// Server CPU time (user + system, all threads) per request in the window.
    cpu: Duration,
}

impl LoadResult {
    fn from(mut latencies: Vec<u64>, window: Duration, cpu: Duration) -> LoadResult {
        latencies.sort_unstable();
        assert!(!latencies.is_empty(), "no request completed in the window");
        LoadResult {
            rate: latencies.len() as f64 / window.as_secs_f64(),
            cpu: cpu / latencies.len() as u32,
            latencies,
        }
    }

    fn pct(&self, p: f64) -> Duration {
        let i = ((self.latencies.len() as f64 * p / 100.0) as usize).min(self.latencies.len() - 1);
        Duration::from_nanos(self.latencies[i])
    }
}

/// `connections` closed-loop keep-alive connections sending `request`; a warm-up, then `window`.
fn http_load(
    rt: &tokio::runtime::Runtime,
    server: u32,
    addr: SocketAddr,
    request: &[u8],
    connections: usize,
    window: Duration,
) -> LoadResult {
    let request: Arc<[u8]> = Arc::from(request);
    let start = Instant::now();
    let warm_end = start + WARM_UP;
    let end = warm_end + window;
    let (results, cpu) = rt.block_on(async {
        let cpu = tokio::spawn(async move {
            tokio::time::sleep_until(warm_end.into()).await;
            let before = cpu_time(server);
            tokio::time::sleep_until(end.into()).await;
            cpu_time(server) - before
        });
        let tasks: Vec<_> = (0..connections)
            .map(|_| {
                let request = Arc::clone(&request);
                tokio::spawn(async move {
                    let mut stream = TcpStream::connect(addr).await?;
                    stream.set_nodelay(true)?;
                    let mut buf = Vec::with_capacity(16 * 1024);
                    let mut consumed = 0;
                    let mut latencies = Vec::with_capacity(1 << 16);
                    loop {
                        let t0 = Instant::now();
                        stream.write_all(&request).await?;
                        let (status, _) =
                            read_response(&mut stream, &mut buf, &mut consumed).await?;
                        let t1 = Instant::now();
                        if status != 200 {
                            return Err(std::io::Error::other(format!("HTTP status {status}")));
                        }
                        if t1 >= end {
                            return Ok::<_, std::io::Error>(latencies);
                        }
                        if t1 >= warm_end {
                            latencies.push((t1 - t0).as_nanos() as u64);
                        }
                    }
                })
            })
            .collect();
        // One timeout for the whole run: a stuck server fails the benchmark instead of hanging it.
        tokio::time::timeout(end - Instant::now() + STEP_TIMEOUT, async {
            let mut all = Vec::new();
            for task in tasks {
                all.push(task.await.expect("connection task panicked"));
            }
            (all, cpu.await.unwrap())
        })
        .await
        .expect("HTTP load run timed out")
    });
    let mut latencies = Vec::new();
    for r in results {
        latencies.extend(r.expect("connection failed"));
    }
    LoadResult::from(latencies, window, cpu)
}

// ---------------------------------------------------------------------------------------------
// stdio client
// ---------------------------------------------------------------------------------------------

/// Newline-delimited reading from a child's stdout with a deadline on every wait (poll(2)).
struct Lines {
    out: ChildStdout,
    buf: Vec<u8>,
    start: usize,
}

impl Lines {
    fn new(out: ChildStdout) -> Lines {
        Lines {
            out,
            buf: Vec::with_capacity(64 * 1024),
            start: 0,
        }
    }

    fn next_line(&mut self, deadline: Instant) -> std::io::Result<&[u8]> {
        loop {
            if let Some(pos) = self.buf[self.start..].iter().position(|&b| b == b'\n') {
                let line = self.start..self.start + pos;
                self.start += pos + 1;
                return Ok(&self.buf[line]);
            }
            self.buf.drain(..self.start);
            self.start = 0;
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fd = libc::pollfd {
                fd: self.out.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready =
                unsafe { libc::poll(&mut fd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if ready < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if ready == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no response from the server",
                ));
            }
            let len = self.buf.len();
            self.buf.resize(len + 64 * 1024, 0);
            let n = self.out.read(&mut self.buf[len..])?;
            self.buf.truncate(len + n);
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed stdout",
                ));
            }
        }
    }
}

fn stdio_call(id: u64) -> Vec<u8> {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"text\":\"hello\"}},{META}}}}}\n"
    )
    .into_bytes()
}

fn stdio_list(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{{META}}}}}"#) + "\n"
}

#[derive(serde::Deserialize)]
struct RespHead {
    id: u64,
    result: Option<serde::de::IgnoredAny>,
}

/// The id of a successful response line.
fn response_id(line: &[u8]) -> u64 {
    match serde_json::from_slice::<RespHead>(line) {
        Ok(RespHead {
            id,
            result: Some(_),
        }) => id,
        _ => panic!(
            "unexpected stdio message: {}",
            String::from_utf8_lossy(line)
        ),
    }
}

struct StdioResult {
    in_flight_rate: f64,
    /// Server CPU time per call with IN_FLIGHT outstanding.
    in_flight_cpu: Duration,
    serial: LoadResult,
}

fn stdio_bench(server: &mut Server, window: Duration) -> StdioResult {
    let pid = server.pid();
    let mut stdin = server.stdin.take().unwrap();
    let mut lines = Lines::new(server.stdout.take().unwrap());

    // Check the answer first.
    stdin.write_all(&stdio_call(0)).unwrap();
    let first = lines.next_line(Instant::now() + STEP_TIMEOUT).unwrap();
    let first = String::from_utf8_lossy(first).into_owned();
    assert!(
        first.contains(r#""text":"hello""#) && first.contains(r#""resultType":"complete""#),
        "unexpected stdio answer: {first}"
    );

    // (a) IN_FLIGHT requests outstanding, matched by id.
    let mut next_id = 1u64;
    let mut outstanding = std::collections::HashSet::with_capacity(IN_FLIGHT * 2);
    let mut batch = Vec::new();
    for _ in 0..IN_FLIGHT {
        outstanding.insert(next_id);
        batch.extend(stdio_call(next_id));
        next_id += 1;
    }
    stdin.write_all(&batch).unwrap();
    let start = Instant::now();
    let (warm_end, end) = (start + WARM_UP, start + WARM_UP + window);
    let mut done = 0u64;
    let mut measuring: Option<(Instant, Duration)> = None;
    let (elapsed, cpu) = loop {
        let line = lines.next_line(Instant::now() + STEP_TIMEOUT).unwrap();
        let id = response_id(line);
        assert!(outstanding.remove(&id), "answer to unknown id {id}");
        let now = Instant::now();
        if now >= warm_end {
            match measuring {
                None => measuring = Some((now, cpu_time(pid))),
                Some((t, cpu)) if now >= end => break (now - t, cpu_time(pid) - cpu),
                Some(_) => done += 1,
            }
        }
        outstanding.insert(next_id);
        stdin.write_all(&stdio_call(next_id)).unwrap();
        next_id += 1;
    };
    // `done` counts the answers after the first one in the window, up to the last one before `end`.
    done += 1;
    while !outstanding.is_empty() {
        let line = lines.next_line(Instant::now() + STEP_TIMEOUT).unwrap();
        outstanding.remove(&response_id(line));
    }
    let in_flight_rate = done as f64 / elapsed.as_secs_f64();
    let in_flight_cpu = cpu / done as u32;

    // (b) One at a time.
    let start = Instant::now();
    let (warm_end, end) = (start + WARM_UP, start + WARM_UP + window);
    let mut latencies = Vec::with_capacity(1 << 18);
    let mut measuring: Option<(Instant, Duration)> = None;
    let (elapsed, cpu) = loop {
        let request = stdio_call(next_id);
        let t0 = Instant::now();
        stdin.write_all(&request).unwrap();
        let line = lines.next_line(t0 + STEP_TIMEOUT).unwrap();
        let t1 = Instant::now();
        assert_eq!(response_id(line), next_id);
        next_id += 1;
        if t1 >= warm_end {
            match measuring {
                None => measuring = Some((t1, cpu_time(pid))),
                Some((t, cpu)) if t1 >= end => break (t1 - t, cpu_time(pid) - cpu),
                Some(_) => latencies.push((t1 - t0).as_nanos() as u64),
            }
        }
    };
    server.stdin = Some(stdin);
    StdioResult {
        in_flight_rate,
        in_flight_cpu,
        serial: LoadResult::from(latencies, elapsed, cpu),
    }
}

// ---------------------------------------------------------------------------------------------
// Cold start and idle memory
// ---------------------------------------------------------------------------------------------

/// Spawn `serve --stdio`, send `tools/list` at once; time to the answer, and idle RSS after ~200 ms.
fn cold_start(exe: &Path, config: &Path, place: Placement) -> (Duration, u64) {
    let cmd = server_command(
        exe,
        &["--config", config.to_str().unwrap(), "serve", "--stdio"],
        place,
        false,
    );
    let mut cmd = cmd;
    cmd.env("RUST_LOG", "info");
    let t0 = Instant::now();
    let mut server = Server::spawn("mcp-host serve --stdio (cold start)", cmd);
    let mut stdin = server.stdin.take().unwrap();
    stdin.write_all(stdio_list(1).as_bytes()).unwrap();
    let mut lines = Lines::new(server.stdout.take().unwrap());
    let answer = match lines.next_line(t0 + STEP_TIMEOUT) {
        Ok(line) => String::from_utf8_lossy(line).into_owned(),
        Err(e) => panic!("no tools/list answer ({e}):\n{}", server.log()),
    };
    let elapsed = t0.elapsed();
    assert!(
        answer.contains(r#""tools":[{"#) && answer.contains(r#""resultType":"complete""#),
        "unexpected tools/list answer: {answer}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let rss = server.rss();
    server.stdin = Some(stdin);
    (elapsed, rss)
}

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------------------------

fn host_http_request(addr: SocketAddr, method: &str, name: Option<&str>, body: &str) -> Vec<u8> {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(name) = name {
        headers.push(("Mcp-Name", name));
    }
    http_request(addr, &headers, body)
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// Start `mcp-host serve` over HTTP on CPU 0 with `config`; the server and its address.
fn spawn_http_host(env: &Env, config: &str, what: &'static str) -> (Server, SocketAddr) {
    let mut cmd = server_command(
        &env.exe,
        &["--config", config, "serve", "--listen", "127.0.0.1:0"],
        env.place,
        true,
    );
    cmd.env("RUST_LOG", "info");
    let server = Server::spawn(what, cmd);
    let addr = server.wait_listening();
    (server, addr)
}

/// What every section needs.
struct Env {
    exe: PathBuf,
    /// Serves the echo fixture.
    echo_config: String,
    /// Serves the packaged plugins.
    packaged_config: String,
    /// Serve the echo fixture in a worker: `isolation: process`, then `sandbox`.
    isolated_configs: [(&'static str, String); 2],
    place: Placement,
    rt: tokio::runtime::Runtime,
    rounds: usize,
    http_window: Duration,
    stdio_window: Duration,
}

fn echo_body() -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hello"}},{META}}}}}"#
    )
}

/// 1 + 2: the baseline and mcp-host over HTTP, alternating rounds against the same two servers.
fn bench_http(env: &Env, rows: &mut Vec<String>) {
    let me = std::env::current_exe().unwrap();
    let baseline = Server::spawn(
        "baseline server",
        server_command(&me, &["--baseline-server", "0"], env.place, true),
    );
    let baseline_addr = baseline.wait_listening();
    let (host, host_addr) = spawn_http_host(env, &env.echo_config, "mcp-host serve (HTTP)");

    // The baseline gets the same headers (it ignores the MCP ones), so both servers' HTTP parsing
    // does the same work; its body is plain JSON-RPC without the 2026 `_meta`.
    let baseline_req = host_http_request(
        baseline_addr,
        "tools/call",
        Some("echo"),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}"#,
    );
    let host_req = host_http_request(host_addr, "tools/call", Some("echo"), &echo_body());
    let (status, body) = env.rt.block_on(http_once(baseline_addr, &baseline_req));
    assert!(
        status == 200 && body.contains(r#""text":"hello""#),
        "baseline answered {status}: {body}"
    );
    let (status, body) = env.rt.block_on(http_once(host_addr, &host_req));
    assert!(
        status == 200
            && body.contains(r#""text":"hello""#)
            && body.contains(r#""resultType":"complete""#),
        "mcp-host answered {status}: {body}\n{}",
        host.log()
    );

    let (mut base_runs, mut host_runs) = (Vec::new(), Vec::new());
    for round in 0..env.rounds {
        let b = http_load(
            &env.rt,
            baseline.pid(),
            baseline_addr,
            &baseline_req,
            CONNECTIONS,
            env.http_window,
        );
        let h = http_load(
            &env.rt,
            host.pid(),
            host_addr,
            &host_req,
            CONNECTIONS,
            env.http_window,
        );
        eprintln!(
            "round {}: baseline {:.0} req/s (p99 {}, CPU {}/req), mcp-host {:.0} req/s (p99 {}, CPU {}/req)",
            round + 1,
            b.rate,
            us(b.pct(99.0)),
            us(b.cpu),
            h.rate,
            us(h.pct(99.0)),
            us(h.cpu)
        );
        base_runs.push(b);
        host_runs.push(h);
    }
    let best = |runs: Vec<LoadResult>| {
        runs.into_iter()
            .max_by(|a, b| a.rate.total_cmp(&b.rate))
            .unwrap()
    };
    let (base, http) = (best(base_runs), best(host_runs));
    let loaded_rss = host.rss();
    let ratio = http.rate / base.rate;
    rows.push(format!(
        "| baseline: bare hyper + serde_json echo, HTTP, {CONNECTIONS} connections | {:.0} req/s, p50 {}, p99 {}; server CPU {}/req | | |",
        base.rate,
        us(base.pct(50.0)),
        us(base.pct(99.0)),
        us(base.cpu)
    ));
    rows.push(format!(
        "| mcp-host HTTP, 2026 `tools/call` echo, {CONNECTIONS} connections | {:.0} req/s, p50 {}, p99 {}; server CPU {}/req | p99 < 1 ms | {} |",
        http.rate,
        us(http.pct(50.0)),
        us(http.pct(99.0)),
        us(http.cpu),
        verdict(http.pct(99.0) < Duration::from_millis(1))
    ));
    rows.push(format!(
        "| mcp-host HTTP throughput / baseline | {ratio:.2}× (server CPU per request: {:.2}× the baseline's) | ≥ 0.6× | {} |",
        http.cpu.as_secs_f64() / base.cpu.as_secs_f64(),
        verdict(ratio >= 0.6)
    ));
    rows.push(format!(
        "| RSS, HTTP after the load runs (echo fixture) | {} | | |",
        mb(loaded_rss)
    ));
}

/// 3: stdio, many in flight then one at a time.
fn bench_stdio(env: &Env, rows: &mut Vec<String>) {
    let mut cmd = server_command(
        &env.exe,
        &["--config", &env.echo_config, "serve", "--stdio"],
        env.place,
        true,
    );
    cmd.env("RUST_LOG", "info");
    let mut server = Server::spawn("mcp-host serve --stdio", cmd);
    let stdio = stdio_bench(&mut server, env.stdio_window);
    rows.push(format!(
        "| mcp-host stdio, {IN_FLIGHT} requests in flight | {:.0} calls/s; server CPU {}/call | ≥ 100k calls/s | {} |",
        stdio.in_flight_rate,
        us(stdio.in_flight_cpu),
        verdict(stdio.in_flight_rate >= 100_000.0)
    ));
    rows.push(format!(
        "| mcp-host stdio, one at a time | p50 {}, p99 {} ({:.0} calls/s); server CPU {}/call | p50 < 60 µs | {} |",
        us(stdio.serial.pct(50.0)),
        us(stdio.serial.pct(99.0)),
        stdio.serial.rate,
        us(stdio.serial.cpu),
        verdict(stdio.serial.pct(50.0) < Duration::from_micros(60))
    ));
}

/// 5: the echo fixture in a worker (`process`, `sandbox`) beside the same fixture in-process:
/// HTTP rounds alternating the three servers, then stdio one at a time; the server CPU includes
/// the worker's.
fn bench_isolated(env: &Env, rows: &mut Vec<String>) {
    let mut servers = vec![(
        "in-process",
        spawn_http_host(
            env,
            &env.echo_config,
            "mcp-host serve (HTTP, in-process echo)",
        ),
    )];
    for (what, config) in &env.isolated_configs {
        servers.push((*what, spawn_http_host(env, config, what)));
    }
    let requests: Vec<Vec<u8>> = servers
        .iter()
        .map(|(_, (_, addr))| host_http_request(*addr, "tools/call", Some("echo"), &echo_body()))
        .collect();
    for ((what, (server, addr)), request) in servers.iter().zip(&requests) {
        let (status, body) = env.rt.block_on(http_once(*addr, request));
        assert!(
            status == 200 && body.contains(r#""text":"hello""#),
            "{what} answered {status}: {body}\n{}",
            server.log()
        );
    }
    let mut runs: Vec<Vec<LoadResult>> = servers.iter().map(|_| Vec::new()).collect();
    for round in 0..env.rounds {
        for (i, ((what, (server, addr)), request)) in servers.iter().zip(&requests).enumerate() {
            let r = http_load(
                &env.rt,
                server.pid(),
                *addr,
                request,
                CONNECTIONS,
                env.http_window,
            );
            eprintln!(
                "round {}: {what}: {:.0} req/s (p99 {}, CPU {}/req)",
                round + 1,
                r.rate,
                us(r.pct(99.0)),
                us(r.cpu)
            );
            runs[i].push(r);
        }
    }
    let best: Vec<LoadResult> = runs
        .into_iter()
        .map(|r| {
            r.into_iter()
                .max_by(|a, b| a.rate.total_cmp(&b.rate))
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for (i, (what, (server, _))) in servers.iter().enumerate() {
        let r = &best[i];
        rows.push(format!(
            "| HTTP, 2026 `tools/call` echo, {CONNECTIONS} connections, {what} | {:.0} req/s, p50 {}, p99 {}; server CPU {}/req (host + worker) | | |",
            r.rate,
            us(r.pct(50.0)),
            us(r.pct(99.0)),
            us(r.cpu)
        ));
        if i > 0 {
            let ratio = r.rate / best[0].rate;
            rows.push(format!(
                "| {what} HTTP throughput / in-process | {ratio:.2}× | ≥ 0.6× | {} |",
                verdict(ratio >= 0.6)
            ));
            let worker = children(server.pid());
            let worker = *worker.first().expect("no worker process");
            rows.push(format!(
                "| RSS of the {what} worker after the runs (anonymous part) | {} ({}) | | |",
                mb(status_bytes(worker, "VmRSS")),
                mb(status_bytes(worker, "RssAnon"))
            ));
        }
    }
    drop(servers);

    // stdio, one call at a time: what a client waits for, in-process vs in a worker.
    let configs = [
        ("in-process", &env.echo_config),
        ("process", &env.isolated_configs[0].1),
    ];
    let serial: Vec<LoadResult> = configs
        .iter()
        .map(|(what, config)| {
            let mut cmd = server_command(
                &env.exe,
                &["--config", config, "serve", "--stdio"],
                env.place,
                true,
            );
            cmd.env("RUST_LOG", "info");
            let mut server = Server::spawn(what, cmd);
            stdio_bench(&mut server, env.stdio_window).serial
        })
        .collect();
    let added = serial[1].pct(50.0).saturating_sub(serial[0].pct(50.0));
    rows.push(format!(
        "| stdio one at a time, p50 (p99): in-process {} ({}), process {} ({}) | added per call: {} | p50 < 25 µs | {} |",
        us(serial[0].pct(50.0)),
        us(serial[0].pct(99.0)),
        us(serial[1].pct(50.0)),
        us(serial[1].pct(99.0)),
        us(added),
        verdict(added < Duration::from_micros(25))
    ));
}

/// 4: cold start over the packaged plugins (one unmeasured run warms the page cache) and idle RSS.
fn bench_cold(env: &Env, rows: &mut Vec<String>) {
    let config = Path::new(&env.packaged_config);
    let _ = cold_start(&env.exe, config, env.place);
    let (mut starts, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..COLD_RUNS {
        let (t, r) = cold_start(&env.exe, config, env.place);
        starts.push(t);
        rss.push(r);
    }
    let (min, max) = (*starts.iter().min().unwrap(), *starts.iter().max().unwrap());
    let cold = median(starts);
    let stdio_rss = median(rss);

    let (server, addr) =
        spawn_http_host(env, &env.packaged_config, "mcp-host serve (HTTP, packaged)");
    let list = host_http_request(
        addr,
        "tools/list",
        None,
        &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{META}}}}}"#),
    );
    let (status, body) = env.rt.block_on(http_once(addr, &list));
    assert!(
        status == 200 && body.contains(r#""tools":[{"#),
        "tools/list over HTTP answered {status}: {body}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let http_rss = server.rss();

    let target = 12 * 1024 * 1024;
    rows.push(format!(
        "| cold start: spawn `serve --stdio` → `tools/list` answered (packaged plugins) | {:.1} ms (median of {COLD_RUNS}; {:.1}–{:.1}) | < 10 ms | {} |",
        cold.as_secs_f64() * 1e3,
        min.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        verdict(cold < Duration::from_millis(10))
    ));
    rows.push(format!(
        "| idle RSS, stdio (packaged plugins) | {} | < 12 MB | {} |",
        mb(stdio_rss),
        verdict(stdio_rss < target)
    ));
    rows.push(format!(
        "| idle RSS, HTTP after one request (packaged plugins) | {} | < 12 MB | {} |",
        mb(http_rss),
        verdict(http_rss < target)
    ));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--baseline-server") {
        let port = args.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
        baseline_server(port);
        return;
    }
    let only = std::env::var("MCP_BENCH_ONLY").unwrap_or_default();
    let wanted = |section: &str| only.is_empty() || only.split(',').any(|s| s.trim() == section);

    let release = build_release();

    // Configurations: the echo fixture, and the packaged plugins.
    let dir = tempfile::tempdir().unwrap();
    let echo_dir = dir.path().join("echo");
    let packaged_dir = dir.path().join("packaged");
    std::fs::create_dir_all(&echo_dir).unwrap();
    std::fs::create_dir_all(&packaged_dir).unwrap();
    std::fs::copy(
        release.join("libfixture_basic.so"),
        echo_dir.join("libfixture_basic.so"),
    )
    .unwrap();
    for lib in ["libmcp_time.so", "libmcp_text.so"] {
        std::fs::copy(release.join(lib), packaged_dir.join(lib)).unwrap();
    }
    let echo_config = dir.path().join("echo.yaml");
    std::fs::write(
        &echo_config,
        format!("tool_dirs: [{}]\n", echo_dir.display()),
    )
    .unwrap();
    let isolated_config = |isolation: &str| {
        let file = dir.path().join(format!("echo-{isolation}.yaml"));
        std::fs::write(
            &file,
            format!(
                "tool_dirs:\n  - {{path: {}, isolation: {isolation}}}\n",
                echo_dir.display()
            ),
        )
        .unwrap();
        file.to_str().unwrap().to_owned()
    };
    let isolated_configs = [
        ("process", isolated_config("process")),
        ("sandbox", isolated_config("sandbox")),
    ];
    let packaged_config = dir.path().join("packaged.yaml");
    std::fs::write(
        &packaged_config,
        format!("tool_dirs: [{}]\n", packaged_dir.display()),
    )
    .unwrap();

    // From here on this thread (and the threads it starts) is the load generator.
    let place = placement();
    if let Some(cpu) = place.client {
        pin_to(cpu).unwrap();
    }
    let env = Env {
        // Another build to compare (e.g. other profile settings); the table is for that binary.
        exe: std::env::var_os("MCP_BENCH_HOST_EXE")
            .map(PathBuf::from)
            .unwrap_or_else(|| release.join("mcp-host")),
        echo_config: echo_config.to_str().unwrap().to_owned(),
        packaged_config: packaged_config.to_str().unwrap().to_owned(),
        isolated_configs,
        place,
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        rounds: env_number("MCP_BENCH_ROUNDS", 2) as usize,
        http_window: Duration::from_secs(env_number("MCP_BENCH_SECS", 5)),
        stdio_window: Duration::from_secs(env_number("MCP_BENCH_SECS", 3)),
    };
    eprintln!(
        "server CPU {:?} ({}), load generator CPU {:?}; {} HTTP round(s) of {} s + {} s warm-up",
        place.server,
        if place.taskset {
            "taskset"
        } else {
            "sched_setaffinity"
        },
        place.client,
        env.rounds,
        env.http_window.as_secs(),
        WARM_UP.as_secs()
    );

    let mut rows = Vec::new();
    if wanted("http") {
        bench_http(&env, &mut rows);
    }
    if wanted("stdio") {
        bench_stdio(&env, &mut rows);
    }
    if wanted("cold") {
        bench_cold(&env, &mut rows);
    }
    if wanted("isolated") {
        bench_isolated(&env, &mut rows);
    }

    println!("| measurement | result | target | |");
    println!("|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    println!();
    println!(
        "Server pinned to CPU {}, load generator to CPU {}; HTTP: best of {} alternating rounds of {} s after {} s warm-up; stdio: {} s windows. Server CPU = user + system time of the server process (all threads) in the window, per request.",
        place.server.map_or("-".into(), |c| c.to_string()),
        place.client.map_or("-".into(), |c| c.to_string()),
        env.rounds,
        env.http_window.as_secs(),
        WARM_UP.as_secs(),
        env.stdio_window.as_secs()
    );
}
