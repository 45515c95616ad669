//! The host's own identity toward upstream MCP servers: it is an OAuth 2.1 client of each HTTP
//! upstream that asks for authorization, as MCP's authorization spec (2025-11-25 and 2026-07-28)
//! says a client is — on rmcp's `auth` engine ([`engine`]), with what a gateway adds around it.
//! Who holds a credential is a [`Principal`]; what it is for, a [`Target`]. The credentials it
//! obtains for each user are kept in the [`vault`], sealed by [`sealing`].

pub mod challenge;
pub mod engine;
pub mod flow;
pub mod gateway;
pub mod grants;
pub mod http;
pub mod registration;
pub mod scopes;
pub mod sealing;
pub mod secret;
pub mod tokens;
pub mod vault;
pub mod vault_tokens;

pub use challenge::{AuthFailure, Authorizer, Refusal};
pub use secret::Secret;

/// Who an upstream credential belongs to: a verified caller's user id, or one of the host's
/// reserved identities (`@cli` for `mcp-host connect`, `@operator`, `@service`). Never an agent
/// name alone, never a session id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal(pub String);

impl Principal {
    /// The identity of `mcp-host connect`.
    pub fn cli() -> Principal {
        Principal("@cli".into())
    }

    /// The operator's own identity at an upstream (connected by an admin at `/oauth/connect?upstream=NAME&as=operator`): what an
    /// upstream with `server.auth.list_as: operator` is listed with.
    pub fn operator() -> Principal {
        Principal("@operator".into())
    }

    /// The host's own service identity (`client_credentials`): one token for every caller of an
    /// upstream with `server.auth.mode: client_credentials` (or `list_as: service`).
    pub fn service() -> Principal {
        Principal("@service".into())
    }

    /// Whether it is one of the host's reserved identities (`@…`), not a user's.
    pub fn is_reserved(&self) -> bool {
        self.0.starts_with('@')
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an upstream credential is for: an upstream (its name in the configuration) at its MCP
/// endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// The upstream's name.
    pub upstream: String,
    /// Its Streamable HTTP endpoint (the protected resource).
    pub url: String,
}
