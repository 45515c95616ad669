//! Sealed request state: a JSON payload the server hands a 2026 client to echo back on its next
//! request (`requestState`), integrity-protected so that the client (or anyone) cannot change it,
//! with an expiry, and readable by every replica that shares the key.
//!
//! Format: `v1.<base64url(payload JSON)>.<base64url(HMAC-SHA256(key, "v1." + payload part))>`.
//! The payload carries `exp` (Unix seconds); everything else in it is the caller's (the
//! input-required flow binds the request and the caller and carries earlier answers; other flows
//! may carry their own fields). Several keys may be configured: the first seals, any opens, so a key
//! can be rotated without failing requests in flight.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const VERSION: &str = "v1.";

/// Why a state string is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not of the form this server produces.
    #[error("requestState is malformed")]
    Malformed,
    /// The signature does not match under any key: changed, or sealed elsewhere.
    #[error("requestState integrity check failed")]
    Tampered,
    /// Its time is over.
    #[error("requestState expired")]
    Expired,
}

/// Seals and opens state with the configured keys.
#[derive(Clone)]
pub struct Sealer {
    keys: Vec<Vec<u8>>,
    ttl: Duration,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("keys", &self.keys.len())
            .field("ttl", &self.ttl)
            .finish()
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn mac(key: &[u8], signed: &str) -> Hmac<Sha256> {
    // HMAC accepts keys of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(signed.as_bytes());
    mac
}

impl Sealer {
    /// A sealer with `keys` (the first seals; none is an error of the caller) and a lifetime.
    pub fn new(keys: Vec<Vec<u8>>, ttl: Duration) -> Self {
        Sealer { keys, ttl }
    }

    /// Seal `payload` (an object) with an expiry `ttl` from now.
    ///
    /// ```
    /// use mcp_host::protocol::request_state::{Sealer, StateError};
    /// use std::time::Duration;
    /// let s = Sealer::new(vec![b"k1".to_vec()], Duration::from_secs(60));
    /// let token = s.seal(serde_json::json!({"answers": {"a": 1}}));
    /// assert_eq!(s.open(&token).unwrap()["answers"]["a"], 1);
    /// assert_eq!(s.open(&format!("{token}-TAMPERED")), Err(StateError::Tampered));
    /// let rotated = Sealer::new(vec![b"k2".to_vec(), b"k1".to_vec()], Duration::from_secs(60));
    /// assert!(rotated.open(&token).is_ok());
    /// ```
    pub fn seal(&self, mut payload: Value) -> String {
        payload["exp"] = json!(now() + self.ttl.as_secs());
        let body = format!("{VERSION}{}", B64.encode(payload.to_string()));
        let key = self.keys.first().map_or(&[][..], Vec::as_slice);
        let tag = B64.encode(mac(key, &body).finalize().into_bytes());
        format!("{body}.{tag}")
    }

    /// Open a sealed state: its payload, if the signature matches one key and it has not expired.
    pub fn open(&self, token: &str) -> Result<Value, StateError> {
        let (body, tag) = token.rsplit_once('.').ok_or(StateError::Malformed)?;
        let encoded = body.strip_prefix(VERSION).ok_or(StateError::Malformed)?;
        let tag = B64.decode(tag).map_err(|_| StateError::Tampered)?;
        // Constant-time comparison (`verify_slice`), under each key in turn.
        if !self
            .keys
            .iter()
            .any(|key| mac(key, body).verify_slice(&tag).is_ok())
        {
            return Err(StateError::Tampered);
        }
        let payload: Value = B64
            .decode(encoded)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .filter(Value::is_object)
            .ok_or(StateError::Malformed)?;
        match payload.get("exp").and_then(Value::as_u64) {
            Some(exp) if exp > now() => Ok(payload),
            _ => Err(StateError::Expired),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_foreign_and_malformed_states_are_refused() {
        let expired = Sealer::new(vec![b"k".to_vec()], Duration::ZERO);
        let token = expired.seal(json!({}));
        assert_eq!(expired.open(&token), Err(StateError::Expired));
        let other = Sealer::new(vec![b"other".to_vec()], Duration::from_secs(60));
        let live = Sealer::new(vec![b"k".to_vec()], Duration::from_secs(60));
        assert_eq!(other.open(&live.seal(json!({}))), Err(StateError::Tampered));
        assert_eq!(live.open("nonsense"), Err(StateError::Malformed));
        assert_eq!(live.open(""), Err(StateError::Malformed));
        // A payload changed under a kept signature.
        let token = live.seal(json!({"n": 1}));
        let (_, tag) = token.rsplit_once('.').unwrap();
        let forged = format!("v1.{}.{tag}", B64.encode(r#"{"n":2,"exp":99999999999}"#));
        assert_eq!(live.open(&forged), Err(StateError::Tampered));
    }
}
