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
//! own exec; the start with a warm probe cache is also measured unpinned, as a client spawns the
//! server.
//!
//! - HTTP: 16, then 64 keep-alive connections in a closed loop from a hand-written HTTP/1.1 client
//!   over tokio (pre-built request bytes, `Content-Length` framing) on a current-thread runtime; a
//!   warm-up, then a fixed window; requests/s and per-request latency percentiles. The baseline is
//!   this same binary re-executed as `--baseline-server PORT`: hyper 1.x http1 + serde_json, the same
//!   multi-thread tokio runtime as `mcp-host`; it gets the very request mcp-host gets, headers and
//!   body (ignoring the MCP headers and `_meta`). mcp-host is also loaded in 2025-06-18 mode at 16
//!   connections: each connection opens its own legacy session first (`initialize`,
//!   `notifications/initialized`) and sends `Mcp-Session-Id` with every call. Rounds alternate the
//!   cases; the best round of each counts (interference from other processes only ever slows a round
//!   down).
//! - stdio: newline-delimited 2026 `tools/call` of `echo`; 32 requests kept in flight (matched by id),
//!   then one at a time; the same against the bare stdio echo, this binary re-executed as
//!   `--baseline-stdio` (one thread reads a line, answers it with serde_json, flushes when no more
//!   input is buffered), for mcp-host stdio / bare stdio.
//! - Cold start: spawn `serve --stdio` over the packaged plugins, send `tools/list` at once, time the
//!   answer, with the probe cache warm and cold (a configuration naming a fresh `probe_cache` file
//!   each run, so every plugin is probed in a child process again, and every input schema checked
//!   against the meta-schema again); spawn `serve --listen` and time
//!   its first `tools/call` answered; then the idle resident memory (total, anonymous, file-backed) of
//!   the stdio process, and of an HTTP server after one request.
//! - Isolated: the echo fixture in a worker process (`isolation: process`, then `sandbox`) beside the
//!   same fixture in-process, HTTP rounds alternating the three servers, then stdio one at a time;
//!   server CPU counts the host and its workers, and the worker's RSS is reported.
//! - Instructions: per stdio and per HTTP `tools/call` (callgrind), host against the bare echoes.
//! - Counts (`serve/counts.rs`): per `tools/call` one at a time, over stdio and HTTP, against the
//!   bare echoes, the server's system calls (strace) and waits (voluntary context switches, every
//!   thread); and a start over stdio against rmcp's server: resident memory, page faults, system
//!   calls and instructions. What instructions miss, counted; the CI guard's second half.
//! - Policy: instructions per stdio `tools/call` (callgrind) with no policy, then 10 and 100 rules
//!   the call is tried against (none matching): what the call policy adds to a call, issue 39's
//!   target being under 2 µs for 10 rules (`MCP_BENCH_ONLY=policy`).
//!
//! Environment: `MCP_BENCH_ROUNDS` (HTTP rounds per server, default 2), `MCP_BENCH_SECS` (measuring
//! window per HTTP round / stdio phase, default 5 / 3), `MCP_BENCH_ONLY` (comma-separated sections:
//! `http`, `stdio`, `cold`, `isolated`, `instructions`, `counts`, `policy`; default all), `MCP_BENCH_PROFILE` (the cargo
//! profile to build: `release` by default, `dist` for the deployment build),
//! `MCP_BENCH_MAX_STDIO_RATIO` / `MCP_BENCH_MAX_HTTP_RATIO` (the instruction guard: fail when a
//! call's instructions exceed the bare echo's by more), `MCP_BENCH_MAX_{STDIO,HTTP}_{SYSCALL,WAIT}_RATIO`
//! and `MCP_BENCH_MAX_RSS_RATIO` (the count guard, section `counts`), `MCP_BENCH_HOST_EXE` (benchmark this
//! `mcp-host` binary instead of the one built into `target/bench`), `MCP_BENCH_TARGET_DIR` (build
//! into this directory instead of `target/bench`: `packaging/pgo-build`), `MCP_BENCH_RUNS` (repeat
//! the whole measurement this many times and print the median of each figure, e.g.
//! `MCP_BENCH_RUNS=3 cargo bench -p mcp-host --bench serve`: docs/performance.md's figures are medians of 3
//! runs, since one run on a busy 2-core machine can vary by ±20 %).
//!
//! Besides wall-clock figures, each load phase reports the server's CPU time (user + system, all its
//! threads) per request. It moves much less than throughput when other processes compete for the
//! machine (±10-20 % rather than 2-3×), so it is the one to compare between builds on a busy host;
//! alternate the builds (`MCP_BENCH_HOST_EXE`) and compare each with the baseline of its own run.

#![allow(clippy::unwrap_used)]
// CPU affinity and PR_SET_PDEATHSIG (in `common::process`) go through libc.
#![allow(unsafe_code)]

mod common;
#[path = "serve/counts.rs"]
mod counts;

use std::convert::Infallible;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::http::{
    LEGACY, LoadResult, Meter, WARM_UP, exchange, http_load, http_once, http_request,
    legacy_headers, legacy_session,
};
use common::process::{
    Executed, Footprint, Lines, Placement, STEP_TIMEOUT, Server, children, counted_instructions,
    pin_to, placement, server_command, status_bytes, under_callgrind,
};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

const CONNECTIONS: usize = 16;
/// The second HTTP concurrency level.
const MANY_CONNECTIONS: usize = 64;
const IN_FLIGHT: usize = 32;
const COLD_RUNS: usize = 10;
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

// ---------------------------------------------------------------------------------------------
// Build, placement, child processes
// ---------------------------------------------------------------------------------------------

fn build_release() -> PathBuf {
    common::build_release(&[
        "mcp-host",
        "fixture-basic",
        "mcp-time",
        "mcp-text",
        "mcp-series",
    ])
}

// ---------------------------------------------------------------------------------------------
// The baseline server: bare hyper 1.x + serde_json
// ---------------------------------------------------------------------------------------------

/// The bare echo: the answer to a JSON-RPC `tools/call` of `echo` (an HTTP status and the message).
fn baseline_answer(body: &[u8]) -> (u16, Value) {
    match serde_json::from_slice::<Value>(body) {
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
    }
}

async fn baseline_handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let (status, answer) = baseline_answer(&body);
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

/// `--baseline-stdio`: the bare stdio echo until stdin closes. Like `mcp-host`'s stdio transport, one
/// thread reads each line and answers it right there; answers are flushed when no more input is
/// buffered (so a burst of requests leaves in few writes).
fn baseline_stdio() {
    // The raw descriptors, buffered once here (`Stdout` would add its line buffering).
    let file =
        |fd: std::os::fd::BorrowedFd<'_>| std::fs::File::from(fd.try_clone_to_owned().unwrap());
    let mut input = std::io::BufReader::with_capacity(64 * 1024, file(std::io::stdin().as_fd()));
    let mut output = std::io::BufWriter::with_capacity(64 * 1024, file(std::io::stdout().as_fd()));
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let (_, answer) = baseline_answer(&line);
        serde_json::to_writer(&mut output, &answer).unwrap();
        output.write_all(b"\n").unwrap();
        if input.buffer().is_empty() {
            output.flush().unwrap();
        }
    }
    let _ = output.flush();
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
    /// What the kernel did for it (waits, system calls) per call with IN_FLIGHT outstanding.
    in_flight_kernel: String,
    serial: LoadResult,
}

/// Load `server` over stdio: [`IN_FLIGHT`] requests outstanding, then one at a time. `bare`: the
/// baseline, whose answers lack the 2026 `resultType`.
fn stdio_bench(server: &mut Server, window: Duration, bare: bool) -> StdioResult {
    let pid = server.pid();
    let mut stdin = server.stdin.take().unwrap();
    let mut lines = Lines::new(server.stdout.take().unwrap());

    // Check the answer first.
    stdin.write_all(&stdio_call(0)).unwrap();
    let first = lines.next_line(Instant::now() + STEP_TIMEOUT).unwrap();
    let first = String::from_utf8_lossy(first).into_owned();
    assert!(
        first.contains(r#""text":"hello""#)
            && (bare || first.contains(r#""resultType":"complete""#)),
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
    let mut measuring: Option<Instant> = None;
    let mut meter = Some(Meter::attach(pid));
    let (elapsed, spent) = loop {
        let line = lines.next_line(Instant::now() + STEP_TIMEOUT).unwrap();
        let id = response_id(line);
        assert!(outstanding.remove(&id), "answer to unknown id {id}");
        let now = Instant::now();
        if now >= warm_end {
            match measuring {
                None => {
                    meter.as_mut().unwrap().start();
                    measuring = Some(now);
                }
                Some(t) if now >= end => break (now - t, meter.take().unwrap().stop()),
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
    let in_flight_cpu = spent.cpu / done as u32;
    let in_flight_kernel = match spent.syscalls {
        Some(calls) => format!(
            "waits {:.2}, system calls {:.2}/call",
            spent.switches.voluntary as f64 / done as f64,
            calls as f64 / done as f64
        ),
        None => format!(
            "waits {:.2}/call",
            spent.switches.voluntary as f64 / done as f64
        ),
    };

    // (b) One at a time.
    let start = Instant::now();
    let (warm_end, end) = (start + WARM_UP, start + WARM_UP + window);
    let mut latencies = Vec::with_capacity(1 << 18);
    let mut measuring: Option<Instant> = None;
    let mut meter = Some(Meter::attach(pid));
    let (elapsed, spent) = loop {
        let request = stdio_call(next_id);
        let t0 = Instant::now();
        stdin.write_all(&request).unwrap();
        let line = lines.next_line(t0 + STEP_TIMEOUT).unwrap();
        let t1 = Instant::now();
        assert_eq!(response_id(line), next_id);
        next_id += 1;
        if t1 >= warm_end {
            match measuring {
                None => {
                    meter.as_mut().unwrap().start();
                    measuring = Some(t1);
                }
                Some(t) if t1 >= end => break (t1 - t, meter.take().unwrap().stop()),
                Some(_) => latencies.push((t1 - t0).as_nanos() as u64),
            }
        }
    };
    server.stdin = Some(stdin);
    StdioResult {
        in_flight_rate,
        in_flight_cpu,
        in_flight_kernel,
        serial: LoadResult::from(latencies, elapsed, spent),
    }
}

// ---------------------------------------------------------------------------------------------
// Cold start and idle memory
// ---------------------------------------------------------------------------------------------

/// Resident memory of a process: total, anonymous (private) and file-backed, in bytes.
#[derive(Clone, Copy)]
struct Memory {
    rss: u64,
    anon: u64,
    file: u64,
}

impl Memory {
    fn of(pid: u32) -> Memory {
        Memory {
            rss: status_bytes(pid, "VmRSS"),
            anon: status_bytes(pid, "RssAnon"),
            file: status_bytes(pid, "RssFile"),
        }
    }

    /// The median of each figure.
    fn median(all: &[Memory]) -> Memory {
        let pick = |f: fn(&Memory) -> u64| median(all.iter().map(f).collect());
        Memory {
            rss: pick(|m| m.rss),
            anon: pick(|m| m.anon),
            file: pick(|m| m.file),
        }
    }

    fn show(&self) -> String {
        format!(
            "{} (anonymous {}, file-backed {})",
            mb(self.rss),
            mb(self.anon),
            mb(self.file)
        )
    }
}

/// Spawn `serve --stdio`, send `tools/list` at once; time to the answer, and idle memory after
/// ~200 ms.
fn cold_start(exe: &Path, config: &Path, place: Placement) -> (Duration, Memory) {
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
    let memory = Memory::of(server.pid());
    server.stdin = Some(stdin);
    (elapsed, memory)
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

/// Open one legacy session per connection on `addr`; the `tools/call` of `echo` in each.
fn legacy_echo_requests(env: &Env, addr: SocketAddr, count: usize) -> Vec<Vec<u8>> {
    let sessions = env.rt.block_on(async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let (mut buf, mut consumed) = (Vec::new(), 0);
        let mut sessions = Vec::new();
        for _ in 0..count {
            sessions.push(
                legacy_session(&mut stream, &mut buf, &mut consumed, addr)
                    .await
                    .unwrap(),
            );
        }
        sessions
    });
    sessions
        .iter()
        .map(|session| {
            http_request(
                addr,
                &legacy_headers(session),
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}"#,
            )
        })
        .collect()
}

/// One HTTP load: its label, server, address, requests (one per connection, cycled) and
/// connection count.
struct HttpCase<'a> {
    what: &'static str,
    server: &'a Server,
    addr: SocketAddr,
    requests: Vec<Vec<u8>>,
    connections: usize,
}

/// 1 + 2: the baseline and mcp-host over HTTP at 16 and 64 connections, and mcp-host in 2025-06-18
/// mode (a session each, `initialize` first) at 16; rounds alternate the cases against the same two
/// servers, the best round of each counts.
fn bench_http(env: &Env, rows: &mut Vec<String>) {
    let me = std::env::current_exe().unwrap();
    let baseline = Server::spawn(
        "baseline server",
        server_command(&me, &["--baseline-server", "0"], env.place, true),
    );
    let baseline_addr = baseline.wait_listening();
    let (host, host_addr) = spawn_http_host(env, &env.echo_config, "mcp-host serve (HTTP)");

    // The baseline gets the very request the host gets, headers and body (it ignores the MCP
    // headers and `_meta`), as the bare stdio echo does: both servers parse the same bytes.
    let baseline_req = host_http_request(baseline_addr, "tools/call", Some("echo"), &echo_body());
    let host_req = host_http_request(host_addr, "tools/call", Some("echo"), &echo_body());
    let legacy_reqs = legacy_echo_requests(env, host_addr, CONNECTIONS);
    let (status, body) = env.rt.block_on(http_once(baseline_addr, &baseline_req));
    assert!(
        status == 200 && body.contains(r#""text":"hello""#),
        "baseline answered {status}: {body}"
    );
    for (mode, request) in [("2026", &host_req), (LEGACY, &legacy_reqs[0])] {
        let (status, body) = env.rt.block_on(http_once(host_addr, request));
        assert!(
            status == 200 && body.contains(r#""text":"hello""#),
            "mcp-host ({mode}) answered {status}: {body}\n{}",
            host.log()
        );
    }

    let case = |what, server, addr, requests: &[Vec<u8>], connections| HttpCase {
        what,
        server,
        addr,
        requests: requests.to_vec(),
        connections,
    };
    let base_req = std::slice::from_ref(&baseline_req);
    let modern_req = std::slice::from_ref(&host_req);
    let cases = [
        case(
            "baseline c=16",
            &baseline,
            baseline_addr,
            base_req,
            CONNECTIONS,
        ),
        case("mcp-host c=16", &host, host_addr, modern_req, CONNECTIONS),
        case(
            "baseline c=64",
            &baseline,
            baseline_addr,
            base_req,
            MANY_CONNECTIONS,
        ),
        case(
            "mcp-host c=64",
            &host,
            host_addr,
            modern_req,
            MANY_CONNECTIONS,
        ),
        case(
            "mcp-host 2025 c=16",
            &host,
            host_addr,
            &legacy_reqs,
            CONNECTIONS,
        ),
    ];
    let mut runs: Vec<Vec<LoadResult>> = cases.iter().map(|_| Vec::new()).collect();
    for round in 0..env.rounds {
        for (c, runs) in cases.iter().zip(&mut runs) {
            let r = http_load(
                &env.rt,
                c.server.pid(),
                c.addr,
                &c.requests,
                c.connections,
                env.http_window,
            );
            eprintln!(
                "round {}: {}: {:.0} req/s (p99 {}, CPU {}/req)",
                round + 1,
                c.what,
                r.rate,
                us(r.pct(99.0)),
                us(r.cpu)
            );
            runs.push(r);
        }
    }
    let [base16, http16, base64, http64, legacy16]: [LoadResult; 5] = runs
        .into_iter()
        .map(|r| {
            r.into_iter()
                .max_by(|a, b| a.rate.total_cmp(&b.rate))
                .unwrap()
        })
        .collect::<Vec<_>>()
        .try_into()
        .ok()
        .unwrap();
    let loaded_rss = host.rss();
    let figures = |r: &LoadResult, unit: &str| {
        format!(
            "{:.0} req/s, p50 {}, p99 {}; server CPU {}/{unit}, {}",
            r.rate,
            us(r.pct(50.0)),
            us(r.pct(99.0)),
            us(r.cpu),
            r.kernel(unit)
        )
    };
    for (connections, base, http) in [
        (CONNECTIONS, &base16, &http16),
        (MANY_CONNECTIONS, &base64, &http64),
    ] {
        rows.push(format!(
            "| baseline: bare hyper + serde_json echo, HTTP, {connections} connections | {} | | |",
            figures(base, "req")
        ));
        rows.push(format!(
            "| mcp-host HTTP, 2026 `tools/call` echo, {connections} connections | {} | p99 < 1 ms | {} |",
            figures(http, "req"),
            verdict(http.pct(99.0) < Duration::from_millis(1))
        ));
        rows.push(against_bare(
            &format!("HTTP, 2026, {connections} connections"),
            http,
            base,
        ));
    }
    rows.push(format!(
        "| mcp-host HTTP, {LEGACY} `tools/call` echo (a session each, `Mcp-Session-Id`), {CONNECTIONS} connections | {} | | |",
        figures(&legacy16, "req")
    ));
    rows.push(against_bare(
        &format!("HTTP, {LEGACY} sessions, {CONNECTIONS} connections"),
        &legacy16,
        &base16,
    ));
    let ratio = legacy16.rate / http16.rate;
    rows.push(format!(
        "| {LEGACY} mode / 2026 mode throughput, {CONNECTIONS} connections | {ratio:.2}× | ≥ 0.95× | {} |",
        verdict(ratio >= 0.95)
    ));
    rows.push(format!(
        "| RSS, HTTP after the load runs (echo fixture) | {} | | |",
        mb(loaded_rss)
    ));
}

/// The row of `what`'s throughput and server CPU per request against the bare echo's, with issue
/// 53's targets: at least 0.85× the throughput, at most 1.3× the CPU.
fn against_bare(what: &str, host: &LoadResult, bare: &LoadResult) -> String {
    let (ratio, cpu) = (
        host.rate / bare.rate,
        host.cpu.as_secs_f64() / bare.cpu.as_secs_f64(),
    );
    format!(
        "| mcp-host / bare echo, {what} | throughput {ratio:.2}×; server CPU per request {cpu:.2}× | ≥ 0.85×; ≤ 1.3× | {}; {} |",
        verdict(ratio >= 0.85),
        verdict(cpu <= 1.3)
    )
}

/// 3: stdio, many in flight then one at a time, beside the bare stdio echo.
fn bench_stdio(env: &Env, rows: &mut Vec<String>) {
    let me = std::env::current_exe().unwrap();
    let mut bare = Server::spawn(
        "bare stdio baseline",
        server_command(&me, &["--baseline-stdio"], env.place, true),
    );
    let base = stdio_bench(&mut bare, env.stdio_window, true);
    drop(bare);
    let mut cmd = server_command(
        &env.exe,
        &["--config", &env.echo_config, "serve", "--stdio"],
        env.place,
        true,
    );
    cmd.env("RUST_LOG", "info");
    let mut server = Server::spawn("mcp-host serve --stdio", cmd);
    let stdio = stdio_bench(&mut server, env.stdio_window, false);
    rows.push(format!(
        "| baseline: bare newline-delimited serde_json echo, stdio, {IN_FLIGHT} in flight | {:.0} calls/s; server CPU {}/call, {}; one at a time p50 {}, {} | | |",
        base.in_flight_rate,
        us(base.in_flight_cpu),
        base.in_flight_kernel,
        us(base.serial.pct(50.0)),
        base.serial.kernel("call")
    ));
    rows.push(format!(
        "| mcp-host stdio, {IN_FLIGHT} requests in flight | {:.0} calls/s; server CPU {}/call, {} | ≥ 100k calls/s | {} |",
        stdio.in_flight_rate,
        us(stdio.in_flight_cpu),
        stdio.in_flight_kernel,
        verdict(stdio.in_flight_rate >= 100_000.0)
    ));
    let (ratio, cpu) = (
        stdio.in_flight_rate / base.in_flight_rate,
        stdio.in_flight_cpu.as_secs_f64() / base.in_flight_cpu.as_secs_f64(),
    );
    rows.push(format!(
        "| mcp-host / bare echo, stdio, {IN_FLIGHT} in flight | throughput {ratio:.2}×; server CPU per call {cpu:.2}× | ≥ 0.85×; ≤ 1.3× | {}; {} |",
        verdict(ratio >= 0.85),
        verdict(cpu <= 1.3)
    ));
    rows.push(format!(
        "| mcp-host stdio, one at a time | p50 {}, p99 {} ({:.0} calls/s); server CPU {}/call, {} | p50 < 60 µs | {} |",
        us(stdio.serial.pct(50.0)),
        us(stdio.serial.pct(99.0)),
        stdio.serial.rate,
        us(stdio.serial.cpu),
        stdio.serial.kernel("call"),
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
                std::slice::from_ref(request),
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
            stdio_bench(&mut server, env.stdio_window, false).serial
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

/// Spawn `serve --listen 127.0.0.1:0`, wait for its address, send one `tools/call` (`hash_text`
/// of "hello"); the time from spawn to the answer.
fn http_cold_start(env: &Env) -> Duration {
    let mut cmd = server_command(
        &env.exe,
        &[
            "--config",
            &env.packaged_config,
            "serve",
            "--listen",
            "127.0.0.1:0",
        ],
        env.place,
        false,
    );
    cmd.env("RUST_LOG", "info");
    let t0 = Instant::now();
    let server = Server::spawn("mcp-host serve (HTTP cold start)", cmd);
    let addr = server.wait_listening();
    let call = host_http_request(
        addr,
        "tools/call",
        Some("hash_text"),
        &format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"hash_text","arguments":{{"text":"hello"}},{META}}}}}"#
        ),
    );
    let (status, body) = env.rt.block_on(http_once(addr, &call));
    let elapsed = t0.elapsed();
    assert!(
        status == 200 && body.contains("2cf24dba5fb0a30e"),
        "hash_text over HTTP answered {status}: {body}\n{}",
        server.log()
    );
    elapsed
}

/// Median, min and max of `starts` in ms, as a table cell.
fn start_times(starts: &[Duration]) -> (Duration, String) {
    let (min, max) = (*starts.iter().min().unwrap(), *starts.iter().max().unwrap());
    let mid = median(starts.to_vec());
    let cell = format!(
        "{:.1} ms (median of {}; {:.1}–{:.1})",
        mid.as_secs_f64() * 1e3,
        starts.len(),
        min.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    );
    (mid, cell)
}

/// 4: cold start over the packaged plugins (one unmeasured run warms the page cache and the probe
/// cache), with the probe cache warm and cold (a fresh cache file each run, no checked schemas);
/// HTTP spawn → first
/// `tools/call` answered; idle memory over stdio and HTTP.
fn bench_cold(env: &Env, rows: &mut Vec<String>) {
    let config = Path::new(&env.packaged_config);
    let _ = cold_start(&env.exe, config, env.place);
    let (mut warm, mut memory, mut cold) = (Vec::new(), Vec::new(), Vec::new());
    // Also as a client starts it: free to use every core (plugins load side by side).
    let everywhere = Placement {
        server: None,
        ..env.place
    };
    let mut unpinned = Vec::new();
    let packaged = std::fs::read_to_string(config).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    for run in 0..COLD_RUNS {
        let (t, m) = cold_start(&env.exe, config, env.place);
        warm.push(t);
        memory.push(m);
        unpinned.push(cold_start(&env.exe, config, everywhere).0);
        // The same plugins, probed again: a probe cache file that does not exist yet, and no
        // schemas checked before (as after a host upgrade; the kept copies beside it stay, as
        // they do then).
        let _ = std::fs::remove_file(scratch.path().join("schemas"));
        let fresh = scratch.path().join(format!("cold-{run}.yaml"));
        std::fs::write(
            &fresh,
            format!(
                "{packaged}probe_cache: {}\n",
                scratch.path().join(format!("probed-{run}")).display()
            ),
        )
        .unwrap();
        cold.push(cold_start(&env.exe, &fresh, env.place).0);
    }
    let _ = http_cold_start(env);
    let http_starts: Vec<Duration> = (0..COLD_RUNS).map(|_| http_cold_start(env)).collect();
    let stdio_memory = Memory::median(&memory);

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
    let http_memory = Memory::of(server.pid());

    let (warm, warm_cell) = start_times(&warm);
    let (cold, cold_cell) = start_times(&cold);
    let (unpinned, unpinned_cell) = start_times(&unpinned);
    let (http, http_cell) = start_times(&http_starts);
    rows.push(format!(
        "| cold start: spawn `serve --stdio` → `tools/list` answered (packaged plugins, probe cache warm) | {warm_cell} | < 5 ms | {} |",
        verdict(warm < Duration::from_millis(5))
    ));
    rows.push(format!(
        "| same, not pinned (every core, as a client spawns it) | {unpinned_cell} | < 5 ms | {} |",
        verdict(unpinned < Duration::from_millis(5))
    ));
    rows.push(format!(
        "| cold start, probe cache cold (a fresh cache file each run) | {cold_cell} | < 10 ms | {} |",
        verdict(cold < Duration::from_millis(10))
    ));
    rows.push(format!(
        "| HTTP cold start: spawn `serve --listen` → first `tools/call` answered (packaged plugins) | {http_cell} | < 10 ms | {} |",
        verdict(http < Duration::from_millis(10))
    ));
    let target = 10 * 1024 * 1024;
    rows.push(format!(
        "| idle RSS, stdio (packaged plugins) | {} | < 10 MB | {} |",
        stdio_memory.show(),
        verdict(stdio_memory.rss < target)
    ));
    rows.push(format!(
        "| idle RSS, HTTP after one request (packaged plugins) | {} | < 10 MB | {} |",
        http_memory.show(),
        verdict(http_memory.rss < target)
    ));
}

// ---------------------------------------------------------------------------------------------
// Instructions per request
// ---------------------------------------------------------------------------------------------

/// Requests of the short run; the long run serves five times as many. `MCP_BENCH_COUNTED` lowers
/// it for the CI guard (200 gives the same per-call count within 1 %, in a fifth of the time).
fn counted() -> u64 {
    std::env::var("MCP_BENCH_COUNTED")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1000)
}

/// Serve `count` `tools/call`s of `echo` over stdio from `exe args...` under callgrind (32 in flight), then
/// close stdin; the instructions the whole process ran.
fn stdio_instructions(exe: &Path, args: &[&str], count: u64, out: &Path) -> u64 {
    let mut server = Server::spawn(
        "stdio server under callgrind",
        under_callgrind(exe, args, out),
    );
    let mut stdin = server.stdin.take().unwrap();
    let mut lines = Lines::new(server.stdout.take().unwrap());
    let (mut sent, mut answered) = (0, 0);
    while sent < count.min(IN_FLIGHT as u64) {
        sent += 1;
        stdin.write_all(&stdio_call(sent)).unwrap();
    }
    while answered < count {
        let line = lines.next_line(Instant::now() + 10 * STEP_TIMEOUT).unwrap();
        assert!(response_id(line) > 0, "{}", String::from_utf8_lossy(line));
        answered += 1;
        if sent < count {
            sent += 1;
            stdin.write_all(&stdio_call(sent)).unwrap();
        }
    }
    drop(stdin);
    assert!(
        server.exited_within(10 * STEP_TIMEOUT),
        "{} did not exit",
        server.name
    );
    counted_instructions(out)
}

/// Serve `count` copies of `request` over one keep-alive HTTP connection from `exe args...` under
/// callgrind, then stop it with SIGTERM; the instructions the whole process ran.
fn http_instructions(
    env: &Env,
    (exe, args): (&Path, &[&str]),
    request: &dyn Fn(SocketAddr) -> Vec<u8>,
    count: u64,
    out: &Path,
) -> u64 {
    let mut server = Server::spawn(
        "HTTP server under callgrind",
        under_callgrind(exe, args, out),
    );
    let addr = server.wait_listening();
    let request = request(addr);
    env.rt.block_on(async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let (mut buf, mut consumed) = (Vec::new(), 0);
        for _ in 0..count {
            let (status, _, body) = exchange(&mut stream, &mut buf, &mut consumed, &request)
                .await
                .unwrap();
            assert!(status == 200 && body.contains("hello"), "{status}: {body}");
        }
    });
    // SAFETY: signalling our own child, which has not been reaped yet (so the pid is its).
    unsafe { libc::kill(server.pid() as libc::pid_t, libc::SIGTERM) };
    assert!(
        server.exited_within(10 * STEP_TIMEOUT),
        "{} did not exit",
        server.name
    );
    counted_instructions(out)
}

/// 6: instructions per request, host against the bare baselines (valgrind's callgrind counts
/// instructions, not time: the same for the same binaries and inputs whatever else the machine
/// does, so builds can be compared on a noisy machine). Each server serves `counted()` and then five
/// times as many requests; the difference over the extra requests is one request's instructions,
/// start-up and shutdown cancelling out. From the same runs, the code a request runs
/// ([`Footprint`]): cache lines and pages, which the instruction count does not see grow when the
/// same instructions spread over more of the binary. The failed guards.
fn bench_instructions(env: &Env, rows: &mut Vec<String>) -> Vec<String> {
    if !valgrind_installed() {
        eprintln!("instructions: skipped (valgrind is not installed)");
        if std::env::var_os("MCP_BENCH_MAX_HTTP_RATIO").is_some() {
            return vec!["instruction guard: valgrind is needed".into()];
        }
        return Vec::new();
    }
    // `MCP_BENCH_CALLGRIND_DIR` keeps the profiles (`<server>-short`, `<server>-long`): the
    // functions a request runs are what `callgrind_annotate` shows more of in the long one.
    let temporary = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("MCP_BENCH_CALLGRIND_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temporary.path().to_path_buf());
    let me = std::env::current_exe().unwrap();
    let per_request = |measure: &dyn Fn(u64, &Path) -> u64, name: &str| {
        let counted = counted();
        let (short_out, long_out) = (
            dir.join(format!("{name}-short")),
            dir.join(format!("{name}-long")),
        );
        let short = measure(counted, &short_out);
        let long = measure(5 * counted, &long_out);
        let code = Footprint::between(
            &Executed::read(&short_out),
            &Executed::read(&long_out),
            4 * counted,
        );
        ((long - short) as f64 / (4 * counted) as f64, code)
    };
    let host_stdio = [
        "--config",
        &env.echo_config,
        "serve",
        "--stdio",
        "--no-watch",
    ];
    let bare = per_request(
        &|n, out| stdio_instructions(&me, &["--baseline-stdio"], n, out),
        "bare-stdio",
    );
    let host = per_request(
        &|n, out| stdio_instructions(&env.exe, &host_stdio, n, out),
        "host-stdio",
    );
    let mut failed = instruction_rows(("stdio", "STDIO", "bare stdio echo"), host, bare, rows);

    let bare_http: &[&str] = &["--baseline-server", "0"];
    let host_http: &[&str] = &[
        "--config",
        &env.echo_config,
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--no-watch",
    ];
    // Both get the same request (see `bench_http`).
    let request = |addr| host_http_request(addr, "tools/call", Some("echo"), &echo_body());
    let bare = per_request(
        &|n, out| http_instructions(env, (&me, bare_http), &request, n, out),
        "bare-http",
    );
    let host = per_request(
        &|n, out| http_instructions(env, (&env.exe, host_http), &request, n, out),
        "host-http",
    );
    failed.extend(instruction_rows(
        ("HTTP", "HTTP", "bare hyper echo"),
        host,
        bare,
        rows,
    ));
    failed
}

/// The instruction and code rows of one transport (`what`, its guard variables' `KEY`, the bare
/// echo's name) and its guards: `MCP_BENCH_MAX_KEY_RATIO` (instructions),
/// `MCP_BENCH_MAX_KEY_LINES_RATIO` and `MCP_BENCH_MAX_KEY_PAGES_RATIO` (code).
fn instruction_rows(
    (what, key, bare_name): (&str, &str, &str),
    (host, host_code): (f64, Footprint),
    (bare, bare_code): (f64, Footprint),
    rows: &mut Vec<String>,
) -> Vec<String> {
    let how = if what == "HTTP" {
        ", one keep-alive connection"
    } else {
        ""
    };
    rows.push(format!(
        "| instructions per {what} `tools/call` echo, 2026{how} (callgrind) | {:.1}k ({bare_name}: {:.1}k; {:.2}×) | | |",
        host / 1e3,
        bare / 1e3,
        host / bare
    ));
    rows.push(format!(
        "| code a {what} `tools/call` echo runs (callgrind: instructions run at least once in four calls) | {} ({bare_name}: {} lines in {} pages; {:.2}× / {:.2}×) | | |",
        host_code.show(),
        bare_code.lines,
        bare_code.pages,
        host_code.lines as f64 / bare_code.lines as f64,
        host_code.pages as f64 / bare_code.pages as f64
    ));
    [
        guard(
            &format!("MCP_BENCH_MAX_{key}_RATIO"),
            &format!("instructions per {what} call"),
            host,
            bare,
        ),
        guard(
            &format!("MCP_BENCH_MAX_{key}_LINES_RATIO"),
            &format!("cache lines of code per {what} call"),
            host_code.lines as f64,
            bare_code.lines as f64,
        ),
        guard(
            &format!("MCP_BENCH_MAX_{key}_PAGES_RATIO"),
            &format!("pages of code per {what} call"),
            host_code.pages as f64,
            bare_code.pages as f64,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Whether valgrind runs here.
fn valgrind_installed() -> bool {
    Command::new("valgrind").arg("--version").output().is_ok()
}

/// Rules of a policy row of [`bench_policy`]: the stdio echo's call (`{"text": "hello"}`, no
/// caller claims) is tried against every rule and none matches.
#[derive(Clone, Copy)]
enum PolicyRules {
    /// Sizes, the agent, claims and argument values compared with literals.
    Literals,
    /// Conversions, a comprehension over the arguments, string and integer arithmetic.
    Computed,
    /// Doubles compared (`double()`), values chosen by a conditional (`? :`).
    Doubles,
    /// A shape only `cel`'s interpreter evaluates (a `map` macro).
    Interpreted,
}

/// `count` rules of `shape` as the configuration's `policy.rules` (JSON, which YAML reads).
fn policy_rules(count: usize, shape: PolicyRules) -> String {
    let rules: Vec<Value> = (0..count)
        .map(|i| {
            let when = match (shape, i % 4) {
                (PolicyRules::Literals, 0) => format!("size(args.text) > {}", 100_000 + i),
                (PolicyRules::Literals, 1) => format!("caller.agent == 'agent_{i}'"),
                (PolicyRules::Literals, 2) => {
                    format!("has(caller.claims.roles) && 'role_{i}' in caller.claims.roles")
                }
                (PolicyRules::Literals, _) => format!("has(args.id) && args.id == {}", 1_000 + i),
                (PolicyRules::Computed, 0) => format!("string(size(args.text)) == 'rule_{i}'"),
                (PolicyRules::Computed, 1) => format!("args.exists(k, k == 'key_{i}')"),
                (PolicyRules::Computed, 2) => format!("args.text + '_' == 'rule_{i}'"),
                (PolicyRules::Computed, _) => format!("size(args.text) * 2 + {i} > 100000"),
                (PolicyRules::Doubles, 0 | 2) => {
                    format!("double(size(args.text)) > {}.5", 100_000 + i)
                }
                (PolicyRules::Doubles, _) => {
                    format!("(size(args.text) > 3 ? args.text : 'short') == 'rule_{i}'")
                }
                (PolicyRules::Interpreted, _) => {
                    format!("args.map(k, k + '_').size() == {}", 1_000 + i)
                }
            };
            json!({"name": format!("rule-{i}"), "when": when, "outcome": "deny"})
        })
        .collect();
    serde_json::to_string(&rules).unwrap()
}

/// 7: what the call policy adds to a `tools/call`: instructions per stdio call of `echo` (as in
/// section 6) with no policy, then with 10 and 100 rules of each [`PolicyRules`] shape that the
/// call is tried against, none matching (the worst case for an allowed call).
fn bench_policy(env: &Env, rows: &mut Vec<String>) {
    if Command::new("valgrind").arg("--version").output().is_err() {
        eprintln!("policy: skipped (valgrind is not installed)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let per_request = |config: &str, name: &str| {
        let args = ["--config", config, "serve", "--stdio", "--no-watch"];
        let counted = counted();
        let short = stdio_instructions(&env.exe, &args, counted, &dir.path().join(name));
        let long = stdio_instructions(&env.exe, &args, 5 * counted, &dir.path().join(name));
        (long - short) as f64 / (4 * counted) as f64
    };
    let none = per_request(&env.echo_config, "none");
    rows.push(format!(
        "| instructions per stdio `tools/call` echo, no policy (callgrind) | {:.1}k | | |",
        none / 1e3
    ));
    let base = std::fs::read_to_string(&env.echo_config).unwrap();
    let cases = [
        (10, PolicyRules::Literals, "fields compared with literals"),
        (100, PolicyRules::Literals, "fields compared with literals"),
        (
            10,
            PolicyRules::Computed,
            "conversions, `exists`, arithmetic",
        ),
        (
            100,
            PolicyRules::Computed,
            "conversions, `exists`, arithmetic",
        ),
        (10, PolicyRules::Doubles, "`double()` compared, `? :`"),
        (10, PolicyRules::Interpreted, "`map`: through `cel`"),
    ];
    for (count, shape, what) in cases {
        let config = dir
            .path()
            .join(format!("policy-{count}-{}.yaml", what.len()));
        let text = format!("{base}policy:\n  rules: {}\n", policy_rules(count, shape));
        std::fs::write(&config, text).unwrap();
        let with = per_request(config.to_str().unwrap(), "policy");
        rows.push(format!(
            "| instructions per stdio `tools/call` echo, {count} policy rules tried ({what}) | {:.1}k ({:+.1}k over no policy) | | |",
            with / 1e3,
            (with - none) / 1e3
        ));
    }
}

/// The speed guard (`.ci/run`): with the variable `var` set to a ratio, a failure (the run fails
/// once the table is printed) when `host / anchor` exceeds it. Counts, not clocks: they do not
/// move with the machine's load.
fn guard(var: &str, what: &str, host: f64, anchor: f64) -> Option<String> {
    let max = std::env::var(var).ok()?.parse::<f64>().ok()?;
    let ratio = host / anchor;
    if ratio > max {
        return Some(format!(
            "speed guard: {what}: {host:.1}, {ratio:.3}x the anchor's {anchor:.1}, over the \
             allowed {max}x ({var})"
        ));
    }
    eprintln!("speed guard: {what} {ratio:.3}x (allowed {max}x, {var})");
    None
}

/// Whether `file` (a 64-bit little-endian ELF object) has a `.debug_line` section: DWARF line
/// tables, which the test builds keep and the release profile strips. (The name alone is no sign:
/// std's backtrace code carries it as a string.)
fn has_line_tables(file: &Path) -> bool {
    let elf = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let int = |at: usize, len: usize| -> usize {
        let mut n = [0u8; 8];
        n[..len].copy_from_slice(&elf[at..at + len]);
        u64::from_le_bytes(n) as usize
    };
    assert!(
        elf.starts_with(b"\x7fELF\x02\x01"),
        "{} is not a 64-bit little-endian ELF file",
        file.display()
    );
    let (table, entry, count, names) = (int(0x28, 8), int(0x3a, 2), int(0x3c, 2), int(0x3e, 2));
    let section = |i: usize| table + i * entry;
    let strings = int(section(names) + 0x18, 8);
    (0..count).any(|i| {
        let name = strings + int(section(i), 4);
        elf[name..].starts_with(b".debug_line\0")
    })
}

/// Stop when the echo fixture was not built like the host: with debug line tables in one and not
/// the other, something replaced cargo's output in the target directory (a debug fixture copied
/// over the release one doubles the stdio instruction count) and every figure would mislead.
fn same_build(host: &Path, fixture: &Path) {
    let (h, f) = (has_line_tables(host), has_line_tables(fixture));
    assert!(
        h == f,
        "{} {} line tables but {} {}: it is not the build of this profile (remove it and build \
         again)",
        host.display(),
        if h { "has" } else { "has no" },
        fixture.display(),
        if f { "has them" } else { "has none" },
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--baseline-server") {
        let port = args.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
        baseline_server(port);
        return;
    }
    if args.get(1).map(String::as_str) == Some("--baseline-stdio") {
        baseline_stdio();
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
    for lib in ["libmcp_time.so", "libmcp_text.so", "libmcp_series.so"] {
        std::fs::copy(release.join(lib), packaged_dir.join(lib)).unwrap();
    }
    same_build(
        &release.join("mcp-host"),
        &echo_dir.join("libfixture_basic.so"),
    );
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

    let runs = common::report::runs();
    let mut all = Vec::new();
    let mut failed = Vec::new();
    for run in 0..runs {
        if runs > 1 {
            eprintln!("run {} of {runs}", run + 1);
        }
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
        if wanted("instructions") {
            failed.extend(bench_instructions(&env, &mut rows));
        }
        if wanted("policy") {
            bench_policy(&env, &mut rows);
        }
        if wanted("counts") {
            failed.extend(counts::bench_counts(&env, &mut rows));
        }
        all.push(rows);
    }
    let rows = common::report::median_rows(&all);

    println!("| measurement | result | target | |");
    println!("|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    println!();
    if runs > 1 {
        println!("Each figure is the median of {runs} whole runs (`MCP_BENCH_RUNS`).");
    }
    println!(
        "Server pinned to CPU {}, load generator to CPU {}; HTTP: best of {} alternating rounds of {} s after {} s warm-up; stdio: {} s windows. Server CPU = user + system time of the server process (all threads) in the window, per request.",
        place.server.map_or("-".into(), |c| c.to_string()),
        place.client.map_or("-".into(), |c| c.to_string()),
        env.rounds,
        env.http_window.as_secs(),
        WARM_UP.as_secs(),
        env.stdio_window.as_secs()
    );
    if !failed.is_empty() {
        for failure in &failed {
            eprintln!("{failure}: the request path or the start got heavier");
        }
        std::process::exit(1);
    }
}
