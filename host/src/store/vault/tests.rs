//! The vault's rules, each against both real backends: SQLite in a file of a temporary directory
//! (and the memory store, which is SQLite in memory), and a `redis-server` of the test's own on a
//! loopback port (skipped with a message where it is not installed, unless
//! `MCP_TEST_REQUIRE_CLIENTS` is set).

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;

use crate::access::upstream::sealing::{Secret, VaultKeys};
use crate::access::upstream::vault::{
    AtServer, Credential, DeleteOnly, Expect, FlowRow, NewFlow, RegisteredClient, Revocation,
    RowFilter, Vault, VaultBounds, VaultError,
};
use crate::config::StoreSetting;
use crate::store::{Store, now_ms};

/// How long anything the tests wait for may take on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The backends

/// A `redis-server` of the test's own: a temporary directory, no persistence, a loopback port.
struct RedisServer {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// One RESP command over a fresh connection; the raw reply.
fn resp(port: u16, args: &[&str]) -> std::io::Result<Vec<u8>> {
    let mut conn = TcpStream::connect(("127.0.0.1", port))?;
    conn.set_read_timeout(Some(DEADLINE))?;
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    conn.write_all(&out)?;
    let mut reply = vec![0u8; 4096];
    let n = conn.read(&mut reply)?;
    reply.truncate(n);
    Ok(reply)
}

impl RedisServer {
    /// Start one, or `None` (after saying why) where `redis-server` is not installed.
    fn start() -> Option<RedisServer> {
        let Some(bin) = find("redis-server") else {
            assert!(
                std::env::var_os("MCP_TEST_REQUIRE_CLIENTS").is_none(),
                "redis-server is required (MCP_TEST_REQUIRE_CLIENTS is set) but missing"
            );
            eprintln!("skipping the Redis half: redis-server not installed");
            return None;
        };
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .unwrap();
            let dir = tempfile::tempdir().unwrap();
            let child = Command::new(&bin)
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut server = RedisServer { child, dir, port };
            let deadline = Instant::now() + DEADLINE;
            while Instant::now() < deadline {
                if server.child.try_wait().unwrap().is_some() {
                    break; // another process took the port: try another
                }
                if resp(port, &["PING"]).is_ok_and(|r| r.starts_with(b"+PONG")) {
                    return Some(server);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("redis-server did not start");
    }

    /// Everything Redis holds, as its RDB file (uncompressed, so a plaintext would show).
    fn dump(&self) -> Vec<u8> {
        let set = resp(self.port, &["CONFIG", "SET", "rdbcompression", "no"]).unwrap();
        assert!(set.starts_with(b"+OK"), "{}", String::from_utf8_lossy(&set));
        let saved = resp(self.port, &["SAVE"]).unwrap();
        assert!(
            saved.starts_with(b"+OK"),
            "{}",
            String::from_utf8_lossy(&saved)
        );
        std::fs::read(self.dir.path().join("dump.rdb")).unwrap()
    }
}

/// A store of one kind, and what the test needs to look inside it.
struct Backend {
    name: &'static str,
    store: Store,
    /// The SQLite file's directory.
    dir: tempfile::TempDir,
    redis: Option<RedisServer>,
}

impl Backend {
    /// Every byte the store holds: the SQLite file with its WAL, or Redis's dump.
    fn bytes(&self) -> Vec<u8> {
        if let Some(redis) = &self.redis {
            return redis.dump();
        }
        let mut all = Vec::new();
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            all.extend(std::fs::read(entry.unwrap().path()).unwrap());
        }
        all
    }
}

/// SQLite in a temporary directory, the memory store, and Redis when installed.
async fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vault.sqlite");
    let store = Store::open(&StoreSetting::Sqlite(Some(path)), "r1", &[])
        .await
        .unwrap();
    let mut out = vec![
        Backend {
            name: "sqlite",
            store,
            dir,
            redis: None,
        },
        Backend {
            name: "memory",
            store: Store::open(&StoreSetting::Memory, "r1", &[]).await.unwrap(),
            dir: tempfile::tempdir().unwrap(),
            redis: None,
        },
    ];
    if let Some(redis) = RedisServer::start() {
        let url = format!("redis://127.0.0.1:{}", redis.port);
        let store = Store::open(&StoreSetting::Redis(url), "r1", &["record-key".into()])
            .await
            .unwrap();
        out.push(Backend {
            name: "redis",
            store,
            dir: tempfile::tempdir().unwrap(),
            redis: Some(redis),
        });
    }
    out
}

/// A configured key: base64 of 32 bytes of `byte`.
fn key(byte: u8) -> String {
    base64::engine::general_purpose::STANDARD.encode([byte; 32])
}

fn vault_with(store: &Store, keys: &[u8], bounds: VaultBounds) -> Vault {
    let keys: Vec<String> = keys.iter().map(|b| key(*b)).collect();
    Vault::new(
        store.vault_backend(),
        VaultKeys::from_config(&keys).unwrap(),
        bounds,
        store.replica(),
    )
}

fn vault(store: &Store) -> Vault {
    vault_with(store, &[1], VaultBounds::default())
}

fn credential(access: &str) -> Credential {
    Credential {
        access_token: Secret::new(access),
        refresh_token: Some(Secret::new(format!("{access}-refresh"))),
        token_type: "Bearer".into(),
        scopes: vec!["repo".into(), "read:org".into()],
        issuer: "https://as.example".into(),
        client_id: "client-1".into(),
        expires_at_ms: Some(now_ms() + 3_600_000),
        refresh_after_ms: None,
        received_at_ms: now_ms(),
    }
}

fn flow(principal: &str, state: &str) -> NewFlow {
    NewFlow {
        principal: principal.into(),
        upstream: "github".into(),
        identity: "id1".into(),
        state: Secret::new(state),
        request: format!("call-of-{principal}"),
        authorization_url: Secret::new(format!("https://as.example/authorize?state={state}")),
        payload: Secret::new(format!("pkce-verifier-{state}")),
        ttl: Duration::from_secs(600),
    }
}

// ---------------------------------------------------------------------------------------------
// Credentials

#[tokio::test(flavor = "multi_thread")]
async fn credentials_are_compared_and_set_by_version() {
    for b in backends().await {
        let (v, n) = (vault(&b.store), b.name);
        let first = credential("tok-1");
        assert_eq!(
            v.save_credential("alice", "github", "id1", &first, Expect::Absent)
                .await,
            Ok(1),
            "{n}"
        );
        let again = v
            .save_credential("alice", "github", "id1", &first, Expect::Absent)
            .await;
        assert_eq!(again, Err(VaultError::Conflict { found: Some(1) }), "{n}");
        let read = v
            .credential("alice", "github", "id1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.credential, first, "{n}");
        assert_eq!(read.version, 1, "{n}");
        // A refresh at the version read wins once; the second writer at the same version loses.
        let second = credential("tok-2");
        assert_eq!(
            v.save_credential("alice", "github", "id1", &second, Expect::Version(1))
                .await,
            Ok(2),
            "{n}"
        );
        let stale = v
            .save_credential("alice", "github", "id1", &first, Expect::Version(1))
            .await;
        assert_eq!(stale, Err(VaultError::Conflict { found: Some(2) }), "{n}");
        let read = v
            .credential("alice", "github", "id1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.credential.access_token.expose(), "tok-2", "{n}");
        // A fresh consent replaces whatever is there.
        assert_eq!(
            v.save_credential("alice", "github", "id1", &first, Expect::Any)
                .await,
            Ok(3),
            "{n}"
        );
        // Another identity of the upstream (its configuration changed): absent.
        assert_eq!(
            v.credential("alice", "github", "id2").await,
            Ok(None),
            "{n}"
        );
        assert_eq!(v.credential("bob", "github", "id1").await, Ok(None), "{n}");
        // Deleted: gone, and a write expecting a version finds none.
        assert_eq!(
            v.remove_credential("alice", "github").await,
            Ok(true),
            "{n}"
        );
        assert_eq!(
            v.credential("alice", "github", "id1").await,
            Ok(None),
            "{n}"
        );
        let gone = v
            .save_credential("alice", "github", "id1", &first, Expect::Version(3))
            .await;
        assert_eq!(gone, Err(VaultError::Conflict { found: None }), "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_writers_at_one_version_one_wins() {
    for b in backends().await {
        let v = vault(&b.store);
        v.save_credential("alice", "github", "id1", &credential("t0"), Expect::Absent)
            .await
            .unwrap();
        let writes = (0..8).map(|i| {
            let v = v.clone();
            tokio::spawn(async move {
                let c = credential(&format!("t{i}"));
                v.save_credential("alice", "github", "id1", &c, Expect::Version(1))
                    .await
            })
        });
        let mut won = 0;
        for w in writes {
            match w.await.unwrap() {
                Ok(2) => won += 1,
                Err(VaultError::Conflict { found: Some(2) }) => {}
                other => panic!("{}: {other:?}", b.name),
            }
        }
        assert_eq!(won, 1, "{}", b.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_per_user_are_bounded() {
    for b in backends().await {
        let bounds = VaultBounds {
            connections_per_user: 2,
            ..VaultBounds::default()
        };
        let (v, n) = (vault_with(&b.store, &[1], bounds), b.name);
        for up in ["a", "b"] {
            v.save_credential("alice", up, "id", &credential("t"), Expect::Absent)
                .await
                .unwrap();
        }
        let third = v
            .save_credential("alice", "c", "id", &credential("t"), Expect::Any)
            .await;
        assert!(
            matches!(&third, Err(VaultError::Full(m)) if m.contains("max_connections_per_user")),
            "{n}: {third:?}"
        );
        // Replacing one held is not a new one; another user has room of their own.
        v.save_credential("alice", "a", "id", &credential("t2"), Expect::Any)
            .await
            .unwrap();
        v.save_credential("bob", "c", "id", &credential("t"), Expect::Absent)
            .await
            .unwrap();
        // Disconnecting makes room.
        v.remove_credential("alice", "b").await.unwrap();
        v.save_credential("alice", "c", "id", &credential("t"), Expect::Absent)
            .await
            .unwrap();
        let rows = v.connections(RowFilter::default()).await.unwrap();
        let names: Vec<(&str, &str)> = rows
            .iter()
            .map(|c| (c.principal.as_str(), c.upstream.as_str()))
            .collect();
        assert_eq!(names, [("alice", "a"), ("alice", "c"), ("bob", "c")], "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_copied_to_another_user_or_upstream_does_not_open() {
    for b in backends().await {
        let (v, n) = (vault(&b.store), b.name);
        v.save_credential(
            "alice",
            "github",
            "id1",
            &credential("alice-tok"),
            Expect::Absent,
        )
        .await
        .unwrap();
        let backend = b.store.vault_backend();
        let alice = backend
            .credential("alice", "github")
            .await
            .unwrap()
            .unwrap();
        // Someone with write access to the store copies alice's row to mallory, and to another
        // upstream of alice's.
        for (principal, upstream) in [("mallory", "github"), ("alice", "linear")] {
            let mut copy = alice.clone();
            copy.principal = principal.into();
            copy.upstream = upstream.into();
            backend
                .put_credential(&copy, Expect::Any, usize::MAX)
                .await
                .unwrap();
            assert_eq!(
                v.credential(principal, upstream, "id1").await,
                Ok(None),
                "{n}: {principal} at {upstream}"
            );
        }
        // Its identity column changed to the upstream's new identity: still refused.
        let mut moved = alice.clone();
        moved.identity = "id2".into();
        backend
            .put_credential(&moved, Expect::Any, usize::MAX)
            .await
            .unwrap();
        assert_eq!(
            v.credential("alice", "github", "id2").await,
            Ok(None),
            "{n}"
        );
        // Under another key only: absent too.
        let other = vault_with(&b.store, &[9], VaultBounds::default());
        backend
            .put_credential(&alice, Expect::Any, usize::MAX)
            .await
            .unwrap();
        assert_eq!(
            other.credential("alice", "github", "id1").await,
            Ok(None),
            "{n}"
        );
        assert!(
            v.credential("alice", "github", "id1")
                .await
                .unwrap()
                .is_some(),
            "{n}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn due_refreshes_are_listed_and_uses_recorded() {
    for b in backends().await {
        let (v, n) = (vault(&b.store), b.name);
        let mut due = credential("due");
        due.refresh_after_ms = Some(now_ms() - 1000);
        let mut later = credential("later");
        later.refresh_after_ms = Some(now_ms() + 3_600_000);
        let never = credential("never");
        v.save_credential("alice", "a:b", "id", &due, Expect::Absent)
            .await
            .unwrap();
        v.save_credential("alice", "later", "id", &later, Expect::Absent)
            .await
            .unwrap();
        v.save_credential("bob", "never", "id", &never, Expect::Absent)
            .await
            .unwrap();
        let listed = v.due_for_refresh(10).await.unwrap();
        assert_eq!(listed, [("alice".to_owned(), "a:b".to_owned())], "{n}");
        // Refreshed: not due any more.
        let mut refreshed = due.clone();
        refreshed.refresh_after_ms = Some(now_ms() + 3_600_000);
        v.save_credential("alice", "a:b", "id", &refreshed, Expect::Version(1))
            .await
            .unwrap();
        assert_eq!(v.due_for_refresh(10).await.unwrap(), [], "{n}");
        // A refresh does not count as a use; a call does.
        let before = v.credential("bob", "never", "id").await.unwrap().unwrap();
        let future = now_ms() + 5000;
        b.store
            .vault_backend()
            .touch_credential("bob", "never", future)
            .await
            .unwrap();
        let after = v.credential("bob", "never", "id").await.unwrap().unwrap();
        assert!(
            after.last_used_ms == future && before.last_used_ms < future,
            "{n}"
        );
        v.save_credential("bob", "never", "id", &never, Expect::Version(1))
            .await
            .unwrap();
        let kept = v.credential("bob", "never", "id").await.unwrap().unwrap();
        assert_eq!(kept.last_used_ms, future, "{n}");
    }
}

/// A revocation hook that records what it was handed.
#[derive(Default)]
struct Recorded(std::sync::Mutex<Vec<String>>);

impl Revocation for Recorded {
    fn revoke<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
        credential: &'a Credential,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = AtServer> + Send + 'a>> {
        let seen = format!(
            "{principal}@{upstream}:{}",
            credential.access_token.expose()
        );
        self.0.lock().unwrap().push(seen);
        Box::pin(std::future::ready(AtServer::Revoked))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn revoking_a_user_deletes_their_rows_only_after_the_hook() {
    for b in backends().await {
        let (v, n) = (vault(&b.store), b.name);
        for (who, up) in [("alice", "github"), ("alice", "linear"), ("bob", "github")] {
            let c = credential(&format!("{who}-{up}"));
            v.save_credential(who, up, "id", &c, Expect::Absent)
                .await
                .unwrap();
        }
        let hook = Recorded::default();
        let one = v.revoke("alice", Some("linear"), &hook).await.unwrap();
        assert_eq!(one.len(), 1, "{n}");
        assert_eq!(one[0].at_authorization_server, AtServer::Revoked, "{n}");
        assert_eq!(
            *hook.0.lock().unwrap(),
            ["alice@linear:alice-linear"],
            "{n}"
        );
        let rest = v.revoke("alice", None, &DeleteOnly).await.unwrap();
        assert_eq!(rest.len(), 1, "{n}");
        assert!(
            matches!(rest[0].at_authorization_server, AtServer::Skipped(_)),
            "{n}"
        );
        let left = v.connections(RowFilter::default()).await.unwrap();
        assert_eq!(left.len(), 1, "{n}");
        assert_eq!(
            (left[0].principal.as_str(), left[0].upstream.as_str()),
            ("bob", "github")
        );
        assert!(
            v.revoke("alice", None, &hook).await.unwrap().is_empty(),
            "{n}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Registered clients

#[tokio::test(flavor = "multi_thread")]
async fn a_client_is_returned_for_its_issuer_only_and_bounded_per_upstream() {
    for b in backends().await {
        let (v, n) = (vault(&b.store), b.name);
        let client = RegisteredClient {
            issuer: "https://as1.example".into(),
            client_id: "dcr-1".into(),
            method: "client_secret_basic".into(),
            secret: Some(Secret::new("client-secret-1")),
            registered_ms: 1,
        };
        v.save_client("github", "id1", &client).await.unwrap();
        let got = v
            .client("github", "https://as1.example", "id1")
            .await
            .unwrap();
        assert_eq!(got.as_ref(), Some(&client), "{n}");
        // Never at another authorization server, nor for another identity, nor another upstream.
        assert_eq!(
            v.client("github", "https://as2.example", "id1").await,
            Ok(None)
        );
        assert_eq!(
            v.client("github", "https://as1.example", "id2").await,
            Ok(None)
        );
        assert_eq!(
            v.client("linear", "https://as1.example", "id1").await,
            Ok(None)
        );
        // An upstream that names authorization server after authorization server keeps the
        // newest registrations only.
        for i in 0..crate::access::upstream::vault::MAX_CLIENTS_PER_UPSTREAM + 2 {
            let c = RegisteredClient {
                issuer: format!("https://as-{i}.example"),
                client_id: format!("c{i}"),
                method: "none".into(),
                secret: None,
                registered_ms: 10 + i as u64,
            };
            v.save_client("github", "id1", &c).await.unwrap();
        }
        let kept = b
            .store
            .vault_backend()
            .clients(Some("github"))
            .await
            .unwrap();
        assert_eq!(
            kept.len(),
            crate::access::upstream::vault::MAX_CLIENTS_PER_UPSTREAM,
            "{n}"
        );
        assert!(
            !kept.iter().any(|c| c.issuer == "https://as1.example"),
            "{n}"
        );
        assert_eq!(
            v.remove_upstream("github").await.unwrap().1,
            kept.len(),
            "{n}"
        );
        assert!(
            b.store
                .vault_backend()
                .clients(None)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Pending flows

#[tokio::test(flavor = "multi_thread")]
async fn a_flow_is_taken_once_by_its_state_only() {
    for b in backends().await {
        let (v, n) = (vault(&b.store), b.name);
        let id = v.begin_flow(flow("alice", "state-a")).await.unwrap();
        let reused = v.begin_flow(flow("alice", "state-a")).await;
        assert!(
            matches!(reused, Err(VaultError::Invalid(_))),
            "{n}: {reused:?}"
        );
        let pending = v.pending_flow(&id).await.unwrap().unwrap();
        assert_eq!(pending.principal, "alice", "{n}");
        assert_eq!(pending.request, "call-of-alice", "{n}");
        assert_eq!(pending.payload.expose(), "pkce-verifier-state-a", "{n}");
        assert_eq!(v.take_flow("state-b").await, Ok(None), "{n}: another state");
        assert_eq!(v.take_flow("").await, Ok(None), "{n}");
        // Two callbacks with the same state at once: one gets the flow.
        let takes = (0..8).map(|_| {
            let v = v.clone();
            tokio::spawn(async move { v.take_flow("state-a").await })
        });
        let mut got = Vec::new();
        for t in takes {
            if let Some(f) = t.await.unwrap().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got.len(), 1, "{n}");
        assert_eq!(got[0].flow_id, id, "{n}");
        assert_eq!(got[0].authorization_url, pending.authorization_url, "{n}");
        // Replayed: nothing; the connect page does not find it either.
        assert_eq!(v.take_flow("state-a").await, Ok(None), "{n}");
        assert_eq!(v.pending_flow(&id).await, Ok(None), "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_flow_is_not_taken() {
    use crate::access::upstream::sealing::Binding;
    use crate::access::upstream::vault::state_hash;
    for b in backends().await {
        let (v, n) = (vault(&b.store), b.name);
        // A flow sealed as the vault seals one, whose time ran out before its callback came.
        let (hash, id, expires_ms) = (state_hash("state-x"), "flow-x".to_owned(), now_ms() - 1);
        let binding = Binding::flow("alice", "github", "id1", &hash, &id, expires_ms);
        let json = r#"{"request":"r","authorization_url":"https://as/a","payload":"p"}"#;
        let keys = VaultKeys::from_config(&[key(1)]).unwrap();
        let row = FlowRow {
            state_hash: hash,
            flow_id: id.clone(),
            principal: "alice".into(),
            upstream: "github".into(),
            identity: "id1".into(),
            sealed: keys.seal(&binding, json.as_bytes()).unwrap(),
            created_ms: expires_ms - 600_000,
            expires_ms,
        };
        let backend = b.store.vault_backend();
        let inserted = backend
            .insert_flow(&row, VaultBounds::default(), expires_ms - 600_000)
            .await
            .unwrap();
        assert_eq!(
            inserted,
            crate::access::upstream::vault::FlowInsert::Inserted,
            "{n}"
        );
        assert_eq!(v.pending_flow(&id).await, Ok(None), "{n}");
        assert_eq!(v.take_flow("state-x").await, Ok(None), "{n}");
        // The same row unexpired is taken (so the refusal above was the expiry's).
        let fresh = FlowRow {
            expires_ms: now_ms() + 600_000,
            ..row
        };
        let binding = Binding::flow(
            "alice",
            "github",
            "id1",
            &fresh.state_hash,
            &id,
            fresh.expires_ms,
        );
        let fresh = FlowRow {
            sealed: keys.seal(&binding, json.as_bytes()).unwrap(),
            ..fresh
        };
        backend
            .insert_flow(&fresh, VaultBounds::default(), now_ms())
            .await
            .unwrap();
        assert!(v.take_flow("state-x").await.unwrap().is_some(), "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pending_flows_are_bounded_per_user_and_in_total() {
    for b in backends().await {
        let bounds = VaultBounds {
            pending_flows_per_user: 2,
            pending_flows: 3,
            ..VaultBounds::default()
        };
        let (v, n) = (vault_with(&b.store, &[1], bounds), b.name);
        v.begin_flow(flow("alice", "s1")).await.unwrap();
        v.begin_flow(flow("alice", "s2")).await.unwrap();
        let third = v.begin_flow(flow("alice", "s3")).await;
        assert!(
            matches!(&third, Err(VaultError::Full(m)) if m.contains("max_pending_flows_per_user")),
            "{n}: {third:?}"
        );
        v.begin_flow(flow("bob", "s4")).await.unwrap();
        let full = v.begin_flow(flow("carol", "s5")).await;
        assert!(
            matches!(&full, Err(VaultError::Full(m)) if m.contains("upstream_auth.vault.max_pending_flows)")),
            "{n}: {full:?}"
        );
        // A flow taken frees its place.
        v.take_flow("s1").await.unwrap().unwrap();
        v.begin_flow(flow("alice", "s3")).await.unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Refresh leases

#[tokio::test(flavor = "multi_thread")]
async fn one_holder_at_a_time_refreshes() {
    for b in backends().await {
        let n = b.name;
        let (one, two) = (vault(&b.store), vault(&b.store));
        let ttl = Duration::from_secs(300);
        // Many holders at once: one gets the lease.
        let held = Arc::new(AtomicUsize::new(0));
        let tries = (0..8).map(|i| {
            let v = if i % 2 == 0 { one.clone() } else { two.clone() };
            let held = Arc::clone(&held);
            tokio::spawn(async move {
                let lease = v.try_lease("alice", "github", ttl).await.unwrap();
                if lease.is_some() {
                    held.fetch_add(1, Ordering::SeqCst);
                }
                lease
            })
        });
        let mut leases = Vec::new();
        for t in tries {
            leases.extend(t.await.unwrap());
        }
        assert_eq!(held.load(Ordering::SeqCst), 1, "{n}");
        let lease = leases.pop().unwrap();
        // Another holder cannot give it back; the holder can, then it is free.
        let mut impostor = lease.clone();
        impostor.owner.push('x');
        assert_eq!(two.release(&impostor).await, Ok(false), "{n}");
        assert!(
            one.try_lease("alice", "github", ttl)
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(one.release(&lease).await, Ok(true), "{n}");
        assert_eq!(one.release(&lease).await, Ok(false), "{n}");
        let again = two.try_lease("alice", "github", ttl).await.unwrap();
        assert!(again.is_some(), "{n}");
        // Another credential's lease is its own.
        assert!(one.try_lease("bob", "github", ttl).await.unwrap().is_some());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_whose_holder_stopped_runs_out() {
    for b in backends().await {
        let n = b.name;
        let v = vault(&b.store);
        let short = Duration::from_millis(200);
        let lease = v
            .try_lease("alice", "github", short)
            .await
            .unwrap()
            .unwrap();
        // (That it is refused while held is `one_holder_at_a_time_refreshes`'s, with a lease long
        // enough for a loaded machine.) The holder never gives it back: another takes it once it
        // ran out.
        let deadline = Instant::now() + DEADLINE;
        let taken = loop {
            if let Some(l) = v.try_lease("alice", "github", short).await.unwrap() {
                break l;
            }
            assert!(Instant::now() < deadline, "{n}: the lease never ran out");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_ne!(taken.owner, lease.owner, "{n}");
        assert_eq!(
            v.release(&lease).await,
            Ok(false),
            "{n}: the old holder's is gone"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Rotation, and what the store holds

#[tokio::test(flavor = "multi_thread")]
async fn rotation_reseals_every_row_under_the_first_key() {
    for b in backends().await {
        let n = b.name;
        let old = vault_with(&b.store, &[1], VaultBounds::default());
        for who in ["alice", "bob"] {
            old.save_credential(who, "github", "id", &credential(who), Expect::Absent)
                .await
                .unwrap();
        }
        let client = RegisteredClient {
            issuer: "https://as.example".into(),
            client_id: "c".into(),
            method: "client_secret_post".into(),
            secret: Some(Secret::new("s3cret")),
            registered_ms: 1,
        };
        old.save_client("github", "id", &client).await.unwrap();
        // A row under a key nobody has any more.
        let lost = vault_with(&b.store, &[7], VaultBounds::default());
        lost.save_credential("carol", "github", "id", &credential("c"), Expect::Absent)
            .await
            .unwrap();
        let rotating = vault_with(&b.store, &[2, 1], VaultBounds::default());
        let report = rotating.rotate().await.unwrap();
        assert_eq!((report.resealed, report.current), (3, 0), "{n}: {report:?}");
        assert_eq!(report.unreadable.len(), 1, "{n}: {report:?}");
        assert!(report.unreadable[0].contains("carol"), "{n}: {report:?}");
        let again = rotating.rotate().await.unwrap();
        assert_eq!((again.resealed, again.current), (0, 3), "{n}: {again:?}");
        // The old key dropped: everything re-sealed still opens.
        let new = vault_with(&b.store, &[2], VaultBounds::default());
        for who in ["alice", "bob"] {
            let c = new.credential(who, "github", "id").await.unwrap().unwrap();
            assert_eq!(c.credential.access_token.expose(), who, "{n}");
        }
        let c = new
            .client("github", "https://as.example", "id")
            .await
            .unwrap();
        assert_eq!(c, Some(client), "{n}");
        let listed = new.connections(RowFilter::default()).await.unwrap();
        let ids: Vec<_> = listed.iter().map(|c| c.key_id.clone()).collect();
        let first = new.key_ids().first().cloned();
        assert_eq!(ids.iter().filter(|id| **id == first).count(), 2, "{n}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_store_holds_no_plaintext_token() {
    let secrets = [
        "gho_ACCESS_plaintext_7f3a",
        "ghr_REFRESH_plaintext_9c1d",
        "CLIENT_SECRET_plaintext_5e2b",
        "PKCE_VERIFIER_plaintext_1a4f",
        "OAUTH_STATE_plaintext_8d6c",
    ];
    // The memory store has nothing outside the process to look at.
    for b in backends().await.into_iter().filter(|b| b.name != "memory") {
        let (v, n) = (vault(&b.store), b.name);
        let mut c = credential(secrets[0]);
        c.refresh_token = Some(Secret::new(secrets[1]));
        v.save_credential("alice", "github", "id1", &c, Expect::Absent)
            .await
            .unwrap();
        let client = RegisteredClient {
            issuer: "https://as.example".into(),
            client_id: "client-1".into(),
            method: "client_secret_basic".into(),
            secret: Some(Secret::new(secrets[2])),
            registered_ms: 1,
        };
        v.save_client("github", "id1", &client).await.unwrap();
        let mut f = flow("alice", secrets[4]);
        f.payload = Secret::new(secrets[3]);
        v.begin_flow(f).await.unwrap();
        // Everything the store holds: no secret is in it, the metadata is (so the look was real).
        let bytes = b.bytes();
        let holds = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
        for secret in secrets {
            assert!(!holds(secret), "{n}: {secret} is stored in plaintext");
        }
        assert!(
            holds("https://as.example") && holds("read:org"),
            "{n}: nothing was read"
        );
        // And the vault still opens it all.
        let read = v
            .credential("alice", "github", "id1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.credential.access_token.expose(), secrets[0], "{n}");
        let taken = v.take_flow(secrets[4]).await.unwrap().unwrap();
        assert_eq!(taken.payload.expose(), secrets[3], "{n}");
    }
}
