//! F3, F5, B3 and B4 of issue 51 — what crosses the wire from an upstream MCP server (the
//! hostile fixture `tests/fixtures/upstream/hostile.py`, served through the host): a redirect that
//! would carry the entry's credential header and every request's body to another origin (or from
//! https to http); log messages outside any call, in a flood, forging log lines; a stderr burst
//! whose last lines (a traceback's exception) are the ones that matter; and the `serverInfo` a
//! result names. The host stays up and serves everyone else under each.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use mcp_host_tests::workspace_root;

use super::*;

/// The credential header's value an upstream entry sends.
const KEY: &str = "hostile-suite-api-key-0123456789";

/// The hostile fixture.
fn hostile() -> PathBuf {
    workspace_root().join("tests/fixtures/upstream/hostile.py")
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The hostile fixture over HTTP on `port`, killed on drop.
struct Upstream(Child);

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the fixture in `mode` over HTTP (with `args`) on a free port, once it accepts
/// connections: it and its port.
fn http_upstream(mode: &str, args: &[&str]) -> (Upstream, u16) {
    let port = free_port();
    let child = Command::new("python3")
        .arg(hostile())
        .args(["--mode", mode, "--http", &port.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let upstream = Upstream(child);
    let deadline = Instant::now() + START;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the HTTP upstream did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (upstream, port)
}

/// Another origin: a listener on 127.0.0.1 that records what reaches it (each connection's
/// bytes, as text) and answers `200 {}` (or as told).
struct Recorder {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn start() -> Recorder {
        Self::answering("200 OK")
    }

    /// A recorder answering every request with `status` (e.g. `404 Not Found`) and `{}`.
    fn answering(status: &str) -> Recorder {
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        std::thread::spawn(move || {
            for mut conn in listener.incoming().map_while(Result::ok) {
                let at = {
                    let mut seen = record.lock().unwrap();
                    seen.push(String::new());
                    seen.len() - 1
                };
                conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut buf = [0u8; 65536];
                if let Ok(n) = conn.read(&mut buf) {
                    record.lock().unwrap()[at] = String::from_utf8_lossy(&buf[..n]).into_owned();
                }
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        Recorder { addr, seen }
    }

    /// What reached it so far.
    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// Call tool `name` of an upstream once it is served (an upstream's tools may join after the host
/// opened its listener): the result's text, and whether it is an error.
fn call_served(s: &HttpServer, name: &str, args: Value) -> (String, bool) {
    let deadline = Instant::now() + START;
    loop {
        let r = call_at(s, "/mcp", None, name, args.clone());
        let m = r.message();
        let unknown = m.get("error").is_some()
            || m["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("unknown tool"));
        if !unknown {
            return tool_text(&r);
        }
        assert!(
            Instant::now() < deadline,
            "{name} never served: {m}\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A layout with `fixture-basic` in `d` and the upstream `entries` (YAML list items) after it.
fn with_upstreams(entries: &str) -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config(&format!("tool_dirs:\n  - d\n{entries}"));
    (l, cfg)
}

/// An upstream entry for `url` named `name` (prefix `<name>_`), with the credential header and
/// `extra` keys of `server`.
fn http_entry(name: &str, url: &str, extra: &str) -> String {
    format!(
        "  - server: {{url: \"{url}\", headers: {{X-Api-Key: \"{KEY}\"}}{extra}}}\n    name: {name}\n    prefix: {name}_\n"
    )
}

/// Wait (generously) until the host says it did not follow a redirect, or the other origin was
/// reached (which the caller then reports).
fn wait_for_refusal(s: &HttpServer, other: &Recorder) {
    let deadline = Instant::now() + START;
    while !s.stderr().contains("not followed") && other.seen().is_empty() {
        assert!(
            Instant::now() < deadline,
            "no redirect refused:\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Nothing reached the other origin: not the credential, not a body.
#[track_caller]
fn assert_untouched(other: &Recorder) {
    let seen = other.seen();
    assert!(
        seen.is_empty(),
        "the other origin received {} request(s); credential sent: {}; first: {:?}",
        seen.len(),
        seen.iter()
            .any(|r| r.to_ascii_lowercase().contains("x-api-key")),
        seen.first()
    );
}

// ---------------------------------------------------------------------------------------------
// F3: redirects

#[test]
fn a_redirect_to_another_origin_takes_neither_the_key_nor_a_body_there_and_names_its_location() {
    for (mode, status) in [("redirect", "307"), ("redirect308", "308")] {
        let other = Recorder::start();
        let location = format!("http://{}/mcp", other.addr);
        let (_upstream, port) = http_upstream(mode, &["--to", &location]);
        let url = format!("http://127.0.0.1:{port}/mcp");
        let (l, cfg) = with_upstreams(&http_entry("redir", &url, ""));
        let s = HttpServer::start(&cfg);
        wait_for_refusal(&s, &other);
        assert_untouched(&other);
        let log = s.stderr();
        let refused = format!("HTTP {status} from {url} redirects to {location}: not followed");
        assert!(log.contains(&refused), "{refused:?} not in:\n{log}");
        // The upstream's status says so, in words.
        let out = l.run(&cfg, &["list"]);
        let listed = String::from_utf8_lossy(&out.stdout);
        assert!(listed.contains(&refused), "{listed}");
        assert!(
            !listed.contains("reqwest::") && !listed.contains("rmcp::"),
            "{listed}"
        );
        assert_untouched(&other);
        assert_serves_others(&s);
    }
}

#[test]
fn a_same_origin_redirect_is_followed_only_for_an_entry_that_asks() {
    let (_upstream, port) = http_upstream("redirect", &["--to", "/landed"]);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let entries = format!(
        "{}{}",
        http_entry("strict", &url, ""),
        http_entry("follow", &url, ", follow_redirects: same_origin")
    );
    let (_l, cfg) = with_upstreams(&entries);
    let s = HttpServer::start(&cfg);
    assert_eq!(
        call_served(&s, "follow_echo", json!({"text": "through the redirect"})),
        ("through the redirect".to_owned(), false)
    );
    let refused =
        format!("HTTP 307 from {url} redirects to http://127.0.0.1:{port}/landed: not followed");
    // Waits: `strict` connects on its own in the background; `follow` served says nothing of it.
    wait_for_log(&s, &refused);
    let r = call_at(&s, "/mcp", None, "strict_echo", json!({"text": "x"}));
    let m = r.message();
    assert!(
        m.get("error").is_some() || m["result"]["isError"] == true,
        "{m}"
    );
    assert_serves_others(&s);
}

#[test]
fn the_event_stream_never_follows_a_redirect_to_another_origin() {
    let other = Recorder::start();
    let location = format!("http://{}/mcp", other.addr);
    // POSTs are served; the GET that opens a 2025 session's event stream is redirected.
    let (_upstream, port) = http_upstream("redirect_get", &["--to", &location]);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (_l, cfg) = with_upstreams(&http_entry("stream", &url, ""));
    let s = HttpServer::start(&cfg);
    wait_for_refusal(&s, &other);
    assert_untouched(&other);
    let refused = format!("HTTP 308 from {url} redirects to {location}: not followed");
    assert!(s.stderr().contains(&refused), "{}", s.stderr());
    assert_serves_others(&s);
}

/// A certificate authority and a certificate for 127.0.0.1 it signed, made by `openssl` in
/// `dir` (`ca.pem`, `cert.pem`, `key.pem`); `None` (after saying why) without `openssl`.
fn tls_files(dir: &Path) -> Option<PathBuf> {
    let found = Command::new("openssl").arg("version").output().is_ok();
    mcp_host_tests::clients::require_or_skip("openssl", found.then(|| PathBuf::from("openssl")))?;
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    run(&[
        &["req", "-x509", "-nodes", "-days", "2"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=hostile-suite-ca",
        ],
    ]
    .concat());
    run(&[
        &["req", "-nodes"][..],
        &ec,
        &[
            "-keyout",
            "key.pem",
            "-out",
            "cert.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "cert.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "cert.pem",
        "-extfile",
        "ext.cnf",
    ]);
    Some(dir.join("ca.pem"))
}

#[test]
fn https_is_never_followed_to_http_even_by_an_entry_that_follows_same_origin_redirects() {
    let l = Layout::new();
    let tls = l.dir("tls");
    let Some(ca) = tls_files(&tls) else { return };
    let other = Recorder::start();
    let location = format!("http://{}/mcp", other.addr);
    let (_upstream, port) = http_upstream(
        "redirect",
        &["--to", &location, "--tls", &tls.to_string_lossy()],
    );
    let follows = ", follow_redirects: same_origin";
    // The same server's /landed answers over TLS: the certificate is trusted, the test is real.
    let landed = format!("https://127.0.0.1:{port}/landed");
    let url = format!("https://127.0.0.1:{port}/mcp");
    l.install("d", "fixture-basic", None);
    let cfg = l.config(&format!(
        "tool_dirs:\n  - d\n{}{}",
        http_entry("secure", &landed, follows),
        http_entry("downgrade", &url, follows)
    ));
    let ca = ca.to_string_lossy();
    let s = HttpServer::start_with_env(&cfg, &[("SSL_CERT_FILE", &ca)]);
    assert_eq!(
        call_served(&s, "secure_echo", json!({"text": "over tls"})),
        ("over tls".to_owned(), false)
    );
    wait_for_refusal(&s, &other);
    assert_untouched(&other);
    let refused = format!(
        "HTTP 307 from {url} redirects to {location}: not followed (from https to http: never followed)"
    );
    assert!(s.stderr().contains(&refused), "{}", s.stderr());
    assert_serves_others(&s);
}

#[test]
fn an_http_upstream_that_is_not_there_or_answers_404_says_so_in_words() {
    let closed = free_port();
    let other = Recorder::answering("404 Not Found");
    let missing = format!("http://127.0.0.1:{closed}/mcp");
    let wrong = format!("http://{}/mcp", other.addr);
    let (l, cfg) = with_upstreams(&format!(
        "{}{}",
        http_entry("gone", &missing, ""),
        http_entry("wrong", &wrong, "")
    ));
    let out = l.run(&cfg, &["list"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains(&format!("connection refused: {missing}")),
        "{listed}"
    );
    assert!(
        listed.contains(&format!("HTTP 404 Not Found from {wrong}")),
        "{listed}"
    );
    assert!(
        !listed.contains("reqwest::") && !listed.contains("rmcp::") && !listed.contains("hyper"),
        "{listed}"
    );
}

// ---------------------------------------------------------------------------------------------
// F5: log messages outside a call

/// A stdio upstream entry running the fixture in `mode` (with `args`), named `name`.
fn stdio_entry(name: &str, mode: &str, args: &[&str]) -> String {
    let mut argv = vec![
        "python3".to_owned(),
        hostile().to_string_lossy().into_owned(),
        "--mode".into(),
        mode.into(),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let quoted: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "  - server: {{command: [{}]}}\n    name: {name}\n    prefix: {name}_\n",
        quoted.join(", ")
    )
}

#[test]
fn a_log_flood_outside_a_call_forges_no_line_and_is_bounded_in_count_and_size() {
    let (_l, cfg) = with_upstreams(&stdio_entry("flood", "log_flood", &[]));
    let began = Instant::now();
    let s = HttpServer::start(&cfg);
    // The flood's last message ends its burst: it is logged once the upstream falls quiet.
    wait_for_log(&s, "flood done");
    let elapsed = began.elapsed().as_secs() + 2;
    let log = s.stderr();
    let forged: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("1999-12-31T"))
        .collect();
    assert!(
        forged.is_empty(),
        "forged lines: {:?}",
        &forged[..forged.len().min(3)]
    );
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096 + 1024, "a log line of {longest} bytes");
    // 3000 messages: the burst, the rate since start, and the last lines of the burst.
    let logged = log.lines().filter(|l| l.contains("] flood ")).count() as u64;
    let bound = 200 + 50 * elapsed + 20;
    assert!(
        logged <= bound,
        "{logged} flood messages logged in {elapsed} s"
    );
    assert!(log.contains("lines dropped"), "{log}");
    assert_serves_others(&s);
    assert_eq!(
        call_served(&s, "flood_echo", json!({"text": "still up"})),
        ("still up".to_owned(), false)
    );
}

// ---------------------------------------------------------------------------------------------
// B3: the last lines of a stderr burst

#[test]
fn a_stderr_burst_keeps_its_exception_and_its_count_whether_the_upstream_lives_on_or_dies() {
    let entries = format!(
        "{}{}",
        stdio_entry("lives", "stderr_burst", &[]),
        stdio_entry("dies", "crash_burst", &[])
    );
    let (_l, cfg) = with_upstreams(&entries);
    let s = HttpServer::start(&cfg);
    let exception = "ValueError: hostile-upstream-exception";
    for name in ["lives", "dies"] {
        let deadline = Instant::now() + START;
        let said = |needle: &str| {
            s.stderr()
                .lines()
                .any(|l| l.contains(needle) && l.contains(&format!("upstream=\"{name}\"")))
        };
        while !(said(exception) && said("stderr: ") && said("lines dropped")) {
            assert!(
                Instant::now() < deadline,
                "upstream {name}: no exception or no count in:\n{}",
                s.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert_serves_others(&s);
    assert_eq!(
        call_served(&s, "lives_echo", json!({"text": "alive"})),
        ("alive".to_owned(), false)
    );
}

#[test]
fn a_workers_output_burst_keeps_its_exception_and_its_count() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("iso", "fixture-hostile", None);
    let cfg = l.config("tool_dirs:\n  - d\n  - {path: iso, isolation: process}\n");
    let s = HttpServer::start(&cfg);
    let last = "ValueError: hostile-worker-exception";
    let r = call_at(
        &s,
        "/mcp",
        None,
        "hostile_stderr_burst",
        json!({"lines": 600, "last": last}),
    );
    assert_eq!(tool_text(&r), ("wrote 600 lines".to_owned(), false));
    // The worker lives on: its burst ends when its output falls quiet.
    wait_for_log(&s, last);
    wait_for_log(&s, "lines dropped");
    assert_serves_others(&s);
}

// ---------------------------------------------------------------------------------------------
// B4: whose serverInfo a result names

/// The `serverInfo` a result's `_meta` names, and whether the upstream's own `_meta` member
/// was kept.
fn named(result: &Value) -> (Value, Value) {
    let meta = &result["_meta"];
    (
        meta["io.modelcontextprotocol/serverInfo"]["name"].clone(),
        meta["hostile/kept"].clone(),
    )
}

/// The answer of `call` (given a request id) once the tool is served.
fn served(mut call: impl FnMut(u64) -> Value) -> Value {
    let deadline = Instant::now() + START;
    let mut id = 0;
    loop {
        id += 1;
        let r = call(id);
        let unknown = r.get("error").is_some()
            || r["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("unknown tool"));
        if !unknown || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_result_names_the_host_not_the_upstream_in_every_era_and_in_mcp_host_call() {
    let (l, cfg) = with_upstreams(&stdio_entry("info", "server_info_meta", &["--era", "2026"]));
    let host = (json!("mcp-host"), json!(true));
    let params = json!({"name": "info_echo", "arguments": {"text": "x"}});
    let mut modern = StdioServer::start(&cfg);
    let r = served(|id| modern.call_modern(id, "tools/call", params.clone()));
    assert_eq!(named(&r["result"]), host, "{r}");
    let mut legacy = StdioServer::start(&cfg);
    legacy.initialize("2025-11-25");
    let r = served(|id| legacy.call(id, "tools/call", params.clone()));
    assert_eq!(named(&r["result"]), host, "{r}");
    let out = l.run(&cfg, &["call", "info_echo", "--args", "{\"text\": \"x\"}"]);
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(named(&printed), host, "{printed}");
}
