//! Per-user static credentials (`server.auth.mode: api_key`) for upstreams without OAuth: the
//! first call of a user without a key asks for one as any consent is asked (a link to
//! `<public_url>/oauth/connect/<flow id>`), but the flow ([`Credentials::begin_key_entry`]) has no
//! authorization server: the connect page is a form where the user enters the key once
//! ([`Credentials::enter_key`]), checked as the OAuth page checks who follows a link. The key is
//! kept in the vault, sealed, as that user's credential (no expiry, nothing to refresh), and sent
//! in the configured header ([`KeyHeader`]) on that user's requests to that upstream. A key the
//! upstream refuses (401) is forgotten and asked for again. No key is ever logged, audited, shown
//! or put in an error.

use serde::{Deserialize, Serialize};

use super::consent::{CONNECT_PATH, CallbackRefusal, Completed, Consent, random_secret};
use super::{CredError, Credentials, Spec, now_ms};
use crate::access::upstream::vault::{Credential, Expect, NewFlow, Taken};
use crate::access::upstream::{AuthFailure, Principal, Secret};
use crate::config::{ServerAuth, ServerAuthMode};

/// The longest key accepted.
pub const MAX_KEY_BYTES: usize = 4096;
/// What a key credential's `issuer` and `token_type` say in the vault (and `vault list`).
pub const KEY_ISSUER: &str = "api_key";

/// Where a user's key is sent: `<name>: <prefix><key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHeader {
    /// The header's name.
    pub name: String,
    /// What precedes the key.
    pub prefix: String,
}

impl KeyHeader {
    /// The header of `auth`, with `mode: api_key`.
    pub fn of(auth: &ServerAuth) -> Option<KeyHeader> {
        (auth.mode == ServerAuthMode::ApiKey).then(|| KeyHeader {
            name: auth
                .header
                .clone()
                .unwrap_or_else(|| "authorization".into()),
            prefix: auth.prefix.clone().unwrap_or_default(),
        })
    }

    /// The header's value for `key`.
    pub fn value(&self, key: &Secret) -> Secret {
        Secret::new(format!("{}{}", self.prefix, key.expose()))
    }
}

/// What a key flow keeps (sealed in the vault): its `state` (how it is taken, once) and when it
/// began.
#[derive(Serialize, Deserialize)]
struct KeyPayload {
    api_key: bool,
    state: String,
    since_ms: u64,
}

/// A pending key flow as the connect page needs it.
#[derive(Debug, Clone)]
pub struct KeyFlow {
    /// Whose key.
    pub principal: String,
    /// For which upstream.
    pub upstream: String,
}

fn refused(
    reason: &'static str,
    message: &str,
    who: Option<&str>,
    at: Option<&str>,
) -> CallbackRefusal {
    CallbackRefusal {
        reason,
        message: message.to_owned(),
        principal: who.map(str::to_owned),
        upstream: at.map(str::to_owned),
    }
}

/// Whether `key` can be kept and sent after `header`'s prefix (a header value, bounded).
fn acceptable(header: &KeyHeader, key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY_BYTES
        && http::HeaderValue::from_str(&format!("{}{key}", header.prefix)).is_ok()
}

impl Credentials {
    /// Begin a key flow of `who` at `spec`'s upstream (for `request`): the link to the form.
    pub(super) async fn begin_key_entry(
        &self,
        who: &Principal,
        spec: &Spec,
        request: &str,
    ) -> Result<Consent, CredError> {
        let settings = self.settings();
        let Some(public_url) = settings.public_url.clone() else {
            return Err(CredError::Config(
                "upstream_auth.public_url is not set: no key can be asked for".into(),
            ));
        };
        let state = random_secret()?;
        let since_ms = now_ms();
        let payload = KeyPayload {
            api_key: true,
            state: state.clone(),
            since_ms,
        };
        let payload = serde_json::to_string(&payload)
            .map_err(|e| AuthFailure::Failed(format!("the flow's payload: {e}")))?;
        let flow = NewFlow {
            principal: who.0.clone(),
            upstream: spec.upstream.clone(),
            identity: spec.identity.clone(),
            state: Secret::new(state),
            request: request.chars().take(512).collect(),
            // No authorization server: the connect page is the key form.
            authorization_url: Secret::new(format!("{public_url}{CONNECT_PATH}")),
            payload: Secret::new(payload),
            ttl: settings.flow_ttl,
        };
        let flow_id = self.vault.begin_flow(flow).await?;
        self.audit(
            "upstream_auth.consent_started",
            Some(&who.0),
            &spec.upstream,
            "ok",
            Some("api_key"),
        );
        Ok(Consent {
            url: format!("{public_url}{CONNECT_PATH}{flow_id}"),
            message: format!(
                "{} needs your API key: open the link to enter it once.",
                spec.upstream
            ),
            flow_id,
            since_ms,
        })
    }

    /// The pending key flow `flow_id`; `None` when unknown, expired, used, or an OAuth flow.
    pub async fn key_flow(&self, flow_id: &str) -> Result<Option<KeyFlow>, CredError> {
        Ok(self.key_payload(flow_id).await?.map(|(flow, _)| flow))
    }

    async fn key_payload(&self, flow_id: &str) -> Result<Option<(KeyFlow, KeyPayload)>, CredError> {
        let Some(flow) = self.vault.pending_flow(flow_id).await? else {
            return Ok(None);
        };
        let Ok(payload) = serde_json::from_str::<KeyPayload>(flow.payload.expose()) else {
            return Ok(None);
        };
        let view = KeyFlow {
            principal: flow.principal,
            upstream: flow.upstream,
        };
        Ok(payload.api_key.then_some((view, payload)))
    }

    /// Keep `key` as the credential of the user of key flow `flow_id`, entered by a browser whose
    /// form proved it is `login` (when the page asks): the flow is taken (once) and the waiting
    /// calls woken. Refusals are audited with a reason; the key never is.
    pub async fn enter_key(
        &self,
        flow_id: &str,
        login: Option<&str>,
        key: &Secret,
    ) -> Result<Completed, CallbackRefusal> {
        let done = self.enter_key_checked(flow_id, login, key).await;
        self.record_landing(&done, super::consent::Landing::Key);
        done
    }

    async fn enter_key_checked(
        &self,
        flow_id: &str,
        login: Option<&str>,
        key: &Secret,
    ) -> Result<Completed, CallbackRefusal> {
        let gone = "This link is unknown, expired or used: call the tool again for a new one.";
        let (flow, payload) = match self.key_payload(flow_id).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(refused("unknown_state", gone, None, None)),
            Err(_) => {
                return Err(refused(
                    "unavailable",
                    "The vault is unavailable.",
                    None,
                    None,
                ));
            }
        };
        let (who, at) = (Some(flow.principal.as_str()), Some(flow.upstream.as_str()));
        if login.is_some_and(|l| l != flow.principal) {
            let message = "This link was made for another user: ask your own client for a link.";
            return Err(refused("other_user", message, who, at));
        }
        let spec = self.spec(&flow.upstream);
        let Some(header) = spec.as_ref().and_then(|s| s.key_header.clone()) else {
            let message = "The upstream's configuration changed since this link was made.";
            return Err(refused("upstream_changed", message, who, at));
        };
        if !acceptable(&header, key.expose().trim()) {
            let message = "That key cannot be sent as an HTTP header (empty, too long, or with \
                           characters a header cannot hold): open the link again.";
            return Err(refused("bad_key", message, who, at));
        }
        let pending = match self.vault.take_flow_checked(&payload.state).await {
            Ok(Taken::Pending(pending)) => pending,
            Ok(_) => return Err(refused("replayed", gone, who, at)),
            Err(_) => return Err(refused("unavailable", "The vault is unavailable.", who, at)),
        };
        if spec.as_ref().is_none_or(|s| s.identity != pending.identity) {
            let message = "The upstream's configuration changed since this link was made.";
            return Err(refused("upstream_changed", message, who, at));
        }
        let credential = Credential {
            access_token: Secret::new(key.expose().trim().to_owned()),
            refresh_token: None,
            token_type: KEY_ISSUER.into(),
            scopes: Vec::new(),
            issuer: KEY_ISSUER.into(),
            client_id: String::new(),
            expires_at_ms: None,
            refresh_after_ms: None,
            received_at_ms: now_ms(),
        };
        self.vault
            .save_credential(
                &pending.principal,
                &pending.upstream,
                &pending.identity,
                &credential,
                Expect::Any,
            )
            .await
            .map_err(|e| refused("unavailable", &e.to_string(), who, at))?;
        Ok(Completed {
            principal: pending.principal,
            upstream: pending.upstream,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_key(header: Option<&str>, prefix: Option<&str>) -> ServerAuth {
        ServerAuth {
            mode: ServerAuthMode::ApiKey,
            header: header.map(str::to_owned),
            prefix: prefix.map(str::to_owned),
            list_as: crate::config::ListAs::None,
            ..ServerAuth::default()
        }
    }

    #[test]
    fn a_key_is_sent_in_the_configured_header_after_its_prefix() {
        let auth = api_key(Some("Authorization"), Some("Bearer "));
        let header = KeyHeader::of(&auth).unwrap();
        assert_eq!(header.name, "Authorization");
        assert_eq!(header.value(&Secret::new("k1")).expose(), "Bearer k1");
        assert!(KeyHeader::of(&ServerAuth::default()).is_none());
        assert!(acceptable(&header, "k1"));
        assert!(!acceptable(&header, ""));
        assert!(!acceptable(&header, "a\r\nX-Injected: 1"));
        assert!(!acceptable(&header, &"k".repeat(MAX_KEY_BYTES + 1)));
    }

    #[test]
    fn api_key_needs_a_valid_header_and_takes_no_oauth_settings() {
        let url = Some("https://k.example/mcp");
        assert_eq!(api_key(Some("X-Api-Key"), None).problem(url), None);
        assert_eq!(api_key(None, None).problem(url).unwrap().0, ".header");
        assert_eq!(
            api_key(Some("bad header"), None).problem(url).unwrap().0,
            ".header"
        );
        let mut oauth = api_key(Some("X-Api-Key"), None);
        oauth.scopes = vec!["s".into()];
        assert_eq!(oauth.problem(url).unwrap().0, ".mode");
        let mut service = api_key(Some("X-Api-Key"), None);
        service.list_as = crate::config::ListAs::Service;
        assert_eq!(service.problem(url).unwrap().0, ".list_as");
        let stray = ServerAuth {
            header: Some("X-Api-Key".into()),
            ..ServerAuth::default()
        };
        assert_eq!(stray.problem(url).unwrap().0, ".header");
        // Another header is another identity: keys entered for the old one do not open.
        let a = api_key(Some("X-Api-Key"), None).identity("https://k.example/mcp");
        let b = api_key(Some("X-Key"), None).identity("https://k.example/mcp");
        assert_ne!(a, b);
    }
}
