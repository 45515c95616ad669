//! The gateway's credentials: each user's own token at each HTTP upstream with `server.auth`
//! (the [`Credentials`] service of the per-user upstream sessions and of the OAuth endpoints).
//!
//! - **Tokens** per (principal, upstream) live in the [`Vault`] (sealed, shared by replicas); an
//!   in-memory cache makes a call cost a lookup. A token due for refresh (expired, or within
//!   `min(30 s, half its life)` of it) is refreshed ahead of the calls by the background
//!   [`refresher`], else when a call needs it, through rmcp's engine,
//!   by one replica at a time (the vault's lease; the others wait for the row to change) and
//!   written with the vault's compare-and-set. A refresh token the authorization server rejects
//!   deletes the credential: the next call asks for consent again.
//! - **Refusals** of the upstream ([`Credentials::rejected`]): a 401 is answered with a token
//!   another replica (or a consent) wrote meanwhile, else a refresh, else consent; a 403
//!   `insufficient_scope` with a token written meanwhile, else a step-up — a consent for what was
//!   granted and what is challenged together, at most [`MAX_STEP_UPS`] per
//!   [`STEP_UP_WINDOW`] per (user, upstream).
//! - **Consent** ([`consent`]): flows kept in the vault, bound to the user, completed by the
//!   callback on any replica.
//!
//! No token is ever logged, audited or put in an error: audit records name the principal, the
//! upstream, the issuer and a reason.

pub mod api_key;
mod authorizer;
pub mod consent;
mod obtained;
pub mod refresher;
mod revocation;
pub mod sweep;

pub use authorizer::CallerAuthorizer;
pub use consent::{CallbackRefusal, Completed, Consent, FlowView};
pub use obtained::PluginCredential;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use rmcp::transport::auth::OAuthHttpClient;

use super::challenge::Status;
use super::engine::{Discovered, configure_client, discover};
use super::http::{Client, Reach};
use super::registration::{AuthMethod, Kind, Preregistered, Registration};
use super::vault::{Expect, StoredCredential, Vault, VaultError};
use super::vault_tokens::{RowStore, due, expired, registration_of};
use super::{AuthFailure, Principal, Refusal, Secret, scopes};
use crate::config::{Config, ListAs, ServerAuth, TokenEndpointAuth, UpstreamServer};
use crate::telemetry::Telemetry;

/// The most step-up authorizations per (user, upstream) in [`STEP_UP_WINDOW`].
pub const MAX_STEP_UPS: usize = 3;
/// The window step-ups are counted in.
pub const STEP_UP_WINDOW: Duration = Duration::from_secs(600);
/// How long a refresh lease is held at most.
const LEASE: Duration = Duration::from_secs(30);
/// How long a call waits for another replica's refresh.
const OTHERS_REFRESH: Duration = Duration::from_secs(15);
/// How often the row is read again meanwhile.
const POLL: Duration = Duration::from_millis(200);
/// How often a cached credential's use is written to the vault (its last-used time).
const MARK_USED: Duration = Duration::from_secs(600);
/// The key under which clients `mcp-host connect --upstream` registered (with its loopback
/// redirect URI) are kept beside the gateway's: `<upstream>#connect`.
pub const CONNECT_CLIENTS: &str = "#connect";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Where the host puts its [`Credentials`] once its store is open (the upstreams start before):
/// what the per-caller sessions and the listing identity read at each request.
pub type CredentialSlot = Arc<std::sync::OnceLock<Arc<Credentials>>>;

/// Why the service could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredError {
    /// The upstream has no `server.auth` (or is not configured).
    #[error("upstream {0} does not obtain credentials for its users (no server.auth)")]
    Unknown(String),
    /// The vault failed.
    #[error(transparent)]
    Vault(#[from] VaultError),
    /// Discovery, registration or a token request failed or was refused.
    #[error(transparent)]
    Auth(#[from] AuthFailure),
    /// Something the configuration lacks (`upstream_auth.public_url`).
    #[error("{0}")]
    Config(String),
}

/// What an upstream with `server.auth` needs to be authorized for its users.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its name.
    pub upstream: String,
    /// Its Streamable HTTP endpoint (the protected resource).
    pub url: String,
    /// The digest of its URL and authorization settings.
    pub identity: String,
    /// A client registered beforehand.
    pub preregistered: Option<Preregistered>,
    /// Scopes asked for instead of the discovered ones.
    pub scopes: Vec<String>,
    /// Send RFC 8707 `resource`.
    pub resource: bool,
    /// The token endpoint authentication method.
    pub method: Option<AuthMethod>,
    /// Who lists it.
    pub list_as: ListAs,
    /// How its tokens are obtained: consent, token exchange, service identity.
    pub mode: crate::config::ServerAuthMode,
    /// What a token exchange presents the caller's token as.
    pub subject_token_type: crate::config::SubjectTokenType,
    /// The `audience` a token exchange asks for.
    pub audience: Option<String>,
    /// With `mode: api_key`: the header each user's key is sent in, and its prefix.
    pub key_header: Option<api_key::KeyHeader>,
}

impl Spec {
    /// The spec of upstream `name` served from `server`, when it has `server.auth`.
    pub fn of(name: &str, server: &UpstreamServer) -> Option<Spec> {
        let (auth, url): (&ServerAuth, &String) = (server.auth.as_ref()?, server.url.as_ref()?);
        Some(Spec {
            upstream: name.to_owned(),
            url: url.clone(),
            identity: auth.identity(url),
            preregistered: auth.client_id.clone().map(|client_id| Preregistered {
                client_id,
                client_secret: auth.client_secret.clone().map(Secret::new),
                issuer: auth.issuer.clone(),
            }),
            scopes: auth.scopes.clone(),
            resource: auth.resource,
            method: auth.token_endpoint_auth.map(|m| match m {
                TokenEndpointAuth::None => AuthMethod::None,
                TokenEndpointAuth::ClientSecretBasic => AuthMethod::ClientSecretBasic,
                TokenEndpointAuth::ClientSecretPost => AuthMethod::ClientSecretPost,
            }),
            list_as: auth.lister(),
            mode: auth.mode,
            subject_token_type: obtained::subject_type(auth),
            audience: auth
                .token_exchange
                .as_ref()
                .and_then(|t| t.audience.clone()),
            key_header: api_key::KeyHeader::of(auth),
        })
    }
}

/// How consent is asked and where the host is reached (`upstream_auth`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The origin (and path prefix) browsers reach the host at, without a trailing slash.
    pub public_url: Option<String>,
    /// The consent link needs the user's login.
    pub require_login: bool,
    /// How long a consent link stays valid.
    pub flow_ttl: Duration,
    /// How long a 2025 call waits for a consent to complete.
    pub wait: Duration,
    /// Authorization servers may be on private networks.
    pub allow_private: bool,
    /// Users' sessions kept per upstream.
    pub max_sessions: usize,
    /// How long an unused user's session is kept.
    pub session_idle: Duration,
}

impl Settings {
    /// The settings of `config`.
    pub fn of(config: &Config) -> Settings {
        let auth = &config.upstream_auth;
        Settings {
            public_url: auth.public_url(config.auth.resource.as_deref()),
            require_login: auth.consent.require_login,
            flow_ttl: Duration::from_secs(auth.consent.ttl_secs.max(30)),
            wait: Duration::from_secs(auth.consent.wait_secs),
            allow_private: auth.allow_private_auth_servers,
            max_sessions: auth.sessions.max_per_upstream.max(1),
            session_idle: Duration::from_secs(auth.sessions.idle_secs.max(1)),
        }
    }

    /// Where authorization servers send users back: `<public_url>/oauth/callback`.
    pub fn callback_url(&self) -> Option<String> {
        self.public_url
            .as_ref()
            .map(|u| format!("{u}{}", consent::CALLBACK_PATH))
    }

    /// The host's client metadata document URL (its client id where authorization servers take
    /// one): over https only.
    pub fn metadata_url(&self) -> Option<String> {
        self.public_url
            .as_ref()
            .filter(|u| u.starts_with("https://"))
            .map(|u| format!("{u}{}", consent::METADATA_PATH))
    }
}

/// An access token in the cache.
#[derive(Clone)]
struct Cached {
    token: Secret,
    expires_at_ms: Option<u64>,
    received_at_ms: u64,
    version: u64,
    marked: Instant,
}

impl Cached {
    fn fresh(&self) -> bool {
        self.expires_at_ms.is_none_or(|e| {
            let margin = super::vault_tokens::refresh_margin_ms(self.received_at_ms, e);
            now_ms().saturating_add(margin.max(1)) < e
        })
    }
}

/// A (principal, upstream) pair.
type Key = (String, String);

fn key(who: &Principal, upstream: &str) -> Key {
    (who.0.clone(), upstream.to_owned())
}

/// What the upstream's refusal needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// The user's consent, for these scopes besides the base ones (a step-up), starting from
    /// this challenge.
    Consent {
        /// The scopes asked for on top of the base ones.
        scopes: Vec<String>,
        /// The upstream's `WWW-Authenticate`, when it sent one.
        challenge: Option<String>,
        /// Whether it is a step-up (the user holds a credential the upstream finds too narrow).
        step_up: bool,
    },
    /// Nothing the host can do (why).
    GiveUp(String),
}

impl Need {
    /// In words, for an error.
    pub fn describe(&self, who: &Principal, upstream: &str) -> String {
        match self {
            Need::Consent { .. } if *who == Principal::operator() => format!(
                "the operator's connection to upstream {upstream} is missing or expired: an \
                 admin opens <public_url>/oauth/connect?upstream={upstream}&as=operator"
            ),
            Need::Consent { step_up: true, .. } => {
                format!("upstream {upstream} needs more authorization from {who}")
            }
            Need::Consent { .. } => format!("upstream {upstream} needs {who}'s authorization"),
            Need::GiveUp(why) => why.clone(),
        }
    }
}

/// The gateway's credentials service (see the module's documentation).
pub struct Credentials {
    vault: Vault,
    telemetry: Arc<Telemetry>,
    settings: ArcSwap<Settings>,
    specs: ArcSwap<HashMap<String, Arc<Spec>>>,
    cache: Mutex<HashMap<Key, Cached>>,
    refreshing: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// The last `WWW-Authenticate` each upstream sent (where discovery starts).
    challenges: Mutex<HashMap<String, String>>,
    step_ups: Mutex<HashMap<Key, VecDeque<Instant>>>,
    /// The hashes of states whose flow this replica took lately (a second callback is a
    /// replay).
    taken: Mutex<VecDeque<(String, Instant)>>,
    /// Woken when a consent completes here.
    landed: tokio::sync::Notify,
    /// Callers' inbound tokens, for upstreams that exchange them.
    subjects: obtained::Subjects,
    /// The background refresher runs ([`refresher`]).
    refresher: std::sync::atomic::AtomicBool,
    /// The runtime the service was made in (reloads run on threads outside it).
    runtime: Option<tokio::runtime::Handle>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("upstreams", &self.specs.load().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A mutex's contents, whatever a panic elsewhere left.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Credentials {
    /// The service over `vault`, auditing to `telemetry`, configured from `config`.
    pub fn new(vault: Vault, telemetry: Arc<Telemetry>, config: &Config) -> Arc<Credentials> {
        let credentials = Credentials {
            vault,
            telemetry,
            settings: ArcSwap::from_pointee(Settings::of(config)),
            specs: ArcSwap::default(),
            cache: Mutex::default(),
            refreshing: Mutex::default(),
            challenges: Mutex::default(),
            step_ups: Mutex::default(),
            taken: Mutex::default(),
            landed: tokio::sync::Notify::new(),
            subjects: obtained::Subjects::default(),
            refresher: std::sync::atomic::AtomicBool::new(false),
            runtime: tokio::runtime::Handle::try_current().ok(),
        };
        credentials.configure(config);
        Arc::new(credentials)
    }

    /// The service over the store's vault `backend` (`replica` names this process in refresh
    /// leases), its keys `upstream_auth.vault.keys` — or, with none configured and a `memory`
    /// store, a random key of this process's own (nothing sealed outlives it).
    pub fn over(
        backend: Arc<dyn super::vault::VaultBackend>,
        telemetry: Arc<Telemetry>,
        config: &Config,
        replica: &str,
    ) -> Result<Arc<Credentials>, String> {
        let vault = Vault::new(
            backend,
            Self::keys(config)?,
            super::vault::VaultBounds::from(&config.upstream_auth.vault),
            replica,
        );
        Ok(Credentials::new(vault, telemetry, config))
    }

    /// The vault keys of `config` (see [`Credentials::over`]).
    fn keys(config: &Config) -> Result<super::sealing::VaultKeys, String> {
        let keys = super::sealing::VaultKeys::from_config(&config.upstream_auth.vault.keys)
            .map_err(|e| e.to_string())?;
        if keys.is_empty() && matches!(config.store, crate::config::StoreSetting::Memory) {
            return super::sealing::VaultKeys::ephemeral().map_err(|e| e.to_string());
        }
        Ok(keys)
    }

    /// Take a reloaded `config`: its upstreams, settings and vault keys.
    pub fn reconfigure(&self, config: &Config) {
        match Self::keys(config) {
            Ok(keys) if !keys.is_empty() || self.vault.key_ids().is_empty() => {
                self.vault.configure(
                    keys,
                    super::vault::VaultBounds::from(&config.upstream_auth.vault),
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("upstream_auth.vault.keys: {e}: the keys in force are kept"),
        }
        self.configure(config);
    }

    /// Wait until a consent completes on this replica, or `within` passes.
    pub async fn landed_any(&self, within: Duration) {
        let _ = tokio::time::timeout(within, self.landed.notified()).await;
    }

    /// Take `config`'s upstreams and settings (at start and at a reload). Cached tokens of an
    /// upstream whose identity changed are forgotten (its rows no longer open for it).
    pub fn configure(&self, config: &Config) {
        let specs: HashMap<String, Arc<Spec>> = config
            .tool_dirs
            .iter()
            .filter_map(|d| Spec::of(d.name.as_deref()?, d.server.as_ref()?))
            .map(|s| (s.upstream.clone(), Arc::new(s)))
            .collect();
        let old = self.specs.load_full();
        let changed = |name: &String| {
            specs.get(name).map(|s| &s.identity) != old.get(name).map(|s| &s.identity)
        };
        lock(&self.cache).retain(|(_, upstream), _| !changed(upstream));
        self.specs.store(Arc::new(specs));
        self.settings.store(Arc::new(Settings::of(config)));
    }

    /// The runtime to start background work in: the current one, else the one the service
    /// was made in.
    pub fn runtime(&self) -> Option<tokio::runtime::Handle> {
        tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
    }

    /// The settings in force.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.load_full()
    }

    /// The vault.
    pub fn vault(&self) -> &Vault {
        &self.vault
    }

    /// What upstream `name` needs, when it has `server.auth`.
    pub fn spec(&self, name: &str) -> Option<Arc<Spec>> {
        self.specs.load().get(name).cloned()
    }

    fn spec_or(&self, name: &str) -> Result<Arc<Spec>, CredError> {
        self.spec(name)
            .ok_or_else(|| CredError::Unknown(name.to_owned()))
    }

    /// Record what happened for the audit log (and the live stream): never a token.
    pub fn audit(
        &self,
        action: &'static str,
        who: Option<&str>,
        upstream: &str,
        outcome: &'static str,
        detail: Option<&str>,
    ) {
        self.telemetry
            .audit_action(&crate::telemetry::audit::Action {
                time: crate::telemetry::audit::Action::now(),
                caller: who,
                action,
                target: upstream,
                outcome,
                detail,
            });
    }

    /// Remember the upstream's latest `WWW-Authenticate` (where the next discovery starts).
    fn remember_challenge(&self, upstream: &str, challenge: &str) {
        if !challenge.is_empty() && challenge.len() <= 8192 {
            lock(&self.challenges).insert(upstream.to_owned(), challenge.to_owned());
        }
    }

    fn challenge(&self, upstream: &str) -> Option<String> {
        lock(&self.challenges).get(upstream).cloned()
    }

    /// Forget the cached token of `who` at `upstream`.
    pub fn forget(&self, who: &Principal, upstream: &str) {
        lock(&self.cache).remove(&key(who, upstream));
    }

    fn remember(&self, k: &Key, stored: &StoredCredential) {
        let c = &stored.credential;
        lock(&self.cache).insert(
            k.clone(),
            Cached {
                token: c.access_token.clone(),
                expires_at_ms: c.expires_at_ms,
                received_at_ms: c.received_at_ms,
                version: stored.version,
                marked: Instant::now(),
            },
        );
    }

    /// The cached token of `k` when it is fresh, and whether its use is due to be recorded.
    fn cached(&self, k: &Key) -> Option<(Secret, bool)> {
        let mut cache = lock(&self.cache);
        let entry = cache.get_mut(k).filter(|c| c.fresh())?;
        let mark = entry.marked.elapsed() >= MARK_USED;
        if mark {
            entry.marked = Instant::now();
        }
        Some((entry.token.clone(), mark))
    }

    /// The current access token of `who` at `upstream`, refreshed if it is due; `None`: there is
    /// none (or it expired and cannot be refreshed) — the user's consent is needed.
    pub async fn token(
        &self,
        who: &Principal,
        upstream: &str,
    ) -> Result<Option<Secret>, CredError> {
        let spec = self.spec_or(upstream)?;
        if let Some(whose) = obtained::obtained(&spec, who) {
            return self.obtained_token(&whose, &spec, false).await;
        }
        let k = key(who, upstream);
        if let Some((token, mark)) = self.cached(&k) {
            if mark && let Err(e) = self.vault.mark_used(&who.0, upstream).await {
                tracing::debug!("the vault did not record a use: {e}");
            }
            return Ok(Some(token));
        }
        let stored = self
            .vault
            .credential(&who.0, upstream, &spec.identity)
            .await?;
        let Some(stored) = stored else {
            self.forget(who, upstream);
            return Ok(None);
        };
        if !due(&stored.credential) {
            self.remember(&k, &stored);
            let _ = self.vault.mark_used(&who.0, upstream).await;
            return Ok(Some(stored.credential.access_token));
        }
        self.refresh(who, &spec, false).await
    }

    /// Refresh `who`'s token at `spec`'s upstream (`force`: even if it is not due — the upstream
    /// refused it): one task of this replica at a time, one replica at a time (the vault's
    /// lease). The token to use now; `None` when there is none to use (consent is needed).
    async fn refresh(
        &self,
        who: &Principal,
        spec: &Spec,
        force: bool,
    ) -> Result<Option<Secret>, CredError> {
        let k = key(who, &spec.upstream);
        let serial = Arc::clone(lock(&self.refreshing).entry(k.clone()).or_default());
        let _one = serial.lock().await;
        let before = lock(&self.cache).get(&k).map(|c| c.version);
        let Some(stored) = self
            .vault
            .credential(&who.0, &spec.upstream, &spec.identity)
            .await?
        else {
            self.forget(who, &spec.upstream);
            return Ok(None);
        };
        // Refreshed meanwhile (by another task, or another replica): that one.
        let renewed = force && before.is_some_and(|v| v != stored.version);
        if renewed || !(force || due(&stored.credential)) {
            self.remember(&k, &stored);
            return Ok(Some(stored.credential.access_token));
        }
        if stored.credential.refresh_token.is_none() {
            return Ok(self.usable(who, &k, &stored, force));
        }
        let Some(lease) = self.vault.try_lease(&who.0, &spec.upstream, LEASE).await? else {
            return self.others_refresh(who, spec, &stored).await;
        };
        let token = self
            .refresh_unless_renewed(who, spec, &k, &stored, force)
            .await;
        if let Err(e) = self.vault.release(&lease).await {
            tracing::debug!("a refresh lease was not given back (it runs out): {e}");
        }
        token
    }

    /// With the lease held: the row read again, and refreshed only if it is still `stored`.
    /// Another replica may have refreshed between the first read and the lease (its lease given
    /// back meanwhile): then `stored`'s refresh token is spent, and presenting it again would make
    /// a provider that rotates refresh tokens revoke the whole grant.
    async fn refresh_unless_renewed(
        &self,
        who: &Principal,
        spec: &Spec,
        k: &Key,
        stored: &StoredCredential,
        force: bool,
    ) -> Result<Option<Secret>, CredError> {
        let now = self
            .vault
            .credential(&who.0, &spec.upstream, &spec.identity)
            .await?;
        match now {
            None => {
                self.forget(who, &spec.upstream);
                Ok(None)
            }
            Some(now) if now.version != stored.version => {
                self.remember(k, &now);
                Ok(Some(now.credential.access_token))
            }
            Some(_) => {
                let refreshed = self.refresh_leased(who, spec, stored).await;
                self.refreshed(who, spec, k, refreshed, force).await
            }
        }
    }

    /// The token of `stored` if it may still be used (not expired, and not refused by the
    /// upstream), else `None`.
    fn usable(
        &self,
        who: &Principal,
        k: &Key,
        stored: &StoredCredential,
        refused: bool,
    ) -> Option<Secret> {
        if refused || expired(&stored.credential) {
            self.forget(who, &k.1);
            return None;
        }
        self.remember(k, stored);
        Some(stored.credential.access_token.clone())
    }

    /// After a refresh: the new token (cached, audited), or — it failed — the old one while it
    /// is still valid, or none.
    async fn refreshed(
        &self,
        who: &Principal,
        spec: &Spec,
        k: &Key,
        refreshed: Result<(), AuthFailure>,
        force: bool,
    ) -> Result<Option<Secret>, CredError> {
        let upstream = spec.upstream.as_str();
        match refreshed {
            Ok(()) => {
                self.audit(
                    "upstream_auth.refreshed",
                    Some(&who.0),
                    upstream,
                    "ok",
                    None,
                );
                let now = self
                    .vault
                    .credential(&who.0, upstream, &spec.identity)
                    .await?;
                Ok(now.map(|now| {
                    self.remember(k, &now);
                    now.credential.access_token
                }))
            }
            Err(e) => {
                tracing::warn!("Upstream {upstream}: {who}'s token was not refreshed: {e}");
                let why = e.to_string();
                self.audit(
                    "upstream_auth.refresh_failed",
                    Some(&who.0),
                    upstream,
                    "failed",
                    Some(&why),
                );
                let still = self
                    .vault
                    .credential(&who.0, upstream, &spec.identity)
                    .await?;
                Ok(still.and_then(|s| self.usable(who, k, &s, force)))
            }
        }
    }

    /// Another replica holds the lease: wait (bounded) for the row to change, then use it.
    async fn others_refresh(
        &self,
        who: &Principal,
        spec: &Spec,
        stored: &StoredCredential,
    ) -> Result<Option<Secret>, CredError> {
        let until = Instant::now() + OTHERS_REFRESH;
        let k = key(who, &spec.upstream);
        while Instant::now() < until {
            tokio::time::sleep(POLL).await;
            let now = self
                .vault
                .credential(&who.0, &spec.upstream, &spec.identity)
                .await?;
            match now {
                None => return Ok(None),
                Some(now) if now.version != stored.version => {
                    self.remember(&k, &now);
                    return Ok(Some(now.credential.access_token));
                }
                Some(_) => {}
            }
        }
        Ok(self.usable(who, &k, stored, false))
    }

    /// Refresh with the lease held: discover, find the client the token was issued to, and let
    /// rmcp refresh and write the row (compare-and-set on the version read).
    async fn refresh_leased(
        &self,
        who: &Principal,
        spec: &Spec,
        stored: &StoredCredential,
    ) -> Result<(), AuthFailure> {
        let c = &stored.credential;
        let challenge = self.challenge(&spec.upstream);
        let Discovered {
            mut manager,
            metadata,
            issuer,
        } = self.discover(spec, challenge.as_deref()).await?;
        if issuer != c.issuer {
            return Err(AuthFailure::Refused(format!(
                "its authorization server is now {issuer}, not {}: the token is not refreshed \
                 there",
                c.issuer
            )));
        }
        let registration = self
            .client_for(spec, &issuer, &c.client_id)
            .await
            .ok_or_else(|| {
                AuthFailure::Failed(format!(
                    "the client {} the token was issued to is no longer known",
                    c.client_id
                ))
            })?;
        let redirect = self.settings().callback_url().unwrap_or_default();
        configure_client(&mut manager, &metadata, &registration, &redirect, "web")?;
        manager.set_credential_store(RowStore {
            vault: self.vault.clone(),
            principal: who.0.clone(),
            upstream: spec.upstream.clone(),
            identity: spec.identity.clone(),
            issuer,
            expect: Expect::Version(stored.version),
        });
        manager
            .refresh_token()
            .await
            .map_err(super::engine::failure)?;
        tracing::info!("Upstream {}: {who}'s token refreshed", spec.upstream);
        Ok(())
    }

    /// The client `client_id` at `issuer` for `spec`'s upstream: the gateway's registration,
    /// `mcp-host connect`'s, the one configured, or the host's metadata document.
    async fn client_for(&self, spec: &Spec, issuer: &str, client_id: &str) -> Option<Registration> {
        let connect = format!("{}{CONNECT_CLIENTS}", spec.upstream);
        for key in [spec.upstream.as_str(), connect.as_str()] {
            match self.vault.client(key, issuer, &spec.identity).await {
                Ok(Some(c)) if c.client_id == client_id => {
                    let mut r = registration_of(c, Kind::Dynamic);
                    r.method = spec.method.unwrap_or(r.method);
                    return Some(r);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("the vault's clients cannot be read: {e}"),
            }
        }
        if let Some(pre) = spec
            .preregistered
            .as_ref()
            .filter(|p| p.client_id == client_id)
        {
            let method = spec.method.unwrap_or(match pre.client_secret {
                Some(_) => AuthMethod::ClientSecretBasic,
                None => AuthMethod::None,
            });
            return Some(Registration {
                kind: Kind::Preregistered,
                client_id: pre.client_id.clone(),
                client_secret: pre.client_secret.clone(),
                method,
            });
        }
        let document = self.settings().metadata_url()?;
        (document == client_id).then(|| Registration {
            kind: Kind::MetadataDocument,
            client_id: document,
            client_secret: None,
            method: AuthMethod::None,
        })
    }

    /// Discover `spec`'s authorization server, starting from `challenge`.
    async fn discover(
        &self,
        spec: &Spec,
        challenge: Option<&str>,
    ) -> Result<Discovered, AuthFailure> {
        let http = self.http(spec)?;
        discover(&spec.url, http, challenge, false).await
    }

    /// The OAuth engine's HTTP client for `spec`'s upstream.
    fn http(&self, spec: &Spec) -> Result<Arc<dyn OAuthHttpClient>, AuthFailure> {
        let url = url::Url::parse(&spec.url)
            .map_err(|e| AuthFailure::Failed(format!("{}: {e}", spec.url)))?;
        let reach = Reach::of(&url, self.settings().allow_private);
        let client =
            Client::new(reach, !spec.resource).map_err(|e| AuthFailure::Failed(e.to_string()))?;
        Ok(Arc::new(client))
    }

    /// The upstream refused a request of `who` that carried `sent` (`refusal`): the token to
    /// make it again with, or what is needed instead.
    pub async fn rejected(
        &self,
        who: &Principal,
        upstream: &str,
        sent: Option<&Secret>,
        refusal: &Refusal,
    ) -> Result<Secret, Need> {
        self.remember_challenge(upstream, &refusal.challenge);
        let challenge = Some(refusal.challenge.clone()).filter(|c| !c.is_empty());
        let Some(spec) = self.spec(upstream) else {
            return Err(Need::GiveUp(
                CredError::Unknown(upstream.into()).to_string(),
            ));
        };
        if let Some(whose) = obtained::obtained(&spec, who) {
            return self.rejected_obtained(&whose, &spec, sent, refusal).await;
        }
        // A token written meanwhile (a consent, another replica's refresh): that one first.
        self.forget(who, upstream);
        let current = self.token(who, upstream).await.ok().flatten();
        if let Some(current) = current.filter(|c| Some(c) != sent) {
            return Ok(current);
        }
        match refusal.status {
            Status::Unauthorized if sent.is_some() => {
                if let Ok(Some(fresh)) = self.refresh(who, &spec, true).await
                    && Some(&fresh) != sent
                {
                    return Ok(fresh);
                }
                Err(Need::Consent {
                    scopes: Vec::new(),
                    challenge,
                    step_up: false,
                })
            }
            Status::Unauthorized => Err(Need::Consent {
                scopes: Vec::new(),
                challenge,
                step_up: false,
            }),
            Status::Forbidden if refusal.insufficient_scope() => {
                let granted = self.granted(who, &spec).await;
                Err(Need::Consent {
                    scopes: scopes::union(&granted, &refusal.scopes()),
                    challenge,
                    step_up: true,
                })
            }
            Status::Forbidden => Err(Need::GiveUp(format!(
                "upstream {upstream} refused {who}'s token (HTTP 403) without naming a scope it \
                 lacks"
            ))),
        }
    }

    /// The scopes `who` was granted at `spec`'s upstream.
    async fn granted(&self, who: &Principal, spec: &Spec) -> Vec<String> {
        match self
            .vault
            .credential(&who.0, &spec.upstream, &spec.identity)
            .await
        {
            Ok(Some(stored)) => stored.credential.scopes,
            _ => Vec::new(),
        }
    }

    /// Count a step-up of `who` at `upstream`: `false` past [`MAX_STEP_UPS`] in
    /// [`STEP_UP_WINDOW`].
    fn step_up_allowed(&self, who: &Principal, upstream: &str) -> bool {
        let mut step_ups = lock(&self.step_ups);
        if step_ups.len() > 10_000 {
            step_ups.retain(|_, v| v.back().is_some_and(|t| t.elapsed() < STEP_UP_WINDOW));
        }
        let times = step_ups.entry(key(who, upstream)).or_default();
        times.retain(|t| t.elapsed() < STEP_UP_WINDOW);
        if times.len() >= MAX_STEP_UPS {
            return false;
        }
        times.push_back(Instant::now());
        true
    }

    /// Wait until `who` holds a credential at `upstream` obtained at or after `since_ms` (a
    /// consent completed, on this replica or another), or `until`; whether one came.
    pub async fn wait_landed(
        &self,
        who: &Principal,
        upstream: &str,
        since_ms: u64,
        until: Instant,
    ) -> bool {
        let Some(spec) = self.spec(upstream) else {
            return false;
        };
        loop {
            let notified = self.landed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Ok(Some(stored)) = self
                .vault
                .credential(&who.0, upstream, &spec.identity)
                .await
                // rmcp stamps a token's receipt in whole seconds: one received in the second
                // the flow began counts.
                && stored.credential.received_at_ms >= since_ms - since_ms % 1000
            {
                self.forget(who, upstream);
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // Woken by a callback here; polled for one on another replica.
            let _ = tokio::time::timeout(left.min(Duration::from_secs(1)), notified).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_is_made_of_an_http_upstream_with_server_auth_only() {
        let mut server = UpstreamServer {
            url: Some("https://mcp.example.com/mcp".into()),
            ..UpstreamServer::default()
        };
        assert!(Spec::of("github", &server).is_none());
        server.auth = Some(ServerAuth {
            client_id: Some("c".into()),
            client_secret: Some("s".into()),
            issuer: Some("https://as.example".into()),
            ..ServerAuth::default()
        });
        let spec = Spec::of("github", &server).unwrap();
        assert_eq!(spec.upstream, "github");
        assert!(spec.resource, "resource is sent unless switched off");
        assert_eq!(spec.list_as, ListAs::Operator);
        assert!(!format!("{spec:?}").contains("\"s\""));
        // Another secret is another identity: credentials obtained before do not open.
        let mut other = server.clone();
        if let Some(auth) = other.auth.as_mut() {
            auth.client_secret = Some("s2".into());
        }
        assert_ne!(Spec::of("github", &other).unwrap().identity, spec.identity);
        server.url = None;
        assert!(Spec::of("github", &server).is_none());
    }

    #[test]
    fn a_need_says_what_to_do() {
        let consent = Need::Consent {
            scopes: Vec::new(),
            challenge: None,
            step_up: false,
        };
        let operator = consent.describe(&Principal::operator(), "github");
        assert!(
            operator.contains("/oauth/connect?upstream=github&as=operator"),
            "{operator}"
        );
        let alice = Principal("alice".into());
        assert!(consent.describe(&alice, "github").contains("alice"));
    }
}
