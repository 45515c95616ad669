//! The token vault's rows in SQLite (the file store, and the memory store), in the same database
//! as tasks: tables `upstream_credentials`, `upstream_clients`, `oauth_flows` and
//! `upstream_leases` (created with the tasks' schema, `super::super::sqlite`).
//!
//! Every read-modify-write is one `BEGIN IMMEDIATE` transaction (or one statement): processes
//! sharing the file take the write lock before they read what they compare. A flow is taken by one
//! `DELETE … RETURNING`; a lease by one `INSERT … ON CONFLICT DO UPDATE … WHERE` the holder's ran
//! out. Expired flows and leases are swept with expired tasks.

use std::time::Duration;

use rusqlite::{OptionalExtension as _, Row, TransactionBehavior, params};

use crate::access::upstream::vault::{
    ClientRow, CredentialRow, Expect, FlowInsert, FlowRow, PutOutcome, RowFilter, VaultBounds,
};
use crate::store::sqlite::Sqlite;
use crate::store::{StoreError, now_ms};

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    v.max(0) as u64
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

const CREDENTIAL_COLUMNS: &str = "principal, upstream, identity, issuer, scopes, sealed, version, \
     expires_ms, refresh_after_ms, last_used_ms, updated_ms";

fn credential_row(r: &Row<'_>) -> rusqlite::Result<CredentialRow> {
    let scopes: String = r.get(4)?;
    Ok(CredentialRow {
        principal: r.get(0)?,
        upstream: r.get(1)?,
        identity: r.get(2)?,
        issuer: r.get(3)?,
        scopes: serde_json::from_str(&scopes).unwrap_or_default(),
        sealed: r.get(5)?,
        version: u(r.get(6)?),
        expires_ms: r.get::<_, Option<i64>>(7)?.map(u),
        refresh_after_ms: r.get::<_, Option<i64>>(8)?.map(u),
        last_used_ms: u(r.get(9)?),
        updated_ms: u(r.get(10)?),
    })
}

const CLIENT_COLUMNS: &str =
    "upstream, issuer, identity, client_id, method, sealed_secret, registered_ms";

fn client_row(r: &Row<'_>) -> rusqlite::Result<ClientRow> {
    Ok(ClientRow {
        upstream: r.get(0)?,
        issuer: r.get(1)?,
        identity: r.get(2)?,
        client_id: r.get(3)?,
        method: r.get(4)?,
        sealed_secret: r.get(5)?,
        registered_ms: u(r.get(6)?),
    })
}

const FLOW_COLUMNS: &str =
    "state_hash, flow_id, principal, upstream, identity, sealed, created_ms, expires_ms";

fn flow_row(r: &Row<'_>) -> rusqlite::Result<FlowRow> {
    Ok(FlowRow {
        state_hash: r.get(0)?,
        flow_id: r.get(1)?,
        principal: r.get(2)?,
        upstream: r.get(3)?,
        identity: r.get(4)?,
        sealed: r.get(5)?,
        created_ms: u(r.get(6)?),
        expires_ms: u(r.get(7)?),
    })
}

/// Insert or replace a credential; `last_used_ms` is written for a new row only.
const UPSERT_CREDENTIAL: &str = "INSERT INTO upstream_credentials (principal, upstream, identity, \
     issuer, scopes, sealed, version, expires_ms, refresh_after_ms, last_used_ms, updated_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
     ON CONFLICT (principal, upstream) DO UPDATE SET identity = excluded.identity, \
     issuer = excluded.issuer, scopes = excluded.scopes, sealed = excluded.sealed, \
     version = excluded.version, expires_ms = excluded.expires_ms, \
     refresh_after_ms = excluded.refresh_after_ms, updated_ms = excluded.updated_ms";

impl Sqlite {
    pub(in crate::store) async fn credential(
        &self,
        principal: &str,
        upstream: &str,
    ) -> Result<Option<CredentialRow>, StoreError> {
        let (p, up) = (principal.to_owned(), upstream.to_owned());
        self.with(move |conn| {
            conn.query_row(
                &format!(
                    "SELECT {CREDENTIAL_COLUMNS} FROM upstream_credentials \
                     WHERE principal = ?1 AND upstream = ?2"
                ),
                params![p, up],
                credential_row,
            )
            .optional()
        })
        .await
    }

    pub(in crate::store) async fn put_credential(
        &self,
        row: &CredentialRow,
        expect: Expect,
        max_per_principal: usize,
    ) -> Result<PutOutcome, StoreError> {
        let row = row.clone();
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let found: Option<u64> = tx
                .query_row(
                    "SELECT version FROM upstream_credentials WHERE principal = ?1 AND upstream = ?2",
                    params![row.principal, row.upstream],
                    |r| r.get::<_, i64>(0),
                )
                .optional()?
                .map(u);
            let expected = match expect {
                Expect::Absent => found.is_none(),
                Expect::Version(v) => found == Some(v),
                Expect::Any => true,
            };
            if !expected {
                return Ok(PutOutcome::Conflict { found });
            }
            if found.is_none() {
                let held: i64 = tx.query_row(
                    "SELECT COUNT(*) FROM upstream_credentials WHERE principal = ?1",
                    params![row.principal],
                    |r| r.get(0),
                )?;
                if u(held) as usize >= max_per_principal {
                    return Ok(PutOutcome::Full { held: u(held) as usize });
                }
            }
            let version = found.unwrap_or(0) + 1;
            let scopes = serde_json::to_string(&row.scopes).unwrap_or_else(|_| "[]".into());
            tx.execute(
                UPSERT_CREDENTIAL,
                params![
                    row.principal,
                    row.upstream,
                    row.identity,
                    row.issuer,
                    scopes,
                    row.sealed,
                    i(version),
                    row.expires_ms.map(i),
                    row.refresh_after_ms.map(i),
                    i(row.last_used_ms),
                    i(row.updated_ms),
                ],
            )?;
            tx.commit()?;
            Ok(PutOutcome::Stored { version })
        })
        .await
    }

    pub(in crate::store) async fn touch_credential(
        &self,
        principal: &str,
        upstream: &str,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let (p, up) = (principal.to_owned(), upstream.to_owned());
        self.with(move |conn| {
            conn.execute(
                "UPDATE upstream_credentials SET last_used_ms = MAX(last_used_ms, ?3) \
                 WHERE principal = ?1 AND upstream = ?2",
                params![p, up, i(now_ms)],
            )
            .map(drop)
        })
        .await
    }

    pub(in crate::store) async fn delete_credentials(
        &self,
        filter: RowFilter<'_>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let p = filter.principal.map(str::to_owned);
        let up = filter.upstream.map(str::to_owned);
        self.with(move |conn| {
            let mut stmt = conn.prepare(
                "DELETE FROM upstream_credentials WHERE (?1 IS NULL OR principal = ?1) \
                 AND (?2 IS NULL OR upstream = ?2) RETURNING principal, upstream",
            )?;
            let rows = stmt.query_map(params![p, up], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
        .await
    }

    pub(in crate::store) async fn credentials(
        &self,
        filter: RowFilter<'_>,
        max: usize,
    ) -> Result<Vec<CredentialRow>, StoreError> {
        let p = filter.principal.map(str::to_owned);
        let up = filter.upstream.map(str::to_owned);
        self.with(move |conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {CREDENTIAL_COLUMNS} FROM upstream_credentials \
                 WHERE (?1 IS NULL OR principal = ?1) AND (?2 IS NULL OR upstream = ?2) \
                 ORDER BY principal, upstream LIMIT ?3"
            ))?;
            let rows = stmt.query_map(params![p, up, limit(max)], credential_row)?;
            rows.collect()
        })
        .await
    }

    pub(in crate::store) async fn due_credentials(
        &self,
        now_ms: u64,
        max: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT principal, upstream FROM upstream_credentials \
                 WHERE refresh_after_ms IS NOT NULL AND refresh_after_ms <= ?1 \
                 ORDER BY refresh_after_ms LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![i(now_ms), limit(max)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
            rows.collect()
        })
        .await
    }

    pub(in crate::store) async fn client(
        &self,
        upstream: &str,
        issuer: &str,
    ) -> Result<Option<ClientRow>, StoreError> {
        let (up, iss) = (upstream.to_owned(), issuer.to_owned());
        self.with(move |conn| {
            conn.query_row(
                &format!(
                    "SELECT {CLIENT_COLUMNS} FROM upstream_clients \
                     WHERE upstream = ?1 AND issuer = ?2"
                ),
                params![up, iss],
                client_row,
            )
            .optional()
        })
        .await
    }

    pub(in crate::store) async fn put_client(
        &self,
        row: &ClientRow,
        max_per_upstream: usize,
    ) -> Result<(), StoreError> {
        let row = row.clone();
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                &format!(
                    "INSERT INTO upstream_clients ({CLIENT_COLUMNS}) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                     ON CONFLICT (upstream, issuer) DO UPDATE SET identity = excluded.identity, \
                     client_id = excluded.client_id, method = excluded.method, \
                     sealed_secret = excluded.sealed_secret, registered_ms = excluded.registered_ms"
                ),
                params![
                    row.upstream,
                    row.issuer,
                    row.identity,
                    row.client_id,
                    row.method,
                    row.sealed_secret,
                    i(row.registered_ms),
                ],
            )?;
            // The others of this upstream beyond the bound, oldest first.
            tx.execute(
                "DELETE FROM upstream_clients WHERE upstream = ?1 AND issuer != ?2 AND issuer NOT IN \
                 (SELECT issuer FROM upstream_clients WHERE upstream = ?1 AND issuer != ?2 \
                  ORDER BY registered_ms DESC LIMIT ?3)",
                params![
                    row.upstream,
                    row.issuer,
                    limit(max_per_upstream.saturating_sub(1))
                ],
            )?;
            tx.commit()
        })
        .await
    }

    pub(in crate::store) async fn reseal_client(
        &self,
        upstream: &str,
        issuer: &str,
        old: &str,
        new: &str,
    ) -> Result<bool, StoreError> {
        let args = [upstream, issuer, old, new].map(str::to_owned);
        self.with(move |conn| {
            conn.execute(
                "UPDATE upstream_clients SET sealed_secret = ?4 \
                 WHERE upstream = ?1 AND issuer = ?2 AND sealed_secret = ?3",
                params![args[0], args[1], args[2], args[3]],
            )
            .map(|n| n == 1)
        })
        .await
    }

    pub(in crate::store) async fn clients(
        &self,
        upstream: Option<&str>,
    ) -> Result<Vec<ClientRow>, StoreError> {
        let up = upstream.map(str::to_owned);
        self.with(move |conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {CLIENT_COLUMNS} FROM upstream_clients WHERE (?1 IS NULL OR upstream = ?1) \
                 ORDER BY upstream, issuer"
            ))?;
            let rows = stmt.query_map(params![up], client_row)?;
            rows.collect()
        })
        .await
    }

    pub(in crate::store) async fn delete_clients(
        &self,
        upstream: &str,
    ) -> Result<usize, StoreError> {
        let up = upstream.to_owned();
        self.with(move |conn| {
            conn.execute(
                "DELETE FROM upstream_clients WHERE upstream = ?1",
                params![up],
            )
        })
        .await
    }

    pub(in crate::store) async fn insert_flow(
        &self,
        row: &FlowRow,
        bounds: VaultBounds,
        now_ms: u64,
    ) -> Result<FlowInsert, StoreError> {
        let row = row.clone();
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "DELETE FROM oauth_flows WHERE expires_ms <= ?1",
                params![i(now_ms)],
            )?;
            let mine: i64 = tx.query_row(
                "SELECT COUNT(*) FROM oauth_flows WHERE principal = ?1",
                params![row.principal],
                |r| r.get(0),
            )?;
            if u(mine) as usize >= bounds.pending_flows_per_user {
                return Ok(FlowInsert::PrincipalFull(u(mine) as usize));
            }
            let all: i64 = tx.query_row("SELECT COUNT(*) FROM oauth_flows", [], |r| r.get(0))?;
            if u(all) as usize >= bounds.pending_flows {
                return Ok(FlowInsert::Full(u(all) as usize));
            }
            let taken: Option<i64> = tx
                .query_row(
                    "SELECT 1 FROM oauth_flows WHERE state_hash = ?1 OR flow_id = ?2",
                    params![row.state_hash, row.flow_id],
                    |r| r.get(0),
                )
                .optional()?;
            if taken.is_some() {
                return Ok(FlowInsert::Taken);
            }
            tx.execute(
                &format!(
                    "INSERT INTO oauth_flows ({FLOW_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                ),
                params![
                    row.state_hash,
                    row.flow_id,
                    row.principal,
                    row.upstream,
                    row.identity,
                    row.sealed,
                    i(row.created_ms),
                    i(row.expires_ms),
                ],
            )?;
            tx.commit()?;
            Ok(FlowInsert::Inserted)
        })
        .await
    }

    pub(in crate::store) async fn flow(
        &self,
        flow_id: &str,
    ) -> Result<Option<FlowRow>, StoreError> {
        let id = flow_id.to_owned();
        self.with(move |conn| {
            conn.query_row(
                &format!(
                    "SELECT {FLOW_COLUMNS} FROM oauth_flows WHERE flow_id = ?1 AND expires_ms > ?2"
                ),
                params![id, i(now_ms())],
                flow_row,
            )
            .optional()
        })
        .await
    }

    pub(in crate::store) async fn take_flow(
        &self,
        state_hash: &str,
    ) -> Result<Option<FlowRow>, StoreError> {
        let hash = state_hash.to_owned();
        let row = self
            .with(move |conn| {
                conn.query_row(
                    &format!(
                        "DELETE FROM oauth_flows WHERE state_hash = ?1 RETURNING {FLOW_COLUMNS}"
                    ),
                    params![hash],
                    flow_row,
                )
                .optional()
            })
            .await?;
        Ok(row.filter(|r| r.expires_ms > now_ms()))
    }

    pub(in crate::store) async fn acquire_lease(
        &self,
        principal: &str,
        upstream: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let args = [principal, upstream, owner].map(str::to_owned);
        self.with(move |conn| {
            let now = now_ms();
            let until = now.saturating_add(ttl.as_millis() as u64);
            conn.execute(
                "INSERT INTO upstream_leases (principal, upstream, owner, until_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (principal, upstream) DO UPDATE \
                 SET owner = excluded.owner, until_ms = excluded.until_ms \
                 WHERE upstream_leases.until_ms <= ?5",
                params![args[0], args[1], args[2], i(until), i(now)],
            )
            .map(|n| n == 1)
        })
        .await
    }

    pub(in crate::store) async fn release_lease(
        &self,
        principal: &str,
        upstream: &str,
        owner: &str,
    ) -> Result<bool, StoreError> {
        let args = [principal, upstream, owner].map(str::to_owned);
        self.with(move |conn| {
            conn.execute(
                "DELETE FROM upstream_leases WHERE principal = ?1 AND upstream = ?2 AND owner = ?3",
                params![args[0], args[1], args[2]],
            )
            .map(|n| n == 1)
        })
        .await
    }

    /// Drop expired flows and leases; how many.
    pub(in crate::store) async fn sweep_vault(&self) -> Result<usize, StoreError> {
        self.with(|conn| {
            let now = i(now_ms());
            let flows = conn.execute(
                "DELETE FROM oauth_flows WHERE expires_ms <= ?1",
                params![now],
            )?;
            let leases = conn.execute(
                "DELETE FROM upstream_leases WHERE until_ms <= ?1",
                params![now],
            )?;
            Ok(flows + leases)
        })
        .await
    }
}
