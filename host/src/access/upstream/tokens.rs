//! Where the engine keeps the tokens it obtained: a [`TokenStore`], one credential (rmcp's
//! [`StoredCredentials`]: the token response, the granted scopes, the issuer that minted it) per
//! principal and target. [`MemoryTokens`] keeps them in this process (`mcp-host connect`); the
//! vault keeps them sealed in the store, shared by replicas. rmcp's engine reads and writes them
//! through [`Stored`], its [`CredentialStore`] for one principal and target.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};

use super::{Principal, Target};

/// Why a store could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the token store: {0}")]
pub struct StoreError(pub String);

/// The tokens of principals for targets.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// `who`'s credential for `target`, if any.
    async fn load(
        &self,
        who: &Principal,
        target: &Target,
    ) -> Result<Option<StoredCredentials>, StoreError>;
    /// Keep `credentials` as `who`'s for `target` (replacing any).
    async fn save(
        &self,
        who: &Principal,
        target: &Target,
        credentials: StoredCredentials,
    ) -> Result<(), StoreError>;
    /// Forget `who`'s credential for `target`.
    async fn clear(&self, who: &Principal, target: &Target) -> Result<(), StoreError>;
}

/// Tokens kept in this process only, gone when it exits.
#[derive(Debug, Default)]
pub struct MemoryTokens {
    rows: Mutex<HashMap<(Principal, Target), StoredCredentials>>,
}

impl MemoryTokens {
    /// The rows, whatever a panic elsewhere left.
    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<(Principal, Target), StoredCredentials>> {
        self.rows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl TokenStore for MemoryTokens {
    async fn load(
        &self,
        who: &Principal,
        target: &Target,
    ) -> Result<Option<StoredCredentials>, StoreError> {
        Ok(self.rows().get(&(who.clone(), target.clone())).cloned())
    }

    async fn save(
        &self,
        who: &Principal,
        target: &Target,
        credentials: StoredCredentials,
    ) -> Result<(), StoreError> {
        self.rows()
            .insert((who.clone(), target.clone()), credentials);
        Ok(())
    }

    async fn clear(&self, who: &Principal, target: &Target) -> Result<(), StoreError> {
        self.rows().remove(&(who.clone(), target.clone()));
        Ok(())
    }
}

/// rmcp's credential store for one principal and target, over a [`TokenStore`].
#[derive(Clone)]
pub struct Stored {
    /// The store.
    pub store: Arc<dyn TokenStore>,
    /// Whose credential.
    pub who: Principal,
    /// For what.
    pub target: Target,
}

/// A store failure as rmcp's error.
fn failed(e: StoreError) -> AuthError {
    AuthError::CredentialStoreError(e.0)
}

#[async_trait]
impl CredentialStore for Stored {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.store
            .load(&self.who, &self.target)
            .await
            .map_err(failed)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.store
            .save(&self.who, &self.target, credentials)
            .await
            .map_err(failed)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.store
            .clear(&self.who, &self.target)
            .await
            .map_err(failed)
    }
}
