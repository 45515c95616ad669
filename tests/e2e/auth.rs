//! Callers and agents end to end: `mcp-host serve --listen 127.0.0.1:0` as a child process, a raw
//! HTTP/1.1 client on real sockets, bearer JWTs (HS256, RS256, ES256, a JWKS file) made here with
//! `jsonwebtoken` and keys made here with `openssl`, personal secrets from `mcp-host secret new`, and
//! the per-user `mcp-series` plugin on a SQLite file in each test's temporary directory.
//!
//! Every server's resource URI is [`RESOURCE`]; JWTs must name it as their audience.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use mcp_host_tests::Layout;
use mcp_host_tests::serve::{
    HttpResponse, HttpServer, StdioServer, header_refs, modern_headers, request, with_meta,
};
use serde_json::{Value, json};

/// This server's resource URI: the audience every valid JWT names.
const RESOURCE: &str = "http://mcp.test/mcp";
/// Where the challenge must point: the metadata of [`RESOURCE`] (RFC 9728 §3.1).
const METADATA_URL: &str = "http://mcp.test/.well-known/oauth-protected-resource/mcp";
/// The authorization server the metadata advertises.
const AUTH_SERVER: &str = "https://login.mcp.test";
/// The HS256 shared secret.
const HS_SECRET: &str = "e2e-hs256-shared-secret-7c1f0a9b3d5e4f62";
/// The `kid` of the RSA key in the JWKS file.
const JWKS_KID: &str = "e2e-jwks-rsa-1";

// ---------------------------------------------------------------------------------------------
// Keys and tokens

/// Key pairs made once per test binary with `openssl` (PEM bytes).
struct Keys {
    rsa_private: Vec<u8>,
    rsa_public: Vec<u8>,
    ec_private: Vec<u8>,
    ec_public: Vec<u8>,
    /// An RSA key published only through the JWKS file.
    jwks_private: Vec<u8>,
    /// A key pair nobody configured.
    stranger_private: Vec<u8>,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl must be installed to run these tests");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for name in ["rsa", "jwks", "stranger"] {
            openssl(d, &["genrsa", "-out", &format!("{name}.pem"), "2048"]);
        }
        openssl(
            d,
            &["rsa", "-in", "rsa.pem", "-pubout", "-out", "rsa.pub.pem"],
        );
        openssl(
            d,
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                "ec.sec1.pem",
            ],
        );
        // jsonwebtoken wants EC private keys in PKCS#8 form.
        openssl(
            d,
            &[
                "pkcs8",
                "-topk8",
                "-nocrypt",
                "-in",
                "ec.sec1.pem",
                "-out",
                "ec.pem",
            ],
        );
        openssl(
            d,
            &["ec", "-in", "ec.sec1.pem", "-pubout", "-out", "ec.pub.pem"],
        );
        let read = |f: &str| std::fs::read(d.join(f)).unwrap();
        Keys {
            rsa_private: read("rsa.pem"),
            rsa_public: read("rsa.pub.pem"),
            ec_private: read("ec.pem"),
            ec_public: read("ec.pub.pem"),
            jwks_private: read("jwks.pem"),
            stranger_private: read("stranger.pem"),
        }
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Valid claims for `sub`: our audience, ten minutes to live.
fn claims(sub: &str) -> Value {
    json!({ "sub": sub, "aud": RESOURCE, "iat": now(), "exp": now() + 600 })
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, key).unwrap()
}

fn hs256(claims: &Value) -> String {
    sign(
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(HS_SECRET.as_bytes()),
        claims,
    )
}

fn rs256(claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(&keys().rsa_private).unwrap();
    sign(Algorithm::RS256, None, &key, claims)
}

fn es256(claims: &Value) -> String {
    let key = EncodingKey::from_ec_pem(&keys().ec_private).unwrap();
    sign(Algorithm::ES256, None, &key, claims)
}

/// RS256 signed with the key that only the JWKS file publishes, with header `kid`.
fn jwks_rs256(kid: &str, claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(&keys().jwks_private).unwrap();
    sign(Algorithm::RS256, Some(kid), &key, claims)
}

/// The SHA-256 of `text` in hex, computed by `openssl` (not by the host).
fn sha256_hex(text: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("in"), text).unwrap();
    let out = Command::new("openssl")
        .current_dir(tmp.path())
        .args(["dgst", "-sha256", "-r", "in"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let hex = String::from_utf8(out.stdout).unwrap();
    let hex = hex.split_whitespace().next().unwrap().to_owned();
    assert_eq!(hex.len(), 64, "{hex}");
    hex
}

/// A fresh personal secret (`mcp_` + 256 random bits) made by `openssl`, and its config entry.
fn secret_for(user: &str, agent: Option<&str>, expires: Option<&str>) -> (String, String) {
    let out = Command::new("openssl")
        .args(["rand", "-hex", "32"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let secret = format!("mcp_{}", String::from_utf8(out.stdout).unwrap().trim());
    let mut entry = format!(
        "    - {{ sha256: \"{}\", user: \"{user}\"",
        sha256_hex(&secret)
    );
    if let Some(a) = agent {
        entry.push_str(&format!(", agent: \"{a}\""));
    }
    if let Some(e) = expires {
        entry.push_str(&format!(", expires: \"{e}\""));
    }
    entry.push_str(" }\n");
    (secret, entry)
}

// ---------------------------------------------------------------------------------------------
// Layout and server

/// What a test's config adds to the common one.
#[derive(Default)]
struct Setup<'a> {
    /// Lines inside `auth:` (two-space indent), e.g. `  require_auth: true\n`.
    auth: &'a str,
    /// Entries of `auth.secrets` (four-space indent list items, as [`secret_for`] makes them).
    secrets: &'a str,
    /// Top-level YAML, e.g. `agents:`.
    extra: &'a str,
}

/// `fixture-basic` (echo, whoami, ...) and `mcp-series` in `d`; auth with an HS256 secret, the RSA
/// and EC public keys, a JWKS file; the series database in the layout's directory.
fn layout(setup: &Setup<'_>) -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("d", "mcp-series", None);
    let k = keys();
    std::fs::write(l.root.path().join("rsa.pub.pem"), &k.rsa_public).unwrap();
    std::fs::write(l.root.path().join("ec.pub.pem"), &k.ec_public).unwrap();
    let mut jwk = Jwk::from_encoding_key(
        &EncodingKey::from_rsa_pem(&k.jwks_private).unwrap(),
        Algorithm::RS256,
    )
    .unwrap();
    jwk.common.key_id = Some(JWKS_KID.to_owned());
    let jwks = JwkSet { keys: vec![jwk] };
    std::fs::write(
        l.root.path().join("jwks.json"),
        serde_json::to_vec(&jwks).unwrap(),
    )
    .unwrap();
    let database = l.root.path().join("data").join("series.db");
    let secrets = if setup.secrets.is_empty() {
        "  secrets: []\n".to_owned()
    } else {
        format!("  secrets:\n{}", setup.secrets)
    };
    let yaml = format!(
        "tool_dirs: [d]\n\
         stdio_user: stdio-e2e\n\
         auth:\n\
         \x20 resource: \"{RESOURCE}\"\n\
         \x20 authorization_servers: [\"{AUTH_SERVER}\"]\n\
         \x20 jwt:\n\
         \x20   hs256_secret: \"{HS_SECRET}\"\n\
         \x20   public_keys: [rsa.pub.pem, ec.pub.pem]\n\
         \x20   jwks_file: jwks.json\n\
         {}{secrets}\
         plugins:\n\
         \x20 mcp-series:\n\
         \x20   config:\n\
         \x20     database: \"{}\"\n\
         {}",
        setup.auth,
        database.display(),
        setup.extra,
    );
    let cfg = l.config(&yaml);
    (l, cfg)
}

fn start(setup: &Setup<'_>) -> (Layout, HttpServer) {
    let (l, cfg) = layout(setup);
    (l, HttpServer::start(&cfg))
}

/// A 2026-07-28 request to `path` (`/mcp` or `/mcp/agents/NAME`) with the headers it needs and,
/// when given, `Authorization: Bearer <token>`.
fn rpc_at(
    s: &HttpServer,
    path: &str,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> HttpResponse {
    s.modern_at(path, token, method, params)
}

fn call_at(
    s: &HttpServer,
    path: &str,
    token: Option<&str>,
    tool: &str,
    args: Value,
) -> HttpResponse {
    rpc_at(
        s,
        path,
        token,
        "tools/call",
        json!({ "name": tool, "arguments": args }),
    )
}

fn call(s: &HttpServer, token: Option<&str>, tool: &str, args: Value) -> HttpResponse {
    call_at(s, "/mcp", token, tool, args)
}

/// The tool names `tools/list` at `path` shows (all pages), and the first page's `cacheScope`.
fn tool_names_at(s: &HttpServer, path: &str, token: Option<&str>) -> (Vec<String>, String) {
    let resp = rpc_at(s, path, token, "tools/list", json!({}));
    assert_eq!(resp.status, 200, "tools/list at {path}: {}", resp.text());
    let body = resp.json();
    assert!(
        body["result"]["nextCursor"].is_null(),
        "more than one page: {body}"
    );
    let names = body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {body}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let scope = body["result"]["cacheScope"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (names, scope)
}

/// The result of a successful tool call (HTTP 200, no JSON-RPC error, not `isError`).
fn ok_result(resp: &HttpResponse) -> Value {
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.message();
    assert!(body.get("error").is_none(), "{body}");
    assert_ne!(body["result"]["isError"], true, "{body}");
    body["result"].clone()
}

/// A tool's structured output (`structuredContent`, else its text parsed as JSON).
fn output(resp: &HttpResponse) -> Value {
    let result = ok_result(resp);
    if let Some(s) = result.get("structuredContent") {
        return s.clone();
    }
    let text = result["content"][0]["text"].as_str().unwrap_or("");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("result is not JSON ({e}): {result}"))
}

/// The text of an `isError` result.
fn tool_error(resp: &HttpResponse) -> String {
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.message();
    assert_eq!(
        body["result"]["isError"], true,
        "expected an isError result: {body}"
    );
    body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A JSON-RPC error answer: (HTTP status, code, message).
fn rpc_error(resp: &HttpResponse) -> (u16, i64, String) {
    let body = resp.json();
    let code = body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error response ({}): {body}", resp.status));
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    (resp.status, code, message)
}

fn record(s: &HttpServer, token: &str, indicator: &str, value: f64, unit: &str) -> i64 {
    let r = output(&call(
        s,
        Some(token),
        "record_reading",
        json!({ "indicator": indicator, "value": value, "unit": unit }),
    ));
    r["id"].as_i64().unwrap_or_else(|| panic!("no id in {r}"))
}

/// `query_health_indicators` as `{indicator: count}`.
fn indicators(s: &HttpServer, token: &str) -> BTreeMap<String, u64> {
    let out = output(&call(s, Some(token), "query_health_indicators", json!({})));
    out["indicators"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|i| {
            (
                i["indicator"].as_str().unwrap().to_owned(),
                i["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `query_readings` of `indicator` (one page of up to 1000) as (id, value) pairs.
fn readings(s: &HttpServer, token: &str, indicator: &str) -> Vec<(i64, f64)> {
    let out = output(&call(
        s,
        Some(token),
        "query_readings",
        json!({ "indicator": indicator, "limit": 1000 }),
    ));
    assert!(out["next_cursor"].is_null(), "{out}");
    out["readings"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|r| (r["id"].as_i64().unwrap(), r["value"].as_f64().unwrap()))
        .collect()
}

fn whoami_at(s: &HttpServer, path: &str, token: &str) -> Value {
    output(&call_at(s, path, Some(token), "whoami", json!({})))
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

/// Assert a 401 with the `WWW-Authenticate: Bearer resource_metadata="…"` challenge; `invalid`
/// says whether the challenge must also carry `error="invalid_token"` (a token was sent).
fn assert_challenged(resp: &HttpResponse, invalid: bool, what: &str) {
    assert_eq!(resp.status, 401, "{what}: {resp:?} {}", resp.text());
    let challenge = resp
        .header("www-authenticate")
        .unwrap_or_else(|| panic!("{what}: 401 without WWW-Authenticate: {resp:?}"));
    assert!(
        challenge.starts_with(&format!("Bearer resource_metadata=\"{METADATA_URL}\"")),
        "{what}: {challenge}"
    );
    assert_eq!(
        challenge.contains("error=\"invalid_token\""),
        invalid,
        "{what}: {challenge}"
    );
    let (_, code, _) = rpc_error(resp);
    assert_eq!(code, -32001, "{what}: {}", resp.text());
}

// ---------------------------------------------------------------------------------------------
// Callers see only their own data

#[test]
fn jwt_and_secret_callers_each_see_only_their_own_readings() {
    let (carol, carol_entry) = secret_for("carol", None, None);
    let (_l, s) = start(&Setup {
        secrets: &carol_entry,
        ..Setup::default()
    });
    let alice = hs256(&claims("alice"));
    let bob = rs256(&claims("bob"));

    let a1 = record(&s, &alice, "heart_rate", 60.0, "bpm");
    let a2 = record(&s, &alice, "heart_rate", 61.0, "bpm");
    let a3 = record(&s, &alice, "heart_rate", 62.0, "bpm");
    record(&s, &alice, "steps", 9000.0, "count");
    let b1 = record(&s, &bob, "heart_rate", 100.0, "bpm");
    let b2 = record(&s, &bob, "heart_rate", 101.0, "bpm");
    record(&s, &bob, "weight", 80.5, "kg");
    let c1 = record(&s, &carol, "heart_rate", 70.0, "bpm");
    record(&s, &carol, "sleep_hours", 7.5, "h");

    assert_eq!(
        indicators(&s, &alice),
        counts(&[("heart_rate", 3), ("steps", 1)])
    );
    assert_eq!(
        indicators(&s, &bob),
        counts(&[("heart_rate", 2), ("weight", 1)])
    );
    assert_eq!(
        indicators(&s, &carol),
        counts(&[("heart_rate", 1), ("sleep_hours", 1)])
    );

    let ids = |rows: Vec<(i64, f64)>| rows.into_iter().map(|(id, _)| id).collect::<BTreeSet<_>>();
    assert_eq!(
        readings(&s, &alice, "heart_rate"),
        vec![(a3, 62.0), (a2, 61.0), (a1, 60.0)],
        "newest first, alice's only"
    );
    assert_eq!(
        ids(readings(&s, &bob, "heart_rate")),
        BTreeSet::from([b1, b2])
    );
    assert_eq!(readings(&s, &carol, "heart_rate"), vec![(c1, 70.0)]);

    // Another user's indicator does not exist for this caller, and the error names none of theirs.
    let err = tool_error(&call(
        &s,
        Some(&alice),
        "query_readings",
        json!({ "indicator": "weight" }),
    ));
    assert!(
        err.contains("unknown indicator") && !err.contains("sleep_hours") && !err.contains("80.5"),
        "{err}"
    );

    // Each sees the goal count over their own readings only: (examined, above goal).
    for (token, goal, expected) in [
        (&alice, 61.0, (Some(3), Some(2))),
        (&bob, 61.0, (Some(2), Some(2))),
        (&carol, 100.0, (Some(1), Some(0))),
    ] {
        let g = output(&call(
            &s,
            Some(token),
            "count_readings_above_goal",
            json!({ "indicator": "heart_rate", "goal": goal }),
        ));
        let counts = (
            g["readings_examined"].as_u64(),
            g["readings_above_goal"].as_u64(),
        );
        assert_eq!(counts, expected, "{g}");
    }

    // Deleting another user's reading does nothing.
    for (token, who) in [(&bob, "bob"), (&carol, "carol")] {
        let d = output(&call(
            &s,
            Some(token),
            "delete_reading",
            json!({ "id": a1 }),
        ));
        assert_eq!(d["deleted"], false, "{who} deleted alice's reading: {d}");
    }
    let d = output(&call(
        &s,
        Some(&alice),
        "delete_reading",
        json!({ "id": b1 }),
    ));
    assert_eq!(d["deleted"], false, "alice deleted bob's reading: {d}");
    assert_eq!(
        indicators(&s, &alice),
        counts(&[("heart_rate", 3), ("steps", 1)])
    );
    assert_eq!(
        indicators(&s, &bob),
        counts(&[("heart_rate", 2), ("weight", 1)])
    );
    // The owner can.
    let d = output(&call(
        &s,
        Some(&alice),
        "delete_reading",
        json!({ "id": a1 }),
    ));
    assert_eq!(d["deleted"], true, "{d}");
    assert_eq!(
        readings(&s, &alice, "heart_rate"),
        vec![(a3, 62.0), (a2, 61.0)]
    );
    assert_eq!(
        ids(readings(&s, &bob, "heart_rate")),
        BTreeSet::from([b1, b2])
    );
}

#[test]
fn a_forged_user_id_or_user_info_argument_is_refused_and_never_reaches_another_users_data() {
    let (_l, s) = start(&Setup::default());
    let alice = hs256(&claims("alice"));
    let bob = hs256(&claims("bob"));
    record(&s, &alice, "heart_rate", 60.0, "bpm");
    let bob_id = record(&s, &bob, "heart_rate", 187.25, "bpm");
    record(&s, &bob, "weight", 93.75, "kg");

    let forged: [(&str, Value); 4] = [
        ("user_id", json!("bob")),
        ("user_info", json!({ "user_id": "bob" })),
        ("caller", json!({ "user_id": "bob" })),
        ("userInfo", json!({ "user_id": "bob" })),
    ];
    let leaks = |text: &str| text.contains("187.25") || text.contains("93.75");
    for (key, value) in &forged {
        let with = |mut args: Value| {
            args[*key] = value.clone();
            args
        };
        let cases = [
            ("query_health_indicators", with(json!({}))),
            ("query_readings", with(json!({ "indicator": "heart_rate" }))),
            (
                "count_readings_above_goal",
                with(json!({ "indicator": "heart_rate", "goal": 0 })),
            ),
            ("delete_reading", with(json!({ "id": bob_id }))),
            (
                "record_reading",
                with(json!({ "indicator": "weight", "value": 1, "unit": "kg" })),
            ),
        ];
        for (tool, args) in cases {
            for token in [Some(alice.as_str()), None] {
                let resp = call(&s, token, tool, args.clone());
                let text = resp.text();
                assert!(!leaks(&text), "{tool} with {key} leaked bob's data: {text}");
                if token.is_some() {
                    let err = tool_error(&resp);
                    assert!(
                        err.contains(key),
                        "{tool}: the error should name the unknown argument {key}: {err}"
                    );
                } else {
                    // Without credentials: refused one way or another, never run as bob.
                    assert!(
                        resp.status == 401 || resp.message()["result"]["isError"] == true,
                        "{tool} with {key} and no credentials: {text}"
                    );
                }
            }
        }
    }
    // Identity in `_meta` is ignored too: alice still gets alice's data.
    let resp = rpc_at(
        &s,
        "/mcp",
        Some(&alice),
        "tools/call",
        json!({ "name": "query_health_indicators", "arguments": {},
                "_meta": { "user_id": "bob", "user_info": { "user_id": "bob" } } }),
    );
    let out = output(&resp);
    assert_eq!(out["indicators"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(out["indicators"][0]["indicator"], "heart_rate", "{out}");
    assert_eq!(out["indicators"][0]["count"], 1, "{out}");

    // Nothing changed: bob's readings are intact and the forged writes wrote nothing.
    assert_eq!(
        indicators(&s, &bob),
        counts(&[("heart_rate", 1), ("weight", 1)])
    );
    assert_eq!(indicators(&s, &alice), counts(&[("heart_rate", 1)]));
}

// ---------------------------------------------------------------------------------------------
// 401 and the challenge

#[test]
fn missing_expired_wrong_audience_and_tampered_tokens_get_401_with_a_resource_metadata_challenge() {
    let (_l, s) = start(&Setup::default());
    let alice = hs256(&claims("alice"));
    let bob = hs256(&claims("bob"));
    // The valid tokens work (so the refusals below are about the tokens, not the setup).
    assert_eq!(whoami_at(&s, "/mcp", &alice)["user_id"], "alice");
    assert_eq!(
        whoami_at(&s, "/mcp", &rs256(&claims("rosa")))["user_id"],
        "rosa"
    );

    // Missing credentials on a tool that needs a caller.
    let resp = call(&s, None, "query_health_indicators", json!({}));
    assert_challenged(&resp, false, "no Authorization header");
    let basic = {
        let params = with_meta(json!({ "name": "whoami", "arguments": {} }));
        let mut headers = modern_headers("tools/call", Some("whoami"));
        headers.push(("Authorization", "Basic YWxpY2U6cGFzcw==".to_owned()));
        s.connect().post_to(
            "/mcp",
            &header_refs(&headers),
            request(1, "tools/call", params).to_string().as_bytes(),
        )
    };
    assert_challenged(&basic, false, "a non-Bearer Authorization header");

    let parts: Vec<&str> = alice.split('.').collect();
    let bob_parts: Vec<&str> = bob.split('.').collect();
    // Alice's header and signature around bob's claims.
    let swapped = format!("{}.{}.{}", parts[0], bob_parts[1], parts[2]);
    // Alice's claims edited by hand (sub changed), her signature kept.
    let edited_claims = {
        let mut c: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        c["sub"] = json!("mallory");
        URL_SAFE_NO_PAD.encode(c.to_string())
    };
    let edited = format!("{}.{edited_claims}.{}", parts[0], parts[2]);
    // One signature character changed (in the middle, so it is not a padding bit).
    let bad_signature = {
        let mut sig: Vec<char> = parts[2].chars().collect();
        let i = sig.len() / 2;
        sig[i] = if sig[i] == 'A' { 'B' } else { 'A' };
        format!(
            "{}.{}.{}",
            parts[0],
            parts[1],
            sig.into_iter().collect::<String>()
        )
    };
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        parts[1]
    );
    let mut no_exp = claims("alice");
    no_exp.as_object_mut().unwrap().remove("exp");
    let mut no_aud = claims("alice");
    no_aud.as_object_mut().unwrap().remove("aud");
    let mut not_yet = claims("alice");
    not_yet["nbf"] = json!(now() + 3600);
    let stranger = EncodingKey::from_rsa_pem(&keys().stranger_private).unwrap();
    let cases: Vec<(&str, String)> = vec![
        (
            "expired HS256",
            hs256(&json!({ "sub": "alice", "aud": RESOURCE, "exp": now() - 3600 })),
        ),
        (
            "expired RS256",
            rs256(&json!({ "sub": "bob", "aud": RESOURCE, "exp": now() - 3600 })),
        ),
        (
            "wrong audience",
            hs256(&json!({ "sub": "alice", "aud": "http://other.test/mcp", "exp": now() + 600 })),
        ),
        (
            "wrong audience (RS256)",
            rs256(&json!({ "sub": "bob", "aud": "http://mcp.test/other", "exp": now() + 600 })),
        ),
        ("no audience", hs256(&no_aud)),
        ("no expiry", hs256(&no_exp)),
        ("not valid yet", hs256(&not_yet)),
        ("claims swapped under a signature", swapped),
        ("claims edited under a signature", edited),
        ("signature changed", bad_signature),
        ("alg none", unsigned),
        (
            "HS256 with another secret",
            sign(
                Algorithm::HS256,
                None,
                &EncodingKey::from_secret(b"not-the-configured-secret"),
                &claims("alice"),
            ),
        ),
        (
            // Algorithm confusion: the RSA public key (which is public) used as an HMAC secret.
            "HS256 keyed with the RSA public key",
            sign(
                Algorithm::HS256,
                None,
                &EncodingKey::from_secret(&keys().rsa_public),
                &claims("alice"),
            ),
        ),
        (
            "RS256 with an unknown key",
            sign(Algorithm::RS256, None, &stranger, &claims("alice")),
        ),
        (
            "JWKS token with an unknown kid",
            jwks_rs256("no-such-kid", &claims("alice")),
        ),
        ("garbage", "not-a-token".to_owned()),
        (
            "unknown personal secret",
            "mcp_0000000000000000000000000000000000000000000".to_owned(),
        ),
    ];
    for (what, token) in &cases {
        // A tool that needs a caller, and one that does not: a bad token is refused either way
        // (never downgraded to an anonymous caller).
        for tool in ["query_health_indicators", "echo"] {
            let args = if tool == "echo" {
                json!({ "text": "hi" })
            } else {
                json!({})
            };
            let resp = call(&s, Some(token), tool, args);
            assert_challenged(&resp, true, &format!("{what} ({tool})"));
        }
        let list = rpc_at(&s, "/mcp", Some(token), "tools/list", json!({}));
        assert_challenged(&list, true, &format!("{what} (tools/list)"));
    }
}

#[test]
fn a_tool_without_user_info_is_callable_without_credentials_unless_auth_is_required() {
    let (_l, open) = start(&Setup::default());
    let echo = call(&open, None, "echo", json!({ "text": "anonymous" }));
    assert_eq!(ok_result(&echo)["content"][0]["text"], "anonymous");
    let (names, scope) = tool_names_at(&open, "/mcp", None);
    assert!(names.contains(&"echo".to_owned()), "{names:?}");
    assert!(names.contains(&"record_reading".to_owned()), "{names:?}");
    assert_eq!(
        scope, "private",
        "answers depend on the caller once auth is on"
    );
    // A tool that takes UserInfo still needs a caller.
    assert_challenged(
        &call(&open, None, "whoami", json!({})),
        false,
        "whoami without credentials",
    );
    drop(open);

    let (_l2, closed) = start(&Setup {
        auth: "  require_auth: true\n",
        ..Setup::default()
    });
    for (method, params) in [
        ("tools/list", json!({})),
        ("server/discover", json!({})),
        (
            "tools/call",
            json!({ "name": "echo", "arguments": { "text": "x" } }),
        ),
    ] {
        let resp = rpc_at(&closed, "/mcp", None, method, params);
        assert_challenged(&resp, false, &format!("{method} with require_auth"));
    }
    // The legacy handshake too.
    let init = closed.post(
        &[],
        &request(
            1,
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "e2e", "version": "0" } }),
        ),
    );
    assert_challenged(&init, false, "legacy initialize with require_auth");
    // With credentials everything works.
    let alice = hs256(&claims("alice"));
    let (names, _) = tool_names_at(&closed, "/mcp", Some(&alice));
    assert!(names.contains(&"echo".to_owned()), "{names:?}");
    let echo = call(
        &closed,
        Some(&alice),
        "echo",
        json!({ "text": "signed in" }),
    );
    assert_eq!(ok_result(&echo)["content"][0]["text"], "signed in");
    // The metadata and health endpoints stay open (a client needs them to find out how to sign in).
    let mut conn = closed.connect();
    let meta = conn.request("GET", "/.well-known/oauth-protected-resource/mcp", &[], b"");
    assert_eq!(meta.status, 200, "{}", meta.text());
    assert_eq!(meta.json()["resource"], RESOURCE);
    let health = conn.request("GET", "/healthz", &[], b"");
    assert_eq!(health.status, 200);
}

#[test]
fn the_protected_resource_metadata_is_served_at_both_well_known_paths() {
    let (_l, s) = start(&Setup::default());
    // The challenge's URL, on this server (its origin is the configured resource's, not ours).
    let challenge = call(&s, None, "whoami", json!({}));
    let header = challenge.header("www-authenticate").unwrap().to_owned();
    let url = header
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_owned();
    assert_eq!(url, METADATA_URL);
    let challenged_path = url.strip_prefix("http://mcp.test").unwrap();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        challenged_path,
    ] {
        let resp = s
            .connect()
            .request("GET", path, &[("Accept", "application/json")], b"");
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
        assert_eq!(resp.content_type(), "application/json", "{path}");
        let doc = resp.json();
        assert_eq!(doc["resource"], RESOURCE, "{path}: {doc}");
        assert_eq!(
            doc["authorization_servers"],
            json!([AUTH_SERVER]),
            "{path}: {doc}"
        );
        assert!(
            doc["bearer_methods_supported"]
                .as_array()
                .is_some_and(|m| m.contains(&json!("header"))),
            "{path}: {doc}"
        );
    }
    let post = s.connect().request(
        "POST",
        "/.well-known/oauth-protected-resource",
        &[("Content-Type", "application/json")],
        b"{}",
    );
    assert_eq!(post.status, 405);
}

// ---------------------------------------------------------------------------------------------
// Agents

const AGENTS: &str = "agents:\n  \
    research:\n    allow: [\"query_*\", \"echo\"]\n    deny: [\"query_readings\"]\n  \
    everything: {}\n  \
    no-echo:\n    allow: [\"*\"]\n    deny: [\"echo\", \"record_*\"]\n";

#[test]
fn an_agent_view_lists_only_permitted_tools_and_a_hidden_tool_is_unknown_like_a_missing_one() {
    let (_l, s) = start(&Setup {
        extra: AGENTS,
        ..Setup::default()
    });
    let alice = hs256(&claims("alice"));
    let research = "/mcp/agents/research";
    for token in [Some(alice.as_str()), None] {
        let (names, scope) = tool_names_at(&s, research, token);
        assert_eq!(
            names,
            sorted(&["echo", "query_health_indicators"]),
            "query_readings matches query_* but is denied; the rest is not allowed"
        );
        assert_eq!(scope, "private");
    }
    // Permitted tools work.
    let echo = call_at(
        &s,
        research,
        Some(&alice),
        "echo",
        json!({ "text": "via research" }),
    );
    assert_eq!(ok_result(&echo)["content"][0]["text"], "via research");
    let out = output(&call_at(
        &s,
        research,
        Some(&alice),
        "query_health_indicators",
        json!({}),
    ));
    assert_eq!(out["indicators"], json!([]));

    // Hidden tools (not allowed, or allowed but denied) answer exactly like a tool that does not
    // exist — with or without credentials, so the answer does not reveal that they exist.
    let unknown = |tool: &str, token: Option<&str>| {
        let args = json!({ "indicator": "steps", "value": 1, "unit": "count", "id": 1 });
        let (status, code, message) = rpc_error(&call_at(&s, research, token, tool, args));
        (status, code, message.replace(tool, "<tool>"))
    };
    let missing = unknown("no_such_tool", Some(&alice));
    assert_eq!(missing.1, -32602, "{missing:?}");
    assert_eq!(missing.2, "Unknown tool: <tool>", "{missing:?}");
    for tool in [
        "record_reading",
        "query_readings",
        "count_readings_above_goal",
        "delete_reading",
        "whoami",
    ] {
        assert_eq!(unknown(tool, Some(&alice)), missing, "{tool}");
        assert_eq!(unknown(tool, None), missing, "{tool} without credentials");
    }
    // A hidden tool really did nothing.
    assert_eq!(indicators(&s, &alice), BTreeMap::new());

    // The same tools are there at /mcp (no agent) and at an agent with no lists.
    let (all, scope) = tool_names_at(&s, "/mcp", Some(&alice));
    assert_eq!(scope, "private");
    for t in [
        "echo",
        "whoami",
        "record_reading",
        "query_readings",
        "query_health_indicators",
        "count_readings_above_goal",
        "delete_reading",
    ] {
        assert!(all.contains(&t.to_owned()), "{t} missing from {all:?}");
    }
    let (everything, _) = tool_names_at(&s, "/mcp/agents/everything", Some(&alice));
    assert_eq!(everything, all, "an agent with no lists sees every tool");
    let r = call_at(
        &s,
        "/mcp/agents/everything",
        Some(&alice),
        "record_reading",
        json!({ "indicator": "steps", "value": 10, "unit": "count" }),
    );
    ok_result(&r);

    // An agent that does not exist is a 404, not an empty view.
    let resp = rpc_at(
        &s,
        "/mcp/agents/nobody",
        Some(&alice),
        "tools/list",
        json!({}),
    );
    assert_eq!(resp.status, 404, "{}", resp.text());
}

#[test]
fn deny_wins_over_allow_in_an_agent_view() {
    let (_l, s) = start(&Setup {
        extra: AGENTS,
        ..Setup::default()
    });
    let alice = hs256(&claims("alice"));
    let (all, _) = tool_names_at(&s, "/mcp", Some(&alice));
    let (names, _) = tool_names_at(&s, "/mcp/agents/no-echo", Some(&alice));
    let expected: Vec<String> = all
        .iter()
        .filter(|t| *t != "echo" && !t.starts_with("record_"))
        .cloned()
        .collect();
    assert_eq!(names, expected, "allow [*] minus deny [echo, record_*]");
    assert!(names.contains(&"whoami".to_owned()), "{names:?}");
    for tool in ["echo", "record_reading"] {
        let (status, code, message) = rpc_error(&call_at(
            &s,
            "/mcp/agents/no-echo",
            Some(&alice),
            tool,
            json!({ "text": "x", "indicator": "a", "value": 1, "unit": "u" }),
        ));
        assert_eq!(
            (status, code, message),
            (400, -32602, format!("Unknown tool: {tool}"))
        );
    }
    assert_eq!(
        whoami_at(&s, "/mcp/agents/no-echo", &alice)["agent"],
        "no-echo"
    );
}

#[test]
fn allowed_and_disallowed_tools_env_vars_set_an_agents_lists() {
    let (_l, cfg) = layout(&Setup {
        extra: "agents:\n  research-team:\n    allow: [\"query_*\"]\n",
        ..Setup::default()
    });
    let s = HttpServer::start_with_env(
        &cfg,
        &[
            // Replaces the configured allow list of `research-team` (NAME upper-cased, `-` as `_`).
            ("ALLOWED_TOOLS_RESEARCH_TEAM", "echo, count,whoami"),
            ("DISALLOWED_TOOLS_RESEARCH_TEAM", "count"),
            // Agents that exist only in the environment.
            ("ALLOWED_TOOLS_OPS", "record_*,whoami"),
            ("DISALLOWED_TOOLS_AUDIT", "record_*,delete_*"),
        ],
    );
    let alice = hs256(&claims("alice"));
    let (team, _) = tool_names_at(&s, "/mcp/agents/research-team", Some(&alice));
    assert_eq!(team, sorted(&["echo", "whoami"]));
    let (status, code, _) = rpc_error(&call_at(
        &s,
        "/mcp/agents/research-team",
        Some(&alice),
        "query_health_indicators",
        json!({}),
    ));
    assert_eq!(
        (status, code),
        (400, -32602),
        "the config's list was replaced"
    );
    assert_eq!(
        whoami_at(&s, "/mcp/agents/research-team", &alice)["agent"],
        "research-team"
    );

    let (ops, _) = tool_names_at(&s, "/mcp/agents/ops", Some(&alice));
    assert_eq!(ops, sorted(&["record_reading", "whoami"]));
    assert_eq!(whoami_at(&s, "/mcp/agents/ops", &alice)["agent"], "ops");

    let (all, _) = tool_names_at(&s, "/mcp", Some(&alice));
    let (audit, _) = tool_names_at(&s, "/mcp/agents/audit", Some(&alice));
    let expected: Vec<String> = all
        .iter()
        .filter(|t| *t != "record_reading" && *t != "delete_reading")
        .cloned()
        .collect();
    assert_eq!(
        audit, expected,
        "a deny list alone hides only what it names"
    );
}

#[test]
fn stdio_serve_with_agent_applies_the_agents_view() {
    let (_l, cfg) = layout(&Setup {
        extra: AGENTS,
        ..Setup::default()
    });
    let mut s = StdioServer::start_with(&cfg, &["--agent", "research"], &[]);
    let list = s.call_modern(1, "tools/list", json!({}));
    let names: Vec<String> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        sorted(&["echo", "query_health_indicators"]),
        "{list}"
    );
    assert_eq!(list["result"]["cacheScope"], "private", "{list}");

    let echo = s.call_modern(
        2,
        "tools/call",
        json!({ "name": "echo", "arguments": { "text": "stdio" } }),
    );
    assert_eq!(echo["result"]["content"][0]["text"], "stdio", "{echo}");
    let q = s.call_modern(
        3,
        "tools/call",
        json!({ "name": "query_health_indicators", "arguments": {} }),
    );
    assert!(
        q["result"].is_object() && q["result"]["isError"] != true,
        "{q}"
    );
    for (i, tool) in ["record_reading", "whoami", "no_such_tool"]
        .iter()
        .enumerate()
    {
        let resp = s.call_modern(
            10 + i as i64,
            "tools/call",
            json!({ "name": tool, "arguments": {} }),
        );
        assert_eq!(resp["error"]["code"], -32602, "{tool}: {resp}");
        assert_eq!(
            resp["error"]["message"],
            format!("Unknown tool: {tool}"),
            "{tool}: {resp}"
        );
    }
    // The legacy protocol on the same pipe gets the same view.
    s.initialize("2025-11-25");
    let legacy = s.call(20, "tools/list", json!({}));
    let legacy_names: Vec<&str> = legacy["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{legacy}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(legacy_names, ["echo", "query_health_indicators"]);
    drop(s);

    // An agent that is not configured is a startup error, not an unfiltered server.
    let mut bad = StdioServer::start_with(&cfg, &["--agent", "nobody"], &[]);
    let status = bad
        .wait_exit(Duration::from_secs(20))
        .expect("serve --stdio --agent nobody should exit");
    assert!(!status.success());
    // Its stderr is read on a thread that may still be draining the pipe.
    let deadline = Instant::now() + mcp_host_tests::serve::WAIT;
    while !bad.stderr().contains("nobody") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(bad.stderr().contains("nobody"), "{}", bad.stderr());
}

#[test]
fn a_token_bound_to_one_agent_is_refused_at_another_agents_endpoint_and_gets_its_own_view_at_mcp() {
    let (dave, dave_entry) = secret_for("dave", Some("a"), None);
    let (_l, s) = start(&Setup {
        secrets: &dave_entry,
        extra: "agents:\n  a:\n    allow: [echo, whoami, \"query_*\"]\n  b:\n    allow: [echo, whoami]\n",
        ..Setup::default()
    });
    let mut bound = claims("alice");
    bound["agent"] = json!("a");
    let alice_a = hs256(&bound);
    let mut bound_rs = claims("rosa");
    bound_rs["agent"] = json!("a");
    let rosa_a = rs256(&bound_rs);
    let free = hs256(&claims("bob"));
    let a_view = sorted(&[
        "echo",
        "whoami",
        "query_health_indicators",
        "query_readings",
    ]);

    for (who, token) in [("alice", &alice_a), ("rosa", &rosa_a), ("dave", &dave)] {
        // Refused at b's endpoint, for every method.
        for (method, params) in [
            ("tools/list", json!({})),
            (
                "tools/call",
                json!({ "name": "echo", "arguments": { "text": "x" } }),
            ),
        ] {
            let resp = rpc_at(&s, "/mcp/agents/b", Some(token), method, params);
            assert_eq!(resp.status, 403, "{who} {method} at b: {}", resp.text());
            assert!(resp.json()["error"].is_object(), "{}", resp.text());
        }
        // At its own endpoint and at /mcp: agent a's view, and calls run as agent a.
        for path in ["/mcp/agents/a", "/mcp"] {
            let (names, scope) = tool_names_at(&s, path, Some(token));
            assert_eq!(names, a_view, "{who} at {path}");
            assert_eq!(scope, "private");
            let me = whoami_at(&s, path, token);
            assert_eq!(me["user_id"], who, "{me}");
            assert_eq!(me["agent"], "a", "{who} at {path}: {me}");
            let (status, code, _) = rpc_error(&call_at(
                &s,
                path,
                Some(token),
                "record_reading",
                json!({ "indicator": "steps", "value": 1, "unit": "count" }),
            ));
            assert_eq!((status, code), (400, -32602), "{who} at {path}");
        }
    }
    // An unbound token may use either agent.
    assert_eq!(whoami_at(&s, "/mcp/agents/b", &free)["agent"], "b");
    assert_eq!(whoami_at(&s, "/mcp/agents/a", &free)["agent"], "a");
    let me = whoami_at(&s, "/mcp", &free);
    assert!(me.get("agent").is_none_or(Value::is_null), "{me}");
    // A token bound to an agent that does not exist is refused, not served unfiltered.
    let mut ghost = claims("alice");
    ghost["agent"] = json!("ghost");
    let resp = rpc_at(&s, "/mcp", Some(&hs256(&ghost)), "tools/list", json!({}));
    assert_eq!(resp.status, 403, "{}", resp.text());
}

// ---------------------------------------------------------------------------------------------
// Concurrency

#[test]
fn eight_concurrent_writers_of_500_readings_each_lose_nothing_and_see_only_their_own() {
    const USERS: usize = 8;
    const PER_USER: usize = 500;
    let (_l, s) = start(&Setup::default());
    let addr = s.addr;
    let tokens: Vec<String> = (0..USERS)
        .map(|u| hs256(&claims(&format!("writer-{u}"))))
        .collect();
    let started = Instant::now();
    let threads: Vec<_> = tokens
        .iter()
        .enumerate()
        .map(|(u, token)| {
            let token = token.clone();
            std::thread::spawn(move || {
                let mut conn = mcp_host_tests::serve::HttpConn::connect(addr);
                conn.set_read_timeout(Duration::from_secs(30));
                let mut headers = modern_headers("tools/call", Some("record_reading"));
                headers.push(("Authorization", format!("Bearer {token}")));
                let headers = header_refs(&headers);
                for i in 0..PER_USER {
                    let value = (u * 10_000 + i) as f64;
                    let body = request(
                        i,
                        "tools/call",
                        with_meta(json!({ "name": "record_reading", "arguments":
                            { "indicator": "steps", "value": value, "unit": "count" } })),
                    )
                    .to_string();
                    let resp = conn.post_to("/mcp", &headers, body.as_bytes());
                    assert_eq!(resp.status, 200, "writer {u} call {i}: {}", resp.text());
                    let msg = resp.message();
                    assert_ne!(msg["result"]["isError"], true, "writer {u} call {i}: {msg}");
                    assert!(msg.get("error").is_none(), "writer {u} call {i}: {msg}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a writer failed");
    }
    let elapsed = started.elapsed();
    eprintln!("{} writes in {elapsed:?}", USERS * PER_USER);

    let mut all_ids = BTreeSet::new();
    for (u, token) in tokens.iter().enumerate() {
        assert_eq!(
            indicators(&s, token),
            counts(&[("steps", PER_USER as u64)]),
            "writer-{u}"
        );
        let rows = readings(&s, token, "steps");
        assert_eq!(rows.len(), PER_USER, "writer-{u}");
        let values: BTreeSet<u64> = rows.iter().map(|(_, v)| *v as u64).collect();
        let expected: BTreeSet<u64> = (0..PER_USER).map(|i| (u * 10_000 + i) as u64).collect();
        assert_eq!(values, expected, "writer-{u} sees exactly its own values");
        for (id, _) in rows {
            assert!(all_ids.insert(id), "id {id} seen by two users");
        }
    }
    assert_eq!(all_ids.len(), USERS * PER_USER);
}

// ---------------------------------------------------------------------------------------------
// Secrets in logs and bodies

#[test]
fn tokens_and_secrets_never_reach_the_logs_or_error_bodies() {
    let (carol, carol_entry) = secret_for("carol", None, None);
    let (dave, dave_entry) = secret_for("dave", Some("a"), None);
    let (old, old_entry) = secret_for("erin", None, Some("2001-02-03T04:05:06Z"));
    let (l, cfg) = layout(&Setup {
        secrets: &format!("{carol_entry}{dave_entry}{old_entry}"),
        extra: "agents:\n  a: {}\n  b: {}\n",
        ..Setup::default()
    });
    let mut s = HttpServer::start_with_env(&cfg, &[("RUST_LOG", "trace")]);
    let alice = hs256(&claims("alice"));
    let mut bound = claims("alice");
    bound["agent"] = json!("a");
    let alice_a = hs256(&bound);
    let bob = rs256(&claims("bob"));
    let expired = hs256(&json!({ "sub": "alice", "aud": RESOURCE, "exp": now() - 3600 }));
    let wrong_aud = rs256(&json!({ "sub": "bob", "aud": "http://x.test/mcp", "exp": now() + 600 }));
    let tampered = {
        let p: Vec<&str> = alice.split('.').collect();
        let b: Vec<&str> = bob.split('.').collect();
        format!("{}.{}.{}", p[0], b[1], p[2])
    };
    // Carol's secret with its last hex digit changed (to a digit it is not: a fixed `f` was the
    // same secret one time in sixteen).
    let last = if carol.ends_with('f') { '0' } else { 'f' };
    let unknown_secret = format!("{}{last}", &carol[..carol.len() - 1]);

    let mut bodies = Vec::new();
    let mut exchange = |path: &str, token: &str, expect: u16| {
        for (tool, args) in [
            ("whoami", json!({})),
            (
                "record_reading",
                json!({ "indicator": "steps", "value": 1, "unit": "count" }),
            ),
        ] {
            let resp = call_at(&s, path, Some(token), tool, args);
            assert_eq!(resp.status, expect, "{path} {tool}: {}", resp.text());
            bodies.push(format!("{:?}\n{}", resp.headers, resp.text()));
        }
    };
    exchange("/mcp", &alice, 200);
    exchange("/mcp", &bob, 200);
    exchange("/mcp", &carol, 200);
    exchange("/mcp/agents/a", &dave, 200);
    exchange("/mcp/agents/b", &dave, 403);
    exchange("/mcp/agents/b", &alice_a, 403);
    exchange("/mcp/agents/nobody", &alice, 404);
    exchange("/mcp", &expired, 401);
    exchange("/mcp", &wrong_aud, 401);
    exchange("/mcp", &tampered, 401);
    exchange("/mcp", &old, 401);
    exchange("/mcp", &unknown_secret, 401);
    exchange("/mcp", "not-a-jwt-but-secret-looking-5f2a9c", 401);

    // Stop the server so its log is complete.
    s.child().terminate();
    assert!(
        s.child().wait_timeout(Duration::from_secs(20)).is_some(),
        "the server did not stop"
    );
    let deadline = Instant::now() + mcp_host_tests::serve::WAIT;
    while !s.stderr().contains("stopped") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = s.stderr();
    assert!(
        log.contains("refused a bearer token"),
        "the refusals should be logged (else this test proves nothing): {log}"
    );

    let jwts = [&alice, &alice_a, &bob, &expired, &wrong_aud, &tampered];
    let mut needles: Vec<(String, String)> = vec![("HS256 secret".into(), HS_SECRET.into())];
    for t in jwts {
        needles.push(("JWT".into(), t.to_string()));
        // Each signature, and each claims segment (a partial token is still a leak).
        let parts: Vec<&str> = t.split('.').collect();
        needles.push(("JWT claims".into(), parts[1].to_owned()));
        needles.push(("JWT signature".into(), parts[2].to_owned()));
    }
    for secret in [&carol, &dave, &old, &unknown_secret] {
        needles.push(("secret".into(), secret.to_string()));
        // Without the prefix, and any 16-character piece of the random part.
        let random = &secret["mcp_".len()..];
        needles.push(("secret body".into(), random.to_owned()));
        for i in (0..random.len() - 16).step_by(8) {
            needles.push(("secret piece".into(), random[i..i + 16].to_owned()));
        }
    }
    needles.push((
        "garbage token".into(),
        "not-a-jwt-but-secret-looking-5f2a9c".into(),
    ));
    for (what, needle) in &needles {
        assert!(
            !log.contains(needle.as_str()),
            "a {what} is in the log:\n{log}"
        );
        for body in &bodies {
            assert!(
                !body.contains(needle.as_str()),
                "a {what} is in a response: {body}"
            );
        }
    }
    // Nor in the database or anything else the server wrote next to it.
    for entry in std::fs::read_dir(l.root.path().join("data")).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for (what, needle) in &needles {
            assert!(
                !text.contains(needle.as_str()),
                "a {what} is in the database"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `mcp-host secret new`

/// Run `mcp-host secret new <args>`; returns the secret and the config entry it printed.
fn secret_new(l: &Layout, cfg: &Path, args: &[&str]) -> (String, String) {
    let mut all = vec!["secret", "new"];
    all.extend_from_slice(args);
    let out = l.run(cfg, &all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "secret new failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let secrets: Vec<&str> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("mcp_") && !l.contains(' '))
        .collect();
    assert_eq!(secrets.len(), 1, "one secret line expected:\n{stdout}");
    let secret = secrets[0].to_owned();
    assert!(secret.len() >= 40, "{secret}");
    let entries: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("- {") && l.contains("sha256"))
        .collect();
    assert_eq!(entries.len(), 1, "one config entry expected:\n{stdout}");
    let entry = entries[0].to_owned();
    assert!(
        stdout.contains("auth:") && stdout.contains("secrets:"),
        "{stdout}"
    );
    assert!(
        !entry.contains(&secret),
        "the config line holds only the hash: {entry}"
    );
    assert!(
        entry.contains(&sha256_hex(&secret)),
        "the config line holds the secret's SHA-256: {entry}"
    );
    (secret, entry)
}

#[test]
fn secret_new_prints_a_secret_and_a_config_line_that_make_it_work_and_an_expired_secret_is_401() {
    let (l, cfg) = layout(&Setup::default());
    let (secret, entry) = secret_new(
        &l,
        &cfg,
        &["--user", "dave", "--agent", "a", "--expires", "30d"],
    );
    assert!(
        entry.contains("user: \"dave\"") && entry.contains("agent: \"a\""),
        "{entry}"
    );
    // The expiry is 30 days from now (RFC 3339, UTC), within a minute.
    let expires = entry
        .split("expires: \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no expires in {entry}"));
    let at =
        mcp_host::access::auth::parse_time(expires).unwrap_or_else(|| panic!("bad time {expires}"));
    let want = now() + 30 * 86_400;
    assert!(
        at.abs_diff(want) < 60,
        "expires {expires} is not 30 days ahead"
    );

    // A second secret whose entry we move into the past.
    let (old, old_entry) = secret_new(&l, &cfg, &["--user", "erin", "--expires", "1d"]);
    let old_expires = old_entry
        .split("expires: \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_owned();
    let old_entry = old_entry.replace(&old_expires, "2020-01-01T00:00:00Z");
    // And one without expiry or agent.
    let (plain, plain_entry) = secret_new(&l, &cfg, &["--user", "frank"]);
    assert!(
        !plain_entry.contains("expires") && !plain_entry.contains("agent"),
        "{plain_entry}"
    );

    let (_l2, cfg2) = layout(&Setup {
        secrets: &format!("{entry}\n{old_entry}\n{plain_entry}\n"),
        extra: "agents:\n  a: {}\n  b: {}\n",
        ..Setup::default()
    });
    let s = HttpServer::start(&cfg2);
    let me = whoami_at(&s, "/mcp/agents/a", &secret);
    assert_eq!(
        (me["user_id"].as_str(), me["agent"].as_str()),
        (Some("dave"), Some("a"))
    );
    assert_eq!(whoami_at(&s, "/mcp", &secret)["agent"], "a");
    record(&s, &secret, "steps", 1234.0, "count");
    assert_eq!(indicators(&s, &secret), counts(&[("steps", 1)]));
    let resp = call_at(&s, "/mcp/agents/b", Some(&secret), "whoami", json!({}));
    assert_eq!(resp.status, 403, "bound to agent a: {}", resp.text());

    assert_eq!(whoami_at(&s, "/mcp", &plain)["user_id"], "frank");
    assert_eq!(whoami_at(&s, "/mcp/agents/b", &plain)["agent"], "b");

    for (tool, args) in [("whoami", json!({})), ("echo", json!({ "text": "x" }))] {
        let resp = call(&s, Some(&old), tool, args);
        assert_challenged(&resp, true, &format!("expired secret ({tool})"));
    }
    // A secret that differs in its last character is unknown.
    let mut near = secret.clone();
    let last = near.pop().unwrap();
    near.push(if last == 'A' { 'B' } else { 'A' });
    assert_challenged(
        &call(&s, Some(&near), "whoami", json!({})),
        true,
        "a near-miss secret",
    );
}

// ---------------------------------------------------------------------------------------------
// ES256 and JWKS

#[test]
fn es256_tokens_and_jwks_keys_are_accepted_and_a_legacy_session_does_not_carry_credentials() {
    let (_l, s) = start(&Setup::default());
    assert_eq!(
        whoami_at(&s, "/mcp", &es256(&claims("erin")))["user_id"],
        "erin"
    );
    assert_eq!(
        whoami_at(&s, "/mcp", &jwks_rs256(JWKS_KID, &claims("frank")))["user_id"],
        "frank"
    );
    // An ES256 token with a wrong audience is refused like any other.
    let wrong = es256(&json!({ "sub": "erin", "aud": "http://x.test/mcp", "exp": now() + 600 }));
    assert_challenged(
        &call(&s, Some(&wrong), "whoami", json!({})),
        true,
        "ES256 wrong audience",
    );

    // A legacy session opened by alice: every request authenticates on its own.
    let alice = hs256(&claims("alice"));
    let auth = format!("Bearer {alice}");
    let init = s.post(
        &[("Authorization", &auth)],
        &request(
            1,
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "e2e", "version": "0" } }),
        ),
    );
    assert_eq!(init.status, 200, "{}", init.text());
    let session = init.header("mcp-session-id").unwrap().to_owned();
    let whoami = |token: Option<&str>| {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("Mcp-Session-Id", session.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        if let Some(b) = &bearer {
            headers.push(("Authorization", b.as_str()));
        }
        s.post(
            &headers,
            &request(
                2,
                "tools/call",
                json!({ "name": "whoami", "arguments": {} }),
            ),
        )
    };
    let me = whoami(Some(&alice));
    assert_eq!(me.status, 200, "{}", me.text());
    let who = output(&me);
    assert_eq!(who["user_id"], "alice");
    // The plugin sees an id of its own for the session, never the one the client sends.
    let seen = who["session_id"].as_str().unwrap();
    assert!(seen.len() == 32 && seen != session, "{who}");
    // Without credentials, or with another user's token, alice's session id is unknown: the
    // session answers only to alice.
    let anonymous = whoami(None);
    assert_eq!(anonymous.status, 404, "{}", anonymous.text());
    let bob = whoami(Some(&hs256(&claims("bob"))));
    assert_eq!(bob.status, 404, "{}", bob.text());
}

// ---------------------------------------------------------------------------------------------
// `serve --listen` over every reload

/// The number of finished reloads in a log (the watcher's `rescan:` debug line).
fn reloads(log: &str) -> usize {
    log.lines().filter(|l| l.contains("rescan: ")).count()
}

#[test]
fn listen_given_on_the_command_line_holds_across_the_watchers_catch_up_and_a_sighup_reload() {
    // No `auth.resource`: the audience is derived from the address served, which only the
    // command line names (the file says another port).
    let (l, _) = layout(&Setup::default());
    let yaml = std::fs::read_to_string(l.root.path().join("mcp-host.yaml")).unwrap();
    let yaml = yaml.replace(&format!("  resource: \"{RESOURCE}\"\n"), "");
    let cfg = l.config(&format!("listen: 127.0.0.1:1\n{yaml}"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let served = format!("http://127.0.0.1:{port}/mcp");
    let mut cmd = Command::new(&mcp_host_tests::artifacts().host);
    cmd.arg("--config")
        .arg(&cfg)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "info,mcp_host::host::watch=debug")
        .env("XDG_STATE_HOME", l.root.path());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MCP_") {
            cmd.env_remove(k);
        }
    }
    let mut s = HttpServer::spawn(cmd);
    let wait_reloads = |s: &HttpServer, n: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while reloads(&s.stderr()) < n {
            assert!(
                Instant::now() < deadline,
                "no reload #{n} within 30 s:\n{}",
                s.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // The watcher's catch-up reload, then a SIGHUP one.
    wait_reloads(&s, 1);
    let hup = Command::new("kill")
        .args(["-HUP", &s.child().id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_reloads(&s, 2);

    let token = hs256(&json!({ "sub": "alice", "aud": served, "iat": now(), "exp": now() + 600 }));
    assert_eq!(whoami_at(&s, "/mcp", &token)["user_id"], "alice");
    let meta = s
        .connect()
        .request("GET", "/.well-known/oauth-protected-resource/mcp", &[], b"");
    assert_eq!(meta.status, 200, "{}", meta.text());
    assert_eq!(meta.json()["resource"], served.as_str());
    // A token for the file's address is for another server.
    let other =
        hs256(&json!({ "sub": "alice", "aud": "http://127.0.0.1:1/mcp", "exp": now() + 600 }));
    let refused = call(&s, Some(&other), "whoami", json!({}));
    assert_eq!(refused.status, 401, "{}", refused.text());
    let challenge = refused.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("another audience")
            && challenge.contains(&format!("127.0.0.1:{port}/.well-known")),
        "{challenge}"
    );
    let log = s.stderr();
    assert!(log.contains("SIGHUP: rescanning"), "{log}");
    assert!(
        !log.contains("`listen` changed"),
        "a false restart warning:\n{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// Call policy reads the verified claims

#[test]
fn call_policy_rules_read_the_verified_jwts_claims_and_nothing_else_supplies_them() {
    let (carol, carol_entry) = secret_for("carol", None, None);
    let policy = "policy:\n\
                  \x20 rules:\n\
                  \x20   - name: echo-for-admins\n\
                  \x20     when: \"tool.name == 'echo' && !(has(caller.claims.roles) && 'admin' in caller.claims.roles)\"\n\
                  \x20     outcome: deny\n\
                  \x20     message: \"echo is for admins\"\n";
    let (_l, s) = start(&Setup {
        secrets: &carol_entry,
        extra: policy,
        ..Setup::default()
    });
    let with_roles = |sub: &str, roles: Value| {
        let mut c = claims(sub);
        c["roles"] = roles;
        c
    };

    // A JWT whose `roles` claim names admin: the rule does not match, the call runs.
    let admin = hs256(&with_roles("alice", json!(["admin", "ops"])));
    let ran = call(&s, Some(&admin), "echo", json!({ "text": "hi" }));
    assert!(ok_result(&ran).to_string().contains("hi"), "{}", ran.text());
    // The same claim through another key and algorithm: the claims come from any verified JWT.
    let rs_admin = rs256(&with_roles("dora", json!(["admin"])));
    ok_result(&call(&s, Some(&rs_admin), "echo", json!({ "text": "hi" })));

    // Other roles, no roles claim, a personal secret (no claims at all): refused by the rule.
    let viewer = hs256(&with_roles("bob", json!(["viewer"])));
    let plain = hs256(&claims("erin"));
    for (who, token) in [
        ("viewer", &viewer),
        ("no roles", &plain),
        ("secret", &carol),
    ] {
        let denied = call(&s, Some(token), "echo", json!({ "text": "hi" }));
        assert!(
            tool_error(&denied).contains("echo is for admins"),
            "{who}: {}",
            denied.text()
        );
    }

    // Claims cannot be supplied any other way: arguments named like them do not make a caller
    // an admin (the call is refused, by the rule or by echo's schema, and never runs).
    let forged = call(
        &s,
        Some(&viewer),
        "echo",
        json!({ "text": "hi", "claims": { "roles": ["admin"] }, "caller": { "claims": { "roles": ["admin"] } } }),
    );
    let body = forged.message();
    assert!(
        body.get("error").is_some() || body["result"]["isError"] == true,
        "a forged claims argument ran the call: {body}"
    );
    // A token whose signature does not check out never gets as far as the rules.
    let mut tampered = admin.clone();
    tampered.push('x');
    let refused = call(&s, Some(&tampered), "echo", json!({ "text": "hi" }));
    assert_eq!(refused.status, 401, "{}", refused.text());
}
