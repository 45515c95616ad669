//! Benchmark: how `mcp-host`'s costs grow with the work — scaling curves against the number of
//! tools, plugins, legacy sessions and open streams.
//!
//! Run: `cargo bench -p mcp-host --bench scaling` (builds the release host and fixtures into
//! `target/bench` first; `MCP_BENCH_RUNS=3` repeats the whole measurement and prints the median of
//! each figure). Prints one Markdown table: a row per curve, a column per count, and the growth
//! factor per 10× of that count (≈ 10× is linear growth of a total, ≈ 1× a flat per-item cost).
//!
//! Placement as in the `serve` bench: every server runs pinned to the first allowed CPU, this load
//! generator to the second.
//!
//! - Tools (10, 100, 1,000, 10,000): fixture-catalog (release) copied into one tool directory per
//!   250 tools, each under its own prefix, with `plugins.fixture-catalog.config.count` set so the
//!   copies serve exactly that many tools. Over stdio (`serve --stdio --no-watch`), one request at a
//!   time: `tools/list` following `nextCursor` over every page (the host's default
//!   `list_page_size`, 100 tools a page) and the first page alone; then `tools/call` of a tool of the
//!   last copy for a fixed window (p50, p99); then the server's RSS.
//! - Plugins (10, 100, 1,000): copies of fixture-catalog (release, ~1.3 MB each) serving 10 tools
//!   each, one tool directory per copy under its own prefix (so, as in a real deployment, no copy
//!   shadows another's tools). Spawn `serve --stdio --no-watch`, send `tools/list` at once and time
//!   the answer (process start → first `tools/list` answered), with the probe cache warm (an
//!   unmeasured run fills a private cache file) and cold (a fresh cache file: every copy probed in a
//!   child process); the host's own logged load time beside it. The copies are deleted after each
//!   count.
//! - Legacy sessions (1,000, 10,000): an HTTP server (`http.max_sessions` and
//!   `max_sessions_per_caller` raised); the resident set size before and after opening N 2025-06-18
//!   sessions (`initialize` + `notifications/initialized` each, over one keep-alive connection),
//!   per session.
//! - Listen streams (1,000, 10,000): the same for N open 2026 `subscriptions/listen` streams (one TCP
//!   connection each, acknowledged; `http.max_connections` raised). This process raises its
//!   `RLIMIT_NOFILE` soft limit to the hard limit (the servers inherit it); a count that does not fit
//!   under the hard limit is reported as skipped.

#![allow(clippy::unwrap_used)]

mod common;

use std::any::Any;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::http::{http_request, legacy_session};
use common::process::{
    Lines, Placement, STEP_TIMEOUT, Server, pin_to, placement, server_command, status_bytes,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const TOOL_COUNTS: [usize; 4] = [10, 100, 1_000, 10_000];
const PLUGIN_COUNTS: [usize; 3] = [10, 100, 1_000];
const SESSION_COUNTS: [usize; 2] = [1_000, 10_000];
/// Tools per catalog copy when a count needs several (the catalog's names are distinct up to 400).
const PER_CATALOG: usize = 250;
/// Measuring window of each `tools/call` curve point, after a warm-up of a fifth of it.
const CALL_WINDOW: Duration = Duration::from_secs(2);
/// Time spent listing at each count (at least [`MIN_LISTS`] full lists).
const LIST_BUDGET: Duration = Duration::from_secs(2);
const MIN_LISTS: usize = 10;
/// Warm runs per plugin count (the median counts).
const LOAD_RUNS: usize = 3;
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

/// One curve: a label, a cell per count (`None`: not measured at that count), and the values the
/// growth factors are computed from.
struct Curve {
    label: String,
    cells: Vec<Option<String>>,
    values: Vec<Option<f64>>,
}

impl Curve {
    fn new(label: impl Into<String>, columns: usize) -> Curve {
        Curve {
            label: label.into(),
            cells: vec![None; columns],
            values: vec![None; columns],
        }
    }

    fn set(&mut self, column: usize, cell: String, value: f64) {
        self.cells[column] = Some(cell);
        self.values[column] = Some(value);
    }

    /// The growth factor between neighbouring measured columns (each a 10× step).
    fn growth(&self) -> String {
        let factors: Vec<String> = self
            .values
            .windows(2)
            .filter_map(|w| match (w[0], w[1]) {
                (Some(a), Some(b)) if a > 0.0 => Some(format!("{:.2}×", b / a)),
                _ => None,
            })
            .collect();
        if factors.is_empty() {
            "—".into()
        } else {
            factors.join(", ")
        }
    }

    fn row(&self) -> String {
        let cells: Vec<&str> = self
            .cells
            .iter()
            .map(|c| c.as_deref().unwrap_or(""))
            .collect();
        format!(
            "| {} | {} | {} |",
            self.label,
            cells.join(" | "),
            self.growth()
        )
    }
}

/// The column of `count` in the table (10, 100, 1,000, 10,000).
fn column(count: usize) -> usize {
    TOOL_COUNTS.iter().position(|&c| c == count).unwrap()
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// A duration in ms, or in µs below a millisecond.
fn ms(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        us(d)
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}

fn bytes(b: f64) -> String {
    if b.abs() >= 1024.0 * 1024.0 {
        format!("{:.1} MB", b / (1024.0 * 1024.0))
    } else if b.abs() >= 10.0 * 1024.0 {
        format!("{:.1} KB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// `serve --stdio --no-watch` over `config`, pinned to the server CPU.
fn spawn_stdio(exe: &Path, config: &Path, place: Placement, name: &'static str) -> Server {
    let mut cmd = server_command(
        exe,
        &[
            "--config",
            config.to_str().unwrap(),
            "serve",
            "--stdio",
            "--no-watch",
        ],
        place,
        false,
    );
    cmd.env("RUST_LOG", "info");
    Server::spawn(name, cmd)
}

/// A stdio client of a spawned server: one request at a time.
struct Stdio {
    server: Server,
    lines: Lines,
    next_id: u64,
}

impl Stdio {
    fn new(mut server: Server) -> Stdio {
        let lines = Lines::new(server.stdout.take().unwrap());
        Stdio {
            server,
            lines,
            next_id: 1,
        }
    }

    /// Send `method` with `params` (the 2026 `_meta` added: `params` is the JSON object's inside,
    /// without braces); the answer line.
    fn request(&mut self, method: &str, params: &str) -> String {
        let id = self.next_id;
        self.next_id += 1;
        let comma = if params.is_empty() { "" } else { "," };
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"{method}\",\"params\":{{{params}{comma}{META}}}}}\n"
        );
        self.server
            .stdin
            .as_mut()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        match self.lines.next_line(Instant::now() + STEP_TIMEOUT) {
            Ok(answer) => String::from_utf8_lossy(answer).into_owned(),
            Err(e) => panic!("no answer to {method} ({e}):\n{}", self.server.log()),
        }
    }

    /// Every page of `tools/list`: the pages' answers.
    fn list_all(&mut self) -> Vec<String> {
        let mut pages = vec![self.request("tools/list", "")];
        while let Some(cursor) = next_cursor(pages.last().unwrap()) {
            let params = format!("\"cursor\":{}", serde_json::to_string(&cursor).unwrap());
            pages.push(self.request("tools/list", &params));
        }
        pages
    }
}

/// The `nextCursor` of a `tools/list` answer, found without parsing the whole page.
fn next_cursor(page: &str) -> Option<String> {
    let at = page.rfind(r#""nextCursor":"#)?;
    let rest = &page[at + r#""nextCursor":"#.len()..];
    let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
    de.next()?.ok()
}

/// The copies of fixture-catalog serving `count` tools, and their configuration file.
fn catalog_layout(root: &Path, plugin: &Path, count: usize) -> (PathBuf, String) {
    let copies = count.div_ceil(PER_CATALOG);
    let per_copy = count / copies;
    assert_eq!(
        per_copy * copies,
        count,
        "{count} tools do not split evenly"
    );
    let mut dirs = Vec::new();
    for i in 0..copies {
        let dir = root.join(format!("c{i:03}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::copy(plugin, dir.join("libfixture_catalog.so")).unwrap();
        dirs.push(format!("{{path: {}, prefix: p{i:03}_}}", dir.display()));
    }
    let config = root.join("mcp-host.yaml");
    std::fs::write(
        &config,
        format!(
            "tool_dirs: [{}]\nprobe_cache: {}\nplugins:\n  fixture-catalog:\n    config: {{count: {}}}\n",
            dirs.join(", "),
            root.join("probed").display(),
            per_copy - 1
        ),
    )
    .unwrap();
    // Tool 0 of every copy is `list_invoice`, whose one required argument is `id`.
    (config, format!("p{:03}_list_invoice", copies - 1))
}

/// Curves against the number of tools: `tools/list` (every page, first page), `tools/call`, RSS.
fn bench_tools(release: &Path, place: Placement, curves: &mut Vec<Curve>) {
    let exe = release.join("mcp-host");
    let columns = TOOL_COUNTS.len();
    let mut full = Curve::new(
        "`tools/list`, every page, one after another (pages at the default `list_page_size`), p50",
        columns,
    );
    let mut first = Curve::new("`tools/list`, first page only, p50", columns);
    let mut call = Curve::new(
        "`tools/call` of a catalog tool (echoes its arguments), one at a time, p50 (p99)",
        columns,
    );
    let mut rss = Curve::new("server RSS after listing and calling (tools)", columns);
    for count in TOOL_COUNTS {
        let root = tempfile::tempdir().unwrap();
        let (config, tool) =
            catalog_layout(root.path(), &release.join("libfixture_catalog.so"), count);
        // One unmeasured start fills the probe cache.
        drop(Stdio::new(spawn_stdio(&exe, &config, place, "catalog (probe)")).list_all());
        let mut client = Stdio::new(spawn_stdio(&exe, &config, place, "catalog"));

        let pages = client.list_all();
        let tools: usize = pages
            .iter()
            .map(|p| {
                let v: serde_json::Value = serde_json::from_str(p).unwrap();
                v["result"]["tools"].as_array().map_or(0, Vec::len)
            })
            .sum();
        assert_eq!(tools, count, "the catalog copies serve {tools} tools");
        let list_bytes: usize = pages.iter().map(String::len).sum();

        let (mut lists, mut firsts) = (Vec::new(), Vec::new());
        let started = Instant::now();
        while lists.len() < MIN_LISTS || started.elapsed() < LIST_BUDGET {
            let t = Instant::now();
            let page = client.request("tools/list", "");
            firsts.push(t.elapsed());
            let mut cursor = next_cursor(&page);
            while let Some(c) = cursor {
                let params = format!("\"cursor\":{}", serde_json::to_string(&c).unwrap());
                cursor = next_cursor(&client.request("tools/list", &params));
            }
            lists.push(t.elapsed());
        }
        let (lists, firsts) = (median(lists), median(firsts));
        let c = column(count);
        full.set(
            c,
            format!(
                "{} ({} page{}, {} KB)",
                ms(lists),
                pages.len(),
                if pages.len() == 1 { "" } else { "s" },
                list_bytes / 1024
            ),
            lists.as_secs_f64(),
        );
        first.set(c, us(firsts), firsts.as_secs_f64());

        let params = format!(r#""name":"{tool}","arguments":{{"id":"A-1"}}"#);
        let answer = client.request("tools/call", &params);
        assert!(
            answer.contains("list_invoice") && answer.contains("A-1"),
            "unexpected tools/call answer: {answer}"
        );
        let start = Instant::now();
        let (warm_end, end) = (
            start + CALL_WINDOW / 5,
            start + CALL_WINDOW / 5 + CALL_WINDOW,
        );
        let mut calls = Vec::with_capacity(1 << 16);
        loop {
            let t = Instant::now();
            client.request("tools/call", &params);
            let done = Instant::now();
            if done >= end {
                break;
            }
            if done >= warm_end {
                calls.push(done - t);
            }
        }
        calls.sort();
        let p50 = percentile(&calls, 0.5);
        call.set(
            c,
            format!("{} ({})", us(p50), us(percentile(&calls, 0.99))),
            p50.as_secs_f64(),
        );
        let resident = client.server.rss() as f64;
        rss.set(c, bytes(resident), resident);
        eprintln!(
            "{count} tools: list {} ({} page(s)), first page {}, call p50 {}",
            ms(lists),
            pages.len(),
            us(firsts),
            us(p50)
        );
    }
    curves.extend([full, first, call, rss]);
}

/// Spawn `serve --stdio` over `config`, send `tools/list` at once: the time to its answer, and the
/// host's log line `Serving N tools from M plugins (loaded in X ms)`.
fn load_once(exe: &Path, config: &Path, place: Placement) -> (Duration, String) {
    let t0 = Instant::now();
    let mut client = Stdio::new(spawn_stdio(exe, config, place, "plugins"));
    let answer = client.request("tools/list", "");
    let elapsed = t0.elapsed();
    assert!(
        answer.contains(r#""tools":[{"#),
        "unexpected tools/list answer: {answer}"
    );
    // The log line may still be on its way through the stderr reader.
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let log = client.server.log();
        if let Some(at) = log.find("Serving ") {
            let line = log[at..].lines().next().unwrap_or_default().to_owned();
            return (elapsed, line);
        }
        assert!(
            Instant::now() < deadline,
            "no `Serving` line in the log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The `X` of `(loaded in X ms)`.
fn logged_load(line: &str) -> Duration {
    line.split("(loaded in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or_else(|| panic!("no load time in {line:?}"))
}

/// Curves against the number of plugins: spawn → `tools/list` answered, probe cache warm and cold.
fn bench_plugins(release: &Path, place: Placement, curves: &mut Vec<Curve>) {
    let exe = release.join("mcp-host");
    let plugin = release.join("libfixture_catalog.so");
    let columns = TOOL_COUNTS.len();
    let mut warm = Curve::new(
        format!(
            "load: spawn `serve --stdio` → `tools/list` answered, probe cache warm (plugins; median of {LOAD_RUNS})"
        ),
        columns,
    );
    let mut logged = Curve::new(
        "load: the host's logged discover + load time, probe cache warm (plugins)",
        columns,
    );
    let mut cold = Curve::new(
        "load: spawn → `tools/list` answered, probe cache cold: every copy probed (plugins)",
        columns,
    );
    for count in PLUGIN_COUNTS {
        let root = tempfile::tempdir().unwrap();
        let mut dirs = Vec::new();
        for i in 0..count {
            let dir = root.path().join(format!("p{i:04}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::copy(&plugin, dir.join("libfixture_catalog.so")).unwrap();
            dirs.push(format!("{{path: {}, prefix: p{i:04}_}}", dir.display()));
        }
        let config_for = |cache: &str| {
            let file = root.path().join(format!("{cache}.yaml"));
            std::fs::write(
                &file,
                format!(
                    "tool_dirs: [{}]\nprobe_cache: {}\nplugins:\n  fixture-catalog:\n    config: {{count: 9}}\n",
                    dirs.join(", "),
                    root.path().join(cache).display()
                ),
            )
            .unwrap();
            file
        };
        let c = column(count);
        let (cold_time, cold_line) = load_once(&exe, &config_for("probed-cold"), place);
        cold.set(c, ms(cold_time), cold_time.as_secs_f64());
        let warm_config = config_for("probed-warm");
        let _ = load_once(&exe, &warm_config, place);
        let (mut walls, mut logs, mut line) = (Vec::new(), Vec::new(), String::new());
        for _ in 0..LOAD_RUNS {
            let (t, l) = load_once(&exe, &warm_config, place);
            walls.push(t);
            logs.push(logged_load(&l));
            line = l;
        }
        let (wall, log) = (median(walls), median(logs));
        warm.set(c, ms(wall), wall.as_secs_f64());
        logged.set(c, ms(log), log.as_secs_f64());
        eprintln!(
            "{count} plugins: cold {} ({cold_line}), warm {} ({line})",
            ms(cold_time),
            ms(wall)
        );
    }
    curves.extend([warm, logged, cold]);
}

/// An HTTP server over the echo fixture whose session and connection limits fit `count`.
fn spawn_http(exe: &Path, root: &Path, plugin: &Path, count: usize, place: Placement) -> Server {
    let dir = root.join("echo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(plugin, dir.join("libfixture_basic.so")).unwrap();
    let limit = count * 2 + 100;
    let config = root.join(format!("http-{count}.yaml"));
    std::fs::write(
        &config,
        format!(
            "tool_dirs: [{}]\nprobe_cache: {}\nhttp:\n  max_sessions: {limit}\n  max_sessions_per_caller: {limit}\n  max_connections: {limit}\n",
            dir.display(),
            root.join("probed").display()
        ),
    )
    .unwrap();
    let mut cmd = server_command(
        exe,
        &[
            "--config",
            config.to_str().unwrap(),
            "serve",
            "--no-watch",
            "--listen",
            "127.0.0.1:0",
        ],
        place,
        true,
    );
    cmd.env("RUST_LOG", "info");
    Server::spawn("mcp-host serve (HTTP)", cmd)
}

/// Open `count` legacy sessions on `addr` over one keep-alive connection.
async fn open_sessions(addr: SocketAddr, count: usize) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut buf, mut consumed) = (Vec::new(), 0);
    for _ in 0..count {
        legacy_session(&mut stream, &mut buf, &mut consumed, addr)
            .await
            .unwrap();
    }
}

/// Open one acknowledged `subscriptions/listen` stream on `addr`; the open connection.
async fn open_listen(addr: SocketAddr, request: std::sync::Arc<[u8]>) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(&request).await.unwrap();
    let mut buf = Vec::with_capacity(1024);
    while !String::from_utf8_lossy(&buf).contains("notifications/subscriptions/acknowledged") {
        assert!(
            stream.read_buf(&mut buf).await.unwrap() > 0,
            "the listen stream closed: {}",
            String::from_utf8_lossy(&buf)
        );
    }
    assert!(
        buf.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf)
    );
    stream
}

/// Open `count` listen streams on `addr`, 100 at a time; the open connections.
async fn open_streams(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{{"notifications":{{"toolsListChanged":true}},{META}}}}}"#
    );
    let request: std::sync::Arc<[u8]> = http_request(
        addr,
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "subscriptions/listen"),
        ],
        &body,
    )
    .into();
    let mut streams = Vec::with_capacity(count);
    while streams.len() < count {
        let batch = (count - streams.len()).min(100);
        let tasks: Vec<_> = (0..batch)
            .map(|_| tokio::spawn(open_listen(addr, std::sync::Arc::clone(&request))))
            .collect();
        for t in tasks {
            streams.push(t.await.unwrap());
        }
    }
    streams
}

/// The measured step of [`rss_growth`]: what it returns (open connections) is held until the
/// server's memory has been read.
type Step<'a> = Box<dyn FnOnce() -> Box<dyn Any> + 'a>;

/// Start an HTTP server fitting `count`, run `warm_up` (which returns the measured step), then the
/// step: the server's RSS growth over the step as a cell (per one of `count`, total, anonymous)
/// and the total growth in bytes.
fn rss_growth<'a>(
    exe: &Path,
    root: &Path,
    plugin: &Path,
    count: usize,
    place: Placement,
    warm_up: impl FnOnce(SocketAddr) -> Step<'a>,
) -> (String, f64) {
    let server = spawn_http(exe, root, plugin, count, place);
    let addr = server.wait_listening();
    let step = warm_up(addr);
    let settle = || std::thread::sleep(Duration::from_millis(500));
    let memory = || (server.rss(), status_bytes(server.pid(), "RssAnon"));
    settle();
    let (before, anon_before) = memory();
    let held = step();
    settle();
    let (after, anon_after) = memory();
    drop(held);
    eprintln!("{count}: RSS {before} → {after}");
    let grown = after as f64 - before as f64;
    let cell = format!(
        "{} ({} total; anonymous {})",
        bytes(grown / count as f64),
        bytes(grown),
        bytes(anon_after as f64 - anon_before as f64)
    );
    (cell, grown)
}

/// Curves against the number of idle legacy sessions and of open listen streams: RSS growth per one.
fn bench_memory(release: &Path, place: Placement, curves: &mut Vec<Curve>) {
    let exe = release.join("mcp-host");
    let plugin = release.join("libfixture_basic.so");
    let columns = TOOL_COUNTS.len();
    let nofile = common::process::raise_nofile();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rt = &rt;
    let mut sessions = Curve::new(
        "memory: server RSS growth with N idle 2025-06-18 HTTP sessions (per session)",
        columns,
    );
    let mut streams = Curve::new(
        "memory: server RSS growth with N open 2026 `subscriptions/listen` streams, a connection each (per stream)",
        columns,
    );
    for count in SESSION_COUNTS {
        let c = column(count);
        let root = tempfile::tempdir().unwrap();
        // Warm-up: the first sessions allocate what every later one reuses.
        let (cell, grown) = rss_growth(&exe, root.path(), &plugin, count, place, |addr| {
            rt.block_on(open_sessions(addr, 10));
            Box::new(move || {
                rt.block_on(open_sessions(addr, count));
                Box::new(()) as Box<dyn Any>
            }) as Step
        });
        sessions.set(c, cell, grown);

        // Each stream holds a socket here and one in the server.
        if (count as u64) + 200 > nofile {
            streams.cells[c] = Some(format!(
                "skipped: RLIMIT_NOFILE hard limit {nofile} < {count} sockets + 200"
            ));
            continue;
        }
        let root = tempfile::tempdir().unwrap();
        let (cell, grown) = rss_growth(&exe, root.path(), &plugin, count, place, |addr| {
            let warm = rt.block_on(open_streams(addr, 10));
            Box::new(move || {
                let open = rt.block_on(open_streams(addr, count));
                Box::new((warm, open)) as Box<dyn Any>
            }) as Step
        });
        streams.set(c, cell, grown);
    }
    curves.extend([sessions, streams]);
}

fn main() {
    let release = common::build_release(&["mcp-host", "fixture-catalog", "fixture-basic"]);
    let place = placement();
    if let Some(cpu) = place.client {
        pin_to(cpu).unwrap();
    }
    let runs = common::report::runs();
    let mut all = Vec::new();
    for run in 0..runs {
        if runs > 1 {
            eprintln!("run {} of {runs}", run + 1);
        }
        let mut curves = Vec::new();
        bench_tools(&release, place, &mut curves);
        bench_plugins(&release, place, &mut curves);
        bench_memory(&release, place, &mut curves);
        all.push(curves.iter().map(Curve::row).collect::<Vec<_>>());
    }
    println!("| curve | 10 | 100 | 1,000 | 10,000 | growth per 10× |");
    println!("|---|---|---|---|---|---|");
    for row in common::report::median_rows(&all) {
        println!("{row}");
    }
    println!();
    if runs > 1 {
        println!("Each figure is the median of {runs} whole runs (`MCP_BENCH_RUNS`).");
    }
    println!(
        "Counts are tools, plugins, sessions or streams as each row says. Server pinned to CPU {}, client to CPU {}; stdio for the tool and plugin curves, HTTP/1.1 on 127.0.0.1 for sessions and streams. Growth per 10×: the figure at one count over the figure at the count before (≈ 10× linear, ≈ 1× flat).",
        place.server.map_or("-".into(), |c| c.to_string()),
        place.client.map_or("-".into(), |c| c.to_string()),
    );
}
