//! Helpers for the `serve` tests: run `mcp-host serve` (stdio or HTTP) as a child process and talk to
//! it over real pipes (a line-based JSON-RPC client) or a real socket (a raw HTTP/1.1 client).
//!
//! Every wait has a timeout, so a host bug fails a test instead of hanging CI, and every child is
//! killed when its guard drops.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Layout, artifacts};

/// The stateless protocol revision.
pub const MODERN: &str = "2026-07-28";
/// The newest legacy revision.
pub const LEGACY: &str = "2025-11-25";
/// The deadline for an answer that should come promptly. Generous on purpose: waits end as soon
/// as the answer arrives, and a loaded 2-core machine must not fail a test that is only slow. How
/// fast answers come is measured by the benchmarks, never asserted by the tests.
pub const WAIT: Duration = Duration::from_secs(20);
/// How long a server may take to start (it probes and loads its plugins first).
pub const START: Duration = Duration::from_secs(30);

/// `params._meta` of a 2026-07-28 request.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// `params` with the 2026 `_meta` merged in (keys already in `params._meta` win).
pub fn with_meta(params: Value) -> Value {
    let mut params = if params.is_null() { json!({}) } else { params };
    let mut meta = modern_meta();
    if let Some(existing) = params.get("_meta").and_then(Value::as_object) {
        for (k, v) in existing {
            meta[k] = v.clone();
        }
    }
    params["_meta"] = meta;
    params
}

/// The tasks extension's identifier (client capabilities `extensions`).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// `params` with `_meta` client capabilities declaring the tasks extension and elicitation (for
/// [`HttpServer::modern`], whose `_meta` keeps them).
pub fn with_tasks(mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {},
            "extensions": { TASKS_EXTENSION: {} },
        },
    });
    params
}

/// A JSON-RPC request.
pub fn request(id: impl Into<Value>, method: &str, params: Value) -> Value {
    let mut r = json!({ "jsonrpc": "2.0", "id": id.into(), "method": method });
    if !params.is_null() {
        r["params"] = params;
    }
    r
}

/// A JSON-RPC notification.
pub fn notification(method: &str, params: Value) -> Value {
    let mut n = json!({ "jsonrpc": "2.0", "method": method });
    if !params.is_null() {
        n["params"] = params;
    }
    n
}

/// The text of the first content item of a JSON-RPC response's result.
pub fn result_text(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no result text in {response}"))
}

/// The tool names of a `tools/list` response, sorted.
pub fn tool_names(resp: &Value) -> Vec<String> {
    let mut names: Vec<String> = resp["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list result: {resp}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names
}

/// Ask `list` (the tools served now, and the server's stderr so far) until every tool of `names`
/// is served, generously (up to [`START`]: upstream servers connect in the background, their
/// tools join a moment after start); fails the test otherwise.
#[track_caller]
fn wait_until_served(names: &[&str], mut list: impl FnMut() -> (Vec<String>, String)) {
    let deadline = Instant::now() + START;
    loop {
        let (served, stderr) = list();
        if names.iter().all(|name| served.iter().any(|s| s == name)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not serve {names:?} within {START:?} (it serves {served:?}):\n{stderr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A temporary layout with `fixture-basic` and `fixture-faulty` in `d`, and a config file made of
/// `tool_dirs: [d]` plus `extra` (YAML lines).
pub fn layout(extra: &str) -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("d", "fixture-faulty", None);
    let cfg = l.config(&format!("tool_dirs: [d]\n{extra}"));
    (l, cfg)
}

/// `mcp-host --config CONFIG` with the test environment (state directory, `$USER`, no `MCP_*`).
pub fn host_command(config: &Path) -> Command {
    let mut cmd = Command::new(&artifacts().host);
    cmd.arg("--config").arg(config).env("RUST_LOG", "info");
    // The default task store lives in the state directory: the test's own, never the user's.
    if let Some(dir) = config.parent() {
        cmd.env("XDG_STATE_HOME", dir);
    }
    // A user's client starts the host with $USER set (stdio's caller); a CI runner may not have it.
    if std::env::var_os("USER").is_none() {
        cmd.env("USER", "e2e-user");
    }
    // The config layers read MCP_* variables: keep the caller's environment out of the test.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MCP_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Kills the child (if still running) and reaps it on drop.
#[derive(Debug)]
pub struct ChildGuard(Child);

impl ChildGuard {
    /// Spawn `cmd` (killed and reaped when the guard drops).
    pub fn spawn(cmd: &mut Command) -> Self {
        ChildGuard(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}")),
        )
    }

    /// Guard a child already spawned (e.g. after taking its pipes).
    pub fn from_child(child: Child) -> Self {
        ChildGuard(child)
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.0.try_wait().unwrap().is_some()
    }

    /// Send SIGKILL (a crash, as far as the process can tell) and reap it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Wait for the child to exit, up to `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Send SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Collect a child's stderr on a thread; `on_line` sees each line as it arrives.
pub fn collect_stderr(
    stderr: impl Read + Send + 'static,
    mut on_line: impl FnMut(&str) + Send + 'static,
) -> Arc<Mutex<String>> {
    let log = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            on_line(&line);
            sink.lock().unwrap().push_str(&line);
            line.clear();
        }
    });
    log
}

// ---------------------------------------------------------------------------------------------
// stdio

/// `mcp-host serve --stdio` with a newline-delimited JSON-RPC client on its pipes.
#[derive(Debug)]
pub struct StdioServer {
    child: ChildGuard,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// Messages received but not yet consumed.
    stash: VecDeque<Value>,
    /// Every stdout line received so far, verbatim.
    pub seen: Vec<String>,
}

impl StdioServer {
    /// Start the server on `config`.
    pub fn start(config: &Path) -> Self {
        Self::start_with(config, &[], &[])
    }

    /// Start the server on `config` with extra `serve` arguments (e.g. `--agent NAME`) and extra
    /// environment variables.
    pub fn start_with(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = host_command(config)
            .args(["serve", "--stdio"])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let stderr = collect_stderr(child.stderr.take().unwrap(), |_| {});
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            // Raw bytes, so invalid UTF-8 on stdout shows up as a failed parse, not a lost line.
            while reader.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                let line = String::from_utf8_lossy(&buf)
                    .trim_end_matches('\n')
                    .to_owned();
                if tx.send(line).is_err() {
                    return;
                }
                buf.clear();
            }
        });
        StdioServer {
            child: ChildGuard(child),
            stdin,
            lines,
            stderr,
            stash: VecDeque::new(),
            seen: Vec::new(),
        }
    }

    /// The log so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The server's process id (e.g. to send it a signal).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the log shows `needle` within [`WAIT`] (stderr is read on its own thread, so a line
    /// may trail the answers that follow it); the wait ends as soon as it does.
    pub fn logged(&self, needle: &str) -> bool {
        log_shows(&self.stderr, needle)
    }

    /// Whether the server process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.0.try_wait().unwrap().is_none()
    }

    /// Write one raw line (a newline is appended).
    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is closed");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Write raw bytes as they are (no newline), e.g. one piece of a message too large to hold.
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is closed");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Write one message.
    pub fn send(&mut self, message: &Value) {
        self.send_raw(&message.to_string());
    }

    /// The next stdout line within `timeout`, parsed (a line that is not JSON fails the test).
    fn read_message(&mut self, timeout: Duration) -> Option<Value> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                let value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!(
                        "stdout line is not JSON ({e}): {line:?}\nstderr:\n{}",
                        self.stderr()
                    )
                });
                self.seen.push(line);
                Some(value)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                // stdout closed: give a moment so a racing line is not lost, then report nothing.
                None
            }
        }
    }

    /// The next message (stashed ones first), or `None` if nothing arrives within `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Option<Value> {
        if let Some(m) = self.stash.pop_front() {
            return Some(m);
        }
        self.read_message(timeout)
    }

    /// Wait for the response with `id`; returns it and the notifications that arrived before it.
    /// Responses to other requests stay stashed for later.
    pub fn response_within(&mut self, id: &Value, timeout: Duration) -> (Value, Vec<Value>) {
        let deadline = Instant::now() + timeout;
        let mut notifications = Vec::new();
        let mut kept = VecDeque::new();
        let mut pending: VecDeque<Value> = std::mem::take(&mut self.stash);
        loop {
            let next = match pending.pop_front() {
                Some(m) => Some(m),
                None => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        None
                    } else {
                        self.read_message(left)
                    }
                }
            };
            let Some(m) = next else {
                kept.extend(pending);
                self.stash = kept;
                panic!(
                    "no response to request {id} within {timeout:?}; other messages: {:?}\nstderr:\n{}",
                    self.stash,
                    self.stderr()
                );
            };
            if m.get("id") == Some(id) && m.get("method").is_none() {
                kept.extend(pending);
                self.stash = kept;
                return (m, notifications);
            }
            if m.get("id").is_none() && m.get("method").is_some() {
                notifications.push(m);
            } else {
                kept.push_back(m);
            }
        }
    }

    /// Wait for the response with `id` (default timeout).
    pub fn response(&mut self, id: impl Into<Value>) -> Value {
        self.response_within(&id.into(), WAIT).0
    }

    /// Send a request and wait for its response.
    pub fn call(&mut self, id: impl Into<Value>, method: &str, params: Value) -> Value {
        let id = id.into();
        self.send(&request(id.clone(), method, params));
        self.response_within(&id, WAIT).0
    }

    /// Send a 2026-07-28 request (`_meta` added) and wait for its response.
    pub fn call_modern(&mut self, id: impl Into<Value>, method: &str, params: Value) -> Value {
        self.call(id, method, with_meta(params))
    }

    /// Assert that nothing (not even a stashed message) arrives within `window`.
    pub fn assert_quiet(&mut self, window: Duration) {
        let stray = self.recv(window);
        assert!(stray.is_none(), "unexpected message: {stray:?}");
    }

    /// The legacy handshake: `initialize` with `version`, then `notifications/initialized`.
    /// Returns the initialize response.
    pub fn initialize(&mut self, version: &str) -> Value {
        let resp = self.call(
            "init",
            "initialize",
            json!({
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": { "name": "e2e", "version": "0" },
            }),
        );
        self.send(&notification("notifications/initialized", Value::Null));
        resp
    }

    /// Wait (generously: up to [`START`]) until the server serves every tool of `names`
    /// (upstream servers connect in the background: their tools join a moment after start),
    /// asking `tools/list` (2026-07-28, ids `ready-N`) until it does. Fails the test otherwise.
    #[track_caller]
    pub fn wait_for_tools(&mut self, names: &[&str]) {
        let mut n = 0;
        wait_until_served(names, || {
            n += 1;
            let served =
                tool_names(&self.call_modern(format!("ready-{n}"), "tools/list", json!({})));
            (served, self.stderr())
        });
    }

    /// Wait (generously: up to [`START`]) until the server lists the resource `uri` (as listed),
    /// asking `resources/list` (2026-07-28, ids `listed-N`) until it does: for an upstream that
    /// serves resources and no tool. Fails the test otherwise.
    #[track_caller]
    pub fn wait_for_resource(&mut self, uri: &str) {
        let deadline = Instant::now() + START;
        for n in 0.. {
            let resp = self.call_modern(format!("listed-{n}"), "resources/list", json!({}));
            let listed = resp["result"]["resources"]
                .as_array()
                .is_some_and(|all| all.iter().any(|r| r["uri"] == uri));
            if listed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not list {uri} within {START:?}: {resp}\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Close stdin (end of input for the server).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Wait for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.child.wait_timeout(timeout)
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// `mcp-host serve --listen 127.0.0.1:0`, with the address it bound.
#[derive(Debug)]
pub struct HttpServer {
    child: ChildGuard,
    /// The bound address.
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl HttpServer {
    /// Start the server on `config` and wait until it logs its address.
    pub fn start(config: &Path) -> Self {
        Self::start_with_env(config, &[])
    }

    /// [`HttpServer::start`] with extra environment variables for the server process.
    pub fn start_with_env(config: &Path, env: &[(&str, &str)]) -> Self {
        let mut cmd = host_command(config);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .envs(env.iter().copied());
        Self::spawn(cmd)
    }

    /// Run `cmd` (an `mcp-host ... serve` command listening on some address) and wait until it
    /// logs its address.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = channel();
        let stderr = collect_stderr(child.stderr.take().unwrap(), move |line| {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr = rest.split('/').next().unwrap_or("").trim().to_owned();
                let _ = tx.send(addr);
            }
        });
        let child = ChildGuard(child);
        let addr = match rx.recv_timeout(START) {
            Ok(a) => a
                .parse()
                .unwrap_or_else(|e| panic!("bad address {a:?}: {e}")),
            Err(_) => panic!(
                "the server did not log its address within {START:?}:\n{}",
                stderr.lock().unwrap()
            ),
        };
        HttpServer {
            child,
            addr,
            stderr,
        }
    }

    /// The log so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether the log shows `needle` within [`WAIT`] (stderr is read on its own thread, so a line
    /// may trail the answers that follow it); the wait ends as soon as it does.
    pub fn logged(&self, needle: &str) -> bool {
        log_shows(&self.stderr, needle)
    }

    /// The child process.
    pub fn child(&mut self) -> &mut ChildGuard {
        &mut self.child
    }

    /// A new connection.
    pub fn connect(&self) -> HttpConn {
        HttpConn::connect(self.addr)
    }

    /// `POST /mcp` with `body` on a fresh connection, with `Content-Type: application/json`, an
    /// `Accept` for JSON and SSE, and `headers`.
    pub fn post(&self, headers: &[(&str, &str)], body: &Value) -> HttpResponse {
        self.connect().post(headers, body.to_string().as_bytes())
    }

    /// A 2026-07-28 request with `_meta` and the headers it needs (`MCP-Protocol-Version`,
    /// `Mcp-Method`, and `Mcp-Name`: the name of `tools/call` and `prompts/get`, the URI of
    /// `resources/read`).
    pub fn modern(&self, id: impl Into<Value>, method: &str, params: Value) -> HttpResponse {
        let params = with_meta(params);
        let member = match method {
            "resources/read" => "uri",
            "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
            _ => "name",
        };
        let headers = modern_headers(method, params.get(member).and_then(Value::as_str));
        self.post(&header_refs(&headers), &request(id, method, params))
    }

    /// Wait (generously: up to [`START`]) until the server serves every tool of `names` at
    /// `/mcp` (upstream servers connect in the background), asking `tools/list` until it does.
    #[track_caller]
    pub fn wait_for_tools(&self, names: &[&str]) {
        wait_until_served(names, || {
            let served = tool_names(&self.modern("ready", "tools/list", json!({})).message());
            (served, self.stderr())
        });
    }

    /// A 2026-07-28 request to `path` (`/mcp` or `/mcp/agents/NAME`) with the headers it needs and,
    /// when given, `Authorization: Bearer <token>`, on a fresh connection.
    pub fn modern_at(
        &self,
        path: &str,
        token: Option<&str>,
        method: &str,
        params: Value,
    ) -> HttpResponse {
        let params = with_meta(params);
        let mut headers = modern_headers(method, params.get("name").and_then(Value::as_str));
        if let Some(t) = token {
            headers.push(("Authorization", format!("Bearer {t}")));
        }
        let body = request(1, method, params).to_string();
        self.connect()
            .post_to(path, &header_refs(&headers), body.as_bytes())
    }

    /// Open a 2026 `subscriptions/listen` stream with `params` (`_meta` added, keys already in
    /// `params._meta` win): the stream, past its `200` head (the acknowledgement is its first
    /// event).
    pub fn listen(&self, id: &str, params: Value) -> EventStream {
        let method = "subscriptions/listen";
        let mut headers = vec![
            ("Content-Type", "application/json".to_owned()),
            ("Accept", "application/json, text/event-stream".to_owned()),
        ];
        headers.extend(modern_headers(method, None));
        let mut conn = self.connect();
        let body = request(id, method, with_meta(params)).to_string();
        conn.send("POST", "/mcp", &header_refs(&headers), body.as_bytes());
        let head = conn.read_head();
        assert_eq!(head.status, 200, "{head:?}");
        EventStream::new(conn)
    }

    /// Open a new legacy session's GET event stream: the connection, past the response head.
    pub fn open_legacy_get_stream(&self, version: &str) -> (HttpConn, Head) {
        let (_, session) = self.initialize(version);
        let mut conn = self.connect();
        conn.send(
            "GET",
            "/mcp",
            &[
                ("Mcp-Session-Id", &session),
                ("Accept", "text/event-stream"),
            ],
            b"",
        );
        let head = conn.read_head();
        (conn, head)
    }

    /// The legacy handshake over HTTP; returns the initialize response and the session id.
    pub fn initialize(&self, version: &str) -> (HttpResponse, String) {
        let resp = self.post(
            &[],
            &request(
                1,
                "initialize",
                json!({
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": { "name": "e2e", "version": "0" },
                }),
            ),
        );
        assert_eq!(resp.status, 200, "{resp:?}");
        let session = resp
            .header("mcp-session-id")
            .unwrap_or_else(|| panic!("initialize returned no Mcp-Session-Id: {resp:?}"))
            .to_owned();
        let ack = self.post(
            &[("Mcp-Session-Id", &session)],
            &notification("notifications/initialized", Value::Null),
        );
        assert_eq!(ack.status, 202, "{ack:?}");
        (resp, session)
    }
}

/// An open SSE response body (a listen stream, a GET stream, a streamed call), read event by
/// event (comments skipped).
#[derive(Debug)]
pub struct EventStream {
    conn: HttpConn,
    pending: String,
    events: VecDeque<Value>,
}

impl EventStream {
    /// Read events from `conn`, already past the response head.
    pub fn new(conn: HttpConn) -> Self {
        EventStream {
            conn,
            pending: String::new(),
            events: VecDeque::new(),
        }
    }

    /// The next event within `timeout` (fails the test otherwise).
    #[track_caller]
    pub fn next(&mut self, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events.pop_front() {
                return e;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no event within {timeout:?} (pending: {:?})",
                self.pending
            );
            self.conn.set_read_timeout(left);
            // A read timeout panics inside the client: say what was awaited, and where.
            let conn = &mut self.conn;
            let Ok(chunk) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conn.read_chunk()))
            else {
                panic!("no event within {timeout:?} (pending: {:?})", self.pending)
            };
            let chunk = chunk.expect("the event stream ended");
            self.pending
                .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
            while let Some(end) = self.pending.find("\n\n") {
                let event: String = self.pending.drain(..end + 2).collect();
                self.events.extend(sse_events(&event));
            }
        }
    }

    /// The first event with `method` within `timeout` (others are dropped).
    #[track_caller]
    pub fn wait_for(&mut self, method: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let e = self.next(left.max(Duration::from_millis(1)));
            if e["method"] == method {
                return e;
            }
        }
    }
}

/// The headers a 2026-07-28 request needs.
pub fn modern_headers(method: &str, name: Option<&str>) -> Vec<(&'static str, String)> {
    let mut h = vec![
        ("MCP-Protocol-Version", MODERN.to_owned()),
        ("Mcp-Method", method.to_owned()),
    ];
    if let Some(name) = name {
        h.push(("Mcp-Name", name.to_owned()));
    }
    h
}

/// Borrow owned header pairs (as [`modern_headers`] returns them) for the request functions.
pub fn header_refs<'a>(headers: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    headers.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// A complete HTTP response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The media type of `Content-Type` (without parameters), or "".
    pub fn content_type(&self) -> &str {
        self.header("content-type")
            .and_then(|c| c.split(';').next())
            .unwrap_or("")
            .trim()
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (fails the test if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {self:?}"))
    }

    /// The JSON messages of an SSE body.
    pub fn events(&self) -> Vec<Value> {
        sse_events(&self.text())
    }

    /// The JSON-RPC message this response carries: the JSON body, or the last SSE event.
    pub fn message(&self) -> Value {
        match self.content_type() {
            "text/event-stream" => self
                .events()
                .pop()
                .unwrap_or_else(|| panic!("empty event stream: {self:?}")),
            _ => self.json(),
        }
    }
}

/// Parse the `data:` lines of SSE text into JSON values (one per event; comments skipped).
pub fn sse_events(text: &str) -> Vec<Value> {
    let text = text.replace("\r\n", "\n");
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() {
                return None;
            }
            let joined = data.join("\n");
            Some(
                serde_json::from_str(&joined)
                    .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {joined:?}")),
            )
        })
        .collect()
}

/// The status line and headers of a response.
#[derive(Debug, Clone)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn chunked(&self) -> bool {
        self.header("transfer-encoding")
            .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"))
    }
}

/// A minimal HTTP/1.1 client connection: arbitrary requests, Content-Length or chunked bodies,
/// chunk-by-chunk reading for streams. Reads time out (default [`WAIT`]).
#[derive(Debug)]
pub struct HttpConn {
    stream: TcpStream,
    buf: Vec<u8>,
    addr: SocketAddr,
}

impl HttpConn {
    /// Connect to `addr`.
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect_timeout(&addr, WAIT).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        stream.set_write_timeout(Some(WAIT)).unwrap();
        stream.set_nodelay(true).unwrap();
        HttpConn {
            stream,
            buf: Vec::new(),
            addr,
        }
    }

    /// Change the read timeout.
    pub fn set_read_timeout(&self, timeout: Duration) {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
    }

    /// Write raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
        self.stream.flush().unwrap();
    }

    /// Send a request. `Host` (the server's address) and `Content-Length` are added unless
    /// `headers` has them (or has `Transfer-Encoding`, in which case `body` is sent as given).
    pub fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
        let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        if !has("host") {
            head.push_str(&format!("Host: {}\r\n", self.addr));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !has("content-length")
            && !has("transfer-encoding")
            && (method != "GET" || !body.is_empty())
        {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        self.send_raw(&bytes);
    }

    /// Read more bytes into the buffer; fails the test on timeout, and returns false at EOF.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) => panic!(
                "reading from {} failed: {e} (so far: {:?})",
                self.addr,
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    fn read_line(&mut self) -> String {
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..pos + 2).take(pos).collect();
                return String::from_utf8(line).unwrap();
            }
            assert!(
                self.fill(),
                "connection closed mid-line: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        }
    }

    fn read_exact_bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill(), "connection closed mid-body");
        }
        self.buf.drain(..n).collect()
    }

    /// Read the status line and headers (skipping `100 Continue`).
    pub fn read_head(&mut self) -> Head {
        loop {
            let status_line = self.read_line();
            let status: u16 = status_line
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
            let mut headers = Vec::new();
            loop {
                let line = self.read_line();
                if line.is_empty() {
                    break;
                }
                let (k, v) = line.split_once(':').unwrap();
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
            if status != 100 {
                return Head { status, headers };
            }
        }
    }

    /// The next chunk of a chunked body; `None` after the last chunk.
    pub fn read_chunk(&mut self) -> Option<Vec<u8>> {
        let size_line = self.read_line();
        let size = usize::from_str_radix(size_line.split(';').next().unwrap().trim(), 16)
            .unwrap_or_else(|e| panic!("bad chunk size {size_line:?}: {e}"));
        if size == 0 {
            // Trailers, up to the empty line.
            while !self.read_line().is_empty() {}
            return None;
        }
        let data = self.read_exact_bytes(size);
        assert_eq!(self.read_line(), "", "chunk not followed by CRLF");
        Some(data)
    }

    /// Read the body that goes with `head`.
    pub fn read_body(&mut self, head: &Head) -> Vec<u8> {
        if head.chunked() {
            let mut body = Vec::new();
            while let Some(chunk) = self.read_chunk() {
                body.extend(chunk);
            }
            return body;
        }
        if let Some(len) = head.header("content-length") {
            return self.read_exact_bytes(len.parse().unwrap());
        }
        if matches!(head.status, 204 | 304) || (100..200).contains(&head.status) {
            return Vec::new();
        }
        while self.fill() {}
        std::mem::take(&mut self.buf)
    }

    /// Read a complete response.
    pub fn read_response(&mut self) -> HttpResponse {
        let head = self.read_head();
        let body = self.read_body(&head);
        HttpResponse {
            status: head.status,
            headers: head.headers,
            body,
        }
    }

    /// Send a request and read the complete response.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> HttpResponse {
        self.send(method, path, headers, body);
        self.read_response()
    }

    /// `POST /mcp` with JSON content type, an `Accept` for JSON and SSE, and `headers`.
    pub fn post(&mut self, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
        self.post_to("/mcp", headers, body)
    }

    /// [`HttpConn::post`] to another path (e.g. `/mcp/agents/NAME`).
    pub fn post_to(&mut self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
        let mut all = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        all.extend_from_slice(headers);
        self.request("POST", path, &all, body)
    }

    /// Whether the server closes this connection (end of stream or a reset) before anything more
    /// arrives or the read timeout passes.
    pub fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    }

    /// Close both directions now.
    pub fn close(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Whether `log` (a server's stderr, filled by its reader thread) shows `needle` within [`WAIT`].
fn log_shows(log: &Mutex<String>, needle: &str) -> bool {
    let deadline = Instant::now() + WAIT;
    loop {
        if log.lock().unwrap().contains(needle) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
