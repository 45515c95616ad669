//! Sealing the token vault's rows: ChaCha20-Poly1305 (ring) under keys from the configuration
//! (`upstream_auth.vault.keys`), and the types that hold what a row opens to.
//!
//! A sealed value is `v1.<key id>.<base64url(nonce ‖ ciphertext ‖ tag)>`: a random 96-bit nonce per
//! seal, the key's id (the first 8 bytes, in hex, of a SHA-256 over the key: it names the key
//! without revealing it) so that the right key is tried, and the AEAD's 128-bit tag. The
//! associated data ([`Binding`]) names the row the value belongs to — its kind, principal,
//! upstream and the upstream's identity digest (and, for a registered client, its issuer and
//! client id; for a pending flow, its state hash, id and expiry) — so a value copied into another
//! row (another user's, another upstream's, the same upstream after its identity changed) does
//! not open. The first key seals; every configured key opens (rotation: add a new key in front,
//! run `mcp-host vault rotate`, then drop the old one).
//!
//! Random nonces: at 2^32 seals under one key the chance of a repeated nonce is about 2^-33; a
//! vault re-seals a row when a token is obtained or refreshed, far below that. Rotate keys well
//! before.
//!
//! What a row opens to lives in [`Secret`]s: zeroized when dropped, shown as `[redacted]` by
//! `Debug`, without `Display` or `Serialize`, so a token can be handed to the code that sends it
//! and nowhere else by accident.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom as _, SystemRandom};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use crate::config::upstream_auth::decode_vault_key;

/// Sealed values begin with this (then the key id, a dot, and the sealed bytes).
const SEALED: &str = "v1.";
/// What every binding begins with, so no other use of the same key can pass for a vault row.
const BINDING_CONTEXT: &[u8] = b"mcp-host/vault/v1\0";
/// The AEAD's tag.
const TAG_LEN: usize = 16;
/// The most bytes one sealed value may hold (a row's tokens and metadata are far smaller; a
/// value over this is refused rather than sealed, and a stored one over it is not opened).
pub const MAX_SEALED_BYTES: usize = 128 * 1024;

pub use super::secret::Secret;

/// Why the configured vault keys cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A key is not 32 bytes of base64.
    #[error("upstream_auth.vault.keys.{index}: {why}")]
    Invalid {
        /// Its place in the list.
        index: usize,
        /// What is wrong (never the key).
        why: String,
    },
    /// The same key is listed twice.
    #[error("upstream_auth.vault.keys.{first} and .{second} are the same key")]
    Duplicate {
        /// The first place.
        first: usize,
        /// The second.
        second: usize,
    },
}

/// Why a value was not sealed or not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// No key is configured to seal with.
    #[error("no vault key is configured (upstream_auth.vault.keys)")]
    NoKey,
    /// Not a sealed vault value (not `v1.<key id>.<base64url>`).
    #[error("it is not a sealed vault value")]
    Malformed,
    /// Sealed under a key no longer configured.
    #[error("it is sealed under key {0}, which is not in upstream_auth.vault.keys")]
    UnknownKey(String),
    /// The key is configured, but the value does not open: it was changed, or copied from another
    /// row (another user, upstream or identity).
    #[error("it does not open: changed outside mcp-host, or copied from another row")]
    Refused,
    /// The system's random source failed.
    #[error("the system's random source failed")]
    Random,
    /// More than [`MAX_SEALED_BYTES`] to seal, or a stored value far larger than any sealed one.
    #[error("it is larger than a vault row may be ({MAX_SEALED_BYTES} bytes)")]
    TooLarge,
    /// What it opened to is not a row this version reads.
    #[error("it opened, but is unreadable: {0}")]
    Unreadable(String),
}

/// What a sealed value is bound to (its AEAD associated data): a row of the vault. Every part is
/// length-prefixed, so no two different rows have the same binding.
#[derive(Clone, PartialEq, Eq)]
pub struct Binding(Vec<u8>);

impl Binding {
    fn of(kind: &str, parts: &[&str]) -> Binding {
        let mut aad = BINDING_CONTEXT.to_vec();
        for part in std::iter::once(kind).chain(parts.iter().copied()) {
            aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        Binding(aad)
    }

    /// The credential of `principal` at `upstream` (of identity digest `identity`).
    pub fn credential(principal: &str, upstream: &str, identity: &str) -> Binding {
        Binding::of("credential", &[principal, upstream, identity])
    }

    /// The secret of client `client_id`, registered for `upstream` (of identity digest
    /// `identity`) at the authorization server `issuer`.
    pub fn client(upstream: &str, identity: &str, issuer: &str, client_id: &str) -> Binding {
        Binding::of("client", &["", upstream, identity, issuer, client_id])
    }

    /// A pending consent flow.
    pub fn flow(
        principal: &str,
        upstream: &str,
        identity: &str,
        state_hash: &str,
        flow_id: &str,
        expires_ms: u64,
    ) -> Binding {
        let expires = expires_ms.to_string();
        Binding::of(
            "flow",
            &[principal, upstream, identity, state_hash, flow_id, &expires],
        )
    }
}

impl fmt::Debug for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Binding(..)")
    }
}

/// One configured key.
struct VaultKey {
    /// Its id (16 hex digits).
    id: String,
    key: LessSafeKey,
}

/// The keys that seal and open the vault's rows: the first seals, every one opens.
pub struct VaultKeys {
    keys: Vec<VaultKey>,
    random: SystemRandom,
}

impl fmt::Debug for VaultKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("VaultKeys").field("ids", &ids).finish()
    }
}

/// The id of a 32-byte key: the first 8 bytes of SHA-256 over a context and the key, in hex.
pub fn key_id(key: &[u8]) -> String {
    let digest = Sha256::new()
        .chain_update(b"mcp-host/vault key id\0")
        .chain_update(key)
        .finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

impl VaultKeys {
    /// The keys of `upstream_auth.vault.keys` (base64 of 32 bytes each; empty entries, such as an
    /// unset `${OLD_KEY:-}`, are skipped). None at all is allowed here: such a vault opens nothing
    /// and refuses to seal ([`SealError::NoKey`]).
    pub fn from_config(keys: &[String]) -> Result<VaultKeys, KeyError> {
        let mut out: Vec<(usize, VaultKey)> = Vec::new();
        for (index, text) in keys.iter().enumerate() {
            if text.trim().is_empty() {
                continue;
            }
            let bytes = decode_vault_key(text).map_err(|why| KeyError::Invalid { index, why })?;
            let key = VaultKey::new(&bytes).map_err(|why| KeyError::Invalid { index, why })?;
            if let Some((first, _)) = out.iter().find(|(_, k)| k.id == key.id) {
                return Err(KeyError::Duplicate {
                    first: *first,
                    second: index,
                });
            }
            out.push((index, key));
        }
        Ok(VaultKeys {
            keys: out.into_iter().map(|(_, k)| k).collect(),
            random: SystemRandom::new(),
        })
    }

    /// A random key of this process's own (a memory store: nothing sealed outlives the process).
    pub fn ephemeral() -> Result<VaultKeys, SealError> {
        let random = SystemRandom::new();
        let mut bytes = Zeroizing::new([0u8; 32]);
        random.fill(&mut *bytes).map_err(|_| SealError::Random)?;
        let key = VaultKey::new(&*bytes).map_err(|_| SealError::Random)?;
        Ok(VaultKeys {
            keys: vec![key],
            random,
        })
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of the key that seals (the first).
    pub fn sealing_key_id(&self) -> Option<&str> {
        self.keys.first().map(|k| k.id.as_str())
    }

    /// The ids of every key, the sealing one first.
    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.id.as_str()).collect()
    }

    /// `plaintext` sealed under the first key, bound to `binding`.
    pub fn seal(&self, binding: &Binding, plaintext: &[u8]) -> Result<String, SealError> {
        let key = self.keys.first().ok_or(SealError::NoKey)?;
        if plaintext.len() > MAX_SEALED_BYTES {
            return Err(SealError::TooLarge);
        }
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        // Room for the tag up front: no reallocation leaves a copy of the plaintext behind.
        let mut in_out = Zeroizing::new(Vec::with_capacity(plaintext.len() + TAG_LEN));
        in_out.extend_from_slice(plaintext);
        key.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(binding.0.as_slice()),
                &mut *in_out,
            )
            .map_err(|_| SealError::TooLarge)?;
        let mut sealed = Vec::with_capacity(NONCE_LEN + in_out.len());
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&in_out);
        Ok(format!("{SEALED}{}.{}", key.id, B64.encode(sealed)))
    }

    /// What `sealed` holds, if it opens under one of the keys bound to `binding`.
    pub fn open(&self, binding: &Binding, sealed: &str) -> Result<Zeroizing<Vec<u8>>, SealError> {
        let (id, body) = split_sealed(sealed).ok_or(SealError::Malformed)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| SealError::UnknownKey(id.to_owned()))?;
        if body.len() > MAX_SEALED_BYTES * 2 {
            return Err(SealError::TooLarge);
        }
        let raw = B64.decode(body).map_err(|_| SealError::Malformed)?;
        if raw.len() < NONCE_LEN + TAG_LEN {
            return Err(SealError::Malformed);
        }
        let (nonce, ciphertext) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed)?;
        let mut in_out = Zeroizing::new(ciphertext.to_vec());
        let opened = key
            .key
            .open_in_place(nonce, Aad::from(binding.0.as_slice()), &mut in_out)
            .map_err(|_| SealError::Refused)?
            .len();
        in_out.truncate(opened);
        Ok(in_out)
    }

    /// Whether `sealed` is sealed under the key that seals now (else `vault rotate` re-seals it).
    pub fn is_current(&self, sealed: &str) -> bool {
        sealed_key_id(sealed).is_some_and(|id| self.sealing_key_id() == Some(id))
    }
}

impl VaultKey {
    fn new(bytes: &[u8]) -> Result<VaultKey, String> {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, bytes)
            .map_err(|_| format!("a vault key is 32 bytes, this one is {}", bytes.len()))?;
        Ok(VaultKey {
            id: key_id(bytes),
            key: LessSafeKey::new(unbound),
        })
    }
}

/// The key id and the base64 body of a sealed value.
fn split_sealed(sealed: &str) -> Option<(&str, &str)> {
    let (id, body) = sealed.strip_prefix(SEALED)?.split_once('.')?;
    let valid_id = id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit());
    valid_id.then_some((id, body))
}

/// The id of the key `sealed` was sealed under (not secret: it names a key, and is shown by
/// `mcp-host vault list` so an operator sees which rows a rotation has not reached yet).
pub fn sealed_key_id(sealed: &str) -> Option<&str> {
    split_sealed(sealed).map(|(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configured key: base64 of 32 bytes of `byte`.
    fn key(byte: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode([byte; 32])
    }

    fn keys(list: &[u8]) -> VaultKeys {
        let list: Vec<String> = list.iter().map(|b| key(*b)).collect();
        VaultKeys::from_config(&list).unwrap()
    }

    const TOKEN: &[u8] = b"{\"access_token\":\"gho_alice_secret\"}";

    #[test]
    fn a_sealed_row_opens_bound_to_its_own_row_only() {
        let vault = keys(&[1]);
        let alice = Binding::credential("alice", "github", "id1");
        let sealed = vault.seal(&alice, TOKEN).unwrap();
        assert!(sealed.starts_with("v1."), "{sealed}");
        assert_eq!(sealed_key_id(&sealed), vault.sealing_key_id());
        assert!(
            !sealed.contains("gho_alice_secret"),
            "the token is not in the sealed text"
        );
        assert_eq!(&*vault.open(&alice, &sealed).unwrap(), TOKEN);
        // Two seals of the same plaintext differ (a fresh nonce each).
        assert_ne!(sealed, vault.seal(&alice, TOKEN).unwrap());
        // Copied to another user, another upstream, another identity of the upstream, or another
        // kind of row: refused.
        for other in [
            Binding::credential("mallory", "github", "id1"),
            Binding::credential("alice", "linear", "id1"),
            Binding::credential("alice", "github", "id2"),
            Binding::client("github", "id1", "alice", ""),
            Binding::credential("alic", "egithub", "id1"),
        ] {
            assert_eq!(vault.open(&other, &sealed), Err(SealError::Refused));
        }
    }

    #[test]
    fn a_changed_value_or_an_unknown_key_is_refused() {
        let vault = keys(&[1]);
        let row = Binding::credential("alice", "github", "id1");
        let sealed = vault.seal(&row, TOKEN).unwrap();
        // Each byte of the sealed body flipped in turn (nonce, ciphertext, tag): refused.
        let (id, body) = split_sealed(&sealed).unwrap();
        let raw = B64.decode(body).unwrap();
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 0x01;
            let forged = format!("v1.{id}.{}", B64.encode(&bad));
            assert_eq!(
                vault.open(&row, &forged),
                Err(SealError::Refused),
                "byte {i}"
            );
        }
        // Cut short, not base64, not sealed at all.
        let short = format!("v1.{id}.{}", B64.encode(&raw[..NONCE_LEN + TAG_LEN - 1]));
        assert_eq!(vault.open(&row, &short), Err(SealError::Malformed));
        assert_eq!(
            vault.open(&row, &format!("v1.{id}.***")),
            Err(SealError::Malformed)
        );
        assert_eq!(
            vault.open(&row, "gho_alice_secret"),
            Err(SealError::Malformed)
        );
        // Another key: its id is unknown; the same id with the wrong key does not open.
        let other = keys(&[2]);
        assert!(matches!(
            other.open(&row, &sealed),
            Err(SealError::UnknownKey(_))
        ));
        let impostor = sealed.replacen(id, other.sealing_key_id().unwrap(), 1);
        assert_eq!(other.open(&row, &impostor), Err(SealError::Refused));
        // No key: nothing seals, nothing opens.
        let none = VaultKeys::from_config(&[]).unwrap();
        assert!(none.is_empty());
        assert_eq!(none.seal(&row, TOKEN), Err(SealError::NoKey));
        assert!(matches!(
            none.open(&row, &sealed),
            Err(SealError::UnknownKey(_))
        ));
    }

    #[test]
    fn the_first_key_seals_and_every_key_opens() {
        let row = Binding::flow("alice", "github", "id1", "hash", "flow", 42);
        let old = keys(&[1]).seal(&row, TOKEN).unwrap();
        let rotated = keys(&[2, 1]);
        assert_eq!(&*rotated.open(&row, &old).unwrap(), TOKEN);
        assert!(!rotated.is_current(&old));
        let new = rotated.seal(&row, TOKEN).unwrap();
        assert!(rotated.is_current(&new));
        assert_eq!(sealed_key_id(&new), Some(rotated.ids()[0]));
        // The old key dropped: the re-sealed value still opens, the old one no longer does.
        let only_new = keys(&[2]);
        assert_eq!(&*only_new.open(&row, &new).unwrap(), TOKEN);
        assert!(matches!(
            only_new.open(&row, &old),
            Err(SealError::UnknownKey(_))
        ));
        // A flow's expiry is bound too.
        let later = Binding::flow("alice", "github", "id1", "hash", "flow", 43);
        assert_eq!(rotated.open(&later, &new), Err(SealError::Refused));
    }

    #[test]
    fn keys_are_32_bytes_of_base64_listed_once() {
        assert!(VaultKeys::from_config(&[key(1), String::new(), key(2)]).is_ok());
        // URL-safe base64 without padding is taken too.
        let url_safe = B64.encode([7u8; 32]);
        assert!(VaultKeys::from_config(&[url_safe]).is_ok());
        let short = base64::engine::general_purpose::STANDARD.encode([1u8; 16]);
        let err = VaultKeys::from_config(&[key(1), short]).unwrap_err();
        assert!(
            matches!(&err, KeyError::Invalid { index: 1, why } if why.contains("32 bytes")),
            "{err}"
        );
        let err = VaultKeys::from_config(&["not base64!".into()]).unwrap_err();
        assert!(matches!(err, KeyError::Invalid { index: 0, .. }), "{err}");
        assert_eq!(
            VaultKeys::from_config(&[key(1), key(2), key(1)]).unwrap_err(),
            KeyError::Duplicate {
                first: 0,
                second: 2
            }
        );
        // Errors and Debug never show a key.
        let shown = format!("{err:?} {:?}", keys(&[1, 2]));
        assert!(
            !shown.contains(&key(1)) && !shown.contains(&key(2)),
            "{shown}"
        );
    }

    #[test]
    fn secrets_are_never_shown() {
        let secret = Secret::new("gho_alice_secret");
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
        assert_eq!(secret.expose(), "gho_alice_secret");
        assert_eq!(secret, Secret::new("gho_alice_secret"));
        assert_ne!(secret, Secret::new("gho_alice_secreT"));
    }

    #[test]
    fn an_ephemeral_key_seals_and_opens() {
        let vault = VaultKeys::ephemeral().unwrap();
        let row = Binding::credential("a", "b", "c");
        let sealed = vault.seal(&row, TOKEN).unwrap();
        assert_eq!(&*vault.open(&row, &sealed).unwrap(), TOKEN);
    }
}
