//! Credentials nobody may use any more, revoked (RFC 7009, where offered) and deleted at start and
//! at each reload ([`Credentials::sweep`]):
//!
//! - those of a user whose mcp-host secret was removed from `auth.secrets` (at a reload: a user
//!   the previous configuration had a secret for and this one has none; at start too when secrets
//!   are the only way to sign in — no `auth.jwt` nor `auth.authorization_servers` — a user with
//!   no secret);
//! - those obtained for an upstream whose identity changed (its URL, issuer, client, scopes, …:
//!   [`Spec::identity`]), or that no longer has `server.auth`.
//!
//! A row is deleted only while it is the one judged (a user who connects again meanwhile keeps
//! the new credential). Each is audited `upstream_auth.revoked` with why; the sweep is logged once,
//! with counts. At most [`MAX_SWEPT`] rows per sweep (the rest at the next one).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::{CredError, Credentials, Spec, lock};
use crate::access::upstream::vault::{AtServer, Connection, Credential, Revocation, RowFilter};
use crate::config::Config;

/// The most rows one sweep revokes.
pub const MAX_SWEPT: usize = 1000;

/// Why a credential is no longer anyone's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stale {
    /// Its user's mcp-host secret was removed.
    SecretRemoved,
    /// Its upstream's identity changed.
    IdentityChanged,
    /// Its upstream is no longer configured with `server.auth`.
    UpstreamRemoved,
}

impl Stale {
    /// In words (audit details and the log).
    pub fn describe(self) -> &'static str {
        match self {
            Stale::SecretRemoved => "the user's mcp-host secret was removed",
            Stale::IdentityChanged => "the upstream's identity changed in the configuration",
            Stale::UpstreamRemoved => "the upstream no longer has server.auth",
        }
    }
}

/// Who can still sign in, as far as the configuration tells.
#[derive(Debug, Clone, Default)]
pub struct Signins {
    /// Users the previous configuration had a secret for and this one has none.
    removed: HashSet<String>,
    /// When secrets are the only way to sign in: the users who have one.
    only: Option<HashSet<String>>,
}

impl Signins {
    /// From the `previous` configuration (at a reload) and this one.
    pub fn of(previous: Option<&Config>, config: &Config) -> Signins {
        let users = |c: &Config| -> HashSet<String> {
            c.auth.secrets.iter().map(|s| s.user.clone()).collect()
        };
        let now = users(config);
        let removed = previous
            .map(|p| users(p).difference(&now).cloned().collect())
            .unwrap_or_default();
        let jwt = &config.auth.jwt;
        let secrets_only = jwt.issuer.is_none()
            && jwt.hs256_secret.is_none()
            && jwt.public_keys.is_empty()
            && jwt.jwks_file.is_none()
            && config.auth.authorization_servers.is_empty();
        Signins {
            removed,
            only: secrets_only.then_some(now),
        }
    }

    /// Whether `principal` can no longer sign in (never a reserved `@…` identity).
    pub fn gone(&self, principal: &str) -> bool {
        !principal.starts_with('@')
            && (self.removed.contains(principal)
                || self.only.as_ref().is_some_and(|u| !u.contains(principal)))
    }
}

/// Why `found` is stale under `specs` (the upstreams with `server.auth` now) and `signins`.
pub fn stale(
    found: &Connection,
    specs: &HashMap<String, Arc<Spec>>,
    signins: &Signins,
) -> Option<Stale> {
    if signins.gone(&found.principal) {
        return Some(Stale::SecretRemoved);
    }
    match specs.get(&found.upstream) {
        None => Some(Stale::UpstreamRemoved),
        Some(spec) if spec.identity != found.identity => Some(Stale::IdentityChanged),
        Some(_) => None,
    }
}

/// Revocation under the upstream's configuration a credential was obtained with (when known).
struct Under<'a> {
    credentials: &'a Credentials,
    spec: Option<Spec>,
}

impl Revocation for Under<'_> {
    fn revoke<'a>(
        &'a self,
        _principal: &'a str,
        _upstream: &'a str,
        credential: &'a Credential,
    ) -> Pin<Box<dyn Future<Output = AtServer> + Send + 'a>> {
        Box::pin(async move {
            let Some(spec) = &self.spec else {
                return AtServer::Skipped(
                    "the upstream's configuration it was obtained under is no longer known".into(),
                );
            };
            match self.credentials.revoke_with(spec, credential).await {
                Ok(at) => at,
                Err(why) => AtServer::Failed(why),
            }
        })
    }
}

/// The configuration `found` was obtained under: the previous one's spec of its upstream when
/// its identity is the row's, else the current one's (discovered at its URL now; the issuer is
/// checked before revoking) bound to the row's identity (its registered client is found).
fn spec_for(
    found: &Connection,
    previous: &HashMap<String, Arc<Spec>>,
    now: &HashMap<String, Arc<Spec>>,
) -> Option<Spec> {
    if let Some(old) = previous
        .get(&found.upstream)
        .filter(|s| s.identity == found.identity)
    {
        return Some(Spec::clone(old));
    }
    now.get(&found.upstream).map(|s| Spec {
        identity: found.identity.clone(),
        ..Spec::clone(s)
    })
}

/// The specs of `config`'s upstreams with `server.auth`.
fn specs_of(config: &Config) -> HashMap<String, Arc<Spec>> {
    config
        .tool_dirs
        .iter()
        .filter_map(|d| Spec::of(d.name.as_deref()?, d.server.as_ref()?))
        .map(|s| (s.upstream.clone(), Arc::new(s)))
        .collect()
}

impl Credentials {
    /// Revoke and delete the credentials `config` (after `previous`, at a reload) leaves to
    /// nobody (see the module's documentation); how many were deleted.
    pub async fn sweep(
        &self,
        previous: Option<&Config>,
        config: &Config,
    ) -> Result<usize, CredError> {
        let signins = Signins::of(previous, config);
        let now = specs_of(config);
        let before = previous.map(specs_of).unwrap_or_default();
        let all = RowFilter {
            principal: None,
            upstream: None,
        };
        let found: Vec<(Connection, Stale)> = self
            .vault
            .connections(all)
            .await?
            .into_iter()
            .filter_map(|c| stale(&c, &now, &signins).map(|why| (c, why)))
            .collect();
        let mut counts: HashMap<Stale, usize> = HashMap::new();
        for (c, why) in found.iter().take(MAX_SWEPT) {
            let under = Under {
                credentials: self,
                spec: spec_for(c, &before, &now),
            };
            let Some(revoked) = self.vault.revoke_listed(c, &under).await? else {
                continue;
            };
            lock(&self.cache).remove(&(c.principal.clone(), c.upstream.clone()));
            *counts.entry(*why).or_default() += 1;
            let detail = format!(
                "{}: {}",
                why.describe(),
                super::revocation::describe(&revoked.at_authorization_server)
            );
            self.audit(
                "upstream_auth.revoked",
                Some(&c.principal),
                &c.upstream,
                "ok",
                Some(&detail),
            );
        }
        let swept: usize = counts.values().sum();
        if swept > 0 || found.len() > MAX_SWEPT {
            let mut reasons: Vec<String> = counts
                .iter()
                .map(|(why, n)| format!("{n}: {}", why.describe()))
                .collect();
            reasons.sort();
            tracing::info!(
                "Upstream credentials: {swept} revoked and deleted ({}){}",
                reasons.join("; "),
                if found.len() > MAX_SWEPT {
                    format!(
                        "; {} more at the next start or reload",
                        found.len() - MAX_SWEPT
                    )
                } else {
                    String::new()
                }
            );
        }
        Ok(swept)
    }
}
