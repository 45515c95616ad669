//! The OAuth engine of one principal toward one upstream: the [`Authorizer`] its HTTP session
//! asks. It is rmcp's `auth` engine (discovery, PKCE, the token requests, refresh, `iss` and issuer
//! checks) driven by the host's own decisions around it:
//!
//! - on a 401, the upstream's protected-resource metadata is read again (from the challenge, then
//!   the well-known paths), and its authorization server's metadata (RFC 8414 and OpenID discovery
//!   in the spec's order, its `issuer` checked); metadata naming another resource, an issuer other
//!   than the one discovered, no PKCE S256 (`code_challenge_methods_supported`), or endpoints
//!   neither HTTPS nor on loopback is refused; the same authorization server with a refresh token:
//!   refreshed, else authorized anew;
//! - the client is chosen per authorization server ([`registration`]): a server the upstream moved
//!   to never sees the previous one's client id;
//! - scopes as [`scopes`] says; on 403 `insufficient_scope` a step-up asks for what was granted and
//!   what is challenged; at most [`Options::max_authorizations`] authorizations in all;
//! - the authorization URL goes to the user through the [`UserAgent`], and its callback is checked
//!   ([`flow`]: `state`, then `iss`, then an `error`) before the code is exchanged;
//! - `resource` is sent in both requests unless the upstream's switch leaves it out;
//! - or, for a service identity, `client_credentials` with the client's secret.
//!
//! Tokens go to the [`TokenStore`], never to a log or an error.
//!
//! [`registration`]: super::registration
//! [`scopes`]: super::scopes
//! [`flow`]: super::flow

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::future::BoxFuture;
use oauth2::TokenResponse as _;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, ClientCredentialsConfig,
    OAuthClientConfig, OAuthHttpClient, StateStore as _,
};
use serde_json::{Value, json};

use super::challenge::Status;
use super::flow::{Callback, Flows, UserAgent, check_iss};
use super::http::{Client, Reach, url_without_resource};
use super::registration::{
    AuthMethod, Choice, Kind, Plan, Preregistered, Registration, Request, ServerFacts, choose,
    register,
};
use super::tokens::{Stored, TokenStore};
use super::{AuthFailure, Authorizer, Principal, Refusal, Secret, Target, scopes};

/// How an engine authorizes.
#[derive(Debug, Clone)]
pub struct Options {
    /// Whose credential it obtains.
    pub principal: Principal,
    /// For what.
    pub target: Target,
    /// A client registered beforehand.
    pub preregistered: Option<Preregistered>,
    /// This client's metadata document URL (an HTTPS URL with a path).
    pub metadata_url: Option<String>,
    /// The client's name in a dynamic registration.
    pub client_name: String,
    /// `native` (a loopback redirect) or `web`.
    pub application_type: &'static str,
    /// Scopes asked for instead of the discovered ones.
    pub scopes: Vec<String>,
    /// Send RFC 8707 `resource` (MCP requires it; some identity providers reject it).
    pub resource: bool,
    /// How the client authenticates at the token endpoint (`None`: as registered).
    pub method: Option<AuthMethod>,
    /// Authenticate as the client itself (`client_credentials`, the preregistered client's
    /// secret) instead of a user.
    pub client_credentials: bool,
    /// The client's private key: `client_credentials` authenticates with a signed assertion
    /// (`private_key_jwt`, RFC 7523) instead of a secret.
    pub private_key: Option<super::grants::PrivateKey>,
    /// Authorization servers may be on private networks.
    pub allow_private: bool,
    /// The most authorizations (and step-ups) the engine makes.
    pub max_authorizations: u32,
    /// Where clients registered dynamically are kept beyond this engine (`None`: in memory).
    pub clients: Option<super::vault_tokens::Clients>,
}

/// The authorization server in use: rmcp's manager for it, configured with the client.
struct Current {
    manager: AuthorizationManager,
    metadata: AuthorizationMetadata,
    issuer: String,
}

/// What an engine holds between refusals.
#[derive(Default)]
struct State {
    current: Option<Current>,
    /// The client at each authorization server, by issuer.
    registrations: HashMap<String, Registration>,
    /// Authorizations made.
    authorizations: u32,
    /// The issuer an unbound preregistered client was first used with.
    bound: Option<String>,
    /// The token the last refresh gave: refused in its turn, it is not refreshed again (the next
    /// 401 authorizes anew, within the bound).
    refreshed: Option<Secret>,
}

/// One principal's OAuth engine toward one upstream (see the module's documentation).
pub struct Engine {
    options: Options,
    http: Arc<Client>,
    tokens: Arc<dyn TokenStore>,
    agent: Arc<dyn UserAgent>,
    flows: Flows,
    state: tokio::sync::Mutex<State>,
    refused: AtomicBool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("principal", &self.options.principal)
            .field("target", &self.options.target)
            .finish_non_exhaustive()
    }
}

/// An authorization server just discovered.
pub struct Discovered {
    /// rmcp's manager for it, its metadata set.
    pub manager: AuthorizationManager,
    /// Its metadata.
    pub metadata: AuthorizationMetadata,
    /// Its issuer (checked).
    pub issuer: String,
}

impl Engine {
    /// An engine authorizing as `options` say, keeping tokens in `tokens`, taking the user to
    /// authorization URLs with `agent`.
    pub fn new(
        options: Options,
        tokens: Arc<dyn TokenStore>,
        agent: Arc<dyn UserAgent>,
    ) -> Result<Engine, AuthFailure> {
        let url = url::Url::parse(&options.target.url)
            .map_err(|e| AuthFailure::Failed(format!("{}: {e}", options.target.url)))?;
        let reach = Reach::of(&url, options.allow_private);
        let http = Client::new(reach, !options.resource)
            .map_err(|e| AuthFailure::Failed(e.to_string()))?;
        Ok(Engine {
            options,
            http: Arc::new(http),
            tokens,
            agent,
            flows: Flows::default(),
            state: tokio::sync::Mutex::new(State::default()),
            refused: AtomicBool::new(false),
        })
    }

    /// Whether an authorization was refused (see [`AuthFailure::Refused`]).
    pub fn was_refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// rmcp's credential store of this engine's principal and target.
    fn stored(&self) -> Stored {
        Stored {
            store: Arc::clone(&self.tokens),
            who: self.options.principal.clone(),
            target: self.options.target.clone(),
        }
    }

    /// The access token stored, and the scopes granted with it.
    async fn stored_token(&self) -> Option<(Secret, Vec<String>)> {
        let (who, target) = (&self.options.principal, &self.options.target);
        let stored = self.tokens.load(who, target).await.ok().flatten()?;
        let token = stored
            .token_response
            .as_ref()?
            .access_token()
            .secret()
            .clone();
        Some((Secret::new(token), stored.granted_scopes))
    }

    /// Answer a refusal (see [`Authorizer::refused`]), holding the engine's state: one refusal is
    /// answered at a time, and one that a renewal meanwhile answered gets that token.
    async fn answer(&self, refusal: Refusal, sent: Option<Secret>) -> Result<Secret, AuthFailure> {
        let mut state = self.state.lock().await;
        if let Some((current, _)) = self.stored_token().await
            && sent.as_ref() != Some(&current)
        {
            return Ok(current);
        }
        let answered = match refusal.status {
            Status::Unauthorized => self.unauthorized(&mut state, &refusal, sent.as_ref()).await,
            Status::Forbidden if refusal.insufficient_scope() => {
                self.step_up(&mut state, &refusal).await
            }
            Status::Forbidden => Err(AuthFailure::Refused(
                "the upstream refused the token (HTTP 403) without naming a scope it lacks".into(),
            )),
        };
        if let Err(e) = &answered {
            tracing::warn!("Upstream {}: {e}", self.options.target.upstream);
            if e.is_refusal() {
                self.refused.store(true, Ordering::Release);
            }
        }
        answered
    }

    /// A 401: discover again; refresh at the same authorization server when a token was sent
    /// (and was not itself a refresh's) and can be, else authorize (or exchange client
    /// credentials).
    async fn unauthorized(
        &self,
        state: &mut State,
        refusal: &Refusal,
        sent: Option<&Secret>,
    ) -> Result<Secret, AuthFailure> {
        let found = self.discover(refusal).await?;
        if self.options.client_credentials {
            return self.client_credentials(state, found).await;
        }
        let same = state
            .current
            .as_ref()
            .is_some_and(|c| c.issuer == found.issuer);
        let fresh = sent.is_some() && sent != state.refreshed.as_ref();
        if fresh
            && same
            && let Some(current) = &state.current
            && let Ok(response) = current.manager.refresh_token().await
        {
            tracing::info!("Upstream {}: token refreshed", self.options.target.upstream);
            let token = Secret::new(response.access_token().secret().clone());
            state.refreshed = Some(token.clone());
            return Ok(token);
        }
        if !same && let Some(previous) = &state.current {
            tracing::info!(
                "Upstream {}: its authorization server is now {} (was {}); its tokens from \
                 there are not used again",
                self.options.target.upstream,
                found.issuer,
                previous.issuer
            );
        }
        let granted = match same {
            true => self
                .stored_token()
                .await
                .map(|(_, g)| g)
                .unwrap_or_default(),
            false => Vec::new(),
        };
        let base = self.base_scopes(&found.manager).await;
        self.authorize_at(state, found, &granted, &base).await
    }

    /// A 403 `insufficient_scope`: authorize again, for the scopes granted and those challenged.
    async fn step_up(&self, state: &mut State, refusal: &Refusal) -> Result<Secret, AuthFailure> {
        let Some(current) = state.current.take() else {
            return Err(AuthFailure::Refused(
                "the upstream asked for more scope (HTTP 403) before any authorization".into(),
            ));
        };
        let granted = self
            .stored_token()
            .await
            .map(|(_, g)| g)
            .unwrap_or_default();
        let supported = current.metadata.scopes_supported.as_deref();
        let wanted = scopes::request(&granted, &refusal.scopes(), supported);
        tracing::info!(
            "Upstream {} asks for more scope: authorizing again for {}",
            self.options.target.upstream,
            wanted.join(" ")
        );
        let answered = self.authorize(state, &current, &wanted).await;
        state.current = Some(current);
        answered
    }

    /// The scopes of a first authorization: the configured ones, else the challenge's, else the
    /// protected-resource metadata's (none when neither names any).
    async fn base_scopes(&self, manager: &AuthorizationManager) -> Vec<String> {
        if !self.options.scopes.is_empty() {
            return self.options.scopes.clone();
        }
        manager.select_initial_scopes(&[]).await
    }

    /// Authorize at a server just discovered: its client (registered if need be), then the
    /// round trip; it becomes the server in use.
    async fn authorize_at(
        &self,
        state: &mut State,
        found: Discovered,
        granted: &[String],
        base: &[String],
    ) -> Result<Secret, AuthFailure> {
        let Discovered {
            mut manager,
            metadata,
            issuer,
        } = found;
        let registration = self.registration(state, &metadata, &issuer).await?;
        self.configure(&mut manager, &metadata, &registration)?;
        let current = Current {
            manager,
            metadata,
            issuer,
        };
        let wanted = scopes::request(granted, base, current.metadata.scopes_supported.as_deref());
        let answered = self.authorize(state, &current, &wanted).await;
        state.current = Some(current);
        answered
    }

    /// One authorization round trip at `current` for `scopes`, within the engine's bound.
    async fn authorize(
        &self,
        state: &mut State,
        current: &Current,
        scopes: &[String],
    ) -> Result<Secret, AuthFailure> {
        let max = self.options.max_authorizations;
        if state.authorizations >= max {
            return Err(AuthFailure::Refused(format!(
                "the upstream asked for authorization again after {max} authorizations: giving up"
            )));
        }
        state.authorizations += 1;
        let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
        let url = current
            .manager
            .get_authorization_url(&refs)
            .await
            .map_err(failure)?;
        let url = match self.options.resource {
            true => url,
            false => url_without_resource(&url),
        };
        let flow = query_param(&url, "state").unwrap_or_default();
        let callback = self.agent.authorize(&url, &flow).await;
        let answered = match callback {
            Ok(callback) => self.complete(current, &flow, callback).await,
            Err(e) => Err(e),
        };
        if answered.is_err() {
            let _ = self.flows.delete(&flow).await;
        }
        answered
    }

    /// Check an authorization's callback (`state`, `iss`, `error`), then exchange its code.
    async fn complete(
        &self,
        current: &Current,
        flow: &str,
        callback: Callback,
    ) -> Result<Secret, AuthFailure> {
        if callback.state.as_deref() != Some(flow) {
            return Err(AuthFailure::Refused(
                "the authorization response's state is not the one sent: not used".into(),
            ));
        }
        let advertised = current
            .metadata
            .additional_fields
            .get("authorization_response_iss_parameter_supported")
            == Some(&Value::Bool(true));
        check_iss(Some(&current.issuer), advertised, callback.iss.as_deref())
            .map_err(|e| AuthFailure::Refused(format!("{e}: not used")))?;
        if let Some(error) = &callback.error {
            let description = callback.error_description.as_deref().unwrap_or("");
            return Err(AuthFailure::Refused(one_line(&format!(
                "the authorization server did not authorize: {error} {description}"
            ))));
        }
        let code = callback.code.ok_or_else(|| {
            AuthFailure::Failed("the authorization response carries no code".into())
        })?;
        let response = current
            .manager
            .exchange_code_for_token_with_issuer(code.expose(), flow, callback.iss.as_deref())
            .await
            .map_err(failure)?;
        tracing::info!(
            "Upstream {}: authorized by {}",
            self.options.target.upstream,
            current.issuer
        );
        Ok(Secret::new(response.access_token().secret().clone()))
    }

    /// The client at the server of `issuer`: the one registered there before, else chosen (and
    /// registered) now.
    async fn registration(
        &self,
        state: &mut State,
        metadata: &AuthorizationMetadata,
        issuer: &str,
    ) -> Result<Registration, AuthFailure> {
        if let Some(known) = state.registrations.get(issuer) {
            return Ok(known.clone());
        }
        let kept = match &self.options.clients {
            Some(clients) => clients.load(issuer).await,
            None => None,
        };
        if let Some(mut kept) = kept {
            kept.method = self.options.method.unwrap_or(kept.method);
            state.registrations.insert(issuer.to_owned(), kept.clone());
            return Ok(kept);
        }
        let facts = ServerFacts::of(metadata);
        let preregistered = self.options.preregistered.clone().map(|mut p| {
            p.issuer = p.issuer.or_else(|| state.bound.clone());
            p
        });
        let choice = Choice {
            preregistered: preregistered.as_ref(),
            metadata_url: self.options.metadata_url.as_deref(),
        };
        let mut registration = match (choose(&choice, &facts)?, preregistered) {
            (Plan::Preregistered, Some(pre)) => {
                state.bound.get_or_insert_with(|| issuer.to_owned());
                Registration {
                    kind: Kind::Preregistered,
                    method: facts.method_for(pre.client_secret.is_some()),
                    client_id: pre.client_id,
                    client_secret: pre.client_secret,
                }
            }
            (Plan::MetadataDocument(url), _) => Registration {
                kind: Kind::MetadataDocument,
                client_id: url,
                client_secret: None,
                method: AuthMethod::None,
            },
            (Plan::Register(endpoint), _) => {
                let registered = self.register(&endpoint, &facts).await?;
                if let Some(clients) = &self.options.clients {
                    clients.save(issuer, &registered).await;
                }
                registered
            }
            (Plan::Preregistered, None) => {
                return Err(AuthFailure::Failed("no preregistered client".into()));
            }
        };
        registration.method = self.options.method.unwrap_or(registration.method);
        tracing::info!(
            "Upstream {}: client {} at {issuer} ({}; token endpoint authentication {})",
            self.options.target.upstream,
            registration.client_id,
            registration.kind.describe(),
            registration.method.name()
        );
        state
            .registrations
            .insert(issuer.to_owned(), registration.clone());
        Ok(registration)
    }

    /// Register dynamically at `endpoint`.
    async fn register(
        &self,
        endpoint: &str,
        facts: &ServerFacts,
    ) -> Result<Registration, AuthFailure> {
        let redirect_uri = self.agent.redirect_uri();
        let request = Request {
            client_name: &self.options.client_name,
            redirect_uri: &redirect_uri,
            application_type: self.options.application_type,
        };
        register(&self.http, endpoint, &request, facts).await
    }

    /// Configure `manager` with `registration` and this engine's stores.
    fn configure(
        &self,
        manager: &mut AuthorizationManager,
        metadata: &AuthorizationMetadata,
        registration: &Registration,
    ) -> Result<(), AuthFailure> {
        manager.set_credential_store(self.stored());
        manager.set_state_store(self.flows.clone());
        let redirect_uri = self.agent.redirect_uri();
        let kind = self.options.application_type;
        configure_client(manager, metadata, registration, &redirect_uri, kind)
    }

    /// Exchange the client's own credentials for a token (`client_credentials`).
    async fn client_credentials(
        &self,
        state: &mut State,
        found: Discovered,
    ) -> Result<Secret, AuthFailure> {
        let max = self.options.max_authorizations;
        if state.authorizations >= max {
            return Err(AuthFailure::Refused(format!(
                "the upstream refused the client's token {max} times: giving up"
            )));
        }
        state.authorizations += 1;
        if let Some(key) = &self.options.private_key {
            return self.client_assertion(state, found, key).await;
        }
        let Discovered {
            mut manager,
            metadata,
            issuer,
        } = found;
        let config = self.credentials_config(&manager).await?;
        if let Some(method) = self.options.method {
            manager.set_metadata(with_method(&metadata, method));
        }
        manager.set_credential_store(self.stored());
        manager
            .validate_client_credentials_metadata(&config)
            .map_err(failure)?;
        manager
            .configure_client_credentials(&config)
            .map_err(failure)?;
        let response = manager
            .exchange_client_credentials(&config)
            .await
            .map_err(failure)?;
        tracing::info!(
            "Upstream {}: token for the client itself from {issuer}",
            self.options.target.upstream
        );
        state.current = Some(Current {
            manager,
            metadata,
            issuer,
        });
        Ok(Secret::new(response.access_token().secret().clone()))
    }

    /// `client_credentials` with a client assertion signed by `key` (`private_key_jwt`, RFC 7523;
    /// rmcp's own needs a crypto library the host does not carry): the token, kept in the store
    /// as rmcp's would be.
    async fn client_assertion(
        &self,
        state: &mut State,
        found: Discovered,
        key: &super::grants::PrivateKey,
    ) -> Result<Secret, AuthFailure> {
        let Some(pre) = self.options.preregistered.as_ref() else {
            return Err(AuthFailure::Failed(
                "client_credentials needs a client id".into(),
            ));
        };
        let assertion = key.assertion(&pre.client_id, &found.issuer)?;
        let client = super::grants::ClientAuth {
            client_id: &pre.client_id,
            secret: &assertion,
            method: AuthMethod::None,
            assertion: true,
        };
        let scopes = self.base_scopes(&found.manager).await;
        let endpoint = found.metadata.token_endpoint.clone();
        let url = &self.options.target.url;
        let granted =
            super::grants::client_credentials(&self.http, &endpoint, &client, url, &scopes).await?;
        let stored = serde_json::json!({
            "client_id": pre.client_id,
            "token_response": {
                "access_token": granted.access_token.expose(),
                "token_type": "bearer",
                "expires_in": granted.expires_in,
            },
            "granted_scopes": granted
                .scope
                .as_deref()
                .map_or(scopes, |s| s.split_whitespace().map(str::to_owned).collect()),
            "issuer": found.issuer,
        });
        let stored = serde_json::from_value(stored)
            .map_err(|e| AuthFailure::Failed(format!("the token response: {e}")))?;
        let (who, target) = (&self.options.principal, &self.options.target);
        if let Err(e) = self.tokens.save(who, target, stored).await {
            tracing::warn!(
                "Upstream {}: the token was not kept: {}",
                target.upstream,
                e.0
            );
        }
        tracing::info!(
            "Upstream {}: token for the client itself from {} (private_key_jwt)",
            target.upstream,
            found.issuer
        );
        state.current = Some(Current {
            manager: found.manager,
            metadata: found.metadata,
            issuer: found.issuer,
        });
        Ok(granted.access_token)
    }

    /// The client credentials grant's configuration: the preregistered client and its secret.
    async fn credentials_config(
        &self,
        manager: &AuthorizationManager,
    ) -> Result<ClientCredentialsConfig, AuthFailure> {
        let pre = self.options.preregistered.as_ref();
        let (Some(pre), Some(secret)) = (pre, pre.and_then(|p| p.client_secret.as_ref())) else {
            return Err(AuthFailure::Failed(
                "client_credentials needs a client id and secret".into(),
            ));
        };
        Ok(ClientCredentialsConfig::ClientSecret {
            client_id: pre.client_id.clone(),
            client_secret: secret.expose().to_owned(),
            scopes: self.base_scopes(manager).await,
            resource: Some(self.options.target.url.clone()),
        })
    }

    /// Read the upstream's protected-resource metadata (from `refusal`'s challenge first) and
    /// its authorization server's, and check what the engine requires of them.
    async fn discover(&self, refusal: &Refusal) -> Result<Discovered, AuthFailure> {
        let challenge = Some(refusal.challenge.as_str()).filter(|c| !c.is_empty());
        let http: Arc<dyn OAuthHttpClient> = Arc::clone(&self.http) as _;
        let found = discover(
            &self.options.target.url,
            http,
            challenge,
            self.options.client_credentials,
        )
        .await?;
        tracing::info!(
            "Upstream {}: authorization server {}",
            self.options.target.upstream,
            found.issuer
        );
        Ok(found)
    }
}

/// Read the protected-resource metadata of the upstream at `url` (from `challenge`, a 401's
/// `WWW-Authenticate`, first; else the well-known paths) and its authorization server's, with
/// `http`, and check what the engine requires of them ([`checked`]).
pub async fn discover(
    url: &str,
    http: Arc<dyn OAuthHttpClient>,
    challenge: Option<&str>,
    client_credentials: bool,
) -> Result<Discovered, AuthFailure> {
    let mut manager = AuthorizationManager::new_with_oauth_http_client(url, http)
        .await
        .map_err(failure)?;
    let resolution = manager
        .resolve_metadata_from_challenge(challenge)
        .await
        .map_err(failure)?;
    if !resolution.source.is_discovered() {
        return Err(AuthFailure::Refused(format!(
            "{url} asks for authorization but publishes no OAuth metadata (RFC 9728 \
             protected resource metadata naming an authorization server)"
        )));
    }
    let metadata = resolution.metadata;
    let issuer = checked(&metadata, client_credentials)?;
    manager.set_metadata(metadata.clone());
    Ok(Discovered {
        manager,
        metadata,
        issuer,
    })
}

/// Configure `manager` (its metadata set) as the client `registration` describes, its redirect
/// URI `redirect_uri`: its id, its secret when it authenticates with one, and its method (told
/// to rmcp as the only one the server lists).
pub fn configure_client(
    manager: &mut AuthorizationManager,
    metadata: &AuthorizationMetadata,
    registration: &Registration,
    redirect_uri: &str,
    application_type: &str,
) -> Result<(), AuthFailure> {
    manager.set_metadata(with_method(metadata, registration.method));
    let mut config = OAuthClientConfig::new(&registration.client_id, redirect_uri)
        .with_application_type(application_type);
    if registration.method != AuthMethod::None
        && let Some(secret) = &registration.client_secret
    {
        config = config.with_client_secret(secret.expose());
    }
    manager.configure_client(config).map_err(failure)
}

/// An authorization server's metadata, checked: its issuer (which rmcp compared with the
/// discovery URL's), its endpoints on HTTPS (or loopback), and PKCE S256 among its code challenge
/// methods — a MUST of MCP's spec that rmcp only warns about (not asked of `client_credentials`,
/// which uses no code).
pub fn checked(
    metadata: &AuthorizationMetadata,
    client_credentials: bool,
) -> Result<String, AuthFailure> {
    let issuer = metadata.issuer.clone().ok_or_else(|| {
        AuthFailure::Refused("the authorization server's metadata names no issuer".into())
    })?;
    for endpoint in [&metadata.authorization_endpoint, &metadata.token_endpoint] {
        if !secure_endpoint(endpoint) {
            return Err(AuthFailure::Refused(format!(
                "the authorization server's endpoint {endpoint} is neither HTTPS nor on loopback"
            )));
        }
    }
    let methods = metadata.code_challenge_methods_supported.as_deref();
    if !client_credentials && !methods.is_some_and(|m| m.iter().any(|x| x == "S256")) {
        return Err(AuthFailure::Refused(format!(
            "the authorization server {issuer} does not advertise PKCE S256 \
             (code_challenge_methods_supported: {}): not authorizing",
            methods.map_or("absent".into(), |m| m.join(", "))
        )));
    }
    Ok(issuer)
}

/// Whether an endpoint is HTTPS, or HTTP on a loopback host.
fn secure_endpoint(endpoint: &str) -> bool {
    let Ok(url) = url::Url::parse(endpoint) else {
        return false;
    };
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

/// `metadata` listing `method` as the only token endpoint authentication method (how rmcp is
/// told which one to use).
fn with_method(metadata: &AuthorizationMetadata, method: AuthMethod) -> AuthorizationMetadata {
    let mut effective = metadata.clone();
    effective.additional_fields.insert(
        "token_endpoint_auth_methods_supported".into(),
        json!([method.name()]),
    );
    effective
}

/// The value of query parameter `name` in `url`.
fn query_param(url: &str, name: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// `text` on one line of at most 300 characters (what a server said, in an error).
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect::<String>()
        .trim()
        .to_owned()
}

/// rmcp's error as the engine's: the checks of metadata (a resource, issuer or `iss` that does
/// not match; no PKCE) are refusals, the rest failures.
pub fn failure(e: AuthError) -> AuthFailure {
    let text = one_line(&e.to_string());
    match e {
        AuthError::ProtectedResourceMetadataInvalid { .. }
        | AuthError::AuthorizationServerMismatch { .. }
        | AuthError::AuthorizationServerMissingIssuer { .. }
        | AuthError::PkceUnsupported
        | AuthError::AuthorizationFailed(_) => AuthFailure::Refused(text),
        _ => AuthFailure::Failed(text),
    }
}

impl Authorizer for Engine {
    fn token(&self) -> BoxFuture<'_, Option<Secret>> {
        Box::pin(async move {
            let state = self.state.lock().await;
            match &state.current {
                // Refreshed first when it is (nearly) expired.
                Some(current) => current
                    .manager
                    .get_access_token()
                    .await
                    .ok()
                    .map(Secret::new),
                None => self.stored_token().await.map(|(token, _)| token),
            }
        })
    }

    fn refused(
        &self,
        refusal: Refusal,
        sent: Option<Secret>,
    ) -> BoxFuture<'_, Result<Secret, AuthFailure>> {
        Box::pin(self.answer(refusal, sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(value: Value) -> AuthorizationMetadata {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_authorization_server_without_pkce_s256_is_refused() {
        let base = json!({
            "issuer": "http://localhost:9000",
            "authorization_endpoint": "http://localhost:9000/authorize",
            "token_endpoint": "http://localhost:9000/token",
        });
        let mut with = base.clone();
        with["code_challenge_methods_supported"] = json!(["S256"]);
        assert_eq!(
            checked(&metadata(with), false),
            Ok("http://localhost:9000".into())
        );
        // Absent: refused (rmcp would only warn), unless no code is used.
        let absent = checked(&metadata(base.clone()), false).unwrap_err();
        assert!(
            absent.is_refusal() && absent.to_string().contains("absent"),
            "{absent}"
        );
        assert!(checked(&metadata(base.clone()), true).is_ok());
        // Present without S256: refused.
        let mut plain = base.clone();
        plain["code_challenge_methods_supported"] = json!(["plain"]);
        assert!(checked(&metadata(plain), false).unwrap_err().is_refusal());
    }

    #[test]
    fn endpoints_must_be_https_or_on_loopback() {
        let mut value = json!({
            "issuer": "https://as.example",
            "authorization_endpoint": "https://as.example/authorize",
            "token_endpoint": "http://as.example/token",
            "code_challenge_methods_supported": ["S256"],
        });
        assert!(checked(&metadata(value.clone()), false).is_err());
        value["token_endpoint"] = json!("http://127.0.0.1:9/token");
        assert!(checked(&metadata(value), false).is_ok());
        assert!(!secure_endpoint("http://127.0.0.1.nip.io/x"));
        assert!(secure_endpoint("http://[::1]:80/x") && secure_endpoint("http://localhost/x"));
    }

    #[test]
    fn rmcps_metadata_checks_are_refusals_and_its_other_errors_failures() {
        assert!(failure(AuthError::PkceUnsupported).is_refusal());
        let mismatch = AuthError::AuthorizationServerMismatch {
            expected_issuer: "http://a".into(),
            received_issuer: "https://attacker.example.com".into(),
        };
        assert!(failure(mismatch).is_refusal());
        assert!(!failure(AuthError::TokenExchangeFailed("HTTP 500".into())).is_refusal());
        assert_eq!(
            one_line("a\nb\u{7}c"),
            "a b c",
            "a server's words stay on one line"
        );
    }
}
