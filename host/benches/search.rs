//! Benchmark: tool search over a thousand tools — fixture-catalog (release) copied into twenty tool
//! directories under twenty prefixes, 50 tools each — and what search mode saves in `tools/list`.
//!
//! Measures: the bytes (and ~tokens, at 4 bytes a token) of the full `tools/list` against the
//! search-mode list; building the BM25 index; one search (`ToolIndex::search`, top 5) over 20
//! queries, p50 and p99 over many runs; and a whole `tools/call search_tools` round trip over stdio
//! (`serve --stdio --agent finder`, one request at a time) against a direct `tools/call` of a catalog
//! tool on the same server.
//!
//! Run: `cargo bench -p mcp-host --bench search`. Prints a Markdown table; docs/performance.md quotes it.

#![allow(clippy::unwrap_used)]

mod common;

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_host::{Config, Host, HostOptions};
use serde_json::{Value, json};

const COPIES: usize = 20;
const PER_COPY: usize = 50;

const QUERIES: [&str; 20] = [
    "write a short summary of a card payment",
    "list the customer invoices",
    "archive an old support ticket",
    "export every project plan as csv",
    "import contacts from a csv file",
    "find a pull request by its reviewers",
    "approve a pending email",
    "restore a deleted shipment",
    "count the monitoring metrics",
    "merge two duplicate orders",
    "assign a report to a teammate",
    "schedule a reminder about a spreadsheet",
    "translate a repository's text",
    "validate a ticket for missing fields",
    "notify the owner of a project",
    "compare two versions of a subscription plan",
    "delete a user account permanently",
    "search the application log entries",
    "which edition of the catalog is installed",
    "update a calendar event's attendees",
];

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Twenty catalog copies under twenty prefixes, and an agent `finder` in search mode; the
/// configuration file.
fn layout(root: &Path, plugin: &Path) -> std::path::PathBuf {
    let mut dirs = Vec::new();
    for i in 0..COPIES {
        let dir = root.join(format!("c{i:02}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::copy(plugin, dir.join("libfixture_catalog.so")).unwrap();
        dirs.push(format!("{{path: c{i:02}, prefix: s{i:02}_}}"));
    }
    let config_file = root.join("mcp-host.yaml");
    std::fs::write(
        &config_file,
        format!(
            "tool_dirs: [{}]\nprobe_cache: false\nplugins:\n  fixture-catalog:\n    config: {{count: {}}}\nagents:\n  finder:\n    tools: search\n",
            dirs.join(", "),
            PER_COPY - 1
        ),
    )
    .unwrap();
    config_file
}

/// Sorted times of building the index, and of single searches (top 5) over [`QUERIES`].
fn in_process(registry: &mcp_host::registry::Registry) -> (Vec<Duration>, Vec<Duration>) {
    let mut builds = Vec::new();
    for _ in 0..9 {
        let t = Instant::now();
        black_box(mcp_host::registry::search::ToolIndex::build(
            registry.tools(),
        ));
        builds.push(t.elapsed());
    }
    builds.sort();
    let index = registry.search_index();
    let mut runs = Vec::new();
    for _ in 0..200 {
        for q in QUERIES {
            let t = Instant::now();
            black_box(index.search(black_box(q), 5, |_| true));
            runs.push(t.elapsed());
        }
    }
    runs.sort();
    (builds, runs)
}

fn main() {
    let release = common::build_release(&["mcp-host", "fixture-catalog"]);
    let exe = release.join("mcp-host");
    let root = tempfile::tempdir().unwrap();
    let config_file = layout(root.path(), &release.join("libfixture_catalog.so"));
    let config = Config::load_with_env(Some(&config_file), &[]).unwrap();
    let host = Host::start(
        config,
        HostOptions {
            probe_exe: Some(exe.clone()),
            ..HostOptions::default()
        },
    )
    .unwrap();
    let registry = host.registry();
    assert_eq!(registry.len(), COPIES * PER_COPY);
    let (builds, runs) = in_process(&registry);
    let full_bytes = list_bytes(&exe, &config_file, None);
    let search_bytes = list_bytes(&exe, &config_file, Some("finder"));
    let (search_rt, direct_rt) = round_trips(&exe, &config_file);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "| measurement ({} tools in {COPIES} plugins) | result |",
        COPIES * PER_COPY
    );
    println!("|---|---|");
    println!(
        "| `tools/list`, every page (no agent) | {full_bytes} bytes (~{} tokens) |",
        full_bytes / 4
    );
    println!(
        "| `tools/list` in search mode | {search_bytes} bytes (~{} tokens): {:.2}% of the full list |",
        search_bytes / 4,
        search_bytes as f64 * 100.0 / full_bytes as f64
    );
    println!(
        "| build the search index | {:.1} ms (median of 9) |",
        ms(percentile(&builds, 0.5))
    );
    println!(
        "| one search, top 5 (`ToolIndex::search`, 20 queries × 200) | p50 {:.1} µs, p99 {:.1} µs |",
        us(percentile(&runs, 0.5)),
        us(percentile(&runs, 0.99))
    );
    println!(
        "| `tools/call search_tools` over stdio, one at a time | p50 {:.1} µs, p99 {:.1} µs |",
        us(percentile(&search_rt, 0.5)),
        us(percentile(&search_rt, 0.99))
    );
    println!(
        "| direct `tools/call` of a catalog tool, same server | p50 {:.1} µs, p99 {:.1} µs |",
        us(percentile(&direct_rt, 0.5)),
        us(percentile(&direct_rt, 0.99))
    );
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// `serve --stdio` (as `agent`), its stdin and its stdout lines.
fn serve(
    exe: &Path,
    config: &Path,
    agent: Option<&str>,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    BufReader<std::process::ChildStdout>,
) {
    let mut cmd = Command::new(exe);
    cmd.arg("--config")
        .arg(config)
        .args(["serve", "--stdio", "--no-watch"]);
    if let Some(a) = agent {
        cmd.args(["--agent", a]);
    }
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, stdin, out)
}

/// The bytes of every page of `tools/list` as `agent` sees it.
fn list_bytes(exe: &Path, config: &Path, agent: Option<&str>) -> usize {
    let (mut child, mut stdin, mut out) = serve(exe, config, agent);
    let (mut bytes, mut cursor, mut id) = (0, None::<String>, 0);
    loop {
        id += 1;
        let mut params = json!({ "_meta": meta() });
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params});
        writeln!(stdin, "{req}").unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        bytes += line.trim_end().len();
        let v: Value = serde_json::from_str(&line).unwrap();
        match v["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    drop(stdin);
    child.wait().unwrap();
    bytes
}

/// Sorted round-trip times of `search_tools` and of a direct call, alternating, one at a time.
fn round_trips(exe: &Path, config: &Path) -> (Vec<Duration>, Vec<Duration>) {
    let (mut child, mut stdin, mut out) = serve(exe, config, Some("finder"));
    let meta = meta();
    let mut round_trip = |id: u64, name: &str, arguments: Value| -> Duration {
        let req = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": meta}});
        let t = Instant::now();
        writeln!(stdin, "{req}").unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let elapsed = t.elapsed();
        assert!(line.contains("\"content\""), "{line}");
        elapsed
    };
    let (mut search, mut direct) = (Vec::new(), Vec::new());
    let mut id = 0;
    for _ in 0..50 {
        for q in QUERIES {
            id += 1;
            search.push(round_trip(id, "search_tools", json!({"query": q})));
            id += 1;
            direct.push(round_trip(id, "s03_list_invoice", json!({"id": "A-1"})));
        }
    }
    drop(stdin);
    child.wait().unwrap();
    search.sort();
    direct.sort();
    (search, direct)
}
