//! The calling user's credential for a provider ([`CallContext::credential`]): an access token
//! the host obtained (and refreshes) for the user of the current call, so that a plugin calling a
//! user-scoped API (GitHub, Linear, ...) acts as that user. The plugin never sees a refresh token,
//! a client secret or another user's token; it asks per call and keeps nothing.
//!
//! A provider is declared in the plugin's manifest (`export_plugin!(permissions: { credentials:
//! ["github"] })`), shown by `mcp-host check` and `mcp-host add`; the host refuses any other.
//! What the provider is — which authorization server, which client — is the operator's
//! configuration (docs/operators/upstream-auth.md), never the plugin's.
//!
//! Over the ABI this is the call-context method `credential/get` with `{"provider": NAME}`: no
//! ABI type changed, and a host that predates it answers [`CredentialError::Unsupported`].

use serde::Deserialize;
use serde_json::Value;

/// The calling user's access token for one provider. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct Credential {
    access_token: String,
    #[serde(default = "bearer")]
    token_type: String,
    #[serde(default)]
    expires_at: Option<u64>,
    #[serde(default)]
    scopes: Vec<String>,
}

fn bearer() -> String {
    "Bearer".into()
}

impl Credential {
    /// A credential (for tests: see [`crate::testing::TestCall::with_credential`]).
    pub fn new(access_token: impl Into<String>) -> Credential {
        Credential {
            access_token: access_token.into(),
            token_type: bearer(),
            expires_at: None,
            scopes: Vec::new(),
        }
    }

    /// The access token. Send it to the provider's API only; never log or return it.
    pub fn access_token(&self) -> &str {
        &self.access_token
    }

    /// Its type (`Bearer`).
    pub fn token_type(&self) -> &str {
        &self.token_type
    }

    /// The value of an `Authorization` header that presents it: `Bearer <token>`.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.access_token)
    }

    /// When it expires (Unix seconds), when known. Ask again for each call rather than keeping
    /// it: the host refreshes it.
    pub fn expires_at(&self) -> Option<u64> {
        self.expires_at
    }

    /// The scopes it was granted, when known.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("access_token", &"[redacted]")
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// Why no credential was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialError {
    /// The plugin's manifest does not declare this provider (`permissions: { credentials: [...] }`).
    NotDeclared(String),
    /// The user has no credential there yet (or the host cannot obtain one now): the text says
    /// what the user does (e.g. connect their account through a link). Return it to the user.
    Unavailable(String),
    /// The call has no verified user: a credential is always a user's.
    NoUser,
    /// This host does not give credentials to plugins (it predates them).
    Unsupported,
    /// Something else failed (the text says what).
    Failed(String),
}

impl std::fmt::Display for CredentialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialError::NotDeclared(p) => write!(
                f,
                "the plugin does not declare credential provider {p:?} (export_plugin!(permissions: \
                 {{ credentials: [...] }}))"
            ),
            CredentialError::Unavailable(why) => f.write_str(why),
            CredentialError::NoUser => f.write_str("this call has no signed-in user"),
            CredentialError::Unsupported => {
                f.write_str("this host does not give plugins users' credentials")
            }
            CredentialError::Failed(why) => write!(f, "no credential: {why}"),
        }
    }
}

impl std::error::Error for CredentialError {}

impl From<CredentialError> for String {
    fn from(e: CredentialError) -> String {
        e.to_string()
    }
}

/// The prefixes of the host's error texts for `credential/get` (the protocol between host and
/// SDK; the rest of the text is for people).
pub mod wire {
    /// The provider is not declared.
    pub const NOT_DECLARED: &str = "credential not declared: ";
    /// No credential now (the text says what to do).
    pub const UNAVAILABLE: &str = "credential unavailable: ";
    /// No verified user.
    pub const NO_USER: &str = "credential without a user";
    /// The method's name.
    pub const METHOD: &str = "credential/get";
}

/// The error the host's answer text means.
pub(crate) fn decode_error(text: &str) -> CredentialError {
    if let Some(p) = text.strip_prefix(wire::NOT_DECLARED) {
        CredentialError::NotDeclared(p.to_owned())
    } else if let Some(why) = text.strip_prefix(wire::UNAVAILABLE) {
        CredentialError::Unavailable(why.to_owned())
    } else if text.starts_with(wire::NO_USER) {
        CredentialError::NoUser
    } else if text.starts_with("unsupported call-context method") {
        CredentialError::Unsupported
    } else {
        CredentialError::Failed(text.to_owned())
    }
}

/// The credential in the host's answer.
pub(crate) fn decode(answer: &str) -> Result<Credential, CredentialError> {
    let value: Value = serde_json::from_str(answer)
        .map_err(|e| CredentialError::Failed(format!("host returned unreadable JSON: {e}")))?;
    serde_json::from_value(value)
        .map_err(|e| CredentialError::Failed(format!("host returned no credential: {e}")))
}
