//! Plugin signatures: a detached minisign signature beside each plugin file (`<file>.minisig`:
//! Ed25519 over the file's BLAKE2b-512 hash, with a signed comment), checked against the named
//! public keys of `trust.keys`.
//!
//! The check runs on the private copy, before the child-process probe opens it: the bytes checked
//! are the bytes probed and loaded, so a file replaced after the check is never loaded, and an
//! unsigned file in a directory that requires signatures never runs a static constructor, not even
//! in the probe's child. Nothing is cached: every load hashes the bytes it loads.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::LoadError;
use super::discovery::{Candidate, is_plugin_file};
use super::slot::FileStamp;
use crate::config::{Config, TrustSettings};

/// What a signature file's name adds to its plugin file's name.
pub const SIGNATURE_SUFFIX: &str = ".minisig";

/// Largest signature file read (a minisign signature is about 300 bytes).
const MAX_SIGNATURE_BYTES: u64 = 64 * 1024;

/// Who signed a plugin file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Signer {
    /// The key's name in `trust.keys`.
    pub key: String,
    /// The key id, as minisign prints it (16 hex digits).
    pub key_id: String,
    /// The signature's trusted (signed) comment, e.g. `timestamp:1795994774\tfile:libmcp_time.so`.
    pub comment: String,
}

/// The signature file of plugin file `plugin`: `<plugin>.minisig` beside it.
pub fn signature_path(plugin: &Path) -> PathBuf {
    let mut name = plugin.as_os_str().to_owned();
    name.push(SIGNATURE_SUFFIX);
    PathBuf::from(name)
}

/// Whether `path` is the signature file of a file discovery would take.
pub fn is_signature_file(path: &Path) -> bool {
    path.to_str()
        .and_then(|p| p.strip_suffix(SIGNATURE_SUFFIX))
        .is_some_and(|plugin| is_plugin_file(Path::new(plugin)))
}

/// minisign's text form of a key id (16 hex digits).
pub fn format_key_id(keynum: &[u8]) -> String {
    let mut id = [0u8; 8];
    let n = keynum.len().min(8);
    id[..n].copy_from_slice(&keynum[..n]);
    format!("{:016X}", u64::from_le_bytes(id))
}

/// The trusted keys, parsed.
pub struct Keyring {
    keys: Vec<(String, minisign::PublicKey)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.keys
                    .iter()
                    .map(|(n, k)| (n, format_key_id(k.keynum()))),
            )
            .finish()
    }
}

impl Keyring {
    /// The keys of `trust.keys` (the configuration already refused keys that do not parse).
    pub fn from_config(trust: &TrustSettings) -> Keyring {
        let keys = trust
            .keys
            .iter()
            .filter_map(
                |(name, key)| match minisign::PublicKey::from_base64(key.trim()) {
                    Ok(key) => Some((name.clone(), key)),
                    Err(e) => {
                        tracing::error!("trust.keys.{name} is not a minisign public key: {e}");
                        None
                    }
                },
            )
            .collect();
        Keyring { keys }
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a key with this id is trusted.
    pub fn trusts(&self, key_id: &str) -> bool {
        self.keys
            .iter()
            .any(|(_, k)| format_key_id(k.keynum()) == key_id)
    }

    /// Check `copy` (the private copy of `original`) against `original`'s signature file. `Ok(None)`:
    /// not signed, or nothing to check it with (no keys) while no signature is required; `Err` for
    /// what `required` refuses. A bad signature where none is required is logged and counts as
    /// unsigned.
    pub fn check(
        &self,
        original: &Path,
        copy: &Path,
        required: bool,
    ) -> Result<Option<Signer>, LoadError> {
        if !required && self.is_empty() {
            return Ok(None);
        }
        match self.verify(original, copy) {
            Ok(Some(signer)) => Ok(Some(signer)),
            Ok(None) if !required => Ok(None),
            Ok(None) => {
                let name = signature_path(original);
                let name = name.file_name().unwrap_or_default().to_string_lossy();
                Err(LoadError::Signature(if self.is_empty() {
                    format!("unsigned (no {name}), and trust.keys is empty: nothing can be trusted")
                } else {
                    format!(
                        "unsigned: no signature file {name} (this tool directory requires signed \
                         plugins: `mcp-host sign --key KEY {}`)",
                        original.display()
                    )
                }))
            }
            Err(e) if required => Err(e),
            Err(e) => {
                tracing::warn!(
                    "Plugin {} has a signature that does not check out ({e}); loading it as \
                     unsigned (its tool directory does not require signatures)",
                    original.display()
                );
                Ok(None)
            }
        }
    }

    /// `Ok(None)` when there is no signature file; `Err` when there is one that is unreadable, by
    /// an unknown key or not for these bytes.
    fn verify(&self, original: &Path, copy: &Path) -> Result<Option<Signer>, LoadError> {
        let sig_path = signature_path(original);
        let name = sig_path.file_name().map_or_else(
            || sig_path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let text = match std::fs::metadata(&sig_path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Ok(meta) if !meta.is_file() => Err(std::io::Error::other("not a regular file")),
            _ => crate::config::lock::read_bounded(&sig_path, MAX_SIGNATURE_BYTES).and_then(|t| {
                t.ok_or_else(|| std::io::Error::other("larger than a signature can be"))
            }),
        };
        let text = match text {
            Ok(text) => text,
            Err(e) => {
                return Err(LoadError::Signature(format!(
                    "unreadable signature file {name}: {e}"
                )));
            }
        };
        let signature = minisign::SignatureBox::from_string(&text).map_err(|e| {
            LoadError::Signature(format!("{name} is not a minisign signature: {e}"))
        })?;
        let key_id = format_key_id(signature.keynum());
        let Some((key_name, key)) = self
            .keys
            .iter()
            .find(|(_, k)| format_key_id(k.keynum()) == key_id)
        else {
            return Err(LoadError::Signature(format!(
                "signed with key ID {key_id}, which is not in trust.keys"
            )));
        };
        let file = std::fs::File::open(copy).map_err(|e| LoadError::Copy(e.to_string()))?;
        // Legacy (not prehashed) signatures are refused: they would need the whole file in memory.
        minisign::verify(key, &signature, file, true, false, false).map_err(|e| {
            LoadError::Signature(format!(
                "the signature by key {key_name:?} (ID {key_id}) does not match the file \
                 (changed after signing, or signed for another file): {e}"
            ))
        })?;
        let comment = signature.trusted_comment().unwrap_or_default();
        check_signed_name(&comment, original)?;
        Ok(Some(Signer {
            key: key_name.clone(),
            key_id,
            comment,
        }))
    }
}

/// A signature whose trusted comment names the file it was made for (`file:<name>`, as
/// `mcp-host sign` writes it) covers only a file of that name: a signed library renamed to pass for
/// another plugin's file is refused. A comment without a `file:` field (a signature made by another
/// minisign tool) names no file.
fn check_signed_name(comment: &str, original: &Path) -> Result<(), LoadError> {
    let signed = comment
        .split('\t')
        .find_map(|field| field.trim().strip_prefix("file:"));
    let actual = original.file_name().map(|n| n.to_string_lossy());
    match (signed, actual) {
        (Some(signed), Some(actual)) if signed != actual => Err(LoadError::Signature(format!(
            "signed for a file named {signed}, not {actual} (the trusted comment names the file; \
             sign this file under its own name)"
        ))),
        _ => Ok(()),
    }
}

/// Check the private copy of every file that has one (in order; `Ok(None)` where there is nothing to check or
/// the copy failed), on up to one thread per core: hashing is the cost of a signed start-up.
pub(crate) fn check_all(
    files: &[(&Candidate, Option<&Path>)],
    config: &Config,
) -> Vec<Result<Option<Signer>, LoadError>> {
    let keys = Keyring::from_config(&config.trust);
    let jobs: Vec<(usize, &Path, &Path, bool)> = files
        .iter()
        .enumerate()
        .filter_map(|(i, (c, copy))| {
            let required = config.requires_signature(c.dir_index, &c.dir);
            let copy = (*copy)?;
            (required || !keys.is_empty()).then_some((i, c.path.as_path(), copy, required))
        })
        .collect();
    let mut results: Vec<Result<Option<Signer>, LoadError>> =
        (0..files.len()).map(|_| Ok(None)).collect();
    if jobs.is_empty() {
        return results;
    }
    let keys = &keys;
    let checked = super::map_parallel(jobs, |(i, original, copy, required)| {
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            keys.check(original, copy, required)
        }));
        (
            i,
            checked
                .unwrap_or_else(|_| Err(LoadError::Signature("signature check panicked".into()))),
        )
    });
    for (i, result) in checked {
        results[i] = result;
    }
    results
}

/// What a loaded version's signature status depends on besides the plugin file: whether its
/// directory requires a signature, the trusted keys, and the signature file. A different value
/// means the file is checked again (a version is not kept, a failed file is retried).
pub(crate) fn trust_stamp(candidate: &Candidate, config: &Config) -> String {
    let required = config.requires_signature(candidate.dir_index, &candidate.dir);
    if !required && config.trust.keys.is_empty() {
        return String::new();
    }
    let keys: Vec<&str> = config.trust.keys.values().map(|k| k.trim()).collect();
    let sig = FileStamp::of(&signature_path(&candidate.path)).map(|s| s.key());
    format!(
        "{required}|{}|{}",
        crate::config::lock::digest(&serde_json::json!(keys)),
        sig.unwrap_or_default()
    )
}

/// Whether a version loaded earlier may stay in service under `config` when its file's new
/// version fails: it must meet its directory's signature requirement now (a key removed from
/// `trust.keys`, or a requirement turned on, retires it).
pub(crate) fn still_trusted(
    signer: Option<&Signer>,
    candidate: &Candidate,
    config: &Config,
) -> bool {
    if !config.requires_signature(candidate.dir_index, &candidate.dir) {
        return true;
    }
    let keys = Keyring::from_config(&config.trust);
    signer.is_some_and(|s| keys.trusts(&s.key_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keypair() -> (minisign::KeyPair, String) {
        let pair = minisign::KeyPair::generate_unencrypted_keypair().expect("keypair");
        let b64 = pair.pk.to_base64();
        (pair, b64)
    }

    fn sign(file: &Path, pair: &minisign::KeyPair) {
        let data = std::fs::read(file).expect("read");
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        let comment = format!("file:{}", name.unwrap_or_default());
        let sig = minisign::sign(Some(&pair.pk), &pair.sk, &data[..], Some(&comment), None)
            .expect("sign");
        std::fs::write(signature_path(file), sig.to_string()).expect("write sig");
    }

    fn keyring(keys: &[(&str, &str)]) -> Keyring {
        Keyring::from_config(&TrustSettings {
            keys: keys
                .iter()
                .map(|(n, k)| ((*n).to_owned(), (*k).to_owned()))
                .collect(),
            ..TrustSettings::default()
        })
    }

    #[test]
    fn good_tampered_unknown_key_and_missing_signatures() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("libp.so");
        std::fs::write(&file, b"plugin bytes").expect("write");
        let (pair, b64) = keypair();
        let (_, other) = keypair();
        sign(&file, &pair);
        let ring = keyring(&[("release", &b64)]);

        let signer = ring
            .check(&file, &file, true)
            .expect("good")
            .expect("signed");
        assert_eq!(signer.key, "release");
        assert_eq!(signer.comment, "file:libp.so");
        assert!(ring.trusts(&signer.key_id));

        let copy = tmp.path().join("copy.so");
        std::fs::write(&copy, b"plugin bytez").expect("write");
        let err = ring
            .check(&file, &copy, true)
            .expect_err("tampered")
            .to_string();
        assert!(err.contains("does not match the file"), "{err}");
        // Not required: loaded as unsigned.
        assert_eq!(ring.check(&file, &copy, false).expect("ok"), None);

        let err = keyring(&[("other", &other)])
            .check(&file, &file, true)
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("not in trust.keys"), "{err}");

        std::fs::remove_file(signature_path(&file)).expect("rm");
        let err = ring
            .check(&file, &file, true)
            .expect_err("missing")
            .to_string();
        assert!(
            err.contains("unsigned: no signature file libp.so.minisig"),
            "{err}"
        );
        assert_eq!(ring.check(&file, &file, false).expect("ok"), None);
    }

    #[test]
    fn signature_files_are_recognised_by_their_plugin_name() {
        let lib = format!("a/libx.{}", super::super::discovery::LIBRARY_EXTENSION);
        assert!(is_signature_file(Path::new(&format!("{lib}.minisig"))));
        assert!(!is_signature_file(Path::new("a/notes.txt.minisig")));
        assert!(!is_signature_file(Path::new(&lib)));
    }
}

#[cfg(test)]
mod signed_name_tests {
    use super::*;

    #[test]
    fn a_signature_naming_another_file_is_refused_and_one_naming_none_is_not() {
        let file = Path::new("/tools/libmcp_time.so");
        assert!(check_signed_name("timestamp:1\tfile:libmcp_time.so", file).is_ok());
        assert!(check_signed_name("made by another tool", file).is_ok());
        let refused = check_signed_name("timestamp:1\tfile:libevil.so", file)
            .expect_err("another file's signature");
        assert!(
            refused
                .to_string()
                .contains("signed for a file named libevil.so"),
            "{refused}"
        );
    }
}
