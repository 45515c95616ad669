//! The benchmarks' HTTP/1.1 client: pre-built request bytes, `Content-Length`-framed responses
//! read over tokio, and a closed-loop load generator over keep-alive connections.

// Each benchmark uses part of this module.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::kernel::{PerfSyscalls, Switches};
use super::process::{STEP_TIMEOUT, cpu_time};

/// Unmeasured time at the start of every load run.
pub const WARM_UP: Duration = Duration::from_secs(1);

pub fn http_request(addr: SocketAddr, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut req = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    req.into_bytes()
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Read one `Content-Length`-framed response from `stream` into `buf` (which keeps any bytes past
/// it); returns the status and the body's range in `buf` before those bytes are dropped by the next
/// call.
pub async fn read_response(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    consumed: &mut usize,
) -> std::io::Result<(u16, std::ops::Range<usize>)> {
    buf.drain(..*consumed);
    *consumed = 0;
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    loop {
        if let Some(head_end) = find(buf, b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..head_end]).map_err(|e| bad(e.to_string()))?;
            let status = head
                .get(9..12)
                .and_then(|s| s.parse::<u16>().ok())
                .ok_or_else(|| bad(format!("bad status line in {head:?}")))?;
            let length = head
                .split("\r\n")
                .skip(1)
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .or_else(|| matches!(status, 202 | 204).then_some(0))
                .ok_or_else(|| bad(format!("response without Content-Length: {head:?}")))?;
            let body = head_end + 4..head_end + 4 + length;
            if buf.len() >= body.end {
                *consumed = body.end;
                return Ok((status, body));
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
    }
}

/// One request on a fresh connection: status and body.
pub async fn http_once(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let work = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        stream.write_all(request).await?;
        let (mut buf, mut consumed) = (Vec::new(), 0);
        let (status, body) = read_response(&mut stream, &mut buf, &mut consumed).await?;
        Ok::<_, std::io::Error>((status, String::from_utf8_lossy(&buf[body]).into_owned()))
    };
    tokio::time::timeout(STEP_TIMEOUT, work)
        .await
        .expect("HTTP request timed out")
        .expect("HTTP request failed")
}

pub struct LoadResult {
    /// Completed requests per second in the measuring window.
    pub rate: f64,
    /// Latencies (ns) of the requests completed in the window, sorted.
    pub latencies: Vec<u64>,
    /// Server CPU time (user + system, all threads) per request in the window.
    pub cpu: Duration,
    /// The server's waits (voluntary context switches, all threads) per request in the window.
    pub waits: f64,
    /// Its system calls per request in the window (`MCP_BENCH_SYSCALLS=1`, where perf counts).
    pub syscalls: Option<f64>,
}

/// What the kernel did for a server over a load window: CPU time, context switches and (when
/// asked for) system calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spent {
    pub cpu: Duration,
    pub switches: Switches,
    pub syscalls: Option<u64>,
}

/// Counting a server's CPU time, switches and (`MCP_BENCH_SYSCALLS=1`) system calls over a
/// window: [`Meter::start`] at its beginning, [`Meter::stop`] at its end.
pub struct Meter {
    pid: u32,
    cpu: Duration,
    switches: Switches,
    perf: Option<PerfSyscalls>,
}

impl Meter {
    /// Attach perf (before the window: attaching takes a while) when system calls are asked for.
    pub fn attach(pid: u32) -> Meter {
        let wanted = std::env::var("MCP_BENCH_SYSCALLS").is_ok_and(|v| v == "1");
        Meter {
            pid,
            cpu: Duration::ZERO,
            switches: Switches::default(),
            perf: wanted.then(|| PerfSyscalls::attach(pid)).flatten(),
        }
    }

    pub fn start(&mut self) {
        if let Some(perf) = &mut self.perf {
            perf.enable();
        }
        self.cpu = cpu_time(self.pid);
        self.switches = Switches::of(self.pid);
    }

    pub fn stop(mut self) -> Spent {
        let cpu = cpu_time(self.pid) - self.cpu;
        let switches = Switches::of(self.pid).since(self.switches);
        if let Some(perf) = &mut self.perf {
            perf.disable();
        }
        Spent {
            cpu,
            switches,
            syscalls: self.perf.and_then(PerfSyscalls::finish),
        }
    }
}

impl LoadResult {
    pub fn from(mut latencies: Vec<u64>, window: Duration, spent: Spent) -> LoadResult {
        latencies.sort_unstable();
        assert!(!latencies.is_empty(), "no request completed in the window");
        let n = latencies.len();
        LoadResult {
            rate: n as f64 / window.as_secs_f64(),
            cpu: spent.cpu / n as u32,
            waits: spent.switches.voluntary as f64 / n as f64,
            syscalls: spent.syscalls.map(|s| s as f64 / n as f64),
            latencies,
        }
    }

    /// `waits 1.2, system calls 3.4 /req` (the calls only when counted).
    pub fn kernel(&self, unit: &str) -> String {
        match self.syscalls {
            Some(s) => format!("waits {:.2}, system calls {s:.2}/{unit}", self.waits),
            None => format!("waits {:.2}/{unit}", self.waits),
        }
    }

    pub fn pct(&self, p: f64) -> Duration {
        let i = ((self.latencies.len() as f64 * p / 100.0) as usize).min(self.latencies.len() - 1);
        Duration::from_nanos(self.latencies[i])
    }
}

/// `connections` closed-loop keep-alive connections, connection `i` sending `requests[i %
/// requests.len()]` (e.g. one legacy session each); a warm-up, then `window`.
pub fn http_load(
    rt: &tokio::runtime::Runtime,
    server: u32,
    addr: SocketAddr,
    requests: &[Vec<u8>],
    connections: usize,
    window: Duration,
) -> LoadResult {
    let requests: Vec<Arc<[u8]>> = requests.iter().map(|r| Arc::from(r.as_slice())).collect();
    let start = Instant::now();
    let warm_end = start + WARM_UP;
    let end = warm_end + window;
    let mut meter = Meter::attach(server);
    let (results, spent) = rt.block_on(async {
        let spent = tokio::spawn(async move {
            tokio::time::sleep_until(warm_end.into()).await;
            meter.start();
            tokio::time::sleep_until(end.into()).await;
            meter.stop()
        });
        let tasks: Vec<_> = (0..connections)
            .map(|i| {
                let request = Arc::clone(&requests[i % requests.len()]);
                tokio::spawn(async move {
                    let mut stream = TcpStream::connect(addr).await?;
                    stream.set_nodelay(true)?;
                    let mut buf = Vec::with_capacity(16 * 1024);
                    let mut consumed = 0;
                    let mut latencies = Vec::with_capacity(1 << 16);
                    loop {
                        let t0 = Instant::now();
                        stream.write_all(&request).await?;
                        let (status, _) =
                            read_response(&mut stream, &mut buf, &mut consumed).await?;
                        let t1 = Instant::now();
                        if status != 200 {
                            return Err(std::io::Error::other(format!("HTTP status {status}")));
                        }
                        if t1 >= end {
                            return Ok::<_, std::io::Error>(latencies);
                        }
                        if t1 >= warm_end {
                            latencies.push((t1 - t0).as_nanos() as u64);
                        }
                    }
                })
            })
            .collect();
        // One timeout for the whole run: a stuck server fails the benchmark instead of hanging it.
        tokio::time::timeout(end - Instant::now() + STEP_TIMEOUT, async {
            let mut all = Vec::new();
            for task in tasks {
                all.push(task.await.expect("connection task panicked"));
            }
            (all, spent.await.unwrap())
        })
        .await
        .expect("HTTP load run timed out")
    });
    let mut latencies = Vec::new();
    for r in results {
        latencies.extend(r.expect("connection failed"));
    }
    LoadResult::from(latencies, window, spent)
}

/// The value of header `name` in a response head.
pub fn header_value<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// One request on an open keep-alive connection: status, response head and body.
pub async fn exchange(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    consumed: &mut usize,
    request: &[u8],
) -> std::io::Result<(u16, String, String)> {
    stream.write_all(request).await?;
    let (status, body) = read_response(stream, buf, consumed).await?;
    // `read_response` drops what came before this response, so its head starts the buffer.
    let head = String::from_utf8_lossy(&buf[..body.start]).into_owned();
    Ok((
        status,
        head,
        String::from_utf8_lossy(&buf[body]).into_owned(),
    ))
}

/// The protocol version of legacy sessions.
pub const LEGACY: &str = "2025-06-18";

/// The headers of a request in legacy session `session`.
pub fn legacy_headers(session: &str) -> [(&'static str, &str); 4] {
    [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", LEGACY),
        ("Mcp-Session-Id", session),
    ]
}

/// Open a legacy (2025-06-18) session over `stream` as a client does: `initialize`, then
/// `notifications/initialized`; the session id.
pub async fn legacy_session(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    consumed: &mut usize,
    addr: SocketAddr,
) -> std::io::Result<String> {
    let init = http_request(
        addr,
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        &format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{LEGACY}","capabilities":{{}},"clientInfo":{{"name":"bench","version":"0"}}}}}}"#
        ),
    );
    let (status, head, body) = exchange(stream, buf, consumed, &init).await?;
    let session = match header_value(&head, "mcp-session-id") {
        Some(id) if status == 200 => id.to_owned(),
        _ => {
            return Err(std::io::Error::other(format!(
                "initialize answered {status} without a session: {head}\n{body}"
            )));
        }
    };
    let ack = http_request(
        addr,
        &legacy_headers(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let (status, _, body) = exchange(stream, buf, consumed, &ack).await?;
    if status != 202 {
        return Err(std::io::Error::other(format!(
            "notifications/initialized answered {status}: {body}"
        )));
    }
    Ok(session)
}
