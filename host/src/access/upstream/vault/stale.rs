//! Revoking one credential row found stale by its metadata (its user's secret was removed, its
//! upstream's identity changed): the row is revoked and deleted only while it is still the row
//! that was judged (same identity, same version) — a user who connected again meanwhile keeps
//! the new credential.

use super::{Connection, Revocation, Revoked, Vault, VaultError};

impl Vault {
    /// Revoke `found` (listed by [`Vault::connections`]) with `revocation`, then delete it — if
    /// the row there is still the one listed. What was deleted, `None` when the row changed or
    /// went meanwhile.
    pub async fn revoke_listed(
        &self,
        found: &Connection,
        revocation: &dyn Revocation,
    ) -> Result<Option<Revoked>, VaultError> {
        let Some(row) = self
            .backend
            .credential(&found.principal, &found.upstream)
            .await?
        else {
            return Ok(None);
        };
        if row.identity != found.identity || row.version != found.version {
            return Ok(None);
        }
        self.revoke_row(&row, revocation).await
    }
}
