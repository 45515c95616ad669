//! The gateway's sweep over a real SQLite vault: credentials of a user whose mcp-host secret was
//! removed, and of an upstream whose identity changed or that lost `server.auth`, are deleted at a
//! reload (and at start when secrets are the only sign-in); the others stay.

use std::sync::Arc;

use base64::Engine as _;

use crate::access::upstream::gateway::Credentials;
use crate::access::upstream::sealing::{Secret, VaultKeys};
use crate::access::upstream::vault::{Credential, Expect, RowFilter, Vault, VaultBounds};
use crate::config::{Config, SecretEntry, ServerAuth, StoreSetting, ToolDir, UpstreamServer};
use crate::store::{Store, now_ms};
use crate::telemetry::Telemetry;

fn credential(access: &str) -> Credential {
    Credential {
        access_token: Secret::new(access),
        refresh_token: Some(Secret::new(format!("{access}-refresh"))),
        token_type: "Bearer".into(),
        scopes: vec!["repo".into()],
        issuer: "http://127.0.0.1:9".into(),
        client_id: "client-1".into(),
        expires_at_ms: Some(now_ms() + 3_600_000),
        refresh_after_ms: None,
        received_at_ms: now_ms(),
    }
}

/// An HTTP upstream `name` with `server.auth` (client `client_id`); nothing listens there, so
/// revocation fails and the row goes anyway.
fn upstream(name: &str, client_id: &str) -> ToolDir {
    ToolDir {
        name: Some(name.into()),
        server: Some(UpstreamServer {
            url: Some(format!("http://127.0.0.1:9/{name}/mcp")),
            auth: Some(ServerAuth {
                client_id: Some(client_id.into()),
                ..ServerAuth::default()
            }),
            ..UpstreamServer::default()
        }),
        ..ToolDir::default()
    }
}

fn secret(user: &str) -> SecretEntry {
    SecretEntry {
        sha256: format!("{:064x}", user.len()),
        user: user.into(),
        agent: None,
        expires: None,
    }
}

fn config(users: &[&str], dirs: Vec<ToolDir>) -> Config {
    let mut c = Config::default();
    c.auth.secrets = users.iter().map(|u| secret(u)).collect();
    c.tool_dirs = dirs;
    c
}

async fn connected(vault: &Vault) -> Vec<(String, String)> {
    let all = RowFilter {
        principal: None,
        upstream: None,
    };
    let mut out: Vec<(String, String)> = vault
        .connections(all)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.principal, c.upstream))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_removed_secret_and_a_changed_identity_revoke_and_delete_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &StoreSetting::Sqlite(Some(dir.path().join("v.sqlite"))),
        "r1",
        &[],
    )
    .await
    .unwrap();
    let key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let vault = Vault::new(
        store.vault_backend(),
        VaultKeys::from_config(&[key]).unwrap(),
        VaultBounds::default(),
        store.replica(),
    );
    let before = config(
        &["alice", "bob"],
        vec![
            upstream("github", "c1"),
            upstream("linear", "c1"),
            upstream("jira", "c1"),
        ],
    );
    let credentials = Credentials::new(vault.clone(), Arc::new(Telemetry::new(None)), &before);
    for who in ["alice", "bob", "@operator"] {
        for at in ["github", "linear", "jira"] {
            let identity = credentials.spec(at).unwrap().identity.clone();
            vault
                .save_credential(
                    who,
                    at,
                    &identity,
                    &credential(&format!("{who}-{at}")),
                    Expect::Any,
                )
                .await
                .unwrap();
        }
    }
    // Nothing is stale yet: the sweep at start keeps everything.
    assert_eq!(credentials.sweep(None, &before).await.unwrap(), 0);
    assert_eq!(connected(&vault).await.len(), 9);

    // Reload: bob's secret is gone, linear's client changed, jira lost server.auth.
    let after = config(
        &["alice"],
        vec![upstream("github", "c1"), upstream("linear", "c2")],
    );
    credentials.reconfigure(&after);
    assert_eq!(credentials.sweep(Some(&before), &after).await.unwrap(), 7);
    assert_eq!(
        connected(&vault).await,
        [
            ("@operator".to_owned(), "github".to_owned()),
            ("alice".to_owned(), "github".to_owned())
        ]
    );
    // A second sweep finds nothing more.
    assert_eq!(credentials.sweep(Some(&before), &after).await.unwrap(), 0);
}

#[tokio::test]
async fn at_start_a_user_without_a_secret_loses_credentials_only_when_secrets_are_the_sign_in() {
    let store = Store::open(&StoreSetting::Memory, "r1", &[]).await.unwrap();
    let key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let vault = Vault::new(
        store.vault_backend(),
        VaultKeys::from_config(&[key]).unwrap(),
        VaultBounds::default(),
        store.replica(),
    );
    let mut with_jwt = config(&["alice"], vec![upstream("github", "c1")]);
    with_jwt.auth.jwt.issuer = Some("https://idp.example".into());
    let credentials = Credentials::new(vault.clone(), Arc::new(Telemetry::new(None)), &with_jwt);
    let identity = credentials.spec("github").unwrap().identity.clone();
    for who in ["alice", "dave"] {
        vault
            .save_credential(who, "github", &identity, &credential(who), Expect::Any)
            .await
            .unwrap();
    }
    // dave may sign in with a JWT: kept.
    assert_eq!(credentials.sweep(None, &with_jwt).await.unwrap(), 0);
    // Secrets only, and dave has none: his credential goes at start.
    let secrets_only = config(&["alice"], vec![upstream("github", "c1")]);
    assert_eq!(credentials.sweep(None, &secrets_only).await.unwrap(), 1);
    assert_eq!(
        connected(&vault).await,
        [("alice".to_owned(), "github".to_owned())]
    );
}
