//! Issue 52, stage 4's gaps, against a real `mcp-host serve`, a real OpenID provider and a real
//! resource server (`crate::upstream_oauth::Gateway`): credentials revoked at the provider and
//! deleted when the upstream's identity changes in the configuration; a client without URL
//! elicitation told the connect link in a tool error; a due token refreshed in the background
//! without a call; two replicas on a shared Redis vault racing refreshes without spending a
//! refresh token twice.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use mcp_host_tests::fleet::free_port;
use mcp_host_tests::oauth::{Browser, ProviderOptions};
use mcp_host_tests::serve::{HttpResponse, modern_headers, notification, request, with_meta};
use serde_json::{Value, json};

use crate::upstream_oauth::{Gateway, consent_and_call, identity, wait_for_tool_at, whoami};

/// Wait until the provider has revoked `n` grants (its `EVENT grant.revoked` lines).
fn wait_revoked_grants(g: &Gateway, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while g.provider.stderr().matches("EVENT grant.revoked").count() < n {
        assert!(
            Instant::now() < deadline,
            "the provider revoked fewer than {n} grants:\n{}\nhost:\n{}",
            g.provider.stderr(),
            g.host.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The audit records of `action` naming `caller`.
fn audited(g: &Gateway, action: &str, caller: &str) -> Vec<Value> {
    g.audit_records()
        .into_iter()
        .filter(|r| r.to_string().contains(&format!("\"{action}\"")))
        .filter(|r| r.to_string().contains(&format!("\"{caller}\"")))
        .collect()
}

#[test]
fn a_changed_upstream_identity_revokes_and_deletes_its_credentials_at_reload() {
    let Some(g) = Gateway::start(&[], "") else {
        return;
    };
    g.connect_operator("operator-at-gh");
    let alice = g.caller_token("alice");
    g.wait_for_tool(&alice, "gh_whoami");
    let seen = consent_and_call(&g, &alice, "alice-at-gh");
    assert_eq!(seen["sub"], "alice-at-gh", "{seen}");
    assert!(!g.provider.stderr().contains("EVENT grant.revoked"));

    // The operator configures the upstream's scopes: another identity (the digest of its URL
    // and authorization settings). The reload revokes the operator's and alice's grants at the
    // provider and deletes both rows.
    let config = std::fs::read_to_string(&g.config).unwrap();
    let changed = config.replace(
        "auth: {mode: oauth}",
        "auth: {mode: oauth, scopes: [\"mcp:basic\"]}",
    );
    assert_ne!(config, changed, "the test's configuration changed shape");
    std::fs::write(&g.config, changed).unwrap();
    wait_revoked_grants(&g, 2);
    let deadline = Instant::now() + Duration::from_secs(60);
    while audited(&g, "upstream_auth.revoked", "alice").is_empty() {
        assert!(Instant::now() < deadline, "{:?}", g.audit_records());
        std::thread::sleep(Duration::from_millis(200));
    }
    let record = audited(&g, "upstream_auth.revoked", "alice").remove(0);
    let text = record.to_string();
    assert!(text.contains("identity changed"), "{record}");
    assert!(
        text.contains("revoked at the authorization server"),
        "{record}"
    );
    assert_eq!(record["target"], "gh", "{record}");
    // Waits: the sweep logs its count after the last row it deletes, which may not be alice's.
    assert!(
        g.host.logged("Upstream credentials: 2 revoked and deleted"),
        "{}",
        g.host.stderr()
    );
    let listed = crate::upstream_oauth::host_output(&g, &["vault", "list"]);
    assert!(!listed.contains("alice"), "{listed}");
}

/// A raw JSON-RPC POST to the host's `/mcp` as `token`'s caller on a 2025-11-25 session
/// (`session`: its id, once initialized).
fn post_2025(g: &Gateway, token: &str, session: Option<&str>, body: &Value) -> HttpResponse {
    let mut headers: Vec<(String, String)> = vec![
        ("Authorization".into(), format!("Bearer {token}")),
        ("Content-Type".into(), "application/json".into()),
        (
            "Accept".into(),
            "application/json, text/event-stream".into(),
        ),
    ];
    if let Some(id) = session {
        headers.push(("Mcp-Session-Id".into(), id.to_owned()));
        headers.push(("MCP-Protocol-Version".into(), "2025-11-25".into()));
    }
    mcp_host_tests::oauth::request(
        &format!("{}/mcp", g.public),
        "POST",
        &headers,
        body.to_string().as_bytes(),
    )
}

/// Open a 2025-11-25 session as `token`'s caller declaring no capability at all (no
/// elicitation): its id.
fn session_2025(g: &Gateway, token: &str) -> String {
    let init = request(
        1,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw-json-rpc", "version": "0"},
        }),
    );
    let r = post_2025(g, token, None, &init);
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session id: {r:?}"))
        .to_owned();
    let done = post_2025(
        g,
        token,
        Some(&id),
        &notification("notifications/initialized", json!({})),
    );
    assert!(done.status < 300, "{}", done.text());
    id
}

/// The consent link a tool error `r` names: `<public>/oauth/connect/<flow>`.
fn link_in_error(g: &Gateway, r: &Value) -> String {
    assert_eq!(r["result"]["isError"], true, "not a tool error: {r}");
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let start = format!("{}/oauth/connect/", g.public);
    let at = text
        .find(&start)
        .unwrap_or_else(|| panic!("the error names no connect link: {r}"));
    text[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches(['.', ','])
        .to_owned()
}

#[test]
fn a_client_without_url_elicitation_gets_a_tool_error_naming_the_connect_link() {
    let Some(g) = Gateway::start(&[], "") else {
        return;
    };
    g.connect_operator("operator-at-gh");
    let alice = g.caller_token("alice");
    let bob = g.caller_token("bob");
    g.wait_for_tool(&alice, "gh_whoami");

    // 2025-11-25, raw JSON-RPC over HTTP, no elicitation capability: a tool error with the link
    // (no elicitation/create on the stream, no -32042).
    let session = session_2025(&g, &alice);
    let call = request(2, "tools/call", whoami());
    let first = post_2025(&g, &alice, Some(&session), &call);
    let events = first.events();
    assert!(
        !first.text().contains("elicitation/create"),
        "a client without elicitation was sent one: {events:?}"
    );
    let url = link_in_error(&g, &first.message());
    let mut browser = Browser::new();
    let page = g.follow_link(&mut browser, &url, &alice, "alice-at-gh");
    assert!(page.text().contains("connected"), "{}", page.text());
    let again = post_2025(
        &g,
        &alice,
        Some(&session),
        &request(3, "tools/call", whoami()),
    );
    assert_eq!(identity(&again.message())["sub"], "alice-at-gh");

    // 2026-07-28 without `elicitation.url` in its client capabilities: the same.
    let params = with_meta(whoami());
    let headers: Vec<(String, String)> = modern_headers("tools/call", Some("gh_whoami"))
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .chain([
            ("Authorization".to_owned(), format!("Bearer {bob}")),
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "Accept".to_owned(),
                "application/json, text/event-stream".to_owned(),
            ),
        ])
        .collect();
    let body = request(1, "tools/call", params).to_string();
    let r = mcp_host_tests::oauth::request(
        &format!("{}/mcp", g.public),
        "POST",
        &headers,
        body.as_bytes(),
    )
    .message();
    assert_ne!(r["result"]["resultType"], "input_required", "{r}");
    let url = link_in_error(&g, &r);
    let mut browser = Browser::new();
    let page = g.follow_link(&mut browser, &url, &bob, "bob-at-gh");
    assert!(page.text().contains("connected"), "{}", page.text());
}

#[test]
fn a_due_token_is_refreshed_in_the_background_before_any_call_needs_it() {
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
    let first = seen["token"].as_str().unwrap().to_owned();
    // No call of alice's from now on: her 4 s token is refreshed by the background refresher.
    let deadline = Instant::now() + Duration::from_secs(60);
    while audited(&g, "upstream_auth.refreshed", "alice").is_empty() {
        assert!(
            Instant::now() < deadline,
            "alice's token was not refreshed without a call: {:?}\n{}",
            g.audit_records(),
            g.host.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Her next call carries a token the refresher obtained.
    let r = g.call(&alice, "tools/call", whoami()).message();
    let now = identity(&r);
    assert_eq!(now["sub"], "alice-at-gh", "{r}");
    assert_ne!(now["token"].as_str().unwrap(), first, "{r}");
}

#[test]
fn two_replicas_racing_refreshes_on_the_shared_redis_vault_never_spend_a_refresh_token_twice() {
    let Some(redis_bin) = mcp_host_tests::fleet::redis_server() else {
        return;
    };
    // 4 s access tokens; the provider rotates refresh tokens (public client), and a consumed one
    // presented again revokes the whole grant (`EVENT grant.revoked`).
    let options = ProviderOptions {
        access_token_ttl: Some(4),
        ..ProviderOptions::default()
    };
    let Some((provider, rs)) = Gateway::upstream(options, &["--echo-token"]) else {
        return;
    };
    let redis = mcp_host_tests::fleet::Redis::start(&redis_bin);
    let ports = [free_port(), free_port()];
    let public = format!("http://127.0.0.1:{}", ports[0]);
    let (g, r2) = Gateway::replicas(provider, rs, &redis, ports, public);
    let alice = g.caller_token("alice");
    let bases: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    for base in &bases {
        wait_for_tool_at(base, &alice, "gh_whoami", &|| {
            format!("r1:\n{}\nr2:\n{}", g.host.stderr(), r2.stderr())
        });
    }
    let seen = consent_and_call(&g, &alice, "alice-at-gh");
    assert_eq!(seen["sub"], "alice-at-gh");
    // Both replicas call as alice at once, round after round, across several expiries of her
    // token (each replica's background refresher racing too): every call is served as alice.
    let mut tokens = std::collections::BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let answers: Vec<Value> = std::thread::scope(|s| {
            let calls: Vec<_> = bases
                .iter()
                .map(|base| {
                    let alice = &alice;
                    s.spawn(move || {
                        crate::upstream_oauth::call_at(base, alice, "tools/call", whoami())
                            .message()
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        for m in answers {
            let served = m["result"]["structuredContent"].is_object()
                || m["result"]["content"][0]["text"].is_string();
            assert!(
                served && m["result"]["isError"] != true,
                "a call was not served as alice (her grant revoked?): {m}\nprovider:\n{}",
                g.provider.stderr()
            );
            let who = identity(&m);
            assert_eq!(
                who["sub"],
                "alice-at-gh",
                "{m}\nr1:\n{}\nr2:\n{}",
                g.host.stderr(),
                r2.stderr()
            );
            tokens.insert(who["token"].as_str().unwrap_or_default().to_owned());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(tokens.len() > 1, "no refresh happened: {tokens:?}");
    assert!(
        !audited(&g, "upstream_auth.refreshed", "alice").is_empty(),
        "{:?}",
        g.audit_records()
    );
    // No refresh token was presented twice (the grant would have been revoked), and no refresh
    // failed on either replica.
    assert!(
        !g.provider.stderr().contains("EVENT grant.revoked"),
        "{}",
        g.provider.stderr()
    );
    assert!(
        audited(&g, "upstream_auth.refresh_failed", "alice").is_empty(),
        "{:?}",
        g.audit_records()
    );
}

#[test]
fn a_removed_mcp_host_secret_revokes_and_deletes_its_users_credentials_at_reload() {
    use sha2::Digest as _;
    let Some(g) = Gateway::start(&[], "") else {
        return;
    };
    g.connect_operator("operator-at-gh");
    // Carol signs in to mcp-host with a personal secret (added to the configuration: a reload).
    let secret = "mcp_carol-personal-secret-0123456789abcdef";
    let hash: String = sha2::Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let entry = format!("  secrets:\n    - {{sha256: \"{hash}\", user: carol}}\n");
    let config = std::fs::read_to_string(&g.config).unwrap();
    let with = config.replace(
        "  require_auth: true\n",
        &format!("  require_auth: true\n{entry}"),
    );
    assert_ne!(config, with, "the test's configuration changed shape");
    std::fs::write(&g.config, &with).unwrap();
    g.wait_for_tool(secret, "gh_whoami");
    let seen = consent_and_call(&g, secret, "carol-at-gh");
    assert_eq!(seen["sub"], "carol-at-gh", "{seen}");
    assert!(!g.provider.stderr().contains("EVENT grant.revoked"));

    // Her secret is removed: her grant is revoked at the provider, her row deleted, audited.
    std::fs::write(&g.config, &config).unwrap();
    wait_revoked_grants(&g, 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while audited(&g, "upstream_auth.revoked", "carol").is_empty() {
        assert!(Instant::now() < deadline, "{:?}", g.audit_records());
        std::thread::sleep(Duration::from_millis(200));
    }
    let record = audited(&g, "upstream_auth.revoked", "carol").remove(0);
    assert!(
        record.to_string().contains("secret was removed"),
        "{record}"
    );
    assert!(
        record
            .to_string()
            .contains("revoked at the authorization server"),
        "{record}"
    );
    let listed = crate::upstream_oauth::host_output(&g, &["vault", "list"]);
    assert!(!listed.contains("carol"), "{listed}");
    // The operator's connection stays.
    assert!(listed.contains("@operator"), "{listed}");
}
