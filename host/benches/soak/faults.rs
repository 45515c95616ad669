//! The faults, on a schedule, each logged with its window: a plugin file replaced (hot reload),
//! SIGHUP, a sandboxed worker killed, the stdio upstream killed, a replica crashed (SIGKILL) and
//! started again, Redis restarted (empty: no persistence) and paused (SIGSTOP) past the store's
//! timeout, a client that never reads its answers, and a burst of hostile requests.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::journal::{Fault, Journal};
use crate::world::{World, children_matching, signal};

/// Every fault, in the order the schedule injects them (then again from the first).
pub const ALL: &[&str] = &[
    "crash-replica",
    "reload-plugin",
    "sighup",
    "kill-worker",
    "kill-upstream",
    "slow-reader",
    "hostile-burst",
    "restart-redis",
    "pause-redis",
];

/// How long Redis stays stopped: past the store's 2 s command timeout (twice over).
const PAUSE: Duration = Duration::from_secs(6);

/// Inject fault `name` into `world`; its window and what it excuses go to the journal.
pub fn inject(name: &'static str, world: &mut World, j: &Arc<Journal>) {
    let start = j.now();
    let (scope, excuses, note): (&'static [&'static str], bool, String) = match name {
        "reload-plugin" => {
            world.files.replace_worker_plugin();
            // The reload happens when the watchers notice; give them a moment inside the window.
            std::thread::sleep(Duration::from_secs(2));
            (
                &["w_echo", "w_wrap_count"],
                true,
                "fixture-override replaced".into(),
            )
        }
        "sighup" => {
            let pids: Vec<u32> = world.replicas.iter_mut().filter_map(|r| r.pid()).collect();
            for p in &pids {
                signal(*p, libc::SIGHUP);
            }
            std::thread::sleep(Duration::from_secs(2));
            (&[], true, format!("replicas {pids:?}"))
        }
        "kill-worker" => {
            let killed = kill_children(world, "worker");
            std::thread::sleep(Duration::from_secs(1));
            (
                &["w_echo", "w_wrap_count"],
                true,
                format!("workers {killed:?}"),
            )
        }
        "kill-upstream" => {
            let killed = kill_children(world, "hostile.py");
            std::thread::sleep(Duration::from_secs(1));
            (
                &["us_echo", "us_add"],
                true,
                format!("stdio upstreams {killed:?}"),
            )
        }
        "slow-reader" => {
            // On a thread of its own: it holds its connection for a while; the schedule goes on.
            let (port, j) = (world.replicas[0].port, Arc::clone(j));
            std::thread::spawn(move || {
                let note = slow_reader(port);
                j.fault(Fault {
                    name,
                    start,
                    end: j.now(),
                    scope: &[],
                    excuses: false,
                    note,
                });
            });
            return;
        }
        "crash-replica" => {
            let pid = world.replicas[1].pid();
            if let Some(s) = world.replicas[1].server.as_mut() {
                s.child().kill();
            }
            std::thread::sleep(Duration::from_secs(2));
            world.restart_replica(1);
            (
                &[],
                true,
                format!("r2 (pid {pid:?}) killed and started again"),
            )
        }
        "hostile-burst" => (&[], false, hostile_burst(j, world.replicas[2].port)),
        "restart-redis" => {
            world.redis.kill();
            std::thread::sleep(Duration::from_secs(1));
            world.redis.restart();
            (&[], true, format!("redis on port {}", world.redis.port))
        }
        "pause-redis" => {
            let pid = world.redis.pid();
            signal(pid, libc::SIGSTOP);
            std::thread::sleep(PAUSE);
            signal(pid, libc::SIGCONT);
            (&[], true, format!("SIGSTOP for {PAUSE:?}"))
        }
        other => panic!("no fault {other}"),
    };
    j.fault(Fault {
        name,
        start,
        end: j.now(),
        scope,
        excuses,
        note,
    });
}

/// SIGKILL every child of every replica whose command line contains `needle`.
fn kill_children(world: &mut World, needle: &str) -> Vec<u32> {
    let mut killed = Vec::new();
    for r in &mut world.replicas {
        if let Some(pid) = r.pid() {
            for c in children_matching(pid, needle) {
                signal(c, libc::SIGKILL);
                killed.push(c);
            }
        }
    }
    killed
}

/// A client that pipelines large calls to a replica and never reads the answers for a while:
/// the replica must bound what it buffers for it and go on serving everyone else.
fn slow_reader(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return "could not connect".into();
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
    let text = "x".repeat(64 * 1024);
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut sent = 0;
    for _ in 0..400 {
        if s.write_all(req.as_bytes()).is_err() {
            break;
        }
        sent += 1;
    }
    std::thread::sleep(Duration::from_secs(10));
    format!("{sent} pipelined 64 KiB calls written, none read for 10 s")
}

/// Hostile requests straight at a replica: oversized, malformed, truncated, garbage. Each must
/// be refused with a 4xx or a closed connection, never a 5xx; the replica must stay up.
fn hostile_burst(j: &Journal, port: u16) -> String {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let head = |len: usize| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/call\r\nContent-Length: {len}\r\n\r\n"
        )
    };
    let big = vec![b'['; 16 * 1024 * 1024];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("16 MiB body", [head(big.len()).into_bytes(), big].concat()),
        (
            "malformed JSON",
            [head(9).into_bytes(), b"{\"jsonrpc".to_vec()].concat(),
        ),
        (
            "not JSON-RPC",
            [head(2).into_bytes(), b"[]".to_vec()].concat(),
        ),
        ("deep nesting", {
            let b = [vec![b'['; 100_000], vec![b']'; 100_000]].concat();
            [head(b.len()).into_bytes(), b].concat()
        }),
        (
            "truncated body",
            [head(1000).into_bytes(), b"{\"a\":".to_vec()].concat(),
        ),
        (
            "garbage request line",
            b"\x16\x03\x01\x02\x00garbage\r\n\r\n".to_vec(),
        ),
        (
            "huge header",
            format!(
                "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nX-A: {}\r\n\r\n",
                "a".repeat(1 << 20)
            )
            .into_bytes(),
        ),
    ];
    let mut answers = Vec::new();
    for _ in 0..5 {
        for (what, bytes) in &cases {
            let status = hostile_once(addr, bytes);
            if matches!(status, Some(s) if s >= 500) {
                j.hostile(format!("{what}: HTTP {status:?}"));
            }
            answers.push(format!("{what}: {status:?}"));
        }
    }
    answers.sort();
    answers.dedup();
    answers.join("; ")
}

/// Send `bytes` on a fresh connection; the status answered (`None`: the connection was closed).
fn hostile_once(addr: SocketAddr, bytes: &[u8]) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
    // A truncated body leaves the server waiting: stop writing, then half-close.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .get(9..12)?
        .parse()
        .ok()
}

/// When each fault is injected: the first after `lead`, then every `every`, until `quiet` before
/// the end (the last part of the run is fault-free, so leaks show on a calm host).
pub fn schedule(total: Duration, lead: Duration, quiet: Duration) -> Vec<(Duration, &'static str)> {
    let span = total.saturating_sub(lead + quiet);
    // The short profile goes through the list once; a long run every minute, round and round.
    let every = if total <= Duration::from_secs(600) {
        span / ALL.len() as u32
    } else {
        Duration::from_secs(60)
    };
    let mut out = Vec::new();
    let mut at = lead;
    let short = total <= Duration::from_secs(600);
    while at < lead + span && !every.is_zero() && !(short && out.len() == ALL.len()) {
        out.push((at, ALL[out.len() % ALL.len()]));
        at += every;
    }
    out
}
