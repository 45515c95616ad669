//! A secret string — an access or refresh token, a client secret, an authorization code, a PKCE
//! verifier — that never shows itself: `Debug` and `Display` print `[redacted]`, it is not
//! serialised, and its bytes are zeroed when it is dropped. The one way to its text is
//! [`Secret::expose`], named so that every use is deliberate and easy to find.

use zeroize::Zeroizing;

/// A secret string (see the module's documentation).
#[derive(Clone)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// `text` as a secret.
    pub fn new(text: impl Into<String>) -> Secret {
        Secret(Zeroizing::new(text.into()))
    }

    /// The secret's text, for the one request that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Secret {
        Secret::new(text)
    }
}

/// Compared in constant time.
impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        use subtle::ConstantTimeEq as _;
        self.0.as_bytes().ct_eq(other.0.as_bytes()).into()
    }
}

impl Eq for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_shows_its_text_but_to_expose() {
        let token = Secret::new("test-token-123");
        assert_eq!(format!("{token:?}"), "Secret([redacted])");
        assert_eq!(format!("{token}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(&token)), "Some(Secret([redacted]))");
        assert_eq!(token.expose(), "test-token-123");
        assert_eq!(token, Secret::from("test-token-123".to_owned()));
    }
}
