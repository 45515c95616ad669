//! Property-based fuzzing of everything that parses outside input: JSON-RPC messages of both eras
//! (through the whole stdio transport and the protocol engine, with real plugins behind it), HTTP
//! requests with arbitrary headers (through the real HTTP transport on a loopback socket), the
//! configuration's YAML layers and environment variables, the plugin manifest the registry
//! reads, and the call policy's input (any arguments, claims and names through a set of rules, and
//! any rule text). Each property says what must hold for any input: an answer of the right shape, never a
//! panic, a hang or a dead server.
//!
//! Runs on the stable toolchain with `proptest`. By default each target runs one short batch of
//! cases (the README's test command); `MCP_FUZZ_SECS=N` runs each target for N seconds of fresh
//! random batches (what `.ci/run` does). A failing input is shrunk, printed and saved under
//! `tests/fuzz/proptest-regressions/`, where every later run replays it first: commit that file,
//! and the crash stays a regression test.

#![allow(clippy::unwrap_used)]

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mcp_host::plugins::backend::PluginBackend;
use mcp_host::plugins::discovery::Candidate;
use mcp_host::plugins::slot::PluginSlot;
use mcp_host::protocol::Protocol;
use mcp_host::registry::Registry;
use mcp_host::{Config, Host};
use mcp_host_tests::Layout;
use mcp_plugin_sdk::wire::{BuildInfo, Manifest};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunConfig, FileFailurePersistence, TestRunner};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// Running a property within a budget

/// Run `test` on inputs from `strategy`: one batch of `cases`, or fresh batches for
/// `MCP_FUZZ_SECS` seconds. Failures are shrunk, persisted and reported.
fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let budget = std::env::var("MCP_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let deadline = budget.map(|b| Instant::now() + b);
    let mut batches = 0u32;
    loop {
        let mut runner = TestRunner::new(RunConfig {
            cases,
            failure_persistence: Some(Box::new(FileFailurePersistence::SourceParallel(
                "proptest-regressions",
            ))),
            source_file: Some(file!()),
            ..RunConfig::default()
        });
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("{name}: {e}");
        }
        batches += 1;
        if deadline.is_none_or(|d| Instant::now() >= d) {
            break;
        }
    }
    eprintln!("{name}: {batches} batch(es) of {cases} cases");
}

// ---------------------------------------------------------------------------------------------
// Inputs

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,24}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_/.$@-]{0,14}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const METHODS: &[&str] = &[
    "initialize",
    "notifications/initialized",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
    "server/discover",
    "notifications/cancelled",
    "resources/list",
];

/// Tools of fixture-basic that answer at once (the property is about parsing, not waiting).
const TOOLS: &[&str] = &["echo", "shout", "whoami", "nope", "a.b"];

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(METHODS).prop_map(str::to_owned),
        1 => ".{0,20}",
    ]
}

/// A `_meta` of either era (or broken).
fn meta() -> impl Strategy<Value = Value> {
    let version = prop_oneof![
        Just(json!("2026-07-28")),
        Just(json!("2025-11-25")),
        json_value()
    ];
    (
        version,
        prop_oneof![Just(json!({})), json_value()],
        prop::option::of(prop_oneof![
            Just(json!("debug")),
            Just(json!("error")),
            json_value()
        ]),
        prop::option::of(json_value()),
    )
        .prop_map(|(version, caps, level, token)| {
            let mut m = Map::new();
            m.insert("io.modelcontextprotocol/protocolVersion".into(), version);
            m.insert("io.modelcontextprotocol/clientCapabilities".into(), caps);
            if let Some(level) = level {
                m.insert("io.modelcontextprotocol/logLevel".into(), level);
            }
            if let Some(token) = token {
                m.insert("progressToken".into(), token);
            }
            Value::Object(m)
        })
}

/// `params`: structured the way requests of each method carry them, or anything at all.
fn params() -> impl Strategy<Value = Option<Value>> {
    let arguments = prop_oneof![".{0,40}".prop_map(|t| json!({ "text": t })), json_value(),];
    let structured = (
        prop::option::of(meta()),
        prop::option::of(prop::sample::select(TOOLS)),
        prop::option::of(arguments),
        prop::option::of(prop_oneof![
            Just(json!("2025-03-26")),
            Just(json!("2025-11-25")),
            json_value()
        ]),
        prop::option::of(json_value()),
        prop::option::of(json_value()),
    )
        .prop_map(|(meta, name, arguments, version, capabilities, extra)| {
            let mut p = Map::new();
            if let Some(m) = meta {
                p.insert("_meta".into(), m);
            }
            if let Some(n) = name {
                p.insert("name".into(), json!(n));
            }
            if let Some(a) = arguments {
                p.insert("arguments".into(), a);
            }
            if let Some(v) = version {
                p.insert("protocolVersion".into(), v);
            }
            if let Some(c) = capabilities {
                p.insert("capabilities".into(), c);
            }
            if let Some(e) = extra {
                for key in ["level", "cursor", "requestId"] {
                    p.insert(key.into(), e.clone());
                }
            }
            Value::Object(p)
        });
    prop::option::of(prop_oneof![3 => structured, 1 => json_value()])
}

/// One JSON-RPC message (or something shaped almost like one).
fn message() -> impl Strategy<Value = Value> {
    let id = prop::option::of(prop_oneof![
        any::<i64>().prop_map(Value::from),
        "[a-z0-9]{0,8}".prop_map(Value::from),
        json_value(),
    ]);
    let version = prop_oneof![8 => Just(json!("2.0")), 1 => json_value()];
    (id, method(), params(), version).prop_map(|(id, method, params, version)| {
        let mut m = Map::new();
        m.insert("jsonrpc".into(), version);
        if let Some(id) = id {
            m.insert("id".into(), id);
        }
        m.insert("method".into(), json!(method));
        if let Some(p) = params {
            m.insert("params".into(), p);
        }
        Value::Object(m)
    })
}

/// One line of stdio input: a message, a batch, any JSON, or any text.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => message().prop_map(|m| m.to_string()),
        2 => prop::collection::vec(message(), 0..5).prop_map(|b| Value::Array(b).to_string()),
        1 => json_value().prop_map(|v| v.to_string()),
        1 => "[^\n]{0,60}",
    ]
}

// ---------------------------------------------------------------------------------------------
// A host with real plugins, shared by the protocol targets

struct Served {
    _layout: Layout,
    runtime: tokio::runtime::Runtime,
    protocol: Protocol,
    http: SocketAddr,
}

const HS_SECRET: &str = "fuzz-hs256-secret-0123456789abcdefghij";

fn served() -> &'static Served {
    static SERVED: OnceLock<Served> = OnceLock::new();
    SERVED.get_or_init(|| {
        let layout = Layout::new();
        layout.install("d", "fixture-basic", None);
        let cfg = layout.config(&format!(
            "tool_dirs: [d]\nhttp: {{body_read_timeout_secs: 2, header_read_timeout_secs: 2}}\n\
             auth:\n  jwt: {{hs256_secret: {HS_SECRET}, issuer: fuzz}}\n\
             agents:\n  a: {{allow: [echo]}}\n"
        ));
        let host: Host = layout.host(&cfg);
        let runtime = mcp_host_tests::runtime();
        let protocol = Protocol::new(host.clone());
        let settings = host.config().http.clone();
        let listener = runtime
            .block_on(mcp_host::transport::http::bind(
                "127.0.0.1:0".parse().unwrap(),
            ))
            .unwrap();
        let http = listener.local_addr().unwrap();
        let options = mcp_host::transport::http::HttpOptions {
            settings,
            grace: Duration::from_secs(1),
            ..Default::default()
        };
        runtime.spawn(mcp_host::transport::http::serve(
            protocol.clone(),
            listener,
            options,
            std::future::pending(),
        ));
        Served {
            _layout: layout,
            runtime,
            protocol,
            http,
        }
    })
}

/// A `Write` into a shared buffer (stdio's output).
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Both ways of reading a message decide the same: member by member off the text (as the
/// transports read what clients send) and by classifying its tree (as a batch's items are).
#[test]
fn reading_a_message_off_its_text_decides_as_classifying_its_tree() {
    use mcp_host::protocol::jsonrpc::{Received, read};
    fuzz("read", 512, line(), |text| {
        let Ok(tree) = serde_json::from_str::<Value>(&text) else {
            prop_assert!(read(&text).is_err(), "{text}");
            return Ok(());
        };
        prop_assert_eq!(read(&text).ok(), Some(Received::of(tree)), "{}", text);
        Ok(())
    });
}

#[test]
fn any_stdio_input_gets_only_well_formed_answers() {
    let served = served();
    fuzz("stdio", 24, prop::collection::vec(line(), 1..10), |lines| {
        let input = lines.join("\n") + "\n";
        let out = Sink::default();
        let options = mcp_host::transport::stdio::StdioOptions {
            caller: Some(mcp_plugin_sdk::UserInfo::new("fuzz")),
            agent: None,
            max_message_bytes: 64 * 1024,
            grace: Duration::from_secs(5),
        };
        let served_ok = served.runtime.block_on(mcp_host::transport::stdio::serve(
            served.protocol.clone(),
            std::io::Cursor::new(input.into_bytes()),
            out.clone(),
            options,
        ));
        prop_assert!(served_ok.is_ok(), "{served_ok:?}");
        let bytes = out.0.lock().unwrap().clone();
        let text = String::from_utf8(bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for answer in text.lines() {
            let v: Value = serde_json::from_str(answer)
                .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {answer}")))?;
            let ok = match &v {
                Value::Object(m) => m.get("jsonrpc") == Some(&json!("2.0")),
                Value::Array(items) => items.iter().all(|i| i["jsonrpc"] == "2.0"),
                _ => false,
            };
            prop_assert!(ok, "not a JSON-RPC message: {answer}");
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Resource URIs

/// The answers of the served host to a 2026 `resources/read` of each of `uris`, in order.
fn reads(uris: &[String]) -> Result<Vec<Value>, TestCaseError> {
    let served = served();
    let input: String = uris
        .iter()
        .enumerate()
        .map(|(id, uri)| {
            let params = mcp_host_tests::serve::with_meta(json!({ "uri": uri }));
            json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": params})
                .to_string()
                + "\n"
        })
        .collect();
    let out = Sink::default();
    let options = mcp_host::transport::stdio::StdioOptions {
        caller: None,
        agent: None,
        max_message_bytes: 64 * 1024,
        grace: Duration::from_secs(5),
    };
    let served_ok = served.runtime.block_on(mcp_host::transport::stdio::serve(
        served.protocol.clone(),
        std::io::Cursor::new(input.into_bytes()),
        out.clone(),
        options,
    ));
    prop_assert!(served_ok.is_ok(), "{served_ok:?}");
    let text = String::from_utf8(out.0.lock().unwrap().clone())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut answers = vec![Value::Null; uris.len()];
    for line in text.lines() {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {line}")))?;
        let id = v["id"].as_u64().and_then(|i| usize::try_from(i).ok());
        match id.and_then(|i| answers.get_mut(i)) {
            Some(slot) => *slot = v,
            None => return Err(TestCaseError::fail(format!("an answer to no read: {line}"))),
        }
    }
    Ok(answers)
}

/// `uri` (`scheme://host/path`, ASCII, in normal form) spelt another way, as `choices` say: the
/// scheme's and the host's letters in either case, unreserved characters of the path
/// percent-encoded (in either case), and `./`, an extra `/` or `x/../` before path segments.
fn disguised(uri: &str, choices: &[u8]) -> String {
    let mut choice = choices.iter().copied().cycle();
    let mut next = move || choice.next().unwrap_or(0);
    let (scheme, rest) = uri.split_once("://").unwrap();
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, None), |(h, p)| (h, Some(p)));
    let mut out = String::new();
    let cased = |out: &mut String, text: &str, next: &mut dyn FnMut() -> u8| {
        for c in text.chars() {
            out.push(if next().is_multiple_of(2) {
                c.to_ascii_uppercase()
            } else {
                c
            });
        }
    };
    cased(&mut out, scheme, &mut next);
    out.push_str("://");
    cased(&mut out, host, &mut next);
    for segment in path.into_iter().flat_map(|p| p.split('/')) {
        out.push('/');
        match next() % 5 {
            0 => out.push_str("./"),
            1 => out.push('/'),
            2 => out.push_str("x/../"),
            _ => {}
        }
        for c in segment.chars() {
            match next() % 4 {
                0 => out.push_str(&format!("%{:02X}", c as u32)),
                1 => out.push_str(&format!("%{:02x}", c as u32)),
                _ => out.push(c),
            }
        }
    }
    out
}

#[test]
fn every_spelling_of_a_uri_reads_what_it_names_and_a_template_never_gets_a_separator() {
    let word = "[a-zA-Z0-9_~-][a-zA-Z0-9._~-]{0,7}";
    let input = (
        prop::collection::vec(any::<u8>(), 1..48),
        word,
        "(basic|BASIC|x)://(echo|Echo)/[a-z.%2FfEe/\\\\~:@!$&'()*+,;=?#-]{0,16}",
        ".{0,24}",
    );
    fuzz(
        "resource URIs",
        64,
        input,
        |(choices, word, near, anything)| {
            let answers = reads(&[
                disguised("basic://greeting", &choices),
                disguised(&format!("basic://echo/{word}"), &choices),
                near.clone(),
                anything.clone(),
            ])?;
            let text = |a: &Value| {
                a["result"]["contents"][0]["text"]
                    .as_str()
                    .map(str::to_owned)
            };
            prop_assert_eq!(
                text(&answers[0]),
                Some("hello from basic".to_owned()),
                "{}",
                answers[0]
            );
            prop_assert_eq!(text(&answers[1]), Some(word), "{}", answers[1]);
            for (uri, answer) in [(&near, &answers[2]), (&anything, &answers[3])] {
                match text(answer) {
                    // The template's variable: never a separator, never a dot segment.
                    Some(t) => prop_assert!(
                        !t.contains(['/', '\\']) && t != "." && t != "..",
                        "{uri} read as {t:?}"
                    ),
                    None => prop_assert!(
                        [-32602, -32002].contains(&answer["error"]["code"].as_i64().unwrap_or(0)),
                        "{uri}: {answer}"
                    ),
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP

const HEADER_NAMES: &[&str] = &[
    "Origin",
    "Host",
    "Content-Type",
    "Accept",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
    "Mcp-Param-Text",
    "Authorization",
    "Mcp-Session-Id",
    "Last-Event-ID",
];

/// A header value: plausible ones, base64-encoded ones, bearer tokens, and any bytes a header
/// line can hold (including non-ASCII and control bytes).
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"2026-07-28".to_vec()),
        Just(b"tools/call".to_vec()),
        Just(b"application/json".to_vec()),
        Just(b"http://localhost:3000".to_vec()),
        Just(b"127.0.0.1".to_vec()),
        "[A-Za-z0-9+/=]{0,24}".prop_map(|b| format!("=?base64?{b}?=").into_bytes()),
        "[A-Za-z0-9._-]{0,60}".prop_map(|t| format!("Bearer {t}").into_bytes()),
        prop::collection::vec(
            any::<u8>().prop_filter("no line breaks", |b| !matches!(b, b'\r' | b'\n' | 0)),
            0..40
        ),
    ]
}

fn http_request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(&["POST", "GET", "DELETE", "PUT", "OPTIONS"][..]);
    let path = prop_oneof![
        Just("/mcp".to_owned()),
        Just("/mcp/agents/a".to_owned()),
        Just("/mcp/agents/nobody".to_owned()),
        Just("/healthz".to_owned()),
        Just("/.well-known/oauth-protected-resource/mcp/agents/a".to_owned()),
        "/[a-z/.%]{0,20}",
    ];
    let name = prop_oneof![
        4 => prop::sample::select(HEADER_NAMES).prop_map(str::to_owned),
        1 => "[A-Za-z0-9-]{1,16}",
    ];
    let headers = prop::collection::vec((name, header_value()), 0..8);
    let body = prop_oneof![
        4 => message().prop_map(|m| m.to_string().into_bytes()),
        1 => prop::collection::vec(message(), 0..4).prop_map(|b| Value::Array(b).to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ];
    (method, path, headers, body).prop_map(|(method, path, headers, body)| {
        let mut raw = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
        for (name, value) in headers {
            // The transport's own framing headers stay consistent: the property is about what the
            // host makes of the rest.
            if name.eq_ignore_ascii_case("content-length")
                || name.eq_ignore_ascii_case("transfer-encoding")
                || name.eq_ignore_ascii_case("connection")
            {
                continue;
            }
            raw.extend_from_slice(name.as_bytes());
            raw.extend_from_slice(b": ");
            raw.extend_from_slice(&value);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(
            format!(
                "Connection: close\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        raw.extend_from_slice(&body);
        raw
    })
}

/// Send `raw` and read the whole answer (the connection closes after it).
fn exchange(addr: SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(mcp_host_tests::serve::WAIT))
        .unwrap();
    c.write_all(raw).unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    answer
}

#[test]
fn any_http_request_gets_an_http_answer_and_the_server_lives_on() {
    let served = served();
    fuzz("http", 48, http_request(), |raw| {
        let answer = exchange(served.http, &raw);
        let head = String::from_utf8_lossy(&answer[..answer.len().min(16)]).into_owned();
        let status: Option<u16> = head
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse().ok());
        prop_assert!(
            status.is_some_and(|s| (100..600).contains(&s)),
            "no HTTP answer: {:?}",
            String::from_utf8_lossy(&answer)
        );
        Ok(())
    });
    let health = exchange(
        served.http,
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert!(
        health.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&health)
    );
}

#[test]
fn header_values_decode_or_fail_cleanly() {
    fuzz(
        "headers",
        256,
        (".{0,40}", "[A-Za-z0-9+/=]{0,40}", json_value()),
        |(plain, b64, arg)| {
            let _ = mcp_host::protocol::decode_header_value(&plain);
            let _ = mcp_host::protocol::decode_header_value(&format!("=?base64?{b64}?="));
            let headers = mcp_host::protocol::HttpHeaders {
                protocol_version: Some(plain.clone()),
                method: Some(plain.clone()),
                name: Some(plain.clone()),
                params: vec![
                    ("x".into(), format!("=?base64?{b64}?=")),
                    ("x".into(), plain.clone()),
                ],
                ..Default::default()
            };
            let params: Map<String, Value> =
                [("name".to_owned(), arg.clone())].into_iter().collect();
            let _ = headers.check("tools/call", "2026-07-28", &params);
            let declared = [mcp_host::registry::HeaderParam {
                argument: "a".into(),
                header: "X".into(),
            }];
            let _ = headers.check_params(&declared, Some(&json!({ "a": arg })));
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Configuration

const TOP_KEYS: &[&str] = &[
    "tool_dirs",
    "MCP_TOOL_DIRS",
    "limits",
    "http",
    "auth",
    "agents",
    "plugins",
    "probe",
    "probe_cache",
    "runtime_dir",
    "listen",
    "shutdown_grace_secs",
    "stdio_user",
    "list_page_size",
    "cache_ttl_ms",
    "instructions",
    "trust",
];

const SUB_KEYS: &[&str] = &[
    "call_timeout_secs",
    "max_concurrent_calls",
    "max_result_bytes",
    "per_caller",
    "max_in_flight",
    "calls_per_sec",
    "path",
    "max_body_bytes",
    "allowed_origins",
    "max_sessions",
    "max_connections",
    "jwt",
    "hs256_secret",
    "issuer",
    "jwks_file",
    "public_keys",
    "secrets",
    "sha256",
    "user",
    "allow",
    "deny",
    "prefix",
    "config",
    "services",
    "tools",
    "timeout_secs",
    "keys",
    "require_signature",
    "pinning",
    "lock_file",
    "always_list",
];

/// A configuration document: the real keys (so checks deep inside run) with any values, as JSON
/// (which is YAML), or YAML text with anchors, aliases, tags and references, or any text.
fn config_text() -> impl Strategy<Value = String> {
    let sub_value = prop_oneof![
        json_value(),
        ".{0,12}".prop_map(|s| json!(format!("${{{s}}}"))),
        ".{0,12}".prop_map(|s| json!(format!("${{MCP_FUZZ:-{s}}}"))),
    ];
    let section = prop::collection::btree_map(prop::sample::select(SUB_KEYS), sub_value, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
    let value = prop_oneof![
        section.clone(),
        json_value(),
        prop::collection::vec(section, 0..3).prop_map(Value::Array)
    ];
    let document = prop::collection::btree_map(prop::sample::select(TOP_KEYS), value, 0..6)
        .prop_map(|m| {
            Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()).to_string()
        });
    let yaml = prop::collection::vec(
        prop_oneof![
            Just("a: &x [1, 2]\nb: *x\n".to_owned()),
            Just("<<: *nothing\n".to_owned()),
            Just("limits: !!binary aGVsbG8=\n".to_owned()),
            Just("tool_dirs:\n  - {path: d, prefix: p_}\n  - e\n".to_owned()),
            Just(
                "tool_dirs:\n  - {path: d, pinning: enforce, require_signature: yes}\n".to_owned()
            ),
            Just("trust: {pinning: warn, lock_file: /dev/zero}\n".to_owned()),
            Just("http:\n  max_sessions: -1\n".to_owned()),
            Just("listen: '[::1]:99999'\n".to_owned()),
            "[a-z_]{1,12}: [^\n]{0,20}\n",
            "[ \t]{0,4}- [^\n]{0,20}\n",
        ],
        0..8,
    )
    .prop_map(|lines| lines.concat());
    prop_oneof![4 => document, 3 => yaml, 1 => ".{0,200}"]
}

fn env_vars() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop_oneof![
        Just("MCP_HOST_ENV".to_owned()),
        Just("MCP_TOOL_DIRS".to_owned()),
        "MCP_HOST_[A-Z_]{1,30}",
        "(ALLOWED|DISALLOWED)_TOOLS_[A-Z]{0,6}",
    ];
    prop::collection::vec((name, ".{0,24}"), 0..5)
}

#[test]
fn any_configuration_loads_or_fails_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    fuzz(
        "config",
        64,
        (config_text(), prop::option::of(config_text()), env_vars()),
        |(base, overlay, mut vars)| {
            let file = dir.path().join("mcp-host.yaml");
            std::fs::write(&file, &base).unwrap();
            let overlay_file = dir.path().join("config.fuzz.yaml");
            match &overlay {
                Some(text) => {
                    std::fs::write(&overlay_file, text).unwrap();
                    vars.push(("MCP_HOST_ENV".into(), "fuzz".into()));
                }
                None => {
                    let _ = std::fs::remove_file(&overlay_file);
                }
            }
            if let Ok(config) = Config::load_with_env(Some(&file), &vars) {
                // What the host builds from it at start and at each reload.
                let _ = mcp_host::access::Access::from_config(&config);
                let _ = config.start_only_changes(&Config::default());
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Call policy rules

/// Rules in the shapes operators write, over every input a rule sees: argument values and sizes,
/// arithmetic on them, claims, regular expressions, resources and prompts.
const RULES: &[(&str, &str)] = &[
    ("sizes", "size(args.text) > 3"),
    ("has", "has(args.id) && args.id == caller.user"),
    ("sum", "args.n + 1 > 10 && args.n * 2 < 100"),
    ("division", "args.n / args.d > 1 || args.n % args.d == 0"),
    ("negation", "-args.n < 0"),
    (
        "lists",
        "args.items.exists(i, i == 'x') && args.items.all(i, size(i) < 3)",
    ),
    ("maps", "'k' in args && args.k.v == 1.5"),
    (
        "claims",
        "'admin' in caller.claims.roles || caller.claims.sub.startsWith('a')",
    ),
    ("regex", "args.text.matches('^[a-z]+$')"),
    (
        "casts",
        "int(args.s) > 3 && double(args.n) < 2.5 && string(args.n) == '1'",
    ),
    ("annotations", "tool.annotations.destructiveHint"),
    (
        "resources",
        "kind == 'resource' && resource.uri.endsWith(args.id)",
    ),
    ("prompts", "kind == 'prompt' && prompt.name == args.name"),
    (
        "tools",
        "tool.name in ['echo', 'x'] && args.text.contains(caller.agent)",
    ),
];

/// The fixed rule set: each of [`RULES`], polices everything, in turn one of the outcomes
/// (`limit` on a budget of every kind, `approve` showing two fields).
fn policy_rules() -> mcp_host::policy::Policy {
    let outcomes = [
        json!({"outcome": "deny", "message": "no"}),
        json!({"outcome": "limit", "budget": "b", "per_tool": true}),
        json!({"outcome": "approve", "show": ["text", "id"]}),
        json!({"outcome": "allow"}),
    ];
    let rules: Vec<Value> = RULES
        .iter()
        .enumerate()
        .map(|(i, (name, when))| {
            let mut rule = outcomes[i % outcomes.len()].clone();
            rule["name"] = json!(name);
            rule["when"] = json!(when);
            rule["on"] = json!(["tools", "resources", "prompts"]);
            rule
        })
        .collect();
    let settings = json!({
        "rules": rules,
        "budgets": {"b": {"calls": 5, "per_secs": 1, "concurrent": 2, "bytes": 100}},
    });
    mcp_host::policy::Policy::compile(&serde_json::from_value(settings).unwrap()).unwrap()
}

/// Arguments: any JSON, or an object with the fields the rules read holding any values.
fn rule_args() -> impl Strategy<Value = Value> {
    let fields = prop::collection::btree_map(
        prop::sample::select(&["text", "id", "n", "d", "items", "k", "s", "name"][..]),
        prop_oneof![
            json_value(),
            any::<i64>().prop_map(Value::from),
            prop_oneof![Just(i64::MAX), Just(i64::MIN), Just(0), Just(-1)].prop_map(Value::from),
        ],
        0..8,
    )
    .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
    prop_oneof![3 => fields, 1 => json_value()]
}

/// What a request is about: a tool (with any annotations), a resource or a prompt, any names.
#[derive(Debug, Clone)]
enum Asked {
    Tool(String, Value),
    Resource(String),
    Prompt(String),
}

fn asked() -> impl Strategy<Value = Asked> {
    prop_oneof![
        (".{0,12}", json_value()).prop_map(|(n, a)| Asked::Tool(n, a)),
        ".{0,30}".prop_map(Asked::Resource),
        ".{0,12}".prop_map(Asked::Prompt),
    ]
}

#[test]
fn any_rule_input_decides_without_panic_and_the_same_way_twice() {
    use mcp_host::policy::{CallFacts, Decision, Subject};
    let policy = policy_rules();
    let claims = prop::collection::btree_map("[a-z]{0,6}", json_value(), 0..5)
        .prop_map(|m| m.into_iter().collect::<Map<String, Value>>());
    let input = (
        rule_args(),
        prop::option::of(claims),
        prop::option::of(".{0,8}"),
        prop::option::of(".{0,8}"),
        asked(),
    );
    fuzz(
        "policy input",
        512,
        input,
        |(args, claims, user, agent, asked)| {
            let subject = match &asked {
                Asked::Tool(name, annotations) => Subject::Tool {
                    name,
                    source_name: name,
                    annotations,
                },
                Asked::Resource(uri) => Subject::Resource { uri, raw: uri },
                Asked::Prompt(name) => Subject::Prompt { name },
            };
            let facts = CallFacts {
                user: user.as_deref(),
                agent: agent.as_deref(),
                claims: claims.as_ref(),
                subject,
                plugin: "p",
                args: &args,
            };
            let decision = policy.decide(&facts);
            // A rule decided, or none matched; the same input decides the same way.
            if let Some(rule) = decision.rule() {
                prop_assert!(RULES.iter().any(|(name, _)| *name == rule), "{decision:?}");
            }
            match &decision {
                Decision::Limit { key, .. } => prop_assert!(!key.is_empty()),
                // A rule that cannot be evaluated refuses, saying why in a few words.
                Decision::Deny { message, .. } => prop_assert!(message.len() < 400, "{message}"),
                _ => {}
            }
            let again = policy.decide(&facts);
            prop_assert_eq!(
                (again.rule(), again.outcome()),
                (decision.rule(), decision.outcome())
            );
            Ok(())
        },
    );
}

/// A rule's `when`: pieces of CEL (names the rules see, operators, literals, calls) in any order,
/// or any text.
fn rule_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        prop::sample::select(
            &[
                "args",
                "args.text",
                "caller.user",
                "caller.claims",
                "tool.name",
                "resource.uri",
                "prompt.name",
                "kind",
                "size(",
                "has(",
                "int(",
                ".matches('",
                ".exists(x, ",
                "&&",
                "||",
                "!",
                "==",
                "<",
                "+",
                "-",
                "*",
                "/",
                "%",
                "in",
                "?",
                ":",
                "(",
                ")",
                "[",
                "]",
                "{",
                "}",
                ",",
                ".",
                "'",
                "\"",
                "true",
                "null",
                "1",
                "0",
                "-1",
                "9223372036854775807",
                "1.5e308",
                "b'x'",
                "r'\\d'",
                "'[a-'",
                "dyn(",
            ][..]
        )
        .prop_map(str::to_owned),
        "[a-z_]{1,6}",
        "[0-9]{1,20}",
    ];
    prop_oneof![
        4 => prop::collection::vec(piece, 1..16).prop_map(|p| p.join(" ")),
        1 => ".{0,40}",
    ]
}

#[test]
fn any_rule_text_compiles_or_is_refused_and_what_compiles_decides() {
    use mcp_host::policy::{CallFacts, Policy, Subject};
    fuzz(
        "policy rule text",
        512,
        (rule_text(), rule_args()),
        |(when, args)| {
            let settings = json!({"rules": [{"name": "r", "when": when, "outcome": "deny"}]});
            let settings = serde_json::from_value(settings).unwrap();
            let Ok(policy) = Policy::compile(&settings) else {
                return Ok(());
            };
            let annotations = json!({});
            let decision = policy.decide(&CallFacts {
                user: Some("u"),
                agent: None,
                claims: None,
                subject: Subject::Tool {
                    name: "t",
                    source_name: "t",
                    annotations: &annotations,
                },
                plugin: "p",
                args: &args,
            });
            prop_assert!(
                matches!(decision.outcome(), "allow" | "deny"),
                "{decision:?}"
            );
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Plugin manifests

/// A plugin seen only through its manifest: what the registry reads of it. Its tools are never
/// run here.
#[derive(Debug)]
struct ManifestOnly {
    build: BuildInfo,
    manifest: Manifest,
}

impl PluginBackend for ManifestOnly {
    fn build(&self) -> &BuildInfo {
        &self.build
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn call_blocking(
        &self,
        _index: u32,
        _args: &str,
        _call: &Arc<mcp_host::exec::CallState>,
    ) -> Result<String, mcp_host::plugins::backend::PluginCallError> {
        Err(mcp_host::plugins::backend::PluginCallError::Plugin(
            "manifest-only plugin".into(),
        ))
    }

    fn shutdown(&self) {}
}

/// A manifest: shaped like the SDK's (with any names, schemas and services), or any JSON.
fn manifest_json() -> impl Strategy<Value = Value> {
    let schema = prop_oneof![
        json_value().prop_map(|p| json!({"type": "object", "properties": p})),
        json_value(),
        Just(json!({"type": "object", "properties": {"a": {"$ref": "http://example.com/s.json"}}})),
        Just(
            json!({"type": "object", "$defs": {"x": {"$ref": "#/$defs/x"}}, "properties": {"a": {"$ref": "#/$defs/x"}}})
        ),
        Just(json!({"type": "object", "properties": {"a": {"pattern": "(a+)+$"}}})),
    ];
    let tool = (
        "[a-zA-Z0-9_.:-]{0,70}",
        prop::option::of("[A-Z][a-z]{0,6}"),
        schema,
        prop::option::of(json_value()),
        json_value(),
    )
        .prop_map(|(name, service, input, output, extra)| {
            let mut t =
                json!({"name": name, "description": "d", "inputSchema": input, "extra": extra});
            if let Some(s) = service {
                t["service"] = json!(s);
            }
            if let Some(o) = output {
                t["outputSchema"] = o;
            }
            t
        });
    let service = ("[A-Z][a-z]{0,6}", any::<bool>(), prop::option::of(".{0,12}"))
        .prop_map(|(name, enabled, reason)| json!({"name": name, "enabled": enabled, "disabledReason": reason}));
    let shaped = (
        prop::collection::vec(tool, 0..6),
        prop::collection::vec(service, 0..3),
    )
        .prop_map(|(tools, services)| {
            json!({"plugin": "fuzz", "version": "0", "sdkVersion": "0.1.0", "tools": tools, "services": services})
        });
    prop_oneof![4 => shaped, 1 => json_value()]
}

#[test]
fn any_manifest_is_read_or_refused_without_harm() {
    let config = Config::default();
    fuzz(
        "manifest",
        96,
        (manifest_json(), prop::bool::ANY),
        |(value, as_text)| {
            let parsed = if as_text {
                serde_json::from_str::<Manifest>(&value.to_string())
            } else {
                serde_json::from_value::<Manifest>(value)
            };
            let Ok(manifest) = parsed else {
                return Ok(());
            };
            let candidate = Candidate {
                dir_index: 0,
                dir: "/fuzz".into(),
                prefix: String::new(),
                path: "/fuzz/libfuzz.so".into(),
                isolation: None,
                upstream: None,
            };
            let backend = Arc::new(ManifestOnly {
                build: BuildInfo::host(),
                manifest,
            });
            let slot = PluginSlot::new(
                backend,
                candidate.clone(),
                1,
                None,
                Default::default(),
                Default::default(),
            );
            let registry = Registry::build_logged(
                vec![(candidate, Ok(Arc::new(slot)))],
                &config,
                &mcp_host::registry::BuildMemory::default(),
                false,
            );
            for tool in registry.tools() {
                prop_assert!(
                    mcp_host::registry::is_valid_tool_name(&tool.name),
                    "{}",
                    tool.name
                );
                let listing = tool.listing.value();
                prop_assert!(listing.is_object(), "{}", tool.listing.text());
                prop_assert_eq!(&listing["name"], &json!(tool.name));
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// The worker channel: frames a (possibly hostile) worker sends the host, and its output lines

use mcp_host::plugins::worker::fuzzing as worker_wire;

/// How bytes arrive: piece sizes (a zero is a pause for a non-blocking read).
fn piece_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![1 => Just(0usize), 6 => 1usize..64, 1 => 64usize..100_000],
        1..8,
    )
}

/// Bytes that look like frames often enough: a length prefix (any, small, or around the limit)
/// and a body, some of them valid messages, then anything.
fn frame_bytes(limit: usize) -> impl Strategy<Value = Vec<u8>> {
    let prefix = prop_oneof![
        any::<u32>(),
        0u32..64,
        Just(limit as u32),
        Just(limit as u32 + 1),
        Just(u32::MAX),
    ];
    let frame = (prefix, prop::collection::vec(any::<u8>(), 0..200)).prop_map(|(len, body)| {
        let mut f = len.to_le_bytes().to_vec();
        f.extend(body);
        f
    });
    let valid = prop::collection::vec((any::<u64>(), ".{0,12}", ".{0,40}"), 0..4)
        .prop_map(|parts| worker_wire::encode_messages(&parts).0);
    prop::collection::vec(prop_oneof![frame, valid], 0..6).prop_map(|parts| parts.concat())
}

#[test]
fn any_worker_byte_stream_decodes_or_fails_cleanly_within_the_frame_limit() {
    const LIMIT: usize = 100_000;
    fuzz(
        "worker frames",
        256,
        (frame_bytes(LIMIT), piece_sizes(), any::<bool>()),
        |(bytes, sizes, polling)| {
            let read = worker_wire::read_frames(bytes, &sizes, LIMIT, polling);
            prop_assert!(
                read.peak_buffer <= worker_wire::buffer_bound(LIMIT),
                "the reader held {} bytes",
                read.peak_buffer
            );
            prop_assert!(
                matches!(
                    read.end,
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData
                ),
                "{:?}: {}",
                read.end,
                read.end_message
            );
            Ok(())
        },
    );
}

#[test]
fn worker_messages_come_out_of_any_split_as_they_went_in() {
    fuzz(
        "worker frame round trip",
        128,
        (
            prop::collection::vec((any::<u64>(), ".{0,20}", ".{0,300}"), 0..12),
            piece_sizes(),
            any::<bool>(),
        ),
        |(parts, sizes, polling)| {
            let (bytes, sent) = worker_wire::encode_messages(&parts);
            let read = worker_wire::read_frames(bytes, &sizes, 1 << 20, polling);
            prop_assert_eq!(read.end, std::io::ErrorKind::UnexpectedEof);
            prop_assert_eq!(read.messages, sent);
            Ok(())
        },
    );
}

#[test]
fn worker_output_lines_are_bounded_and_lose_no_short_line() {
    let limit = worker_wire::OUTPUT_LINE_LIMIT;
    let line = prop_oneof![
        4 => "[a-z ]{0,40}",
        1 => (limit - 2..limit + 3).prop_map(|n| "y".repeat(n)),
        1 => (20_000usize..60_000).prop_map(|n| "z".repeat(n)),
    ];
    fuzz(
        "worker output lines",
        64,
        (
            prop::collection::vec(line, 0..8),
            piece_sizes(),
            any::<bool>(),
        ),
        |(lines, sizes, final_newline)| {
            let mut text = lines.join("\n");
            if final_newline && !lines.is_empty() {
                text.push('\n');
            }
            let read = worker_wire::read_output_lines(text.into_bytes(), &sizes);
            let expected: Vec<&String> =
                if final_newline || lines.last().is_some_and(|l| !l.is_empty()) {
                    lines.iter().collect()
                } else {
                    lines.iter().take(lines.len().saturating_sub(1)).collect()
                };
            prop_assert_eq!(read.len(), expected.len());
            for ((kept, dropped), sent) in read.iter().zip(expected) {
                prop_assert!(kept.len() <= limit);
                prop_assert_eq!(kept.len() + *dropped as usize, sent.len());
                prop_assert!(sent.starts_with(kept.as_str()));
            }
            Ok(())
        },
    );
}
