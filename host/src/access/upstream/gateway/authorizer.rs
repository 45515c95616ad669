//! The [`Authorizer`] of one principal's connection to one upstream with `server.auth`: every
//! request carries that principal's current token from [`Credentials`] (read at each request, so
//! a token refreshed or obtained meanwhile — on any replica — is used at once), and a refusal is
//! answered by [`Credentials::rejected`]. What it cannot answer (consent is needed, or nothing can
//! be done) is kept for the session's owner to read ([`CallerAuthorizer::take_need`]): the
//! request's error only says so in words.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::{CredentialSlot, Credentials, Need};
use crate::access::upstream::{AuthFailure, Authorizer, Principal, Refusal, Secret};

/// One principal's authorizer at one upstream (see the module's documentation).
pub struct CallerAuthorizer {
    credentials: CredentialSlot,
    who: Principal,
    upstream: String,
    need: Mutex<Option<Need>>,
}

impl std::fmt::Debug for CallerAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerAuthorizer")
            .field("who", &self.who)
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

impl CallerAuthorizer {
    /// The authorizer of `who` at `upstream`.
    pub fn new(credentials: CredentialSlot, who: Principal, upstream: &str) -> CallerAuthorizer {
        CallerAuthorizer {
            credentials,
            who,
            upstream: upstream.to_owned(),
            need: Mutex::new(None),
        }
    }

    /// Whose.
    pub fn principal(&self) -> &Principal {
        &self.who
    }

    /// The service, once the host's store is open.
    fn service(&self) -> Option<&Arc<Credentials>> {
        self.credentials.get()
    }

    /// The service, once the host's store is open.
    pub fn credentials(&self) -> Option<Arc<Credentials>> {
        self.service().cloned()
    }

    /// What the last refusal it could not answer needs (taken: read once).
    pub fn take_need(&self) -> Option<Need> {
        super::lock(&self.need).take()
    }
}

impl Authorizer for CallerAuthorizer {
    fn token(&self) -> BoxFuture<'_, Option<Secret>> {
        Box::pin(async move {
            let credentials = self.service()?;
            match credentials.token(&self.who, &self.upstream).await {
                Ok(token) => token,
                Err(e) => {
                    tracing::warn!(
                        "Upstream {}: {}'s token cannot be read: {e}",
                        self.upstream,
                        self.who
                    );
                    None
                }
            }
        })
    }

    fn key_header(&self) -> Option<super::api_key::KeyHeader> {
        self.service()?.spec(&self.upstream)?.key_header.clone()
    }

    fn refused(
        &self,
        refusal: Refusal,
        sent: Option<Secret>,
    ) -> BoxFuture<'_, Result<Secret, AuthFailure>> {
        Box::pin(async move {
            let Some(credentials) = self.service() else {
                return Err(AuthFailure::Failed(
                    "the token vault is not open yet".into(),
                ));
            };
            let answered = credentials
                .rejected(&self.who, &self.upstream, sent.as_ref(), &refusal)
                .await;
            answered.map_err(|need| {
                let why = need.describe(&self.who, &self.upstream);
                *super::lock(&self.need) = Some(need);
                AuthFailure::Refused(why)
            })
        })
    }
}
