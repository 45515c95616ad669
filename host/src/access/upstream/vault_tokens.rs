//! The OAuth engine's stores over the [`Vault`]: [`VaultTokens`], its [`TokenStore`] (rmcp's
//! stored credentials as the vault's sealed rows, for one upstream identity), [`RowStore`], rmcp's
//! credential store of one (principal, upstream) row written with the vault's compare-and-set,
//! and [`VaultClients`], the engine's dynamically registered clients kept in the vault per
//! authorization server. And the conversions between rmcp's [`StoredCredentials`] and the vault's
//! [`Credential`].

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use oauth2::TokenResponse as _;
use rmcp::transport::auth::{AuthError, CredentialStore, OAuthTokenResponse, StoredCredentials};
use serde_json::json;

use super::registration::{AuthMethod, Kind, Registration};
use super::tokens::{StoreError, TokenStore};
use super::vault::{Credential, Expect, RegisteredClient, Vault, VaultError};
use super::{Principal, Secret, Target};

/// The longest a refresh is done ahead of expiry.
const REFRESH_AHEAD_MS: u64 = 30_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How long before its expiry (Unix ms) a token obtained at `received_ms` is refreshed: 30 s,
/// or half its life when that is shorter (a short-lived token is not refreshed at every call).
pub fn refresh_margin_ms(received_ms: u64, expires_ms: u64) -> u64 {
    (expires_ms.saturating_sub(received_ms) / 2).min(REFRESH_AHEAD_MS)
}

/// Whether `credential`'s access token is due for a refresh now (expired, or within its
/// margin); one without an expiry never is.
pub fn due(credential: &Credential) -> bool {
    credential.expires_at_ms.is_some_and(|expires| {
        let margin = refresh_margin_ms(credential.received_at_ms, expires);
        now_ms().saturating_add(margin.max(1)) >= expires
    })
}

/// Whether `credential`'s access token has expired.
pub fn expired(credential: &Credential) -> bool {
    credential.expires_at_ms.is_some_and(|e| now_ms() >= e)
}

/// rmcp's credentials as the vault keeps them; `None` without a token response. The issuer is
/// the one rmcp stamped, else `issuer`.
pub fn credential_of(stored: &StoredCredentials, issuer: &str) -> Option<Credential> {
    let response = stored.token_response.as_ref()?;
    let received_at_ms = stored
        .token_received_at
        .map_or_else(now_ms, |s| s.saturating_mul(1000));
    let expires_at_ms = response
        .expires_in()
        .map(|d| received_at_ms.saturating_add(d.as_millis() as u64));
    let refresh_after_ms =
        expires_at_ms.map(|e| e.saturating_sub(refresh_margin_ms(received_at_ms, e)));
    Some(Credential {
        access_token: Secret::new(response.access_token().secret().clone()),
        refresh_token: response
            .refresh_token()
            .map(|r| Secret::new(r.secret().clone())),
        token_type: "Bearer".into(),
        scopes: stored.granted_scopes.clone(),
        issuer: stored.issuer.clone().unwrap_or_else(|| issuer.to_owned()),
        client_id: stored.client_id.clone(),
        expires_at_ms,
        refresh_after_ms,
        received_at_ms,
    })
}

/// The vault's credential as rmcp's; `None` if rmcp cannot read it back.
pub fn stored_of(credential: &Credential) -> Option<StoredCredentials> {
    let mut response = json!({
        "access_token": credential.access_token.expose(),
        "token_type": "bearer",
    });
    if let Some(expires) = credential.expires_at_ms {
        let life = expires.saturating_sub(credential.received_at_ms) / 1000;
        response["expires_in"] = json!(life);
    }
    if let Some(refresh) = &credential.refresh_token {
        response["refresh_token"] = json!(refresh.expose());
    }
    if !credential.scopes.is_empty() {
        response["scope"] = json!(credential.scopes.join(" "));
    }
    let response: OAuthTokenResponse = serde_json::from_value(response).ok()?;
    Some(
        StoredCredentials::new(
            credential.client_id.clone(),
            Some(response),
            credential.scopes.clone(),
            Some(credential.received_at_ms / 1000),
        )
        .with_issuer(Some(credential.issuer.clone())),
    )
}

fn store_error(e: VaultError) -> StoreError {
    StoreError(e.to_string())
}

/// The engine's [`TokenStore`] over the vault, for upstreams of identity digest `identity`: each
/// credential a sealed row per (principal, upstream). A write replaces the row (a new consent
/// replaces the old credential); the gateway's refreshes use [`RowStore`] instead, which
/// compares and sets.
#[derive(Clone)]
pub struct VaultTokens {
    /// The vault.
    pub vault: Vault,
    /// The upstream's identity digest.
    pub identity: String,
}

#[async_trait]
impl TokenStore for VaultTokens {
    async fn load(
        &self,
        who: &Principal,
        target: &Target,
    ) -> Result<Option<StoredCredentials>, StoreError> {
        let row = self
            .vault
            .credential(&who.0, &target.upstream, &self.identity)
            .await
            .map_err(store_error)?;
        Ok(row.and_then(|r| stored_of(&r.credential)))
    }

    async fn save(
        &self,
        who: &Principal,
        target: &Target,
        credentials: StoredCredentials,
    ) -> Result<(), StoreError> {
        let Some(credential) = credential_of(&credentials, "") else {
            return Ok(());
        };
        if credential.issuer.is_empty() {
            return Err(StoreError("the credential names no issuer".into()));
        }
        self.vault
            .save_credential(
                &who.0,
                &target.upstream,
                &self.identity,
                &credential,
                Expect::Any,
            )
            .await
            .map(drop)
            .map_err(store_error)
    }

    async fn clear(&self, who: &Principal, target: &Target) -> Result<(), StoreError> {
        self.vault
            .remove_credential(&who.0, &target.upstream)
            .await
            .map(drop)
            .map_err(store_error)
    }
}

/// rmcp's credential store of one (principal, upstream) row: loads it, and writes it as
/// `expect` says (a refresh: the version it loaded, so two replicas never overwrite each other;
/// a new consent: whatever is there). A refresh token the authorization server rejects for good
/// (`invalid_grant`) deletes the row — if it still holds that token.
#[derive(Clone)]
pub struct RowStore {
    /// The vault.
    pub vault: Vault,
    /// Whose.
    pub principal: String,
    /// At which upstream.
    pub upstream: String,
    /// The upstream's identity digest.
    pub identity: String,
    /// The issuer a credential without one is stamped with.
    pub issuer: String,
    /// What a write expects of the row.
    pub expect: Expect,
}

fn auth_error(e: VaultError) -> AuthError {
    AuthError::CredentialStoreError(e.to_string())
}

#[async_trait]
impl CredentialStore for RowStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let row = self
            .vault
            .credential(&self.principal, &self.upstream, &self.identity)
            .await
            .map_err(auth_error)?;
        Ok(row.and_then(|r| stored_of(&r.credential)))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let credential = credential_of(&credentials, &self.issuer).ok_or_else(|| {
            AuthError::CredentialStoreError("the token response is missing".into())
        })?;
        self.vault
            .save_credential(
                &self.principal,
                &self.upstream,
                &self.identity,
                &credential,
                self.expect,
            )
            .await
            .map(drop)
            .map_err(auth_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.vault
            .remove_credential(&self.principal, &self.upstream)
            .await
            .map(drop)
            .map_err(auth_error)
    }

    async fn on_refresh_token_rejected(
        &self,
        rejected: &StoredCredentials,
    ) -> Result<(), AuthError> {
        let current = self.load().await?;
        let token = |s: &StoredCredentials| {
            s.token_response
                .as_ref()
                .and_then(|r| r.refresh_token().map(|t| Secret::new(t.secret().clone())))
        };
        if current.as_ref().and_then(token) == token(rejected) {
            tracing::info!(
                "Upstream {}: the authorization server rejected {}'s refresh token: the \
                 credential is deleted (the next call asks for consent again)",
                self.upstream,
                self.principal
            );
            self.clear().await?;
        }
        Ok(())
    }
}

/// Where the engine keeps the clients it registered dynamically, per authorization server (by
/// issuer), so that a later run (and the gateway's refreshes) use the same client.
pub trait ClientStore: Send + Sync {
    /// The client registered at `issuer`.
    fn load<'a>(&'a self, issuer: &'a str) -> BoxFuture<'a, Option<Registration>>;
    /// Keep `registration` as the client at `issuer`.
    fn save<'a>(&'a self, issuer: &'a str, registration: &'a Registration) -> BoxFuture<'a, ()>;
}

/// A [`ClientStore`] in the vault: the rows of `key` (an upstream's name, or a name of its own
/// for clients registered with another redirect URI) of identity `identity`.
#[derive(Clone)]
pub struct VaultClients {
    /// The vault.
    pub vault: Vault,
    /// The rows' upstream key.
    pub key: String,
    /// The upstream's identity digest.
    pub identity: String,
}

/// The registration a vault row holds.
pub fn registration_of(client: RegisteredClient, kind: Kind) -> Registration {
    let method = AuthMethod::named(&client.method).unwrap_or(AuthMethod::None);
    Registration {
        kind,
        client_id: client.client_id,
        client_secret: client.secret,
        method,
    }
}

/// A registration as a vault row for `issuer`.
pub fn client_of(issuer: &str, registration: &Registration) -> RegisteredClient {
    RegisteredClient {
        issuer: issuer.to_owned(),
        client_id: registration.client_id.clone(),
        method: registration.method.name().to_owned(),
        secret: registration.client_secret.clone(),
        registered_ms: now_ms(),
    }
}

impl ClientStore for VaultClients {
    fn load<'a>(&'a self, issuer: &'a str) -> BoxFuture<'a, Option<Registration>> {
        Box::pin(async move {
            let row = self.vault.client(&self.key, issuer, &self.identity).await;
            match row {
                Ok(row) => row.map(|c| registration_of(c, Kind::Dynamic)),
                Err(e) => {
                    tracing::warn!("the vault's registered clients cannot be read: {e}");
                    None
                }
            }
        })
    }

    fn save<'a>(&'a self, issuer: &'a str, registration: &'a Registration) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let client = client_of(issuer, registration);
            if let Err(e) = self
                .vault
                .save_client(&self.key, &self.identity, &client)
                .await
            {
                tracing::warn!("the client registered at {issuer} is not kept: {e}");
            }
        })
    }
}

impl std::fmt::Debug for dyn ClientStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientStore")
    }
}

/// A shared [`ClientStore`].
pub type Clients = Arc<dyn ClientStore>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_goes_to_rmcp_and_back_unchanged() {
        let credential = Credential {
            access_token: Secret::new("at-alice"),
            refresh_token: Some(Secret::new("rt-alice")),
            token_type: "Bearer".into(),
            scopes: vec!["mcp:basic".into(), "mcp:write".into()],
            issuer: "http://127.0.0.1:9".into(),
            client_id: "c1".into(),
            expires_at_ms: Some(1_700_000_600_000),
            refresh_after_ms: Some(1_700_000_570_000),
            received_at_ms: 1_700_000_000_000,
        };
        let stored = stored_of(&credential).unwrap();
        assert_eq!(stored.client_id, "c1");
        assert_eq!(stored.issuer.as_deref(), Some("http://127.0.0.1:9"));
        let back = credential_of(&stored, "other").unwrap();
        assert_eq!(back, credential);
        assert!(!format!("{stored:?}{back:?}").contains("at-alice"));
    }

    #[test]
    fn a_token_is_due_within_its_margin_and_never_without_an_expiry() {
        let now = now_ms();
        let mut c = Credential {
            access_token: Secret::new("t"),
            refresh_token: None,
            token_type: "Bearer".into(),
            scopes: Vec::new(),
            issuer: "i".into(),
            client_id: String::new(),
            expires_at_ms: Some(now + 3_600_000),
            refresh_after_ms: None,
            received_at_ms: now,
        };
        assert!(!due(&c) && !expired(&c));
        // Ten seconds left of a ten-second life: within half of it.
        c.expires_at_ms = Some(now + 4_000);
        c.received_at_ms = now.saturating_sub(6_000);
        assert!(due(&c) && !expired(&c));
        c.expires_at_ms = Some(now.saturating_sub(1));
        assert!(due(&c) && expired(&c));
        c.expires_at_ms = None;
        assert!(!due(&c));
        assert_eq!(refresh_margin_ms(0, 3_600_000), 30_000);
        assert_eq!(refresh_margin_ms(0, 10_000), 5_000);
    }
}
