//! The OAuth fixtures proven together, before mcp-host takes part: a real OpenID provider
//! (`oidc-provider`, tests/fixtures/oidc/provider.mjs) as the authorization server of a real MCP
//! resource server that checks audience and scope (tests/fixtures/upstream/oauth_resource.py on
//! the Python SDK), driven from Rust through the headless browser of `mcp_host_tests::oauth`:
//! authorization code + PKCE + resource indicator, a token for another audience refused,
//! `insufficient_scope` and step-up, refresh with rotation, revocation seen by introspection,
//! token exchange (RFC 8693), client credentials, and the provider's JWKS file verifying its
//! tokens the way mcp-host's `auth.jwt.jwks_file` does.
//!
//! The gateway's OAuth end-to-end tests extend these. They skip without Node 22 + `oidc-provider`
//! or the Python SDK (`.ci/install-clients.sh`), unless `MCP_TEST_REQUIRE_CLIENTS` is set.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, jwk::JwkSet};
use mcp_host_tests::Layout;
use mcp_host_tests::oauth::{
    Browser, ClientAuth, EXCHANGER, Pkce, Provider, ProviderOptions, ResourceServer, TESTER,
    TOKEN_EXCHANGE, Tokens, get, jwt_claims, query_params, random_string,
};
use mcp_host_tests::serve::HttpServer;
use serde_json::{Value, json};

/// A resource the provider knows that is not the resource server (another audience).
const OTHER: &str = "http://127.0.0.1:9/other-mcp";
/// mcp-host's own resource identifier (`auth.resource`) in these tests: the audience of callers'
/// inbound tokens.
const HOST: &str = "http://mcp-host.test/mcp";

/// The provider (with [`OTHER`] and [`HOST`] as resources) and a resource server registered with
/// it, or `None` (skip).
fn start(options: ProviderOptions) -> Option<(Provider, ResourceServer)> {
    let mut options = options;
    options
        .resources
        .extend([OTHER.to_owned(), HOST.to_owned()]);
    let mut provider = Provider::start(&options)?;
    let rs = ResourceServer::start(&provider.issuer, &[])?;
    provider.add_resource(&rs.url);
    Some((provider, rs))
}

/// `whoami` with `token`: its JSON answer (`sub`, `scopes`, `client_id`, `aud`, `act`).
fn whoami(rs: &ResourceServer, token: &str) -> Value {
    let result = rs
        .call_tool(token, "whoami", json!({}))
        .unwrap_or_else(|r| panic!("whoami refused: {r:?}\n{}", rs.stderr()));
    assert_eq!(result["isError"], false, "{result}");
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// The `WWW-Authenticate` of a refusal.
fn challenge(refusal: &mcp_host_tests::serve::HttpResponse) -> String {
    refusal
        .header("www-authenticate")
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_registered_client_gets_a_token_for_alice_and_the_upstream_sees_alice() {
    let Some((provider, rs)) = start(ProviderOptions::default()) else {
        return;
    };
    // Discovery, as a client does it: 401 → protected-resource metadata → the AS's metadata.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}});
    let refusal = rs.post(None, None, &init);
    assert_eq!(refusal.status, 401, "{}", refusal.text());
    let www = challenge(&refusal);
    assert!(
        www.contains(&format!("resource_metadata=\"{}\"", rs.metadata_url)),
        "{www}"
    );
    assert!(www.contains("scope=\"mcp:basic\""), "{www}");
    let prm = get(&rs.metadata_url).json();
    assert_eq!(prm["resource"], rs.url.as_str(), "{prm}");
    assert_eq!(
        prm["authorization_servers"],
        json!([provider.issuer]),
        "{prm}"
    );
    assert_eq!(
        prm["scopes_supported"],
        json!(["mcp:basic", "mcp:write"]),
        "{prm}"
    );
    let meta = provider.metadata();
    assert_eq!(meta["issuer"], provider.issuer.as_str());
    assert_eq!(meta["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(meta["authorization_response_iss_parameter_supported"], true);
    for grant in [
        "authorization_code",
        "refresh_token",
        "client_credentials",
        TOKEN_EXCHANGE,
    ] {
        assert!(
            meta["grant_types_supported"]
                .as_array()
                .unwrap()
                .contains(&json!(grant))
        );
    }

    // Dynamic client registration (RFC 7591), as mcp-host's `connect` registers: a public native
    // client with a loopback redirect URI.
    let redirect = "http://127.0.0.1:49152/oauth/callback";
    let registration = json!({"redirect_uris": [redirect], "application_type": "native",
        "token_endpoint_auth_method": "none", "grant_types": ["authorization_code", "refresh_token"],
        "client_name": "mcp-host-tests"});
    let r = mcp_host_tests::oauth::request(
        meta["registration_endpoint"].as_str().unwrap(),
        "POST",
        &[("Content-Type".into(), "application/json".into())],
        registration.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let client_id = r.json()["client_id"].as_str().unwrap().to_owned();

    // Authorization code + PKCE + resource indicator, alice signing in and consenting.
    let (pkce, state) = (Pkce::new(), random_string());
    let url = provider.authorization_url(&[
        ("client_id", &client_id),
        ("redirect_uri", redirect),
        ("scope", "mcp:basic"),
        ("resource", &rs.url),
        ("state", &state),
        ("code_challenge", &pkce.challenge),
    ]);
    let back = Browser::new().authorize(&url, "alice", redirect);
    let params = query_params(&back);
    assert_eq!(params.get("state"), Some(&state), "{back}");
    assert_eq!(
        params.get("iss"),
        Some(&provider.issuer),
        "RFC 9207 iss: {back}"
    );
    let code = params["code"].clone();
    let exchange = |verifier: &str| {
        provider.token(
            &[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", redirect),
                ("code_verifier", verifier),
                ("resource", &rs.url),
            ],
            ClientAuth::Public(&client_id),
        )
    };
    // A wrong verifier is refused (PKCE); the right one gets the tokens; the code replayed is
    // refused and revokes what it gave (RFC 6749 §4.1.2).
    let (status, body) = exchange(&Pkce::new().verifier);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    let (status, body) = exchange(&pkce.verifier);
    assert_eq!(status, 200, "{body}");
    let replayed = Tokens::from(body);
    let (status, body) = exchange(&pkce.verifier);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    let revoked = provider.introspect(replayed.refresh_token.as_deref().unwrap());
    assert_eq!(revoked["active"], false, "{revoked}");

    // Again, properly: a JWT access token for the resource server, naming alice.
    let tokens = authorize_as(
        &provider,
        &client_id,
        redirect,
        &rs.url,
        "alice",
        "mcp:basic",
    );
    let claims = jwt_claims(&tokens.access_token);
    assert_eq!(claims["sub"], "alice", "{claims}");
    assert_eq!(claims["aud"], rs.url.as_str(), "{claims}");
    assert_eq!(claims["iss"], provider.issuer.as_str(), "{claims}");
    assert_eq!(claims["scope"], "mcp:basic", "{claims}");
    assert_eq!(claims["client_id"], client_id.as_str(), "{claims}");
    assert!(tokens.refresh_token.is_some(), "{}", tokens.response);
    let me = whoami(&rs, &tokens.access_token);
    assert_eq!(me["sub"], "alice", "{me}");
    assert_eq!(me["scopes"], json!(["mcp:basic"]), "{me}");

    // Bob, through his own browser, is bob upstream.
    let bob = provider.user_tokens("bob", &rs.url, "mcp:basic");
    assert_eq!(whoami(&rs, &bob.access_token)["sub"], "bob");
}

/// The authorization-code + PKCE flow for `client_id` as `user` (a fresh browser).
fn authorize_as(
    provider: &Provider,
    client_id: &str,
    redirect: &str,
    resource: &str,
    user: &str,
    scope: &str,
) -> Tokens {
    let (pkce, state) = (Pkce::new(), random_string());
    let url = provider.authorization_url(&[
        ("client_id", client_id),
        ("redirect_uri", redirect),
        ("scope", scope),
        ("resource", resource),
        ("state", &state),
        ("code_challenge", &pkce.challenge),
    ]);
    let back = Browser::new().authorize(&url, user, redirect);
    let params = query_params(&back);
    let (status, body) = provider.token(
        &[
            ("grant_type", "authorization_code"),
            ("code", &params["code"]),
            ("redirect_uri", redirect),
            ("code_verifier", &pkce.verifier),
            ("resource", resource),
        ],
        ClientAuth::Public(client_id),
    );
    assert_eq!(status, 200, "{body}");
    Tokens::from(body)
}

#[test]
fn a_token_for_another_audience_is_refused_by_the_resource_server() {
    let Some((provider, rs)) = start(ProviderOptions::default()) else {
        return;
    };
    let elsewhere = provider.user_tokens("alice", OTHER, "mcp:basic");
    assert_eq!(jwt_claims(&elsewhere.access_token)["aud"], OTHER);
    let refusal = rs
        .call_tool(&elsewhere.access_token, "whoami", json!({}))
        .expect_err("a token for another resource was accepted");
    assert_eq!(refusal.status, 401, "{}", refusal.text());
    assert!(challenge(&refusal).contains("invalid_token"), "{refusal:?}");
    assert!(rs.logged("InvalidAudienceError"), "{}", rs.stderr());

    // A resource the provider does not know gets no token at all.
    let pkce = Pkce::new();
    let url = provider.authorization_url(&[
        ("client_id", TESTER),
        ("redirect_uri", mcp_host_tests::oauth::TESTER_REDIRECT),
        ("scope", "mcp:basic"),
        ("resource", "http://127.0.0.1:9/unknown"),
        ("state", "s"),
        ("code_challenge", &pkce.challenge),
    ]);
    let back = Browser::new().authorize(&url, "alice", mcp_host_tests::oauth::TESTER_REDIRECT);
    assert_eq!(
        query_params(&back).get("error").map(String::as_str),
        Some("invalid_target")
    );
}

#[test]
fn write_without_the_write_scope_is_403_insufficient_scope_and_step_up_grants_it() {
    let Some((provider, rs)) = start(ProviderOptions::default()) else {
        return;
    };
    let basic = provider.user_tokens("alice", &rs.url, "mcp:basic");
    let refusal = rs
        .call_tool(&basic.access_token, "write", json!({"text": "x"}))
        .expect_err("write without mcp:write was allowed");
    assert_eq!(refusal.status, 403, "{}", refusal.text());
    let www = challenge(&refusal);
    assert!(www.contains("error=\"insufficient_scope\""), "{www}");
    assert!(www.contains("scope=\"mcp:write\""), "{www}");
    assert!(
        www.contains(&format!("resource_metadata=\"{}\"", rs.metadata_url)),
        "{www}"
    );

    // Step-up: a new authorization with the union of the scopes (SEP-2350).
    let both = provider.user_tokens("alice", &rs.url, "mcp:basic mcp:write");
    let result = rs
        .call_tool(&both.access_token, "write", json!({"text": "x"}))
        .unwrap_or_else(|r| panic!("write refused: {r:?}"));
    assert_eq!(result["content"][0]["text"], "alice wrote x", "{result}");
}

#[test]
fn refresh_rotates_and_revocation_makes_the_grant_inactive() {
    let Some((provider, rs)) = start(ProviderOptions::default()) else {
        return;
    };
    let first = provider.user_tokens("alice", &rs.url, "mcp:basic");
    let refresh = |token: &str| {
        provider.token(
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", token),
                ("resource", &rs.url),
            ],
            ClientAuth::Public(TESTER),
        )
    };
    let old = first.refresh_token.clone().unwrap();
    let (status, body) = refresh(&old);
    assert_eq!(status, 200, "{body}");
    let second = Tokens::from(body);
    let new = second.refresh_token.clone().unwrap();
    assert_ne!(new, old, "a public client's refresh token rotates");
    assert_ne!(second.access_token, first.access_token);
    assert_eq!(jwt_claims(&second.access_token)["aud"], rs.url.as_str());
    assert_eq!(whoami(&rs, &second.access_token)["sub"], "alice");
    assert_eq!(provider.introspect(&new)["active"], true);
    assert_eq!(provider.introspect(&new)["sub"], "alice");

    // RFC 7009: the refresh token revoked, its grant is gone.
    let r = provider.revoke(&new, ClientAuth::Public(TESTER));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(provider.introspect(&new)["active"], false);
    let (status, body) = refresh(&new);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );
    // A JWT access token cannot be revoked at the endpoint (stateless: it lives until `exp`).
    let r = provider.revoke(&second.access_token, ClientAuth::Public(TESTER));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"], "unsupported_token_type");
}

#[test]
fn token_exchange_and_client_credentials_reach_the_upstream_and_the_jwks_file_verifies() {
    let Some((provider, rs)) = start(ProviderOptions::default()) else {
        return;
    };
    // An inbound token for mcp-host (audience HOST), verified with the JWKS file the way
    // mcp-host's `auth.jwt.jwks_file` does (jsonwebtoken, RS256, iss, aud).
    let inbound = provider.user_tokens("alice", HOST, "mcp:basic");
    let jwks: JwkSet =
        serde_json::from_slice(&std::fs::read(&provider.jwks_file).unwrap()).unwrap();
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_audience(&[HOST]);
    validation.set_issuer(&[provider.issuer.as_str()]);
    let key = DecodingKey::from_jwk(&jwks.keys[0]).unwrap();
    let verified = decode::<Value>(&inbound.access_token, &key, &validation).unwrap();
    assert_eq!(verified.claims["sub"], "alice");

    // RFC 8693: exchanged for a token of the resource server, no consent round trip.
    let (id, secret) = EXCHANGER;
    let (status, body) = provider.token(
        &[
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", &inbound.access_token),
            ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
            ("resource", &rs.url),
        ],
        ClientAuth::Basic(id, secret),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["issued_token_type"],
        "urn:ietf:params:oauth:token-type:access_token"
    );
    let me = whoami(&rs, body["access_token"].as_str().unwrap());
    assert_eq!(me["sub"], "alice", "{me}");
    assert_eq!(me["act"], json!({"sub": "exchanger"}), "{me}");
    assert_eq!(
        me["scopes"],
        json!(["mcp:basic"]),
        "the subject token's scopes: {me}"
    );
    // A subject token that is not the provider's is refused.
    let forged = format!("{}x", inbound.access_token);
    let (status, body) = provider.token(
        &[
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", &forged),
            ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
            ("resource", &rs.url),
        ],
        ClientAuth::Basic(id, secret),
    );
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_grant")),
        "{body}"
    );

    // client_credentials: the service identity is the client.
    let (status, body) = provider.token(
        &[
            ("grant_type", "client_credentials"),
            ("resource", &rs.url),
            ("scope", "mcp:basic"),
        ],
        ClientAuth::Basic(id, secret),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        whoami(&rs, body["access_token"].as_str().unwrap())["sub"],
        "exchanger"
    );
}

#[test]
fn a_short_lived_access_token_expires_at_the_upstream_and_a_refreshed_one_is_accepted() {
    let options = ProviderOptions {
        access_token_ttl: Some(2),
        ..ProviderOptions::default()
    };
    let Some((provider, rs)) = start(options) else {
        return;
    };
    let tokens = provider.user_tokens("alice", &rs.url, "mcp:basic");
    assert_eq!(tokens.response["expires_in"], 2, "{}", tokens.response);
    let claims = jwt_claims(&tokens.access_token);
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        2
    );
    // Wait for the upstream to refuse it once its `exp` passed (an event, not a guessed sleep;
    // whether it was still accepted first depends on how loaded the machine is).
    let deadline = Instant::now() + Duration::from_secs(60);
    let refusal = loop {
        match rs.call_tool(&tokens.access_token, "whoami", json!({})) {
            Err(r) => break r,
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Ok(_) => panic!("the expired token is still accepted after 60 s"),
        }
    };
    assert_eq!(refusal.status, 401, "{}", refusal.text());
    assert!(rs.logged("ExpiredSignatureError"), "{}", rs.stderr());
    // Refreshed (without `resource`: the granted one is used, `useGrantedResource`), the token is
    // accepted again. Each refreshed token lives 2 s too, so on a slow machine one may expire
    // before its call: refresh again (the rotated refresh token) until a call gets through.
    let mut refresh_token = tokens.refresh_token.unwrap();
    loop {
        let (status, body) = provider.token(
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", &refresh_token),
            ],
            ClientAuth::Public(TESTER),
        );
        assert_eq!(status, 200, "{body}");
        let refreshed = Tokens::from(body);
        let claims = jwt_claims(&refreshed.access_token);
        assert_eq!(
            (&claims["aud"], &claims["sub"]),
            (&json!(rs.url), &json!("alice"))
        );
        refresh_token = refreshed.refresh_token.unwrap();
        match rs.call_tool(&refreshed.access_token, "whoami", json!({})) {
            Ok(result) => {
                let me: Value =
                    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
                assert_eq!(me["sub"], "alice", "{me}");
                break;
            }
            Err(r) if r.status == 401 && Instant::now() < deadline => {}
            Err(r) => panic!("the refreshed token is refused: {r:?}\n{}", rs.stderr()),
        }
    }
}

#[test]
fn mcp_host_verifies_the_providers_tokens_with_its_jwks_file() {
    let options = ProviderOptions {
        resources: vec![HOST.to_owned(), OTHER.to_owned()],
        ..ProviderOptions::default()
    };
    let Some(provider) = Provider::start(&options) else {
        return;
    };
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config(&format!(
        "tool_dirs: [d]\n\
         auth:\n\
         \x20 require_auth: true\n\
         \x20 resource: \"{HOST}\"\n\
         \x20 authorization_servers: [\"{issuer}\"]\n\
         \x20 jwt:\n\
         \x20   issuer: \"{issuer}\"\n\
         \x20   jwks_file: \"{jwks}\"\n",
        issuer = provider.issuer,
        jwks = provider.jwks_file.display(),
    ));
    let host = HttpServer::start(&cfg);
    let whoami = |token: &str| {
        host.modern_at(
            "/mcp",
            Some(token),
            "tools/call",
            json!({"name": "whoami", "arguments": {}}),
        )
    };
    let alice = provider.user_tokens("alice", HOST, "mcp:basic");
    let r = whoami(&alice.access_token);
    assert_eq!(r.status, 200, "{}\n{}", r.text(), host.stderr());
    assert_eq!(
        r.message()["result"]["structuredContent"]["user_id"],
        "alice",
        "{}",
        r.text()
    );
    // A token of the same provider for another audience is not a token for the host.
    let elsewhere = provider.user_tokens("bob", OTHER, "mcp:basic");
    let r = whoami(&elsewhere.access_token);
    assert_eq!(r.status, 401, "{}", r.text());
}
