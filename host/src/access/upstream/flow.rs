//! One authorization round trip: the pending authorizations ([`Flows`]: the PKCE verifier, the
//! expected issuer and scopes of each, by its `state` — single use, bounded in number and age),
//! the [`UserAgent`] that takes the user to the authorization URL and brings the redirect back
//! ([`Callback`]), and the checks of what comes back before anything of it is used: the `state`
//! is the one sent, and the RFC 9207 `iss` ([`check_iss`]) is the issuer's — by simple string
//! comparison — before an `error` the authorization server returned is believed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use rmcp::transport::auth::{AuthError, StateStore, StoredAuthorizationState};

use super::{AuthFailure, Secret};

/// How long an authorization may wait for its callback.
pub const FLOW_TTL: Duration = Duration::from_secs(600);
/// The most authorizations pending at once.
pub const MAX_FLOWS: usize = 16;

/// What the authorization server's redirect brought back (the callback's query).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Callback {
    /// The authorization code.
    pub code: Option<Secret>,
    /// The `state` (the flow it answers).
    pub state: Option<String>,
    /// The RFC 9207 issuer.
    pub iss: Option<String>,
    /// The error code, when the authorization was not granted.
    pub error: Option<String>,
    /// Its description.
    pub error_description: Option<String>,
}

impl Callback {
    /// The callback in a redirect's query string (`code=…&state=…&iss=…`), each value cut to a
    /// bounded length.
    pub fn from_query(query: &str) -> Callback {
        let mut callback = Callback::default();
        for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
            let value: String = value.chars().take(4096).collect();
            match key.as_ref() {
                "code" => callback.code = Some(Secret::new(value)),
                "state" => callback.state = Some(value),
                "iss" => callback.iss = Some(value),
                "error" => callback.error = Some(value),
                "error_description" => callback.error_description = Some(value),
                _ => {}
            }
        }
        callback
    }
}

/// What takes the user to an authorization URL and brings its redirect back.
pub trait UserAgent: Send + Sync {
    /// The redirect URI the authorization server sends the user back to.
    fn redirect_uri(&self) -> String;

    /// Take the user to `url` and wait for the callback of the authorization whose `state` it
    /// carries.
    fn authorize<'a>(
        &'a self,
        url: &'a str,
        state: &'a str,
    ) -> BoxFuture<'a, Result<Callback, AuthFailure>>;
}

/// Why an authorization response's `iss` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssError {
    /// The authorization server says it sends `iss`, and did not.
    #[error("the authorization server advertises the iss parameter but its response has none")]
    Missing,
    /// An `iss` came, and there is no issuer to compare it with.
    #[error(
        "the authorization response names issuer {0} but the authorization server's metadata names none"
    )]
    Unverifiable(String),
    /// Another issuer than the one the authorization was sent to.
    #[error("the authorization response names issuer {received}, not {expected}")]
    Mismatch {
        /// The metadata's issuer.
        expected: String,
        /// The response's.
        received: String,
    },
}

/// RFC 9207 and MCP 2026-07-28: whether an authorization response's `iss` (`received`) may be
/// used, for an authorization sent to the server of issuer `expected` that does (`advertised`)
/// or does not say it sends one. Advertised and present: compared; advertised and absent:
/// refused; not advertised and present: compared; neither: accepted. Simple string comparison:
/// no normalisation, not even of a trailing slash.
pub fn check_iss(
    expected: Option<&str>,
    advertised: bool,
    received: Option<&str>,
) -> Result<(), IssError> {
    match (expected, received) {
        (_, None) if advertised => Err(IssError::Missing),
        (_, None) => Ok(()),
        (None, Some(received)) => Err(IssError::Unverifiable(received.to_owned())),
        (Some(expected), Some(received)) if expected == received => Ok(()),
        (Some(expected), Some(received)) => Err(IssError::Mismatch {
            expected: expected.to_owned(),
            received: received.to_owned(),
        }),
    }
}

/// The pending authorizations, by `state` (rmcp's state store).
#[derive(Clone, Default)]
pub struct Flows {
    pending: Arc<Mutex<HashMap<String, (Instant, StoredAuthorizationState)>>>,
}

impl Flows {
    /// The pending authorizations, whatever a panic elsewhere left.
    fn pending(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, StoredAuthorizationState)>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many are pending (expired ones are dropped first).
    pub fn len(&self) -> usize {
        let mut pending = self.pending();
        pending.retain(|_, (at, _)| at.elapsed() < FLOW_TTL);
        pending.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl StateStore for Flows {
    async fn save(
        &self,
        csrf_token: &str,
        state: StoredAuthorizationState,
    ) -> Result<(), AuthError> {
        let mut pending = self.pending();
        pending.retain(|_, (at, _)| at.elapsed() < FLOW_TTL);
        if pending.len() >= MAX_FLOWS {
            return Err(AuthError::AuthorizationFailed(format!(
                "more than {MAX_FLOWS} authorizations are pending"
            )));
        }
        pending.insert(csrf_token.to_owned(), (Instant::now(), state));
        Ok(())
    }

    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        Ok(self
            .pending()
            .get(csrf_token)
            .filter(|(at, _)| at.elapsed() < FLOW_TTL)
            .map(|(_, state)| state.clone()))
    }

    async fn delete(&self, csrf_token: &str) -> Result<(), AuthError> {
        self.pending().remove(csrf_token);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_iss_of_an_authorization_response_is_checked_as_rfc_9207_says() {
        let issuer = Some("http://localhost:4000");
        // Advertised and present: compared exactly.
        assert_eq!(
            check_iss(issuer, true, Some("http://localhost:4000")),
            Ok(())
        );
        assert!(matches!(
            check_iss(issuer, true, Some("https://evil.example.com")),
            Err(IssError::Mismatch { .. })
        ));
        // A trailing slash is another issuer (no normalisation).
        assert!(matches!(
            check_iss(issuer, true, Some("http://localhost:4000/")),
            Err(IssError::Mismatch { .. })
        ));
        // Advertised and absent: refused.
        assert_eq!(check_iss(issuer, true, None), Err(IssError::Missing));
        // Not advertised and present: compared anyway.
        assert_eq!(
            check_iss(issuer, false, Some("http://localhost:4000")),
            Ok(())
        );
        assert!(check_iss(issuer, false, Some("http://other")).is_err());
        // Neither: accepted.
        assert_eq!(check_iss(issuer, false, None), Ok(()));
        // Nothing to compare with.
        assert!(matches!(
            check_iss(None, false, Some("http://x")),
            Err(IssError::Unverifiable(_))
        ));
    }

    #[test]
    fn a_callback_is_read_from_its_query_and_its_code_never_shown() {
        let callback =
            Callback::from_query("code=test-auth-code&state=abc&iss=http%3A%2F%2Flocalhost%3A1");
        assert_eq!(
            callback.code.as_ref().map(Secret::expose),
            Some("test-auth-code")
        );
        assert_eq!(callback.state.as_deref(), Some("abc"));
        assert_eq!(callback.iss.as_deref(), Some("http://localhost:1"));
        assert!(!format!("{callback:?}").contains("test-auth-code"));
        let denied = Callback::from_query("error=access_denied&state=abc");
        assert_eq!(denied.error.as_deref(), Some("access_denied"));
    }

    #[tokio::test]
    async fn a_flow_is_kept_until_used_and_their_number_is_bounded() {
        let flows = Flows::default();
        let state: StoredAuthorizationState = serde_json::from_value(
            serde_json::json!({"pkce_verifier": "v", "csrf_token": "s", "created_at": 0}),
        )
        .unwrap();
        for n in 0..MAX_FLOWS {
            flows.save(&format!("s{n}"), state.clone()).await.unwrap();
        }
        assert!(flows.save("one-more", state.clone()).await.is_err());
        assert!(flows.load("s0").await.unwrap().is_some());
        flows.delete("s0").await.unwrap();
        assert!(flows.load("s0").await.unwrap().is_none());
        assert_eq!(flows.len(), MAX_FLOWS - 1);
    }
}
