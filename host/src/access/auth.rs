//! Authentication of HTTP callers: bearer JWTs verified against configured keys, and personal MCP
//! secrets stored as SHA-256 hashes. Identity comes only from here — never from tool arguments.
//!
//! Nothing in this module logs or returns a token: errors name what was wrong, not what was sent.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header, jwk::JwkSet};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::AuthSettings;

/// The prefix of personal MCP secrets.
pub const SECRET_PREFIX: &str = "mcp_";

/// A verified caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The user id (a JWT's `sub`, or the secret's user).
    pub user_id: String,
    /// The agent the credential is bound to, if any.
    pub agent: Option<String>,
}

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
        let mut secrets = Vec::new();
        for (i, s) in settings.secrets.iter().enumerate() {
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
        Ok(Authenticator {
            hs256: jwt
                .hs256_secret
                .as_ref()
                .filter(|s| !s.is_empty())
                .map(|s| DecodingKey::from_secret(s.as_bytes())),
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

    /// Verify a bearer token.
    pub fn verify(&self, token: &str) -> Result<Verified, AuthError> {
        if token.starts_with(SECRET_PREFIX) {
            return self.verify_secret(token);
        }
        self.verify_jwt(token)
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
        })
    }

    fn verify_jwt(&self, token: &str) -> Result<Verified, AuthError> {
        let header = decode_header(token).map_err(|_| AuthError::Invalid)?;
        let keys: Vec<DecodingKey> = match header.alg {
            Algorithm::HS256 => self.hs256.iter().cloned().collect(),
            Algorithm::RS256 | Algorithm::ES256 => {
                let mut keys = self.public_keys.clone();
                if let Some(jwks) = &self.jwks {
                    let matching = jwks.keys.iter().filter(|k| {
                        header.kid.is_none() || k.common.key_id.as_deref() == header.kid.as_deref()
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
        let mut validation = Validation::new(header.alg);
        validation.set_audience(&[&self.audience]);
        validation.validate_nbf = true;
        validation.leeway = self.leeway;
        validation.set_required_spec_claims(&["exp", "sub", "aud"]);
        if let Some(iss) = &self.issuer {
            validation.set_issuer(&[iss]);
        }
        let mut last = AuthError::Invalid;
        for key in &keys {
            match decode::<Value>(token, key, &validation) {
                Ok(data) => {
                    let claims = data.claims;
                    let user_id = claims
                        .get("sub")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| AuthError::Rejected("no `sub` claim".into()))?
                        .to_owned();
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
                    return Ok(Verified { user_id, agent });
                }
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind;
                    last = match e.kind() {
                        ErrorKind::ExpiredSignature => return Err(AuthError::Expired),
                        ErrorKind::InvalidAudience => return Err(AuthError::WrongAudience),
                        ErrorKind::ImmatureSignature => {
                            return Err(AuthError::Rejected("not valid yet (nbf)".into()));
                        }
                        ErrorKind::InvalidIssuer => {
                            return Err(AuthError::Rejected("wrong issuer".into()));
                        }
                        ErrorKind::MissingRequiredClaim(c) => {
                            return Err(AuthError::Rejected(format!("missing claim {c}")));
                        }
                        ErrorKind::InvalidSignature => AuthError::Rejected("bad signature".into()),
                        _ => AuthError::Invalid,
                    };
                }
            }
        }
        Err(last)
    }
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

    fn auth(secret_hash: &str, expires: Option<&str>) -> Authenticator {
        let mut s = AuthSettings::default();
        s.jwt.hs256_secret = Some("test-secret".into());
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
            &EncodingKey::from_secret(b"test-secret"),
        )
        .unwrap()
    }

    #[test]
    fn hs256_tokens_are_checked_for_expiry_and_audience() {
        let a = auth(&hash_secret("mcp_x"), None);
        let exp = now() + 600;
        let ok = jwt(
            json!({"sub": "alice", "aud": "http://127.0.0.1/mcp", "exp": exp, "agent": "research"}),
        );
        assert_eq!(
            a.verify(&ok).unwrap(),
            Verified {
                user_id: "alice".into(),
                agent: Some("research".into())
            }
        );
        let expired =
            jwt(json!({"sub": "alice", "aud": "http://127.0.0.1/mcp", "exp": now() - 3600}));
        assert_eq!(a.verify(&expired), Err(AuthError::Expired));
        let other = jwt(json!({"sub": "alice", "aud": "https://elsewhere/mcp", "exp": exp}));
        assert_eq!(a.verify(&other), Err(AuthError::WrongAudience));
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
        assert!(a.verify(&tampered).is_err());
        assert_eq!(a.verify("garbage"), Err(AuthError::Invalid));
    }

    #[test]
    fn secrets_match_by_hash_and_expire() {
        let secret = new_secret().unwrap();
        let a = auth(&hash_secret(&secret), None);
        assert_eq!(a.verify(&secret).unwrap().user_id, "carol");
        assert_eq!(a.verify("mcp_wrong"), Err(AuthError::Invalid));
        let old = auth(&hash_secret(&secret), Some("2000-01-01T00:00:00Z"));
        assert_eq!(old.verify(&secret), Err(AuthError::Expired));
    }

    #[test]
    fn lifetimes_parse() {
        assert_eq!(parse_lifetime("30d"), Some(2_592_000));
        assert_eq!(parse_lifetime("2h"), Some(7200));
        assert_eq!(parse_lifetime("x"), None);
    }
}
