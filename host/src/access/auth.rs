//! Authentication of HTTP callers: bearer JWTs verified against configured keys, and personal MCP
//! secrets stored as SHA-256 hashes. Identity comes only from here — never from tool arguments.
//!
//! Nothing in this module logs or returns a token: errors name what was wrong, not what was sent.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header, jwk::JwkSet};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::AuthSettings;

/// The prefix of personal MCP secrets.
pub const SECRET_PREFIX: &str = "mcp_";
/// The shortest HS256 secret accepted, in bytes (RFC 7518 §3.2: a key as long as the hash).
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// Whether a user id is usable as given: not empty, and without leading or trailing whitespace
/// (which would make `"demo "` a different caller that some code might read as `demo`).
pub fn valid_user_id(id: &str) -> bool {
    !id.is_empty() && id.trim() == id
}

/// A verified caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The user id (a JWT's `sub`, or the secret's user).
    pub user_id: String,
    /// The agent the credential is bound to, if any.
    pub agent: Option<String>,
    /// A JWT's claims, as verified (none for a personal secret): what call policy rules read as
    /// `caller.claims`. Never handed to plugins.
    pub claims: Option<Arc<Claims>>,
}

/// A verified JWT's claims.
pub type Claims = serde_json::Map<String, Value>;

/// Why a bearer token was refused (never includes the token).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Not a JWT this server can verify, nor a known secret.
    #[error("the token is not valid")]
    Invalid,
    /// Signature, issuer or claims do not check out.
    #[error("the token is not valid: {0}")]
    Rejected(String),
    /// Past its expiry.
    #[error("the token has expired")]
    Expired,
    /// Issued for another resource.
    #[error("the token was issued for another audience")]
    WrongAudience,
}

impl AuthError {
    /// Why, in one word (`invalid`, `rejected`, `expired`, `wrong_audience`).
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::Invalid => "invalid",
            AuthError::Rejected(_) => "rejected",
            AuthError::Expired => "expired",
            AuthError::WrongAudience => "wrong_audience",
        }
    }
}

/// The authentication setup could not be built from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    /// A key file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A key is not usable.
    #[error("{what}: {reason}")]
    Key {
        /// Which key.
        what: String,
        /// Why.
        reason: String,
    },
}

struct Secret {
    hash: [u8; 32],
    user: String,
    agent: Option<String>,
    expires: Option<u64>,
}

/// Verifies bearer tokens.
pub struct Authenticator {
    hs256: Option<DecodingKey>,
    public_keys: Vec<DecodingKey>,
    jwks: Option<JwkSet>,
    issuer: Option<String>,
    audience: String,
    agent_claim: String,
    leeway: u64,
    secrets: Vec<Secret>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("audience", &self.audience)
            .field("public_keys", &self.public_keys.len())
            .field("secrets", &self.secrets.len())
            .finish_non_exhaustive()
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Parse an RFC 3339 timestamp into Unix seconds.
pub fn parse_time(s: &str) -> Option<u64> {
    let ts: jiff::Timestamp = s.parse().ok()?;
    u64::try_from(ts.as_second()).ok()
}

/// The hex SHA-256 of a secret, as the configuration stores it.
pub fn hash_secret(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    let s = s.trim().trim_start_matches("sha256:");
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in s.as_bytes().chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(chunk).ok()?, 16).ok()?;
    }
    Some(out)
}

/// The HS256 key, when a secret is configured; a secret shorter than [`MIN_HS256_SECRET_BYTES`]
/// is refused.
fn hs256_key(secret: Option<&str>) -> Result<Option<DecodingKey>, AuthSetupError> {
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    if secret.len() < MIN_HS256_SECRET_BYTES {
        return Err(AuthSetupError::Key {
            what: "auth.jwt.hs256_secret".into(),
            reason: format!(
                "{} bytes is too short to resist guessing; use at least {MIN_HS256_SECRET_BYTES} \
                 random bytes (e.g. `openssl rand -base64 32`)",
                secret.len()
            ),
        });
    }
    Ok(Some(DecodingKey::from_secret(secret.as_bytes())))
}

/// The personal secrets of the configuration, checked: a hash of 64 hex digits, a user id without
/// surrounding whitespace, an RFC 3339 expiry.
fn read_secrets(entries: &[crate::config::SecretEntry]) -> Result<Vec<Secret>, AuthSetupError> {
    let mut secrets = Vec::new();
    for (i, s) in entries.iter().enumerate() {
        if !valid_user_id(&s.user) {
            return Err(AuthSetupError::Key {
                what: format!("auth.secrets[{i}].user"),
                reason: format!(
                    "{:?} is empty or has leading or trailing whitespace",
                    s.user
                ),
            });
        }
        let hash = unhex(&s.sha256).ok_or_else(|| AuthSetupError::Key {
            what: format!("auth.secrets[{i}]"),
            reason: "sha256 must be 64 hex digits".into(),
        })?;
        let expires = match &s.expires {
            Some(t) => Some(parse_time(t).ok_or_else(|| AuthSetupError::Key {
                what: format!("auth.secrets[{i}].expires"),
                reason: format!("{t:?} is not an RFC 3339 time"),
            })?),
            None => None,
        };
        secrets.push(Secret {
            hash,
            user: s.user.clone(),
            agent: s.agent.clone(),
            expires,
        });
    }
    Ok(secrets)
}

impl Authenticator {
    /// Build from the `auth` settings; `audience` is this server's resource URI; key paths resolve
    /// against `base_dir`.
    pub fn new(
        settings: &AuthSettings,
        audience: String,
        base_dir: &Path,
    ) -> Result<Authenticator, AuthSetupError> {
        let jwt = &settings.jwt;
        let read = |p: &Path| {
            let path = base_dir.join(p);
            std::fs::read(&path).map_err(|source| AuthSetupError::Read {
                path: path.display().to_string(),
                source,
            })
        };
        let mut public_keys = Vec::new();
        for p in &jwt.public_keys {
            let pem = read(p)?;
            let key = DecodingKey::from_rsa_pem(&pem)
                .or_else(|_| DecodingKey::from_ec_pem(&pem))
                .map_err(|e| AuthSetupError::Key {
                    what: p.display().to_string(),
                    reason: format!("not an RSA or EC public key in PEM form ({e})"),
                })?;
            public_keys.push(key);
        }
        let jwks = match &jwt.jwks_file {
            Some(p) => Some(serde_json::from_slice::<JwkSet>(&read(p)?).map_err(|e| {
                AuthSetupError::Key {
                    what: p.display().to_string(),
                    reason: format!("not a JWKS document ({e})"),
                }
            })?),
            None => None,
        };
        let hs256 = hs256_key(jwt.hs256_secret.as_deref())?;
        let secrets = read_secrets(&settings.secrets)?;
        Ok(Authenticator {
            hs256,
            public_keys,
            jwks,
            issuer: jwt.issuer.clone(),
            audience,
            agent_claim: jwt.agent_claim.clone(),
            leeway: jwt.leeway_secs,
            secrets,
        })
    }

    /// This server's resource URI (the JWT audience).
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// Verify a bearer token. A JWT's audience must be this server's resource URI, or
    /// `also_audience` when given (an agent endpoint's own resource URI).
    pub fn verify(&self, token: &str, also_audience: Option<&str>) -> Result<Verified, AuthError> {
        if token.starts_with(SECRET_PREFIX) {
            return self.verify_secret(token);
        }
        self.verify_jwt(token, also_audience)
    }

    fn verify_secret(&self, token: &str) -> Result<Verified, AuthError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Compare against every entry in constant time, so timing reveals nothing about which matched.
        let mut found: Option<&Secret> = None;
        for s in &self.secrets {
            if bool::from(s.hash.ct_eq(&digest)) && found.is_none() {
                found = Some(s);
            }
        }
        let s = found.ok_or(AuthError::Invalid)?;
        if s.expires.is_some_and(|e| now() >= e) {
            return Err(AuthError::Expired);
        }
        Ok(Verified {
            user_id: s.user.clone(),
            agent: s.agent.clone(),
            claims: None,
        })
    }

    /// What a JWT signed with `alg` must satisfy: its signature, `exp`/`nbf` within the leeway, the
    /// audience (this server's, or `also_audience`), and the issuer when one is configured (then
    /// `iss` is required, not waved through when absent).
    fn validation(&self, alg: Algorithm, also_audience: Option<&str>) -> Validation {
        let mut validation = Validation::new(alg);
        match also_audience {
            Some(other) => validation.set_audience(&[self.audience.as_str(), other]),
            None => validation.set_audience(&[&self.audience]),
        }
        validation.validate_nbf = true;
        validation.leeway = self.leeway;
        if let Some(iss) = &self.issuer {
            validation.set_required_spec_claims(&["exp", "sub", "aud", "iss"]);
            validation.set_issuer(&[iss]);
        } else {
            validation.set_required_spec_claims(&["exp", "sub", "aud"]);
        }
        validation
    }

    /// Verify a JWT: the keys for its algorithm, then each key in turn until one verifies it
    /// (signature, time, issuer, audience), then the caller its claims name.
    fn verify_jwt(&self, token: &str, also_audience: Option<&str>) -> Result<Verified, AuthError> {
        let header = decode_header(token).map_err(|_| AuthError::Invalid)?;
        let keys = self.keys_for(&header)?;
        let validation = self.validation(header.alg, also_audience);
        let mut last = AuthError::Invalid;
        for key in &keys {
            match decode::<Value>(token, key, &validation) {
                Ok(data) => return self.verified(&data.claims),
                Err(e) => last = decode_error(&e)?,
            }
        }
        Err(last)
    }

    /// The keys that may have signed a token with `header`: the shared secrets for HS256, the
    /// public keys and matching JWKS keys for RS256 and ES256; no other algorithm.
    fn keys_for(&self, header: &jsonwebtoken::Header) -> Result<Vec<DecodingKey>, AuthError> {
        let keys: Vec<DecodingKey> = match header.alg {
            Algorithm::HS256 => self.hs256.iter().cloned().collect(),
            Algorithm::RS256 | Algorithm::ES256 => {
                let mut keys = self.public_keys.clone();
                if let Some(jwks) = &self.jwks {
                    let matching = jwks.keys.iter().filter(|k| {
                        (header.kid.is_none()
                            || k.common.key_id.as_deref() == header.kid.as_deref())
                            && jwk_signs_with(k, header.alg)
                    });
                    keys.extend(matching.filter_map(|k| DecodingKey::from_jwk(k).ok()));
                }
                keys
            }
            _ => {
                return Err(AuthError::Rejected(format!(
                    "algorithm {:?} is not accepted",
                    header.alg
                )));
            }
        };
        if keys.is_empty() {
            return Err(AuthError::Rejected(format!(
                "no {:?} key is configured",
                header.alg
            )));
        }
        Ok(keys)
    }

    /// The caller a verified token's claims name: its `sub`, and its agent binding if any.
    fn verified(&self, claims: &Value) -> Result<Verified, AuthError> {
        let user_id = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| AuthError::Rejected("no `sub` claim".into()))?
            .to_owned();
        if !valid_user_id(&user_id) {
            return Err(AuthError::Rejected(
                "the `sub` claim has leading or trailing whitespace".into(),
            ));
        }
        let agent = match claims.get(&self.agent_claim) {
            None | Some(Value::Null) => None,
            Some(Value::String(a)) => Some(a.clone()),
            // A binding we cannot read must not silently become "unbound".
            Some(_) => {
                return Err(AuthError::Rejected(format!(
                    "the `{}` claim must be a string",
                    self.agent_claim
                )));
            }
        };
        let claims = claims.as_object().cloned().map(Arc::new);
        Ok(Verified {
            user_id,
            agent,
            claims,
        })
    }
}

/// What a failed verification with one key means: `Err` ends the verification (the token itself
/// is refused: expired, wrong audience, not yet valid, wrong issuer, a claim missing); `Ok` is the
/// error to give if no other key verifies it.
fn decode_error(e: &jsonwebtoken::errors::Error) -> Result<AuthError, AuthError> {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => Err(AuthError::Expired),
        ErrorKind::InvalidAudience => Err(AuthError::WrongAudience),
        ErrorKind::ImmatureSignature => Err(AuthError::Rejected("not valid yet (nbf)".into())),
        ErrorKind::InvalidIssuer => Err(AuthError::Rejected("wrong issuer".into())),
        ErrorKind::MissingRequiredClaim(c) => {
            Err(AuthError::Rejected(format!("missing claim {c}")))
        }
        ErrorKind::InvalidSignature => Ok(AuthError::Rejected("bad signature".into())),
        _ => Ok(AuthError::Invalid),
    }
}

/// Whether a JWKS key may verify a signature made with `alg`: its `use` (when given) is `sig`, and
/// its `alg` (when given) is the token's (RFC 7517 §4.2, §4.4).
fn jwk_signs_with(key: &jsonwebtoken::jwk::Jwk, alg: Algorithm) -> bool {
    use jsonwebtoken::jwk::{KeyAlgorithm, PublicKeyUse};
    let usable = key
        .common
        .public_key_use
        .as_ref()
        .is_none_or(|u| *u == PublicKeyUse::Signature);
    let same_alg = match key.common.key_algorithm {
        None => true,
        Some(KeyAlgorithm::RS256) => alg == Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => alg == Algorithm::ES256,
        Some(_) => false,
    };
    usable && same_alg
}

/// A fresh personal MCP secret (`mcp_` + 256 random bits, base64url).
pub fn new_secret() -> Result<String, getrandom::Error> {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!(
        "{SECRET_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

/// Parse a lifetime like `30d`, `12h`, `90m`, `3600s` or `2w` into seconds.
pub fn parse_lifetime(s: &str) -> Option<u64> {
    let s = s.trim();
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return None,
    };
    n.checked_mul(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AuthSettings, SecretEntry};
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const TEST_SECRET: &str = "unit-test-hs256-secret-of-40-bytes-xxxxx";

    fn auth(secret_hash: &str, expires: Option<&str>) -> Authenticator {
        let mut s = AuthSettings::default();
        s.jwt.hs256_secret = Some(TEST_SECRET.into());
        s.secrets.push(SecretEntry {
            sha256: secret_hash.into(),
            user: "carol".into(),
            agent: Some("research".into()),
            expires: expires.map(str::to_owned),
        });
        Authenticator::new(&s, "http://127.0.0.1/mcp".into(), Path::new(".")).unwrap()
    }

    fn jwt(claims: Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(TEST_SECRET.as_bytes()),
        )
        .unwrap()
    }

    #[test]
    fn hs256_tokens_are_checked_for_expiry_and_audience() {
        let a = auth(&hash_secret("mcp_x"), None);
        let exp = now() + 600;
        let claims =
            json!({"sub": "alice", "aud": "http://127.0.0.1/mcp", "exp": exp, "agent": "research"});
        let ok = jwt(claims.clone());
        assert_eq!(
            a.verify(&ok, None).unwrap(),
            Verified {
                user_id: "alice".into(),
                agent: Some("research".into()),
                claims: claims.as_object().cloned().map(Arc::new),
            }
        );
        let expired =
            jwt(json!({"sub": "alice", "aud": "http://127.0.0.1/mcp", "exp": now() - 3600}));
        assert_eq!(a.verify(&expired, None), Err(AuthError::Expired));
        let other = jwt(json!({"sub": "alice", "aud": "https://elsewhere/mcp", "exp": exp}));
        assert_eq!(a.verify(&other, None), Err(AuthError::WrongAudience));
        // Forge the payload (another `sub`) and keep the original signature.
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let parts: Vec<&str> = ok.split('.').collect();
        let forged = json!({"sub": "mallory", "aud": "http://127.0.0.1/mcp", "exp": exp});
        let tampered = format!(
            "{}.{}.{}",
            parts[0],
            b64.encode(forged.to_string()),
            parts[2]
        );
        assert!(a.verify(&tampered, None).is_err());
        assert_eq!(a.verify("garbage", None), Err(AuthError::Invalid));
    }

    #[test]
    fn secrets_match_by_hash_and_expire() {
        let secret = new_secret().unwrap();
        let a = auth(&hash_secret(&secret), None);
        assert_eq!(a.verify(&secret, None).unwrap().user_id, "carol");
        assert_eq!(a.verify("mcp_wrong", None), Err(AuthError::Invalid));
        let old = auth(&hash_secret(&secret), Some("2000-01-01T00:00:00Z"));
        assert_eq!(old.verify(&secret, None), Err(AuthError::Expired));
    }

    #[test]
    fn a_configured_issuer_is_required_and_whitespace_in_sub_is_refused() {
        let mut s = AuthSettings::default();
        s.jwt.hs256_secret = Some(TEST_SECRET.into());
        s.jwt.issuer = Some("https://issuer.example".into());
        let a = Authenticator::new(&s, "http://127.0.0.1/mcp".into(), Path::new(".")).unwrap();
        let base = json!({"sub": "alice", "aud": "http://127.0.0.1/mcp", "exp": now() + 600});
        assert!(
            matches!(a.verify(&jwt(base.clone()), None), Err(AuthError::Rejected(m)) if m.contains("iss"))
        );
        let mut with_iss = base.clone();
        with_iss["iss"] = json!("https://issuer.example");
        assert_eq!(
            a.verify(&jwt(with_iss.clone()), None).unwrap().user_id,
            "alice"
        );
        with_iss["sub"] = json!("alice ");
        assert!(a.verify(&jwt(with_iss), None).is_err());
        // A second accepted audience (an agent endpoint's own resource).
        let mut for_agent = base;
        for_agent["iss"] = json!("https://issuer.example");
        for_agent["aud"] = json!("http://127.0.0.1/mcp/agents/r");
        assert_eq!(
            a.verify(&jwt(for_agent.clone()), None),
            Err(AuthError::WrongAudience)
        );
        assert!(
            a.verify(&jwt(for_agent), Some("http://127.0.0.1/mcp/agents/r"))
                .is_ok()
        );
    }

    #[test]
    fn short_hs256_secrets_and_untrimmed_secret_users_are_refused_at_start() {
        let mut s = AuthSettings::default();
        s.jwt.hs256_secret = Some("short".into());
        let err = Authenticator::new(&s, "x".into(), Path::new(".")).unwrap_err();
        assert!(err.to_string().contains("at least 32"), "{err}");
        let mut s = AuthSettings::default();
        s.secrets.push(SecretEntry {
            sha256: hash_secret("mcp_x"),
            user: " demo".into(),
            agent: None,
            expires: None,
        });
        assert!(Authenticator::new(&s, "x".into(), Path::new(".")).is_err());
    }

    #[test]
    fn jwks_keys_are_used_only_for_their_use_and_algorithm() {
        use jsonwebtoken::jwk::{Jwk, KeyAlgorithm, PublicKeyUse};
        let mut key: Jwk = serde_json::from_value(json!({
            "kty": "RSA", "n": "AQAB", "e": "AQAB"
        }))
        .unwrap();
        assert!(jwk_signs_with(&key, Algorithm::RS256));
        key.common.public_key_use = Some(PublicKeyUse::Encryption);
        assert!(!jwk_signs_with(&key, Algorithm::RS256));
        key.common.public_key_use = Some(PublicKeyUse::Signature);
        key.common.key_algorithm = Some(KeyAlgorithm::ES256);
        assert!(!jwk_signs_with(&key, Algorithm::RS256));
        assert!(jwk_signs_with(&key, Algorithm::ES256));
        key.common.key_algorithm = Some(KeyAlgorithm::RSA_OAEP);
        assert!(!jwk_signs_with(&key, Algorithm::RS256));
    }

    #[test]
    fn lifetimes_parse() {
        assert_eq!(parse_lifetime("30d"), Some(2_592_000));
        assert_eq!(parse_lifetime("2h"), Some(7200));
        assert_eq!(parse_lifetime("x"), None);
    }
}
