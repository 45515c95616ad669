//! The ways mcp-host obtains a (user, upstream) credential without a consent round trip, end to
//! end with the real components of `upstream_oauth.rs` (the `oidc-provider` authorization server,
//! the Python SDK resource server checking issuer, audience and scope):
//!
//! - token exchange (RFC 8693, `server.auth.mode: token_exchange`): each caller's verified
//!   inbound JWT is exchanged for a token of the upstream — two callers, two identities upstream,
//!   no question asked; a caller signed in with a personal secret (nothing to exchange) is
//!   refused with a reason;
//! - the host's service identity (`mode: client_credentials`, `list_as: service`): one token of
//!   the configured client for every caller, its secret from the environment.
//!
//! Skips without Node 22 + `oidc-provider` or the Python SDK, unless `MCP_TEST_REQUIRE_CLIENTS`.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use mcp_host_tests::Layout;
use mcp_host_tests::fleet::free_port;
use mcp_host_tests::oauth::{EXCHANGER, Provider, ProviderOptions, ResourceServer};
use mcp_host_tests::serve::{HttpServer, host_command};
use serde_json::{Value, json};

use crate::upstream_oauth::{Gateway, identity, whoami};

/// mcp-host's own resource identifier: the audience of callers' inbound tokens.
const HOST: &str = "http://mcp-host.test/mcp";
/// The vault key of these tests (base64 of 32 bytes).
const VAULT_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
/// carol's personal secret (a caller without a JWT).
const CAROL_SECRET: &str = "mcp_carol-has-a-personal-secret-and-no-jwt-0123456789";

/// The provider, the resource server and mcp-host in front of it with upstream `gh` authorized
/// as `auth` says (YAML flow mapping; `ISSUER` stands for the provider's issuer); `None`: skip.
fn start(auth: &str) -> Option<Gateway> {
    start_in(auth, None)
}

/// [`start`], with the fixture-credentials plugin in tool directory `d` when `plugin` (the
/// directory's entry in `tool_dirs`, e.g. `d` or `{path: d, isolation: process}`).
fn start_in(auth: &str, plugin: Option<&str>) -> Option<Gateway> {
    start_with(ProviderOptions::default(), auth, plugin)
}

/// [`start_in`] with the provider configured by `options`.
fn start_with(mut options: ProviderOptions, auth: &str, plugin: Option<&str>) -> Option<Gateway> {
    options.resources.push(HOST.to_owned());
    let mut provider = Provider::start(&options)?;
    let rs = ResourceServer::start(&provider.issuer, &[])?;
    provider.add_resource(&rs.url);
    let layout = Layout::new();
    let dirs = match plugin {
        Some(entry) => {
            layout.install("d", "fixture-credentials", None);
            format!("  - {entry}\n")
        }
        None => String::new(),
    };
    let port = free_port();
    let public = format!("http://127.0.0.1:{port}");
    let audit = layout.dir("audit").join("audit.jsonl");
    let carol = mcp_host::access::auth::hash_secret(CAROL_SECRET);
    let config = layout.config(&format!(
        "tool_dirs:\n\
         \x20 - server: {{url: \"{rs}\", auth: {auth}}}\n\
         \x20   name: gh\n\
         \x20   prefix: gh_\n\
         {dirs}\
         audit_log: \"{audit}\"\n\
         auth:\n\
         \x20 require_auth: true\n\
         \x20 resource: \"{HOST}\"\n\
         \x20 authorization_servers: [\"{issuer}\"]\n\
         \x20 jwt:\n\
         \x20   issuer: \"{issuer}\"\n\
         \x20   jwks_file: \"{jwks}\"\n\
         \x20 secrets:\n\
         \x20   - {{sha256: {carol}, user: carol}}\n\
         upstream_auth:\n\
         \x20 public_url: \"{public}\"\n\
         \x20 vault:\n\
         \x20   keys: [\"{VAULT_KEY}\"]\n",
        rs = rs.url,
        auth = auth.replace("ISSUER", &provider.issuer),
        audit = audit.display(),
        issuer = provider.issuer,
        jwks = provider.jwks_file.display(),
    ));
    let mut cmd: Command = host_command(&config);
    cmd.env("EXCHANGER_SECRET", EXCHANGER.1);
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
    let host = HttpServer::spawn(cmd);
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

/// `server.auth` of a confidential client registered beforehand (the provider's `exchanger`),
/// its secret from the environment, with `extra` keys.
fn client(mode: &str, extra: &str) -> String {
    format!(
        "{{mode: {mode}, client_id: {id}, client_secret: \"${{EXCHANGER_SECRET}}\", \
         issuer: \"ISSUER\"{extra}}}",
        id = EXCHANGER.0
    )
}

/// [`start`] with a client registered beforehand in `mode`.
fn start_with_client(mode: &str, extra: &str) -> Option<Gateway> {
    start(&client(mode, extra))
}

/// A `tools/call` result's text (a tool error's too).
fn text(r: &Value) -> String {
    r.to_string()
}

#[test]
fn token_exchange_gives_each_caller_their_own_identity_upstream_without_consent() {
    let Some(g) = start_with_client("token_exchange", ", list_as: service") else {
        return;
    };
    let alice = g.caller_token("alice");
    let bob = g.caller_token("bob");
    g.wait_for_tool(&alice, "gh_whoami");

    for (token, sub) in [(&alice, "alice"), (&bob, "bob"), (&alice, "alice")] {
        let r = g.call(token, "tools/call", whoami()).message();
        assert_ne!(
            r["result"]["resultType"], "input_required",
            "no consent asked: {r}"
        );
        let seen = identity(&r);
        assert_eq!(seen["sub"], sub, "{seen}");
        assert_eq!(
            seen["aud"],
            json!(g.rs.url),
            "the upstream's audience: {seen}"
        );
        assert_eq!(
            seen["act"],
            json!({"sub": EXCHANGER.0}),
            "exchanged: {seen}"
        );
    }
    let obtained = g.wait_audit("upstream_auth.obtained", Some("bob"));
    assert_eq!(obtained["target"], "gh", "{obtained}");

    // A caller signed in with a personal secret has no token to exchange: refused, with why.
    let r = g.call(CAROL_SECRET, "tools/call", whoami()).message();
    let said = text(&r);
    assert!(
        said.contains("cannot be exchanged") && !said.contains(CAROL_SECRET),
        "{said}"
    );
    assert!(
        !g.host.stderr().contains(&alice),
        "no inbound token in the log"
    );
}

#[test]
fn a_service_identity_serves_every_caller_with_the_hosts_own_token() {
    let Some(g) = start_with_client(
        "client_credentials",
        ", token_endpoint_auth: client_secret_post, scopes: [\"mcp:basic\"]",
    ) else {
        return;
    };
    let alice = g.caller_token("alice");
    let bob = g.caller_token("bob");
    g.wait_for_tool(&alice, "gh_whoami");
    for token in [&alice, &bob, CAROL_SECRET] {
        let r = g.call(token, "tools/call", whoami()).message();
        let seen = identity(&r);
        assert_eq!(seen["sub"], EXCHANGER.0, "the service identity: {seen}");
        assert_eq!(seen["client_id"], EXCHANGER.0, "{seen}");
        assert_eq!(seen["scopes"], json!(["mcp:basic"]), "{seen}");
    }
    let obtained = g.wait_audit("upstream_auth.obtained", Some("@service"));
    assert_eq!(obtained["target"], "gh", "{obtained}");
    let config = std::fs::read_to_string(&g.config).unwrap();
    assert!(
        !config.contains(EXCHANGER.1),
        "the secret came from the environment"
    );
}

/// A plugin's `token_claims` of `provider` as `token`'s caller: its JSON answer, or the error.
fn plugin_claims(g: &Gateway, token: &str, provider: &str) -> Result<Value, String> {
    let params = json!({"name": "token_claims", "arguments": {"provider": provider}});
    let r = g.call(token, "tools/call", params).message();
    let result = &r["result"];
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if result["isError"] == true || result.is_null() {
        return Err(format!("{text}{r}"));
    }
    if result["structuredContent"].is_object() {
        return Ok(result["structuredContent"].clone());
    }
    Ok(serde_json::from_str(&text).unwrap_or_else(|_| panic!("{r}")))
}

#[test]
fn a_plugin_gets_the_calling_users_own_token_for_a_provider_it_declares() {
    let Some(g) = start_in(&client("token_exchange", ", list_as: service"), Some("d")) else {
        return;
    };
    let alice = g.caller_token("alice");
    let bob = g.caller_token("bob");
    g.wait_for_tool(&alice, "token_claims");
    for (token, sub) in [(&alice, "alice"), (&bob, "bob")] {
        let claims = plugin_claims(&g, token, "gh").unwrap();
        assert_eq!(claims["sub"], sub, "the caller's own token: {claims}");
        assert_eq!(
            claims["aud"],
            json!(g.rs.url),
            "the provider's audience: {claims}"
        );
        assert_eq!(claims["act"], json!({"sub": EXCHANGER.0}), "{claims}");
        assert_eq!(claims["token_type"], "Bearer", "{claims}");
        assert_eq!(claims["debug_hides_it"], true, "{claims}");
    }
    // A provider the plugin does not declare is refused, whatever the host has.
    let refused = plugin_claims(&g, &alice, "other").unwrap_err();
    assert!(refused.contains("NotDeclared"), "{refused}");
    // A caller without a JWT has nothing to exchange: unavailable, with why.
    let refused = plugin_claims(&g, CAROL_SECRET, "gh").unwrap_err();
    assert!(
        refused.contains("Unavailable") && refused.contains("exchange"),
        "{refused}"
    );
    let audited = g.wait_audit("plugin_credential", Some("bob"));
    assert_eq!(audited["target"], "gh", "{audited}");
    // `mcp-host check` shows the declaration.
    let file = std::fs::read_dir(g._layout.dir("d"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "so"))
        .unwrap();
    let out = host_command(&g.config)
        .env("EXCHANGER_SECRET", EXCHANGER.1)
        .args(["check", &file.display().to_string(), "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        report["manifest"]["permissions"]["credentials"],
        json!(["gh"]),
        "{report}"
    );
}

#[test]
fn the_service_identity_obtains_a_new_token_when_its_own_runs_out() {
    let options = ProviderOptions {
        access_token_ttl: Some(4),
        ..ProviderOptions::default()
    };
    let Some(g) = start_with(options, &client("client_credentials", ""), None) else {
        return;
    };
    // Every token lives 4 s (callers' too: each call signs in afresh). Calls go on until the
    // host has obtained the service's token at least twice; every one of them is served.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut served, mut obtained) = (0, 0);
    while obtained < 2 || served < 3 {
        let r = g
            .call(&g.caller_token("alice"), "tools/call", whoami())
            .message();
        if r["result"]["isError"] == false {
            assert_eq!(identity(&r)["sub"], EXCHANGER.0, "{r}");
            served += 1;
        } else {
            // Only before the upstream is listed (its tools not served yet).
            assert!(
                served == 0,
                "a call failed once served: {r}\n{}",
                g.host.stderr()
            );
        }
        obtained = g
            .audit_records()
            .iter()
            .map(Value::to_string)
            .filter(|a| a.contains("\"upstream_auth.obtained\"") && a.contains("\"@service\""))
            .count();
        assert!(
            Instant::now() < deadline,
            "obtained {obtained} times, served {served}: {}",
            g.host.stderr()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_plugin_in_a_worker_process_gets_its_callers_token_over_its_pipe() {
    let auth = client("token_exchange", ", list_as: service");
    let Some(g) = start_in(&auth, Some("{path: d, isolation: process}")) else {
        return;
    };
    let (alice, bob) = (g.caller_token("alice"), g.caller_token("bob"));
    g.wait_for_tool(&alice, "token_claims");
    for (token, sub) in [(&bob, "bob"), (&alice, "alice")] {
        let claims = plugin_claims(&g, token, "gh").unwrap();
        assert_eq!(claims["sub"], sub, "the caller's own token: {claims}");
    }
    let refused = plugin_claims(&g, &alice, "other").unwrap_err();
    assert!(refused.contains("NotDeclared"), "{refused}");
}
