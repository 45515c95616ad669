//! M5, L1, L2, L9, L14: Redis over TLS with AUTH, authenticated task records, secrets kept out of
//! logs, `/healthz` and `mcp-host config`, private file modes, task results bounded in bytes.
//!
//! Against the real binary and a real `redis-server` of the test's own on loopback ports (plain,
//! TLS with a CA and certificate generated here by the `openssl` command, and a Unix socket).
//! Where `redis-server` or `openssl` is missing the Redis tests skip with a message, unless
//! `MCP_TEST_REQUIRE_CLIENTS` is set. The attacker with write access to Redis is played by the
//! test itself, speaking RESP over a plain TCP connection.

use super::*;

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use mcp_host_tests::artifacts;
use mcp_host_tests::clients::require_or_skip;
use mcp_host_tests::fleet::{free_port, output_lines, redis_server};
use mcp_host_tests::serve::{ChildGuard, with_tasks};

/// Mallory: another authenticated caller, the attacker.
const MALLORY: &str = "mcp_mallory-store-trust-secret-0123456789";
/// The `request_state.keys` of the Redis tests.
const STATE_KEY: &str = "store-trust-request-state-key-0123456789abcdef";
/// The password Redis requires in the AUTH tests.
const REDIS_PASSWORD: &str = "s3cret-redis-pw-4e1f";

// ---------------------------------------------------------------------------------------------
// A redis-server of the test's own, and a RESP client for the attacker

/// A CA and a server certificate for 127.0.0.1 signed by it, as PEM files.
struct Certs {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// `openssl`, or `None` after saying why the test skips.
fn openssl() -> Option<PathBuf> {
    let found = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        .then(|| PathBuf::from("openssl"));
    require_or_skip("openssl (.ci/install-services.sh)", found)
}

fn run_openssl(bin: &Path, dir: &Path, args: &[&str]) {
    let out = Command::new(bin)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Generate a private CA and a certificate for `127.0.0.1` (EC P-256, valid two days).
fn make_certs(bin: &Path) -> Certs {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=mcp-host test CA",
    ];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    run_openssl(bin, d, &ca);
    let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    run_openssl(bin, d, &csr);
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run_openssl(
        bin,
        d,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.crt",
        ],
    );
    Certs {
        ca: d.join("ca.crt"),
        cert: d.join("server.crt"),
        key: d.join("server.key"),
        _dir: dir,
    }
}

/// A `redis-server` of the test's own: plain TCP on `port`, TLS on `tls_port` when started with
/// certificates, a Unix socket, no persistence.
struct TestRedis {
    _child: ChildGuard,
    dir: tempfile::TempDir,
    port: u16,
    tls_port: u16,
}

impl TestRedis {
    /// Start `bin` with the configuration lines `conf` (and TLS with `certs`), waiting until it
    /// is ready.
    fn start(bin: &Path, conf: &str, certs: Option<&Certs>) -> TestRedis {
        let dir = tempfile::tempdir().unwrap();
        let conf_file = dir.path().join("redis.conf");
        std::fs::write(&conf_file, conf).unwrap();
        let mut log = Vec::new();
        for _ in 0..5 {
            let (port, tls_port) = (free_port(), free_port());
            let mut cmd = Command::new(bin);
            cmd.arg(&conf_file)
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no", "--logfile", ""])
                .arg("--dir")
                .arg(dir.path())
                .arg("--unixsocket")
                .arg(dir.path().join("redis.sock"))
                .args(["--unixsocketperm", "700"]);
            if let Some(c) = certs {
                cmd.args(["--tls-port", &tls_port.to_string()])
                    .arg("--tls-cert-file")
                    .arg(&c.cert)
                    .arg("--tls-key-file")
                    .arg(&c.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&c.ca)
                    .args(["--tls-auth-clients", "no"]);
            }
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let lines = output_lines(child.stdout.take().unwrap());
            let mut child = ChildGuard::from_child(child);
            let deadline = Instant::now() + START;
            let ready = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match lines.recv_timeout(left) {
                    Ok(line) => {
                        let found = line.contains("Ready to accept connections");
                        log.push(line);
                        if found {
                            break true;
                        }
                    }
                    Err(_) => break false,
                }
            };
            if ready {
                std::thread::spawn(move || for _ in lines {});
                return TestRedis {
                    _child: child,
                    dir,
                    port,
                    tls_port,
                };
            }
            child.kill();
        }
        panic!(
            "redis-server did not start (a redis-server without TLS support cannot run the TLS \
             test):\n{}",
            log.join("\n")
        );
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// A connection for the attacker (plain TCP), authenticated with `password` when given.
    fn attacker(&self, password: Option<&str>) -> Resp {
        let mut conn = Resp {
            stream: BufReader::new(TcpStream::connect(("127.0.0.1", self.port)).unwrap()),
        };
        if let Some(pw) = password {
            assert_eq!(conn.cmd(&["AUTH", pw]), Reply::Text("OK".into()));
        }
        conn
    }
}

/// A Redis reply.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Nil,
    Text(String),
    Int(i64),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    fn text(&self) -> &str {
        match self {
            Reply::Text(t) => t,
            other => panic!("not a string: {other:?}"),
        }
    }
}

/// A RESP2 connection.
struct Resp {
    stream: BufReader<TcpStream>,
}

impl Resp {
    fn cmd(&mut self, args: &[&str]) -> Reply {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out).unwrap();
        self.stream.get_ref().set_read_timeout(Some(WAIT)).unwrap();
        self.read()
    }

    fn read(&mut self) -> Reply {
        let mut line = String::new();
        self.stream.read_line(&mut line).unwrap();
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Reply::Text(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let len: i64 = rest.parse().unwrap();
                if len < 0 {
                    return Reply::Nil;
                }
                let mut buf = vec![0u8; len as usize + 2];
                self.stream.read_exact(&mut buf).unwrap();
                buf.truncate(len as usize);
                Reply::Text(String::from_utf8(buf).unwrap())
            }
            "*" => {
                let n: i64 = rest.parse().unwrap();
                Reply::Array((0..n.max(0)).map(|_| self.read()).collect())
            }
            _ => panic!("unexpected reply {line:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tasks over HTTP

/// `auth.secrets` with alice's and mallory's secrets.
fn two_callers() -> String {
    format!(
        "auth:\n  secrets:\n    - {{sha256: {}, user: alice}}\n    - {{sha256: {}, user: mallory}}\n",
        mcp_host::access::auth::hash_secret(ALICE),
        mcp_host::access::auth::hash_secret(MALLORY)
    )
}

/// A 2026 request declaring the tasks extension, by `token` (or anonymously): the response.
fn task_rpc(s: &HttpServer, token: Option<&str>, method: &str, params: Value) -> HttpResponse {
    let params = with_meta(with_tasks(params));
    let member = if method == "tools/call" {
        "name"
    } else {
        "taskId"
    };
    let mut headers = modern_headers(method, params.get(member).and_then(Value::as_str));
    if let Some(t) = token {
        headers.push(("Authorization", format!("Bearer {t}")));
    }
    let body = request(1, method, params).to_string();
    s.connect()
        .post_to("/mcp", &header_refs(&headers), body.as_bytes())
}

/// Start a task of `tool` as `token`: its id.
#[track_caller]
fn start_task(s: &HttpServer, token: Option<&str>, tool: &str, args: Value) -> String {
    let r = task_rpc(
        s,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    let m = r.message();
    assert_eq!(m["result"]["resultType"], "task", "{m}\n{}", s.stderr());
    m["result"]["taskId"].as_str().unwrap().to_owned()
}

/// `tasks/get` as `token`: the JSON-RPC message.
fn get_task(s: &HttpServer, token: Option<&str>, id: &str) -> Value {
    task_rpc(s, token, "tasks/get", json!({"taskId": id})).message()
}

/// Poll `tasks/get` until the task is in one of `statuses` (up to [`WAIT`]): the task.
#[track_caller]
fn wait_status(s: &HttpServer, token: Option<&str>, id: &str, statuses: &[&str]) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let m = get_task(s, token, id);
        let task = &m["result"];
        if statuses.iter().any(|st| task["status"] == *st) {
            return task.clone();
        }
        assert!(
            Instant::now() < deadline,
            "task {id} not {statuses:?} within {WAIT:?}: {m}\n{}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[track_caller]
fn assert_not_found(m: &Value) {
    assert_eq!(m["error"]["code"], -32602, "{m}");
    assert!(
        m["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Task not found"),
        "{m}"
    );
}

/// The stored record of task `id` (as Redis holds it): the part before the JSON (empty for an
/// unsealed record) and the JSON.
fn read_record(r: &mut Resp, id: &str) -> (String, Value) {
    let rec = r.cmd(&["HGET", &format!("mcp-host:task:{id}"), "rec"]);
    let text = rec.text();
    let at = text.find('{').unwrap();
    (
        text[..at].to_owned(),
        serde_json::from_str(&text[at..]).unwrap(),
    )
}

/// What an attacker with write access to Redis (and without the keys) does: rewrite the record's
/// JSON, keeping what comes before it.
fn write_record(r: &mut Resp, id: &str, prefix: &str, record: &Value) {
    let text = format!("{prefix}{record}");
    let reply = r.cmd(&["HSET", &format!("mcp-host:task:{id}"), "rec", &text]);
    assert_eq!(reply, Reply::Int(0), "the field existed");
}

/// The config lines of the Redis store at `url`, with the keys that seal its records.
fn redis_store(url: &str) -> String {
    format!("store: \"{url}\"\nrequest_state: {{keys: [\"{STATE_KEY}\"]}}\n")
}

/// [`redis_store`], short leases and polls, and `extra`.
/// A redis-server of the test's own, and a host layout on it with the conformance and basic
/// fixtures and two callers.
fn redis_with_two_callers(bin: &std::path::Path) -> (TestRedis, Layout, PathBuf) {
    let redis = TestRedis::start(bin, "", None);
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let (l, cfg) = layout(
        &["fixture-conformance", "fixture-basic"],
        &redis_config(&url, &two_callers()),
    );
    (redis, l, cfg)
}

fn redis_config(url: &str, extra: &str) -> String {
    format!(
        "{}tasks: {{lease_secs: 5, poll_interval_ms: 100}}\n{extra}",
        redis_store(url)
    )
}

// ---------------------------------------------------------------------------------------------
// M5: a record edited in Redis

#[test]
fn a_task_record_edited_in_redis_is_refused_and_runs_nothing() {
    let Some(bin) = redis_server() else { return };
    let (redis, _l, cfg) = redis_with_two_callers(&bin);
    let mut s = HttpServer::start(&cfg);
    let mut attacker = redis.attacker(None);

    // Alice's finished task, with a result only she may see.
    let alice_task = start_task(
        &s,
        Some(ALICE),
        "slow_compute",
        json!({"seconds": 0, "label": "alice-private"}),
    );
    let done = wait_status(&s, Some(ALICE), &alice_task, &["completed"]);
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Computed alice-private in 0 s"
    );
    // Another of hers, left alone.
    let untouched = start_task(
        &s,
        Some(ALICE),
        "slow_compute",
        json!({"seconds": 0, "label": "kept"}),
    );
    wait_status(&s, Some(ALICE), &untouched, &["completed"]);
    // Mallory's own task, waiting for her answer.
    let mallory_task = start_task(
        &s,
        Some(MALLORY),
        "confirm_delete",
        json!({"filename": "m.txt"}),
    );
    let waiting = wait_status(&s, Some(MALLORY), &mallory_task, &["input_required"]);
    let key = waiting["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    assert_not_found(&get_task(&s, Some(MALLORY), &alice_task));

    // 1. Alice's record, given to mallory.
    let (prefix, mut record) = read_record(&mut attacker, &alice_task);
    assert_eq!(record["owner"], "alice\u{0}", "{record}");
    let alice_caller = record["caller"].clone();
    assert_eq!(alice_caller["user_id"], "alice", "{record}");
    record["owner"] = json!("mallory\u{0}");
    write_record(&mut attacker, &alice_task, &prefix, &record);
    let seen = get_task(&s, Some(MALLORY), &alice_task);
    assert_not_found(&seen);
    assert!(!seen.to_string().contains("alice-private"), "{seen}");
    assert_not_found(
        &task_rpc(
            &s,
            Some(MALLORY),
            "tasks/cancel",
            json!({"taskId": alice_task}),
        )
        .message(),
    );
    wait_for_log(
        &s,
        &format!("the stored record of task {alice_task} is refused"),
    );

    // 2. Mallory's waiting record, turned into a call of another tool as alice.
    let (prefix, mut record) = read_record(&mut attacker, &mallory_task);
    record["caller"] = alice_caller;
    record["tool"] = json!("slow_compute");
    record["arguments"] = json!({"seconds": 0, "label": "forged"});
    write_record(&mut attacker, &mallory_task, &prefix, &record);
    let answer = json!({"action": "accept", "content": {"confirm": true}});
    let r = task_rpc(
        &s,
        Some(MALLORY),
        "tasks/update",
        json!({"taskId": mallory_task, "inputResponses": {key: answer}}),
    );
    assert_not_found(&r.message());
    // Nothing ran: the record is as the attacker left it (still waiting, no result), and the
    // forged call's result appears nowhere.
    let (_, after) = read_record(&mut attacker, &mallory_task);
    assert_eq!(after["status"], "input_required", "{after}");
    assert!(after["result"].is_null(), "{after}");
    assert_not_found(&get_task(&s, Some(MALLORY), &mallory_task));
    assert!(!s.stderr().contains("Computed forged"), "{}", s.stderr());

    // 3. A valid record copied under another task's id is refused too.
    let copied = attacker.cmd(&["HGET", &format!("mcp-host:task:{untouched}"), "rec"]);
    attacker.cmd(&[
        "HSET",
        &format!("mcp-host:task:{mallory_task}"),
        "rec",
        copied.text(),
    ]);
    assert_not_found(&get_task(&s, Some(MALLORY), &mallory_task));

    // Alice's untouched task and everyone else are served as before.
    let kept = get_task(&s, Some(ALICE), &untouched);
    assert_eq!(kept["result"]["status"], "completed", "{kept}");
    assert_serves_others(&s);
    assert_peak_rss(s.child().id());
}

#[test]
fn an_event_published_on_redis_by_someone_else_is_dropped() {
    let Some(bin) = redis_server() else { return };
    let (redis, _l, cfg) = redis_with_two_callers(&bin);
    let s = HttpServer::start(&cfg);
    let mut attacker = redis.attacker(None);
    // Alice's task runs for a while (its end is waited for, not timed).
    let id = start_task(
        &s,
        Some(ALICE),
        "slow_compute",
        json!({"seconds": 3, "label": "uncancelled"}),
    );
    // The attacker publishes a replica's cancellation of it, as the bus carried it before.
    let forged = json!({"from": "elsewhere", "event": {"kind": "cancel_task", "id": id}});
    let heard = attacker.cmd(&["PUBLISH", "mcp-host:events", &forged.to_string()]);
    assert!(
        matches!(heard, Reply::Int(n) if n >= 1),
        "the replica listens: {heard:?}"
    );
    let done = wait_status(&s, Some(ALICE), &id, &["completed", "failed", "cancelled"]);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "Computed uncancelled in 3 s",
        "{done}"
    );
    wait_for_log(&s, "an event on mcp-host:events is refused");
    assert_serves_others(&s);
}

// ---------------------------------------------------------------------------------------------
// M5: TLS and AUTH

/// `mcp-host serve --stdio` with `cfg` and `env`, stdin closed: what it printed and how it ended
/// (a server that starts ends at once, at the end of its input).
fn run_stdio(cfg: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(&artifacts().host);
    // As the shared helpers do: the caller's MCP_* variables stay out of the test.
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MCP_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("--config")
        .arg(cfg)
        .args(["serve", "--stdio"])
        .env("RUST_LOG", "info")
        .env_remove("SSL_CERT_FILE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(START)
        .unwrap_or_else(|_| panic!("mcp-host (pid {pid}) did not end within {START:?}"))
        .unwrap()
}

#[test]
fn rediss_with_a_private_ca_and_auth_in_the_url_serves_tasks_and_bad_credentials_stop_start_up() {
    let Some(bin) = redis_server() else { return };
    let Some(openssl) = openssl() else { return };
    let certs = make_certs(&openssl);
    let redis = TestRedis::start(
        &bin,
        &format!("user default off\nuser app on >{REDIS_PASSWORD} ~* &* +@all\n"),
        Some(&certs),
    );
    let ca = certs.ca.to_str().unwrap();
    let url = |pw: &str| format!("rediss://app:{pw}@127.0.0.1:{}/0", redis.tls_port);

    // The private CA trusted through SSL_CERT_FILE; the user in the URL, the password too, taken
    // from the environment by the configuration's `${NAME}`.
    let (l, cfg) = layout(
        &["fixture-conformance", "fixture-basic"],
        &redis_config(&url("${STORE_TRUST_REDIS_PASSWORD}"), ""),
    );
    let s = HttpServer::start_with_env(
        &cfg,
        &[
            ("SSL_CERT_FILE", ca),
            ("STORE_TRUST_REDIS_PASSWORD", REDIS_PASSWORD),
        ],
    );
    let id = start_task(
        &s,
        None,
        "slow_compute",
        json!({"seconds": 0, "label": "over-tls"}),
    );
    let done = wait_status(&s, None, &id, &["completed", "failed"]);
    assert_eq!(
        done["result"]["content"][0]["text"], "Computed over-tls in 0 s",
        "{done}"
    );
    let health = s.connect().request("GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200, "{health:?}");
    assert!(
        health
            .text()
            .contains(&format!("rediss://127.0.0.1:{}/0", redis.tls_port)),
        "{}",
        health.text()
    );
    assert_serves_others(&s);
    assert!(!s.stderr().contains(REDIS_PASSWORD), "{}", s.stderr());
    drop(s);

    // A wrong password: a clear start-up error, without the password.
    let bad_cfg = l.config(&format!(
        "tool_dirs: [d]\n{}",
        redis_config(&url("not-the-password"), "")
    ));
    let out = run_stdio(&bad_cfg, &[("SSL_CERT_FILE", ca)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started with a wrong password: {err}"
    );
    assert!(
        err.contains("refused this server") && err.to_lowercase().contains("auth"),
        "{err}"
    );
    assert!(!err.contains("not-the-password"), "{err}");

    // The server's certificate from a CA nobody trusts: a clear start-up error too.
    let cfg = l.config(&format!(
        "tool_dirs: [d]\n{}",
        redis_config(&url(REDIS_PASSWORD), "")
    ));
    let out = run_stdio(&cfg, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started trusting an unknown CA: {err}"
    );
    assert!(err.contains("certificate"), "{err}");
    assert!(!err.contains(REDIS_PASSWORD), "{err}");
}

// ---------------------------------------------------------------------------------------------
// L1, L2: credentials never shown

#[test]
fn healthz_logs_and_mcp_host_config_never_show_a_store_password() {
    let Some(bin) = redis_server() else { return };
    let redis = TestRedis::start(&bin, &format!("requirepass {REDIS_PASSWORD}\n"), None);
    let socket = redis.socket();
    // A Unix socket with the password as the `pass` parameter (the redis crate's form), and a
    // TCP URL with it as the userinfo password.
    let urls = [
        format!("redis+unix://{}?pass={REDIS_PASSWORD}", socket.display()),
        format!(
            "redis://default:{REDIS_PASSWORD}@127.0.0.1:{}/0",
            redis.port
        ),
    ];
    for url in urls {
        let (l, cfg) = layout(&["fixture-basic"], &redis_config(&url, ""));
        let s = HttpServer::start_with_env(&cfg, &[("RUST_LOG", "debug")]);
        let health = s.connect().request("GET", "/healthz", &[], b"");
        assert_eq!(health.status, 200, "{health:?}\n{}", s.stderr());
        assert!(!health.text().contains(REDIS_PASSWORD), "{}", health.text());
        // The store is still named: the socket's parameter redacted, the TCP URL without
        // its userinfo.
        let named = if url.contains('?') {
            "?pass=<redacted>".to_owned()
        } else {
            format!("redis://127.0.0.1:{}/0", redis.port)
        };
        assert!(health.text().contains(&named), "{}", health.text());
        assert_serves_others(&s);
        assert!(!s.stderr().contains(REDIS_PASSWORD), "{}", s.stderr());
        for args in [&["config"][..], &["config", "--json"][..]] {
            let out = l.run(&cfg, args);
            let printed = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(printed.contains("<redacted>"), "{printed}");
            assert!(!printed.contains(REDIS_PASSWORD), "{printed}");
            assert!(
                !String::from_utf8_lossy(&out.stderr).contains(REDIS_PASSWORD),
                "{out:?}"
            );
        }
    }
    // Redis without request_state.keys: its records could not be authenticated, so the host
    // does not start (naming the key, not the password).
    let (l, cfg) = layout(
        &["fixture-basic"],
        &format!(
            "store: \"redis://default:{REDIS_PASSWORD}@127.0.0.1:{}/0\"\n",
            redis.port
        ),
    );
    let out = l.run(&cfg, &["serve", "--stdio"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("request_state.keys"),
        "{err}"
    );
    assert!(!err.contains(REDIS_PASSWORD), "{err}");
    // A value that is not a store at all is refused without being echoed.
    let (l, cfg) = layout(
        &["fixture-basic"],
        &format!("store: \"mysql://root:{REDIS_PASSWORD}@db/x\"\n"),
    );
    let out = l.run(&cfg, &["config"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("mysql://"), "{err}");
    assert!(!err.contains(REDIS_PASSWORD), "{err}");
}

// ---------------------------------------------------------------------------------------------
// L9: file modes

#[test]
fn the_task_store_and_sandboxed_plugin_data_directories_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    // The SQLite store in a directory the host creates.
    let (l, cfg) = layout(
        &["fixture-conformance"],
        "store: sqlite:state/tasks.sqlite\ntasks: {poll_interval_ms: 100}\n",
    );
    let s = HttpServer::start(&cfg);
    let id = start_task(
        &s,
        None,
        "slow_compute",
        json!({"seconds": 0, "label": "private"}),
    );
    wait_status(&s, None, &id, &["completed"]);
    let state = l.root.path().join("state");
    assert_eq!(mode(&state), 0o700);
    // While the host runs, the WAL and shared memory exist beside the database.
    for file in ["tasks.sqlite", "tasks.sqlite-wal", "tasks.sqlite-shm"] {
        assert_eq!(mode(&state.join(file)), 0o600, "{file}");
    }
    drop(s);

    // A sandboxed plugin's data directory (and the data directory made for it).
    let l = Layout::new();
    l.install("sb", "fixture-crash", None);
    let cfg = l.config(
        "data_dir: data\ntool_dirs:\n  - {path: sb, isolation: sandbox}\nplugins:\n  fixture-crash:\n    permissions: {}\n",
    );
    let mut s = StdioServer::start(&cfg);
    let plugin_data = l.root.path().join("data/fixture-crash");
    let r = s.call_modern(
        1,
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": plugin_data.join("f"), "content": "x"}}),
    );
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("wrote")),
        "{r}\n{}",
        s.stderr()
    );
    assert_eq!(mode(&plugin_data), 0o700);
    assert_eq!(mode(&l.root.path().join("data")), 0o700);
}

// ---------------------------------------------------------------------------------------------
// L14: bytes

/// With the store `store(n)` (config lines, empty for the default; `n` tells the two servers
/// apart): a result over `tasks.max_result_bytes` fails its task; a result that would pass the
/// caller's `tasks.max_bytes_per_caller` fails its task, and a new task past it is refused.
fn task_bytes_are_bounded(store: &dyn Fn(u8) -> String) {
    let (_l, cfg) = layout(
        &["fixture-conformance", "fixture-basic"],
        &format!(
            "{}tasks: {{max_result_bytes: 1000, poll_interval_ms: 100}}\n",
            store(0)
        ),
    );
    let s = HttpServer::start(&cfg);
    let label = "x".repeat(1400);
    let id = start_task(
        &s,
        None,
        "slow_compute",
        json!({"seconds": 0, "label": label}),
    );
    let task = wait_status(&s, None, &id, &["completed", "failed"]);
    assert_eq!(task["status"], "failed", "{task}");
    let message = task["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("over the limit of 1000 bytes")
            && message.contains("tasks.max_result_bytes"),
        "{task}"
    );
    assert!(
        !task.to_string().contains(&format!("Computed {label}")),
        "stored anyway"
    );
    assert_serves_others(&s);
    drop(s);

    let (_l, cfg) = layout(
        &["fixture-conformance", "fixture-basic"],
        &format!(
            "{}tasks: {{max_bytes_per_caller: 3000, poll_interval_ms: 100}}\n",
            store(1)
        ),
    );
    let mut s = HttpServer::start(&cfg);
    let id = start_task(
        &s,
        None,
        "slow_compute",
        json!({"seconds": 0, "label": label}),
    );
    let task = wait_status(&s, None, &id, &["completed", "failed"]);
    assert_eq!(task["status"], "failed", "{task}");
    assert!(
        task["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("tasks.max_bytes_per_caller")),
        "{task}"
    );
    let r = task_rpc(
        &s,
        None,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": label}}),
    );
    assert_eq!(r.status, 429, "{r:?}");
    let m = r.message();
    assert_eq!(m["error"]["code"], -32010, "{m}");
    assert!(
        m["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tasks.max_bytes_per_caller"),
        "{m}"
    );
    assert_serves_others(&s);
    assert_peak_rss(s.child().id());
}

#[test]
fn oversized_task_results_fail_their_task_and_a_callers_stored_bytes_are_bounded() {
    task_bytes_are_bounded(&|_| String::new());
    let Some(bin) = redis_server() else { return };
    let redis = TestRedis::start(&bin, "", None);
    task_bytes_are_bounded(&|db| redis_store(&format!("redis://127.0.0.1:{}/{db}", redis.port)));
}
