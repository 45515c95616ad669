//! Soak-and-fault run: every part of mcp-host at once, for a long time, under injected faults,
//! with an oracle for every answer and accounting of every host process's resources.
//!
//! Run: `cargo bench -p mcp-host --bench soak` (30 minutes), or the CI profile
//! `MCP_SOAK_PROFILE=ci cargo bench -p mcp-host --bench soak` (3 minutes). `MCP_SOAK_SECS` sets
//! any other length. It builds the release host and the fixture plugins into `target/bench` (or
//! `MCP_BENCH_TARGET_DIR`, as the other benches), then runs, together:
//!
//! - a real Redis, three `mcp-host serve` replicas sharing it behind a real nginx (plain round
//!   robin; the fleet helpers of `mcp-host-tests`), each serving fixture-basic and
//!   fixture-conformance in process, fixture-override in a sandboxed worker (`w_*`), the hostile
//!   upstream fixture in its well-behaved mode over stdio (`us_*`) and over Streamable HTTP
//!   (`uh_*`), and a call policy (a deny rule, a budget on `greet`);
//! - clients (`soak/load.rs`): 2026-07-28 stateless calls at a steady rate and in bursts, 2025
//!   legacy sessions, tasks created, polled, cancelled and read, nested calls (`shout` calls
//!   `echo`; the worker's `w_wrap_count` calls `count` through the host), both upstreams, the
//!   budgeted caller, and a stdio client of a fourth host on the SQLite store;
//! - faults on a schedule (`soak/faults.rs`), each logged with its window;
//! - samples every few seconds (`soak/sample.rs`) of each host process and its children.
//!
//! The run fails (exit 1) when the oracle (`soak/verdict.rs`) finds a wrong answer, a call that
//! failed outside a fault window (plus [`verdict::GRACE`]) or with an error that is not
//! retryable, a task that did not end as asked (a task a store or replica fault overlapped may
//! end `failed` or be forgotten by a restarted Redis without persistence), a budget that admitted
//! too much or refused nothing, a hostile request answered with a 5xx, a host process gone, p99
//! outside fault windows over `MCP_SOAK_MAX_P99_MS` (default 2000), or resources that grow over
//! the second half (a least-squares fit: resident memory over max(16 MiB, 10 %), threads over 4,
//! file descriptors or sockets over 16). The report goes to `target/soak/` (report.md,
//! timeline.csv, samples.csv, faults.csv). docs/reliability.md has the figures.

#![allow(clippy::unwrap_used)]
// Signals (kill(2)) and the helpers of `common::process` go through libc.
#![allow(unsafe_code)]

mod common;
#[path = "soak/faults.rs"]
mod faults;
#[path = "soak/journal.rs"]
mod journal;
#[path = "soak/load.rs"]
mod load;
#[path = "soak/sample.rs"]
mod sample;
#[path = "soak/verdict.rs"]
mod verdict;
#[path = "soak/world.rs"]
mod world;

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use journal::Journal;
use load::{Conn, Run};
use sample::Sample;
use world::World;

/// Every tool the clients call: the fleet serves them all before the run starts.
const TOOLS: &[&str] = &[
    "echo",
    "shout",
    "w_echo",
    "w_wrap_count",
    "us_echo",
    "us_add",
    "uh_echo",
    "uh_add",
    "greet",
    "slow_compute",
];
/// How often the resources are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(3);

fn run_secs() -> u64 {
    if let Some(s) = std::env::var("MCP_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return s;
    }
    match std::env::var("MCP_SOAK_PROFILE").as_deref() {
        Ok("ci") => 180,
        _ => 1800,
    }
}

fn main() {
    let secs = run_secs();
    let release = common::build_release(&[
        "mcp-host",
        "fixture-basic",
        "fixture-conformance",
        "fixture-override",
    ]);
    let Some(mut world) = World::start(&release) else {
        assert!(
            std::env::var_os("MCP_TEST_REQUIRE_CLIENTS").is_none(),
            "redis-server or nginx missing"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for r in &world.replicas {
        rt.block_on(wait_for_tools(std::net::SocketAddr::from((
            [127, 0, 0, 1],
            r.port,
        ))));
    }
    eprintln!("soak: the fleet serves every tool; running for {secs} s");
    let journal = Arc::new(Journal::new());
    let run = Arc::new(Run {
        journal: Arc::clone(&journal),
        stop: AtomicBool::new(false),
        counter: AtomicU64::new(1),
        front: world.nginx.addr(),
    });
    let clients = start_clients(&rt, &run, &mut world);
    let total = Duration::from_secs(secs);
    let plan = faults::schedule(
        total,
        Duration::from_secs(15).min(total / 6),
        Duration::from_secs(45).min(total / 4),
    );
    let samples = drive(&mut world, &journal, &plan, total);
    run.stop.store(true, Ordering::Relaxed);
    eprintln!("soak: stopping the clients");
    let (handles, stdio) = clients;
    rt.block_on(async {
        for h in handles {
            let _ = tokio::time::timeout(Duration::from_secs(120), h).await;
        }
    });
    let stdio_alive = stdio.join().unwrap_or(false);
    let mut alive = alive(&mut world);
    if !stdio_alive {
        alive.push("the stdio host exited during the run".into());
    }
    let failed = report(&journal, &samples, secs as f64, &plan, alive);
    drop(world);
    rt.shutdown_timeout(Duration::from_secs(5));
    if failed {
        std::process::exit(1);
    }
}

/// Ask `tools/list` of a replica until it serves every tool the clients call (the upstreams
/// connect in the background).
async fn wait_for_tools(front: std::net::SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut conn = Conn::new(front);
    loop {
        let req = load::modern_request(front, 1, "tools/list", json!({}));
        let mut served = Vec::new();
        if let Ok((200, _, body)) = conn.send(&req).await {
            let m: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            served = m["result"]["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect();
        }
        if TOOLS.iter().all(|t| served.iter().any(|s| s == t)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet did not serve {TOOLS:?} within 120 s: {served:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

type Clients = (
    Vec<tokio::task::JoinHandle<()>>,
    std::thread::JoinHandle<bool>,
);

fn start_clients(rt: &tokio::runtime::Runtime, run: &Arc<Run>, world: &mut World) -> Clients {
    let ms = Duration::from_millis;
    let mut h = Vec::new();
    for _ in 0..4 {
        h.push(rt.spawn(load::steady(Arc::clone(run), ms(25))));
    }
    h.push(rt.spawn(load::bursty(Arc::clone(run), ms(5000), 8, 10)));
    for _ in 0..2 {
        h.push(rt.spawn(load::legacy(Arc::clone(run), ms(50))));
    }
    h.push(rt.spawn(load::budgeted(Arc::clone(run), ms(200))));
    h.push(rt.spawn(load::tasks(Arc::clone(run), ms(1000))));
    // The stdio host belongs to its client thread for the run.
    let config = world.files.stdio_config();
    let state = world.files.path("stdio-state-client");
    let mut host = world::StdioHost::start(&world.exe, &config, &state);
    world.stdio_pid = Some(host.child.id());
    let run = Arc::clone(run);
    let stdio = std::thread::spawn(move || load::stdio(run, &mut host, ms(20)));
    (h, stdio)
}

/// Inject the faults as planned until `total` has passed, while a thread samples the resources.
fn drive(
    world: &mut World,
    j: &Arc<Journal>,
    plan: &[(Duration, &'static str)],
    total: Duration,
) -> Vec<Sample> {
    let start = j.start;
    let watched = Arc::new(std::sync::Mutex::new(pids(world)));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (watched, done, j) = (Arc::clone(&watched), Arc::clone(&done), Arc::clone(j));
        let (redis_port, sqlite) = (world.redis.port, world.files.path("stdio-state-client"));
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let procs = watched.lock().unwrap().clone();
                sample_all(&procs, redis_port, &sqlite, j.now(), &mut samples);
                eprintln!("[{:7.1}s] {} calls", j.now(), j.calls_so_far());
                std::thread::sleep(SAMPLE_EVERY);
            }
            samples
        })
    };
    for (at, name) in plan {
        if let Some(wait) = (start + *at).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        faults::inject(name, world, j);
        *watched.lock().unwrap() = pids(world);
    }
    if let Some(wait) = (start + total).checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap()
}

/// The host processes to sample: each replica (alone, and with its workers and upstreams), the
/// stdio host.
fn pids(world: &mut World) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = world
        .replicas
        .iter_mut()
        .filter_map(|r| Some((r.name.clone(), r.pid()?)))
        .collect();
    out.extend(world.stdio_pid.map(|p| ("stdio".to_owned(), p)));
    out
}

fn sample_all(
    procs: &[(String, u32)],
    redis_port: u16,
    sqlite: &Path,
    at: f64,
    out: &mut Vec<Sample>,
) {
    for (name, pid) in procs {
        out.extend(sample::of_process(at, name, *pid));
        if name != "stdio" {
            out.extend(sample::with_children(at, &format!("{name}+children"), *pid));
        }
    }
    let store = |what: &str, v: u64| Sample {
        at,
        what: what.into(),
        pid: 0,
        rss_kb: v,
        threads: 0,
        fds: 0,
        sockets: 0,
    };
    if let Some(keys) = sample::redis_keys(redis_port) {
        out.push(store("redis-keys", keys));
    }
    out.push(store("sqlite-bytes", sample::dir_bytes(sqlite)));
}

/// Which host processes are gone at the end (a crash nobody asked for).
fn alive(world: &mut World) -> Vec<String> {
    let mut gone = Vec::new();
    for r in &mut world.replicas {
        if let Some(s) = r.server.as_mut()
            && s.child().exited()
        {
            gone.push(format!(
                "replica {} exited: {}",
                r.name,
                s.stderr()
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    gone
}

/// Judge the run, write `target/soak/`, print the report; whether the run failed.
fn report(
    j: &Journal,
    samples: &[Sample],
    secs: f64,
    plan: &[(Duration, &str)],
    gone: Vec<String>,
) -> bool {
    let (calls, tasks, fault_log, budget, hostile) = j.take();
    let bounds = verdict::Bounds {
        p99_ms: std::env::var("MCP_SOAK_MAX_P99_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2000.0),
        rss_kb: 16.0 * 1024.0,
        rss_fraction: 0.10,
        threads: 4.0,
        fds: 16.0,
        sockets: 16.0,
    };
    let mut f = verdict::Findings::default();
    let (p50, p99) = verdict::judge_calls(&calls, &fault_log, &bounds, &mut f);
    let (right, excused, lost) = verdict::judge_tasks(&tasks, &fault_log, &mut f);
    let allowed = verdict::judge_budget(&budget, secs, &fault_log, &mut f);
    verdict::judge_resources(samples, secs, &bounds, &mut f);
    for h in hostile {
        f.failures.push(format!("HOSTILE {h}"));
    }
    for g in gone {
        f.failures.push(format!("GONE {g}"));
    }
    if fault_log.len() < plan.len() {
        f.failures.push(format!(
            "only {} of {} faults injected",
            fault_log.len(),
            plan.len()
        ));
    }
    let mut md = String::new();
    let ok = calls.iter().filter(|c| c.outcome.is_ok()).count();
    let _ = writeln!(
        md,
        "# Soak run\n\n{secs:.0} s, {} calls ({ok} answered right, {} failed), {:.0} calls/s; p50 {p50:.1} ms, p99 {p99:.1} ms outside fault windows.\n",
        calls.len(),
        calls.len() - ok,
        calls.len() as f64 / secs
    );
    let mut by_client: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for c in &calls {
        let e = by_client.entry(c.client).or_default();
        e.0 += 1;
        e.1 += usize::from(c.outcome.is_err());
    }
    let _ = writeln!(md, "| client | calls | failed |\n|---|---|---|");
    for (c, (n, failed)) in &by_client {
        let _ = writeln!(md, "| {c} | {n} | {failed} |");
    }
    let _ = writeln!(
        md,
        "\nTasks: {} ({right} ended as asked, {excused} ended failed or forgotten under a store or replica fault, {lost} lost or wrong); {} answered inline while the store was unreachable (documented for optional-task tools).",
        tasks.len(),
        tasks.iter().filter(|t| t.end.starts_with("inline")).count()
    );
    let _ = writeln!(
        md,
        "Budget `greets`: {} admitted (at most {allowed} allowed), {} refused.",
        budget.admitted, budget.refused
    );
    let _ = writeln!(
        md,
        "\nFaults ({}):\n\n| start (s) | end (s) | fault | excuses | note |\n|---|---|---|---|---|",
        fault_log.len()
    );
    for x in &fault_log {
        let _ = writeln!(
            md,
            "| {:.1} | {:.1} | {} | {} | {} |",
            x.start,
            x.end,
            x.name,
            x.excuses,
            x.note.chars().take(200).collect::<String>()
        );
    }
    md.push_str(&f.lines);
    let verdict = if f.failures.is_empty() {
        "PASSED".to_owned()
    } else {
        format!("FAILED:\n\n- {}", f.failures.join("\n- "))
    };
    let _ = writeln!(md, "\n## Verdict\n\n{verdict}");
    let dir = common_target().join("soak");
    verdict::write(&dir, "report.md", &md);
    verdict::write(&dir, "timeline.csv", &verdict::timeline(&calls));
    verdict::write(&dir, "samples.csv", &verdict::samples_csv(samples));
    verdict::write(&dir, "faults.csv", &verdict::faults_csv(&fault_log));
    verdict::write(&dir, "failures.csv", &verdict::failures_csv(&calls));
    println!("{md}\n(report in {})", dir.display());
    !f.failures.is_empty()
}

/// The workspace's `target/` (where `target/soak/` goes, whatever `CARGO_TARGET_DIR` says).
fn common_target() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}
