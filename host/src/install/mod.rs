//! Installing plugins by reference: `mcp-host add` fetches a plugin (one platform's build of an
//! OCI package, or a library file with its `.minisig`), stages it in a hidden directory inside the
//! managed tool directory, verifies its signature against `trust.keys`, probes and loads it the way
//! `mcp-host check` does (ABI and build fingerprint, then its definitions against the package's
//! manifest), and only then moves it into place by rename — so an interrupted or refused install
//! leaves nothing. `remove`, `update` and `list --installed` work from the receipts
//! ([`crate::config::installed`]) and the lock file, where the digests and the definitions' pins
//! are recorded.

mod download;
mod managed;
pub mod oci;
pub mod package;

pub use managed::{DirLock, Expect, LOCK_FILE, commit, lock_dir, remove};

use std::path::{Path, PathBuf};

use mcp_plugin_sdk::wire::DeclaredPermissions;
use serde_json::Value;

use crate::config::installed::{self, Receipt, Receipts};
use crate::config::lock::PinLock;
use crate::config::{Config, Isolation, PinMode, ToolDir};
use crate::host::{Host, HostOptions, check_file};
use crate::plugins::signature::{Keyring, signature_path};
use crate::registry::pins;

/// Why an install, update or removal did not happen.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The reference does not parse.
    #[error("not a package reference: {0}")]
    Reference(String),
    /// The registry refused or could not be reached.
    #[error("registry: {0}")]
    Registry(String),
    /// The package is not well formed.
    #[error("{0}")]
    Package(String),
    /// The signature is missing, by an untrusted key, or does not match.
    #[error("refused, signature check failed: {0}")]
    Signature(String),
    /// Signing failed (publish).
    #[error("cannot sign: {0}")]
    Sign(String),
    /// The library does not load here, or is not what its package says.
    #[error("refused: {0}")]
    Refused(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// `remove`/`update` of a plugin that `add` did not install.
    #[error("{0} is not installed (`mcp-host list --installed` shows what is)")]
    NotInstalled(String),
    /// What is installed is not what the change expected (another `add`, `update` or `remove`
    /// came first).
    #[error("refused: {0}")]
    Conflict(String),
    /// A part of the package is larger than its limit (`limits.packages`).
    #[error("refused: {0}")]
    TooLarge(String),
}

fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> InstallError {
    move |e| InstallError::Io(format!("{what}: {e}"))
}

/// Where `add` takes a plugin from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An OCI reference (`registry/repo:tag`, `oci://...`).
    Registry(String),
    /// A library file (with `FILE.minisig` beside it).
    File(PathBuf),
    /// A library at an `https://` URL (with `URL.minisig` beside it); plain `http://` only on a
    /// loopback address.
    Url(String),
}

impl Source {
    /// `./x.so`, `/x.so` or an existing file: a file; anything else: a registry reference.
    pub fn parse(text: &str) -> Source {
        if text.starts_with("https://") || text.starts_with("http://") {
            return Source::Url(text.to_owned());
        }
        let path = Path::new(text);
        if text.starts_with("./")
            || text.starts_with("../")
            || path.is_absolute()
            || (path.is_file() && !text.starts_with("oci://"))
        {
            Source::File(path.to_path_buf())
        } else {
            Source::Registry(text.to_owned())
        }
    }

    /// How receipts and messages name it.
    pub fn describe(&self) -> String {
        match self {
            Source::Registry(r) | Source::Url(r) => r.clone(),
            Source::File(p) => std::path::absolute(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string(),
        }
    }
}

/// A plugin fetched, verified and loaded in its staging directory, ready to be put in place.
#[derive(Debug)]
pub struct Staged {
    /// Held locked while the install runs (see `managed`); declared first, so it is closed
    /// before the staging directory it lies in is removed.
    _held: std::fs::File,
    staging: tempfile::TempDir,
    /// The plugin's name.
    pub plugin: String,
    /// The receipt it will get.
    pub receipt: Receipt,
    /// Its tools, resources and prompts, as the lock file pins them.
    pub pins: PinLock,
    /// The plugin manifest its library reports.
    pub manifest: Value,
    /// What its declared permissions would not grant (relative paths, malformed endpoints).
    pub permission_problems: Vec<String>,
}

impl Staged {
    fn library(&self) -> PathBuf {
        self.staging.path().join(&self.receipt.file)
    }
}

/// Fetch the plugin at `source` into a staging directory of the managed tool directory and check
/// it: signature (required), ABI and build, load, definitions against the package's manifest.
pub fn fetch(
    config: &Config,
    source: &Source,
    options: &HostOptions,
) -> Result<Staged, InstallError> {
    let keys = trusted_keys(config)?;
    let (staging, held) = managed::staging_dir(config)?;
    let Fetched {
        package_manifest,
        build,
        digest,
    } = fetch_build(
        source,
        &package::host_platform(),
        &package::Limits::of(&config.limits.packages),
    )?;
    let (library, signer) = stage_signed(&staging, &build, &keys, source)?;
    let library_digest = package::sha256_digest(&build.library);
    let manifest_digest = signed_manifest(package_manifest.as_ref(), &signer, source)?;
    let (manifest, plugin) = check_staged(
        config,
        &library,
        package_manifest.as_ref().map(|(m, _)| m),
        &build.file_name,
        options,
    )?;
    check_signed_for(&signer, &plugin, &build.platform)?;
    warn_unbound_grants(config, &plugin, &build.file_name);
    let manifest_digest = manifest_digest.unwrap_or_else(|| {
        package::sha256_digest(crate::config::lock::canonical_json(&manifest).as_bytes())
    });
    let declared = declared_of(&manifest)?;
    let (_, permission_problems) = installed::to_permissions(&declared);
    let pins = staged_pins(config, staging.path(), &plugin, &declared, options)?;
    let receipt = Receipt {
        file: build.file_name.clone(),
        source: source.describe(),
        digest,
        library_digest,
        manifest_digest,
        platform: build.platform.clone(),
        version: manifest["version"].as_str().unwrap_or("?").to_owned(),
        signer: signer.key.clone(),
        signer_key_id: signer.key_id.clone(),
        permissions: declared,
        installed_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    Ok(Staged {
        staging,
        _held: held,
        plugin,
        receipt,
        pins,
        manifest,
        permission_problems,
    })
}

/// The keys an installed plugin must be signed by: `trust.keys`, which may not be empty.
fn trusted_keys(config: &Config) -> Result<Keyring, InstallError> {
    let keys = Keyring::from_config(&config.trust);
    if keys.is_empty() {
        return Err(InstallError::Signature(
            "trust.keys is empty: installed plugins must be signed by a trusted key (add the \
             publisher's public key under trust.keys)"
                .into(),
        ));
    }
    Ok(keys)
}

/// What a source gave: the package's manifest with its digest (registries only), the build for
/// this platform, and the package's digest (registries only).
struct Fetched {
    package_manifest: Option<(Value, String)>,
    build: package::PlatformBuild,
    digest: Option<String>,
}

/// The build of the plugin at `source` for `platform`, each part within `limits`.
fn fetch_build(
    source: &Source,
    platform: &str,
    limits: &package::Limits,
) -> Result<Fetched, InstallError> {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("tokio runtime"))
    };
    match source {
        Source::Registry(text) => {
            let reference = oci::parse_reference(text)?;
            let pulled = runtime()?.block_on(oci::pull(&reference, platform, limits))?;
            let manifest: Value = serde_json::from_slice(&pulled.manifest_json).map_err(|e| {
                InstallError::Package(format!("{text}: the plugin manifest is not JSON: {e}"))
            })?;
            let manifest_digest = package::sha256_digest(&pulled.manifest_json);
            Ok(Fetched {
                package_manifest: Some((manifest, manifest_digest)),
                build: pulled.build,
                digest: Some(pulled.digest),
            })
        }
        Source::File(path) => Ok(Fetched {
            package_manifest: None,
            build: read_file_build(path, platform, limits)?,
            digest: None,
        }),
        Source::Url(url) => Ok(Fetched {
            package_manifest: None,
            build: runtime()?.block_on(download::build(url, platform, limits))?,
            digest: None,
        }),
    }
}

/// Write `build` and its signature into `staging` and check the signature against `keys`: the
/// library's path and who signed it.
fn stage_signed(
    staging: &tempfile::TempDir,
    build: &package::PlatformBuild,
    keys: &Keyring,
    source: &Source,
) -> Result<(PathBuf, crate::plugins::signature::Signer), InstallError> {
    let Some(signature) = &build.signature else {
        return Err(InstallError::Signature(format!(
            "{}: no signature for {} ({}): plugins are installed only when signed by a key of \
             trust.keys",
            source.describe(),
            build.platform,
            build.file_name
        )));
    };
    let library = staging.path().join(&build.file_name);
    std::fs::write(&library, &build.library).map_err(io(library.display()))?;
    std::fs::write(signature_path(&library), signature).map_err(io(library.display()))?;
    let signer = keys
        .check(&library, &library, true)
        .map_err(|e| InstallError::Signature(format!("{}: {e}", source.describe())))?
        .ok_or_else(|| InstallError::Signature("unsigned".into()))?;
    Ok((library, signer))
}

/// Refuse a signature whose trusted comment names another plugin or another platform than the
/// build it came with (a library moved under another name or platform in a package).
fn check_signed_for(
    signer: &crate::plugins::signature::Signer,
    plugin: &str,
    platform: &str,
) -> Result<(), InstallError> {
    for (key, actual) in [("plugin", plugin), ("platform", platform)] {
        if let Some(signed) = package::comment_field(&signer.comment, key)
            && signed != actual
        {
            return Err(InstallError::Signature(format!(
                "the signature was made for {key} {signed}, but this is {key} {actual}"
            )));
        }
    }
    Ok(())
}

/// The package manifest's digest, when there is one: the signature names the manifest it was
/// made with, and it must be that manifest, byte for byte.
fn signed_manifest(
    package_manifest: Option<&(Value, String)>,
    signer: &crate::plugins::signature::Signer,
    source: &Source,
) -> Result<Option<String>, InstallError> {
    let Some((_, digest)) = package_manifest else {
        return Ok(None);
    };
    let signed = package::comment_field(&signer.comment, "manifest");
    if signed != Some(digest.as_str()) {
        return Err(InstallError::Signature(format!(
            "{}: the signature covers manifest {}, but the package's manifest is {digest}",
            source.describe(),
            signed.unwrap_or("(none named)")
        )));
    }
    Ok(Some(digest.clone()))
}

/// Load the staged `library` as `check` does (probe, then a sandboxed worker), with the grants
/// the package's manifest declares, and compare what it defines with that manifest: the manifest
/// the library reports, and its plugin name.
fn check_staged(
    config: &Config,
    library: &Path,
    package_manifest: Option<&Value>,
    file_name: &str,
    options: &HostOptions,
) -> Result<(Value, String), InstallError> {
    let plugin_hint = package_manifest.and_then(|m| m["plugin"].as_str().map(str::to_owned));
    let declared_hint = package_manifest
        .map(declared_of)
        .transpose()?
        .unwrap_or_default();
    let mut check_config = config.clone();
    check_config.trust.require_signature = true;
    let staging = library.parent().unwrap_or(library);
    if let Some(name) = &plugin_hint {
        grant_declared(&mut check_config, name, &declared_hint, staging);
    }
    bind_to_staging(&mut check_config, staging);
    let report = check_file(&check_config, library, options)
        .map_err(|e| InstallError::Refused(format!("{file_name}: {e}")))?;
    let manifest = report["manifest"].clone();
    let plugin = manifest["plugin"]
        .as_str()
        .ok_or_else(|| InstallError::Refused("the library reports no plugin name".into()))?
        .to_owned();
    if let Some(claimed) = package_manifest {
        compare_definitions(claimed, &manifest)?;
    }
    Ok((manifest, plugin))
}

/// A library file and the signature beside it, as a package build.
fn read_file_build(
    path: &Path,
    platform: &str,
    limits: &package::Limits,
) -> Result<package::PlatformBuild, InstallError> {
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| oci::installable_file_name(n))
        .ok_or_else(|| {
            InstallError::Package(format!(
                "{}: not a plugin library (expected {}NAME.{})",
                path.display(),
                std::env::consts::DLL_PREFIX,
                std::env::consts::DLL_EXTENSION
            ))
        })?
        .to_owned();
    let library = read_limited(path, limits.library)?;
    let sig_path = signature_path(path);
    let signature = match read_limited(&sig_path, limits.signature) {
        Ok(bytes) => Some(String::from_utf8(bytes).map_err(|_| {
            InstallError::Signature(format!("{} is not a signature", sig_path.display()))
        })?),
        Err(_) if !sig_path.exists() => None,
        Err(e) => return Err(e),
    };
    Ok(package::PlatformBuild {
        platform: platform.to_owned(),
        file_name,
        library,
        signature,
    })
}

fn read_limited(path: &Path, limit: package::Limit) -> Result<Vec<u8>, InstallError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit.max.saturating_add(1)).read_to_end(&mut bytes))
        .map_err(io(path.display()))?;
    if bytes.len() as u64 > limit.max {
        return Err(limit.refuse_over(path.display()));
    }
    Ok(bytes)
}

/// The permissions a plugin manifest (JSON) declares.
fn declared_of(manifest: &Value) -> Result<DeclaredPermissions, InstallError> {
    match manifest.get("permissions") {
        None | Some(Value::Null) => Ok(DeclaredPermissions::default()),
        Some(p) => serde_json::from_value(p.clone()).map_err(|e| {
            InstallError::Package(format!("the manifest's permissions are malformed: {e}"))
        }),
    }
}

/// Give plugin `name` its declared permissions in `config`, unless the operator set some, for
/// loading its build staged in directory `staging` (see [`bind_to_staging`]).
fn grant_declared(config: &mut Config, name: &str, declared: &DeclaredPermissions, staging: &Path) {
    let settings = config.plugins.entry(name.to_owned()).or_default();
    if settings.permissions == crate::config::Permissions::default() {
        settings.permissions = installed::to_permissions(declared).0;
    }
    bind_to_staging(config, staging);
}

/// Bind the plugin settings of `config` that would take a file of the managed directory to
/// directory `staging` (their `from`), where the install loads the build it checks: the loads
/// then do not warn of grants by name about a staging copy ([`warn_unbound_grants`] says that
/// once, of the installed file), and a binding to the managed directory takes the staged build.
fn bind_to_staging(config: &mut Config, staging: &Path) {
    let managed = config.installed_dir();
    for settings in config.plugins.values_mut() {
        let takes_installed = settings.from.is_empty()
            || settings
                .from
                .iter()
                .any(|f| *f == managed || f.parent() == Some(managed.as_path()));
        if takes_installed {
            settings.from = vec![staging.to_path_buf()];
        }
    }
}

/// Warn, once per install, as a running host would of the installed file: the operator grants
/// plugin `name` permissions by the name its file gives itself alone (`plugins.<name>.permissions`
/// without `from` or `signed_by`), so any file in the managed directory claiming the name would
/// get them. Nothing when the operator configured no permissions (the declared ones are bound to
/// the installed file by its receipt).
fn warn_unbound_grants(config: &Config, name: &str, file: &str) {
    let Some(settings) = config.plugins.get(name) else {
        return;
    };
    if settings.permissions != crate::config::Permissions::default()
        && settings.from.is_empty()
        && settings.signed_by.is_empty()
    {
        tracing::warn!(
            "{} gets the permissions of plugins.{name} by the name it gives itself; bind them to \
             its file or signer with plugins.{name}.from or signed_by",
            config.installed_dir().join(file).display()
        );
    }
}

/// Refuse a library whose definitions (or name, version, permissions) are not what the package's
/// manifest says.
fn compare_definitions(claimed: &Value, actual: &Value) -> Result<(), InstallError> {
    let empty = Value::Array(Vec::new());
    let mut differing = Vec::new();
    for key in [
        "plugin",
        "version",
        "tools",
        "resources",
        "prompts",
        "permissions",
    ] {
        let a = claimed.get(key).filter(|v| !v.is_null()).unwrap_or(&empty);
        let b = actual.get(key).filter(|v| !v.is_null()).unwrap_or(&empty);
        let a = if *a == Value::Object(Default::default()) {
            &empty
        } else {
            a
        };
        let b = if *b == Value::Object(Default::default()) {
            &empty
        } else {
            b
        };
        if a != b {
            differing.push(key);
        }
    }
    if differing.is_empty() {
        return Ok(());
    }
    Err(InstallError::Refused(format!(
        "the package's manifest does not match its library ({} differ): the definitions shown \
         and signed are not the ones the library serves",
        differing.join(", ")
    )))
}

/// What the host would pin for plugin `plugin` served from `staging` (as from the managed
/// directory: its prefix and settings).
fn staged_pins(
    config: &Config,
    staging: &Path,
    plugin: &str,
    declared: &DeclaredPermissions,
    options: &HostOptions,
) -> Result<PinLock, InstallError> {
    let mut config = config.clone();
    let managed = config.installed_dir();
    let prefix = config
        .tool_dirs
        .iter()
        .find(|d| d.path == managed)
        .map(|d| d.prefix.clone())
        .unwrap_or_default();
    config.tool_dirs = vec![ToolDir {
        path: staging.to_path_buf(),
        prefix,
        isolation: Some(Isolation::Sandbox),
        require_signature: Some(true),
        ..ToolDir::default()
    }];
    config.trust.pinning = PinMode::Off;
    config.load_on_first_call = false;
    grant_declared(&mut config, plugin, declared, staging);
    let host = Host::start(config, options.clone()).map_err(|e| {
        InstallError::Refused(format!("cannot load it to list its definitions: {e}"))
    })?;
    let pins = host.registry().pins().of_plugin(plugin);
    host.shutdown();
    Ok(pins)
}

/// Every installed plugin's receipt.
pub fn installed(config: &Config) -> Result<Receipts, InstallError> {
    Receipts::read(&config.installed_dir()).map_err(io("receipts"))
}

/// What an update would change: the definitions against the pins, and the permissions.
#[derive(Debug)]
pub struct UpdatePlan {
    /// The installed version's receipt.
    pub current: Receipt,
    /// Definitions that differ from the lock file's pins (old and new text).
    pub definitions: Vec<pins::Difference>,
    /// Permissions added (`+ read /x`) and removed (`- net h:1`).
    pub permissions: Vec<String>,
    /// The signer changed (key id from, to).
    pub new_signer: Option<(String, String)>,
    /// The digest is the one installed: nothing to do.
    pub up_to_date: bool,
}

/// Compare a staged new version of an installed plugin with what is installed and pinned.
pub fn plan_update(config: &Config, staged: &Staged) -> Result<UpdatePlan, InstallError> {
    let receipts = installed(config)?;
    let current = receipts
        .plugins
        .get(&staged.plugin)
        .cloned()
        .ok_or_else(|| InstallError::NotInstalled(staged.plugin.clone()))?;
    let pinned = PinLock::read(&config.lock_path()).of_plugin(&staged.plugin);
    let definitions = pins::compare(&staged.pins, &pinned);
    let permissions = permission_diff(&current.permissions, &staged.receipt.permissions);
    let new_signer = (current.signer_key_id != staged.receipt.signer_key_id).then(|| {
        (
            format!("{} ({})", current.signer, current.signer_key_id),
            format!(
                "{} ({})",
                staged.receipt.signer, staged.receipt.signer_key_id
            ),
        )
    });
    let up_to_date = current.library_digest == staged.receipt.library_digest
        && current.manifest_digest == staged.receipt.manifest_digest;
    Ok(UpdatePlan {
        current,
        definitions,
        permissions,
        new_signer,
        up_to_date,
    })
}

/// `+ kind value` for each permission `new` adds, `- kind value` for each it drops.
pub fn permission_diff(old: &DeclaredPermissions, new: &DeclaredPermissions) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, a, b) in [
        ("read", &old.read, &new.read),
        ("write", &old.write, &new.write),
        ("net", &old.net, &new.net),
        ("env", &old.env, &new.env),
        ("credentials", &old.credentials, &new.credentials),
    ] {
        out.extend(
            b.iter()
                .filter(|v| !a.contains(v))
                .map(|v| format!("+ {kind} {v}")),
        );
        out.extend(
            a.iter()
                .filter(|v| !b.contains(v))
                .map(|v| format!("- {kind} {v}")),
        );
    }
    out
}

/// The lines that describe declared permissions (`read /x`, ...), or `(none)`.
pub fn permission_lines(p: &DeclaredPermissions) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, list) in [
        ("read", &p.read),
        ("write", &p.write),
        ("net", &p.net),
        ("env", &p.env),
        ("credentials", &p.credentials),
    ] {
        out.extend(list.iter().map(|v| format!("{kind} {v}")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_and_permission_diffs() {
        assert_eq!(
            Source::parse("./libx.so"),
            Source::File(PathBuf::from("./libx.so"))
        );
        assert_eq!(
            Source::parse("https://example.com/libx.so"),
            Source::Url("https://example.com/libx.so".into())
        );
        assert_eq!(
            Source::parse("127.0.0.1:5000/tools/x:1.0"),
            Source::Registry("127.0.0.1:5000/tools/x:1.0".into())
        );
        let old = DeclaredPermissions {
            read: vec!["/a".into()],
            net: vec!["h:1".into()],
            ..DeclaredPermissions::default()
        };
        let new = DeclaredPermissions {
            read: vec!["/a".into(), "/b".into()],
            ..DeclaredPermissions::default()
        };
        assert_eq!(permission_diff(&old, &new), ["+ read /b", "- net h:1"]);
        assert_eq!(permission_lines(&new), ["read /a", "read /b"]);
    }

    #[test]
    fn definitions_that_differ_from_the_package_manifest_are_named() {
        let claimed = serde_json::json!({"plugin": "p", "version": "1", "tools": [{"name": "a"}]});
        let mut actual = claimed.clone();
        assert!(compare_definitions(&claimed, &actual).is_ok());
        actual["tools"][0]["name"] = "b".into();
        let err = compare_definitions(&claimed, &actual)
            .expect_err("differs")
            .to_string();
        assert!(
            err.contains("tools differ") || err.contains("(tools"),
            "{err}"
        );
    }
}
