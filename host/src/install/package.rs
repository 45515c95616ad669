//! The plugin package: an OCI artifact (`artifactType` [`ARTIFACT_TYPE`]) whose config blob
//! summarises the plugin, with one layer holding the plugin manifest JSON and, per platform, a
//! library layer and a detached minisign signature layer. The signature is made over the library
//! (minisign's prehashed BLAKE2b-512) with a trusted — signed — comment naming the library's file,
//! the plugin, the platform and the SHA-256 of the manifest JSON, so one signature covers the
//! library and the definitions it claims. Format: docs/authors/publishing.md.

use std::collections::BTreeMap;

use sha2::{Digest as _, Sha256};

use super::InstallError;
use crate::config::installed::PackageLimits;

/// The artifact type of a plugin package's OCI manifest.
pub const ARTIFACT_TYPE: &str = "application/vnd.mcp-host.plugin.v1";
/// The config blob: a JSON summary (plugin, version, SDK and ABI, platforms, permissions).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.mcp-host.plugin.config.v1+json";
/// The plugin manifest JSON layer (what the plugin's `init` reports: services, tools, resources,
/// prompts, permissions).
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.mcp-host.plugin.manifest.v1+json";
/// A platform's library layer.
pub const LIBRARY_MEDIA_TYPE: &str = "application/vnd.mcp-host.plugin.library.v1";
/// A platform's signature layer (a minisign signature file).
pub const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.mcp-host.plugin.signature.v1.minisig";
/// The annotation naming a layer's platform.
pub const PLATFORM_ANNOTATION: &str = "dev.mcp-host.platform";
/// The standard annotation naming a layer's file.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// One size limit of `limits.packages`: its value and its key there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The largest size accepted, in bytes.
    pub max: u64,
    /// Its key under `limits.packages`.
    pub key: &'static str,
}

impl Limit {
    /// The refusal of `what`, found larger than the limit before it was read whole.
    pub fn refuse_over(&self, what: impl std::fmt::Display) -> InstallError {
        self.refuse(what, format!("more than {}", self.max))
    }

    /// The refusal of `what`, `size` bytes (a number, or `more than N`).
    pub fn refuse(
        &self,
        what: impl std::fmt::Display,
        size: impl std::fmt::Display,
    ) -> InstallError {
        InstallError::TooLarge(format!(
            "{what} is {size} bytes, over the limit of {} bytes (limits.packages.{})",
            self.max, self.key
        ))
    }

    /// The limit as a length in memory.
    pub fn max_len(&self) -> usize {
        usize::try_from(self.max).unwrap_or(usize::MAX)
    }
}

/// The size limits a pull applies, from the configuration's `limits.packages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The OCI manifest and the plugin manifest JSON, each.
    pub manifest: Limit,
    /// A library.
    pub library: Limit,
    /// A signature.
    pub signature: Limit,
}

impl Limits {
    /// The limits `config` sets.
    pub fn of(config: &PackageLimits) -> Limits {
        Limits {
            manifest: Limit {
                max: config.max_manifest_bytes,
                key: "max_manifest_bytes",
            },
            library: Limit {
                max: config.max_library_bytes,
                key: "max_library_bytes",
            },
            signature: Limit {
                max: config.max_signature_bytes,
                key: "max_signature_bytes",
            },
        }
    }
}

/// This host's platform as packages name it: `linux-x86_64`, `macos-aarch64`, `windows-x86_64`.
pub fn host_platform() -> String {
    // `std::env::consts::OS` already says `linux`, `macos`, `windows`.
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// One platform's build in a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformBuild {
    /// `linux-x86_64`, ...
    pub platform: String,
    /// The library's file name (`libmy_tools.so`).
    pub file_name: String,
    /// The library.
    pub library: Vec<u8>,
    /// Its minisign signature file (`None`: unsigned, which `add` refuses).
    pub signature: Option<String>,
}

/// A whole package: the manifest JSON, a summary, and the builds.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    /// The config blob (JSON).
    pub config: serde_json::Value,
    /// The plugin manifest JSON, byte for byte as signed.
    pub manifest_json: Vec<u8>,
    /// Every platform's build.
    pub builds: Vec<PlatformBuild>,
}

/// The trusted comment of a package signature: the file, plugin, platform and manifest digest
/// it covers, after the timestamp `mcp-host sign` also writes.
pub fn signed_comment(
    timestamp: u64,
    file_name: &str,
    plugin: &str,
    platform: &str,
    manifest_digest: &str,
) -> String {
    format!(
        "timestamp:{timestamp}\tfile:{file_name}\tplugin:{plugin}\tplatform:{platform}\tmanifest:{manifest_digest}"
    )
}

/// The value of `key` in a trusted comment (`key:value` fields separated by tabs).
pub fn comment_field<'a>(comment: &'a str, key: &str) -> Option<&'a str> {
    comment
        .split('\t')
        .find_map(|f| f.trim().strip_prefix(key)?.strip_prefix(':'))
}

/// Sign `library` (named `file_name`, for `platform`) of plugin `plugin` whose manifest JSON has
/// digest `manifest_digest`, with secret key `sk`: the text of a minisign signature file.
pub fn sign(
    sk: &minisign::SecretKey,
    library: &[u8],
    file_name: &str,
    plugin: &str,
    platform: &str,
    manifest_digest: &str,
) -> Result<String, InstallError> {
    let pk =
        minisign::PublicKey::from_secret_key(sk).map_err(|e| InstallError::Sign(e.to_string()))?;
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let trusted = signed_comment(timestamp, file_name, plugin, platform, manifest_digest);
    let key_id = crate::plugins::signature::format_key_id(pk.keynum());
    let signature = minisign::sign(
        Some(&pk),
        sk,
        library,
        Some(&trusted),
        Some(&format!("signature from mcp-host secret key {key_id}")),
    )
    .map_err(|e| InstallError::Sign(e.to_string()))?;
    Ok(signature.into_string())
}

/// The annotations of a layer for `platform` named `title`.
pub(crate) fn annotations(platform: Option<&str>, title: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    map.insert(TITLE_ANNOTATION.to_owned(), title.to_owned());
    if let Some(p) = platform {
        map.insert(PLATFORM_ANNOTATION.to_owned(), p.to_owned());
    }
    map
}

/// The config blob of a package of plugin manifest `manifest` (JSON) with builds for `platforms`,
/// built by `build` (the host's `BuildInfo`: SDK version, ABI, target).
pub fn config_blob(
    manifest: &serde_json::Value,
    build: &serde_json::Value,
    platforms: &[String],
) -> serde_json::Value {
    serde_json::json!({
        "plugin": manifest["plugin"],
        "version": manifest["version"],
        "sdkVersion": manifest["sdkVersion"],
        "abi": build["abi"],
        "platforms": platforms,
        "permissions": manifest.get("permissions").cloned().unwrap_or_else(|| serde_json::json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_covers_the_library_and_names_the_manifest_digest() {
        let pair = minisign::KeyPair::generate_unencrypted_keypair().expect("keypair");
        let text = sign(
            &pair.sk,
            b"library",
            "libx.so",
            "x",
            "linux-x86_64",
            "sha256:ab",
        )
        .expect("sign");
        let sig = minisign::SignatureBox::from_string(&text).expect("parse");
        let comment = sig.trusted_comment().expect("comment");
        assert_eq!(comment_field(&comment, "file"), Some("libx.so"));
        assert_eq!(comment_field(&comment, "manifest"), Some("sha256:ab"));
        assert_eq!(comment_field(&comment, "platform"), Some("linux-x86_64"));
        minisign::verify(
            &pair.pk,
            &sig,
            std::io::Cursor::new(b"library"),
            true,
            false,
            false,
        )
        .expect("verifies");
        assert!(
            minisign::verify(
                &pair.pk,
                &sig,
                std::io::Cursor::new(b"librarz"),
                true,
                false,
                false
            )
            .is_err()
        );
        assert!(sha256_digest(b"").starts_with("sha256:e3b0c442"));
    }
}
