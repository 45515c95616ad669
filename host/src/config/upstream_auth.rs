//! `upstream_auth`: how the host obtains and keeps the credentials it holds for the users of
//! upstream servers — where its OAuth callback is reached (`public_url`), how a user's consent
//! is asked (`consent`), the per-user upstream sessions (`sessions`), the token vault's keys and
//! bounds (`vault`) — and `server.auth` of an HTTP upstream ([`ServerAuth`]): each caller's own
//! identity at that upstream.
//!
//! The keys are read here and checked (each base64 of 32 bytes, none listed twice); sealing with
//! them is `access::upstream::sealing`'s. Whether keys are required depends on which upstreams
//! obtain credentials for their users, which the configuration of upstream authorization decides:
//! [`VaultSettings::check_required`] is the check it calls.

use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::StoreSetting;

/// How the host obtains and keeps the credentials of users of upstream servers (for upstreams
/// with `server.auth`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamAuthSettings {
    /// The origin the users' browsers reach this host at (e.g. `https://mcp.example.com`, a path
    /// prefix allowed behind a proxy): the authorization servers send users back to
    /// `<public_url>/oauth/callback`, consent links are `<public_url>/oauth/connect/<id>`, and
    /// over https the host's client metadata document is `<public_url>/oauth/client-metadata.json`.
    /// https, or http on a loopback address only. Required once an upstream has `server.auth`
    /// (default: the origin of `auth.resource`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// How a user's consent is asked.
    pub consent: ConsentSettings,
    /// The per-user upstream sessions.
    pub sessions: SessionSettings,
    /// Let authorization servers be on private networks (RFC 1918, unique local IPv6) although
    /// the upstream is not (an upstream on a private network may always use one there).
    pub allow_private_auth_servers: bool,
    /// The token vault: where users' upstream credentials are kept (in the `store`, sealed).
    pub vault: VaultSettings,
}

/// How a user's consent to an upstream is asked.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsentSettings {
    /// The consent link checks who follows it: its page asks for the mcp-host credential (a
    /// personal secret or bearer token) of the user the link was made for, and refuses anyone
    /// else's. `false` shows the user's name and a button instead — for single-user deployments
    /// only: whoever holds the link can then connect their own account for that user.
    pub require_login: bool,
    /// Seconds a consent link stays valid.
    pub ttl_secs: u64,
    /// Seconds a call of a 2025 session waits for the user to finish connecting (URL
    /// elicitation) before it fails with -32042 (the client may retry it later).
    pub wait_secs: u64,
}

impl Default for ConsentSettings {
    fn default() -> Self {
        ConsentSettings {
            require_login: true,
            ttl_secs: 600,
            wait_secs: 120,
        }
    }
}

/// The sessions the host opens to an upstream with `server.auth`, one per user.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SessionSettings {
    /// Users' sessions kept per upstream (the least recently used is closed for one more).
    pub max_per_upstream: usize,
    /// Seconds an unused user's session is kept open.
    pub idle_secs: u64,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            max_per_upstream: 512,
            idle_secs: 600,
        }
    }
}

/// How an HTTP upstream authorizes its callers (`tool_dirs[].server.auth`).
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerAuth {
    /// `oauth`: each caller's own OAuth token — the first call of a user without one asks the
    /// user's client to open a consent link; `token_exchange`: each caller's own token, the
    /// caller's verified inbound JWT exchanged for one (RFC 8693, no consent); `client_credentials`:
    /// one token of the host's own service identity for every caller (see
    /// docs/operators/upstream-auth.md).
    pub mode: ServerAuthMode,
    /// A client registered with the upstream's authorization server beforehand (else: the host's
    /// client metadata document where the server takes them, else dynamic registration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Its secret, for a confidential client (`${ENV_VAR}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The issuer `client_id` is registered with: it is presented to no other authorization
    /// server (required with `client_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Scopes to ask for instead of those the upstream's challenge or metadata names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Send RFC 8707 `resource` in authorization and token requests (MCP requires it); `false`
    /// for identity providers that reject it (Entra ID v1 and others) — a deliberate deviation.
    pub resource: bool,
    /// How the client authenticates at the token endpoint (unset: as its registration says, else
    /// as the authorization server supports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth: Option<TokenEndpointAuth>,
    /// Who reads the upstream's tools, resources and prompts for everyone: `operator` (the
    /// operator's own connection, made by an admin at `<public_url>/oauth/connect?upstream=NAME&as=operator`;
    /// until then the upstream waits, serving nothing), `service` (the host's service identity: a
    /// `client_credentials` token of the configured client) or `none` (the upstream lists them
    /// without a token). With `mode: client_credentials` it is `service`.
    pub list_as: ListAs,
    /// With `mode: token_exchange`: how the caller's token is exchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_exchange: Option<TokenExchange>,
}

/// How a caller's inbound token is exchanged for the upstream's (RFC 8693).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TokenExchange {
    /// What the caller's token is, as `subject_token_type`: `access_token` (the default) or
    /// `jwt`.
    pub subject_token_type: SubjectTokenType,
    /// An RFC 8693 `audience` to ask for besides `resource` (some authorization servers name
    /// the upstream that way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
}

/// The RFC 8693 type of the token a caller presented to the host.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SubjectTokenType {
    /// `urn:ietf:params:oauth:token-type:access_token`.
    #[default]
    AccessToken,
    /// `urn:ietf:params:oauth:token-type:jwt`.
    Jwt,
}

impl SubjectTokenType {
    /// Its URN.
    pub fn urn(self) -> &'static str {
        match self {
            SubjectTokenType::AccessToken => "urn:ietf:params:oauth:token-type:access_token",
            SubjectTokenType::Jwt => "urn:ietf:params:oauth:token-type:jwt",
        }
    }
}

impl Default for ServerAuth {
    fn default() -> Self {
        ServerAuth {
            mode: ServerAuthMode::Oauth,
            client_id: None,
            client_secret: None,
            issuer: None,
            scopes: Vec::new(),
            resource: true,
            token_endpoint_auth: None,
            list_as: ListAs::Operator,
            token_exchange: None,
        }
    }
}

/// The client secret is never shown.
impl fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerAuth")
            .field("mode", &self.mode)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("issuer", &self.issuer)
            .field("scopes", &self.scopes)
            .field("resource", &self.resource)
            .field("token_endpoint_auth", &self.token_endpoint_auth)
            .field("list_as", &self.list_as)
            .field("token_exchange", &self.token_exchange)
            .finish()
    }
}

/// How an upstream is authorized.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ServerAuthMode {
    /// Each caller's own OAuth 2.1 token, obtained with the caller's consent.
    #[default]
    Oauth,
    /// Each caller's own token, obtained by exchanging the caller's verified inbound JWT at the
    /// upstream's authorization server (RFC 8693): no consent round trip.
    TokenExchange,
    /// The host's own service identity (`client_credentials`): one token for every caller.
    ClientCredentials,
}

/// A token endpoint authentication method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenEndpointAuth {
    /// A public client: its id alone.
    None,
    /// HTTP Basic with the client secret.
    ClientSecretBasic,
    /// The client secret in the form body.
    ClientSecretPost,
}

/// Who lists an upstream with `server.auth`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ListAs {
    /// The operator's own connection (made by an admin at
    /// `<public_url>/oauth/connect?upstream=NAME&as=operator`, kept in the vault as `@operator`).
    #[default]
    Operator,
    /// The host's service identity: a `client_credentials` token of the configured client.
    Service,
    /// Nobody: the upstream lists without a token.
    None,
}

impl ServerAuth {
    /// The digest of everything that makes a credential obtained for this upstream valid for it
    /// (its URL and this configuration, the secret's digest rather than the secret): a credential
    /// obtained under another is not used (hex SHA-256).
    pub fn identity(&self, url: &str) -> String {
        use sha2::Digest as _;
        let secret = self
            .client_secret
            .as_deref()
            .map(|s| hex(&sha2::Sha256::digest(s.as_bytes())));
        let canonical = serde_json::json!([
            "mcp-host/upstream-identity/v1",
            url,
            self.mode,
            self.client_id,
            secret,
            self.issuer,
            self.scopes,
            self.resource,
            self.token_endpoint_auth,
            self.token_exchange,
        ]);
        hex(&sha2::Sha256::digest(canonical.to_string().as_bytes()))
    }

    /// What is wrong with it on an upstream at `url` (`None`: a stdio upstream), and the key
    /// below `server.auth` it is about.
    pub fn problem(&self, url: Option<&str>) -> Option<(&'static str, String)> {
        if url.is_none() {
            return Some(("", "applies to an HTTP upstream (`url`)".into()));
        }
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Some((".client_secret", "needs `client_id`".into()));
        }
        if self.client_id.is_some() && self.issuer.is_none() {
            return Some((
                ".issuer",
                "a client registered beforehand names the issuer it is registered with (it is                  presented to no other authorization server)"
                    .into(),
            ));
        }
        let secretless = self.client_secret.is_none()
            && matches!(
                self.token_endpoint_auth,
                Some(TokenEndpointAuth::ClientSecretBasic | TokenEndpointAuth::ClientSecretPost)
            );
        if secretless && self.client_id.is_some() {
            return Some((".token_endpoint_auth", "needs `client_secret`".into()));
        }
        self.grant_problem()
    }

    /// What is wrong with a mode (or listing) that obtains tokens without a user's consent.
    fn grant_problem(&self) -> Option<(&'static str, String)> {
        let needs_client = match self.mode {
            ServerAuthMode::Oauth => self.list_as == ListAs::Service,
            ServerAuthMode::TokenExchange | ServerAuthMode::ClientCredentials => true,
        };
        if self.token_exchange.is_some() && self.mode != ServerAuthMode::TokenExchange {
            return Some((
                ".token_exchange",
                "applies to `mode: token_exchange`".into(),
            ));
        }
        if needs_client && (self.client_id.is_none() || self.client_secret.is_none()) {
            return Some((
                ".client_id",
                format!(
                    "{} needs a client registered beforehand with the authorization server: \
                     `client_id`, `client_secret` and `issuer`",
                    match self.mode {
                        ServerAuthMode::TokenExchange => "`mode: token_exchange`",
                        ServerAuthMode::ClientCredentials => "`mode: client_credentials`",
                        ServerAuthMode::Oauth => "`list_as: service`",
                    }
                ),
            ));
        }
        if self.mode == ServerAuthMode::TokenExchange && self.list_as == ListAs::Operator {
            return Some((
                ".list_as",
                "an upstream whose callers' tokens are exchanged lists with `service` (the \
                 client's own client_credentials token) or `none`: there is no operator's \
                 connection to list with"
                    .into(),
            ));
        }
        if self.token_endpoint_auth == Some(TokenEndpointAuth::None) && needs_client {
            return Some((
                ".token_endpoint_auth",
                "a service identity or a token exchange authenticates its client: \
                 client_secret_basic or client_secret_post"
                    .into(),
            ));
        }
        None
    }

    /// Who lists the upstream: `service` for `mode: client_credentials`, else `list_as`.
    pub fn lister(&self) -> ListAs {
        match self.mode {
            ServerAuthMode::ClientCredentials => ListAs::Service,
            _ => self.list_as,
        }
    }
}

/// Bytes as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl UpstreamAuthSettings {
    /// The origin consent links and the callback are built on: `public_url`, else the origin of
    /// `resource` (`auth.resource`); without a trailing slash.
    pub fn public_url(&self, resource: Option<&str>) -> Option<String> {
        if let Some(url) = &self.public_url {
            return Some(url.trim_end_matches('/').to_owned());
        }
        let url = url::Url::parse(resource?).ok()?;
        Some(url.origin().ascii_serialization())
    }

    /// What is wrong with `public_url`, when it is set.
    pub fn public_url_problem(&self) -> Option<String> {
        let url = self.public_url.as_deref()?;
        let parsed = match url::Url::parse(url) {
            Ok(parsed) => parsed,
            Err(e) => return Some(format!("{url}: not a URL ({e})")),
        };
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Some(format!("{url}: an http(s) URL with a host"));
        }
        let loopback = match parsed.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        if parsed.scheme() == "http" && !loopback {
            return Some(format!(
                "{url}: the OAuth callback (`<public_url>/oauth/callback`) must be https, or http \
                 on a loopback address only (OAuth 2.1: authorization codes never cross a network \
                 in clear)"
            ));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() || !parsed.username().is_empty()
        {
            return Some(format!(
                "{url}: an origin (and path prefix) only: no query, fragment or user"
            ));
        }
        None
    }
}

/// The token vault: users' upstream credentials, registered clients and pending consents, kept in
/// the `store` (SQLite or Redis), sealed with ChaCha20-Poly1305.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct VaultSettings {
    /// Keys that seal the vault's rows: each the base64 of 32 random bytes (`openssl rand -base64
    /// 32`), given as `${ENV_VAR}`. The first seals, every one opens: to rotate, put a new key
    /// first, run `mcp-host vault rotate`, then remove the old one. Required (the same list on
    /// every replica) when an upstream obtains credentials for its users and the store is not
    /// `memory`; the vault never keeps a key beside what it seals.
    pub keys: Vec<String>,
    /// Upstreams one user may hold credentials for at once (connecting one more is refused).
    pub max_connections_per_user: usize,
    /// Consents one user may have pending at once (authorization links not yet followed).
    pub max_pending_flows_per_user: usize,
    /// Consents pending at once, every user together.
    pub max_pending_flows: usize,
}

impl Default for VaultSettings {
    fn default() -> Self {
        VaultSettings {
            keys: Vec::new(),
            max_connections_per_user: 64,
            max_pending_flows_per_user: 8,
            max_pending_flows: 10_000,
        }
    }
}

/// The keys are never shown.
impl fmt::Debug for VaultSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultSettings")
            .field("keys", &format_args!("[<redacted>; {}]", self.keys.len()))
            .field("max_connections_per_user", &self.max_connections_per_user)
            .field(
                "max_pending_flows_per_user",
                &self.max_pending_flows_per_user,
            )
            .field("max_pending_flows", &self.max_pending_flows)
            .finish()
    }
}

/// A vault key's bytes: base64 (standard or URL-safe, padded or not) of exactly 32 bytes. The
/// error never quotes the key.
pub fn decode_vault_key(text: &str) -> Result<Zeroizing<Vec<u8>>, String> {
    let normal: Zeroizing<String> = Zeroizing::new(
        text.trim()
            .trim_end_matches('=')
            .chars()
            .map(|c| match c {
                '-' => '+',
                '_' => '/',
                c => c,
            })
            .collect(),
    );
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(normal.as_bytes())
        .map(Zeroizing::new)
        .map_err(|_| "not base64 (a key is the base64 of 32 random bytes)".to_owned())?;
    if bytes.len() != 32 {
        return Err(format!(
            "a vault key is 32 bytes (the base64 of 32 random bytes), this one is {}",
            bytes.len()
        ));
    }
    Ok(bytes)
}

impl VaultSettings {
    /// Check every configured key (the message names the key by its place in the list, never
    /// its value). Empty entries (an unset `${OLD_KEY:-}`) are skipped.
    pub fn check_keys(&self) -> Result<(), (String, String)> {
        let mut seen: Vec<(usize, Zeroizing<Vec<u8>>)> = Vec::new();
        for (i, text) in self.keys.iter().enumerate() {
            if text.trim().is_empty() {
                continue;
            }
            let key = decode_vault_key(text).map_err(|why| (format!("keys.{i}"), why))?;
            if let Some((first, _)) = seen.iter().find(|(_, k)| *k == key) {
                return Err((format!("keys.{i}"), format!("the same key as keys.{first}")));
            }
            seen.push((i, key));
        }
        Ok(())
    }

    /// Whether some key is configured.
    pub fn has_keys(&self) -> bool {
        self.keys.iter().any(|k| !k.trim().is_empty())
    }

    /// The check the configuration of upstream authorization calls once it knows which upstreams
    /// (and plugin credential providers) obtain credentials for users (`users`): with any, and a
    /// store that outlives the process (SQLite, Redis), `upstream_auth.vault.keys` is required.
    /// There is deliberately no fallback key kept in the store itself (unlike task records'):
    /// the key must not sit beside the tokens it protects.
    pub fn check_required(&self, store: &StoreSetting, users: &[&str]) -> Result<(), String> {
        if users.is_empty() || matches!(store, StoreSetting::Memory) || self.has_keys() {
            return Ok(());
        }
        Err(format!(
            "{} obtain{} credentials for users, which the store keeps ({}): set \
             upstream_auth.vault.keys to the base64 of 32 random bytes (`openssl rand -base64 32`), \
             given as ${{ENV_VAR}} — the same list on every replica",
            users.join(", "),
            if users.len() == 1 { "s" } else { "" },
            match store {
                StoreSetting::Sqlite(_) => "sqlite",
                _ => "redis",
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn a_token_exchange_or_service_identity_needs_a_confidential_client_and_a_listing() {
        let url = Some("https://mcp.example.com/mcp");
        let client = ServerAuth {
            client_id: Some("gw".into()),
            client_secret: Some("s".into()),
            issuer: Some("https://idp.example".into()),
            ..ServerAuth::default()
        };
        let exchange = ServerAuth {
            mode: ServerAuthMode::TokenExchange,
            list_as: ListAs::Service,
            ..client.clone()
        };
        assert_eq!(exchange.problem(url), None);
        assert_eq!(exchange.lister(), ListAs::Service);
        let listed_by_operator = ServerAuth {
            list_as: ListAs::Operator,
            ..exchange.clone()
        };
        assert_eq!(listed_by_operator.problem(url).unwrap().0, ".list_as");
        let secretless = ServerAuth {
            client_secret: None,
            ..exchange.clone()
        };
        assert_eq!(secretless.problem(url).unwrap().0, ".client_id");
        let public = ServerAuth {
            token_endpoint_auth: Some(TokenEndpointAuth::None),
            ..exchange.clone()
        };
        assert_eq!(public.problem(url).unwrap().0, ".token_endpoint_auth");
        let service = ServerAuth {
            mode: ServerAuthMode::ClientCredentials,
            ..client.clone()
        };
        assert_eq!(service.problem(url), None);
        assert_eq!(
            service.lister(),
            ListAs::Service,
            "a service identity lists as itself"
        );
        let stray = ServerAuth {
            token_exchange: Some(TokenExchange::default()),
            ..service.clone()
        };
        assert_eq!(stray.problem(url).unwrap().0, ".token_exchange");
        // The exchange's settings are part of the identity: tokens obtained otherwise do not open.
        let jwt = ServerAuth {
            token_exchange: Some(TokenExchange {
                subject_token_type: SubjectTokenType::Jwt,
                audience: None,
            }),
            ..exchange.clone()
        };
        assert_ne!(jwt.identity("u"), exchange.identity("u"));
        assert_ne!(service.identity("u"), client.identity("u"));
        let parsed: ServerAuth = serde_json::from_value(serde_json::json!({
            "mode": "token_exchange", "client_id": "gw", "client_secret": "s", "issuer": "i",
            "list_as": "service", "token_exchange": {"subject_token_type": "jwt", "audience": "a"}
        }))
        .unwrap();
        assert_eq!(parsed.mode, ServerAuthMode::TokenExchange);
        assert_eq!(
            parsed.token_exchange.unwrap().subject_token_type.urn(),
            "urn:ietf:params:oauth:token-type:jwt"
        );
    }

    #[test]
    fn keys_are_checked_by_place_and_never_shown() {
        let mut vault = VaultSettings {
            keys: vec![b64(&[1; 32]), String::new(), b64(&[2; 32])],
            ..VaultSettings::default()
        };
        assert_eq!(vault.check_keys(), Ok(()));
        vault.keys.push(b64(&[3; 31]));
        let (key, why) = vault.check_keys().unwrap_err();
        assert_eq!(key, "keys.3");
        assert!(why.contains("32 bytes") && why.contains("31"), "{why}");
        vault.keys[3] = "%%%".into();
        assert!(vault.check_keys().unwrap_err().1.contains("not base64"));
        // The same key, in another alphabet: still the same key.
        vault.keys[3] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([1u8; 32]);
        assert_eq!(
            vault.check_keys(),
            Err(("keys.3".into(), "the same key as keys.0".into()))
        );
        let shown = format!("{vault:?}");
        assert!(!shown.contains(&b64(&[1; 32])), "{shown}");
        assert!(shown.contains("<redacted>; 4"), "{shown}");
    }

    #[test]
    fn keys_are_required_when_users_credentials_outlive_the_process() {
        let none = VaultSettings::default();
        let sqlite = StoreSetting::Sqlite(None);
        assert_eq!(none.check_required(&sqlite, &[]), Ok(()));
        assert_eq!(
            none.check_required(&StoreSetting::Memory, &["github"]),
            Ok(())
        );
        let err = none.check_required(&sqlite, &["github"]).unwrap_err();
        assert!(
            err.contains("github") && err.contains("upstream_auth.vault.keys"),
            "{err}"
        );
        let redis = StoreSetting::Redis("redis://127.0.0.1".into());
        assert!(none.check_required(&redis, &["a", "b"]).is_err());
        let empty = VaultSettings {
            keys: vec![String::new()],
            ..VaultSettings::default()
        };
        assert!(
            empty.check_required(&redis, &["a"]).is_err(),
            "an unset ${{KEY:-}}"
        );
        let keyed = VaultSettings {
            keys: vec![b64(&[1; 32])],
            ..VaultSettings::default()
        };
        assert_eq!(keyed.check_required(&redis, &["a"]), Ok(()));
    }
}
