//! Issue 52: attacks on the host's OAuth client of users' upstreams (`server.auth`), against a
//! real `mcp-host serve`, a real OpenID provider and a real resource server
//! (`crate::upstream_oauth::Gateway`), or the hostile fixture's `oauth_issuer_mismatch` mode:
//! a forged state, a replayed callback, a code of another authorization (PKCE), a consent link
//! followed or completed by another user, a wrong `iss`, an authorization server whose metadata
//! names another issuer, a callback that would cross a network in clear. Each is refused, and
//! audited where a request reached the host.

use std::time::{Duration, Instant};

use mcp_host_tests::Layout;
use mcp_host_tests::oauth::{Browser, query_params};
use mcp_host_tests::serve::HttpServer;
use serde_json::Value;

use crate::upstream_oauth::{Gateway, consent_question, identity, retry, whoami};

/// Start the gateway with the operator connected; `None`: skip.
fn gateway() -> Option<Gateway> {
    let g = Gateway::start(&[], "")?;
    g.connect_operator("operator-at-gh");
    let alice = g.caller_token("alice");
    g.wait_for_tool(&alice, "gh_whoami");
    Some(g)
}

/// A consent link for `token`'s caller (their first call's question), with that call's answer.
fn link(g: &Gateway, token: &str) -> (String, String, Value) {
    let first = g.call(token, "tools/call", whoami()).message();
    let (key, url) = consent_question(&first);
    (key, url, first)
}

/// `url` with query parameter `name` set to `value`.
fn with_param(url: &str, name: &str, value: &str) -> String {
    let mut u = url::Url::parse(url).unwrap();
    let pairs: Vec<(String, String)> = u
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .filter(|(k, _)| k != name)
        .collect();
    u.query_pairs_mut()
        .clear()
        .extend_pairs(pairs)
        .append_pair(name, value);
    u.to_string()
}

/// Whether the host refused the callback at `url` (delivered by `browser`) with a 400 page.
fn refused(browser: &mut Browser, url: &str) -> String {
    let r = browser.send(url, "GET", &[]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("Not connected"), "{}", r.text());
    r.text()
}

#[test]
fn a_forged_state_and_a_replayed_callback_are_refused_and_audited() {
    let Some(g) = gateway() else { return };
    let alice = g.caller_token("alice");
    let (key, url, first) = link(&g, &alice);
    let mut browser = Browser::new();
    let back = g.pending_callback(&mut browser, &url, &alice, "alice-at-gh");
    // A state the host never issued.
    refused(&mut browser, &with_param(&back, "state", "forged-state"));
    g.wait_audit("upstream_auth.callback_refused", Some("unknown_state"));
    // The real one connects; the same callback again is a replay.
    let ok = browser.send(&back, "GET", &[]);
    assert_eq!(ok.status, 200, "{}", ok.text());
    let page = refused(&mut browser, &back);
    assert!(page.contains("used already"), "{page}");
    g.wait_audit("upstream_auth.callback_refused", Some("replayed"));
    let again = g.call(&alice, "tools/call", retry(whoami(), &first, &key));
    assert_eq!(identity(&again.message())["sub"], "alice-at-gh");
}

#[test]
fn a_code_of_another_authorization_fails_pkce_and_is_refused() {
    let Some(g) = gateway() else { return };
    let alice = g.caller_token("alice");
    let mut browser = Browser::new();
    let (_, first_link, _) = link(&g, &alice);
    let back1 = g.pending_callback(&mut browser, &first_link, &alice, "alice-at-gh");
    let (_, second_link, _) = link(&g, &alice);
    assert_ne!(first_link, second_link);
    let back2 = g.pending_callback(&mut browser, &second_link, &alice, "alice-at-gh");
    // The second flow's state with the first flow's code: its PKCE verifier does not match.
    let code1 = query_params(&back1)["code"].clone();
    refused(&mut browser, &with_param(&back2, "code", &code1));
    g.wait_audit(
        "upstream_auth.callback_refused",
        Some("token_exchange_failed"),
    );
    let r = g.call(&alice, "tools/call", whoami()).message();
    consent_question(&r);
}

#[test]
fn another_user_can_neither_follow_nor_complete_a_users_consent() {
    let Some(g) = gateway() else { return };
    let alice = g.caller_token("alice");
    let bob = g.caller_token("bob");
    let (_, url, _) = link(&g, &alice);
    // Bob, given alice's link, signs in as himself: refused before the authorization server.
    let mut bobs = Browser::new();
    let r = g.submit_link(&mut bobs, &url, &bob);
    assert_eq!(r.status, 403, "{}", r.text());
    g.wait_audit("upstream_auth.callback_refused", Some("other_user"));
    // Alice's own redirect back, delivered by bob's browser (not the one alice's link sent).
    let mut alices = Browser::new();
    let back = g.pending_callback(&mut alices, &url, &alice, "alice-at-gh");
    refused(&mut bobs, &back);
    g.wait_audit("upstream_auth.callback_refused", Some("other_browser"));
    // Neither alice nor bob got a credential out of it.
    for token in [&alice, &bob] {
        consent_question(&g.call(token, "tools/call", whoami()).message());
    }
}

#[test]
fn a_callback_with_another_iss_is_refused_before_its_code_is_used() {
    let Some(g) = gateway() else { return };
    let alice = g.caller_token("alice");
    let (_, url, _) = link(&g, &alice);
    let mut browser = Browser::new();
    let back = g.pending_callback(&mut browser, &url, &alice, "alice-at-gh");
    assert_eq!(query_params(&back)["iss"], g.provider.issuer);
    let forged = with_param(&back, "iss", &format!("{}/", g.provider.issuer));
    refused(&mut browser, &forged);
    g.wait_audit("upstream_auth.callback_refused", Some("iss_mismatch"));
    consent_question(&g.call(&alice, "tools/call", whoami()).message());
}

#[test]
fn an_authorization_server_whose_metadata_names_another_issuer_is_never_used() {
    let port = mcp_host_tests::fleet::free_port();
    let state = tempfile::tempdir().unwrap();
    let script = mcp_host_tests::workspace_root().join("tests/fixtures/upstream/hostile.py");
    let child = std::process::Command::new("python3")
        .arg(script)
        .args([
            "--mode",
            "oauth_issuer_mismatch",
            "--http",
            &port.to_string(),
        ])
        .arg("--state")
        .arg(state.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _fixture = mcp_host_tests::serve::ChildGuard::from_child(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the fixture did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    const ADMIN: &str = "mcp_admin-hostile-oauth-secret-0123456789";
    let l = Layout::new();
    let host_port = mcp_host_tests::fleet::free_port();
    let public = format!("http://127.0.0.1:{host_port}");
    let audit = l.dir("audit").join("audit.jsonl");
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {{url: \"http://127.0.0.1:{port}/mcp\", auth: {{mode: oauth}}}}\n    name: evil\n\
         audit_log: \"{}\"\n\
         auth:\n  secrets:\n    - {{sha256: {}, user: admin}}\n\
         console:\n  admins: [admin]\n\
         upstream_auth:\n  public_url: \"{public}\"\n  vault:\n    keys: [\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"]\n",
        audit.display(),
        mcp_host::access::auth::hash_secret(ADMIN),
    ));
    let mut cmd = mcp_host_tests::serve::host_command(&cfg);
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{host_port}")]);
    let host = HttpServer::spawn(cmd);
    let mut browser = Browser::new();
    let page = browser.send(
        &format!("{public}/oauth/connect?upstream=evil&as=operator"),
        "GET",
        &[],
    );
    assert_eq!(page.status, 200, "{}", page.text());
    let fields = [
        (
            "csrf".to_owned(),
            crate::upstream_oauth::hidden(&page.text(), "csrf"),
        ),
        ("upstream".to_owned(), "evil".to_owned()),
        ("as".to_owned(), "operator".to_owned()),
        ("credential".to_owned(), ADMIN.to_owned()),
    ];
    let r = browser.send(&format!("{public}/oauth/connect"), "POST", &fields);
    assert_eq!(r.status, 502, "{}\n{}", r.text(), host.stderr());
    assert!(r.header("location").is_none());
    // Its metadata was read, then nothing of it used; the refusal is audited.
    assert!(state.path().join("as_metadata").exists());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        if text.contains("upstream_auth.consent_refused") {
            assert!(text.contains("attacker.example"), "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not audited: {text}\n{}",
            host.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let unexpected = std::fs::read_to_string(state.path().join("unexpected_get"));
    assert!(unexpected.is_err(), "{unexpected:?}");
}

#[test]
fn a_callback_in_clear_over_a_network_is_refused_at_start() {
    let l = Layout::new();
    let cfg = l.config(
        "tool_dirs:\n  - server: {url: \"https://mcp.example.com/mcp\", auth: {mode: oauth}}\n    name: gh\n\
         upstream_auth:\n  public_url: \"http://mcp.example.com\"\n",
    );
    let out = l.run(&cfg, &["config"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("upstream_auth.public_url"), "{err}");
    assert!(err.contains("loopback"), "{err}");
    // https, or http on loopback, are accepted.
    for ok in ["https://mcp.example.com", "http://127.0.0.1:8080"] {
        let cfg = l.config(&format!(
            "tool_dirs:\n  - server: {{url: \"https://mcp.example.com/mcp\", auth: {{mode: oauth}}}}\n    name: gh\n\
             store: memory\n\
             upstream_auth:\n  public_url: \"{ok}\"\n"
        ));
        let out = l.run(&cfg, &["config"]);
        assert!(
            out.status.success(),
            "{ok}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
