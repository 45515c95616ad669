//! Access: who a request comes from ([`auth`]: bearer JWTs and personal secrets) and which view of
//! the tools applies to it ([`agents`]). Transports resolve every request here before the protocol
//! sees it; identity never comes from anything else.

pub mod agents;
pub mod auth;

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
}

/// Why a request is refused before it reaches the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No or bad credentials: HTTP 401 with a challenge.
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
    Forbidden(String),
    /// The endpoint names an agent that does not exist: HTTP 404.
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
        let verified = match (bearer, &self.auth) {
            (Some(token), Some(auth)) => match auth.verify(token) {
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
        let caller = verified.map(|v| {
            let mut caller = mcp_plugin_sdk::UserInfo::new(v.user_id);
            caller.session_id = session_id.map(str::to_owned);
            caller.agent = agent.as_ref().map(|a| a.name.clone());
            caller
        });
        Ok(Identity { caller, agent })
    }

    /// The RFC 9728 protected-resource metadata document.
    pub fn metadata(&self) -> Value {
        serde_json::json!({
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcp-host",
        })
    }

    /// Where the metadata is served: `<origin>/.well-known/oauth-protected-resource<path>`.
    pub fn metadata_url(&self) -> String {
        let (origin, path) = match self.resource.split_once("://") {
            Some((scheme, rest)) => match rest.find('/') {
                Some(i) => (format!("{scheme}://{}", &rest[..i]), &rest[i..]),
                None => (self.resource.clone(), ""),
            },
            None => (String::new(), self.resource.as_str()),
        };
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// The `WWW-Authenticate` value for a 401.
    pub fn challenge(&self, error: Option<&str>, description: &str) -> String {
        let mut value = format!("Bearer resource_metadata=\"{}\"", self.metadata_url());
        if let Some(error) = error {
            let description = description.replace('"', "'");
            value.push_str(&format!(
                ", error=\"{error}\", error_description=\"{description}\""
            ));
        }
        value
    }
}
