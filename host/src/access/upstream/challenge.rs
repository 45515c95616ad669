//! An upstream's refusal of a request for want of authorization — HTTP 401 (no token, or one it
//! no longer takes) or 403 with `error="insufficient_scope"` — with its `WWW-Authenticate`
//! challenge; the [`Authorizer`] that answers refusals on one connection (the HTTP client under
//! an upstream session asks it for the token of each request, and for a new one when a request is
//! refused); and why it could not ([`AuthFailure`]), where a refusal by the host's own checks or
//! by the authorization server is told apart from a failure to reach one.

use futures_util::future::BoxFuture;

use super::Secret;

/// How an upstream refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// 401: authorization is needed (no token, or one it does not take).
    Unauthorized,
    /// 403: the token lacks a scope (`insufficient_scope`).
    Forbidden,
}

/// An upstream's refusal: its status and `WWW-Authenticate` challenge (empty when it sent none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// 401 or 403.
    pub status: Status,
    /// The `WWW-Authenticate` header's value.
    pub challenge: String,
}

impl Refusal {
    /// The challenge's `scope` parameter: the scopes the request needs, split.
    pub fn scopes(&self) -> Vec<String> {
        param(&self.challenge, "scope")
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Whether it says the token lacks a scope (`error="insufficient_scope"`).
    pub fn insufficient_scope(&self) -> bool {
        self.status == Status::Forbidden
            && param(&self.challenge, "error").as_deref() == Some("insufficient_scope")
    }
}

/// The value of auth-param `name` in a `WWW-Authenticate` value (quoted, with `\` escapes, or a
/// token), matched as a whole parameter name, case-insensitively.
pub fn param(challenge: &str, name: &str) -> Option<String> {
    let mut rest = challenge;
    while !rest.is_empty() {
        let at = rest.find('=')?;
        let key = rest[..at]
            .rsplit(|c: char| c == ',' || c.is_whitespace())
            .next()
            .unwrap_or_default();
        let after = &rest[at + 1..];
        let (value, used) = value(after);
        if key.eq_ignore_ascii_case(name) {
            return Some(value);
        }
        rest = &after[used..];
    }
    None
}

/// An auth-param value at the start of `text`: the value, and the bytes it took.
fn value(text: &str) -> (String, usize) {
    let trimmed = text.trim_start();
    let lead = text.len() - trimmed.len();
    let Some(quoted) = trimmed.strip_prefix('"') else {
        let end = trimmed
            .find(|c: char| c == ',' || c.is_whitespace())
            .unwrap_or(trimmed.len());
        return (trimmed[..end].to_owned(), lead + end);
    };
    let (mut out, mut escaped) = (String::new(), false);
    for (i, c) in quoted.char_indices() {
        match c {
            _ if escaped => {
                out.push(c);
                escaped = false;
            }
            '\\' => escaped = true,
            '"' => return (out, lead + i + 2),
            _ => out.push(c),
        }
    }
    (out, text.len())
}

/// Answers an upstream's refusals on one connection: the token each request carries, and a new
/// one (after a refresh, a re-registration or a new authorization, as it decides) when a request
/// is refused. Each refusal is answered once; the caller retries the request once with the token.
pub trait Authorizer: Send + Sync {
    /// The access token a request carries now; `None` sends it without one (the upstream's 401
    /// then starts the authorization).
    fn token(&self) -> BoxFuture<'_, Option<Secret>>;

    /// The upstream refused a request that carried `sent`: the token to retry it with.
    fn refused(
        &self,
        refusal: Refusal,
        sent: Option<Secret>,
    ) -> BoxFuture<'_, Result<Secret, AuthFailure>>;

    /// The header the token is sent in instead of `Authorization: Bearer` (`mode: api_key`).
    fn key_header(&self) -> Option<super::gateway::api_key::KeyHeader> {
        None
    }
}

/// Why an upstream's demand for authorization could not be met.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// Refused by the host's own checks or by the authorization server (or the user): the
    /// protected resource metadata names another resource, the authorization server's metadata
    /// names another issuer or offers no PKCE S256, an `iss` or `state` does not match, the
    /// authorization was denied, too many authorizations were needed. Not retried.
    #[error("authorization refused: {0}")]
    Refused(String),
    /// It could not be done: an authorization server or the metadata could not be reached or
    /// read, a token request failed, the user's browser could not be used.
    #[error("authorization failed: {0}")]
    Failed(String),
}

impl AuthFailure {
    /// Whether it is a refusal (see [`AuthFailure::Refused`]).
    pub fn is_refusal(&self) -> bool {
        matches!(self, AuthFailure::Refused(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenges_parameters_are_read_quoted_or_not_and_by_whole_name() {
        let c = r#"Bearer error="insufficient_scope", scope="mcp:basic mcp:write", resource_metadata="http://x/.well-known/oauth-protected-resource/mcp""#;
        assert_eq!(param(c, "scope").as_deref(), Some("mcp:basic mcp:write"));
        assert_eq!(param(c, "error").as_deref(), Some("insufficient_scope"));
        assert_eq!(
            param(c, "RESOURCE_METADATA").as_deref(),
            Some("http://x/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            param("Bearer scope=read:data", "scope").as_deref(),
            Some("read:data")
        );
        // `error_description` is not `error`, nor `scope` inside a quoted value a parameter.
        let tricky = r#"Bearer error_description="no scope=x here", error=invalid_token"#;
        assert_eq!(param(tricky, "error").as_deref(), Some("invalid_token"));
        assert_eq!(param(tricky, "scope"), None);
        assert_eq!(
            param(r#"Bearer realm="a\"b""#, "realm").as_deref(),
            Some("a\"b")
        );
        let refusal = Refusal {
            status: Status::Forbidden,
            challenge: c.into(),
        };
        assert!(refusal.insufficient_scope());
        assert_eq!(refusal.scopes(), ["mcp:basic", "mcp:write"]);
    }
}
