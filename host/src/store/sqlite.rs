//! The embedded SQLite task store (the default), or the same in memory.
//!
//! One table: a task's record as JSON beside the columns the store itself reads (its caller for
//! the bounds, its status, version, expiry and lease). WAL mode with a busy timeout, so several
//! processes on one machine may share the file (each renewing its own leases). Calls run on
//! tokio's blocking pool; the connection is behind a mutex (tasks are few and their rows small).
//! The file is opened at the first call, not at start: a host started for one client session
//! that never runs a task never pays for it (a failure to open is that call's error, and the next
//! call tries again).
//!
//! The file is created 0600 (and so are its `-wal` and `-shm`: SQLite gives them the database's
//! mode), and a directory the host creates for it 0700. A `meta` table keeps a random key that
//! seals task records when no `request_state.keys` are configured.
//!
//! The same database keeps the upstream token vault's tables (`upstream_credentials`,
//! `upstream_clients`, `oauth_flows`, `upstream_leases`: [`super::vault`]); no key of the vault's
//! is ever kept in it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};

use super::{Lease, RawTask, StoreError, TaskRecord, TaskStatus, checks_bytes, now_ms, over_bytes};
use crate::config::TaskSettings;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    quota_key TEXT NOT NULL,
    status TEXT NOT NULL,
    version INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    runner TEXT,
    lease_until_ms INTEGER,
    record TEXT NOT NULL,
    bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tasks_by_caller ON tasks (quota_key, expires_ms);
CREATE INDEX IF NOT EXISTS tasks_by_expiry ON tasks (expires_ms);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS upstream_credentials (
    principal TEXT NOT NULL,
    upstream TEXT NOT NULL,
    identity TEXT NOT NULL,
    issuer TEXT NOT NULL,
    scopes TEXT NOT NULL,
    sealed TEXT NOT NULL,
    version INTEGER NOT NULL,
    expires_ms INTEGER,
    refresh_after_ms INTEGER,
    last_used_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (principal, upstream)
);
CREATE INDEX IF NOT EXISTS upstream_credentials_refresh
    ON upstream_credentials (refresh_after_ms);
CREATE INDEX IF NOT EXISTS upstream_credentials_by_upstream ON upstream_credentials (upstream);
CREATE TABLE IF NOT EXISTS upstream_clients (
    upstream TEXT NOT NULL,
    issuer TEXT NOT NULL,
    identity TEXT NOT NULL,
    client_id TEXT NOT NULL,
    method TEXT NOT NULL,
    sealed_secret TEXT,
    registered_ms INTEGER NOT NULL,
    PRIMARY KEY (upstream, issuer)
);
CREATE TABLE IF NOT EXISTS oauth_flows (
    state_hash TEXT PRIMARY KEY,
    flow_id TEXT UNIQUE NOT NULL,
    principal TEXT NOT NULL,
    upstream TEXT NOT NULL,
    identity TEXT NOT NULL,
    sealed TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS oauth_flows_by_principal ON oauth_flows (principal, expires_ms);
CREATE INDEX IF NOT EXISTS oauth_flows_by_expiry ON oauth_flows (expires_ms);
CREATE TABLE IF NOT EXISTS upstream_leases (
    principal TEXT NOT NULL,
    upstream TEXT NOT NULL,
    owner TEXT NOT NULL,
    until_ms INTEGER NOT NULL,
    PRIMARY KEY (principal, upstream)
);
";

/// The migration of a database of an older version (see [`migrate`]).
const ADD_BYTES: &str = "ALTER TABLE tasks ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0";

/// Bring a database of an older version to the schema: the `bytes` column.
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let has_bytes: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('tasks') WHERE name = 'bytes'",
        [],
        |r| r.get(0),
    )?;
    if has_bytes == 0 {
        conn.execute_batch(ADD_BYTES)?;
    }
    Ok(())
}

/// What a database brought to [`SCHEMA`] (and [`migrate`]d) carries as its `user_version`: a
/// hash of their text, so a changed schema or migration is a new mark and is applied again. A
/// file carrying the current mark skips both at open (parsing the schema's statements was most of
/// the work of opening the store, which every start does for the token vault's sweep).
const SCHEMA_MARK: i32 = schema_mark(&[SCHEMA, ADD_BYTES]);

/// FNV-1a over `texts`, as a positive non-zero `user_version` (0 is a fresh or older file's).
const fn schema_mark(texts: &[&str]) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    let mut t = 0;
    while t < texts.len() {
        let bytes = texts[t].as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            hash ^= bytes[i] as u32;
            hash = hash.wrapping_mul(0x0100_0193);
            i += 1;
        }
        t += 1;
    }
    ((hash & 0x7fff_ffff) | 1) as i32
}

/// Create the tables and indexes and migrate, unless the file already carries [`SCHEMA_MARK`];
/// then mark it.
fn ensure_schema(conn: &Connection) -> rusqlite::Result<()> {
    let mark: i32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if mark == SCHEMA_MARK {
        return Ok(());
    }
    conn.execute_batch(SCHEMA)?;
    migrate(conn)?;
    conn.pragma_update(None, "user_version", SCHEMA_MARK)
}

/// Create the directories up to `dir` that are missing, 0700 (a task's arguments and results
/// are the callers' data).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Create the database file 0600 when it does not exist (SQLite gives its `-wal` and `-shm` the
/// same mode); an existing one readable by others is reported.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                tracing::warn!(
                    "the task store {} is readable or writable by others (mode {:o}): tasks hold \
                     callers' arguments and results (chmod 600 it, and its -wal and -shm)",
                    path.display(),
                    mode & 0o777
                );
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Open (creating) the database at `path`: WAL mode, a busy timeout, the schema.
fn open_file(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    create_private_file(path)
        .map_err(|e| StoreError::Unavailable(format!("cannot create {}: {e}", path.display())))?;
    let conn = Connection::open(path)
        .map_err(|e| StoreError::Unavailable(format!("{}: {e}", path.display())))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(unavailable)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(unavailable)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(unavailable)?;
    ensure_schema(&conn)
        .map_err(|e| StoreError::Unavailable(format!("{}: {e}", path.display())))?;
    Ok(conn)
}

/// The SQLite store.
pub(super) struct Sqlite {
    conn: tokio::sync::OnceCell<Arc<Mutex<Connection>>>,
    /// The file, when not in memory.
    path: Option<PathBuf>,
    /// The key kept in the database (read at first need).
    key: tokio::sync::OnceCell<Vec<u8>>,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl Sqlite {
    /// A store that lives in memory.
    pub(super) fn memory() -> Sqlite {
        let conn = Connection::open_in_memory()
            .and_then(|c| c.execute_batch(SCHEMA).map(|()| c))
            .unwrap_or_else(|e| panic!("an in-memory SQLite database always opens: {e}"));
        Sqlite {
            conn: tokio::sync::OnceCell::new_with(Some(Arc::new(Mutex::new(conn)))),
            path: None,
            key: tokio::sync::OnceCell::new(),
        }
    }

    /// The store at `path`, opened (and created) at the first call.
    pub(super) fn open(path: &Path) -> Sqlite {
        Sqlite {
            conn: tokio::sync::OnceCell::new(),
            path: Some(path.to_path_buf()),
            key: tokio::sync::OnceCell::new(),
        }
    }

    /// The connection, opening the file on first use.
    async fn connection(&self) -> Result<Arc<Mutex<Connection>>, StoreError> {
        let path = self.path.clone();
        self.conn
            .get_or_try_init(|| async move {
                let path = path.ok_or_else(|| unavailable("no database"))?;
                let conn = tokio::task::spawn_blocking(move || open_file(&path))
                    .await
                    .map_err(unavailable)??;
                Ok(Arc::new(Mutex::new(conn)))
            })
            .await
            .cloned()
    }

    /// Run `f` on the connection on the blocking pool.
    pub(super) async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.connection().await?;
        tokio::task::spawn_blocking(move || {
            let mut conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut conn)
        })
        .await
        .map_err(unavailable)?
        .map_err(unavailable)
    }

    /// Whether the database answers (opening it if it was not yet).
    pub(super) async fn probe(&self) -> Result<(), StoreError> {
        self.with(|c| c.query_row("SELECT 1", [], |_| Ok(()))).await
    }

    /// The key that seals records when none is configured: random, made once and kept in the
    /// database (every process sharing the file uses the same).
    pub(super) async fn record_key(&self) -> Result<Vec<u8>, StoreError> {
        self.key
            .get_or_try_init(|| async {
                let mut fresh = [0u8; 32];
                getrandom::fill(&mut fresh).map_err(unavailable)?;
                self.with(move |conn| {
                    conn.execute(
                        "INSERT OR IGNORE INTO meta (name, value) VALUES ('record_key', ?1)",
                        params![fresh.to_vec()],
                    )?;
                    conn.query_row(
                        "SELECT value FROM meta WHERE name = 'record_key'",
                        [],
                        |r| r.get::<_, Vec<u8>>(0),
                    )
                })
                .await
            })
            .await
            .cloned()
    }

    pub(super) async fn create_task(
        &self,
        task: &TaskRecord,
        record: &str,
        lease: Option<&Lease>,
        settings: &TaskSettings,
    ) -> Result<(), StoreError> {
        let record = record.to_owned();
        let (id, key, status) = (task.id.clone(), task.quota_key.clone(), task.status);
        let expires = task.expires_ms() as i64;
        let (runner, until) = lease_columns(lease);
        let settings = settings.clone();
        let outcome = self
            .with(move |conn| {
                let (per_caller, total) = (settings.max_per_caller, settings.max_tasks);
                let tx = conn.transaction()?;
                let now = now_ms() as i64;
                tx.execute("DELETE FROM tasks WHERE expires_ms <= ?1", params![now])?;
                let (mine, mine_bytes): (i64, i64) = tx.query_row(
                    "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM tasks WHERE quota_key = ?1",
                    params![key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                if mine as usize >= per_caller {
                    return Ok(Some(StoreError::Full(format!(
                        "Too many tasks: this caller keeps {mine}, the limit is {per_caller} \
                         (tasks.max_per_caller); they expire tasks.ttl_secs after their creation"
                    ))));
                }
                let (all, all_bytes): (i64, i64) = tx.query_row(
                    "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM tasks",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                if all as usize >= total {
                    return Ok(Some(StoreError::Full(format!(
                        "Too many tasks: the server keeps {all}, the limit is {total} (tasks.max_tasks)"
                    ))));
                }
                let bytes = record.len();
                if let Some(over) = bytes_over(mine_bytes, all_bytes, bytes, &settings) {
                    return Ok(Some(over));
                }
                tx.execute(
                    "INSERT INTO tasks (id, quota_key, status, version, expires_ms, runner, \
                     lease_until_ms, record, bytes) VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8)",
                    params![id, key, status.as_str(), expires, runner, until, record, bytes as i64],
                )?;
                tx.commit()?;
                Ok(None)
            })
            .await?;
        match outcome {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    }

    /// The ids of up to `limit` unexpired tasks, those expiring last first.
    pub(super) async fn task_ids(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT id FROM tasks WHERE expires_ms > ?1 ORDER BY expires_ms DESC LIMIT ?2",
            )?;
            let ids = stmt.query_map(
                params![now_ms() as i64, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| r.get::<_, String>(0),
            )?;
            ids.collect()
        })
        .await
    }

    pub(super) async fn task(&self, id: &str) -> Result<Option<RawTask>, StoreError> {
        let id = id.to_owned();
        let row = self
            .with(move |conn| {
                conn.query_row(
                    "SELECT record, version, runner, lease_until_ms FROM tasks \
                     WHERE id = ?1 AND expires_ms > ?2",
                    params![id, now_ms() as i64],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, Option<String>>(2)?,
                            r.get::<_, Option<i64>>(3)?,
                        ))
                    },
                )
                .optional()
            })
            .await?;
        Ok(row.map(|(record, version, runner, until)| RawTask {
            record,
            version: version as u64,
            lease: runner.zip(until).map(|(runner, until)| Lease {
                runner,
                until_ms: until.max(0) as u64,
            }),
        }))
    }

    pub(super) async fn update_task(
        &self,
        task: &TaskRecord,
        record: &str,
        version: u64,
        lease: Option<&Lease>,
        settings: &TaskSettings,
    ) -> Result<bool, StoreError> {
        let record = record.to_owned();
        let (id, key, status) = (task.id.clone(), task.quota_key.clone(), task.status);
        let (runner, until) = lease_columns(lease);
        let settings = settings.clone();
        let task = task.clone();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            let now = now_ms() as i64;
            let old: Option<i64> = tx
                .query_row(
                    "SELECT bytes FROM tasks WHERE id = ?1 AND version = ?2 \
                         AND expires_ms > ?3",
                    params![id, version as i64, now],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(old) = old else {
                return Ok(Ok(false));
            };
            let bytes = record.len();
            if checks_bytes(&task, old.max(0) as usize, bytes) {
                let (mine_bytes, all_bytes): (i64, i64) = tx.query_row(
                    "SELECT COALESCE(SUM(CASE WHEN quota_key = ?1 THEN bytes END), 0), \
                         COALESCE(SUM(bytes), 0) FROM tasks WHERE expires_ms > ?2 AND id != ?3",
                    params![key, now, id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                if let Some(over) = bytes_over(mine_bytes, all_bytes, bytes, &settings) {
                    return Ok(Err(over));
                }
            }
            let changed = tx.execute(
                "UPDATE tasks SET record = ?1, status = ?2, version = version + 1, \
                     runner = ?3, lease_until_ms = ?4, bytes = ?5 \
                     WHERE id = ?6 AND version = ?7",
                params![
                    record,
                    status.as_str(),
                    runner,
                    until,
                    bytes as i64,
                    id,
                    version as i64,
                ],
            )?;
            tx.commit()?;
            Ok(Ok(changed == 1))
        })
        .await?
    }

    pub(super) async fn renew_lease(
        &self,
        id: &str,
        lease: &Lease,
    ) -> Result<Option<TaskStatus>, StoreError> {
        let (id, runner, until) = (id.to_owned(), lease.runner.clone(), lease.until_ms as i64);
        let status = self
            .with(move |conn| {
                conn.execute(
                    "UPDATE tasks SET lease_until_ms = ?1 \
                     WHERE id = ?2 AND runner = ?3 AND status = 'working'",
                    params![until, id, runner],
                )?;
                conn.query_row(
                    "SELECT status FROM tasks WHERE id = ?1 AND expires_ms > ?2",
                    params![id, now_ms() as i64],
                    |r| r.get::<_, String>(0),
                )
                .optional()
            })
            .await?;
        Ok(status.and_then(|s| serde_json::from_value(serde_json::Value::String(s)).ok()))
    }

    /// Drop expired tasks.
    pub(super) async fn sweep(&self) -> Result<usize, StoreError> {
        self.with(|conn| {
            conn.execute(
                "DELETE FROM tasks WHERE expires_ms <= ?1",
                params![now_ms() as i64],
            )
        })
        .await
    }
}

/// The refusal of a record of `bytes` when the caller's records take `mine` bytes and the store's
/// `all` (without it), if that is over a bound.
fn bytes_over(mine: i64, all: i64, bytes: usize, settings: &TaskSettings) -> Option<StoreError> {
    let (mine, all) = (mine.max(0) as u64, all.max(0) as u64);
    if mine.saturating_add(bytes as u64) > settings.max_bytes_per_caller {
        return Some(over_bytes(1, mine, bytes, settings));
    }
    if all.saturating_add(bytes as u64) > settings.max_total_bytes {
        return Some(over_bytes(2, all, bytes, settings));
    }
    None
}

fn lease_columns(lease: Option<&Lease>) -> (Option<String>, Option<i64>) {
    match lease {
        Some(l) => (Some(l.runner.clone()), Some(l.until_ms as i64)),
        None => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{open_record, sample_task as task, seal_record};
    use std::os::unix::fs::PermissionsExt as _;

    const KEY: &[u8] = b"test-key";

    async fn create(
        db: &Sqlite,
        t: &TaskRecord,
        settings: &TaskSettings,
    ) -> Result<(), StoreError> {
        let record = seal_record(&[KEY.to_vec()], t).unwrap();
        db.create_task(t, &record, None, settings).await
    }

    #[tokio::test]
    async fn a_finished_task_survives_reopening_the_file_and_expired_ones_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/tasks.sqlite");
        let settings = TaskSettings::default();
        let db_key;
        {
            let db = Sqlite::open(&path);
            let mut t = task("kept", "x");
            t.status = TaskStatus::Completed;
            t.result = Some(serde_json::json!({"content": []}));
            create(&db, &t, &settings).await.unwrap();
            let mut old = task("old", "x");
            old.created_ms -= 120_000;
            create(&db, &old, &settings).await.unwrap();
            db_key = db.record_key().await.unwrap();
        }
        let db = Sqlite::open(&path);
        let kept = db.task("kept").await.unwrap().unwrap();
        let kept = open_record(&[KEY.to_vec()], "kept", &kept.record).unwrap();
        assert_eq!(kept.status, TaskStatus::Completed);
        assert_eq!(kept.result, Some(serde_json::json!({"content": []})));
        assert!(db.task("old").await.unwrap().is_none());
        assert_eq!(db.sweep().await.unwrap(), 1);
        assert_eq!(db.record_key().await.unwrap(), db_key, "the key is kept");
        assert_eq!(db_key.len(), 32);
        // Private: the file, its WAL and shared memory 0600, the directory made for it 0700.
        for file in ["tasks.sqlite", "tasks.sqlite-wal", "tasks.sqlite-shm"] {
            let mode = std::fs::metadata(dir.path().join("state").join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
        let mode = std::fs::metadata(dir.path().join("state"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    /// The count a `SELECT COUNT(*)` query answers.
    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[tokio::test]
    async fn a_file_is_brought_to_the_schema_once_and_an_older_one_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.sqlite");
        // A file of an older version: `tasks` without `bytes`, no mark.
        {
            let old = Connection::open(&path).unwrap();
            old.execute_batch(
                "CREATE TABLE tasks (id TEXT PRIMARY KEY, quota_key TEXT NOT NULL, \
                 status TEXT NOT NULL, version INTEGER NOT NULL, expires_ms INTEGER NOT NULL, \
                 runner TEXT, lease_until_ms INTEGER, record TEXT NOT NULL);",
            )
            .unwrap();
        }
        let conn = open_file(&path).unwrap();
        let mark: i32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(
            mark, SCHEMA_MARK,
            "the file is marked as brought to the schema"
        );
        let has_bytes = count(
            &conn,
            "SELECT COUNT(*) FROM pragma_table_info('tasks') WHERE name = 'bytes'",
        );
        assert_eq!(has_bytes, 1, "migrated");
        drop(conn);
        // Marked: opened again without the schema's statements (a table dropped behind its back
        // stays dropped), and a store over it works.
        Connection::open(&path)
            .unwrap()
            .execute_batch("DROP TABLE upstream_leases")
            .unwrap();
        let conn = open_file(&path).unwrap();
        let leases = count(
            &conn,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'upstream_leases'",
        );
        assert_eq!(leases, 0, "the schema ran again on a marked file");
        drop(conn);
        let db = Sqlite::open(&path);
        create(&db, &task("t", "x"), &TaskSettings::default())
            .await
            .unwrap();
        assert!(db.task("t").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_bytes_of_stored_records_are_bounded_per_caller_and_in_total() {
        let db = Sqlite::memory();
        let t = task("a", "x");
        let size = seal_record(&[KEY.to_vec()], &t).unwrap().len() as u64;
        let settings = TaskSettings {
            max_bytes_per_caller: size * 2 + 10,
            max_total_bytes: size * 3 + 10,
            ..TaskSettings::default()
        };
        create(&db, &t, &settings).await.unwrap();
        create(&db, &task("b", "x"), &settings).await.unwrap();
        let refused = create(&db, &task("c", "x"), &settings).await;
        assert!(
            matches!(&refused, Err(StoreError::Full(m)) if m.contains("tasks.max_bytes_per_caller")),
            "{refused:?}"
        );
        create(&db, &task("c", "y"), &settings).await.unwrap();
        let refused = create(&db, &task("d", "z"), &settings).await;
        assert!(
            matches!(&refused, Err(StoreError::Full(m)) if m.contains("tasks.max_total_bytes")),
            "{refused:?}"
        );
        // A result that grows a record past the caller's bound is refused; a failure is not.
        let mut done = task("a", "x");
        done.status = TaskStatus::Completed;
        done.result = Some(serde_json::json!({"text": "x".repeat(64)}));
        let record = seal_record(&[KEY.to_vec()], &done).unwrap();
        let refused = db.update_task(&done, &record, 1, None, &settings).await;
        assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
        done.status = TaskStatus::Failed;
        done.result = None;
        done.error = Some(serde_json::json!({"code": -32603, "message": "too large"}));
        let record = seal_record(&[KEY.to_vec()], &done).unwrap();
        assert!(
            db.update_task(&done, &record, 1, None, &settings)
                .await
                .unwrap()
        );
    }
}
