//! The soak's clients, all at once: 2026-07-28 stateless calls at a steady rate and in bursts,
//! 2025 legacy sessions, calls over stdio, tasks created, polled, cancelled and read, nested calls
//! (a tool calling another, in process and from a sandboxed worker), both upstreams, and a caller
//! drawing on a policy budget. Every answer is checked against what the tool must return.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcp_host_tests::serve::{header_refs, modern_headers, request, with_meta, with_tasks};
use serde_json::{Value, json};
use tokio::net::TcpStream;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::http::{find, header_value, http_request, legacy_headers, legacy_session};
use crate::journal::{Asked, Failure, Journal, Task};

/// The longest one request may take before it counts as lost.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A keep-alive HTTP connection, opened again after any failure.
pub struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    consumed: usize,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        Conn {
            addr,
            stream: None,
            buf: Vec::new(),
            consumed: 0,
        }
    }

    /// One request: status, head and body, or why not (the connection is dropped then).
    pub async fn send(&mut self, request: &[u8]) -> Result<(u16, String, String), Failure> {
        let work = async {
            if self.stream.is_none() {
                let s = TcpStream::connect(self.addr).await?;
                s.set_nodelay(true)?;
                self.stream = Some(s);
                self.buf.clear();
                self.consumed = 0;
            }
            let stream = self.stream.as_mut().expect("connected above");
            stream.write_all(request).await?;
            read_reply(stream, &mut self.buf).await
        };
        let out = match tokio::time::timeout(REQUEST_TIMEOUT, work).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(Failure::Retryable(format!("io: {}", e.kind()))),
            Err(_) => Err(Failure::Retryable("io: no answer within 30 s".into())),
        };
        let keep = matches!(&out, Ok((_, head, _)) if !head.to_ascii_lowercase().contains("connection: close"));
        if !keep {
            self.stream = None;
        }
        out
    }
}

/// Read one response: its status, head and body, framed by `Content-Length` or chunked (a
/// streamed answer: an event stream whose response event [`message`] picks out).
async fn read_reply(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<(u16, String, String)> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_owned());
    let head_end = loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            break end;
        }
        fill(stream, buf).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    buf.drain(..head_end + 4);
    let chunked =
        header_value(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let mut body = Vec::new();
    if chunked {
        loop {
            let line_end = loop {
                if let Some(e) = find(buf, b"\r\n") {
                    break e;
                }
                fill(stream, buf).await?;
            };
            let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad("bad chunk size"))?;
            while buf.len() < line_end + 2 + size + 2 {
                fill(stream, buf).await?;
            }
            body.extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
            buf.drain(..line_end + 2 + size + 2);
            if size == 0 {
                break;
            }
        }
    } else {
        let length: usize = header_value(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < length {
            fill(stream, buf).await?;
        }
        body.extend(buf.drain(..length));
    }
    Ok((status, head, String::from_utf8_lossy(&body).into_owned()))
}

async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.reserve(16 * 1024);
    if stream.read_buf(buf).await? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    Ok(())
}

/// The response in an event stream: the last `data:` event that has a `result` or an `error`.
fn from_events(body: &str) -> Option<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .rfind(|m| m.get("result").is_some() || m.get("error").is_some())
}

/// The JSON-RPC message of a response, or the failure it is.
pub fn message(status: u16, head: &str, body: &str) -> Result<Value, Failure> {
    let snippet: String = body.chars().take(160).collect();
    match status {
        200 => {}
        429 | 502 | 503 | 504 => {
            let retry = header_value(head, "retry-after").is_some() || status != 503;
            let what = format!("http {status}: {snippet}");
            return Err(if retry {
                Failure::Retryable(what)
            } else {
                Failure::Other(format!("{what} (no Retry-After)"))
            });
        }
        _ => return Err(Failure::Other(format!("http {status}: {snippet}"))),
    }
    if header_value(head, "content-type").is_some_and(|t| t.starts_with("text/event-stream")) {
        return from_events(body)
            .ok_or_else(|| Failure::Wrong(format!("no response event: {snippet}")));
    }
    serde_json::from_str(body).map_err(|e| Failure::Wrong(format!("not JSON ({e}): {snippet}")))
}

/// A JSON-RPC error as a failure: retryable when it says when to retry.
pub fn rpc_error(error: &Value) -> Failure {
    let what = format!("rpc {}: {}", error["code"], error["message"]);
    if error["data"].get("retryAfter").is_some() {
        Failure::Retryable(what)
    } else {
        Failure::Other(what)
    }
}

/// What a tool call must answer.
#[derive(Clone, Debug)]
pub enum Expect {
    Text(String),
    /// A tool error result naming the policy's reason.
    Denied(&'static str),
}

/// Check a `tools/call` answer against what it must be.
pub fn check_call(m: &Value, expect: &Expect) -> Result<(), Failure> {
    if let Some(e) = m.get("error") {
        return Err(rpc_error(e));
    }
    let r = &m["result"];
    let text = r["content"][0]["text"].as_str().unwrap_or("");
    let is_error = r["isError"].as_bool().unwrap_or(false);
    match expect {
        Expect::Text(want) if !is_error && text == want => Ok(()),
        Expect::Denied(reason) if is_error && text.contains(reason) => Ok(()),
        Expect::Text(_) if is_error => Err(Failure::Other(format!("tool error: {text}"))),
        _ => Err(Failure::Wrong(format!("expected {expect:?}, got {m}"))),
    }
}

/// The call number `n`'s tool, arguments and answer: a rotation over every kind of tool.
pub fn pick(n: u64) -> (&'static str, Value, Expect) {
    let t = format!("t{n}");
    let (a, b) = ((n % 1000) as i64, (n % 77) as i64);
    match n % 10 {
        0 | 1 => ("echo", json!({"text": t}), Expect::Text(t)),
        2 => ("shout", json!({"text": t}), Expect::Text(t.to_uppercase())),
        3 => (
            "w_echo",
            json!({"text": t}),
            Expect::Text(format!("override: {t}")),
        ),
        4 => (
            "w_wrap_count",
            json!({"steps": 2}),
            Expect::Text("wrapped: counted to 2".into()),
        ),
        5 => ("us_echo", json!({"text": t}), Expect::Text(t)),
        6 => (
            "us_add",
            json!({"a": a, "b": b}),
            Expect::Text((a + b).to_string()),
        ),
        7 => ("uh_echo", json!({"text": t}), Expect::Text(t)),
        8 => (
            "uh_add",
            json!({"a": a, "b": b}),
            Expect::Text((a + b).to_string()),
        ),
        _ => (
            "echo",
            json!({"text": "forbidden"}),
            Expect::Denied("echo refuses the forbidden text"),
        ),
    }
}

/// A 2026-07-28 request's bytes.
pub fn modern_request(addr: SocketAddr, id: u64, method: &str, params: Value) -> Vec<u8> {
    let params = with_meta(params);
    let member = if method.starts_with("tasks/") {
        "taskId"
    } else {
        "name"
    };
    let headers = modern_headers(method, params.get(member).and_then(Value::as_str));
    let mut all = header_refs(&headers);
    all.push(("Content-Type", "application/json"));
    all.push(("Accept", "application/json, text/event-stream"));
    http_request(addr, &all, &request(id, method, params).to_string())
}

/// One 2026 tool call of call number `n` on `conn`, recorded.
pub async fn modern_call(j: &Journal, client: &'static str, conn: &mut Conn, n: u64) {
    let (tool, args, expect) = pick(n);
    let req = modern_request(
        conn.addr,
        n,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    let sent = Instant::now();
    let outcome = match conn.send(&req).await {
        Ok((status, head, body)) => {
            message(status, &head, &body).and_then(|m| check_call(&m, &expect))
        }
        Err(f) => Err(f),
    };
    j.call(client, tool, sent, outcome);
}

/// Shared by the clients: when to stop, and a counter for unique arguments.
pub struct Run {
    pub journal: Arc<Journal>,
    pub stop: AtomicBool,
    pub counter: AtomicU64,
    pub front: SocketAddr,
}

impl Run {
    pub fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// A 2026 client at a steady rate: one call, then `pause`.
pub async fn steady(run: Arc<Run>, pause: Duration) {
    let mut conn = Conn::new(run.front);
    while !run.stopped() {
        modern_call(&run.journal, "modern-steady", &mut conn, run.next()).await;
        tokio::time::sleep(pause).await;
    }
}

/// Bursts: every `every`, `width` fresh connections each make `depth` calls as fast as they can.
pub async fn bursty(run: Arc<Run>, every: Duration, width: usize, depth: usize) {
    while !run.stopped() {
        let mut burst = Vec::new();
        for _ in 0..width {
            let run = Arc::clone(&run);
            burst.push(tokio::spawn(async move {
                let mut conn = Conn::new(run.front);
                for _ in 0..depth {
                    modern_call(&run.journal, "modern-burst", &mut conn, run.next()).await;
                }
            }));
        }
        for b in burst {
            let _ = b.await;
        }
        tokio::time::sleep(every).await;
    }
}

/// A 2025 client: a legacy session (shared by the replicas through Redis), calls in it; a new
/// session when the old one is gone (a Redis restart forgets it: 404, as the spec says).
pub async fn legacy(run: Arc<Run>, pause: Duration) {
    let j = &run.journal;
    let mut conn = Conn::new(run.front);
    let mut session: Option<String> = None;
    while !run.stopped() {
        let Some(id) = session.clone() else {
            let sent = Instant::now();
            match open_session(&mut conn).await {
                Ok(id) => session = Some(id),
                Err(f) => {
                    j.call("legacy", "initialize", sent, Err(f));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            continue;
        };
        let n = run.next();
        let (tool, args, expect) = pick(n);
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": tool, "arguments": args}})
        .to_string();
        let req = http_request(run.front, &legacy_headers(&id), &body);
        let sent = Instant::now();
        let outcome = match conn.send(&req).await {
            Ok((404, _, _)) => {
                session = None;
                Err(Failure::Retryable("legacy session gone (404)".into()))
            }
            Ok((status, head, body)) => {
                message(status, &head, &body).and_then(|m| check_call(&m, &expect))
            }
            Err(f) => Err(f),
        };
        j.call("legacy", tool, sent, outcome);
        tokio::time::sleep(pause).await;
    }
}

async fn open_session(conn: &mut Conn) -> Result<String, Failure> {
    if conn.stream.is_none() {
        let s = TcpStream::connect(conn.addr)
            .await
            .map_err(|e| Failure::Retryable(format!("io: {}", e.kind())))?;
        conn.stream = Some(s);
        conn.buf.clear();
        conn.consumed = 0;
    }
    let stream = conn.stream.as_mut().expect("connected above");
    let addr = conn.addr;
    let opened = tokio::time::timeout(
        REQUEST_TIMEOUT,
        legacy_session(stream, &mut conn.buf, &mut conn.consumed, addr),
    )
    .await;
    // `legacy_session` leaves its last answer in the buffer (dropped by its next read): drop it.
    conn.buf.drain(..conn.consumed.min(conn.buf.len()));
    conn.consumed = 0;
    match opened {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(e)) => {
            conn.stream = None;
            let what = e.to_string();
            Err(
                if what.contains(" 50") || e.kind() != std::io::ErrorKind::Other {
                    Failure::Retryable(format!("initialize: {what}"))
                } else {
                    Failure::Other(format!("initialize: {what}"))
                },
            )
        }
        Err(_) => {
            conn.stream = None;
            Err(Failure::Retryable(
                "initialize: no answer within 30 s".into(),
            ))
        }
    }
}

/// A caller drawing on the `greets` budget faster than it refills: every call is either
/// admitted with the right answer or refused with `-32010` naming the budget and when to retry.
pub async fn budgeted(run: Arc<Run>, pause: Duration) {
    let j = &run.journal;
    let mut conn = Conn::new(run.front);
    while !run.stopped() {
        let n = run.next();
        let name = format!("g{n}");
        let req = modern_request(
            run.front,
            n,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": name}}),
        );
        let sent = Instant::now();
        let outcome = match conn.send(&req).await {
            Ok((429, head, body)) => judge_refusal(j, &head, &body),
            Ok((status, head, body)) => message(status, &head, &body)
                .and_then(|m| check_call(&m, &Expect::Text(format!("Hello, {name}!"))))
                .inspect(|()| j.budget(|b| b.admitted += 1)),
            Err(f) => Err(f),
        };
        j.call("budget", "greet", sent, outcome);
        tokio::time::sleep(pause).await;
    }
}

/// A 429: the budget's refusal (right when it names `greets` and says when to retry).
fn judge_refusal(j: &Journal, head: &str, body: &str) -> Result<(), Failure> {
    let m: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let e = &m["error"];
    let right = e["code"] == -32010
        && e["data"]["budget"] == "greets"
        && e["data"]["retryAfter"].as_u64().is_some()
        && header_value(head, "retry-after").is_some();
    j.budget(|b| {
        b.refused += 1;
        if !right {
            b.malformed.push(body.chars().take(200).collect());
        }
    });
    Ok(())
}

/// A client of the tasks extension: tasks started every `every`, each followed to its end by a
/// task of its own; every other one is cancelled.
pub async fn tasks(run: Arc<Run>, every: Duration) {
    let mut running = Vec::new();
    while !run.stopped() {
        let n = run.next();
        let asked = if n.is_multiple_of(2) {
            Asked::Complete
        } else {
            Asked::Cancel
        };
        let run2 = Arc::clone(&run);
        running.push(tokio::spawn(
            async move { follow_task(run2, n, asked).await },
        ));
        running.retain(|h: &tokio::task::JoinHandle<()>| !h.is_finished());
        tokio::time::sleep(every).await;
    }
    for h in running {
        let _ = h.await;
    }
}

/// A task request (`tools/call` with the extension, or a `tasks/*` method).
async fn task_rpc(
    j: &Journal,
    conn: &mut Conn,
    n: u64,
    method: &str,
    params: Value,
) -> Result<Value, Failure> {
    let req = modern_request(conn.addr, n, method, with_tasks(params));
    let sent = Instant::now();
    let out = match conn.send(&req).await {
        Ok((status, head, body)) => {
            message(status, &head, &body).and_then(|m| match m.get("error") {
                Some(e) => Err(rpc_error(e)),
                None => Ok(m["result"].clone()),
            })
        }
        Err(f) => Err(f),
    };
    let tool = if method == "tools/call" {
        "slow_compute"
    } else {
        method
    };
    j.call(
        "tasks",
        tool,
        sent,
        out.as_ref().map(|_| ()).map_err(Clone::clone),
    );
    out
}

async fn follow_task(run: Arc<Run>, n: u64, asked: Asked) {
    let j = &run.journal;
    let mut conn = Conn::new(run.front);
    let label = format!("k{n}");
    // A task to cancel runs long enough to be cancelled, yet under the request timeout: with the
    // store unreachable the host runs it without a task, in the request (documented).
    let seconds = if asked == Asked::Complete { 0.5 } else { 20.0 };
    let args = json!({"name": "slow_compute", "arguments": {"seconds": seconds, "label": label}});
    let Ok(created) = task_rpc(j, &mut conn, n, "tools/call", args).await else {
        return;
    };
    let created_at = j.now();
    let want = format!("Computed {label} in {seconds} s");
    if created["resultType"] == "complete" {
        // The store unreachable: an optional-task tool runs without a task (documented).
        let text = created["content"][0]["text"].as_str().unwrap_or("");
        let right = text == want;
        j.task(Task {
            created: created_at,
            ended: j.now(),
            asked,
            cancel_acked: false,
            end: format!("inline: {text}"),
            right,
        });
        return;
    }
    let Some(id) = created["taskId"].as_str().map(str::to_owned) else {
        j.call(
            "tasks",
            "slow_compute",
            Instant::now(),
            Err(Failure::Wrong(format!("no task: {created}"))),
        );
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut cancel_acked = false;
    if asked == Asked::Cancel {
        tokio::time::sleep(Duration::from_millis(200)).await;
        while !cancel_acked && Instant::now() < deadline && !run.stopped() {
            match task_rpc(j, &mut conn, n, "tasks/cancel", json!({"taskId": id})).await {
                Ok(_) => cancel_acked = true,
                // Unknown (a restarted Redis forgot it): no use asking again; the poll says so.
                Err(Failure::Other(e)) if e.contains("-32602") => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
    let end = poll_to_end(j, &mut conn, n, &id, deadline).await;
    let right = match asked {
        Asked::Complete => end == format!("completed: {want}"),
        Asked::Cancel => end == "cancelled",
    };
    j.task(Task {
        created: created_at,
        ended: j.now(),
        asked,
        cancel_acked,
        end,
        right,
    });
}

/// Poll `tasks/get` until the task ends; how it ended.
async fn poll_to_end(j: &Journal, conn: &mut Conn, n: u64, id: &str, deadline: Instant) -> String {
    let mut last = String::from("never read");
    while Instant::now() < deadline {
        match task_rpc(j, conn, n, "tasks/get", json!({"taskId": id})).await {
            Ok(t) => match t["status"].as_str() {
                Some("completed") => {
                    return format!(
                        "completed: {}",
                        t["result"]["content"][0]["text"].as_str().unwrap_or("")
                    );
                }
                Some("cancelled") => return "cancelled".into(),
                Some("failed") => return format!("failed: {}", t["error"]),
                other => last = format!("{other:?}"),
            },
            Err(Failure::Other(e)) if e.contains("-32602") => return format!("missing: {e}"),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    format!("timeout: last status {last}")
}

/// A client of the stdio host: `echo` and `shout`, one at a time, every answer checked.
pub fn stdio(run: Arc<Run>, host: &mut crate::world::StdioHost, pause: Duration) -> bool {
    let j = &run.journal;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "soak", "version": "0"}}});
    host.send(&init.to_string()).unwrap();
    let _ = host.lines.recv_timeout(REQUEST_TIMEOUT);
    host.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .unwrap();
    while !run.stopped() {
        let n = run.next();
        let (tool, args, expect) = match n % 2 {
            0 => (
                "echo",
                json!({"text": format!("s{n}")}),
                Expect::Text(format!("s{n}")),
            ),
            _ => (
                "shout",
                json!({"text": format!("s{n}")}),
                Expect::Text(format!("S{n}")),
            ),
        };
        let req = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        let sent = Instant::now();
        let outcome = host
            .send(&req.to_string())
            .map_err(|e| Failure::Other(format!("stdin: {e}")))
            .and_then(|()| stdio_answer(host, n))
            .and_then(|m| check_call(&m, &expect));
        j.call("stdio", tool, sent, outcome);
        std::thread::sleep(pause);
    }
    // Still running when the run ends (it is stopped when `host` is dropped).
    host.child.try_wait().is_ok_and(|s| s.is_none())
}

fn stdio_answer(host: &mut crate::world::StdioHost, id: u64) -> Result<Value, Failure> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = host
            .lines
            .recv_timeout(left)
            .map_err(|_| Failure::Other("stdio: no answer within 30 s".into()))?;
        let m: Value = serde_json::from_str(&line)
            .map_err(|e| Failure::Wrong(format!("stdio line not JSON: {e}")))?;
        if m["id"] == id {
            return Ok(m);
        }
    }
}
