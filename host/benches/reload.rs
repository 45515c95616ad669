//! Benchmark: hot reload latency and memory. A release `mcp-host serve --stdio` watches a temporary
//! tool directory; the benchmark replaces the plugin file there again and again, alternating two
//! release builds (`fixture-basic`, whose `echo` answers `hello`, and `fixture-override`, whose
//! `echo` answers `override: hello`) and two ways: atomically (a copy under a temporary name, then a
//! rename) and in place (a copy over the file, as `cp` does). Each change is timed from the moment
//! the new file is complete (the rename, or the copy's end) until a `tools/call echo` answers with
//! the new version; changes are spaced well past the watcher's burst window, as a developer's
//! rebuilds are. The host's resident set size is read before and after, since plugin images are
//! never unloaded.
//!
//! Run: `cargo bench -p mcp-host --bench reload` (builds the release host and both fixtures into
//! `target/bench` first). Prints a Markdown table.
//!
//! Environment: `MCP_BENCH_RELOADS` (replacements, default 30).

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The watcher's quiet period for files still being written and for bursts
/// (`mcp_host::host::watch::DEBOUNCE`): changes are spaced further apart than this.
const DEBOUNCE: Duration = mcp_host::host::watch::DEBOUNCE;
/// The watcher's settling time after a complete change (`mcp_host::host::watch::SETTLE`),
/// included in every latency.
const SETTLE: Duration = mcp_host::host::watch::SETTLE;
/// The latency target.
const TARGET: Duration = Duration::from_millis(60);
/// Longest wait for any single step (start-up, one answer, one reload).
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the client asks whether the new version is serving.
const POLL: Duration = Duration::from_millis(1);

fn build_release() -> PathBuf {
    common::build_release(&["mcp-host", "fixture-basic", "fixture-override"])
}

/// `mcp-host serve --stdio`, killed and reaped when dropped (also on panic).
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    log: Arc<Mutex<Vec<String>>>,
    next_id: u64,
}

impl Server {
    fn start(exe: &Path, config: &Path) -> Server {
        let mut cmd = Command::new(exe);
        cmd.arg("--config")
            .arg(config)
            .args(["serve", "--stdio"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("MCP_") {
                cmd.env_remove(k);
            }
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let log = Arc::new(Mutex::new(Vec::new()));
        {
            // Drain stderr for the whole life of the child so its pipe never fills.
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    log.lock().unwrap().push(line);
                }
            });
        }
        Server {
            child,
            stdin,
            lines,
            log,
            next_id: 0,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// A 2026-07-28 `tools/call echo` with `text`; the answer's text.
    fn echo(&mut self, text: &str) -> String {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": {
                "name": "echo",
                "arguments": { "text": text },
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        });
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|e| {
                panic!("no answer to echo ({e}); log:\n{}", self.log().join("\n"))
            });
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_else(|| panic!("not an echo result: {message}"))
                    .to_owned();
            }
            // Anything else is a notification (`tools/list_changed` is only sent to sessions).
        }
    }

    /// `VmRSS`, `RssAnon` and `RssFile` in bytes.
    fn memory(&self) -> Memory {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .map(|kb| kb * 1024)
                .unwrap_or_else(|| panic!("no {name} in /proc/{}/status", self.pid()))
        };
        Memory {
            rss: field("VmRSS:"),
            anon: field("RssAnon:"),
            file: field("RssFile:"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy)]
struct Memory {
    rss: u64,
    anon: u64,
    file: u64,
}

/// Nearest-rank percentile `p` (0..=100) of `v`.
fn percentile(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn mb(bytes: f64) -> String {
    format!("{:.2} MB", bytes / (1024.0 * 1024.0))
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

fn main() {
    let reloads: usize = std::env::var("MCP_BENCH_RELOADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(30);
    let release = build_release();
    let exe = release.join("mcp-host");
    let builds = [
        (release.join("libfixture_override.so"), "override: hello"),
        (release.join("libfixture_basic.so"), "hello"),
    ];

    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let plugin = tools.join("libplug.so");
    let staged = tools.join(".libplug.so.tmp");
    std::fs::copy(&builds[1].0, &plugin).unwrap();
    let config = dir.path().join("mcp-host.yaml");
    std::fs::write(&config, format!("tool_dirs: [{}]\n", tools.display())).unwrap();

    let mut server = Server::start(&exe, &config);
    assert_eq!(server.echo("hello"), "hello");
    // Let start-up allocations settle before the first reading.
    std::thread::sleep(Duration::from_millis(300));
    let before = server.memory();

    // Even changes are renames, odd ones copies in place.
    let mut renames = Vec::with_capacity(reloads);
    let mut copies = Vec::with_capacity(reloads);
    for i in 0..reloads {
        let (build, expected) = &builds[i % 2];
        let complete = if i % 2 == 0 {
            // The staging copy is not timed: only the rename is the moment the new version exists.
            std::fs::copy(build, &staged).unwrap();
            let renamed = Instant::now();
            std::fs::rename(&staged, &plugin).unwrap();
            renamed
        } else {
            std::fs::copy(build, &plugin).unwrap();
            Instant::now()
        };
        loop {
            if server.echo("hello") == *expected {
                let took = complete.elapsed();
                if i % 2 == 0 {
                    renames.push(took);
                } else {
                    copies.push(took);
                }
                break;
            }
            assert!(
                complete.elapsed() < STEP_TIMEOUT,
                "replacement {i} never served; log:\n{}",
                server.log().join("\n")
            );
            std::thread::sleep(POLL);
        }
        // Let the rescan finish and drop the previous version, and leave the burst window: the next
        // change is a change of its own.
        std::thread::sleep(DEBOUNCE * 2);
    }
    let latencies: Vec<Duration> = renames.iter().chain(&copies).copied().collect();
    std::thread::sleep(Duration::from_millis(300));
    let after = server.memory();
    let log = server.log();
    let reloaded = log.iter().filter(|l| l.contains("Reloaded plugin")).count();
    let errors: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("ERROR") || l.contains("Error loading"))
        .collect();
    assert!(errors.is_empty(), "the host logged errors: {errors:#?}");

    let median = percentile(&latencies, 50.0);
    let p95 = percentile(&latencies, 95.0);
    let max = percentile(&latencies, 100.0);
    let min = percentile(&latencies, 0.0);
    let per_reload = |a: u64, b: u64| (b as f64 - a as f64) / reloads as f64;
    let size = |p: &Path| std::fs::metadata(p).unwrap().len() as f64;

    println!("| figure | result | target |");
    println!("|---|---|---|");
    println!(
        "| file change → `echo` answers with the new version, median of {reloads} | {} | < {} ({}; {} settling included) |",
        ms(median),
        ms(TARGET),
        verdict(median < TARGET),
        ms(SETTLE)
    );
    println!("| same, p95 | {} | |", ms(p95));
    println!("| same, min / max | {} / {} | |", ms(min), ms(max));
    println!(
        "| rename into place, median of {} | {} | |",
        renames.len(),
        ms(percentile(&renames, 50.0))
    );
    println!(
        "| copy in place (`cp`: written, then closed), median of {} | {} | |",
        copies.len(),
        ms(percentile(&copies, 50.0))
    );
    println!("| reloads logged for {reloads} replacements | {reloaded} | {reloads} |");
    println!(
        "| RSS after start-up (1 plugin) | {} | |",
        mb(before.rss as f64)
    );
    println!(
        "| RSS after {reloads} reloads | {} | |",
        mb(after.rss as f64)
    );
    println!(
        "| RSS growth per reload (VmRSS) | {} | ≈ 0.5 MB per release plugin image (the issue's estimate) |",
        mb(per_reload(before.rss, after.rss))
    );
    println!(
        "| of which anonymous / file-backed | {} / {} | |",
        mb(per_reload(before.anon, after.anon)),
        mb(per_reload(before.file, after.file))
    );
    println!(
        "| release plugin files (basic / override) | {} / {} | |",
        mb(size(&builds[1].0)),
        mb(size(&builds[0].0))
    );
    println!();
    println!(
        "Each replacement copies the other build to a temporary name in the tool directory (not timed), then renames it over the plugin; the client polls `tools/call echo` over stdio every {} ms until the answer changes. RSS from /proc/PID/status, {} ms after the last reload.",
        POLL.as_millis(),
        300
    );
}
