//! Benchmark: what isolating a plugin costs, measured beside the same plugin in-process in one run —
//! the added latency of a call (`Host::call` of the `echo` fixture tool, back to back and with the
//! worker idle in between), a worker's cold start (spawn `mcp-host worker`, load the plugin, manifest
//! back), the time from a crash to the next answer, and the memory of an idle worker.
//!
//! Run: `cargo bench -p mcp-host --bench isolation` (builds the release host and plugins into
//! `target/bench` first). Prints a Markdown table; docs/performance.md quotes it. HTTP throughput through an
//! isolated plugin is in `--bench serve` (section `isolated`).
//!
//! One host serves the same plugin three times, from three tool directories with prefixes: `ip_`
//! in-process, `pr_` with `isolation: process`, `sb_` with `isolation: sandbox`. Rounds alternate
//! the three so drift on a shared machine affects them alike; the median round counts.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::process::status_bytes;
use mcp_host::{CallOptions, Config, Host, HostOptions};
use serde_json::json;

const CALLS: usize = 20_000;
const IDLE_CALLS: usize = 300;
const ROUNDS: usize = 5;
const STARTS: usize = 15;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p / 100.0) as usize).min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Latencies of `n` sequential calls of `tool`, `gap` apart.
fn latencies(
    rt: &tokio::runtime::Runtime,
    host: &Host,
    tool: &str,
    n: usize,
    gap: Duration,
) -> Vec<Duration> {
    let args = json!({"text": "hello"});
    let mut out = Vec::with_capacity(n);
    rt.block_on(async {
        for _ in 0..n {
            let t = Instant::now();
            let r = host
                .call(tool, Some(args.clone()), CallOptions::default())
                .await
                .unwrap();
            out.push(t.elapsed());
            assert_eq!(r["content"][0]["text"], "hello", "{r}");
            if !gap.is_zero() {
                std::thread::sleep(gap);
            }
        }
    });
    out.sort();
    out
}

/// The process ids of this process's children (the workers).
fn children() -> Vec<u32> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    pids
}

fn config(dir: &Path, body: &str) -> Config {
    let file = dir.join("mcp-host.yaml");
    std::fs::write(&file, body).unwrap();
    Config::load_with_env(Some(&file), &[]).unwrap()
}

fn main() {
    let release = common::build_release(&["mcp-host", "fixture-basic", "fixture-crash"]);
    let exe = release.join("mcp-host");
    let options = HostOptions {
        probe_exe: Some(exe.clone()),
        ..HostOptions::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    for d in ["ip", "pr", "sb", "crash"] {
        std::fs::create_dir_all(tmp.path().join(d)).unwrap();
    }
    for d in ["ip", "pr", "sb"] {
        std::fs::copy(
            release.join("libfixture_basic.so"),
            tmp.path().join(d).join("libfixture_basic.so"),
        )
        .unwrap();
    }
    std::fs::copy(
        release.join("libfixture_crash.so"),
        tmp.path().join("crash").join("libfixture_crash.so"),
    )
    .unwrap();
    let cfg = config(
        tmp.path(),
        "probe_cache: false\ntool_dirs:\n  - {path: ip, prefix: ip_}\n  - {path: pr, prefix: pr_, isolation: process}\n  - {path: sb, prefix: sb_, isolation: sandbox}\n  - {path: crash, isolation: process}\nlimits: {max_crashes: 1000, crash_window_secs: 0.001}\n",
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // Started in the runtime's context, as `mcp-host serve` does: workers' channels are read on it.
    let host = {
        let _runtime = rt.enter();
        Host::start(cfg, options.clone()).unwrap()
    };
    // Workers start in discovery order: `pr`, `sb`, then the crash fixture's.
    let mut workers = children();
    workers.sort_unstable();
    assert_eq!(
        workers.len(),
        3,
        "expected three workers, found {workers:?}"
    );

    // 1. Latency per call, back to back (the channel's spin keeps both sides awake) and with the
    //    worker idle for a millisecond before each call (it has blocked: the wake-up is paid).
    let kinds = [
        ("in-process", "ip_echo"),
        ("process", "pr_echo"),
        ("sandbox", "sb_echo"),
    ];
    let mut hot: Vec<Vec<Duration>> = vec![Vec::new(); 3];
    let mut hot99: Vec<Vec<Duration>> = vec![Vec::new(); 3];
    let mut idle: Vec<Vec<Duration>> = vec![Vec::new(); 3];
    for (_, tool) in kinds {
        latencies(&rt, &host, tool, 2_000, Duration::ZERO);
    }
    for round in 0..ROUNDS {
        for (i, (what, tool)) in kinds.iter().enumerate() {
            let l = latencies(&rt, &host, tool, CALLS, Duration::ZERO);
            eprintln!(
                "round {round}: {what}: p50 {}, p99 {}",
                us(percentile(&l, 50.0)),
                us(percentile(&l, 99.0))
            );
            hot[i].push(percentile(&l, 50.0));
            hot99[i].push(percentile(&l, 99.0));
            let l = latencies(&rt, &host, tool, IDLE_CALLS, Duration::from_millis(1));
            idle[i].push(percentile(&l, 50.0));
        }
    }
    let hot: Vec<Duration> = hot.into_iter().map(median).collect();
    let hot99: Vec<Duration> = hot99.into_iter().map(median).collect();
    let idle: Vec<Duration> = idle.into_iter().map(median).collect();

    // 2. Memory of an idle worker (after the calls above).
    let rss: Vec<(u64, u64)> = workers[..2]
        .iter()
        .map(|pid| (status_bytes(*pid, "VmRSS"), status_bytes(*pid, "RssAnon")))
        .collect();

    // 3. Crash → answered again: a segfault, then the next call (waits for the restart; the crash
    //    window is a millisecond, so every crash is a first one and restarts without backoff).
    let mut restarts = Vec::new();
    rt.block_on(async {
        for _ in 0..10 {
            let crash = host
                .call("segfault", None, CallOptions::default())
                .await
                .unwrap();
            assert_eq!(crash["isError"], true);
            let t = Instant::now();
            let r = host
                .call("pid", None, CallOptions::default())
                .await
                .unwrap();
            restarts.push(t.elapsed());
            assert!(r.get("isError").is_none(), "{r}");
        }
    });
    host.shutdown();
    drop(host);

    // 4. Cold start: a host with one plugin, in-process vs in a worker (the probe cache is off, so
    //    both pay the same child-process probe; the difference is the worker's start).
    let one = |iso: &str| {
        let d = tmp.path().join(format!("one-{iso}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(
            release.join("libfixture_basic.so"),
            d.join("libfixture_basic.so"),
        )
        .unwrap();
        config(
            &d,
            &format!(
                "probe_cache: false\ntool_dirs:\n  - {{path: {}, isolation: {iso}}}\n",
                d.display()
            ),
        )
    };
    let (ip_cfg, pr_cfg) = (one("in_process"), one("process"));
    let (mut ip_start, mut pr_start) = (Vec::new(), Vec::new());
    for _ in 0..STARTS {
        let t = Instant::now();
        let h = Host::start(pr_cfg.clone(), options.clone()).unwrap();
        pr_start.push(t.elapsed());
        h.shutdown();
        let t = Instant::now();
        let h = Host::start(ip_cfg.clone(), options.clone()).unwrap();
        ip_start.push(t.elapsed());
        h.shutdown();
    }
    let (ip_start, pr_start) = (median(ip_start), median(pr_start));

    println!("| measurement | in-process | process | sandbox | target | |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| `Host::call` echo, back to back: p50 (p99) | {} ({}) | {} ({}) | {} ({}) | | |",
        us(hot[0]),
        us(hot99[0]),
        us(hot[1]),
        us(hot99[1]),
        us(hot[2]),
        us(hot99[2])
    );
    let added = |i: usize| hot[i].saturating_sub(hot[0]);
    println!(
        "| added latency per call, p50 | — | {} | {} | < 25 µs | {} |",
        us(added(1)),
        us(added(2)),
        if added(1) < Duration::from_micros(25) && added(2) < Duration::from_micros(25) {
            "met"
        } else {
            "**missed**"
        }
    );
    println!(
        "| `Host::call` echo, worker idle 1 ms before each call: p50 | {} | {} | {} | | |",
        us(idle[0]),
        us(idle[1]),
        us(idle[2])
    );
    println!(
        "| worker cold start (`Host::start` of one plugin, process minus in-process: {} − {}) | — | {} | | < 20 ms | {} |",
        ms(pr_start),
        ms(ip_start),
        ms(pr_start.saturating_sub(ip_start)),
        if pr_start.saturating_sub(ip_start) < Duration::from_millis(20) {
            "met"
        } else {
            "**missed**"
        }
    );
    println!(
        "| segfault → next call answered by a new worker (median of 10, no backoff) | — | {} | | | |",
        ms(median(restarts))
    );
    let mb = |b: u64| format!("{:.1} MB", b as f64 / (1024.0 * 1024.0));
    println!(
        "| RSS of an idle worker (anonymous part) | — | {} ({}) | {} ({}) | | |",
        mb(rss[0].0),
        mb(rss[0].1),
        mb(rss[1].0),
        mb(rss[1].1)
    );
}
