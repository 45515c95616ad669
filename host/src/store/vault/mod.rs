//! The upstream token vault's rows in the store: `access::upstream::vault::VaultBackend` over
//! SQLite (the file store, and the memory store, which is SQLite in memory: [`sqlite`]) or Redis
//! (a fleet: [`redis`]). The store keeps sealed values and plaintext metadata only; sealing and
//! opening is the vault's, with keys the store never holds.

mod redis;
mod sqlite;
#[cfg(test)]
mod sweep_tests;
#[cfg(test)]
mod tests;

use std::time::Duration;

use super::{Backend, Store, StoreError};
use crate::access::upstream::vault::{
    ClientRow, CredentialRow, Expect, FlowInsert, FlowRow, PutOutcome, RowFilter, VaultBackend,
    VaultBounds, VaultError, VaultFuture,
};

/// The vault's rows in this store.
pub(super) struct StoreVault {
    store: Store,
    /// The Redis scripts (with Redis).
    redis: Option<redis::RedisVault>,
}

impl std::fmt::Debug for StoreVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreVault")
            .field("store", &self.store.describe())
            .finish()
    }
}

impl StoreVault {
    pub(super) fn new(store: &Store) -> StoreVault {
        let redis = match &store.inner.backend {
            Backend::Redis(r) => Some(redis::RedisVault::new(r.connection())),
            Backend::Sqlite(_) => None,
        };
        StoreVault {
            store: store.clone(),
            redis,
        }
    }

    /// An outcome of the store as the vault's (an unavailable store is marked unreachable).
    fn done<T>(&self, result: Result<T, StoreError>) -> Result<T, VaultError> {
        self.store.observe(result).map_err(|e| match e {
            StoreError::Unavailable(why) => VaultError::Unavailable(why),
            StoreError::Full(why) => VaultError::Full(why),
        })
    }
}

/// Run `$method($args)` on the backend the store has, as a boxed future of the vault.
macro_rules! on_backend {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        Box::pin(async move {
            let result = match (&$self.store.inner.backend, &$self.redis) {
                (Backend::Sqlite(db), _) => db.$method($($arg),*).await,
                (Backend::Redis(_), Some(r)) => r.$method($($arg),*).await,
                (Backend::Redis(_), None) => Err(StoreError::Unavailable(
                    "the vault was made before the store's connection".into(),
                )),
            };
            $self.done(result)
        })
    };
}

impl VaultBackend for StoreVault {
    fn credential<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
    ) -> VaultFuture<'a, Option<CredentialRow>> {
        on_backend!(self.credential(principal, upstream))
    }

    fn put_credential<'a>(
        &'a self,
        row: &'a CredentialRow,
        expect: Expect,
        max_per_principal: usize,
    ) -> VaultFuture<'a, PutOutcome> {
        on_backend!(self.put_credential(row, expect, max_per_principal))
    }

    fn touch_credential<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
        now_ms: u64,
    ) -> VaultFuture<'a, ()> {
        on_backend!(self.touch_credential(principal, upstream, now_ms))
    }

    fn delete_credentials<'a>(
        &'a self,
        filter: RowFilter<'a>,
    ) -> VaultFuture<'a, Vec<(String, String)>> {
        on_backend!(self.delete_credentials(filter))
    }

    fn credentials<'a>(
        &'a self,
        filter: RowFilter<'a>,
        limit: usize,
    ) -> VaultFuture<'a, Vec<CredentialRow>> {
        on_backend!(self.credentials(filter, limit))
    }

    fn due_credentials<'a>(
        &'a self,
        now_ms: u64,
        limit: usize,
    ) -> VaultFuture<'a, Vec<(String, String)>> {
        on_backend!(self.due_credentials(now_ms, limit))
    }

    fn client<'a>(
        &'a self,
        upstream: &'a str,
        issuer: &'a str,
    ) -> VaultFuture<'a, Option<ClientRow>> {
        on_backend!(self.client(upstream, issuer))
    }

    fn put_client<'a>(
        &'a self,
        row: &'a ClientRow,
        max_per_upstream: usize,
    ) -> VaultFuture<'a, ()> {
        on_backend!(self.put_client(row, max_per_upstream))
    }

    fn reseal_client<'a>(
        &'a self,
        upstream: &'a str,
        issuer: &'a str,
        old: &'a str,
        new: &'a str,
    ) -> VaultFuture<'a, bool> {
        on_backend!(self.reseal_client(upstream, issuer, old, new))
    }

    fn clients<'a>(&'a self, upstream: Option<&'a str>) -> VaultFuture<'a, Vec<ClientRow>> {
        on_backend!(self.clients(upstream))
    }

    fn delete_clients<'a>(&'a self, upstream: &'a str) -> VaultFuture<'a, usize> {
        on_backend!(self.delete_clients(upstream))
    }

    fn insert_flow<'a>(
        &'a self,
        row: &'a FlowRow,
        bounds: VaultBounds,
        now_ms: u64,
    ) -> VaultFuture<'a, FlowInsert> {
        on_backend!(self.insert_flow(row, bounds, now_ms))
    }

    fn flow<'a>(&'a self, flow_id: &'a str) -> VaultFuture<'a, Option<FlowRow>> {
        on_backend!(self.flow(flow_id))
    }

    fn take_flow<'a>(&'a self, state_hash: &'a str) -> VaultFuture<'a, Option<FlowRow>> {
        on_backend!(self.take_flow(state_hash))
    }

    fn acquire_lease<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> VaultFuture<'a, bool> {
        on_backend!(self.acquire_lease(principal, upstream, owner, ttl))
    }

    fn release_lease<'a>(
        &'a self,
        principal: &'a str,
        upstream: &'a str,
        owner: &'a str,
    ) -> VaultFuture<'a, bool> {
        on_backend!(self.release_lease(principal, upstream, owner))
    }
}
