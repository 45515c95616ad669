//! The token vault: the persistent home of the credentials the host obtains for its users at
//! upstream servers, shared by every replica through the store.
//!
//! What it keeps, each as a row of the store ([`VaultBackend`], implemented by `store`):
//!
//! - **credentials** per (principal, upstream): the tokens, sealed ([`super::sealing`]), beside
//!   the metadata the store itself reads (issuer, scopes, expiry, when to refresh, when last used);
//!   every write is a compare-and-set on the row's version ([`Expect`]), so two replicas never
//!   overwrite each other's refresh;
//! - **registered clients** per (upstream, issuer): the client id and its (sealed) secret that
//!   dynamic registration or the configuration gave; a client is bound to its issuer (SEP-2352) and
//!   never returned for another one;
//! - **pending consent flows**: what the callback of an authorization needs (the PKCE verifier,
//!   the expected issuer, the request it answers), sealed, found by the SHA-256 of the OAuth
//!   `state` (the state itself is never stored), bound to a principal, an upstream and a request,
//!   with a time to live, and **taken** at most once (atomically: two callbacks with the same state
//!   never both get it);
//! - **refresh leases** per (principal, upstream): one replica at a time refreshes a credential,
//!   with an owner and an expiry (a replica that stops leaves a lease that runs out).
//!
//! Bounds: credentials per principal, pending flows per principal and in total
//! (`upstream_auth.vault.*`), registered clients per upstream, and the size of every field (a
//! token is what an authorization server sent: bounded like everything a stranger sends).
//!
//! A row that does not open (changed in the store, copied from another row, sealed under a key no
//! longer configured, or written for another identity of the upstream) is treated as absent and
//! logged without its contents, like a task record.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use super::sealing::{Binding, SealError, Secret, VaultKeys, sealed_key_id};

mod backend;
mod stale;

pub use backend::{
    ClientRow, CredentialRow, FlowInsert, FlowRow, PutOutcome, RowFilter, VaultBackend, VaultBounds,
};

/// What a backend operation returns.
pub type VaultFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, VaultError>> + Send + 'a>>;

/// The most bytes of a principal or an upstream name.
pub const MAX_NAME_BYTES: usize = 1024;
/// The most bytes of an issuer, a client id, a token type or a request binding.
pub const MAX_FIELD_BYTES: usize = 4096;
/// The most bytes of one secret (a token, a client secret, an authorization URL, a flow's
/// payload).
pub const MAX_SECRET_BYTES: usize = 32 * 1024;
/// The most scopes one credential lists, and their bytes together.
pub const MAX_SCOPES: usize = 256;
const MAX_SCOPE_BYTES: usize = 16 * 1024;
/// Registered clients kept per upstream (one per authorization server it named); registering at
/// one more drops the oldest.
pub const MAX_CLIENTS_PER_UPSTREAM: usize = 16;
/// The longest a pending flow lives.
pub const MAX_FLOW_TTL: Duration = Duration::from_secs(24 * 3600);

/// Why the vault could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    /// The store cannot be reached or failed.
    #[error("the token vault is unavailable: {0}")]
    Unavailable(String),
    /// A bound is reached (the message names the key).
    #[error("{0}")]
    Full(String),
    /// The credential changed (or appeared, or went) since it was read: re-read and retry.
    #[error("the credential changed since it was read (it is now at version {found:?})")]
    Conflict {
        /// The version found (`None`: no row).
        found: Option<u64>,
    },
    /// A value could not be sealed.
    #[error("cannot seal a vault row: {0}")]
    Seal(#[from] SealError),
    /// A field is empty or too large (what an authorization server sent is bounded).
    #[error("{0}")]
    Invalid(String),
}

/// What a write expects of the row it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No row yet.
    Absent,
    /// The row at this version.
    Version(u64),
    /// Whatever is there (a fresh consent replaces the old credential).
    Any,
}

// ---------------------------------------------------------------------------------------------
// What the rows hold, opened

/// A credential the host holds for one user at one upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Credential {
    /// The access token (or a user's API key, for upstreams without OAuth).
    pub access_token: Secret,
    /// The refresh token, when the authorization server gave one.
    pub refresh_token: Option<Secret>,
    /// `Bearer`, ...
    pub token_type: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// The authorization server that issued it (its metadata's `issuer`).
    pub issuer: String,
    /// The client it was issued to.
    pub client_id: String,
    /// When the access token expires (Unix ms), when known.
    pub expires_at_ms: Option<u64>,
    /// When to refresh it (Unix ms); `None`: never by the background refresher.
    pub refresh_after_ms: Option<u64>,
    /// When it was obtained (Unix ms).
    pub received_at_ms: u64,
}

/// A credential and its row's state.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCredential {
    /// The credential.
    pub credential: Credential,
    /// The row's version (for [`Expect::Version`]).
    pub version: u64,
    /// When the row was last written (Unix ms).
    pub updated_ms: u64,
    /// When a call last used it (Unix ms).
    pub last_used_ms: u64,
}

/// Who is connected where (what `mcp-host vault list` and the console show): a row's metadata,
/// never its secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connection {
    /// Whose.
    pub principal: String,
    /// At which upstream.
    pub upstream: String,
    /// The upstream's identity digest it was obtained for.
    pub identity: String,
    /// The authorization server that issued it.
    pub issuer: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// When the access token expires (Unix ms).
    pub expires_ms: Option<u64>,
    /// When a refresh is due (Unix ms).
    pub refresh_after_ms: Option<u64>,
    /// When it was last written (Unix ms).
    pub updated_ms: u64,
    /// When a call last used it (Unix ms).
    pub last_used_ms: u64,
    /// The row's version.
    pub version: u64,
    /// The id of the key it is sealed under.
    pub key_id: Option<String>,
}

impl From<&CredentialRow> for Connection {
    fn from(row: &CredentialRow) -> Connection {
        Connection {
            principal: row.principal.clone(),
            upstream: row.upstream.clone(),
            identity: row.identity.clone(),
            issuer: row.issuer.clone(),
            scopes: row.scopes.clone(),
            expires_ms: row.expires_ms,
            refresh_after_ms: row.refresh_after_ms,
            updated_ms: row.updated_ms,
            last_used_ms: row.last_used_ms,
            version: row.version,
            key_id: sealed_key_id(&row.sealed).map(str::to_owned),
        }
    }
}

/// A client registered at an authorization server for an upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredClient {
    /// The authorization server (its metadata's `issuer`).
    pub issuer: String,
    /// The client id.
    pub client_id: String,
    /// The token endpoint authentication method (`none`, `client_secret_basic`, ...).
    pub method: String,
    /// The client secret, when it has one.
    pub secret: Option<Secret>,
    /// When it was registered (Unix ms).
    pub registered_ms: u64,
}

/// A consent flow to keep until its callback.
#[derive(Debug, Clone)]
pub struct NewFlow {
    /// Whose consent (the user the callback must come back for).
    pub principal: String,
    /// For which upstream.
    pub upstream: String,
    /// The upstream's identity digest.
    pub identity: String,
    /// The OAuth `state` sent to the authorization server (only its hash is stored).
    pub state: Secret,
    /// What the flow answers (the call or question it is bound to).
    pub request: String,
    /// The authorization URL the connect page redirects to.
    pub authorization_url: Secret,
    /// What the callback needs (the PKCE verifier, the expected issuer, ...), opaque to the vault.
    pub payload: Secret,
    /// How long it may wait for its callback (at most [`MAX_FLOW_TTL`]).
    pub ttl: Duration,
}

/// A pending consent flow, opened.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingFlow {
    /// Its id.
    pub flow_id: String,
    /// Whose consent.
    pub principal: String,
    /// For which upstream.
    pub upstream: String,
    /// The upstream's identity digest.
    pub identity: String,
    /// What it answers.
    pub request: String,
    /// The authorization URL.
    pub authorization_url: Secret,
    /// What the callback needs.
    pub payload: Secret,
    /// Created (Unix ms).
    pub created_ms: u64,
    /// Expires (Unix ms).
    pub expires_ms: u64,
}

/// What taking a flow by its state found.
#[derive(Debug, Clone, PartialEq)]
pub enum Taken {
    /// A pending flow (now taken: nobody else gets it).
    Pending(PendingFlow),
    /// A flow past its time to live (taken and gone too).
    Expired {
        /// Whose it was.
        principal: String,
        /// For which upstream.
        upstream: String,
    },
    /// No such flow: never made, already taken, or one that does not open.
    Unknown,
}

/// A refresh lease held by this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshLease {
    /// Whose credential.
    pub principal: String,
    /// At which upstream.
    pub upstream: String,
    /// This holder (the replica and a random part: two holders on one replica differ).
    pub owner: String,
}

/// What a revocation at the authorization server did before the vault deleted a credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome", content = "detail")]
pub enum AtServer {
    /// Revoked (RFC 7009).
    Revoked,
    /// The authorization server offers no revocation endpoint.
    NotOffered,
    /// Revocation was attempted and failed (the credential is deleted anyway).
    Failed(String),
    /// Not attempted (why).
    Skipped(String),
}

/// The hook that revokes a credential at the authorization server that issued it (RFC 7009)
/// before [`Vault::revoke`] deletes it: the OAuth engine implements it; [`DeleteOnly`] does not
/// revoke.
pub trait Revocation: Send + Sync {
    /// Revoke `credential` of `principal` at `upstream` (best effort: the row goes anyway).
    fn revoke<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
        credential: &'a Credential,
    ) -> Pin<Box<dyn Future<Output = AtServer> + Send + 'a>>;
}

/// Deletes without revoking at the authorization server.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteOnly;

impl Revocation for DeleteOnly {
    fn revoke<'a>(
        &'a self,
        _principal: &'a str,
        _upstream: &'a str,
        _credential: &'a Credential,
    ) -> Pin<Box<dyn Future<Output = AtServer> + Send + 'a>> {
        Box::pin(std::future::ready(AtServer::Skipped(
            "this version does not revoke at the authorization server (RFC 7009) yet: the token \
             stays valid there until it expires"
                .into(),
        )))
    }
}

/// A deleted credential and what revocation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Revoked {
    /// Who was connected where.
    #[serde(flatten)]
    pub connection: Connection,
    /// What revocation at the authorization server did.
    pub at_authorization_server: AtServer,
}

/// What `rotate` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Rotation {
    /// The key that seals now.
    pub key_id: String,
    /// Rows re-sealed under it.
    pub resealed: usize,
    /// Rows sealed under it already.
    pub current: usize,
    /// Rows that do not open under any configured key (left as they are): which and why.
    pub unreadable: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// The sealed payloads

#[derive(Serialize)]
struct CredentialOut<'a> {
    access_token: &'a str,
    refresh_token: Option<&'a str>,
    token_type: &'a str,
    scopes: &'a [String],
    issuer: &'a str,
    client_id: &'a str,
    expires_at_ms: Option<u64>,
    refresh_after_ms: Option<u64>,
    received_at_ms: u64,
}

#[derive(Deserialize)]
struct CredentialIn {
    access_token: String,
    refresh_token: Option<String>,
    token_type: String,
    scopes: Vec<String>,
    issuer: String,
    client_id: String,
    expires_at_ms: Option<u64>,
    refresh_after_ms: Option<u64>,
    received_at_ms: u64,
}

#[derive(Serialize)]
struct FlowOut<'a> {
    request: &'a str,
    authorization_url: &'a str,
    payload: &'a str,
}

#[derive(Deserialize)]
struct FlowIn {
    request: String,
    authorization_url: String,
    payload: String,
}

/// `value` as JSON in a buffer zeroized when dropped, allocated once at its exact size (a growing
/// buffer would leave copies of the secrets it holds behind).
fn sealed_json(value: &impl Serialize) -> Result<Zeroizing<Vec<u8>>, VaultError> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let unwritable = |e: serde_json::Error| VaultError::Invalid(format!("unwritable: {e}"));
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_err(unwritable)?;
    let mut out = Zeroizing::new(Vec::with_capacity(count.0));
    serde_json::to_writer(&mut *out, value).map_err(unwritable)?;
    Ok(out)
}

/// What a sealed payload opened to.
fn opened_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, SealError> {
    serde_json::from_slice(bytes).map_err(|e| SealError::Unreadable(e.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Checks

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `value` (named `what`) is not empty and at most `max` bytes.
fn bounded(what: &str, value: &str, max: usize) -> Result<(), VaultError> {
    if value.is_empty() {
        return Err(VaultError::Invalid(format!("{what} is empty")));
    }
    if value.len() > max {
        return Err(VaultError::Invalid(format!(
            "{what} is {} bytes, more than the vault keeps ({max})",
            value.len()
        )));
    }
    Ok(())
}

fn check_names(principal: &str, upstream: &str) -> Result<(), VaultError> {
    bounded("the principal", principal, MAX_NAME_BYTES)?;
    bounded("the upstream", upstream, MAX_NAME_BYTES)
}

fn check_credential(c: &Credential) -> Result<(), VaultError> {
    bounded(
        "the access token",
        c.access_token.expose(),
        MAX_SECRET_BYTES,
    )?;
    if let Some(refresh) = &c.refresh_token {
        bounded("the refresh token", refresh.expose(), MAX_SECRET_BYTES)?;
    }
    bounded("the token type", &c.token_type, MAX_FIELD_BYTES)?;
    bounded("the issuer", &c.issuer, MAX_FIELD_BYTES)?;
    if c.client_id.len() > MAX_FIELD_BYTES {
        return Err(VaultError::Invalid("the client id is too long".into()));
    }
    let scope_bytes: usize = c.scopes.iter().map(String::len).sum();
    if c.scopes.len() > MAX_SCOPES || scope_bytes > MAX_SCOPE_BYTES {
        return Err(VaultError::Invalid(format!(
            "{} scopes of {scope_bytes} bytes: more than the vault keeps ({MAX_SCOPES}, \
             {MAX_SCOPE_BYTES} bytes)",
            c.scopes.len()
        )));
    }
    Ok(())
}

/// The hex SHA-256 of an OAuth `state`: what a pending flow is found by (the state itself is
/// never stored).
pub fn state_hash(state: &str) -> String {
    Sha256::digest(state.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// 128 random bits, base64url.
fn random_id() -> Result<String, VaultError> {
    use base64::Engine as _;
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| VaultError::Seal(SealError::Random))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

// ---------------------------------------------------------------------------------------------
// The vault

/// The keys and bounds in force (replaced together at a configuration reload).
#[derive(Debug)]
struct Settings {
    keys: VaultKeys,
    bounds: VaultBounds,
}

/// The token vault over a store's [`VaultBackend`].
#[derive(Clone)]
pub struct Vault {
    backend: Arc<dyn VaultBackend>,
    settings: Arc<ArcSwap<Settings>>,
    /// This replica's name (in lease owners).
    replica: Arc<str>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("backend", &self.backend)
            .field("keys", &self.settings.load().keys)
            .finish_non_exhaustive()
    }
}

impl Vault {
    /// The vault over `backend`, sealing under `keys`, within `bounds`; `replica` names this
    /// process in the leases it takes.
    pub fn new(
        backend: Arc<dyn VaultBackend>,
        keys: VaultKeys,
        bounds: VaultBounds,
        replica: &str,
    ) -> Vault {
        Vault {
            backend,
            settings: Arc::new(ArcSwap::from_pointee(Settings { keys, bounds })),
            replica: replica.into(),
        }
    }

    /// Seal and open with `keys`, within `bounds`, from now on (a configuration reload).
    pub fn configure(&self, keys: VaultKeys, bounds: VaultBounds) {
        self.settings.store(Arc::new(Settings { keys, bounds }));
    }

    /// The ids of the keys in force, the sealing one first.
    pub fn key_ids(&self) -> Vec<String> {
        let settings = self.settings.load();
        settings.keys.ids().into_iter().map(str::to_owned).collect()
    }

    fn refused(&self, what: &str, why: &SealError) {
        tracing::warn!("the vault's {what} is refused and treated as absent: {why}");
    }

    // -----------------------------------------------------------------------------------------
    // Credentials

    /// The credential of `principal` at `upstream`, if one was obtained for the upstream's
    /// current `identity` and opens.
    pub async fn credential(
        &self,
        principal: &str,
        upstream: &str,
        identity: &str,
    ) -> Result<Option<StoredCredential>, VaultError> {
        let Some(row) = self.backend.credential(principal, upstream).await? else {
            return Ok(None);
        };
        if row.identity != identity {
            tracing::info!(
                "the vault's credential of {principal} at {upstream} was obtained for another \
                 configuration of the upstream: treated as absent"
            );
            return Ok(None);
        }
        match self.open_credential(&row) {
            Ok(stored) => Ok(Some(stored)),
            Err(why) => {
                self.refused(&format!("credential of {principal} at {upstream}"), &why);
                Ok(None)
            }
        }
    }

    fn open_credential(&self, row: &CredentialRow) -> Result<StoredCredential, SealError> {
        let binding = Binding::credential(&row.principal, &row.upstream, &row.identity);
        let opened = self.settings.load().keys.open(&binding, &row.sealed)?;
        let c: CredentialIn = opened_json(&opened)?;
        Ok(StoredCredential {
            credential: Credential {
                access_token: Secret::new(c.access_token),
                refresh_token: c.refresh_token.map(Secret::new),
                token_type: c.token_type,
                scopes: c.scopes,
                issuer: c.issuer,
                client_id: c.client_id,
                expires_at_ms: c.expires_at_ms,
                refresh_after_ms: c.refresh_after_ms,
                received_at_ms: c.received_at_ms,
            },
            version: row.version,
            updated_ms: row.updated_ms,
            last_used_ms: row.last_used_ms,
        })
    }

    fn seal_credential(
        &self,
        principal: &str,
        upstream: &str,
        identity: &str,
        c: &Credential,
    ) -> Result<CredentialRow, VaultError> {
        let json = sealed_json(&CredentialOut {
            access_token: c.access_token.expose(),
            refresh_token: c.refresh_token.as_ref().map(Secret::expose),
            token_type: &c.token_type,
            scopes: &c.scopes,
            issuer: &c.issuer,
            client_id: &c.client_id,
            expires_at_ms: c.expires_at_ms,
            refresh_after_ms: c.refresh_after_ms,
            received_at_ms: c.received_at_ms,
        })?;
        let binding = Binding::credential(principal, upstream, identity);
        let sealed = self.settings.load().keys.seal(&binding, &json)?;
        let now = now_ms();
        Ok(CredentialRow {
            principal: principal.to_owned(),
            upstream: upstream.to_owned(),
            identity: identity.to_owned(),
            issuer: c.issuer.clone(),
            scopes: c.scopes.clone(),
            sealed,
            version: 0,
            expires_ms: c.expires_at_ms,
            refresh_after_ms: c.refresh_after_ms,
            last_used_ms: now,
            updated_ms: now,
        })
    }

    /// Keep `credential` for `principal` at `upstream` (of identity digest `identity`), sealed,
    /// if the row is as `expect` says; the row's new version. A changed row is
    /// [`VaultError::Conflict`]; one upstream more than `max_connections_per_user` is
    /// [`VaultError::Full`].
    pub async fn save_credential(
        &self,
        principal: &str,
        upstream: &str,
        identity: &str,
        credential: &Credential,
        expect: Expect,
    ) -> Result<u64, VaultError> {
        check_names(principal, upstream)?;
        bounded("the identity", identity, MAX_FIELD_BYTES)?;
        check_credential(credential)?;
        let row = self.seal_credential(principal, upstream, identity, credential)?;
        let max = self.settings.load().bounds.connections_per_user;
        match self.backend.put_credential(&row, expect, max).await? {
            PutOutcome::Stored { version } => Ok(version),
            PutOutcome::Conflict { found } => Err(VaultError::Conflict { found }),
            PutOutcome::Full { held } => Err(VaultError::Full(format!(
                "Too many upstream connections: {principal} holds {held}, the limit is {max} \
                 (upstream_auth.vault.max_connections_per_user); disconnect one first"
            ))),
        }
    }

    /// Record that a call used the credential (a credential nobody uses is left to expire rather
    /// than refreshed forever).
    pub async fn mark_used(&self, principal: &str, upstream: &str) -> Result<(), VaultError> {
        self.backend
            .touch_credential(principal, upstream, now_ms())
            .await
    }

    /// Up to `limit` (principal, upstream) whose refresh is due now.
    pub async fn due_for_refresh(&self, limit: usize) -> Result<Vec<(String, String)>, VaultError> {
        self.backend.due_credentials(now_ms(), limit).await
    }

    /// Who is connected where (`filter` narrows it): metadata only, nothing is opened.
    pub async fn connections(&self, filter: RowFilter<'_>) -> Result<Vec<Connection>, VaultError> {
        let rows = self.backend.credentials(filter, usize::MAX).await?;
        Ok(rows.iter().map(Connection::from).collect())
    }

    /// Delete the credential of `principal` at `upstream` (without revoking it); whether there
    /// was one.
    pub async fn remove_credential(
        &self,
        principal: &str,
        upstream: &str,
    ) -> Result<bool, VaultError> {
        let filter = RowFilter {
            principal: Some(principal),
            upstream: Some(upstream),
        };
        Ok(!self.backend.delete_credentials(filter).await?.is_empty())
    }

    /// Delete everything kept for `upstream` (its identity changed, or it was removed): its
    /// credentials and registered clients; how many of each.
    pub async fn remove_upstream(&self, upstream: &str) -> Result<(usize, usize), VaultError> {
        let filter = RowFilter {
            principal: None,
            upstream: Some(upstream),
        };
        let credentials = self.backend.delete_credentials(filter).await?.len();
        let clients = self.backend.delete_clients(upstream).await?;
        Ok((credentials, clients))
    }

    /// Revoke and delete the credentials of `principal` (at `upstream` only, when given):
    /// `revocation` revokes each at its authorization server first (best effort), then the row
    /// is deleted whatever it answered. What was deleted.
    pub async fn revoke(
        &self,
        principal: &str,
        upstream: Option<&str>,
        revocation: &dyn Revocation,
    ) -> Result<Vec<Revoked>, VaultError> {
        let filter = RowFilter {
            principal: Some(principal),
            upstream,
        };
        let rows = self.backend.credentials(filter, usize::MAX).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.extend(self.revoke_row(&row, revocation).await?);
        }
        Ok(out)
    }

    /// Revoke `row`'s credential with `revocation` (best effort; a row that does not open is
    /// only deleted), then delete the row whatever it answered. What was deleted, `None` when the
    /// row went meanwhile.
    async fn revoke_row(
        &self,
        row: &CredentialRow,
        revocation: &dyn Revocation,
    ) -> Result<Option<Revoked>, VaultError> {
        let at_server = match self.open_credential(row) {
            Ok(stored) => {
                revocation
                    .revoke(&row.principal, &row.upstream, &stored.credential)
                    .await
            }
            Err(why) => AtServer::Skipped(format!("the row does not open: {why}")),
        };
        let one = RowFilter {
            principal: Some(&row.principal),
            upstream: Some(&row.upstream),
        };
        let deleted = self.backend.delete_credentials(one).await?;
        Ok((!deleted.is_empty()).then(|| Revoked {
            connection: Connection::from(row),
            at_authorization_server: at_server,
        }))
    }

    // -----------------------------------------------------------------------------------------
    // Registered clients

    /// The client registered for `upstream` (of identity `identity`) at `issuer`: never one
    /// registered at another issuer, nor for another identity of the upstream.
    pub async fn client(
        &self,
        upstream: &str,
        issuer: &str,
        identity: &str,
    ) -> Result<Option<RegisteredClient>, VaultError> {
        let Some(row) = self.backend.client(upstream, issuer).await? else {
            return Ok(None);
        };
        if row.issuer != issuer || row.identity != identity {
            return Ok(None);
        }
        match self.open_client(&row) {
            Ok(client) => Ok(Some(client)),
            Err(why) => {
                self.refused(&format!("client of {upstream} at {issuer}"), &why);
                Ok(None)
            }
        }
    }

    fn open_client(&self, row: &ClientRow) -> Result<RegisteredClient, SealError> {
        let secret = match &row.sealed_secret {
            Some(sealed) => {
                let binding =
                    Binding::client(&row.upstream, &row.identity, &row.issuer, &row.client_id);
                let opened = self.settings.load().keys.open(&binding, sealed)?;
                let text = std::str::from_utf8(&opened)
                    .map_err(|e| SealError::Unreadable(e.to_string()))?;
                Some(Secret::new(text))
            }
            None => None,
        };
        Ok(RegisteredClient {
            issuer: row.issuer.clone(),
            client_id: row.client_id.clone(),
            method: row.method.clone(),
            secret,
            registered_ms: row.registered_ms,
        })
    }

    /// Keep `client`, registered for `upstream` (of identity `identity`) at its issuer,
    /// replacing the one registered there before.
    pub async fn save_client(
        &self,
        upstream: &str,
        identity: &str,
        client: &RegisteredClient,
    ) -> Result<(), VaultError> {
        bounded("the upstream", upstream, MAX_NAME_BYTES)?;
        bounded("the identity", identity, MAX_FIELD_BYTES)?;
        bounded("the issuer", &client.issuer, MAX_FIELD_BYTES)?;
        bounded("the client id", &client.client_id, MAX_FIELD_BYTES)?;
        bounded("the method", &client.method, MAX_FIELD_BYTES)?;
        let sealed_secret = match &client.secret {
            Some(secret) => {
                bounded("the client secret", secret.expose(), MAX_SECRET_BYTES)?;
                let binding =
                    Binding::client(upstream, identity, &client.issuer, &client.client_id);
                let keys = &self.settings.load().keys;
                Some(keys.seal(&binding, secret.expose().as_bytes())?)
            }
            None => None,
        };
        let row = ClientRow {
            upstream: upstream.to_owned(),
            issuer: client.issuer.clone(),
            identity: identity.to_owned(),
            client_id: client.client_id.clone(),
            method: client.method.clone(),
            sealed_secret,
            registered_ms: client.registered_ms,
        };
        self.backend
            .put_client(&row, MAX_CLIENTS_PER_UPSTREAM)
            .await
    }

    // -----------------------------------------------------------------------------------------
    // Pending flows

    /// Keep a consent flow until its callback (or its time to live); its id. Refused past the
    /// pending flows of one principal or of everyone ([`VaultError::Full`]).
    pub async fn begin_flow(&self, flow: NewFlow) -> Result<String, VaultError> {
        check_names(&flow.principal, &flow.upstream)?;
        bounded("the identity", &flow.identity, MAX_FIELD_BYTES)?;
        bounded("the state", flow.state.expose(), MAX_FIELD_BYTES)?;
        bounded("the request", &flow.request, MAX_FIELD_BYTES)?;
        bounded("the URL", flow.authorization_url.expose(), MAX_SECRET_BYTES)?;
        if flow.payload.expose().len() > MAX_SECRET_BYTES {
            return Err(VaultError::Invalid(
                "the flow's payload is too large".into(),
            ));
        }
        let (flow_id, hash) = (random_id()?, state_hash(flow.state.expose()));
        let created_ms = now_ms();
        let ttl = flow.ttl.clamp(Duration::from_secs(1), MAX_FLOW_TTL);
        let expires_ms = created_ms.saturating_add(ttl.as_millis() as u64);
        let binding = Binding::flow(
            &flow.principal,
            &flow.upstream,
            &flow.identity,
            &hash,
            &flow_id,
            expires_ms,
        );
        let json = sealed_json(&FlowOut {
            request: &flow.request,
            authorization_url: flow.authorization_url.expose(),
            payload: flow.payload.expose(),
        })?;
        let settings = self.settings.load_full();
        let row = FlowRow {
            state_hash: hash,
            flow_id: flow_id.clone(),
            principal: flow.principal.clone(),
            upstream: flow.upstream.clone(),
            identity: flow.identity.clone(),
            sealed: settings.keys.seal(&binding, &json)?,
            created_ms,
            expires_ms,
        };
        let bounds = settings.bounds;
        match self.backend.insert_flow(&row, bounds, created_ms).await? {
            FlowInsert::Inserted => Ok(flow_id),
            FlowInsert::PrincipalFull(n) => Err(VaultError::Full(format!(
                "Too many pending authorizations: {} has {n}, the limit is {} \
                 (upstream_auth.vault.max_pending_flows_per_user); follow or let expire one first",
                flow.principal, bounds.pending_flows_per_user
            ))),
            FlowInsert::Full(n) => Err(VaultError::Full(format!(
                "Too many pending authorizations: the server has {n}, the limit is {} \
                 (upstream_auth.vault.max_pending_flows)",
                bounds.pending_flows
            ))),
            FlowInsert::Taken => Err(VaultError::Invalid(
                "a pending authorization with this state exists already (a state is used once)"
                    .into(),
            )),
        }
    }

    fn open_flow(&self, row: &FlowRow) -> Option<PendingFlow> {
        if row.expires_ms <= now_ms() {
            return None;
        }
        let binding = Binding::flow(
            &row.principal,
            &row.upstream,
            &row.identity,
            &row.state_hash,
            &row.flow_id,
            row.expires_ms,
        );
        let opened = self
            .settings
            .load()
            .keys
            .open(&binding, &row.sealed)
            .and_then(|bytes| opened_json::<FlowIn>(&bytes));
        match opened {
            Ok(f) => Some(PendingFlow {
                flow_id: row.flow_id.clone(),
                principal: row.principal.clone(),
                upstream: row.upstream.clone(),
                identity: row.identity.clone(),
                request: f.request,
                authorization_url: Secret::new(f.authorization_url),
                payload: Secret::new(f.payload),
                created_ms: row.created_ms,
                expires_ms: row.expires_ms,
            }),
            Err(why) => {
                self.refused(&format!("pending flow {}", row.flow_id), &why);
                None
            }
        }
    }

    /// The pending flow with this id (the connect page), left pending; `None` when unknown,
    /// expired or taken.
    pub async fn pending_flow(&self, flow_id: &str) -> Result<Option<PendingFlow>, VaultError> {
        if flow_id.len() > MAX_FIELD_BYTES {
            return Ok(None);
        }
        let row = self.backend.flow(flow_id).await?;
        Ok(row.as_ref().and_then(|row| self.open_flow(row)))
    }

    /// Take the pending flow of this OAuth `state` (the callback): once only — a second take, on
    /// any replica, gets `None`, as do an unknown and an expired state. The caller checks that
    /// it is the flow of the user and request it expects; a flow taken is gone either way.
    pub async fn take_flow(&self, state: &str) -> Result<Option<PendingFlow>, VaultError> {
        if state.is_empty() || state.len() > MAX_FIELD_BYTES {
            return Ok(None);
        }
        let row = self.backend.take_flow(&state_hash(state)).await?;
        Ok(row.as_ref().and_then(|row| self.open_flow(row)))
    }

    /// [`Vault::take_flow`], telling an expired flow (whose user and upstream it names) from an
    /// unknown state: what the callback of a consent reports when it refuses one.
    pub async fn take_flow_checked(&self, state: &str) -> Result<Taken, VaultError> {
        if state.is_empty() || state.len() > MAX_FIELD_BYTES {
            return Ok(Taken::Unknown);
        }
        let Some(row) = self.backend.take_flow(&state_hash(state)).await? else {
            return Ok(Taken::Unknown);
        };
        if row.expires_ms <= now_ms() {
            return Ok(Taken::Expired {
                principal: row.principal,
                upstream: row.upstream,
            });
        }
        Ok(self.open_flow(&row).map_or(Taken::Unknown, Taken::Pending))
    }

    // -----------------------------------------------------------------------------------------
    // Refresh leases

    /// Take the refresh lease of `principal` at `upstream` for `ttl`, unless another holder has
    /// it: one replica (and one task) at a time refreshes a credential.
    pub async fn try_lease(
        &self,
        principal: &str,
        upstream: &str,
        ttl: Duration,
    ) -> Result<Option<RefreshLease>, VaultError> {
        let owner = format!("{}/{}", self.replica, random_id()?);
        let ttl = ttl.max(Duration::from_millis(1));
        let taken = self
            .backend
            .acquire_lease(principal, upstream, &owner, ttl)
            .await?;
        Ok(taken.then(|| RefreshLease {
            principal: principal.to_owned(),
            upstream: upstream.to_owned(),
            owner,
        }))
    }

    /// Give a lease back (if it ran out and another holder took it, theirs stays).
    pub async fn release(&self, lease: &RefreshLease) -> Result<bool, VaultError> {
        self.backend
            .release_lease(&lease.principal, &lease.upstream, &lease.owner)
            .await
    }

    // -----------------------------------------------------------------------------------------
    // Rotation

    /// Re-seal every credential and client secret under the first key (each a compare-and-set:
    /// a row changed meanwhile is read again). Rows no configured key opens are left and listed.
    /// Pending flows are not re-sealed: they live at most their time to live, so keep the old key
    /// that long.
    pub async fn rotate(&self) -> Result<Rotation, VaultError> {
        let key_id = self
            .settings
            .load()
            .keys
            .sealing_key_id()
            .ok_or(VaultError::Seal(SealError::NoKey))?
            .to_owned();
        let mut report = Rotation {
            key_id,
            ..Rotation::default()
        };
        let rows = self
            .backend
            .credentials(RowFilter::default(), usize::MAX)
            .await?;
        for row in rows {
            self.rotate_credential(row, &mut report).await?;
        }
        for row in self.backend.clients(None).await? {
            self.rotate_client(row, &mut report).await?;
        }
        Ok(report)
    }

    async fn rotate_credential(
        &self,
        mut row: CredentialRow,
        report: &mut Rotation,
    ) -> Result<(), VaultError> {
        let what = format!("credential of {} at {}", row.principal, row.upstream);
        // A row changed by a refresh meanwhile is read again; a few times at most.
        for _ in 0..5 {
            if self.settings.load().keys.is_current(&row.sealed) {
                report.current += 1;
                return Ok(());
            }
            let stored = match self.open_credential(&row) {
                Ok(stored) => stored,
                Err(why) => {
                    report.unreadable.push(format!("{what}: {why}"));
                    return Ok(());
                }
            };
            let mut fresh = self.seal_credential(
                &row.principal,
                &row.upstream,
                &row.identity,
                &stored.credential,
            )?;
            fresh.updated_ms = row.updated_ms;
            let max = usize::MAX;
            match self
                .backend
                .put_credential(&fresh, Expect::Version(row.version), max)
                .await?
            {
                PutOutcome::Stored { .. } => {
                    report.resealed += 1;
                    return Ok(());
                }
                _ => match self
                    .backend
                    .credential(&row.principal, &row.upstream)
                    .await?
                {
                    Some(again) => row = again,
                    None => return Ok(()),
                },
            }
        }
        report
            .unreadable
            .push(format!("{what}: it kept changing while being re-sealed"));
        Ok(())
    }

    async fn rotate_client(&self, row: ClientRow, report: &mut Rotation) -> Result<(), VaultError> {
        let Some(old) = &row.sealed_secret else {
            report.current += 1;
            return Ok(());
        };
        if self.settings.load().keys.is_current(old) {
            report.current += 1;
            return Ok(());
        }
        let what = format!("client of {} at {}", row.upstream, row.issuer);
        let client = match self.open_client(&row) {
            Ok(client) => client,
            Err(why) => {
                report.unreadable.push(format!("{what}: {why}"));
                return Ok(());
            }
        };
        let Some(secret) = client.secret else {
            return Ok(());
        };
        let binding = Binding::client(&row.upstream, &row.identity, &row.issuer, &row.client_id);
        let new = self
            .settings
            .load()
            .keys
            .seal(&binding, secret.expose().as_bytes())?;
        if self
            .backend
            .reseal_client(&row.upstream, &row.issuer, old, &new)
            .await?
        {
            report.resealed += 1;
        } else {
            report.unreadable.push(format!(
                "{what}: it changed while being re-sealed (run rotate again)"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_found_by_its_hash_only() {
        let hash = state_hash("abc");
        assert_eq!(
            hash,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_ne!(state_hash("abd"), hash);
    }

    #[test]
    fn credentials_and_flows_never_show_their_secrets() {
        let credential = Credential {
            access_token: Secret::new("gho_alice_access"),
            refresh_token: Some(Secret::new("ghr_alice_refresh")),
            token_type: "Bearer".into(),
            scopes: vec!["repo".into()],
            issuer: "https://github.com/login/oauth".into(),
            client_id: "c".into(),
            expires_at_ms: Some(1),
            refresh_after_ms: None,
            received_at_ms: 0,
        };
        let flow = NewFlow {
            principal: "alice".into(),
            upstream: "github".into(),
            identity: "i".into(),
            state: Secret::new("the-state"),
            request: "r".into(),
            authorization_url: Secret::new("https://as/authorize?state=the-state"),
            payload: Secret::new("pkce-verifier"),
            ttl: Duration::from_secs(60),
        };
        let shown = format!("{credential:?} {flow:?}");
        for secret in [
            "gho_alice_access",
            "ghr_alice_refresh",
            "the-state",
            "pkce-verifier",
        ] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn oversized_fields_from_an_authorization_server_are_refused() {
        let mut c = Credential {
            access_token: Secret::new("x".repeat(MAX_SECRET_BYTES + 1)),
            refresh_token: None,
            token_type: "Bearer".into(),
            scopes: Vec::new(),
            issuer: "https://as".into(),
            client_id: String::new(),
            expires_at_ms: None,
            refresh_after_ms: None,
            received_at_ms: 0,
        };
        assert!(
            matches!(check_credential(&c), Err(VaultError::Invalid(m)) if m.contains("access token"))
        );
        c.access_token = Secret::new("ok");
        assert!(check_credential(&c).is_ok());
        c.scopes = vec!["s".into(); MAX_SCOPES + 1];
        assert!(check_credential(&c).is_err());
        c.scopes = Vec::new();
        c.access_token = Secret::new("");
        assert!(check_credential(&c).is_err(), "an empty token");
    }
}
