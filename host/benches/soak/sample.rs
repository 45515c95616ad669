//! Resource accounting: every few seconds, per host process (each replica and its workers and
//! upstream children, the stdio host), what `/proc` says — resident memory, threads, open file
//! descriptors, sockets — and the store's size: Redis's key count, the SQLite files' bytes.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// One reading of one process (or of the stores: `pid` 0).
#[derive(Clone, Debug)]
pub struct Sample {
    pub at: f64,
    /// `r1`, `r2`, `r3`, `r1+children`, …, `stdio`, `redis-keys`, `sqlite-bytes`.
    pub what: String,
    pub pid: u32,
    pub rss_kb: u64,
    pub threads: u64,
    pub fds: u64,
    pub sockets: u64,
}

/// The `/proc` figures of `pid`; `None` once it is gone.
pub fn of_process(at: f64, what: &str, pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let (mut fds, mut sockets) = (0, 0);
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        fds += 1;
        if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")) {
            sockets += 1;
        }
    }
    Some(Sample {
        at,
        what: what.to_owned(),
        pid,
        rss_kb: field("VmRSS:"),
        threads: field("Threads:"),
        fds,
        sockets,
    })
}

/// The sum of `pid` and its live children (workers, upstreams), as one sample.
pub fn with_children(at: f64, what: &str, pid: u32) -> Option<Sample> {
    let mut total = of_process(at, what, pid)?;
    for c in crate::common::process::children(pid) {
        if let Some(s) = of_process(at, what, c) {
            total.rss_kb += s.rss_kb;
            total.threads += s.threads;
            total.fds += s.fds;
            total.sockets += s.sockets;
        }
    }
    Some(total)
}

/// Redis's key count (`DBSIZE`), or `None` when it does not answer within a second (paused).
pub fn redis_keys(port: u16) -> Option<u64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    s.write_all(b"*1\r\n$6\r\nDBSIZE\r\n").ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .trim()
        .strip_prefix(':')?
        .parse()
        .ok()
}

/// The bytes of every file under `dir` (the stdio host's state: its SQLite task store).
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            total += dir_bytes(&p);
        } else if let Ok(m) = p.metadata() {
            total += m.len();
        }
    }
    total
}

/// The least-squares slope of `ys` over `xs` (units of y per unit of x).
pub fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    if xs.len() < 3 {
        return 0.0;
    }
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let num: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if den == 0.0 { 0.0 } else { num / den }
}
