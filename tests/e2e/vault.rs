//! `mcp-host vault list|rotate|revoke` end to end: the real binary on a SQLite store whose rows
//! the test wrote through the library's public vault API (as the host will), with keys from the
//! environment (`${VAULT_KEY_NEW}`, `${VAULT_KEY_OLD}`). Rotation re-seals every row under the
//! first key, so the old one can go; revoking deletes a user's rows; nothing printed holds a
//! token.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;
use mcp_host::access::upstream::sealing::{Secret, VaultKeys, key_id};
use mcp_host::access::upstream::vault::{Credential, Expect, Vault, VaultBounds};
use mcp_host::config::StoreSetting;
use mcp_host::store::Store;
use mcp_host_tests::{Layout, artifacts, runtime};
use serde_json::Value;

const OLD: [u8; 32] = [0x11; 32];
const NEW: [u8; 32] = [0x22; 32];

fn b64(key: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// A store and the config naming it, with both keys (the new one first) from the environment.
fn layout() -> (Layout, PathBuf, PathBuf) {
    let l = Layout::new();
    let db = l.dir("state").join("vault.sqlite");
    let cfg = l.config(&format!(
        "tool_dirs: []\nstore: sqlite:{}\nupstream_auth:\n  vault:\n    keys: [\"${{VAULT_KEY_NEW}}\", \"${{VAULT_KEY_OLD:-}}\"]\n",
        db.display()
    ));
    (l, cfg, db)
}

/// `mcp-host --config cfg vault <args>`, with the keys in the environment (the old one only when
/// `old` is set).
fn vault(cfg: &Path, old: bool, args: &[&str]) -> Output {
    let mut cmd = Command::new(&artifacts().host);
    cmd.arg("--config")
        .arg(cfg)
        .arg("vault")
        .args(args)
        .env("VAULT_KEY_NEW", b64(&NEW))
        .env_remove("VAULT_KEY_OLD")
        .env_remove("MCP_TOOL_DIRS");
    if old {
        cmd.env("VAULT_KEY_OLD", b64(&OLD));
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn token(principal: &str, upstream: &str) -> String {
    format!("tok-{principal}-{upstream}-plaintext")
}

fn credential(principal: &str, upstream: &str) -> Credential {
    Credential {
        access_token: Secret::new(token(principal, upstream)),
        refresh_token: Some(Secret::new(format!(
            "{}-refresh",
            token(principal, upstream)
        ))),
        token_type: "Bearer".into(),
        scopes: vec!["repo".into(), "read:org".into()],
        issuer: format!("https://{upstream}.example/oauth"),
        client_id: "client-1".into(),
        expires_at_ms: Some(4_102_444_800_000),
        refresh_after_ms: None,
        received_at_ms: 1_700_000_000_000,
    }
}

const ROWS: [(&str, &str); 3] = [("alice", "github"), ("alice", "linear"), ("bob", "github")];

/// The vault over the SQLite store at `db` with `keys`.
async fn open(db: &Path, keys: &[&[u8]]) -> Vault {
    let store = Store::open(&StoreSetting::Sqlite(Some(db.to_owned())), "test", &[])
        .await
        .unwrap();
    let keys: Vec<String> = keys.iter().map(|k| b64(k)).collect();
    Vault::new(
        store.vault_backend(),
        VaultKeys::from_config(&keys).unwrap(),
        VaultBounds::default(),
        "test",
    )
}

#[test]
fn vault_lists_rotates_and_revokes_without_showing_a_token() {
    let (_l, cfg, db) = layout();
    let rt = runtime();
    // The host's rows, sealed under the old key.
    rt.block_on(async {
        let v = open(&db, &[&OLD]).await;
        for (p, u) in ROWS {
            v.save_credential(p, u, "id1", &credential(p, u), Expect::Absent)
                .await
                .unwrap();
        }
    });
    let never_printed = |out: &Output| {
        let all = text(out);
        for (p, u) in ROWS {
            assert!(!all.contains(&token(p, u)), "a token is printed:\n{all}");
        }
    };

    // Who is connected where, and under which key.
    let out = vault(&cfg, true, &["list", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    never_printed(&out);
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let seen: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["principal"].as_str().unwrap(),
                r["upstream"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, ROWS);
    assert_eq!(rows[0]["issuer"], "https://github.example/oauth");
    assert_eq!(rows[0]["scopes"], serde_json::json!(["repo", "read:org"]));
    assert!(rows.iter().all(|r| r["key_id"] == key_id(&OLD)), "{rows:?}");
    let out = vault(&cfg, true, &["list"]);
    never_printed(&out);
    let table = text(&out);
    assert!(
        table.contains("PRINCIPAL") && table.contains("alice") && table.contains("read:org"),
        "{table}"
    );
    assert!(table.contains("run `mcp-host vault rotate`"), "{table}");

    // Rotation: every row under the new key; then the old key can go.
    let out = vault(&cfg, true, &["rotate"]);
    assert!(out.status.success(), "{}", text(&out));
    never_printed(&out);
    assert!(
        text(&out).contains(&format!("Re-sealed 3 rows under key {}", key_id(&NEW))),
        "{}",
        text(&out)
    );
    rt.block_on(async {
        let v = open(&db, &[&NEW]).await;
        for (p, u) in ROWS {
            let c = v.credential(p, u, "id1").await.unwrap().unwrap();
            assert_eq!(c.credential.access_token.expose(), token(p, u));
        }
    });
    let out = vault(&cfg, false, &["list", "--user", "alice", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r["key_id"] == key_id(&NEW)), "{rows:?}");

    // Revoking: one upstream of alice's, then all of hers; bob's stays.
    let out = vault(
        &cfg,
        false,
        &["revoke", "--user", "alice", "--upstream", "linear"],
    );
    assert!(out.status.success(), "{}", text(&out));
    never_printed(&out);
    assert!(
        text(&out).contains("Deleted the credential of alice at linear"),
        "{}",
        text(&out)
    );
    let out = vault(&cfg, false, &["revoke", "--user", "alice"]);
    assert!(text(&out).contains("alice at github"), "{}", text(&out));
    let out = vault(&cfg, false, &["revoke", "--user", "alice"]);
    assert!(text(&out).contains("nothing to revoke"), "{}", text(&out));
    let out = vault(&cfg, false, &["list", "--json"]);
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["principal"], "bob");
}

#[test]
fn vault_keys_are_checked_and_never_printed() {
    let l = Layout::new();
    let db = l.dir("state").join("vault.sqlite");
    let short = b64(&[0x33; 16]);
    let cfg = l.config(&format!(
        "tool_dirs: []\nstore: sqlite:{}\nupstream_auth: {{vault: {{keys: [\"{short}\"]}}}}\n",
        db.display()
    ));
    let out = vault(&cfg, false, &["list"]);
    assert!(!out.status.success());
    let all = text(&out);
    assert!(
        all.contains("upstream_auth.vault.keys.0") && all.contains("32 bytes"),
        "{all}"
    );
    assert!(!all.contains(&short), "{all}");
    // No key at all: nothing to rotate to.
    let cfg = l.config(&format!("tool_dirs: []\nstore: sqlite:{}\n", db.display()));
    std::fs::write(&db, b"").unwrap();
    let out = vault(&cfg, false, &["rotate"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("upstream_auth.vault.keys"),
        "{}",
        text(&out)
    );
    // `mcp-host config` shows the keys redacted.
    let cfg = l.config("tool_dirs: []\nupstream_auth: {vault: {keys: [\"${VAULT_KEY_NEW}\"]}}\n");
    let out = Command::new(&artifacts().host)
        .args(["--config", cfg.to_str().unwrap(), "config", "--json"])
        .env("VAULT_KEY_NEW", b64(&NEW))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(&b64(&NEW)), "{}", text(&out));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["upstream_auth"]["vault"]["keys"][0], "<redacted>");
}
