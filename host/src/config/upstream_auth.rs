//! `upstream_auth`: how the host keeps the credentials it holds for the users of upstream
//! servers — the token vault's keys and bounds (`upstream_auth.vault`).
//!
//! The keys are read here and checked (each base64 of 32 bytes, none listed twice); sealing with
//! them is `access::upstream::sealing`'s. Whether keys are required depends on which upstreams
//! obtain credentials for their users, which the configuration of upstream authorization decides:
//! [`VaultSettings::check_required`] is the check it calls.

use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::StoreSetting;

/// How the host keeps the credentials it obtains for users of upstream servers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamAuthSettings {
    /// The token vault: where users' upstream credentials are kept (in the `store`, sealed).
    pub vault: VaultSettings,
}

/// The token vault: users' upstream credentials, registered clients and pending consents, kept in
/// the `store` (SQLite or Redis), sealed with ChaCha20-Poly1305.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct VaultSettings {
    /// Keys that seal the vault's rows: each the base64 of 32 random bytes (`openssl rand -base64
    /// 32`), given as `${ENV_VAR}`. The first seals, every one opens: to rotate, put a new key
    /// first, run `mcp-host vault rotate`, then remove the old one. Required (the same list on
    /// every replica) when an upstream obtains credentials for its users and the store is not
    /// `memory`; the vault never keeps a key beside what it seals.
    pub keys: Vec<String>,
    /// Upstreams one user may hold credentials for at once (connecting one more is refused).
    pub max_connections_per_user: usize,
    /// Consents one user may have pending at once (authorization links not yet followed).
    pub max_pending_flows_per_user: usize,
    /// Consents pending at once, every user together.
    pub max_pending_flows: usize,
}

impl Default for VaultSettings {
    fn default() -> Self {
        VaultSettings {
            keys: Vec::new(),
            max_connections_per_user: 64,
            max_pending_flows_per_user: 8,
            max_pending_flows: 10_000,
        }
    }
}

/// The keys are never shown.
impl fmt::Debug for VaultSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultSettings")
            .field("keys", &format_args!("[<redacted>; {}]", self.keys.len()))
            .field("max_connections_per_user", &self.max_connections_per_user)
            .field(
                "max_pending_flows_per_user",
                &self.max_pending_flows_per_user,
            )
            .field("max_pending_flows", &self.max_pending_flows)
            .finish()
    }
}

/// A vault key's bytes: base64 (standard or URL-safe, padded or not) of exactly 32 bytes. The
/// error never quotes the key.
pub fn decode_vault_key(text: &str) -> Result<Zeroizing<Vec<u8>>, String> {
    let normal: Zeroizing<String> = Zeroizing::new(
        text.trim()
            .trim_end_matches('=')
            .chars()
            .map(|c| match c {
                '-' => '+',
                '_' => '/',
                c => c,
            })
            .collect(),
    );
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(normal.as_bytes())
        .map(Zeroizing::new)
        .map_err(|_| "not base64 (a key is the base64 of 32 random bytes)".to_owned())?;
    if bytes.len() != 32 {
        return Err(format!(
            "a vault key is 32 bytes (the base64 of 32 random bytes), this one is {}",
            bytes.len()
        ));
    }
    Ok(bytes)
}

impl VaultSettings {
    /// Check every configured key (the message names the key by its place in the list, never
    /// its value). Empty entries (an unset `${OLD_KEY:-}`) are skipped.
    pub fn check_keys(&self) -> Result<(), (String, String)> {
        let mut seen: Vec<(usize, Zeroizing<Vec<u8>>)> = Vec::new();
        for (i, text) in self.keys.iter().enumerate() {
            if text.trim().is_empty() {
                continue;
            }
            let key = decode_vault_key(text).map_err(|why| (format!("keys.{i}"), why))?;
            if let Some((first, _)) = seen.iter().find(|(_, k)| *k == key) {
                return Err((format!("keys.{i}"), format!("the same key as keys.{first}")));
            }
            seen.push((i, key));
        }
        Ok(())
    }

    /// Whether some key is configured.
    pub fn has_keys(&self) -> bool {
        self.keys.iter().any(|k| !k.trim().is_empty())
    }

    /// The check the configuration of upstream authorization calls once it knows which upstreams
    /// (and plugin credential providers) obtain credentials for users (`users`): with any, and a
    /// store that outlives the process (SQLite, Redis), `upstream_auth.vault.keys` is required.
    /// There is deliberately no fallback key kept in the store itself (unlike task records'):
    /// the key must not sit beside the tokens it protects.
    pub fn check_required(&self, store: &StoreSetting, users: &[&str]) -> Result<(), String> {
        if users.is_empty() || matches!(store, StoreSetting::Memory) || self.has_keys() {
            return Ok(());
        }
        Err(format!(
            "{} obtain{} credentials for users, which the store keeps ({}): set \
             upstream_auth.vault.keys to the base64 of 32 random bytes (`openssl rand -base64 32`), \
             given as ${{ENV_VAR}} — the same list on every replica",
            users.join(", "),
            if users.len() == 1 { "s" } else { "" },
            match store {
                StoreSetting::Sqlite(_) => "sqlite",
                _ => "redis",
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn keys_are_checked_by_place_and_never_shown() {
        let mut vault = VaultSettings {
            keys: vec![b64(&[1; 32]), String::new(), b64(&[2; 32])],
            ..VaultSettings::default()
        };
        assert_eq!(vault.check_keys(), Ok(()));
        vault.keys.push(b64(&[3; 31]));
        let (key, why) = vault.check_keys().unwrap_err();
        assert_eq!(key, "keys.3");
        assert!(why.contains("32 bytes") && why.contains("31"), "{why}");
        vault.keys[3] = "%%%".into();
        assert!(vault.check_keys().unwrap_err().1.contains("not base64"));
        // The same key, in another alphabet: still the same key.
        vault.keys[3] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([1u8; 32]);
        assert_eq!(
            vault.check_keys(),
            Err(("keys.3".into(), "the same key as keys.0".into()))
        );
        let shown = format!("{vault:?}");
        assert!(!shown.contains(&b64(&[1; 32])), "{shown}");
        assert!(shown.contains("<redacted>; 4"), "{shown}");
    }

    #[test]
    fn keys_are_required_when_users_credentials_outlive_the_process() {
        let none = VaultSettings::default();
        let sqlite = StoreSetting::Sqlite(None);
        assert_eq!(none.check_required(&sqlite, &[]), Ok(()));
        assert_eq!(
            none.check_required(&StoreSetting::Memory, &["github"]),
            Ok(())
        );
        let err = none.check_required(&sqlite, &["github"]).unwrap_err();
        assert!(
            err.contains("github") && err.contains("upstream_auth.vault.keys"),
            "{err}"
        );
        let redis = StoreSetting::Redis("redis://127.0.0.1".into());
        assert!(none.check_required(&redis, &["a", "b"]).is_err());
        let empty = VaultSettings {
            keys: vec![String::new()],
            ..VaultSettings::default()
        };
        assert!(
            empty.check_required(&redis, &["a"]).is_err(),
            "an unset ${{KEY:-}}"
        );
        let keyed = VaultSettings {
            keys: vec![b64(&[1; 32])],
            ..VaultSettings::default()
        };
        assert_eq!(keyed.check_required(&redis, &["a"]), Ok(()));
    }
}
