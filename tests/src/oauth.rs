//! The OAuth fixtures of the end-to-end tests, all real: an authorization server (npm
//! `oidc-provider`, configured by tests/fixtures/oidc/provider.mjs), an MCP resource server that
//! checks audience and scope (tests/fixtures/upstream/oauth_resource.py, on the Python SDK), and a
//! headless "browser" that signs in to the provider's development login and consent forms as a
//! given user over plain HTTP, as a person would in a browser.
//!
//! A test starts [`Provider`] (it skips when Node or `oidc-provider` is missing, unless
//! `MCP_TEST_REQUIRE_CLIENTS` is set), starts [`ResourceServer`] with the provider's issuer, and
//! registers the resource server's URL with the provider ([`Provider::add_resource`]) so that the
//! provider issues JWT access tokens with that audience. [`Browser::authorize`] completes an
//! authorization request as a user and returns the redirect (code, state, iss) to the client;
//! [`Provider::user_tokens`] does the whole authorization-code + PKCE flow for the provider's
//! pre-registered public client `tester` (inbound tokens for mcp-host, or tokens for an upstream).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use url::Url;

use crate::clients::{python_with, require_or_skip};
use crate::fleet::output_lines;
use crate::serve::{ChildGuard, HttpConn, HttpResponse, LEGACY, START, WAIT, collect_stderr};
use crate::workspace_root;

/// The provider's pre-registered public client (`token_endpoint_auth_method: none`, native).
pub const TESTER: &str = "tester";
/// The redirect URI registered for [`TESTER`] (any port: RFC 8252 loopback). Nothing listens
/// there: the browser stops at the redirect and hands it to the test.
pub const TESTER_REDIRECT: &str = "http://127.0.0.1/callback";
/// The pre-registered confidential client that may introspect any token (as a resource server).
pub const INTROSPECTOR: (&str, &str) = ("introspector", "introspector-secret");
/// The pre-registered confidential client allowed token exchange and client_credentials.
pub const EXCHANGER: (&str, &str) = ("exchanger", "exchanger-secret");
/// The RFC 8693 grant type.
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// Node 22 and the `node_modules` holding `oidc-provider` (from `.ci/install-clients.sh`), or a
/// skip (a failure when clients are required).
pub fn provider_runtime() -> Option<(PathBuf, PathBuf)> {
    let node = std::env::var_os("MCP_TEST_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".ci/.tools/bin/node"));
    let modules = workspace_root().join(".ci/.tools/oidc/node_modules");
    let ok = node.exists() && modules.join("oidc-provider/package.json").exists();
    require_or_skip("Node 22 with oidc-provider", ok.then_some(node)).map(|n| (n, modules))
}

/// How to configure the provider; `Default` is its own defaults (scopes `mcp:basic mcp:write`,
/// access tokens for an hour, a refresh token for every client allowed the grant).
#[derive(Debug, Clone, Default)]
pub struct ProviderOptions {
    /// Resource servers known from the start (more with [`Provider::add_resource`]).
    pub resources: Vec<String>,
    /// The scopes every resource offers (`--scopes`).
    pub scopes: Option<String>,
    /// Access-token lifetime in seconds (`--at-ttl`).
    pub access_token_ttl: Option<u64>,
    /// `always` (default) or `offline_access` (`--refresh-policy`).
    pub refresh_policy: Option<String>,
    /// More pre-registered clients, in oidc-provider's client metadata format (`--client`).
    pub clients: Vec<Value>,
}

impl ProviderOptions {
    fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for r in &self.resources {
            args.extend(["--resource".into(), r.clone()]);
        }
        let pairs = [
            ("--scopes", self.scopes.clone()),
            ("--at-ttl", self.access_token_ttl.map(|t| t.to_string())),
            ("--refresh-policy", self.refresh_policy.clone()),
        ];
        for (flag, value) in pairs {
            if let Some(v) = value {
                args.extend([flag.into(), v]);
            }
        }
        for c in &self.clients {
            args.extend(["--client".into(), c.to_string()]);
        }
        args
    }
}

/// How a request to the provider authenticates its client.
#[derive(Debug, Clone, Copy)]
pub enum ClientAuth<'a> {
    /// A public client: `client_id` in the form.
    Public(&'a str),
    /// A confidential client: HTTP Basic (`client_secret_basic`).
    Basic(&'a str, &'a str),
}

/// `oidc-provider` on 127.0.0.1 (an ephemeral port), killed on drop.
#[derive(Debug)]
pub struct Provider {
    child: ChildGuard,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// The issuer, `http://127.0.0.1:PORT` (no trailing slash).
    pub issuer: String,
    /// The provider's public JWKS (its one RS256 key), as mcp-host's `auth.jwt.jwks_file` reads it.
    pub jwks_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Provider {
    /// Start the provider, or `None` (skip) without Node/`oidc-provider`.
    pub fn start(options: &ProviderOptions) -> Option<Provider> {
        let (node, modules) = provider_runtime()?;
        let dir = tempfile::tempdir().unwrap();
        let jwks_file = dir.path().join("jwks.json");
        let mut child = Command::new(node)
            .arg(workspace_root().join("tests/fixtures/oidc/provider.mjs"))
            .args(["--stdin-control", "--modules"])
            .arg(&modules)
            .arg("--jwks-out")
            .arg(&jwks_file)
            .args(options.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the OpenID provider: {e}"));
        let stdin = child.stdin.take().unwrap();
        let lines = output_lines(child.stdout.take().unwrap());
        let stderr = collect_stderr(child.stderr.take().unwrap(), |_| {});
        let mut provider = Provider {
            child: ChildGuard::from_child(child),
            stdin,
            lines,
            stderr,
            issuer: String::new(),
            jwks_file,
            _dir: dir,
        };
        let ready = provider.wait_line("READY ");
        let ready: Value = serde_json::from_str(&ready["READY ".len()..]).unwrap();
        provider.issuer = ready["issuer"].as_str().unwrap().to_owned();
        Some(provider)
    }

    /// The next stdout line starting with `prefix` (others are oidc-provider's notices).
    fn wait_line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + START;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!(
                    "the provider printed no {prefix:?} within {START:?}; stderr:\n{}",
                    self.stderr()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "the provider exited before {prefix:?}; stderr:\n{}",
                    self.stderr()
                ),
            }
        }
    }

    /// Make `url` a resource server of this provider: it then issues JWT access tokens with
    /// `aud` = `url` to a request naming it in `resource`.
    pub fn add_resource(&mut self, url: &str) {
        writeln!(self.stdin, "resource {url}").unwrap();
        self.stdin.flush().unwrap();
        let answer = self.wait_line("OK ");
        assert_eq!(answer, format!("OK resource {url}"));
    }

    /// What the provider wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether the provider is still running.
    pub fn is_running(&mut self) -> bool {
        !self.child.exited()
    }

    /// `issuer` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.issuer)
    }

    /// Its RFC 8414 metadata.
    pub fn metadata(&self) -> Value {
        let r = get(&self.url("/.well-known/oauth-authorization-server"));
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    /// POST a form to `path` as `client`.
    pub fn post_form(&self, path: &str, form: &[(&str, &str)], client: ClientAuth) -> HttpResponse {
        let mut pairs: Vec<(&str, &str)> = form.to_vec();
        let mut headers = vec![(
            "Content-Type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        )];
        match client {
            ClientAuth::Public(id) => pairs.push(("client_id", id)),
            ClientAuth::Basic(id, secret) => {
                let pair = format!("{}:{}", form_encode(id), form_encode(secret));
                headers.push((
                    "Authorization".into(),
                    format!("Basic {}", STANDARD.encode(pair)),
                ));
            }
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        request(&self.url(path), "POST", &headers, body.as_bytes())
    }

    /// A token request (`/token`): the status and the JSON answer.
    pub fn token(&self, form: &[(&str, &str)], client: ClientAuth) -> (u16, Value) {
        let r = self.post_form("/token", form, client);
        (r.status, r.json())
    }

    /// RFC 7662 introspection of `token` by [`INTROSPECTOR`].
    pub fn introspect(&self, token: &str) -> Value {
        let (id, secret) = INTROSPECTOR;
        let r = self.post_form(
            "/token/introspection",
            &[("token", token)],
            ClientAuth::Basic(id, secret),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    /// RFC 7009 revocation of `token` by `client`: the HTTP status (200 when revoked or unknown).
    pub fn revoke(&self, token: &str, client: ClientAuth) -> HttpResponse {
        self.post_form("/token/revocation", &[("token", token)], client)
    }

    /// The authorization-code + PKCE flow for [`TESTER`] as `user` (a fresh browser: login and
    /// consent), for `resource` with `scope`: the token response (200 asserted).
    pub fn user_tokens(&self, user: &str, resource: &str, scope: &str) -> Tokens {
        let pkce = Pkce::new();
        let state = random_string();
        let url = self.authorization_url(&[
            ("client_id", TESTER),
            ("redirect_uri", TESTER_REDIRECT),
            ("scope", scope),
            ("resource", resource),
            ("state", &state),
            ("code_challenge", &pkce.challenge),
        ]);
        let redirect = Browser::new().authorize(&url, user, TESTER_REDIRECT);
        let params = query_params(&redirect);
        assert_eq!(params.get("state"), Some(&state), "state: {redirect}");
        assert_eq!(params.get("iss"), Some(&self.issuer), "iss: {redirect}");
        let code = params
            .get("code")
            .unwrap_or_else(|| panic!("no code: {redirect}"));
        let (status, body) = self.token(
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", TESTER_REDIRECT),
                ("code_verifier", &pkce.verifier),
                ("resource", resource),
            ],
            ClientAuth::Public(TESTER),
        );
        assert_eq!(status, 200, "token request refused: {body}");
        Tokens::from(body)
    }

    /// `/auth?…` with `response_type=code` and `code_challenge_method=S256` added to `params`.
    pub fn authorization_url(&self, params: &[(&str, &str)]) -> String {
        let mut url = Url::parse(&self.url("/auth")).unwrap();
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("code_challenge_method", "S256")
            .extend_pairs(params);
        url.into()
    }
}

/// A token response.
#[derive(Debug, Clone)]
pub struct Tokens {
    /// `access_token`.
    pub access_token: String,
    /// `refresh_token`, if one was issued.
    pub refresh_token: Option<String>,
    /// The whole response.
    pub response: Value,
}

impl From<Value> for Tokens {
    fn from(response: Value) -> Self {
        Tokens {
            access_token: response["access_token"].as_str().unwrap().to_owned(),
            refresh_token: response["refresh_token"].as_str().map(str::to_owned),
            response,
        }
    }
}

/// A PKCE pair (RFC 7636, S256).
#[derive(Debug, Clone)]
pub struct Pkce {
    /// The `code_verifier`.
    pub verifier: String,
    /// Its S256 `code_challenge`.
    pub challenge: String,
}

impl Pkce {
    /// A fresh random verifier and its challenge.
    pub fn new() -> Self {
        let verifier = random_string();
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        Pkce {
            verifier,
            challenge,
        }
    }
}

impl Default for Pkce {
    fn default() -> Self {
        Pkce::new()
    }
}

/// 32 random bytes, base64url.
pub fn random_string() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).unwrap();
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The claims of a JWT, decoded WITHOUT verification (for assertions about what a verified token
/// carries; verification is the resource server's and mcp-host's job).
pub fn jwt_claims(token: &str) -> Value {
    let payload = token
        .split('.')
        .nth(1)
        .unwrap_or_else(|| panic!("not a JWT: {token}"));
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

/// The query parameters of `url` (last one wins).
pub fn query_params(url: &str) -> HashMap<String, String> {
    Url::parse(url)
        .unwrap_or_else(|e| panic!("not a URL ({e}): {url}"))
        .query_pairs()
        .into_owned()
        .collect()
}

fn form_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// One HTTP/1.1 request to an `http://` URL on a fresh connection (no redirects followed).
pub fn request(url: &str, method: &str, headers: &[(String, String)], body: &[u8]) -> HttpResponse {
    let parsed = Url::parse(url).unwrap_or_else(|e| panic!("not a URL ({e}): {url}"));
    assert_eq!(parsed.scheme(), "http", "only http:// here: {url}");
    let addr: SocketAddr = parsed.socket_addrs(|| None).unwrap()[0];
    let target = &parsed[url::Position::BeforePath..url::Position::AfterQuery];
    let mut all: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    all.push(("Connection", "close"));
    HttpConn::connect(addr).request(method, target, &all, body)
}

/// GET `url` (no redirects followed).
pub fn get(url: &str) -> HttpResponse {
    request(url, "GET", &[], b"")
}

/// A cookie-keeping user agent that follows the provider's redirects and fills its development
/// login (any name, any password; the name becomes `sub`) and consent forms.
#[derive(Debug, Default)]
pub struct Browser {
    /// Cookies by `host:port`, by name (paths are not told apart: one site per origin here).
    cookies: HashMap<String, BTreeMap<String, String>>,
}

/// What the browser does next.
enum Step {
    Get(String),
    Post(String, Vec<(String, String)>),
}

impl Browser {
    /// A browser with no cookies (no session at the provider: the login form will be shown).
    pub fn new() -> Self {
        Browser::default()
    }

    /// Open `url` as `user`: follow redirects, sign in, consent, until a redirect goes to
    /// `redirect_uri` (not followed): that redirect's URL (with `code`, `state`, `iss`, or an
    /// `error`). Panics on any other answer (the page is in the message).
    pub fn authorize(&mut self, url: &str, user: &str, redirect_uri: &str) -> String {
        let mut step = Step::Get(url.to_owned());
        for _ in 0..16 {
            let (at, response) = match step {
                Step::Get(u) => {
                    let r = self.send(&u, "GET", &[]);
                    (u, r)
                }
                Step::Post(u, fields) => {
                    let r = self.send(&u, "POST", &fields);
                    (u, r)
                }
            };
            step = match response.status {
                302 | 303 | 307 => {
                    let location = response.header("location").unwrap_or_default();
                    let next = Url::parse(&at).unwrap().join(location).unwrap().to_string();
                    if next.starts_with(redirect_uri) {
                        return next;
                    }
                    Step::Get(next)
                }
                200 => {
                    let (action, fields) = form_of(&response.text(), user)
                        .unwrap_or_else(|| panic!("no form at {at}: {}", response.text()));
                    Step::Post(
                        Url::parse(&at).unwrap().join(&action).unwrap().to_string(),
                        fields,
                    )
                }
                s => panic!("{at} answered {s}: {}", response.text()),
            };
        }
        panic!("no redirect to {redirect_uri} after 16 steps from {url}")
    }

    /// GET (no fields) or POST a form to `url` with this browser's cookies; keeps the cookies
    /// the answer sets.
    pub fn send(&mut self, url: &str, method: &str, fields: &[(String, String)]) -> HttpResponse {
        let origin = origin_of(url);
        let mut headers = Vec::new();
        let jar = self.cookies.entry(origin.clone()).or_default();
        if !jar.is_empty() {
            let cookie: Vec<String> = jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
            headers.push(("Cookie".to_owned(), cookie.join("; ")));
        }
        let mut body = String::new();
        if method == "POST" {
            headers.push((
                "Content-Type".to_owned(),
                "application/x-www-form-urlencoded".to_owned(),
            ));
            body = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(fields)
                .finish();
        }
        let response = request(url, method, &headers, body.as_bytes());
        let jar = self.cookies.entry(origin).or_default();
        for (name, value) in &response.headers {
            if name == "set-cookie" {
                set_cookie(jar, value);
            }
        }
        response
    }
}

fn origin_of(url: &str) -> String {
    let u = Url::parse(url).unwrap();
    format!(
        "{}:{}",
        u.host_str().unwrap_or(""),
        u.port_or_known_default().unwrap_or(0)
    )
}

/// Apply one `Set-Cookie` to `jar`: a cookie set to expire in the past (how the provider clears
/// one) is removed.
fn set_cookie(jar: &mut BTreeMap<String, String>, header: &str) {
    let mut parts = header.split(';');
    let Some((name, value)) = parts.next().and_then(|p| p.split_once('=')) else {
        return;
    };
    let cleared = parts.any(|a| {
        let a = a.trim().to_ascii_lowercase();
        a.starts_with("expires=") && a.contains("1970") || a == "max-age=0"
    });
    if cleared || value.is_empty() {
        jar.remove(name.trim());
    } else {
        jar.insert(name.trim().to_owned(), value.trim().to_owned());
    }
}

/// The first form of `page`: its action and the fields a person would send (hidden inputs, and
/// `login` = `user` and a password where the form asks them).
fn form_of(page: &str, user: &str) -> Option<(String, Vec<(String, String)>)> {
    let form = &page[page.find("<form")?..];
    let form = &form[..form.find("</form>").unwrap_or(form.len())];
    let action = attribute(&form[..form.find('>')?], "action")?;
    let mut fields = Vec::new();
    for input in form.split("<input").skip(1) {
        let tag = &input[..input.find('>').unwrap_or(input.len())];
        let Some(name) = attribute(tag, "name") else {
            continue;
        };
        let value = match name.as_str() {
            "login" => user.to_owned(),
            "password" => "any password".to_owned(),
            _ => attribute(tag, "value").unwrap_or_default(),
        };
        fields.push((name, value));
    }
    Some((action, fields))
}

/// The value of `name="…"` in an HTML tag, unescaped.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let needle = format!(" {name}=\"");
    let start = tag.find(&needle)? + needle.len();
    let end = tag[start..].find('"')? + start;
    Some(
        tag[start..end]
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

// ---------------------------------------------------------------------------------------------
// The resource server

/// tests/fixtures/upstream/oauth_resource.py on 127.0.0.1 (an ephemeral port), killed on drop.
#[derive(Debug)]
pub struct ResourceServer {
    _child: ChildGuard,
    stderr: Arc<Mutex<String>>,
    /// Its MCP endpoint, `http://127.0.0.1:PORT/mcp`: its resource identifier (the `aud` it wants).
    pub url: String,
    /// Its protected-resource metadata URL.
    pub metadata_url: String,
}

impl ResourceServer {
    /// Start it for `issuer` with `args` (see the script), or `None` (skip) without the Python SDK
    /// and PyJWT.
    pub fn start(issuer: &str, args: &[&str]) -> Option<ResourceServer> {
        let python = python_with("mcp, jwt", "the Python MCP SDK with PyJWT")?;
        let mut child = Command::new(python)
            .arg(workspace_root().join("tests/fixtures/upstream/oauth_resource.py"))
            .args(["--issuer", issuer])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the resource server: {e}"));
        let lines = output_lines(child.stdout.take().unwrap());
        let stderr = collect_stderr(child.stderr.take().unwrap(), |_| {});
        let ready = match lines.recv_timeout(START) {
            Ok(line) if line.starts_with("READY ") => line,
            other => panic!(
                "the resource server is not ready ({other:?}); stderr:\n{}",
                stderr.lock().unwrap()
            ),
        };
        let ready: Value = serde_json::from_str(&ready["READY ".len()..]).unwrap();
        Some(ResourceServer {
            _child: ChildGuard::from_child(child),
            stderr,
            url: ready["url"].as_str().unwrap().to_owned(),
            metadata_url: ready["prm"].as_str().unwrap().to_owned(),
        })
    }

    /// What it wrote to stderr so far (e.g. why it refused a token).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether its stderr has `needle`, waiting up to [`WAIT`] for it (the lines reach the test
    /// through a reader thread, possibly after the answer they explain).
    pub fn logged(&self, needle: &str) -> bool {
        let deadline = Instant::now() + WAIT;
        while !self.stderr().contains(needle) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }

    /// POST one JSON-RPC message to its endpoint with `token` (if any) and `session` (if any).
    pub fn post(
        &self,
        token: Option<&str>,
        session: Option<&str>,
        message: &Value,
    ) -> HttpResponse {
        let mut headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "Accept".to_owned(),
                "application/json, text/event-stream".to_owned(),
            ),
            ("MCP-Protocol-Version".to_owned(), LEGACY.to_owned()),
        ];
        if let Some(t) = token {
            headers.push(("Authorization".to_owned(), format!("Bearer {t}")));
        }
        if let Some(s) = session {
            headers.push(("Mcp-Session-Id".to_owned(), s.to_owned()));
        }
        request(&self.url, "POST", &headers, message.to_string().as_bytes())
    }

    /// Open an MCP session (2025-11-25 `initialize` + `notifications/initialized`) with `token`
    /// and call `tool` with `arguments`: the JSON-RPC result, or the first HTTP answer that
    /// refused (401, 403, …).
    pub fn call_tool(
        &self,
        token: &str,
        tool: &str,
        arguments: Value,
    ) -> Result<Value, HttpResponse> {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {},
            "clientInfo": {"name": "mcp-host-tests", "version": "1"}}});
        let r = self.post(Some(token), None, &init);
        if r.status != 200 {
            return Err(r);
        }
        let session = r.header("mcp-session-id").map(str::to_owned);
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let r = self.post(Some(token), session.as_deref(), &initialized);
        if r.status != 202 {
            return Err(r);
        }
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let r = self.post(Some(token), session.as_deref(), &call);
        if r.status != 200 {
            return Err(r);
        }
        let message = r.message();
        assert!(message.get("error").is_none(), "{tool} failed: {message}");
        Ok(message["result"].clone())
    }
}
