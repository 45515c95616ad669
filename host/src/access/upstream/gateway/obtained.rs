//! Credentials obtained without a user's consent, beside the consented ones of [`Credentials`]:
//!
//! - **Token exchange** (`server.auth.mode: token_exchange`, RFC 8693): a caller's own token at
//!   the upstream is the caller's verified inbound JWT exchanged at the upstream's authorization
//!   server for one with the upstream's audience. The JWT a caller presented is remembered for
//!   its user (bounded, until it expires: [`Subjects`]) so that a session's requests — and a
//!   refusal's retry — can exchange again when the exchanged token runs out. A call without a
//!   JWT (a personal secret, no token) is refused: it has nothing to exchange.
//! - **Service identity** (`mode: client_credentials`, or `list_as: service`): one token of the
//!   host's own client (principal `@service`) for every caller, obtained again before it expires.
//!
//! Both are kept in the vault like consented tokens (sealed, per principal and upstream, under
//! the upstream's identity digest), obtained by one task of a replica at a time (replicas may
//! each obtain one: either is valid), and never refreshed with a refresh token: obtained anew.
//! The authorization server is the one the upstream's protected-resource metadata names, and it
//! must be the configured `issuer` the client is registered with.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{CredError, Credentials, Need, Spec, key, lock, now_ms};
use crate::access::upstream::challenge::Status;
use crate::access::upstream::engine::discover;
use crate::access::upstream::grants::{self, ClientAuth, Exchange, Granted};
use crate::access::upstream::http::{Client, Reach};
use crate::access::upstream::registration::{AuthMethod, Preregistered};
use crate::access::upstream::vault::{Credential, Expect};
use crate::access::upstream::{AuthFailure, Principal, Refusal, Secret};
use crate::config::{ListAs, ServerAuthMode, SubjectTokenType};

/// The most users whose inbound token is remembered at once.
const MAX_SUBJECTS: usize = 10_000;
/// How long a subject token without `exp` is remembered.
const SUBJECT_TTL: Duration = Duration::from_secs(300);

/// A caller's inbound token, remembered to be exchanged.
struct Subject {
    token: Secret,
    expires_ms: u64,
}

/// The inbound JWTs of callers of upstreams that exchange them, by user: the latest each
/// presented, until it expires.
#[derive(Default)]
pub(super) struct Subjects(Mutex<HashMap<String, Subject>>);

impl Subjects {
    fn remember(&self, who: &Principal, token: &Secret, expires_ms: u64) {
        let mut subjects = lock(&self.0);
        let now = now_ms();
        if subjects.len() >= MAX_SUBJECTS {
            subjects.retain(|_, s| s.expires_ms > now);
        }
        if subjects.len() >= MAX_SUBJECTS && !subjects.contains_key(&who.0) {
            return;
        }
        subjects.insert(
            who.0.clone(),
            Subject {
                token: token.clone(),
                expires_ms,
            },
        );
    }

    fn get(&self, who: &Principal) -> Option<Secret> {
        let subjects = lock(&self.0);
        let subject = subjects.get(&who.0)?;
        (subject.expires_ms > now_ms()).then(|| subject.token.clone())
    }
}

/// Whose token `who` uses at `spec`'s upstream when it is obtained without consent: `who`'s
/// own (token exchange), the service's (`client_credentials`, or the listing as `service`);
/// `None`: a consented one.
pub(super) fn obtained(spec: &Spec, who: &Principal) -> Option<Principal> {
    match spec.mode {
        ServerAuthMode::ClientCredentials => Some(Principal::service()),
        ServerAuthMode::TokenExchange => Some(who.clone()),
        ServerAuthMode::Oauth => {
            (spec.list_as == ListAs::Service && service(who)).then(|| who.clone())
        }
    }
}

/// A user's credential as a plugin may have it: never the refresh token.
#[derive(Debug)]
pub struct PluginCredential {
    /// The access token.
    pub access_token: Secret,
    /// `Bearer`, ...
    pub token_type: String,
    /// When it expires (Unix ms), when known.
    pub expires_at_ms: Option<u64>,
    /// The scopes granted, when known.
    pub scopes: Vec<String>,
}

fn service(who: &Principal) -> bool {
    *who == Principal::service()
}

impl Credentials {
    /// `who`'s own credential at `upstream` for a plugin (`CallContext::credential`): consented
    /// or exchanged — not the service identity's, which is no user's. `None`: `who` holds none
    /// (consent is needed).
    pub async fn credential_of(
        &self,
        who: &Principal,
        upstream: &str,
    ) -> Result<Option<PluginCredential>, CredError> {
        let spec = self.spec_or(upstream)?;
        if spec.mode == ServerAuthMode::ClientCredentials || who.is_reserved() {
            return Err(CredError::Config(format!(
                "{upstream} uses the host's service identity, not each user's: plugins get no \
                 token of it"
            )));
        }
        let Some(token) = self.token(who, upstream).await? else {
            return Ok(None);
        };
        let held = self
            .vault
            .credential(&who.0, upstream, &spec.identity)
            .await?
            .map(|s| s.credential)
            .filter(|c| c.access_token == token);
        Ok(Some(match held {
            Some(c) => PluginCredential {
                access_token: c.access_token,
                token_type: c.token_type,
                expires_at_ms: c.expires_at_ms,
                scopes: c.scopes,
            },
            None => PluginCredential {
                access_token: token,
                token_type: "Bearer".into(),
                expires_at_ms: None,
                scopes: Vec::new(),
            },
        }))
    }

    /// A call of `who` to `upstream` came with `subject_token` (the caller's verified JWT, which
    /// expires at `exp`, Unix seconds): remembered when the upstream exchanges callers' tokens.
    pub fn present_subject(
        &self,
        who: &Principal,
        upstream: &str,
        subject_token: Option<&Secret>,
        exp: Option<u64>,
    ) {
        let exchanges = self
            .spec(upstream)
            .is_some_and(|s| s.mode == ServerAuthMode::TokenExchange);
        if let (true, Some(token)) = (exchanges, subject_token) {
            let ttl = now_ms().saturating_add(SUBJECT_TTL.as_millis() as u64);
            let expires_ms = exp.map_or(ttl, |e| e.saturating_mul(1000));
            self.subjects.remember(who, token, expires_ms);
        }
    }

    /// The token of `who` at `spec`'s upstream when it is obtained without consent: the one
    /// held while it is fresh, else one obtained now (`force`: even if the one held looks
    /// fresh — the upstream refused it).
    pub(super) async fn obtained_token(
        &self,
        who: &Principal,
        spec: &Spec,
        force: bool,
    ) -> Result<Option<Secret>, CredError> {
        let k = key(who, &spec.upstream);
        if !force && let Some((token, _)) = self.cached(&k) {
            return Ok(Some(token));
        }
        let serial = Arc::clone(lock(&self.refreshing).entry(k.clone()).or_default());
        let _one = serial.lock().await;
        let held = self
            .vault
            .credential(&who.0, &spec.upstream, &spec.identity)
            .await?;
        if let Some(held) = held {
            let newer = lock(&self.cache)
                .get(&k)
                .is_none_or(|c| c.version != held.version);
            if (!force || newer) && !super::due(&held.credential) {
                self.remember(&k, &held);
                return Ok(Some(held.credential.access_token));
            }
        }
        self.obtain_and_keep(who, spec, &[]).await.map(Some)
    }

    /// Obtain a token for `who` at `spec`'s upstream (asking `extra` scopes besides the usual
    /// ones), audited, kept in the vault and the cache.
    async fn obtain_and_keep(
        &self,
        who: &Principal,
        spec: &Spec,
        extra: &[String],
    ) -> Result<Secret, CredError> {
        let granted = self.obtain(who, spec, extra).await;
        let (what, outcome) = match &granted {
            Ok(_) => ("upstream_auth.obtained", "ok"),
            Err(_) => ("upstream_auth.obtain_failed", "failed"),
        };
        let why = granted.as_ref().err().map(ToString::to_string);
        self.audit(what, Some(&who.0), &spec.upstream, outcome, why.as_deref());
        let (granted, issuer, client_id, asked) = granted?;
        let credential = credential(granted, issuer, client_id, &asked);
        let (upstream, identity) = (&spec.upstream, &spec.identity);
        let version = self
            .vault
            .save_credential(&who.0, upstream, identity, &credential, Expect::Any)
            .await?;
        let stored = crate::access::upstream::vault::StoredCredential {
            credential,
            version,
            updated_ms: now_ms(),
            last_used_ms: now_ms(),
        };
        self.remember(&key(who, upstream), &stored);
        Ok(stored.credential.access_token)
    }

    /// Obtain a token for `who` at `spec`'s upstream: exchanged, or the service's. What was
    /// granted, by which issuer, to which client, for which scopes asked.
    async fn obtain(
        &self,
        who: &Principal,
        spec: &Spec,
        extra: &[String],
    ) -> Result<(Granted, String, String, Vec<String>), CredError> {
        let (pre, secret) = client_of(spec)?;
        let subject = if service(who) {
            None
        } else {
            Some(
                self.subjects
                    .get(who)
                    .ok_or_else(|| no_subject(who, spec))?,
            )
        };
        let url = url::Url::parse(&spec.url)
            .map_err(|e| AuthFailure::Failed(format!("{}: {e}", spec.url)))?;
        let reach = Reach::of(&url, self.settings().allow_private);
        let http = Arc::new(
            Client::new(reach, !spec.resource).map_err(|e| AuthFailure::Failed(e.to_string()))?,
        );
        let challenge = self.challenge(&spec.upstream);
        let found = discover(
            &spec.url,
            Arc::clone(&http) as _,
            challenge.as_deref(),
            true,
        )
        .await?;
        if pre.issuer.as_deref().is_some_and(|i| i != found.issuer) {
            return Err(AuthFailure::Refused(format!(
                "upstream {}'s authorization server is {}, not the issuer its client is \
                 registered with (server.auth.issuer): its client is presented to no other",
                spec.upstream, found.issuer
            ))
            .into());
        }
        let scopes = asked_scopes(spec, &found.manager, extra).await;
        let client = ClientAuth {
            client_id: &pre.client_id,
            secret,
            method: spec.method.unwrap_or(AuthMethod::ClientSecretBasic),
            assertion: false,
        };
        let endpoint = found.metadata.token_endpoint.as_str();
        let granted = match subject {
            None => {
                grants::client_credentials(&http, endpoint, &client, &spec.url, &scopes).await?
            }
            Some(subject) => {
                let exchange = Exchange {
                    subject_token: &subject,
                    subject_token_type: spec.subject_token_type.urn(),
                    resource: &spec.url,
                    audience: spec.audience.as_deref(),
                    scopes: &scopes,
                };
                grants::exchange(&http, endpoint, &client, &exchange).await?
            }
        };
        Ok((granted, found.issuer, pre.client_id.clone(), scopes))
    }

    /// The upstream refused a token obtained without consent: one obtained anew (once) — for
    /// the scopes held and those a `403 insufficient_scope` names, at most [`super::MAX_STEP_UPS`]
    /// times per window — else nothing to be done (no consent is asked for these).
    pub(super) async fn rejected_obtained(
        &self,
        who: &Principal,
        spec: &Spec,
        sent: Option<&Secret>,
        refusal: &Refusal,
    ) -> Result<Secret, Need> {
        let upstream = spec.upstream.as_str();
        let whose = self.whose(who);
        let obtained = if refusal.insufficient_scope() {
            if !self.step_up_allowed(who, upstream) {
                return Err(Need::GiveUp(format!(
                    "upstream {upstream} keeps refusing {whose}'s token for want of scope \
                     ({}): set server.auth.scopes",
                    refusal.scopes().join(" ")
                )));
            }
            let held = self.granted(who, spec).await;
            let wanted = crate::access::upstream::scopes::union(&held, &refusal.scopes());
            self.obtain_and_keep(who, spec, &wanted).await.map(Some)
        } else if refusal.status == Status::Forbidden {
            return Err(Need::GiveUp(format!(
                "upstream {upstream} refused {whose}'s token (HTTP 403) without naming a scope"
            )));
        } else {
            self.obtained_token(who, spec, sent.is_some()).await
        };
        match obtained {
            Ok(Some(token)) if Some(&token) != sent => Ok(token),
            Ok(_) => Err(Need::GiveUp(format!(
                "upstream {upstream} refused {whose}'s token obtained by {}",
                how(spec, who)
            ))),
            Err(e) => Err(Need::GiveUp(format!("upstream {upstream}: {e}"))),
        }
    }

    fn whose(&self, who: &Principal) -> String {
        if service(who) {
            "the host's service identity".into()
        } else {
            who.0.clone()
        }
    }
}

/// The client `spec` names, and its secret.
fn client_of(spec: &Spec) -> Result<(&Preregistered, &Secret), CredError> {
    let missing = |what: &str| {
        CredError::Config(format!(
            "upstream {} needs server.auth.{what} (a client registered beforehand)",
            spec.upstream
        ))
    };
    let pre = spec
        .preregistered
        .as_ref()
        .ok_or_else(|| missing("client_id"))?;
    let secret = pre
        .client_secret
        .as_ref()
        .ok_or_else(|| missing("client_secret"))?;
    Ok((pre, secret))
}

/// The scopes to ask for: the configured ones, else those the upstream's challenge names, else
/// its metadata's `scopes_supported` (never `offline_access` or `openid`: no refresh token, no
/// ID token here) — with `extra`.
async fn asked_scopes(
    spec: &Spec,
    manager: &rmcp::transport::auth::AuthorizationManager,
    extra: &[String],
) -> Vec<String> {
    let base: Vec<String> = if spec.scopes.is_empty() {
        let found = manager.select_initial_scopes(&[]).await;
        found
            .into_iter()
            .filter(|s| s != "offline_access" && s != "openid")
            .collect()
    } else {
        spec.scopes.clone()
    };
    crate::access::upstream::scopes::union(&base, extra)
}

/// How `spec` obtains `who`'s tokens, in words.
fn how(spec: &Spec, who: &Principal) -> &'static str {
    if spec.mode == ServerAuthMode::TokenExchange && !service(who) {
        "token exchange"
    } else {
        "client_credentials"
    }
}

/// The refusal of a call that brings no token to exchange.
fn no_subject(who: &Principal, spec: &Spec) -> CredError {
    CredError::Auth(AuthFailure::Refused(format!(
        "upstream {} takes each caller's own token, exchanged for the caller's token at mcp-host \
         (RFC 8693): {who}'s call came without a bearer JWT to exchange (a personal mcp_ secret \
         cannot be exchanged; sign in with a token of the upstream's identity provider)",
        spec.upstream
    )))
}

/// The vault's credential of what was granted.
fn credential(granted: Granted, issuer: String, client_id: String, asked: &[String]) -> Credential {
    let now = now_ms();
    let expires_at_ms = granted
        .expires_in
        .map(|s| now.saturating_add(s.saturating_mul(1000)));
    let scopes = granted.scope.map_or_else(
        || asked.to_vec(),
        |s| s.split_whitespace().map(str::to_owned).collect(),
    );
    Credential {
        access_token: granted.access_token,
        refresh_token: None,
        token_type: granted.token_type,
        scopes,
        issuer,
        client_id,
        expires_at_ms,
        refresh_after_ms: None,
        received_at_ms: now,
    }
}

/// The type of subject token `spec` presents.
pub(super) fn subject_type(auth: &crate::config::ServerAuth) -> SubjectTokenType {
    auth.token_exchange
        .as_ref()
        .map(|t| t.subject_token_type)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_token_is_remembered_until_it_expires_and_bounded() {
        let subjects = Subjects::default();
        let alice = Principal("alice".into());
        let token = Secret::new("eyJ.alice");
        subjects.remember(&alice, &token, now_ms() + 60_000);
        assert_eq!(subjects.get(&alice), Some(token));
        subjects.remember(&alice, &Secret::new("eyJ.old"), now_ms().saturating_sub(1));
        assert_eq!(
            subjects.get(&alice),
            None,
            "an expired token is not exchanged"
        );
        for i in 0..MAX_SUBJECTS {
            subjects.remember(
                &Principal(format!("u{i}")),
                &Secret::new("t"),
                now_ms() + 60_000,
            );
        }
        let late = Principal("late".into());
        subjects.remember(&late, &Secret::new("t"), now_ms() + 60_000);
        assert!(lock(&subjects.0).len() <= MAX_SUBJECTS, "bounded");
    }
}
