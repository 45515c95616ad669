//! Benchmark: discovery + child-process probe + load of 100 plugins (also with every signature
//! checked, as under `require_signature`), and the cost of one trivial call through the plugin ABI
//! against the same work done by a direct Rust call.
//!
//! Run: `cargo bench -p mcp-host --bench plugins` (builds the release host and a release plugin first).
//! Prints a Markdown table; docs/performance.md quotes it.

#![allow(clippy::unwrap_used)]

mod common;

use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_host::exec::CallState;
use mcp_host::{CallOptions, Config, Host, HostOptions};
use mcp_plugin_sdk::{Content, ToolResult};

const PLUGINS: usize = 100;

fn build_release() -> (PathBuf, PathBuf) {
    let dir = common::build_release(&["mcp-host", "fixture-basic"]);
    (dir.join("mcp-host"), dir.join("libfixture_basic.so"))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let (exe, plugin) = build_release();
    let size = std::fs::metadata(&plugin).unwrap().len();
    let dir = tempfile::tempdir().unwrap();
    // Every copy signed, as `mcp-host sign` does; the signatures count only when required.
    let pair = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
    for i in 0..PLUGINS {
        let copy = dir.path().join(format!("libp{i:03}.so"));
        std::fs::copy(&plugin, &copy).unwrap();
        let sig = minisign::sign(
            Some(&pair.pk),
            &pair.sk,
            std::fs::File::open(&copy).unwrap(),
            None,
            None,
        )
        .unwrap();
        std::fs::write(copy.with_extension("so.minisig"), sig.into_string()).unwrap();
    }
    let public = pair.pk.to_base64();
    let config_file = dir.path().join("mcp-host.yaml");
    std::fs::write(
        &config_file,
        format!("tool_dirs: [{}]\n", dir.path().display()),
    )
    .unwrap();
    let config = Config::load_with_env(Some(&config_file), &[]).unwrap();

    // 1. Discover + probe (child processes, in batches) + load 100 plugins, each run in a fresh
    //    process as at start-up (images are never unloaded, so repeating in one process would
    //    measure a growing link map). The host logs its own load time; wall time adds process start.
    let run_with = |probe: bool, signed: bool| -> (Duration, Duration) {
        let t = Instant::now();
        let mut cmd = Command::new(&exe);
        cmd.args(["--config", config_file.to_str().unwrap(), "list", "--json"])
            .env("RUST_LOG", "info")
            .env("MCP_HOST_PROBE", probe.to_string());
        if signed {
            cmd.env("MCP_HOST_TRUST__REQUIRE_SIGNATURE", "true")
                .env("MCP_HOST_TRUST__KEYS__BENCH", &public);
        }
        let out = cmd.output().unwrap();
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("Error loading plugin"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let wall = t.elapsed();
        let log = String::from_utf8_lossy(&out.stderr);
        let ms: u64 = log
            .split("(loaded in ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no load time in log: {log}"));
        (Duration::from_millis(ms), wall)
    };
    let run = |probe: bool| run_with(probe, false);
    let (mut with_probe, mut with_probe_wall, mut without_probe, mut signed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..7 {
        let (load, wall) = run(true);
        with_probe.push(load);
        with_probe_wall.push(wall);
        without_probe.push(run(false).0);
        signed.push(run_with(true, true).0);
    }

    // 2. One trivial call through the ABI vs the same work as a direct call.
    let host = Host::start(config.clone(), HostOptions::default()).unwrap();
    let registry = host.registry();
    let tool = registry.get("echo").unwrap();
    let ctx = Arc::new(CallState {
        request: Arc::default(),
        deadline: None,
        events: None,
        wants: mcp_host::exec::EventWants::NONE,
        caller_json: Arc::from(""),
        depth: 0,
        tool: Arc::from("echo"),
        input: None,
        inline: false,
    });
    let args = r#"{"text":"hello"}"#;
    #[derive(serde::Deserialize)]
    struct Args {
        text: String,
    }
    let direct = |args: &str| -> String {
        let a: Args = serde_json::from_str(args).unwrap();
        serde_json::to_string(&ToolResult::new(vec![Content::text(a.text)])).unwrap()
    };
    assert_eq!(
        tool.slot
            .backend
            .call_blocking(tool.index, args, &ctx)
            .unwrap(),
        direct(args)
    );
    const N: u32 = 1_000_000;
    let mut abi_runs = Vec::new();
    let mut direct_runs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..N {
            black_box(
                tool.slot
                    .backend
                    .call_blocking(tool.index, black_box(args), &ctx)
                    .unwrap(),
            );
        }
        abi_runs.push(t.elapsed() / N);
        let t = Instant::now();
        for _ in 0..N {
            black_box(direct(black_box(args)));
        }
        direct_runs.push(t.elapsed() / N);
    }
    let abi = median(abi_runs);
    let direct_t = median(direct_runs);

    // 3. The whole in-process call path: schema validation, ABI call, result check.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let value = serde_json::json!({"text": "hello"});
    let echo = host.registry().get("echo").cloned().unwrap();
    let mut host_runs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..(N / 10) {
            black_box(
                rt.block_on(host.call_tool(echo.clone(), Some(&value), CallOptions::default()))
                    .unwrap(),
            );
        }
        host_runs.push(t.elapsed() / (N / 10));
    }
    let host_call = median(host_runs);

    println!("| measurement | result |");
    println!("|---|---|");
    println!("| plugin file (release) | {:.2} MB |", size as f64 / 1e6);
    println!(
        "| discover + probe (child processes) + load {PLUGINS} plugins | {:.0} ms (median of 7 fresh processes) |",
        median(with_probe).as_secs_f64() * 1e3
    );
    println!(
        "| same, whole `mcp-host list` process wall time | {:.0} ms |",
        median(with_probe_wall).as_secs_f64() * 1e3
    );
    println!(
        "| discover + load {PLUGINS} plugins, probe off | {:.0} ms |",
        median(without_probe).as_secs_f64() * 1e3
    );
    println!(
        "| discover + check {PLUGINS} signatures + probe + load (`require_signature`) | {:.0} ms |",
        median(signed).as_secs_f64() * 1e3
    );
    println!(
        "| echo through the ABI (`call_raw`) | {} ns |",
        abi.as_nanos()
    );
    println!(
        "| same work as a direct Rust call | {} ns |",
        direct_t.as_nanos()
    );
    println!(
        "| ABI overhead per call | {} ns |",
        abi.as_nanos() as i128 - direct_t.as_nanos() as i128
    );
    println!(
        "| full in-process `Host::call_tool` (validate + ABI + result check) | {} ns |",
        host_call.as_nanos()
    );
}
