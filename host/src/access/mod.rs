//! Access: who a request comes from ([`auth`]: bearer JWTs and personal secrets) and which view of
//! the tools applies to it ([`agents`]). Transports resolve every request here before the protocol
//! sees it; identity never comes from anything else. [`upstream`]: the identities the host holds
//! for its users at upstream servers.

pub mod agents;
pub mod auth;
pub mod upstream;

use std::sync::Arc;

use serde_json::Value;

pub use agents::{Agent, AgentError, Agents};
pub use auth::{AuthError, AuthSetupError, Authenticator};

/// Who a request comes from and through which agent — everything transports need to decide access.
#[derive(Debug)]
pub struct Access {
    auth: Option<Authenticator>,
    agents: agents::Agents,
    require_auth: bool,
    resource: String,
    authorization_servers: Vec<String>,
}

/// The identity a request runs with.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// The verified caller.
    pub caller: Option<mcp_plugin_sdk::UserInfo>,
    /// The agent whose view applies.
    pub agent: Option<Arc<Agent>>,
    /// The caller's JWT claims, when a JWT identified it (call policy's `caller.claims`).
    pub claims: Option<Arc<auth::Claims>>,
    /// The JWT the caller presented, as verified (never a personal secret): what an upstream with
    /// `server.auth.mode: token_exchange` exchanges for the caller's own token there (RFC 8693).
    /// Never handed to plugins, never sent on as it is (no token passthrough).
    pub subject_token: Option<upstream::Secret>,
}

impl Identity {
    /// Whom the per-caller limits (calls in flight, rate, legacy sessions) count this request
    /// against: the verified user, else the agent, else the remote address (`peer`, from
    /// [`peer_key`]), else everyone without one together.
    pub fn caller_key(&self, peer: Option<&Arc<str>>) -> Arc<str> {
        if let Some(caller) = &self.caller {
            return format!("user:{}", caller.user_id).into();
        }
        if let Some(agent) = &self.agent {
            return format!("agent:{}", agent.name).into();
        }
        peer.map_or_else(|| Arc::from("anonymous"), Arc::clone)
    }

    /// Who owns the legacy sessions this request opens and may use: the verified user, else the
    /// remote address (`peer`, from [`peer_key`]; through an agent endpoint, the agent and the
    /// address together). A session answers only to its owner.
    pub fn session_owner(&self, peer: &Arc<str>) -> Arc<str> {
        match (&self.caller, &self.agent) {
            (Some(caller), _) => format!("user:{}", caller.user_id).into(),
            (None, Some(agent)) => format!("agent:{} {peer}", agent.name).into(),
            (None, None) => Arc::clone(peer),
        }
    }
}

/// What plugin `plugin` is told about `caller`: the same caller, with its MCP session id replaced
/// by one derived for this plugin alone (SHA-256 of the plugin's name and the session id, 128 bits
/// in hex). A plugin can still tell one session from another, the same id on every replica and
/// after a restart, but it never learns the id a client sends, so it cannot hand it to anyone
/// who would replay it, and two plugins cannot match their ids to follow one session across them.
pub fn for_plugin(caller: &mcp_plugin_sdk::UserInfo, plugin: &str) -> mcp_plugin_sdk::UserInfo {
    use sha2::{Digest as _, Sha256};
    let mut caller = caller.clone();
    if let Some(id) = caller.session_id.as_mut() {
        let mut hash = Sha256::new();
        hash.update(b"mcp-host plugin session id\0");
        hash.update(plugin.as_bytes());
        hash.update(b"\0");
        hash.update(id.as_bytes());
        let digest = hash.finalize();
        *id = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    }
    caller
}

/// The caller key of requests without an identity from remote address `ip` (an IPv6 address by
/// its /64, which one client usually owns whole); made once per connection.
pub fn peer_key(ip: std::net::IpAddr) -> Arc<str> {
    use std::net::IpAddr;
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("addr:{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3]).into()
        }
        ip => format!("addr:{ip}").into(),
    }
}

/// `name` as a URL path segment: bytes a segment may hold stay (so a name taken from a request path
/// comes back as it was sent), anything else (quotes, spaces, controls, non-ASCII) is
/// percent-encoded, so the URL is safe inside a quoted header parameter too.
fn path_segment(name: &str) -> std::borrow::Cow<'_, str> {
    let keep = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%".contains(&b);
    if name.bytes().all(keep) {
        return name.into();
    }
    name.bytes()
        .map(|b| {
            if keep(b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect::<String>()
        .into()
}

/// Why a request is refused before it reaches the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No or bad credentials: HTTP 401 with a challenge.
    #[error("unauthorized: {description}")]
    Unauthorized {
        /// The bearer error code (`invalid_token`), absent when no token was sent.
        error: Option<&'static str>,
        /// What was wrong (never the token).
        description: String,
        /// Why, in one word for metrics (`missing`, `invalid`, `rejected`, `expired`,
        /// `wrong_audience`, `no_keys`).
        reason: &'static str,
    },
    /// Valid credentials that may not use this endpoint: HTTP 403.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The endpoint names an agent that does not exist: HTTP 404.
    #[error("no such agent: {0}")]
    UnknownAgent(String),
}

impl Denied {
    /// Why, in one word, as the `auth_failures` metric labels it.
    pub fn reason(&self) -> &'static str {
        match self {
            Denied::Unauthorized { reason, .. } => reason,
            Denied::Forbidden(_) => "wrong_agent",
            Denied::UnknownAgent(_) => "unknown_agent",
        }
    }
}

/// The configuration of access is unusable.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// Keys or secrets.
    #[error(transparent)]
    Auth(#[from] AuthSetupError),
    /// Agent globs.
    #[error(transparent)]
    Agent(#[from] agents::AgentError),
}

impl Access {
    /// Build from the configuration. The resource URI defaults to `http://<listen><http.path>`.
    pub fn from_config(config: &crate::config::Config) -> Result<Access, AccessError> {
        let a = &config.auth;
        let resource = a
            .resource
            .clone()
            .unwrap_or_else(|| format!("http://{}{}", config.listen, config.http.path));
        let configured = a.jwt.hs256_secret.as_ref().is_some_and(|s| !s.is_empty())
            || !a.jwt.public_keys.is_empty()
            || a.jwt.jwks_file.is_some()
            || !a.secrets.is_empty();
        let auth = if configured {
            Some(Authenticator::new(a, resource.clone(), &config.base_dir)?)
        } else {
            None
        };
        Ok(Access {
            auth,
            agents: agents::Agents::from_config(&config.agents)?,
            require_auth: a.require_auth,
            resource,
            authorization_servers: a.authorization_servers.clone(),
        })
    }

    /// Whether answers may depend on who asks (then 2026 lists are `cacheScope: private`).
    pub fn caller_dependent(&self) -> bool {
        self.auth.is_some() || !self.agents.is_empty()
    }

    /// Whether callers can authenticate at all (secrets or JWT keys are configured).
    pub fn authenticates(&self) -> bool {
        self.auth.is_some()
    }

    /// Whether every HTTP request needs valid credentials (`auth.require_auth`).
    pub fn requires_auth(&self) -> bool {
        self.require_auth
    }

    /// The agent called `name`.
    pub fn agent(&self, name: &str) -> Option<Arc<Agent>> {
        self.agents.get(name)
    }

    /// Resolve an HTTP request: `endpoint_agent` from `/mcp/agents/{name}`, `bearer` from the
    /// `Authorization` header.
    pub fn resolve(
        &self,
        endpoint_agent: Option<&str>,
        bearer: Option<&str>,
        session_id: Option<&str>,
    ) -> Result<Identity, Denied> {
        // A token minted for the agent's own resource (RFC 8707) is accepted at its endpoint, as
        // is one for the server's endpoint.
        let agent_resource = endpoint_agent.map(|name| self.resource_of(Some(name)));
        let verified = match (bearer, &self.auth) {
            (Some(token), Some(auth)) => match auth.verify(token, agent_resource.as_deref()) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::info!("refused a bearer token: {e}");
                    return Err(Denied::Unauthorized {
                        error: Some("invalid_token"),
                        description: e.to_string(),
                        reason: e.reason(),
                    });
                }
            },
            (Some(_), None) => {
                return Err(Denied::Unauthorized {
                    error: Some("invalid_token"),
                    description: "this server accepts no bearer tokens (no keys configured)".into(),
                    reason: "no_keys",
                });
            }
            (None, _) => None,
        };
        if verified.is_none() && self.require_auth {
            return Err(Denied::Unauthorized {
                error: None,
                description: "authentication required".into(),
                reason: "missing",
            });
        }
        // Only now look the endpoint's agent up: an unauthenticated caller learns nothing about agents.
        let endpoint = match endpoint_agent {
            Some(name) => Some(
                self.agents
                    .get(name)
                    .ok_or_else(|| Denied::UnknownAgent(name.to_owned()))?,
            ),
            None => None,
        };
        let agent = match (endpoint, verified.as_ref().and_then(|v| v.agent.as_deref())) {
            (Some(ep), Some(bound)) if ep.name != bound => {
                return Err(Denied::Forbidden(format!(
                    "the credentials are bound to agent {bound}, not {}",
                    ep.name
                )));
            }
            (Some(ep), _) => Some(ep),
            (None, Some(bound)) => Some(self.agents.get(bound).ok_or_else(|| {
                Denied::Forbidden(format!("the credentials name unknown agent {bound}"))
            })?),
            (None, None) => None,
        };
        let claims = verified.as_ref().and_then(|v| v.claims.clone());
        // A JWT (one with claims) may be exchanged; a personal secret never leaves the host.
        let subject_token = bearer
            .filter(|_| claims.is_some())
            .map(upstream::Secret::new);
        let caller = verified.map(|v| {
            let mut caller = mcp_plugin_sdk::UserInfo::new(v.user_id);
            caller.session_id = session_id.map(str::to_owned);
            caller.agent = agent.as_ref().map(|a| a.name.clone());
            caller
        });
        Ok(Identity {
            caller,
            agent,
            claims,
            subject_token,
        })
    }

    /// The resource URI of an endpoint: `auth.resource` for the MCP endpoint, and
    /// `<auth.resource>/agents/{name}` for an agent's.
    pub fn resource_of(&self, agent: Option<&str>) -> String {
        match agent {
            Some(name) => format!(
                "{}/agents/{}",
                self.resource.trim_end_matches('/'),
                path_segment(name)
            ),
            None => self.resource.clone(),
        }
    }

    /// The RFC 9728 protected-resource metadata document of the MCP endpoint, or of the agent
    /// endpoint `/mcp/agents/{agent}` (whose `resource` is its own URL, as strict clients check).
    pub fn metadata(&self, agent: Option<&str>) -> Value {
        serde_json::json!({
            "resource": self.resource_of(agent),
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": match agent {
                Some(name) => format!("mcp-host agent {name}"),
                None => "mcp-host".to_owned(),
            },
        })
    }

    /// Where an endpoint's metadata is served: `<origin>/.well-known/oauth-protected-resource<path>`.
    pub fn metadata_url(&self, agent: Option<&str>) -> String {
        let resource = self.resource_of(agent);
        let (origin, path) = match resource.split_once("://") {
            Some((scheme, rest)) => match rest.find('/') {
                Some(i) => (format!("{scheme}://{}", &rest[..i]), &rest[i..]),
                None => (resource.clone(), ""),
            },
            None => (String::new(), resource.as_str()),
        };
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// The `WWW-Authenticate` value for a 401 at the MCP endpoint or at agent `agent`'s.
    pub fn challenge(&self, agent: Option<&str>, error: Option<&str>, description: &str) -> String {
        let mut value = format!("Bearer resource_metadata=\"{}\"", self.metadata_url(agent));
        if let Some(error) = error {
            let description = description.replace('"', "'");
            value.push_str(&format!(
                ", error=\"{error}\", error_description=\"{description}\""
            ));
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_plugin_gets_its_own_session_id_never_the_clients() {
        let mut caller = mcp_plugin_sdk::UserInfo::new("alice");
        caller.session_id = Some("0123456789abcdef0123456789abcdef".into());
        let a = for_plugin(&caller, "a").session_id.unwrap();
        let b = for_plugin(&caller, "b").session_id.unwrap();
        assert_ne!(a, b);
        assert_ne!(Some(&a), caller.session_id.as_ref());
        assert_eq!(a.len(), 32);
        assert_eq!(Some(a), for_plugin(&caller, "a").session_id, "stable");
        assert_eq!(for_plugin(&caller, "a").user_id, "alice");
        let none = for_plugin(&mcp_plugin_sdk::UserInfo::new("bob"), "a");
        assert!(none.session_id.is_none());
    }

    #[test]
    fn agent_resources_are_urls_safe_in_a_quoted_header_parameter() {
        let mut config = crate::config::Config::default();
        config.auth.resource = Some("https://mcp.example/mcp".into());
        let access = Access::from_config(&config).unwrap();
        assert_eq!(
            access.resource_of(Some("research")),
            "https://mcp.example/mcp/agents/research"
        );
        assert_eq!(
            access.resource_of(Some("a%20b")),
            "https://mcp.example/mcp/agents/a%20b"
        );
        let hostile = access.challenge(Some("x\", error=\"evil é"), None, "");
        assert!(
            hostile.ends_with("/mcp/agents/x%22,%20error=%22evil%20%C3%A9\""),
            "{hostile}"
        );
        assert_eq!(
            access.metadata_url(Some("research")),
            "https://mcp.example/.well-known/oauth-protected-resource/mcp/agents/research"
        );
    }
}
