//! The rows of the token vault as the store keeps them (sealed values beside plaintext
//! metadata), and [`VaultBackend`]: what a store implements to keep them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Expect, VaultFuture};
use crate::config::VaultSettings;

/// A credential row: the sealed tokens and the metadata the store reads (plaintext).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialRow {
    /// Whose.
    pub principal: String,
    /// At which upstream.
    pub upstream: String,
    /// The upstream's identity digest when the credential was obtained.
    pub identity: String,
    /// The authorization server that issued it.
    pub issuer: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// The sealed [`super::Credential`].
    pub sealed: String,
    /// Bumped by every write.
    pub version: u64,
    /// When the access token expires (Unix ms).
    pub expires_ms: Option<u64>,
    /// When a refresh is due (Unix ms).
    pub refresh_after_ms: Option<u64>,
    /// When a call last used it (Unix ms): written when the row is created, then only by
    /// [`VaultBackend::touch_credential`].
    pub last_used_ms: u64,
    /// When it was last written (Unix ms).
    pub updated_ms: u64,
}

/// A registered client row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRow {
    /// For which upstream.
    pub upstream: String,
    /// At which authorization server.
    pub issuer: String,
    /// The upstream's identity digest when it was registered.
    pub identity: String,
    /// The client id.
    pub client_id: String,
    /// The token endpoint authentication method.
    pub method: String,
    /// The sealed client secret, when it has one.
    pub sealed_secret: Option<String>,
    /// When it was registered (Unix ms).
    pub registered_ms: u64,
}

/// A pending flow row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRow {
    /// The hex SHA-256 of the OAuth `state` ([`super::state_hash`]).
    pub state_hash: String,
    /// The flow's id (in the connect URL shown to the user).
    pub flow_id: String,
    /// Whose consent.
    pub principal: String,
    /// For which upstream.
    pub upstream: String,
    /// The upstream's identity digest.
    pub identity: String,
    /// The sealed request binding, authorization URL and payload.
    pub sealed: String,
    /// Created (Unix ms).
    pub created_ms: u64,
    /// Expires (Unix ms).
    pub expires_ms: u64,
}

/// Which credential rows an operation is about (`None`: any).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowFilter<'a> {
    /// This principal's only.
    pub principal: Option<&'a str>,
    /// This upstream's only.
    pub upstream: Option<&'a str>,
}

/// What a credential write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// Written; the row's version now.
    Stored {
        /// The new version.
        version: u64,
    },
    /// The row is not as expected.
    Conflict {
        /// Its version (`None`: no row).
        found: Option<u64>,
    },
    /// A new row, but the principal holds `held` already (the bound).
    Full {
        /// How many it holds.
        held: usize,
    },
}

/// What inserting a flow did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowInsert {
    /// Kept.
    Inserted,
    /// The principal has this many pending already.
    PrincipalFull(usize),
    /// The vault has this many pending already.
    Full(usize),
    /// A pending flow has this state hash or this id already.
    Taken,
}

/// The bounds the store applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VaultBounds {
    /// Credentials per principal.
    pub connections_per_user: usize,
    /// Pending flows per principal.
    pub pending_flows_per_user: usize,
    /// Pending flows in total.
    pub pending_flows: usize,
}

impl From<&VaultSettings> for VaultBounds {
    fn from(settings: &VaultSettings) -> VaultBounds {
        VaultBounds {
            connections_per_user: settings.max_connections_per_user.max(1),
            pending_flows_per_user: settings.max_pending_flows_per_user.max(1),
            pending_flows: settings.max_pending_flows.max(1),
        }
    }
}

impl Default for VaultBounds {
    fn default() -> VaultBounds {
        VaultBounds::from(&VaultSettings::default())
    }
}

/// Where the vault's rows live: the store (SQLite, memory, Redis) implements it. Every method is
/// one atomic step of the store: a compare-and-set, a take, a lease are each decided by the store,
/// never by a read followed by a write in the caller. The backend sees sealed values only.
pub trait VaultBackend: Send + Sync + std::fmt::Debug {
    /// The credential row of `principal` at `upstream`.
    fn credential<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
    ) -> VaultFuture<'a, Option<CredentialRow>>;

    /// Write `row` (its `version` is ignored) if the row there is as `expect` says; a new row only
    /// while its principal holds fewer than `max_per_principal`. Keeps `last_used_ms` of a row
    /// that exists.
    fn put_credential<'a>(
        &'a self,
        row: &'a CredentialRow,
        expect: Expect,
        max_per_principal: usize,
    ) -> VaultFuture<'a, PutOutcome>;

    /// Record a use of the row (its `last_used_ms`), if it exists.
    fn touch_credential<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
        now_ms: u64,
    ) -> VaultFuture<'a, ()>;

    /// Delete the rows `filter` selects; the (principal, upstream) of each deleted.
    fn delete_credentials<'a>(
        &'a self,
        filter: RowFilter<'a>,
    ) -> VaultFuture<'a, Vec<(String, String)>>;

    /// Up to `limit` rows `filter` selects.
    fn credentials<'a>(
        &'a self,
        filter: RowFilter<'a>,
        limit: usize,
    ) -> VaultFuture<'a, Vec<CredentialRow>>;

    /// Up to `limit` (principal, upstream) whose refresh is due at `now_ms`, the most overdue
    /// first.
    fn due_credentials<'a>(
        &'a self,
        now_ms: u64,
        limit: usize,
    ) -> VaultFuture<'a, Vec<(String, String)>>;

    /// The client registered for `upstream` at `issuer`.
    fn client<'a>(
        &'a self,
        upstream: &'a str,
        issuer: &'a str,
    ) -> VaultFuture<'a, Option<ClientRow>>;

    /// Keep `row` (replacing the one of its upstream and issuer); past `max_per_upstream` rows
    /// for its upstream, the oldest other ones go.
    fn put_client<'a>(&'a self, row: &'a ClientRow, max_per_upstream: usize)
    -> VaultFuture<'a, ()>;

    /// Replace the sealed secret of a client if it is still `old` (re-sealing); whether it was.
    fn reseal_client<'a>(
        &'a self,
        upstream: &'a str,
        issuer: &'a str,
        old: &'a str,
        new: &'a str,
    ) -> VaultFuture<'a, bool>;

    /// The clients registered (for `upstream` only, when given).
    fn clients<'a>(&'a self, upstream: Option<&'a str>) -> VaultFuture<'a, Vec<ClientRow>>;

    /// Delete the clients registered for `upstream`; how many.
    fn delete_clients<'a>(&'a self, upstream: &'a str) -> VaultFuture<'a, usize>;

    /// Keep a new pending flow within `bounds` (expired flows do not count).
    fn insert_flow<'a>(
        &'a self,
        row: &'a FlowRow,
        bounds: VaultBounds,
        now_ms: u64,
    ) -> VaultFuture<'a, FlowInsert>;

    /// The pending flow with this id (left pending).
    fn flow<'a>(&'a self, flow_id: &'a str) -> VaultFuture<'a, Option<FlowRow>>;

    /// Remove and return the pending flow of this state hash: of two takes, one gets it.
    fn take_flow<'a>(&'a self, state_hash: &'a str) -> VaultFuture<'a, Option<FlowRow>>;

    /// Take the refresh lease of `principal` at `upstream` for `owner` until `ttl` from now, if
    /// nobody holds it (or the holder's ran out); whether it was taken.
    fn acquire_lease<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> VaultFuture<'a, bool>;

    /// Give the lease back, if `owner` still holds it; whether it did.
    fn release_lease<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
        owner: &'a str,
    ) -> VaultFuture<'a, bool>;
}
