//! Hot reload: watch the tool directories (plugin files and their signatures, and the installed
//! plugins' receipts), the configuration file and the lock file (notify, no recursion) and rescan
//! the host once a change is complete.
//!
//! A copy in progress or a cargo build produces several events (`Modify(Data)` bursts, `Remove` then
//! `Create`, a rename). A change known to be complete — a rename into place, a removal, a file closed
//! after writing — is rescanned after [`SETTLE`], long enough to take the rest of its burst along; a
//! file still being written (created or modified, not yet closed) holds the rescan until nothing
//! happened for [`DEBOUNCE`] (also where the platform reports no closes), and so does a change that
//! comes less than [`DEBOUNCE`] after the last rescan: a burst of replacements (a build, a deploy
//! script) makes a fast first rescan and one more at its end. The host's own reads of
//! plugin files produce `Access` events, which are ignored — otherwise every reload would trigger
//! the next.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher as _};

use crate::config::Config;
use crate::host::Host;
use crate::plugins::discovery::is_plugin_file;
use crate::plugins::signature::is_signature_file;

/// How long the directories must stay quiet before a rescan while a file is still being written.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// How long a burst of complete changes (renames, removals, closed writes) is given to end before
/// the rescan.
pub const SETTLE: Duration = Duration::from_millis(15);

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

/// The directories to watch: every tool directory that exists (the parent of one that does not yet,
/// so its creation is seen), the configuration's directory, and the lock file's when definitions
/// are pinned.
fn targets(config: &Config) -> BTreeSet<PathBuf> {
    let mut dirs: BTreeSet<PathBuf> = config
        .tool_dirs
        .iter()
        .filter(|d| !d.is_upstream())
        .filter_map(|d| match d.path.is_dir() {
            true => Some(d.path.clone()),
            false => d
                .path
                .parent()
                .filter(|p| p.is_dir())
                .map(Path::to_path_buf),
        })
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

/// Whether an event may change what the host serves (a file closed after writing ends a change).
fn relevant(event: &notify::Event, config: &Config) -> bool {
    if matches!(event.kind, EventKind::Access(_)) && !closed_after_writing(event) {
        return false;
    }
    event.paths.iter().any(|p| {
        let in_tool_dir = p
            .parent()
            .is_some_and(|parent| config.tool_dirs.iter().any(|d| d.path == parent));
        let is_tool_dir = config.tool_dirs.iter().any(|d| d.path == *p);
        is_tool_dir
            || (in_tool_dir && (is_plugin_file(p) || is_signature_file(p)))
            || is_receipts_file(p, config)
            || is_config_file(p, config)
            || (config.pinning_in_use() && *p == config.lock_path())
    })
}

/// The managed directory's receipts: installed plugins' declared grants, which `update` narrows
/// and widens around replacing a library.
fn is_receipts_file(path: &Path, config: &Config) -> bool {
    path.file_name()
        .is_some_and(|n| n == crate::config::installed::RECEIPTS_FILE)
        && path.parent() == Some(config.installed_dir().as_path())
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

/// Start watching for `host`: the watches are in place when this returns.
pub fn watch(host: Host) -> notify::Result<Watcher> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let (watcher, watched) = set_up(&host, tx.clone())?;
    spawn_thread(tx, move || run(host, watcher, watched, rx))
        .map_err(|e| notify::Error::generic(&e.to_string()))
}

/// Start watching for `host` off the caller's thread: the watches are set up on the watcher's own
/// thread (a start serving its first request does not wait for them, and makes one thread fewer).
/// When they cannot be, hot reload is off (logged) and [`Watcher::rescan`] still rescans.
pub fn watch_in_background(host: Host) -> std::io::Result<Watcher> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let fs_tx = tx.clone();
    spawn_thread(tx, move || match set_up(&host, fs_tx) {
        Ok((watcher, watched)) => run(host, watcher, watched, rx),
        Err(e) => {
            tracing::warn!("hot reload disabled: cannot watch files: {e}");
            rescan_on_request(&host, &rx);
        }
    })
}

fn spawn_thread(
    tx: mpsc::Sender<Msg>,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<Watcher> {
    let thread = std::thread::Builder::new()
        .name("mcp-watch".into())
        .spawn(body)?;
    Ok(Watcher {
        tx,
        thread: Some(thread),
    })
}

/// The file watcher, sending to `tx`, with its watches in place.
fn set_up(
    host: &Host,
    tx: mpsc::Sender<Msg>,
) -> notify::Result<(notify::RecommendedWatcher, BTreeSet<PathBuf>)> {
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = tx.send(Msg::Fs(event));
    })?;
    let mut watched = BTreeSet::new();
    rewatch(&mut watcher, &mut watched, targets(&host.config()));
    Ok((watcher, watched))
}

/// Without file events: rescan when asked, until stopped.
fn rescan_on_request(host: &Host, rx: &mpsc::Receiver<Msg>) {
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Rescan => rescan(host),
            Msg::Stop => return,
            Msg::Fs(_) => {}
        }
    }
}

/// A full reload (configuration and files).
fn rescan(host: &Host) {
    let report = host.reload();
    tracing::debug!("rescan: {report:?}");
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
    // full quiet period, so a file being written right now is read once complete.
    if !quiet(&host, &rx, Writing::held()) {
        return;
    }
    loop {
        rescan(&host);
        let reloaded = Instant::now();
        rewatch(&mut watcher, &mut watched, targets(&host.config()));
        let Some(mut writing) = next_change(&host, &rx) else {
            return;
        };
        // Another change this soon is likely part of a burst: wait for its end.
        writing.hold |= reloaded.elapsed() < DEBOUNCE;
        if !quiet(&host, &rx, writing) {
            return;
        }
    }
}

/// Files still being written (created or modified, not yet closed, renamed or removed).
#[derive(Debug, Default)]
struct Writing {
    paths: HashSet<PathBuf>,
    /// Wait for a full quiet period whatever the events say (at start, when a change of unknown
    /// state may be in progress; in a burst of changes).
    hold: bool,
}

impl Writing {
    fn held() -> Self {
        Writing {
            hold: true,
            ..Writing::default()
        }
    }

    /// Follow what `event` says about the files it names.
    fn note(&mut self, event: &notify::Event) {
        let complete = closed_after_writing(event)
            || matches!(
                event.kind,
                EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
            );
        for path in &event.paths {
            if complete {
                self.paths.remove(path);
            } else if matches!(event.kind, EventKind::Create(_) | EventKind::Modify(_)) {
                self.paths.insert(path.clone());
            }
        }
    }

    /// How long to wait for the next event before the change counts as done.
    fn quiet_period(&self) -> Duration {
        if self.hold || !self.paths.is_empty() {
            DEBOUNCE
        } else {
            SETTLE
        }
    }
}

/// A file was closed after being written to: the write is complete.
fn closed_after_writing(event: &notify::Event) -> bool {
    matches!(
        event.kind,
        EventKind::Access(AccessKind::Close(AccessMode::Write))
    )
}

/// Wait for a relevant change or a rescan request; `None` when the watcher is stopping.
fn next_change(host: &Host, rx: &mpsc::Receiver<Msg>) -> Option<Writing> {
    loop {
        match rx.recv() {
            Ok(Msg::Fs(Ok(event))) if relevant(&event, &host.config()) => {
                let mut writing = Writing::default();
                writing.note(&event);
                return Some(writing);
            }
            Ok(Msg::Fs(Ok(_))) => {}
            Ok(Msg::Fs(Err(e))) => tracing::warn!("file watch error: {e}"),
            Ok(Msg::Rescan) => return Some(Writing::default()),
            Ok(Msg::Stop) | Err(_) => return None,
        }
    }
}

/// Debounce: wait until the change is over — no event for [`SETTLE`] once every file written to
/// was closed, renamed or removed, else for [`DEBOUNCE`]; `false` when the watcher is stopping.
fn quiet(host: &Host, rx: &mpsc::Receiver<Msg>, mut writing: Writing) -> bool {
    loop {
        match rx.recv_timeout(writing.quiet_period()) {
            Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return false,
            Ok(Msg::Fs(Ok(event))) if relevant(&event, &host.config()) => writing.note(&event),
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, RemoveKind, RenameMode};

    fn event(kind: EventKind, path: &str) -> notify::Event {
        notify::Event::new(kind).add_path(PathBuf::from(path))
    }

    #[test]
    fn a_write_holds_the_rescan_until_its_file_is_closed_and_a_rename_settles_at_once() {
        let mut w = Writing::default();
        w.note(&event(EventKind::Create(CreateKind::File), "/t/liba.so"));
        w.note(&event(
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            "/t/liba.so",
        ));
        assert_eq!(w.quiet_period(), DEBOUNCE);
        w.note(&event(
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            "/t/liba.so",
        ));
        assert_eq!(w.quiet_period(), SETTLE);

        let mut w = Writing::default();
        w.note(&event(
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            "/t/libb.so",
        ));
        w.note(&event(EventKind::Remove(RemoveKind::File), "/t/libc.so"));
        assert_eq!(w.quiet_period(), SETTLE);
        assert_eq!(Writing::held().quiet_period(), DEBOUNCE);
    }
}
