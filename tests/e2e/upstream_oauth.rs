//! mcp-host as each user's OAuth client of an upstream with `server.auth`, end to end with real
//! components: a real OpenID provider (`oidc-provider`, tests/fixtures/oidc/provider.mjs) as the
//! authorization server of a real MCP resource server that checks issuer, audience and scope
//! (tests/fixtures/upstream/oauth_resource.py), callers signed in to mcp-host with the same
//! provider's tokens, and the headless browser of `mcp_host_tests::oauth` following the consent
//! links the host asks the callers' clients to open.
//!
//! Skips without Node 22 + `oidc-provider` or the Python SDK, unless `MCP_TEST_REQUIRE_CLIENTS`.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use mcp_host_tests::Layout;
use mcp_host_tests::fleet::free_port;
use mcp_host_tests::oauth::{Browser, Provider, ProviderOptions, ResourceServer};
use mcp_host_tests::serve::{HttpResponse, HttpServer, host_command};
use serde_json::{Value, json};

/// mcp-host's own resource identifier (`auth.resource`): the audience of callers' tokens.
const HOST: &str = "http://mcp-host.test/mcp";
/// The vault key of these tests (base64 of 32 bytes).
const VAULT_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// The client capabilities of a 2026 caller that opens URLs.
const URL_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";

/// The pieces of one test: the provider, the upstream, mcp-host in front, and its public URL.
pub(crate) struct Gateway {
    pub(crate) provider: Provider,
    pub(crate) rs: ResourceServer,
    pub(crate) host: HttpServer,
    pub(crate) public: String,
    pub(crate) audit: PathBuf,
    pub(crate) config: PathBuf,
    /// The test's directory (kept for as long as the gateway runs).
    pub(crate) _layout: Layout,
}

impl Gateway {
    /// Start everything (`None`: skip), `admin` an admin of the console; `extra` more config.
    pub(crate) fn start(rs_args: &[&str], extra: &str) -> Option<Gateway> {
        Gateway::start_with(ProviderOptions::default(), rs_args, extra)
    }

    /// [`Gateway::start`] with the provider configured by `options` ([`HOST`] added).
    pub(crate) fn start_with(
        options: ProviderOptions,
        rs_args: &[&str],
        extra: &str,
    ) -> Option<Gateway> {
        let (provider, rs) = Gateway::upstream(options, rs_args)?;
        let layout = Layout::new();
        let port = free_port();
        let public = format!("http://127.0.0.1:{port}");
        let audit = layout.dir("audit").join("audit.jsonl");
        let config = gateway_config(&layout, &provider, &rs, &public, &audit, extra);
        let host = serve(&config, port, &[]);
        Some(Gateway {
            provider,
            rs,
            host,
            public,
            audit,
            config,
            _layout: layout,
        })
    }

    /// The provider (configured by `options`, [`HOST`] added) and the resource server registered
    /// with it; `None`: skip.
    pub(crate) fn upstream(
        mut options: ProviderOptions,
        rs_args: &[&str],
    ) -> Option<(Provider, ResourceServer)> {
        options.resources.push(HOST.to_owned());
        let mut provider = Provider::start(&options)?;
        let rs = ResourceServer::start(&provider.issuer, rs_args)?;
        provider.add_resource(&rs.url);
        Some((provider, rs))
    }

    /// A caller's inbound token for mcp-host (the provider's, audience [`HOST`]).
    pub(crate) fn caller_token(&self, user: &str) -> String {
        self.provider
            .user_tokens(user, HOST, "mcp:basic")
            .access_token
    }

    /// The callback URL the host registered.
    pub(crate) fn callback(&self) -> String {
        format!("{}/oauth/callback", self.public)
    }

    /// A 2026 request of `token`'s caller, who opens URLs.
    pub(crate) fn call(&self, token: &str, method: &str, params: Value) -> HttpResponse {
        call_at(&self.public, token, method, params)
    }

    /// Wait until `token`'s caller sees tool `name` (the upstream lists once the operator
    /// connected).
    pub(crate) fn wait_for_tool(&self, token: &str, name: &str) {
        wait_for_tool_at(&self.public, token, name, &|| {
            format!(
                "host:\n{}\nresource server:\n{}",
                self.host.stderr(),
                self.rs.stderr()
            )
        });
    }
}

/// A 2026 request to `base`/mcp of `token`'s caller, who opens URLs.
pub(crate) fn call_at(base: &str, token: &str, method: &str, mut params: Value) -> HttpResponse {
    {
        params["_meta"] = json!({ URL_CAPS: { "elicitation": { "url": {}, "form": {} } } });
        let params = mcp_host_tests::serve::with_meta(params);
        let mut headers: Vec<(String, String)> =
            mcp_host_tests::serve::modern_headers(method, params["name"].as_str())
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
        headers.push(("Authorization".to_owned(), format!("Bearer {token}")));
        headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
        headers.push((
            "Accept".to_owned(),
            "application/json, text/event-stream".to_owned(),
        ));
        let body = mcp_host_tests::serve::request(1, method, params).to_string();
        mcp_host_tests::oauth::request(&format!("{base}/mcp"), "POST", &headers, body.as_bytes())
    }
}

impl Gateway {
    /// Connect the operator's account (listing identity) as upstream user `as_user`, through
    /// `/oauth/connect?upstream=gh&as=operator` with the admin's credential.
    pub(crate) fn connect_operator(&self, as_user: &str) {
        let admin = self.caller_token("admin");
        let mut browser = Browser::new();
        let entry = format!("{}/oauth/connect?upstream=gh&as=operator", self.public);
        let page = browser.send(&entry, "GET", &[]);
        assert_eq!(page.status, 200, "{}", page.text());
        let csrf = hidden(&page.text(), "csrf");
        let fields = [
            ("csrf".to_owned(), csrf),
            ("upstream".to_owned(), "gh".to_owned()),
            ("as".to_owned(), "operator".to_owned()),
            ("credential".to_owned(), admin),
        ];
        let sent = browser.send(&format!("{}/oauth/connect", self.public), "POST", &fields);
        self.finish_at_server(&mut browser, sent, as_user);
    }

    /// Follow a consent link `url` as mcp-host user `token`'s owner, signing in at the
    /// authorization server as `as_user`: the callback page's answer.
    pub(crate) fn follow_link(
        &self,
        browser: &mut Browser,
        url: &str,
        token: &str,
        as_user: &str,
    ) -> HttpResponse {
        let sent = self.submit_link(browser, url, token);
        self.finish_at_server(browser, sent, as_user)
    }

    /// Open consent link `url` and send its form with `token` as the credential: the answer.
    pub(crate) fn submit_link(
        &self,
        browser: &mut Browser,
        url: &str,
        token: &str,
    ) -> HttpResponse {
        let page = browser.send(url, "GET", &[]);
        assert_eq!(page.status, 200, "{}", page.text());
        let fields = [
            ("csrf".to_owned(), hidden(&page.text(), "csrf")),
            ("credential".to_owned(), token.to_owned()),
        ];
        browser.send(url, "POST", &fields)
    }

    /// Follow consent link `url` as `token`'s caller up to the authorization server's redirect
    /// back (signed in as `as_user`): the callback URL, not delivered yet.
    pub(crate) fn pending_callback(
        &self,
        browser: &mut Browser,
        url: &str,
        token: &str,
        as_user: &str,
    ) -> String {
        let sent = self.submit_link(browser, url, token);
        assert_eq!(sent.status, 303, "{}\n{}", sent.text(), self.host.stderr());
        let location = sent.header("location").unwrap().to_owned();
        browser.authorize(&location, as_user, &self.callback())
    }

    /// After the connect page's redirect `sent`: sign in at the provider as `as_user`, then
    /// deliver the callback: its page.
    pub(crate) fn finish_at_server(
        &self,
        browser: &mut Browser,
        sent: HttpResponse,
        as_user: &str,
    ) -> HttpResponse {
        assert_eq!(sent.status, 303, "{}\n{}", sent.text(), self.host.stderr());
        let location = sent.header("location").unwrap().to_owned();
        assert!(location.starts_with(&self.provider.issuer), "{location}");
        let back = browser.authorize(&location, as_user, &self.callback());
        let done = browser.send(&back, "GET", &[]);
        assert_eq!(done.status, 200, "{}\n{}", done.text(), self.host.stderr());
        done
    }

    /// The audit log's records.
    pub(crate) fn audit_records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Wait until an audit record of `action` with `detail` (if given) is written.
    pub(crate) fn wait_audit(&self, action: &str, detail: Option<&str>) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let found = self.audit_records().into_iter().find(|r| {
                r.to_string().contains(&format!("\"{action}\""))
                    && detail.is_none_or(|d| r.to_string().contains(d))
            });
            if let Some(r) = found {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "no audit record {action} {detail:?}: {:?}\n{}",
                self.audit_records(),
                self.host.stderr()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Gateway {
    /// Two replicas (`r1` is the gateway's host, `r2` returned beside it) on `ports` sharing
    /// `redis` as their store and vault, reached at `public`, the operator connected.
    pub(crate) fn replicas(
        provider: Provider,
        rs: ResourceServer,
        redis: &mcp_host_tests::fleet::Redis,
        ports: [u16; 2],
        public: String,
    ) -> (Gateway, HttpServer) {
        let layout = Layout::new();
        let audit = layout.dir("audit").join("audit.jsonl");
        let extra = format!(
            "store: {}\nrequest_state: {{keys: [\"{}\"]}}\n",
            redis.url(),
            mcp_host_tests::fleet::SHARED_KEY
        );
        let config = gateway_config(&layout, &provider, &rs, &public, &audit, &extra);
        let r1 = serve(&config, ports[0], &[("MCP_HOST_REPLICA", "r1")]);
        let r2 = serve(&config, ports[1], &[("MCP_HOST_REPLICA", "r2")]);
        let g = Gateway {
            provider,
            rs,
            host: r1,
            public,
            audit,
            config,
            _layout: layout,
        };
        g.connect_operator("operator-at-gh");
        (g, r2)
    }
}

/// The configuration of a gateway in front of `rs` (upstream `gh`), its callers signed in with
/// `provider`'s tokens, reached at `public`, auditing to `audit`; `extra` more lines.
pub(crate) fn gateway_config(
    layout: &Layout,
    provider: &Provider,
    rs: &ResourceServer,
    public: &str,
    audit: &std::path::Path,
    extra: &str,
) -> PathBuf {
    layout.config(&format!(
        "tool_dirs:\n\
         \x20 - server: {{url: \"{rs}\", auth: {{mode: oauth}}}}\n\
         \x20   name: gh\n\
         \x20   prefix: gh_\n\
         audit_log: \"{audit}\"\n\
         auth:\n\
         \x20 require_auth: true\n\
         \x20 resource: \"{HOST}\"\n\
         \x20 authorization_servers: [\"{issuer}\"]\n\
         \x20 jwt:\n\
         \x20   issuer: \"{issuer}\"\n\
         \x20   jwks_file: \"{jwks}\"\n\
         console:\n\
         \x20 admins: [admin]\n\
         limits:\n\
         \x20 call_timeout_secs: 600\n\
         upstream_auth:\n\
         \x20 public_url: \"{public}\"\n\
         \x20 vault:\n\
         \x20   keys: [\"{VAULT_KEY}\"]\n\
         {extra}",
        rs = rs.url,
        audit = audit.display(),
        issuer = provider.issuer,
        jwks = provider.jwks_file.display(),
    ))
}

/// `mcp-host serve --listen 127.0.0.1:PORT` on `config`, with `env`.
pub(crate) fn serve(config: &std::path::Path, port: u16, env: &[(&str, &str)]) -> HttpServer {
    let mut cmd: Command = host_command(config);
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .envs(env.iter().copied());
    HttpServer::spawn(cmd)
}

/// Wait until `token`'s caller sees tool `name` at `base` (`logs`: what to show if never).
pub(crate) fn wait_for_tool_at(base: &str, token: &str, name: &str, logs: &dyn Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r = call_at(base, token, "tools/list", json!({}));
        let names: Vec<String> = r.message()["result"]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if names.iter().any(|n| n == name) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never listed at {base} ({names:?}); {}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The value of hidden input `name` of an HTML page.
pub(crate) fn hidden(page: &str, name: &str) -> String {
    let needle = format!("name=\"{name}\" value=\"");
    let start = page
        .find(&needle)
        .unwrap_or_else(|| panic!("no {name} in {page}"))
        + needle.len();
    let end = page[start..].find('"').unwrap() + start;
    page[start..end].to_owned()
}

/// A `tools/call` of `whoami` at the upstream through the host.
pub(crate) fn whoami() -> Value {
    json!({"name": "gh_whoami", "arguments": {}})
}

/// The consent question of an `input_required` result: its key and its URL.
pub(crate) fn consent_question(r: &Value) -> (String, String) {
    let result = &r["result"];
    assert_eq!(result["resultType"], "input_required", "{r}");
    let (key, question) = result["inputRequests"]
        .as_object()
        .and_then(|q| q.iter().next())
        .unwrap_or_else(|| panic!("no question: {r}"));
    assert_eq!(question["method"], "elicitation/create", "{r}");
    assert_eq!(question["params"]["mode"], "url", "{r}");
    (
        key.clone(),
        question["params"]["url"].as_str().unwrap().to_owned(),
    )
}

/// The JSON `whoami` answered in `r`.
pub(crate) fn identity(r: &Value) -> Value {
    let result = &r["result"];
    assert_ne!(result["isError"], true, "{r}");
    if result["structuredContent"].is_object() {
        return result["structuredContent"].clone();
    }
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// The retry of `params` answering question `key` of result `r`.
pub(crate) fn retry(params: Value, r: &Value, key: &str) -> Value {
    let mut params = params;
    params["inputResponses"] = json!({ key: {"action": "accept"} });
    params["requestState"] = r["result"]["requestState"].clone();
    params
}

/// Connect `user` (signed in at the provider as `as_user`) through the question of their first
/// call, then retry: the upstream's `whoami` for them.
pub(crate) fn consent_and_call(g: &Gateway, token: &str, as_user: &str) -> Value {
    let first = g.call(token, "tools/call", whoami()).message();
    let (key, url) = consent_question(&first);
    assert!(
        url.starts_with(&format!("{}/oauth/connect/", g.public)),
        "{url}"
    );
    let mut browser = Browser::new();
    let page = g.follow_link(&mut browser, &url, token, as_user);
    assert!(page.text().contains("connected"), "{}", page.text());
    let again = g
        .call(token, "tools/call", retry(whoami(), &first, &key))
        .message();
    identity(&again)
}

#[test]
fn two_users_reach_the_upstream_with_their_own_tokens_after_their_own_consent() {
    let Some(g) = Gateway::start(&[], "") else {
        return;
    };
    g.connect_operator("operator-at-gh");
    let alice = g.caller_token("alice");
    let bob = g.caller_token("bob");
    g.wait_for_tool(&alice, "gh_whoami");

    let seen = consent_and_call(&g, &alice, "alice-at-gh");
    assert_eq!(seen["sub"], "alice-at-gh", "{seen}");
    assert_eq!(seen["aud"], json!(g.rs.url), "{seen}");

    // Bob has not consented: he is asked, never served with alice's (or the operator's) token.
    let first = g.call(&bob, "tools/call", whoami()).message();
    let (_, url) = consent_question(&first);
    assert!(!url.is_empty());
    let seen = consent_and_call(&g, &bob, "bob-at-gh");
    assert_eq!(seen["sub"], "bob-at-gh", "{seen}");

    // From now on each call carries its caller's own token, without a question.
    for (token, sub) in [
        (&alice, "alice-at-gh"),
        (&bob, "bob-at-gh"),
        (&alice, "alice-at-gh"),
    ] {
        let r = g.call(token, "tools/call", whoami()).message();
        assert_eq!(identity(&r)["sub"], sub, "{r}");
    }
    let connected = g.wait_audit("upstream_auth.connected", Some("alice"));
    assert_eq!(connected["target"], "gh", "{connected}");

    // The console: each user sees their own connections, an admin everyone's — never a token.
    let admin = g.caller_token("admin");
    let all = console_connections(&g, &admin);
    let mut pairs: Vec<String> = all["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}@{}",
                c["principal"].as_str().unwrap(),
                c["upstream"].as_str().unwrap()
            )
        })
        .collect();
    pairs.sort();
    assert_eq!(pairs, ["@operator@gh", "alice@gh", "bob@gh"], "{all}");
    let own = console_connections(&g, &alice);
    assert_eq!(own["connections"].as_array().unwrap().len(), 1, "{own}");
    assert_eq!(own["connections"][0]["principal"], "alice", "{own}");
    assert_eq!(own["all"], false);
    assert!(!all.to_string().contains("access_token") && !all.to_string().contains("eyJ"));
}

/// Log in to the console (`/ui`) with `token` and read `api/connections`.
fn console_connections(g: &Gateway, token: &str) -> Value {
    console_connections_at(&g.public, token)
}

/// [`console_connections`] of the host at `public`.
pub(crate) fn console_connections_at(public: &str, token: &str) -> Value {
    let login = mcp_host_tests::oauth::request(
        &format!("{}/ui/api/login", public),
        "POST",
        &[
            ("Origin".to_owned(), public.to_owned()),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ],
        json!({ "token": token }).to_string().as_bytes(),
    );
    assert_eq!(login.status, 200, "{}", login.text());
    let cookie = login
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let r = mcp_host_tests::oauth::request(
        &format!("{}/ui/api/connections", public),
        "GET",
        &[("Cookie".to_owned(), cookie)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// The official Python SDK client (tests/clients/upstream_oauth_client.py) calling `gh_whoami` as
/// `token`'s caller in `mode` (`legacy` or `2026-07-28`), following the consent link it is asked
/// to open as upstream user `as_user`: what it printed.
fn python_client_consents(g: &Gateway, token: &str, mode: &str, as_user: &str) -> Vec<String> {
    use std::io::Write as _;
    use std::process::Stdio;
    let py = mcp_host_tests::clients::python_with("mcp", "the Python MCP SDK").unwrap();
    let mut child = Command::new(py)
        .arg(mcp_host_tests::workspace_root().join("tests/clients/upstream_oauth_client.py"))
        .args([&format!("{}/mcp", g.public), token, mode, "gh_whoami"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = mcp_host_tests::fleet::output_lines(child.stdout.take().unwrap());
    let stderr = mcp_host_tests::fleet::output_lines(child.stderr.take().unwrap());
    let _guard = mcp_host_tests::serve::ChildGuard::from_child(child);
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
            let mut browser = Browser::new();
            g.follow_link(&mut browser, url, token, as_user);
            // The user is back from the browser (a 2026 client answers now).
            let _ = writeln!(stdin, "done");
            let _ = stdin.flush();
        }
        if line.starts_with("RESULT ") || line.starts_with("ERROR ") {
            return seen;
        }
    }
}

/// The `RESULT` the client printed.
fn client_result(lines: &[String]) -> Value {
    let last = lines.last().unwrap();
    let json = last
        .strip_prefix("RESULT ")
        .unwrap_or_else(|| panic!("the call failed: {lines:?}"));
    serde_json::from_str(json).unwrap()
}

#[test]
fn the_python_sdk_client_opens_the_consent_link_and_its_call_proceeds_in_both_eras() {
    let Some(g) = Gateway::start(&[], "") else {
        return;
    };
    g.connect_operator("operator-at-gh");
    let carol = g.caller_token("carol");
    let dave = g.caller_token("dave");
    g.wait_for_tool(&carol, "gh_whoami");

    // 2025-11-25 session: elicitation/create on the call's stream, accepted at once; the call
    // waits for the consent, the client is told it completed, and the call answers.
    let lines = python_client_consents(&g, &carol, "legacy", "carol-at-gh");
    assert_eq!(client_result(&lines)["sub"], "carol-at-gh", "{lines:?}");
    assert!(
        lines.iter().any(|l| l.starts_with("COMPLETE ")),
        "no notifications/elicitation/complete: {lines:?}"
    );

    // 2026-07-28: the question in the call's input_required result; the SDK retries once the user
    // is back, and the retry answers.
    let lines = python_client_consents(&g, &dave, "2026-07-28", "dave-at-gh");
    assert_eq!(client_result(&lines)["sub"], "dave-at-gh", "{lines:?}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("URL ")).count(), 1);
}

/// `mcp-host ARGS` on the gateway's configuration and state: its stdout and stderr.
pub(crate) fn host_output(g: &Gateway, args: &[&str]) -> String {
    let out = host_command(&g.config).args(args).output().unwrap();
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The raw access token the upstream saw in `seen` (`whoami` with `--echo-token`).
fn token_of(seen: &Value) -> String {
    seen["token"].as_str().unwrap().to_owned()
}

/// The disconnect form of the gateway, sent as `token`'s caller: the page's status.
fn disconnect(g: &Gateway, token: &str) -> u16 {
    let mut browser = Browser::new();
    let page = browser.send(
        &format!("{}/oauth/connect?upstream=gh", g.public),
        "GET",
        &[],
    );
    let fields = [
        ("csrf".to_owned(), hidden(&page.text(), "csrf")),
        ("credential".to_owned(), token.to_owned()),
        ("upstream".to_owned(), "gh".to_owned()),
    ];
    let r = browser.send(&format!("{}/oauth/disconnect", g.public), "POST", &fields);
    assert!(r.text().contains("1 connection"), "{}", r.text());
    r.status
}

/// Call `whoami` as `token`'s caller until the audit log says `who`'s token was refreshed:
/// every call answers as `sub`; the tokens the upstream saw, in order.
fn call_until_refreshed(g: &Gateway, token: &str, who: &str, sub: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut tokens = Vec::new();
    loop {
        let r = g.call(token, "tools/call", whoami()).message();
        let seen = identity(&r);
        assert_eq!(seen["sub"], sub, "{r}");
        let t = token_of(&seen);
        if tokens.last() != Some(&t) {
            tokens.push(t);
        }
        let refreshed = g.audit_records().iter().any(|r| {
            let s = r.to_string();
            s.contains("upstream_auth.refreshed") && s.contains(&format!("\"{who}\""))
        });
        if refreshed && tokens.len() > 1 {
            return tokens;
        }
        assert!(
            Instant::now() < deadline,
            "no refresh of {who}'s token: {:?}\n{}",
            g.audit_records(),
            g.host.stderr()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn an_expired_token_is_refreshed_and_a_disconnect_revokes_it_at_the_provider() {
    let options = ProviderOptions {
        access_token_ttl: Some(4),
        ..ProviderOptions::default()
    };
    let Some(g) = Gateway::start_with(options, &["--echo-token"], "") else {
        return;
    };
    g.connect_operator("operator-at-gh");
    let alice = g.caller_token("alice");
    g.wait_for_tool(&alice, "gh_whoami");
    let seen = consent_and_call(&g, &alice, "alice-at-gh");
    assert_eq!(seen["sub"], "alice-at-gh");
    // Its access token lives 4 s: calls go on, with a refreshed token once it is due.
    let tokens = call_until_refreshed(&g, &alice, "alice", "alice-at-gh");
    assert!(tokens.len() > 1);
    assert!(!g.provider.stderr().contains("EVENT grant.revoked"));

    // Disconnect: revoked at the provider (RFC 7009: the refresh token, so its grant is gone),
    // deleted, audited; the next call asks again.
    assert_eq!(disconnect(&g, &alice), 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !g.provider.stderr().contains("EVENT grant.revoked") {
        assert!(
            Instant::now() < deadline,
            "the provider revoked no grant:\n{}",
            g.provider.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let revoked = g.wait_audit(
        "upstream_auth.revoked",
        Some("revoked at the authorization"),
    );
    assert_eq!(revoked["target"], "gh", "{revoked}");
    let again = g.call(&alice, "tools/call", whoami()).message();
    consent_question(&again);
}

#[test]
fn no_token_appears_in_logs_audit_config_vault_rows_or_pages() {
    let options = ProviderOptions {
        access_token_ttl: Some(4),
        ..ProviderOptions::default()
    };
    let Some(g) = Gateway::start_with(options, &["--echo-token"], "") else {
        return;
    };
    g.connect_operator("operator-at-gh");
    let alice = g.caller_token("alice");
    let bob = g.caller_token("bob");
    g.wait_for_tool(&alice, "gh_whoami");
    let a = consent_and_call(&g, &alice, "alice-at-gh");
    let b = consent_and_call(&g, &bob, "bob-at-gh");
    let mut tokens = vec![token_of(&a), token_of(&b)];
    tokens.extend(call_until_refreshed(&g, &alice, "alice", "alice-at-gh"));
    let mut places: Vec<(String, String)> = vec![
        ("the host's log".into(), g.host.stderr()),
        (
            "the audit log".into(),
            std::fs::read_to_string(&g.audit).unwrap_or_default(),
        ),
        ("mcp-host config".into(), host_output(&g, &["config"])),
        (
            "mcp-host vault list".into(),
            host_output(&g, &["vault", "list", "--json"]),
        ),
        (
            "the health page".into(),
            mcp_host_tests::oauth::get(&format!("{}/healthz", g.public)).text(),
        ),
    ];
    // The store's files (SQLite: the vault's rows), read as bytes.
    let state = g.config.parent().unwrap().to_path_buf();
    for entry in walk(&state) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        places.push((
            entry.display().to_string(),
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
    }
    assert!(
        places
            .iter()
            .any(|(p, _)| p.contains("sqlite") || p.ends_with(".db")),
        "no store file found under {}: {:?}",
        state.display(),
        places.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    for token in &tokens {
        // The whole token, and its signature alone (the part no other value shares).
        let signature = token.rsplit('.').next().unwrap();
        for (place, text) in &places {
            assert!(
                !text.contains(token.as_str()) && !text.contains(signature),
                "a token appears in {place}"
            );
        }
    }
}

/// Every file under `dir`, recursively.
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn behind_nginx_a_replica_uses_the_token_another_obtained_from_the_shared_redis_vault() {
    let Some(redis_bin) = mcp_host_tests::fleet::redis_server() else {
        return;
    };
    let Some(nginx_bin) = mcp_host_tests::fleet::nginx() else {
        return;
    };
    let Some((provider, rs)) = Gateway::upstream(ProviderOptions::default(), &[]) else {
        return;
    };
    let redis = mcp_host_tests::fleet::Redis::start(&redis_bin);
    // The replicas' ports first: nginx (plain round robin) fronts them, and their public URL is
    // nginx's.
    let ports = [free_port(), free_port()];
    let addrs: Vec<std::net::SocketAddr> = ports
        .iter()
        .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], *p)))
        .collect();
    let nginx = mcp_host_tests::fleet::Nginx::start(&nginx_bin, &addrs);
    let public = format!("http://127.0.0.1:{}", nginx.port);
    let (g, r2) = Gateway::replicas(provider, rs, &redis, ports, public);
    let alice = g.caller_token("alice");
    // Both replicas list (each read the operator's token from Redis).
    for port in ports {
        wait_for_tool_at(
            &format!("http://127.0.0.1:{port}"),
            &alice,
            "gh_whoami",
            &|| format!("r1:\n{}\nr2:\n{}", g.host.stderr(), r2.stderr()),
        );
    }
    let seen = consent_and_call(&g, &alice, "alice-at-gh");
    assert_eq!(seen["sub"], "alice-at-gh");
    // Round robin: calls land on both replicas, each with alice's token from the shared vault.
    let mut served_by = std::collections::BTreeSet::new();
    for _ in 0..6 {
        let r = g.call(&alice, "tools/call", whoami());
        served_by.insert(r.header("mcp-replica").unwrap_or("?").to_owned());
        let m = r.message();
        assert_eq!(
            identity(&m)["sub"],
            "alice-at-gh",
            "{m}\nr1:\n{}\nr2:\n{}",
            g.host.stderr(),
            r2.stderr()
        );
    }
    assert_eq!(
        served_by.into_iter().collect::<Vec<_>>(),
        ["r1", "r2"],
        "nginx did not spread the calls"
    );
    drop(nginx);
}

#[test]
fn a_403_insufficient_scope_asks_the_user_to_step_up_and_the_retry_writes() {
    let Some(g) = Gateway::start(&[], "") else {
        return;
    };
    g.connect_operator("operator-at-gh");
    let alice = g.caller_token("alice");
    g.wait_for_tool(&alice, "gh_write");
    let seen = consent_and_call(&g, &alice, "alice-at-gh");
    let granted: Vec<&str> = seen["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!granted.contains(&"mcp:write"), "{seen}");
    // `write` needs mcp:write: the upstream answers 403 insufficient_scope, and alice is asked
    // again — for what she was granted and the write scope together.
    let write = json!({"name": "gh_write", "arguments": {"text": "hello"}});
    let first = g.call(&alice, "tools/call", write.clone()).message();
    let (key, url) = consent_question(&first);
    let mut browser = Browser::new();
    g.follow_link(&mut browser, &url, &alice, "alice-at-gh");
    let again = g
        .call(&alice, "tools/call", retry(write, &first, &key))
        .message();
    let text = again["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        again["result"]["isError"],
        false,
        "{again}\n{}",
        g.host.stderr()
    );
    assert!(text.contains("alice-at-gh wrote hello"), "{again}");
    g.wait_audit("upstream_auth.consent_started", Some("step_up"));
}
