//! A user's consent to an upstream, as the gateway asks it: a **flow** begun for the user
//! ([`Credentials::begin_consent`]) — discovery, the client at the authorization server (kept in
//! the vault per issuer: registered beforehand, the host's metadata document, or registered
//! dynamically as a `web` client whose redirect URI is `<public_url>/oauth/callback`), the scopes,
//! the authorization URL with PKCE and `state` — kept in the vault, sealed, bound to the user,
//! with a random **browser secret**; the user's client is asked to open
//! `<public_url>/oauth/connect/<flow id>`, whose page (transport's) checks who follows it and
//! hands the browser secret to that browser in a cookie before redirecting to the authorization
//! server. The **callback** ([`Credentials::complete`]) takes the flow by its `state` (once, on any
//! replica), and refuses — audited, naming a reason — a state it does not know, one taken before
//! (a replay), an expired flow, a browser logged in as another user, a browser without the
//! flow's secret (an authorization URL passed to someone else), an `iss` that is not the issuer's
//! (RFC 9207, exact comparison); only then is an `error` believed, and the code exchanged (with
//! the PKCE verifier: a code from another flow fails at the authorization server).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rmcp::transport::auth::{AuthError, StateStore, StoredAuthorizationState};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{CredError, Credentials, Need, Spec, key, lock, now_ms};
use crate::access::upstream::engine::{Discovered, configure_client, one_line};
use crate::access::upstream::flow::{Callback, check_iss};
use crate::access::upstream::http::url_without_resource;
use crate::access::upstream::registration::{
    AuthMethod, Choice, Kind, Plan, Registration, Request, ServerFacts, choose, register,
};
use crate::access::upstream::vault::{Expect, NewFlow, Taken, state_hash};
use crate::access::upstream::vault_tokens::{RowStore, client_of, registration_of};
use crate::access::upstream::{AuthFailure, Principal, Secret, scopes};

/// How a consent landed: through the authorization server's callback, or a key entered in the
/// host's form.
#[derive(Clone, Copy)]
pub(super) enum Landing {
    Callback,
    Key,
}

/// Where authorization servers send users back.
pub const CALLBACK_PATH: &str = "/oauth/callback";
/// Where consent links point: `<CONNECT_PATH><flow id>`.
pub const CONNECT_PATH: &str = "/oauth/connect/";
/// The host's client metadata document.
pub const METADATA_PATH: &str = "/oauth/client-metadata.json";
/// The cookie carrying a flow's browser secret: `<BROWSER_COOKIE><flow id>`.
pub const BROWSER_COOKIE: &str = "mcp_oauth_";
/// States of flows taken lately remembered (to tell a replay from an unknown state).
const MAX_TAKEN: usize = 4096;

/// A consent asked of a user: the link to show, and the flow's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consent {
    /// The flow's id.
    pub flow_id: String,
    /// `<public_url>/oauth/connect/<flow id>`.
    pub url: String,
    /// What the user is told.
    pub message: String,
    /// When the flow began (Unix ms): a credential obtained since completes it.
    pub since_ms: u64,
}

/// A pending flow as the connect page needs it.
#[derive(Debug, Clone)]
pub struct FlowView {
    /// Whose consent.
    pub principal: String,
    /// For which upstream.
    pub upstream: String,
    /// The authorization URL to send the browser to.
    pub authorization_url: Secret,
    /// The secret the browser gets in a cookie (checked at the callback).
    pub browser: Secret,
    /// The origin of the authorization URL (for the page's `form-action`).
    pub authorization_origin: String,
    /// Seconds it stays valid.
    pub ttl_secs: u64,
}

/// A completed consent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// Whose.
    pub principal: String,
    /// At which upstream.
    pub upstream: String,
}

/// Why a callback was refused: a reason (audited) and what the page says (never one of the
/// callback's parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackRefusal {
    /// The reason, as audited: `no_state`, `unknown_state`, `replayed`, `expired`, `other_user`,
    /// `other_browser`, `iss_mismatch`, `denied`, `no_code`, `upstream_changed`,
    /// `issuer_changed`, `token_exchange_failed`, `unavailable`.
    pub reason: &'static str,
    /// What the user is told.
    pub message: String,
    /// Whose flow it was, when one was found.
    pub principal: Option<String>,
    /// For which upstream.
    pub upstream: Option<String>,
}

impl CallbackRefusal {
    /// The refusal, of the flow of `principal` at `upstream`.
    fn of(mut self, principal: &str, upstream: &str) -> CallbackRefusal {
        self.principal = Some(principal.to_owned());
        self.upstream = Some(upstream.to_owned());
        self
    }
}

fn refusal(reason: &'static str, message: impl Into<String>) -> CallbackRefusal {
    CallbackRefusal {
        reason,
        message: message.into(),
        principal: None,
        upstream: None,
    }
}

/// The registration kept in a flow (sealed with it).
#[derive(Serialize, Deserialize)]
struct Client {
    client_id: String,
    secret: Option<String>,
    method: String,
    kind: String,
}

/// What a flow keeps for its callback (sealed in the vault).
#[derive(Serialize, Deserialize)]
struct Payload {
    /// rmcp's state: the PKCE verifier, the expected issuer, the scopes asked for.
    pkce: StoredAuthorizationState,
    /// The challenge discovery started from.
    challenge: Option<String>,
    /// The authorization server's issuer.
    issuer: String,
    /// Whether it says it sends `iss` (RFC 9207).
    iss_advertised: bool,
    client: Client,
    /// The browser secret.
    browser: String,
    /// When the flow began (Unix ms).
    since_ms: u64,
}

/// The callback's parts the code exchange needs.
struct Exchange<'a> {
    upstream: &'a str,
    identity: &'a str,
    state: &'a str,
    code: &'a Secret,
    iss: Option<&'a str>,
}

/// rmcp's state store for one flow: at the start it captures the state rmcp makes; at the
/// callback it holds the one the flow kept.
#[derive(Clone, Default)]
struct OneState(Arc<Mutex<Option<(String, StoredAuthorizationState)>>>);

#[async_trait]
impl StateStore for OneState {
    async fn save(&self, csrf: &str, state: StoredAuthorizationState) -> Result<(), AuthError> {
        *lock(&self.0) = Some((csrf.to_owned(), state));
        Ok(())
    }

    async fn load(&self, csrf: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        Ok(lock(&self.0)
            .as_ref()
            .filter(|(c, _)| c == csrf)
            .map(|(_, s)| s.clone()))
    }

    async fn delete(&self, _csrf: &str) -> Result<(), AuthError> {
        *lock(&self.0) = None;
        Ok(())
    }
}

/// 256 random bits, base64url.
pub(super) fn random_secret() -> Result<String, AuthFailure> {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| AuthFailure::Failed(format!("no randomness: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Preregistered => "preregistered",
        Kind::MetadataDocument => "metadata_document",
        Kind::Dynamic => "dynamic",
    }
}

fn kind_named(name: &str) -> Kind {
    match name {
        "preregistered" => Kind::Preregistered,
        "metadata_document" => Kind::MetadataDocument,
        _ => Kind::Dynamic,
    }
}

impl Credentials {
    /// Begin a consent of `who` for `upstream` as `need` says (its challenge, the scopes a
    /// step-up adds), for `request` (what it answers, kept with the flow): the link to show.
    pub async fn begin_consent(
        &self,
        who: &Principal,
        upstream: &str,
        need: &Need,
        request: &str,
    ) -> Result<Consent, CredError> {
        let spec = self.spec_or(upstream)?;
        if spec.key_header.is_some() {
            return self.begin_key_entry(who, &spec, request).await;
        }
        let Need::Consent {
            scopes: extra,
            challenge,
            step_up,
        } = need
        else {
            return Err(CredError::Auth(AuthFailure::Refused(
                need.describe(who, upstream),
            )));
        };
        if *step_up && !self.step_up_allowed(who, upstream) {
            return Err(CredError::Auth(AuthFailure::Refused(format!(
                "upstream {upstream} asked {who} for more scope {} times in {} minutes: not \
                 asking again now",
                super::MAX_STEP_UPS,
                super::STEP_UP_WINDOW.as_secs() / 60
            ))));
        }
        let settings = self.settings();
        let (Some(public_url), Some(callback)) =
            (settings.public_url.clone(), settings.callback_url())
        else {
            return Err(CredError::Config(
                "upstream_auth.public_url is not set: no consent can be asked".into(),
            ));
        };
        let challenge = challenge.clone().or_else(|| self.challenge(upstream));
        let (url, payload, state) = self
            .prepare(&spec, who, extra, &callback, challenge)
            .await?;
        let flow = NewFlow {
            principal: who.0.clone(),
            upstream: upstream.to_owned(),
            identity: spec.identity.clone(),
            state,
            request: request.chars().take(512).collect(),
            authorization_url: url,
            payload: Secret::new(serde_json::to_string(&payload).map_err(|e| {
                CredError::Auth(AuthFailure::Failed(format!("the flow's payload: {e}")))
            })?),
            ttl: settings.flow_ttl,
        };
        let flow_id = self.vault.begin_flow(flow).await?;
        let what = if *step_up { "step_up" } else { "consent" };
        self.audit(
            "upstream_auth.consent_started",
            Some(&who.0),
            upstream,
            "ok",
            Some(what),
        );
        Ok(Consent {
            url: format!("{public_url}{CONNECT_PATH}{flow_id}"),
            message: format!(
                "{upstream} needs your authorization: open the link to connect your account{}.",
                if *step_up { " (more access)" } else { "" }
            ),
            flow_id,
            since_ms: payload.since_ms,
        })
    }

    /// Discovery and the authorization request of a flow of `who` at `spec`'s upstream (see
    /// [`Credentials::authorization`]); a refusal is audited.
    async fn prepare(
        &self,
        spec: &Spec,
        who: &Principal,
        extra: &[String],
        callback: &str,
        challenge: Option<String>,
    ) -> Result<(Secret, Payload, Secret), CredError> {
        let prepared = async {
            let found = self.discover(spec, challenge.as_deref()).await?;
            self.authorization(spec, who, found, extra, callback, challenge)
                .await
        };
        prepared.await.inspect_err(|e| {
            let why = e.to_string();
            let upstream = spec.upstream.as_str();
            self.audit(
                "upstream_auth.consent_refused",
                Some(&who.0),
                upstream,
                "refused",
                Some(&why),
            );
            tracing::warn!("Upstream {upstream}: no consent can be asked of {who}: {why}");
        })
    }

    /// The authorization request of a flow: the client at the server `found`, the scopes, the
    /// URL (with PKCE and state, `resource` as the upstream's switch says), what the callback
    /// will need, and the state.
    async fn authorization(
        &self,
        spec: &Spec,
        who: &Principal,
        found: Discovered,
        extra: &[String],
        callback: &str,
        challenge: Option<String>,
    ) -> Result<(Secret, Payload, Secret), CredError> {
        let Discovered {
            mut manager,
            metadata,
            issuer,
        } = found;
        let registration = self
            .registration(spec, &metadata, &issuer, callback)
            .await?;
        configure_client(&mut manager, &metadata, &registration, callback, "web")?;
        let capture = OneState::default();
        manager.set_state_store(capture.clone());
        let base = match spec.scopes.is_empty() {
            true => manager.select_initial_scopes(&[]).await,
            false => spec.scopes.clone(),
        };
        let granted = self.granted(who, spec).await;
        let asked = scopes::union(&granted, extra);
        let wanted = scopes::request(&asked, &base, metadata.scopes_supported.as_deref());
        let refs: Vec<&str> = wanted.iter().map(String::as_str).collect();
        let url = manager
            .get_authorization_url(&refs)
            .await
            .map_err(super::super::engine::failure)?;
        let url = match spec.resource {
            true => url,
            false => url_without_resource(&url),
        };
        let Some((state, pkce)) = lock(&capture.0).take() else {
            return Err(AuthFailure::Failed("no authorization state was made".into()).into());
        };
        let iss_advertised = metadata
            .additional_fields
            .get("authorization_response_iss_parameter_supported")
            == Some(&Value::Bool(true));
        let payload = Payload {
            pkce,
            challenge,
            issuer,
            iss_advertised,
            client: Client {
                client_id: registration.client_id.clone(),
                secret: registration
                    .client_secret
                    .as_ref()
                    .map(|s| s.expose().into()),
                method: registration.method.name().into(),
                kind: kind_name(registration.kind).into(),
            },
            browser: random_secret()?,
            since_ms: now_ms(),
        };
        Ok((Secret::new(url), payload, Secret::new(state)))
    }

    /// The client the gateway is at the authorization server of `issuer` for `spec`'s upstream:
    /// the one kept in the vault, else chosen now — registered beforehand, the host's metadata
    /// document, or registered dynamically (a `web` client, kept in the vault for every replica).
    async fn registration(
        &self,
        spec: &Spec,
        metadata: &rmcp::transport::auth::AuthorizationMetadata,
        issuer: &str,
        callback: &str,
    ) -> Result<Registration, CredError> {
        let kept = self
            .vault
            .client(&spec.upstream, issuer, &spec.identity)
            .await?;
        if let Some(kept) = kept {
            let mut r = registration_of(kept, Kind::Dynamic);
            r.method = spec.method.unwrap_or(r.method);
            return Ok(r);
        }
        let facts = ServerFacts::of(metadata);
        let document = self.settings().metadata_url();
        let choice = Choice {
            preregistered: spec.preregistered.as_ref(),
            metadata_url: document.as_deref(),
        };
        let mut registration = match choose(&choice, &facts)? {
            Plan::Preregistered => {
                let pre = spec.preregistered.clone().ok_or_else(|| {
                    CredError::Auth(AuthFailure::Failed("no preregistered client".into()))
                })?;
                Registration {
                    kind: Kind::Preregistered,
                    method: facts.method_for(pre.client_secret.is_some()),
                    client_id: pre.client_id,
                    client_secret: pre.client_secret,
                }
            }
            Plan::MetadataDocument(url) => Registration {
                kind: Kind::MetadataDocument,
                client_id: url,
                client_secret: None,
                method: AuthMethod::None,
            },
            Plan::Register(endpoint) => self.register(spec, &endpoint, &facts, callback).await?,
        };
        registration.method = spec.method.unwrap_or(registration.method);
        Ok(registration)
    }

    /// Register dynamically at `endpoint` as a `web` client whose redirect URI is `callback`;
    /// kept in the vault.
    async fn register(
        &self,
        spec: &Spec,
        endpoint: &str,
        facts: &ServerFacts,
        callback: &str,
    ) -> Result<Registration, CredError> {
        let url = url::Url::parse(&spec.url)
            .map_err(|e| AuthFailure::Failed(format!("{}: {e}", spec.url)))?;
        let reach = crate::access::upstream::http::Reach::of(&url, self.settings().allow_private);
        let http = crate::access::upstream::http::Client::new(reach, !spec.resource)
            .map_err(|e| AuthFailure::Failed(e.to_string()))?;
        let request = Request {
            client_name: "mcp-host",
            redirect_uri: callback,
            application_type: "web",
        };
        let registered = register(&http, endpoint, &request, facts).await?;
        let client = client_of(&facts.issuer, &registered);
        self.vault
            .save_client(&spec.upstream, &spec.identity, &client)
            .await?;
        tracing::info!(
            "Upstream {}: registered client {} at {}",
            spec.upstream,
            registered.client_id,
            facts.issuer
        );
        Ok(registered)
    }

    /// The pending flow `flow_id`, for its connect page; `None` when unknown, expired or used.
    pub async fn flow(&self, flow_id: &str) -> Result<Option<FlowView>, CredError> {
        let Some(flow) = self.vault.pending_flow(flow_id).await? else {
            return Ok(None);
        };
        let Ok(payload) = serde_json::from_str::<Payload>(flow.payload.expose()) else {
            return Ok(None);
        };
        let origin = url::Url::parse(flow.authorization_url.expose())
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default();
        Ok(Some(FlowView {
            principal: flow.principal,
            upstream: flow.upstream,
            authorization_url: flow.authorization_url,
            browser: Secret::new(payload.browser),
            authorization_origin: origin,
            ttl_secs: flow.expires_ms.saturating_sub(now_ms()) / 1000,
        }))
    }

    /// Complete the flow the authorization server's redirect (`callback`) answers, for a browser
    /// logged in as `login` (if at all) that sent `cookie` (its cookies by name): the credential
    /// is kept in the vault and the waiting calls are woken. Every refusal is audited with its
    /// reason.
    pub async fn complete(
        &self,
        callback: Callback,
        login: Option<&str>,
        cookie: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<Completed, CallbackRefusal> {
        let done = self.complete_checked(callback, login, cookie).await;
        self.record_landing(&done, Landing::Callback);
        done
    }

    /// Wake the calls waiting for `done`'s user and audit and log how it ended, either way
    /// (never a token or a key: the principal, the upstream and a reason).
    pub(super) fn record_landing(&self, done: &Result<Completed, CallbackRefusal>, how: Landing) {
        match done {
            Ok(c) => {
                self.forget(&Principal(c.principal.clone()), &c.upstream);
                self.landed.notify_waiters();
                let detail = match how {
                    Landing::Callback => None,
                    Landing::Key => Some("api_key"),
                };
                self.audit(
                    "upstream_auth.connected",
                    Some(&c.principal),
                    &c.upstream,
                    "ok",
                    detail,
                );
                match how {
                    Landing::Callback => {
                        tracing::info!("Upstream {}: {} connected", c.upstream, c.principal)
                    }
                    Landing::Key => {
                        tracing::info!("Upstream {}: {} entered a key", c.upstream, c.principal)
                    }
                }
            }
            Err(r) => {
                let at = r.upstream.as_deref().unwrap_or("-");
                self.audit(
                    "upstream_auth.callback_refused",
                    r.principal.as_deref(),
                    at,
                    "refused",
                    Some(r.reason),
                );
                match how {
                    Landing::Callback => tracing::warn!(
                        "OAuth callback refused ({}) for {} at {at}: {}",
                        r.reason,
                        r.principal.as_deref().unwrap_or("an unknown flow"),
                        r.message
                    ),
                    Landing::Key => {
                        tracing::warn!("A key entry was refused ({}) at {at}", r.reason)
                    }
                }
            }
        }
    }

    /// [`Credentials::complete`]'s checks and exchange.
    async fn complete_checked(
        &self,
        callback: Callback,
        login: Option<&str>,
        cookie: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<Completed, CallbackRefusal> {
        let state = callback
            .state
            .clone()
            .ok_or_else(|| refusal("no_state", "The authorization response carries no state."))?;
        let flow = match self.vault.take_flow_checked(&state).await {
            Ok(Taken::Pending(flow)) => flow,
            Ok(Taken::Expired {
                principal,
                upstream,
            }) => {
                return Err(refusal(
                    "expired",
                    "This authorization took too long: call the tool again for a new link.",
                )
                .of(&principal, &upstream));
            }
            Ok(Taken::Unknown) if self.taken_before(&state) => {
                return Err(refusal(
                    "replayed",
                    "This authorization response was used already.",
                ));
            }
            Ok(Taken::Unknown) => {
                return Err(refusal(
                    "unknown_state",
                    "This authorization response answers no authorization of this server.",
                ));
            }
            Err(e) => return Err(refusal("unavailable", format!("The vault: {e}"))),
        };
        self.remember_taken(&state);
        let (who, at) = (flow.principal.clone(), flow.upstream.clone());
        self.checked_flow(flow, callback, &state, login, cookie)
            .await
            .map_err(|r| r.of(&who, &at))?;
        Ok(Completed {
            principal: who,
            upstream: at,
        })
    }

    /// The checks of a flow just taken, then the exchange of its code.
    async fn checked_flow(
        &self,
        flow: crate::access::upstream::vault::PendingFlow,
        callback: Callback,
        state: &str,
        login: Option<&str>,
        cookie: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<(), CallbackRefusal> {
        let payload: Payload = serde_json::from_str(flow.payload.expose())
            .map_err(|_| refusal("unknown_state", "The authorization cannot be read."))?;
        self.check_browser(&flow, &payload, login, cookie)?;
        check_iss(
            Some(&payload.issuer),
            payload.iss_advertised,
            callback.iss.as_deref(),
        )
        .map_err(|e| {
            refusal(
                "iss_mismatch",
                format!("The authorization response is not from the expected server: {e}."),
            )
        })?;
        if let Some(error) = &callback.error {
            tracing::info!(
                "Upstream {}: the authorization server did not authorize {}: {}",
                flow.upstream,
                flow.principal,
                one_line(&format!(
                    "{error} {}",
                    callback.error_description.as_deref().unwrap_or("")
                ))
            );
            return Err(refusal("denied", "The authorization was not granted."));
        }
        let code = callback
            .code
            .ok_or_else(|| refusal("no_code", "The authorization response carries no code."))?;
        let who = Principal(flow.principal.clone());
        let exchange = Exchange {
            upstream: &flow.upstream,
            identity: &flow.identity,
            state,
            code: &code,
            iss: callback.iss.as_deref(),
        };
        self.exchange(&who, exchange, payload).await
    }

    /// The browser delivering the callback must be the one the connect page sent (its cookie
    /// holds the flow's secret), and not logged in as another user.
    fn check_browser(
        &self,
        flow: &crate::access::upstream::vault::PendingFlow,
        payload: &Payload,
        login: Option<&str>,
        cookie: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<(), CallbackRefusal> {
        if let Some(user) = login.filter(|u| *u != flow.principal) {
            return Err(refusal(
                "other_user",
                format!(
                    "This authorization was started for another user than the one logged in \
                     here ({}).",
                    html_safe(user)
                ),
            ));
        }
        let sent = cookie(&format!("{BROWSER_COOKIE}{}", flow.flow_id)).map(Secret::new);
        if sent != Some(Secret::new(payload.browser.clone())) {
            return Err(refusal(
                "other_browser",
                "This authorization was not started in this browser: open the link your \
                 client showed you, in the browser you use for this server.",
            ));
        }
        Ok(())
    }

    /// Exchange the code of `who`'s flow and keep the credential: discovery again (the
    /// authorization server must be the flow's), the flow's client, its PKCE verifier and
    /// expected issuer.
    async fn exchange(
        &self,
        who: &Principal,
        exchange: Exchange<'_>,
        payload: Payload,
    ) -> Result<(), CallbackRefusal> {
        let Exchange {
            upstream,
            identity,
            state,
            code,
            iss,
        } = exchange;
        let spec = self
            .spec(upstream)
            .filter(|s| s.identity == identity)
            .ok_or_else(|| {
                refusal(
                    "upstream_changed",
                    "The upstream's configuration changed since this authorization began.",
                )
            })?;
        let failed = |e: AuthFailure| refusal("token_exchange_failed", e.to_string());
        let found = self
            .discover(&spec, payload.challenge.as_deref())
            .await
            .map_err(failed)?;
        let Discovered {
            mut manager,
            metadata,
            issuer,
        } = found;
        if issuer != payload.issuer {
            return Err(refusal(
                "issuer_changed",
                "The upstream's authorization server changed since this authorization began.",
            ));
        }
        let registration = Registration {
            kind: kind_named(&payload.client.kind),
            client_id: payload.client.client_id.clone(),
            client_secret: payload.client.secret.clone().map(Secret::new),
            method: AuthMethod::named(&payload.client.method).unwrap_or(AuthMethod::None),
        };
        let callback = self.settings().callback_url().unwrap_or_default();
        configure_client(&mut manager, &metadata, &registration, &callback, "web")
            .map_err(failed)?;
        let one = OneState(Arc::new(Mutex::new(Some((state.to_owned(), payload.pkce)))));
        manager.set_state_store(one);
        manager.set_credential_store(RowStore {
            vault: self.vault.clone(),
            principal: who.0.clone(),
            upstream: upstream.to_owned(),
            identity: identity.to_owned(),
            issuer,
            expect: Expect::Any,
        });
        manager
            .exchange_code_for_token_with_issuer(code.expose(), state, iss)
            .await
            .map_err(|e| failed(super::super::engine::failure(e)))?;
        Ok(())
    }

    fn taken_before(&self, state: &str) -> bool {
        let hash = state_hash(state);
        let ttl = self.settings().flow_ttl + Duration::from_secs(60);
        let mut taken = lock(&self.taken);
        taken.retain(|(_, at)| at.elapsed() < ttl);
        taken.iter().any(|(h, _)| *h == hash)
    }

    fn remember_taken(&self, state: &str) {
        let mut taken = lock(&self.taken);
        if taken.len() >= MAX_TAKEN {
            taken.pop_front();
        }
        taken.push_back((state_hash(state), Instant::now()));
    }

    /// The host's client metadata document (a CIMD client id), when `public_url` is https.
    pub fn client_metadata(&self) -> Option<Value> {
        let settings = self.settings();
        let id = settings.metadata_url()?;
        Some(json!({
            "client_id": id,
            "client_name": "mcp-host",
            "client_uri": settings.public_url,
            "redirect_uris": [settings.callback_url()],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "web",
        }))
    }

    /// Whether `who` holds a credential at `upstream` (for the cache: forgetting it on a new
    /// consent elsewhere is [`Credentials::forget`]).
    pub fn cached_for(&self, who: &Principal, upstream: &str) -> bool {
        lock(&self.cache).contains_key(&key(who, upstream))
    }
}

/// `text` with the characters HTML gives a meaning escaped.
pub fn html_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The cookies of a `Cookie` header value, by name.
pub fn cookies(header: &str) -> HashMap<String, String> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_escape_what_they_show_and_cookies_are_read_by_name() {
        assert_eq!(
            html_safe("<b>\"a&b'</b>\n"),
            "&lt;b&gt;&quot;a&amp;b&#39;&lt;/b&gt; "
        );
        let jar = cookies("mcp_console=abc; mcp_oauth_f1=s3cret ;other=1");
        assert_eq!(jar.get("mcp_oauth_f1").map(String::as_str), Some("s3cret"));
        assert_eq!(jar.get("mcp_console").map(String::as_str), Some("abc"));
        assert_eq!(jar.len(), 3);
    }

    #[test]
    fn a_flows_client_kind_is_kept_by_name() {
        for kind in [Kind::Preregistered, Kind::MetadataDocument, Kind::Dynamic] {
            assert_eq!(kind_named(kind_name(kind)), kind);
        }
    }
}
