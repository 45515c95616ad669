//! Hot reload: watch the tool directories (plugin files and their signatures), the configuration
//! file and the lock file (notify, no recursion) and rescan the host after a quiet period.
//!
//! A copy in progress or a cargo build produces several events (`Modify(Data)` bursts, `Remove` then
//! `Create`, a rename): they are debounced into one rescan once nothing happened for
//! [`DEBOUNCE`]. The host's own reads of plugin files produce `Access` events, which are ignored —
//! otherwise every reload would trigger the next.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher as _};

use crate::config::Config;
use crate::host::Host;
use crate::plugins::discovery::is_plugin_file;
use crate::plugins::signature::is_signature_file;

/// How long the directories must stay quiet before a rescan.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

enum Msg {
    Fs(notify::Result<notify::Event>),
    Rescan,
    Stop,
}

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct Watcher {
    tx: mpsc::Sender<Msg>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Ask for a full rescan now (e.g. on SIGHUP), re-reading the configuration.
    pub fn rescan(&self) {
        let _ = self.tx.send(Msg::Rescan);
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The directories to watch: every tool directory that exists, the configuration's directory, and
/// the lock file's when definitions are pinned.
fn targets(config: &Config) -> BTreeSet<PathBuf> {
    let mut dirs: BTreeSet<PathBuf> = config
        .tool_dirs
        .iter()
        .map(|d| d.path.clone())
        .filter(|p| p.is_dir())
        .collect();
    if let Some(dir) = config.source.as_ref().and_then(|s| s.parent()) {
        dirs.insert(dir.to_path_buf());
    }
    if config.pinning_in_use()
        && let Some(dir) = config.lock_path().parent().filter(|d| d.is_dir())
    {
        dirs.insert(dir.to_path_buf());
    }
    dirs
}

/// Whether an event may change what the host serves.
fn relevant(event: &notify::Event, config: &Config) -> bool {
    if matches!(event.kind, EventKind::Access(_)) {
        return false;
    }
    event.paths.iter().any(|p| {
        let in_tool_dir = p
            .parent()
            .is_some_and(|parent| config.tool_dirs.iter().any(|d| d.path == parent));
        (in_tool_dir && (is_plugin_file(p) || is_signature_file(p)))
            || is_config_file(p, config)
            || (config.pinning_in_use() && *p == config.lock_path())
    })
}

fn is_config_file(path: &Path, config: &Config) -> bool {
    let Some(source) = &config.source else {
        return false;
    };
    if path == source {
        return true;
    }
    let same_dir = path.parent() == source.parent();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    same_dir && name.starts_with("config.") && name.ends_with(".yaml")
}

/// Start watching for `host`.
pub fn watch(host: Host) -> notify::Result<Watcher> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let fs_tx = tx.clone();
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = fs_tx.send(Msg::Fs(event));
    })?;
    let mut watched = BTreeSet::new();
    rewatch(&mut watcher, &mut watched, targets(&host.config()));
    let thread = std::thread::Builder::new()
        .name("mcp-watch".into())
        .spawn(move || run(host, watcher, watched, rx))
        .map_err(|e| notify::Error::generic(&e.to_string()))?;
    Ok(Watcher {
        tx,
        thread: Some(thread),
    })
}

fn rewatch(
    watcher: &mut notify::RecommendedWatcher,
    watched: &mut BTreeSet<PathBuf>,
    wanted: BTreeSet<PathBuf>,
) {
    for gone in watched.difference(&wanted) {
        let _ = watcher.unwatch(gone);
    }
    for new in wanted.difference(watched) {
        match watcher.watch(new, RecursiveMode::NonRecursive) {
            Ok(()) => tracing::debug!("watching {}", new.display()),
            Err(e) => tracing::warn!("cannot watch {}: {e}", new.display()),
        }
    }
    *watched = wanted;
}

fn run(
    host: Host,
    mut watcher: notify::RecommendedWatcher,
    mut watched: BTreeSet<PathBuf>,
    rx: mpsc::Receiver<Msg>,
) {
    // Catch up first: whatever changed between the host's start and the watches being in place
    // (the configuration in any of its layers, or a plugin file) produced no event. It waits for a
    // quiet period like any change, so a file being written right now is read once complete.
    if !quiet(&rx) {
        return;
    }
    loop {
        let report = host.reload();
        tracing::debug!("rescan: {report:?}");
        rewatch(&mut watcher, &mut watched, targets(&host.config()));
        if !(next_change(&host, &rx) && quiet(&rx)) {
            return;
        }
    }
}

/// Wait for a relevant change or a rescan request; `false` when the watcher is stopping.
fn next_change(host: &Host, rx: &mpsc::Receiver<Msg>) -> bool {
    loop {
        match rx.recv() {
            Ok(Msg::Fs(Ok(event))) if relevant(&event, &host.config()) => return true,
            Ok(Msg::Fs(Ok(_))) => {}
            Ok(Msg::Fs(Err(e))) => tracing::warn!("file watch error: {e}"),
            Ok(Msg::Rescan) => return true,
            Ok(Msg::Stop) | Err(_) => return false,
        }
    }
}

/// Debounce: wait until nothing happened for [`DEBOUNCE`]; `false` when the watcher is stopping.
fn quiet(rx: &mpsc::Receiver<Msg>) -> bool {
    loop {
        match rx.recv_timeout(DEBOUNCE) {
            Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return false,
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => return true,
        }
    }
}
