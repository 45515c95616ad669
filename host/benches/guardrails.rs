//! Benchmark: what the guardrails on results add to a tool call — with none configured (the check
//! every call makes: the compiled guardrails' plan and the policy's "any result rules?"), and with
//! every detector on (`flag`) over a 1 KB and a 64 KB result: a plugin's result (JSON text,
//! parsed into a tree for the scan and kept as it was when nothing is found) and an upstream's (a
//! tree already), in text content or in `structuredContent`, clean or with findings redacted.
//! The text is ordinary tool output — prose, paths, numbers, dates, UUIDs, hex hashes — so the
//! detectors' candidates (digits, long tokens) are there and get checked.
//!
//! Run: `cargo bench -p mcp-host --bench guardrails`. Prints a Markdown table (median of 7 batches
//! per row); docs/performance.md quotes it. Target (issue 54): a 64 KB result scanned in well
//! under a millisecond; nothing added when no guardrail is configured.

#![allow(clippy::unwrap_used)]

/// The host's allocator (mimalloc), so allocation costs what it costs in `mcp-host`.
#[path = "../src/allocator.rs"]
mod allocator;

#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use mcp_host::config::{GuardAction, Guardrails as Settings, PolicySettings};
use mcp_host::exec::ToolResult;
use mcp_host::policy::Policy;
use mcp_host::policy::guardrails::{CallSite, Guardrails, Plan, scan};
use serde_json::{Value, json};

/// Lines of ordinary tool output, repeated to the size wanted.
const LINES: &[&str] = &[
    "Build 4182 finished in 37.2 s on runner eu-west-3 (commit 3f2a6c1d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a49).",
    "Wrote /var/lib/app/releases/2026-12-07/bundle.tar.gz (18,442,112 bytes).",
    "Request 123e4567-e89b-12d3-a456-426614174000 took 212 ms; 3 retries, status 200.",
    "The quick brown fox jumps over the lazy dog while the tests run again.",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 matches.",
    "Invoice total: 1,249.90 EUR, due on 2027-01-15, order #88213.",
];

/// About `bytes` of text, made of [`LINES`].
fn text(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 128);
    for line in LINES.iter().cycle() {
        if out.len() >= bytes {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `text` with a finding every `every` lines: an e-mail and an AWS key, alternately.
fn with_findings(text: &str, every: usize) -> String {
    let mut out = String::with_capacity(text.len() + 1024);
    for (i, line) in text.lines().enumerate() {
        out.push_str(line);
        if i % every == 0 {
            out.push_str(if i % (2 * every) == 0 {
                " Contact ana.lopez@example.org."
            } else {
                " key AKIAIOSFODNN7EXAMPLE"
            });
        }
        out.push('\n');
    }
    out
}

/// A result with `text` as its text content.
fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// A result whose `structuredContent` holds `text`'s lines as rows (and a short text content).
fn structured_result(text: &str) -> Value {
    let rows: Vec<Value> = text
        .lines()
        .enumerate()
        .map(|(i, line)| json!({"id": i, "line": line, "ok": i % 3 != 0}))
        .collect();
    json!({"content": [{"type": "text", "text": "rows attached"}], "structuredContent": {"rows": rows}})
}

/// Every detector at `action`.
fn plan(action: GuardAction) -> Plan {
    let settings: Settings = serde_json::from_value(json!({"detect": {
        "credentials": action, "personal_data": action, "injection": action
    }}))
    .unwrap();
    let compiled = Guardrails::compile(&settings, BTreeMap::new().iter(), BTreeMap::new().iter());
    compiled.plan(site()).unwrap()
}

fn site() -> CallSite<'static> {
    CallSite {
        tool: "echo",
        source_tool: "echo",
        source: "fixture-basic",
        agent: None,
    }
}

/// Nanoseconds per run of `f`: the median of 7 batches of `iterations`.
fn per_run(iterations: u32, mut f: impl FnMut()) -> f64 {
    let mut batches: Vec<Duration> = (0..7)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iterations {
                f();
            }
            start.elapsed()
        })
        .collect();
    batches.sort();
    batches[3].as_nanos() as f64 / f64::from(iterations)
}

/// A plugin's result (`json`) through the guardrails as the call path runs them: checked,
/// parsed, scanned.
fn plugin_path(json: &str, plan: &Plan) -> usize {
    let result = ToolResult::from_plugin(json.to_owned()).unwrap();
    let mut found = 0;
    let result = result.inspect(|value| {
        let (findings, changed) = scan(value, plan, false);
        found = findings.0.len();
        changed
    });
    black_box(result);
    found
}

/// An upstream's result (a tree) through the guardrails (scanned in place: a `flag` plan
/// changes nothing, so every run scans the same tree).
fn upstream_path(tree: &mut Value, plan: &Plan) -> usize {
    let (findings, _) = scan(tree, plan, false);
    findings.0.len()
}

fn print(row: &str, size: usize, found: usize, ns: f64) {
    let kb = size as f64 / 1024.0;
    println!(
        "| {row} | {kb:.0} KB | {found} | {:.1} µs | {:.2} µs |",
        ns / 1000.0,
        ns / 1000.0 / kb
    );
}

fn main() {
    println!("| result | size | detectors that found | per call | per KB |");
    println!("|---|---|---|---|---|");
    // None configured: what every call pays.
    let none = Guardrails::compile(
        &Settings::default(),
        BTreeMap::new().iter(),
        BTreeMap::new().iter(),
    );
    let policy = Policy::compile(&PolicySettings::default()).unwrap();
    let ns = per_run(1_000_000, || {
        black_box(black_box(&none).plan(black_box(site())));
        black_box(black_box(&policy).polices_results());
    });
    println!("| none configured (the check per call) | any | - | {ns:.1} ns | - |");
    let flag = plan(GuardAction::Flag);
    let redact = plan(GuardAction::Redact);
    for size in [1024, 64 * 1024] {
        let iterations = if size > 4096 { 200 } else { 5_000 };
        let clean = text(size);
        for (shape, mut tree) in [
            ("text content", text_result(&clean)),
            ("structuredContent", structured_result(&clean)),
        ] {
            let json = tree.to_string();
            let found = plugin_path(&json, &flag);
            let ns = per_run(iterations, || {
                black_box(plugin_path(black_box(&json), &flag));
            });
            print(
                &format!("plugin, {shape}, all detectors, clean"),
                json.len(),
                found,
                ns,
            );
            let found = upstream_path(&mut tree, &flag);
            let ns = per_run(iterations, || {
                black_box(upstream_path(black_box(&mut tree), &flag));
            });
            print(
                &format!("upstream, {shape}, all detectors, clean"),
                json.len(),
                found,
                ns,
            );
        }
        let dirty = text_result(&with_findings(&clean, 8)).to_string();
        let found = plugin_path(&dirty, &redact);
        let ns = per_run(iterations, || {
            black_box(plugin_path(black_box(&dirty), &redact));
        });
        print(
            "plugin, text content, all detectors, redacting (a finding every 8 lines)",
            dirty.len(),
            found,
            ns,
        );
    }
}
