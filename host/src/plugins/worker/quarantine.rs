//! Quarantine records: a running server writes one file per quarantined plugin (in the user's cache
//! directory, beside the probe cache), so `mcp-host list` — another process — can say which plugins
//! a server has withdrawn and why. A record names the plugin file, its stamp, the server's process
//! id and the reason; it counts only while that file is unchanged and that server runs, and the
//! server removes it when the plugin gets another chance or the server stops. An upstream server
//! (no file of its own) is recorded under its configuration file and `upstream:<name>`, and its
//! record counts while that configuration file is unchanged.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::plugins::slot::FileStamp;

/// Why a running server withdrew a plugin file's tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The plugin file.
    pub file: PathBuf,
    /// Its stamp when it was quarantined.
    pub stamp: String,
    /// The server's process id.
    pub pid: u32,
    /// Why.
    pub reason: String,
}

/// Where records live: `quarantined/` beside the default probe cache.
fn dir() -> Option<PathBuf> {
    Some(
        crate::config::default_probe_cache()?
            .parent()?
            .join("quarantined"),
    )
}

fn path_for(file: &Path) -> Option<PathBuf> {
    let digest = sha2::Sha256::digest(file.to_string_lossy().as_bytes());
    let name: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    Some(dir()?.join(name))
}

/// Record that this process quarantined `file` for `reason` (best effort).
pub(crate) fn write(file: &Path, reason: &str) {
    let (Some(path), Some(stamp)) = (path_for(file), FileStamp::of(file)) else {
        return;
    };
    store(&path, file, stamp.key(), reason);
}

/// Where the record of upstream `entry` (its `upstream:<name>`) of configuration file `config`
/// lives: an upstream has no file of its own, and two configurations may name theirs alike.
fn upstream_path(config: &Path, entry: &Path) -> Option<PathBuf> {
    path_for(&config.join(entry))
}

/// Record that this process quarantined upstream `entry` of configuration file `config` for
/// `reason` (best effort): it counts while that file is unchanged and this process runs.
pub(crate) fn write_upstream(config: &Path, entry: &Path, reason: &str) {
    let (Some(path), Some(stamp)) = (upstream_path(config, entry), FileStamp::of(config)) else {
        return;
    };
    store(&path, entry, stamp.key(), reason);
}

/// Remove this process's record for upstream `entry` of `config`, if it has one.
pub(crate) fn clear_upstream(config: &Path, entry: &Path) {
    if let Some(path) = upstream_path(config, entry)
        && read(&path).is_some_and(|r| r.pid == std::process::id())
    {
        let _ = std::fs::remove_file(path);
    }
}

/// The quarantine of upstream `entry` of configuration file `config` by a server that is
/// still running, while that file is unchanged.
pub fn recorded_upstream(config: &Path, entry: &Path) -> Option<Record> {
    let record = read(&upstream_path(config, entry)?)?;
    let unchanged = FileStamp::of(config).is_some_and(|s| s.key() == record.stamp);
    (unchanged && record.file == entry && running(record.pid)).then_some(record)
}

/// Write the record of `file` (stamp `stamp`, `reason`) at `path`, atomically.
fn store(path: &Path, file: &Path, stamp: String, reason: &str) {
    let record = Record {
        file: file.to_path_buf(),
        stamp,
        pid: std::process::id(),
        reason: reason.to_owned(),
    };
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&tmp, serde_json::to_vec(&record).unwrap_or_default()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!("quarantine record not written to {}: {e}", path.display());
    }
}

/// Remove this process's record for `file`, if it has one.
pub(crate) fn clear(file: &Path) {
    if let Some(path) = path_for(file)
        && read(&path).is_some_and(|r| r.pid == std::process::id())
    {
        let _ = std::fs::remove_file(path);
    }
}

fn read(path: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The quarantine of `file` by a server that is still running, while the file is unchanged.
pub fn recorded(file: &Path) -> Option<Record> {
    let record = read(&path_for(file)?)?;
    let unchanged = FileStamp::of(file).is_some_and(|s| s.key() == record.stamp);
    (unchanged && record.file == file && running(record.pid)).then_some(record)
}

#[cfg(unix)]
fn running(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    // EPERM means it exists but belongs to someone else.
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

#[cfg(not(unix))]
fn running(_pid: u32) -> bool {
    true
}
