//! Issue 52, per-user static credentials (`server.auth.mode: api_key`): a real `mcp-host serve`
//! in front of a real upstream without OAuth (`hostile.py --mode api_key_echo` on loopback, which
//! refuses a call without `X-Api-Key` and echoes the key it got). Two users enter two keys through
//! the host's own form (the consent link, driven with plain HTTP as a browser would), each call
//! reaches the upstream with its caller's own key, a user without a key gets the link (never
//! another's key), another user cannot enter a key on someone's link, a disconnect deletes the
//! key, and no key appears in the host's log, the audit log, `mcp-host config` or `vault list`.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_host_tests::fleet::free_port;
use mcp_host_tests::oauth::Browser;
use mcp_host_tests::serve::{ChildGuard, HttpResponse, HttpServer, host_command};
use mcp_host_tests::{Layout, workspace_root};
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::upstream_oauth::{consent_question, console_connections_at, hidden, identity, retry};

/// The vault key of this test (base64 of 32 bytes).
const VAULT_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// `hostile.py --mode api_key_echo` over Streamable HTTP on a free loopback port.
fn key_upstream(state: &Path) -> (ChildGuard, u16) {
    let script = workspace_root().join("tests/fixtures/upstream/hostile.py");
    for _ in 0..5 {
        let port = free_port();
        let mut child = ChildGuard::spawn(
            Command::new("python3")
                .arg(&script)
                .args(["--mode", "api_key_echo", "--era", "2025", "--http"])
                .arg(port.to_string())
                .arg("--state")
                .arg(state)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && !child.exited() {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (child, port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("hostile.py did not start on a loopback port");
}

/// A personal secret of mcp-host (what a caller signs in with) and its config entry.
fn secret_for(user: &str) -> (String, String) {
    let mut bytes = [0u8; 32];
    getrandom_bytes(&mut bytes);
    let secret = format!("mcp_{}", hex(&bytes));
    let digest = hex(&sha2::Sha256::digest(secret.as_bytes()));
    (
        secret,
        format!("    - {{ sha256: \"{digest}\", user: \"{user}\" }}\n"),
    )
}

fn getrandom_bytes(out: &mut [u8]) {
    let made = Command::new("openssl")
        .args(["rand", &out.len().to_string()])
        .output()
        .unwrap();
    assert!(made.status.success());
    out.copy_from_slice(&made.stdout[..out.len()]);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The host in front of the key upstream (`kv`), its users `alice` and `bob`.
struct KeyGateway {
    host: HttpServer,
    public: String,
    audit: std::path::PathBuf,
    config: std::path::PathBuf,
    alice: String,
    bob: String,
    _upstream: ChildGuard,
    _layout: Layout,
}

fn start() -> KeyGateway {
    let layout = Layout::new();
    let (upstream, up_port) = key_upstream(&layout.dir("upstream"));
    let (alice, alice_entry) = secret_for("alice");
    let (bob, bob_entry) = secret_for("bob");
    let port = free_port();
    let public = format!("http://127.0.0.1:{port}");
    let audit = layout.dir("audit").join("audit.jsonl");
    let config = layout.config(&format!(
        "tool_dirs:\n\
         \x20 - server: {{url: \"http://127.0.0.1:{up_port}/mcp\", auth: {{mode: api_key, \
         header: X-Api-Key, list_as: none}}}}\n\
         \x20   name: kv\n\
         \x20   prefix: kv_\n\
         audit_log: \"{audit}\"\n\
         auth:\n\
         \x20 require_auth: true\n\
         \x20 secrets:\n{alice_entry}{bob_entry}\
         upstream_auth:\n\
         \x20 public_url: \"{public}\"\n\
         \x20 vault:\n\
         \x20   keys: [\"{VAULT_KEY}\"]\n",
        audit = audit.display(),
    ));
    let mut cmd = host_command(&config);
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
    let host = HttpServer::spawn(cmd);
    KeyGateway {
        host,
        public,
        audit,
        config,
        alice,
        bob,
        _upstream: upstream,
        _layout: layout,
    }
}

impl KeyGateway {
    /// A 2026 request of `token`'s caller, who opens URLs.
    fn call(&self, token: &str, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({ "io.modelcontextprotocol/clientCapabilities":
            { "elicitation": { "url": {}, "form": {} } } });
        let params = mcp_host_tests::serve::with_meta(params);
        let mut headers: Vec<(String, String)> =
            mcp_host_tests::serve::modern_headers(method, params["name"].as_str())
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
        headers.push(("Authorization".into(), format!("Bearer {token}")));
        headers.push(("Content-Type".into(), "application/json".into()));
        headers.push((
            "Accept".into(),
            "application/json, text/event-stream".into(),
        ));
        let body = mcp_host_tests::serve::request(1, method, params).to_string();
        let url = format!("{}/mcp", self.public);
        mcp_host_tests::oauth::request(&url, "POST", &headers, body.as_bytes()).message()
    }

    fn wait_for_tool(&self, token: &str, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let r = self.call(token, "tools/list", json!({}));
            if r.to_string().contains(&format!("\"{name}\"")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never listed: {r}\n{}",
                self.host.stderr()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Open key link `url` and send its form as `credential`'s user with `key`.
    fn enter(&self, url: &str, credential: &str, key: &str) -> HttpResponse {
        let mut browser = Browser::new();
        let page = browser.send(url, "GET", &[]);
        assert_eq!(page.status, 200, "{}\n{}", page.text(), self.host.stderr());
        assert!(page.text().contains("name=\"api_key\""), "{}", page.text());
        let fields = [
            ("csrf".to_owned(), hidden(&page.text(), "csrf")),
            ("credential".to_owned(), credential.to_owned()),
            ("api_key".to_owned(), key.to_owned()),
        ];
        browser.send(url, "POST", &fields)
    }

    /// `token`'s caller's first call is asked for a key; entered (`key`) at the link, the retry
    /// answers: what the upstream saw.
    fn key_and_call(&self, token: &str, key: &str) -> Value {
        let first = self.call(token, "tools/call", whoami());
        let (question, url) = consent_question(&first);
        assert!(
            url.starts_with(&format!("{}/oauth/connect/", self.public)),
            "{url}"
        );
        let done = self.enter(&url, token, key);
        assert_eq!(done.status, 200, "{}\n{}", done.text(), self.host.stderr());
        assert!(!done.text().contains(key), "the page echoes the key");
        let again = self.call(token, "tools/call", retry(whoami(), &first, &question));
        identity(&again)
    }

    fn output(&self, args: &[&str]) -> String {
        let out = host_command(&self.config).args(args).output().unwrap();
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

fn whoami() -> Value {
    json!({"name": "kv_whoami", "arguments": {}})
}

#[test]
fn two_users_enter_their_own_api_keys_once_and_each_call_carries_its_users_key() {
    let g = start();
    g.wait_for_tool(&g.alice, "kv_whoami");
    let (alice_key, bob_key) = ("ak-alice-7f3e9c2a51", "ak-bob-0d84b6e1f2");
    let seen = g.key_and_call(&g.alice, alice_key);
    assert_eq!(seen["key"], alice_key, "{seen}");
    // Bob holds no key: he is asked for his own, never served with alice's.
    let first = g.call(&g.bob, "tools/call", whoami());
    let (_, bob_link) = consent_question(&first);
    // Alice cannot enter a key on bob's link.
    let refused = g.enter(&bob_link, &g.alice, "ak-mallory");
    assert_eq!(refused.status, 400, "{}", refused.text());
    let seen = g.key_and_call(&g.bob, bob_key);
    assert_eq!(seen["key"], bob_key, "{seen}");
    // Later calls carry each user's own key, without asking again.
    let again = g.call(&g.alice, "tools/call", whoami());
    assert_eq!(identity(&again)["key"], alice_key, "{again}");
    // The console's Connections view lists alice's key without its value.
    let console = console_connections_at(&g.public, &g.alice);
    assert_eq!(console["connections"][0]["upstream"], "kv", "{console}");
    let places = [
        ("the console's connections", console.to_string()),
        ("the host's log", g.host.stderr()),
        (
            "the audit log",
            std::fs::read_to_string(&g.audit).unwrap_or_default(),
        ),
        ("mcp-host config", g.output(&["config"])),
        (
            "mcp-host vault list",
            g.output(&["vault", "list", "--json"]),
        ),
    ];
    let listed = &places[4].1;
    assert!(
        listed.contains("alice") && listed.contains("bob"),
        "{listed}"
    );
    for key in [alice_key, bob_key, "ak-mallory"] {
        for (place, text) in &places {
            assert!(!text.contains(key), "a key appears in {place}");
        }
    }
    // A disconnect deletes alice's key: her next call asks again.
    let mut browser = Browser::new();
    let page = browser.send(
        &format!("{}/oauth/connect?upstream=kv", g.public),
        "GET",
        &[],
    );
    let fields = [
        ("csrf".to_owned(), hidden(&page.text(), "csrf")),
        ("credential".to_owned(), g.alice.clone()),
        ("upstream".to_owned(), "kv".to_owned()),
    ];
    let gone = browser.send(&format!("{}/oauth/disconnect", g.public), "POST", &fields);
    assert!(gone.text().contains("1 connection"), "{}", gone.text());
    consent_question(&g.call(&g.alice, "tools/call", whoami()));
}

/// The official Python SDK client (tests/clients/upstream_oauth_client.py) calling `kv_whoami` as
/// `token`'s caller in `mode` (`legacy`: a 2025 URL elicitation; `2026-07-28`: `input_required`),
/// the key link it is asked to open answered with `key`: what it printed.
fn python_client_enters(g: &KeyGateway, token: &str, mode: &str, key: &str) -> Vec<String> {
    use std::io::Write as _;
    let Some(py) = mcp_host_tests::clients::python_with("mcp", "the Python MCP SDK") else {
        return Vec::new();
    };
    let mut child = Command::new(py)
        .arg(workspace_root().join("tests/clients/upstream_oauth_client.py"))
        .args([&format!("{}/mcp", g.public), token, mode, "kv_whoami"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = mcp_host_tests::fleet::output_lines(child.stdout.take().unwrap());
    let stderr = mcp_host_tests::fleet::output_lines(child.stderr.take().unwrap());
    let _guard = ChildGuard::from_child(child);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            let err: Vec<String> = stderr.try_iter().collect();
            panic!(
                "the client stopped ({seen:?}); its stderr:\n{}\nhost:\n{}",
                err.join("\n"),
                g.host.stderr()
            );
        };
        seen.push(line.clone());
        if let Some(url) = line.strip_prefix("URL ") {
            let done = g.enter(url, token, key);
            assert_eq!(done.status, 200, "{}", done.text());
            let _ = writeln!(stdin, "done");
            let _ = stdin.flush();
        }
        if line.starts_with("RESULT ") || line.starts_with("ERROR ") {
            return seen;
        }
    }
}

#[test]
fn the_python_sdk_client_is_asked_for_a_key_and_its_call_proceeds_in_both_eras() {
    let g = start();
    g.wait_for_tool(&g.alice, "kv_whoami");
    for (token, mode, key) in [
        (&g.alice, "legacy", "ak-alice-legacy-5c1d"),
        (&g.bob, "2026-07-28", "ak-bob-modern-9e2f"),
    ] {
        let lines = python_client_enters(&g, token, mode, key);
        if lines.is_empty() {
            return; // the Python SDK is not installed: skipped (a failure when required)
        }
        assert!(lines.iter().any(|l| l.starts_with("URL ")), "{lines:?}");
        let last = lines.last().unwrap();
        let result = last
            .strip_prefix("RESULT ")
            .unwrap_or_else(|| panic!("the call failed ({mode}): {lines:?}"));
        assert!(result.contains(key), "{mode}: {result}");
    }
}
