//! The plugins `mcp-host add` installed: the managed tool directory (`<data_dir>/plugins`, the last
//! entry of `tool_dirs`, sandboxed and signed) and its receipts (`installed.json` in it), which
//! say where each plugin came from, who signed it, and the permissions it declared — the grants it
//! runs with unless the operator sets `plugins.<name>.permissions`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mcp_plugin_sdk::wire::DeclaredPermissions;
use serde::{Deserialize, Serialize};

use super::{Config, Connect, Endpoint, Isolation, Permissions, ToolDir};

/// The managed directory's name under `data_dir`.
pub const INSTALLED_DIR: &str = "plugins";

/// The receipts file's name in the managed directory.
pub const RECEIPTS_FILE: &str = "installed.json";

/// The receipts' format version.
pub const RECEIPTS_VERSION: u32 = 1;

/// Largest receipts file read.
const MAX_RECEIPTS_BYTES: u64 = 16 * 1024 * 1024;

/// Every installed plugin, by plugin name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipts {
    /// [`RECEIPTS_VERSION`].
    pub version: u32,
    /// The installed plugins, by plugin name.
    #[serde(default)]
    pub plugins: BTreeMap<String, Receipt>,
}

/// How one plugin was installed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// Its library's file name in the managed directory.
    pub file: String,
    /// What `add` was given: an OCI reference, a path or an `https://` URL.
    pub source: String,
    /// The OCI manifest digest it was pulled by (`None` for a file or URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `sha256:` digest of the library.
    pub library_digest: String,
    /// `sha256:` digest of the plugin manifest JSON the signature covers.
    pub manifest_digest: String,
    /// The platform of the library (`linux-x86_64`, ...).
    pub platform: String,
    /// The plugin's version.
    pub version: String,
    /// The `trust.keys` entry that signed it.
    pub signer: String,
    /// That key's id (16 hex digits).
    pub signer_key_id: String,
    /// The permissions its manifest declares.
    #[serde(default)]
    pub permissions: DeclaredPermissions,
    /// When it was installed (seconds since the Unix epoch).
    pub installed_at: u64,
}

/// The largest parts of a plugin package `mcp-host add` and `update` accept (a larger one is
/// refused before it is read whole, naming the limit).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PackageLimits {
    /// Largest OCI manifest, and largest plugin manifest JSON (the package's manifest layer), in
    /// bytes.
    pub max_manifest_bytes: u64,
    /// Largest library (one platform's build), in bytes.
    pub max_library_bytes: u64,
    /// Largest signature file, in bytes.
    pub max_signature_bytes: u64,
}

impl Default for PackageLimits {
    fn default() -> Self {
        PackageLimits {
            max_manifest_bytes: 4 * 1024 * 1024,
            max_library_bytes: 512 * 1024 * 1024,
            max_signature_bytes: 64 * 1024,
        }
    }
}

impl Receipts {
    /// The receipts in managed directory `dir` (none when it has no receipts file).
    pub fn read(dir: &Path) -> std::io::Result<Receipts> {
        let path = dir.join(RECEIPTS_FILE);
        let text = match super::lock::read_bounded(&path, MAX_RECEIPTS_BYTES) {
            Ok(Some(text)) => text,
            Ok(None) => {
                return Err(std::io::Error::other(format!(
                    "{} is larger than {MAX_RECEIPTS_BYTES} bytes",
                    path.display()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Receipts {
                    version: RECEIPTS_VERSION,
                    ..Receipts::default()
                });
            }
            Err(e) => return Err(e),
        };
        let receipts: Receipts = serde_json::from_str(&text).map_err(|e| {
            std::io::Error::other(format!("{} is not a receipts file: {e}", path.display()))
        })?;
        if receipts.version != RECEIPTS_VERSION {
            return Err(std::io::Error::other(format!(
                "{} has format version {} (this host reads {RECEIPTS_VERSION})",
                path.display(),
                receipts.version
            )));
        }
        Ok(receipts)
    }

    /// Write the receipts into managed directory `dir` atomically (a temporary file, then a
    /// rename).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let path = dir.join(RECEIPTS_FILE);
        let mut text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        text.push('\n');
        let tmp = dir.join(format!(".{RECEIPTS_FILE}.tmp{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

impl Config {
    /// The managed tool directory `mcp-host add` installs into: `<data_dir>/plugins`.
    pub fn installed_dir(&self) -> PathBuf {
        self.data_dir.join(INSTALLED_DIR)
    }
}

/// Append the managed directory to `config.tool_dirs` (last: every configured directory takes
/// precedence), sandboxed and requiring signatures, unless the configuration lists it itself (then
/// its own entry's settings apply).
pub(crate) fn add_installed_dir(config: &mut Config) {
    let dir = config.installed_dir();
    if config.tool_dirs.iter().any(|d| d.path == dir) {
        return;
    }
    config.tool_dirs.push(ToolDir {
        path: dir,
        optional: true,
        isolation: Some(Isolation::Sandbox),
        require_signature: Some(true),
        ..ToolDir::default()
    });
}

/// The permissions an installed plugin declared, as sandbox grants: for plugin `plugin` loaded
/// from `file` in the managed directory, when its receipt names that file. `None` elsewhere.
pub fn declared_grant(config: &Config, plugin: &str, file: &Path) -> Option<Permissions> {
    let dir = config.installed_dir();
    if file.parent() != Some(dir.as_path()) {
        return None;
    }
    let receipts = match Receipts::read(&dir) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("Installed plugins' receipts unreadable ({e}): no declared grants");
            return None;
        }
    };
    let receipt = receipts.plugins.get(plugin)?;
    let name = file.file_name()?.to_str()?;
    (receipt.file == name).then(|| to_permissions(&receipt.permissions).0)
}

/// Declared permissions as sandbox grants, and what could not be granted (a relative path, an
/// endpoint that is not `host:port`).
pub fn to_permissions(declared: &DeclaredPermissions) -> (Permissions, Vec<String>) {
    let mut problems = Vec::new();
    let mut paths = |list: &[String], kind: &str| -> Vec<PathBuf> {
        list.iter()
            .filter_map(|p| {
                let path = PathBuf::from(p);
                if path.is_absolute() {
                    Some(path)
                } else {
                    problems.push(format!("{kind} path {p:?} is not absolute"));
                    None
                }
            })
            .collect()
    };
    let read = paths(&declared.read, "read");
    let write = paths(&declared.write, "write");
    let connect = declared
        .net
        .iter()
        .filter_map(|n| match n.parse::<Endpoint>() {
            Ok(e) => Some(e),
            Err(e) => {
                problems.push(format!("net {e}"));
                None
            }
        })
        .collect();
    (
        Permissions {
            read,
            write,
            connect: Connect::Only(connect),
            env: declared.env.clone(),
            exec: false,
            unix_sockets: Vec::new(),
        },
        problems,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_round_trip_and_declared_grants_apply_only_to_the_named_file_in_the_managed_dir() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = Config {
            data_dir: tmp.path().to_path_buf(),
            ..Config::default()
        };
        let dir = config.installed_dir();
        std::fs::create_dir_all(&dir).expect("mkdir");
        assert!(Receipts::read(&dir).expect("empty").plugins.is_empty());
        let declared = DeclaredPermissions {
            read: vec!["/etc/hostname".into(), "relative".into()],
            net: vec!["example.com:443".into(), "nope".into()],
            env: vec!["LANG".into()],
            ..DeclaredPermissions::default()
        };
        let mut receipts = Receipts {
            version: RECEIPTS_VERSION,
            ..Receipts::default()
        };
        receipts.plugins.insert(
            "demo".into(),
            Receipt {
                file: "libdemo.so".into(),
                source: "127.0.0.1:5000/demo:1".into(),
                digest: Some("sha256:00".into()),
                library_digest: "sha256:01".into(),
                manifest_digest: "sha256:02".into(),
                platform: "linux-x86_64".into(),
                version: "1.0.0".into(),
                signer: "release".into(),
                signer_key_id: "0123456789ABCDEF".into(),
                permissions: declared.clone(),
                installed_at: 1,
            },
        );
        receipts.write(&dir).expect("write");
        assert_eq!(Receipts::read(&dir).expect("read"), receipts);

        let grant = declared_grant(&config, "demo", &dir.join("libdemo.so")).expect("granted");
        assert_eq!(grant.read, vec![PathBuf::from("/etc/hostname")]);
        assert_eq!(grant.env, vec!["LANG".to_owned()]);
        assert_eq!(
            grant.connect.clone(),
            Connect::Only(vec!["example.com:443".parse().expect("endpoint")])
        );
        assert!(declared_grant(&config, "demo", &dir.join("libother.so")).is_none());
        assert!(declared_grant(&config, "demo", &tmp.path().join("libdemo.so")).is_none());
        assert!(declared_grant(&config, "other", &dir.join("libdemo.so")).is_none());
        let (_, problems) = to_permissions(&declared);
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
