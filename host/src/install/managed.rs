//! The managed directory's transactions. `add`, `update` and `remove` may run in several processes
//! at once: each change to the directory — its files, `installed.json` and the lock file's entries
//! — is made under an exclusive lock on `<data_dir>/plugins/.lock` (released when the process
//! exits, however it exits), after re-reading the receipts, and every file is replaced by rename.
//! A staging directory is held by its own lock for as long as its install runs, so one process's
//! clean-up of what an interrupted install left never removes another's work in progress.

use std::fs::File;
use std::path::Path;

use mcp_plugin_sdk::wire::DeclaredPermissions;

use super::{InstallError, Staged, io};
use crate::config::Config;
use crate::config::installed::{Receipt, Receipts};
use crate::config::lock::{InstalledPin, PinLock};
use crate::plugins::signature::signature_path;

/// The lock file serialising changes to the managed directory.
pub const LOCK_FILE: &str = ".lock";

/// The file in a staging directory its install holds locked while it runs.
const HELD_FILE: &str = ".held";

/// The exclusive lock on the managed directory, released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Lock managed directory `dir` (created if missing), waiting for another process's transaction
/// to end. Whoever else rewrites the lock file (`mcp-host pin`) holds it too, so that the entries
/// an install records there are not lost.
pub fn lock_dir(dir: &Path) -> Result<DirLock, InstallError> {
    std::fs::create_dir_all(dir).map_err(io(dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io(path.display()))?;
    file.lock()
        .map_err(io(format!("locking {}", path.display())))?;
    Ok(DirLock { _file: file })
}

/// A fresh staging directory in the managed directory, held (locked) by this process, after
/// removing the staging directories of installs that are no longer running.
pub(super) fn staging_dir(config: &Config) -> Result<(tempfile::TempDir, File), InstallError> {
    let dir = config.installed_dir();
    let _lock = lock_dir(&dir)?;
    remove_stale_staging(&dir);
    let staging = tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(&dir)
        .map_err(io(dir.display()))?;
    let held_path = staging.path().join(HELD_FILE);
    let held = File::create(&held_path).map_err(io(held_path.display()))?;
    held.lock()
        .map_err(io(format!("locking {}", held_path.display())))?;
    Ok((staging, held))
}

/// Remove the `.staging-*` directories no running install holds (called under the directory's
/// lock, which every staging directory is created under, so one without its held file is stale).
fn remove_stale_staging(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(".staging-") {
            continue;
        }
        let in_use = File::open(entry.path().join(HELD_FILE))
            .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)));
        if in_use {
            continue;
        }
        if let Err(e) = std::fs::remove_dir_all(entry.path()) {
            tracing::debug!("cannot remove {}: {e}", entry.path().display());
        }
    }
}

/// What a commit expects to find installed when it takes the lock.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// `add`: nothing of that name.
    Nothing,
    /// `update`: the version the update was planned against (its library digest).
    Version(String),
}

/// Put a staged plugin in place, replacing an installed version of it, and record it in the
/// receipts and the lock file — one transaction. Refused when what is installed is no longer what
/// `expect` says (another `add`, `update` or `remove` came first).
///
/// While the files change, a running host may rescan at any moment; the receipts it reads then
/// grant only what both versions declare (the old version, then the new one's file under the old
/// receipt, which names another file or grants the intersection), so the plugin never runs with a
/// grant the operator did not approve for it, and the last write (the new receipt) makes the host
/// reload it with exactly its own.
pub fn commit(config: &Config, staged: Staged, expect: &Expect) -> Result<Receipt, InstallError> {
    let dir = config.installed_dir();
    let _lock = lock_dir(&dir)?;
    let mut receipts = Receipts::read(&dir).map_err(io("receipts"))?;
    let old = receipts.plugins.get(&staged.plugin).cloned();
    check_expected(&staged.plugin, old.as_ref(), expect)?;
    if let Some(old) = &old {
        let both = intersection(&old.permissions, &staged.receipt.permissions);
        if both != old.permissions {
            let mut narrowed = receipts.clone();
            if let Some(r) = narrowed.plugins.get_mut(&staged.plugin) {
                r.permissions = both;
            }
            narrowed.write(&dir).map_err(io("receipts"))?;
        }
    }
    let library = staged.library();
    let dest = dir.join(&staged.receipt.file);
    std::fs::rename(signature_path(&library), signature_path(&dest)).map_err(io(dest.display()))?;
    std::fs::rename(&library, &dest).map_err(io(dest.display()))?;
    if let Some(old) = &old
        && old.file != staged.receipt.file
    {
        remove_files(&dir, &old.file);
    }
    receipts
        .plugins
        .insert(staged.plugin.clone(), staged.receipt.clone());
    receipts.write(&dir).map_err(io("receipts"))?;
    record_in_lock(
        config,
        &staged.plugin,
        Some((&staged.receipt, &staged.pins)),
    )?;
    Ok(staged.receipt)
}

/// Refuse a commit when the installed version of `plugin` is not the one `expect` names.
fn check_expected(
    plugin: &str,
    installed: Option<&Receipt>,
    expect: &Expect,
) -> Result<(), InstallError> {
    match (expect, installed) {
        (Expect::Nothing, None) => Ok(()),
        (Expect::Nothing, Some(r)) => Err(InstallError::Conflict(format!(
            "{plugin} is already installed (version {}, from {}): use `mcp-host update {plugin}`",
            r.version, r.source
        ))),
        (Expect::Version(digest), Some(r)) if r.library_digest == *digest => Ok(()),
        (Expect::Version(_), Some(r)) => Err(InstallError::Conflict(format!(
            "{plugin} changed while this update ran (now version {} from {}): run the update again",
            r.version, r.source
        ))),
        (Expect::Version(_), None) => Err(InstallError::Conflict(format!(
            "{plugin} was removed while this update ran: nothing updated"
        ))),
    }
}

/// What both `a` and `b` declare.
fn intersection(a: &DeclaredPermissions, b: &DeclaredPermissions) -> DeclaredPermissions {
    let both = |x: &[String], y: &[String]| -> Vec<String> {
        x.iter().filter(|v| y.contains(v)).cloned().collect()
    };
    DeclaredPermissions {
        read: both(&a.read, &b.read),
        write: both(&a.write, &b.write),
        net: both(&a.net, &b.net),
        env: both(&a.env, &b.env),
        credentials: both(&a.credentials, &b.credentials),
    }
}

fn remove_files(dir: &Path, file: &str) {
    let path = dir.join(file);
    for p in [path.clone(), signature_path(&path)] {
        if let Err(e) = std::fs::remove_file(&p)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove {}: {e}", p.display());
        }
    }
}

/// Remove installed plugin `name`: its receipt, files and lock entries, one transaction. A running
/// host unloads it at its next rescan (the directory is watched).
pub fn remove(config: &Config, name: &str) -> Result<Receipt, InstallError> {
    let dir = config.installed_dir();
    let _lock = lock_dir(&dir)?;
    let mut receipts = Receipts::read(&dir).map_err(io("receipts"))?;
    let receipt = receipts
        .plugins
        .remove(name)
        .ok_or_else(|| InstallError::NotInstalled(name.to_owned()))?;
    receipts.write(&dir).map_err(io("receipts"))?;
    remove_files(&dir, &receipt.file);
    record_in_lock(config, name, None)?;
    Ok(receipt)
}

/// Record (or with `None` forget) plugin `plugin`'s install in the lock file: its digests, and its
/// definitions' pins. A lock file that exists but cannot be used is left alone.
fn record_in_lock(
    config: &Config,
    plugin: &str,
    install: Option<(&Receipt, &PinLock)>,
) -> Result<(), InstallError> {
    let path = config.lock_path();
    let mut lock = PinLock::read(&path);
    if lock.problem.is_some() && path.exists() {
        tracing::warn!(
            "Not recording {plugin} in the lock file: {}",
            lock.problem.as_deref().unwrap_or("unusable")
        );
        return Ok(());
    }
    lock.problem = None;
    lock.version = crate::config::lock::LOCK_VERSION;
    match install {
        Some((receipt, pins)) => {
            lock.replace_plugin(plugin, Some(pins));
            lock.installed.insert(
                plugin.to_owned(),
                InstalledPin {
                    source: receipt.source.clone(),
                    digest: receipt.digest.clone(),
                    library_digest: receipt.library_digest.clone(),
                    signer_key_id: receipt.signer_key_id.clone(),
                },
            );
        }
        None => {
            lock.replace_plugin(plugin, None);
            lock.installed.remove(plugin);
        }
    }
    lock.write(&path).map_err(io(path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_staging_directory_survives_another_installs_clean_up() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = Config {
            data_dir: tmp.path().to_path_buf(),
            ..Config::default()
        };
        let (held, _guard) = staging_dir(&config).expect("staging");
        let stale = config.installed_dir().join(".staging-stale");
        std::fs::create_dir_all(&stale).expect("mkdir");
        std::fs::write(stale.join(HELD_FILE), "").expect("held file");
        let (_other, _other_guard) = staging_dir(&config).expect("second staging");
        assert!(held.path().is_dir(), "a running install's staging kept");
        assert!(!stale.exists(), "an unheld staging directory removed");
    }

    #[test]
    fn a_commit_checks_what_is_installed_and_narrows_grants_while_it_replaces() {
        let declared = |read: &[&str]| DeclaredPermissions {
            read: read.iter().map(|s| s.to_string()).collect(),
            ..DeclaredPermissions::default()
        };
        assert_eq!(
            intersection(&declared(&["/a", "/b"]), &declared(&["/b", "/c"])),
            declared(&["/b"])
        );
        assert!(check_expected("p", None, &Expect::Nothing).is_ok());
        assert!(check_expected("p", None, &Expect::Version("sha256:1".into())).is_err());
    }
}
