//! The copy cache: private copies of plugin files kept across runs, so a host started for every
//! client session (Claude Desktop, Cursor) does not copy megabytes of unchanged plugins each time.
//!
//! A plugin is never loaded from its tool directory, where it may be overwritten while mapped; it
//! is loaded from a private copy. A copy made for a file with a given identity (size, modification
//! and change times, inode — see [`FileStamp`]) is kept in `<cache>/copies/<file>/` and used again
//! while the file keeps that identity. The change time cannot be set back by anyone (writing,
//! `touch -d` or restoring a modification time all move it), so a file changed in place never
//! reuses a copy of its former contents. A copy is only kept when the file's identity did not
//! change while it was copied; a file's older copies are removed when a new one is made, once they
//! are a minute old (a process that still maps one keeps its mapping), and the copies of files
//! that no longer exist are pruned. A kept copy is handed out once per process: loading a path the process already
//! opened would give back the same image, so a reload takes an ordinary private copy.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::slot::FileStamp;

/// The file in a plugin's cache directory naming its source file.
const SOURCE: &str = "source";

/// The kept copies this process has handed out: each is opened once, and never removed by
/// [`discard`]. Process-wide on purpose, not a field of one host's cache: the dynamic loader
/// keeps one image per path for the whole process, so a second host opening a copy the first one
/// opened would get the first one's image (and its state) back.
static HANDED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

fn handed() -> std::sync::MutexGuard<'static, Option<HashSet<PathBuf>>> {
    HANDED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Remove a private copy once it is no longer needed (opened, or refused) — unless it is a kept
/// copy of the cache, which the next run may use.
pub(crate) fn discard(copy: &Path) {
    if !handed().as_ref().is_some_and(|h| h.contains(copy)) {
        let _ = std::fs::remove_file(copy);
    }
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Where copies are kept (`<cache>/copies`, created owner-only).
#[derive(Debug, Clone)]
pub(crate) struct CopyCache {
    dir: PathBuf,
    /// A copy was made since the last prune.
    made: Arc<AtomicBool>,
    /// Whether this cache already said it is not used because others could write to it.
    untrusted_reported: Arc<AtomicBool>,
}

/// A short stable hash of `value` (std's SipHash with fixed keys: a different Rust version may
/// hash differently, which only costs one fresh copy).
fn short_hash(value: impl Hash) -> String {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    value.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Whether `entry` was last modified more than `age` ago.
fn older_than(entry: &std::fs::DirEntry, age: Duration) -> bool {
    entry
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|elapsed| elapsed > age)
}

/// Whether `path` (not followed if a link) is this user's and writable by no one else — or does
/// not exist yet (it will be made so).
fn owned_privately(path: &Path) -> bool {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        !meta.file_type().is_symlink()
            && meta.uid() == rustix::process::geteuid().as_raw()
            && meta.mode() & 0o022 == 0
    }
    #[cfg(not(unix))]
    {
        !meta.file_type().is_symlink()
    }
}

/// Make a kept copy this user's alone (a copy takes its source's mode, which may let others write).
fn restrict_to_owner(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Say once per cache (`reported` remembers) that the copy cache at `dir` is not used because
/// others could write to it.
fn report_untrusted(dir: &Path, reported: &AtomicBool) {
    if !reported.swap(true, Ordering::AcqRel) {
        tracing::warn!(
            "Not using the copy cache {}: it (or an entry of it) is not owned by this user or is \
             writable by others; plugins are copied afresh at each start",
            dir.display()
        );
    }
}

pub(crate) fn private_dir(path: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

impl CopyCache {
    /// The cache beside the probe cache file `probe_cache` (in its directory, `copies/`).
    pub(crate) fn beside(probe_cache: &Path) -> Option<CopyCache> {
        Some(CopyCache {
            dir: probe_cache.parent()?.join("copies"),
            made: Arc::default(),
            untrusted_reported: Arc::default(),
        })
    }

    /// A copy of `file` as it was when it had identity `stamp`: the kept one, else a new one (kept
    /// when `file` did not change while copying). `None` when the cache cannot be used, or this
    /// process already opened that copy (the caller makes an ordinary private copy).
    pub(crate) fn copy(&self, file: &Path, stamp: &FileStamp) -> Option<PathBuf> {
        let name = file.file_name()?.to_string_lossy().into_owned();
        let home = self.dir.join(short_hash(file));
        let kept = home.join(format!("{}-{name}", short_hash(stamp.key())));
        let mut handed = handed();
        let handed = handed.get_or_insert_with(HashSet::new);
        if handed.contains(&kept) {
            return None;
        }
        // A kept copy is used only where nobody else could have put or changed it: the cache, the
        // file's directory and the copy are this user's and writable by nobody else.
        if !(owned_privately(&self.dir) && owned_privately(&home)) {
            report_untrusted(&self.dir, &self.untrusted_reported);
            return None;
        }
        if std::fs::symlink_metadata(&kept).is_ok_and(|m| m.is_file() && m.len() == stamp.size())
            && owned_privately(&kept)
        {
            handed.insert(kept.clone());
            return Some(kept);
        }
        private_dir(&home).ok()?;
        let tmp = home.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            TMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        // The source first, whole (written aside, then renamed): a prune by another process must
        // never read a partial one and take this directory for stale.
        let source_tmp = tmp.with_extension("source");
        let copied = std::fs::write(&source_tmp, file.as_os_str().as_encoded_bytes())
            .and_then(|()| std::fs::rename(&source_tmp, home.join(SOURCE)))
            .and_then(|()| std::fs::copy(file, &tmp))
            .and_then(|_| restrict_to_owner(&tmp));
        let _ = std::fs::remove_file(&source_tmp);
        // Kept only if the file still has the identity the copy is filed under.
        if copied.is_err() || FileStamp::of(file).as_ref() != Some(stamp) {
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        if std::fs::rename(&tmp, &kept).is_err() {
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        self.made.store(true, Ordering::Release);
        handed.insert(kept.clone());
        // The file's older copies go (a process still mapping one keeps its pages) once they are a
        // minute old: another process that found one a moment ago is about to open it.
        if let Ok(entries) = std::fs::read_dir(&home) {
            for entry in entries.flatten() {
                let path = entry.path();
                let settled = older_than(&entry, Duration::from_secs(60));
                let old = path != kept
                    && entry.file_name() != SOURCE
                    && !entry.file_name().to_string_lossy().starts_with(".tmp-");
                if old && settled {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        Some(kept)
    }

    /// Remove the copies of files that no longer exist (best effort), when a copy was made since
    /// the last time (new files are when old ones may have gone).
    pub(crate) fn prune_after_changes(&self) {
        if self.made.swap(false, Ordering::AcqRel) {
            self.prune();
        }
    }

    /// Remove the copies of files that no longer exist (best effort). A directory without a
    /// readable source (another process may be making it right now) goes only once it is an hour
    /// old.
    pub(crate) fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let home = entry.path();
            let gone = match std::fs::read(home.join(SOURCE)) {
                // Written from `as_encoded_bytes` by this module, and never partially (renamed).
                Ok(bytes) if !bytes.is_empty() => {
                    !Path::new(&*String::from_utf8_lossy(&bytes)).exists()
                }
                _ => older_than(&entry, Duration::from_secs(3600)),
            };
            if gone {
                let _ = std::fs::remove_dir_all(&home);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_reused_while_the_file_is_unchanged_and_replaced_once_it_changes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = CopyCache::beside(&tmp.path().join("cache").join("probed")).expect("cache");
        let file = tmp.path().join("libp.so");
        std::fs::write(&file, b"first").expect("write");
        let stamp = FileStamp::of(&file).expect("stamp");
        let a = cache.copy(&file, &stamp).expect("a copy");
        assert_eq!(std::fs::read(&a).expect("read"), b"first");
        assert_eq!(
            cache.copy(&file, &stamp),
            None,
            "handed out once per process"
        );
        discard(&a);
        assert!(a.exists(), "a kept copy outlives its use");
        // The next run (this process forgetting what it handed out) reuses it.
        if let Some(set) = handed().as_mut() {
            set.clear();
        }
        let next_run = CopyCache::beside(&tmp.path().join("cache").join("probed")).expect("cache");
        assert_eq!(
            next_run.copy(&file, &stamp),
            Some(a.clone()),
            "reused by the next run"
        );

        // Changed in place, modification time restored: a new identity all the same (ctime).
        let mtime = std::fs::metadata(&file)
            .and_then(|m| m.modified())
            .expect("mtime");
        std::fs::write(&file, b"other").expect("write");
        std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(mtime))
            .expect("set mtime");
        let changed = FileStamp::of(&file).expect("stamp");
        assert_ne!(changed, stamp);
        let b = next_run.copy(&file, &changed).expect("a new copy");
        assert_ne!(a, b);
        assert_eq!(std::fs::read(&b).expect("read"), b"other");
        assert!(
            a.exists(),
            "an older copy stays while another process may be opening it"
        );

        // A copy is not filed under an identity the file no longer has.
        assert_eq!(cache.copy(&file, &stamp), None);

        std::fs::remove_file(&file).expect("remove");
        cache.prune();
        assert!(!b.exists(), "copies of files that are gone are pruned");
    }

    #[cfg(unix)]
    #[test]
    fn a_kept_copy_others_could_write_is_never_reused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let probed = tmp.path().join("cache").join("probed");
        let cache = CopyCache::beside(&probed).expect("cache");
        let file = tmp.path().join("libq.so");
        std::fs::write(&file, b"first").expect("write");
        let stamp = FileStamp::of(&file).expect("stamp");
        let kept = cache.copy(&file, &stamp).expect("a copy");
        // Someone rewrites the kept copy (same size) through a mode that let them.
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        std::fs::write(&kept, b"evil!").expect("write");
        if let Some(set) = handed().as_mut() {
            set.remove(&kept);
        }
        let again = cache.copy(&file, &stamp).expect("a fresh copy");
        assert_eq!(std::fs::read(&again).expect("read"), b"first");
        // A cache directory others may write to is not used at all.
        if let Some(set) = handed().as_mut() {
            set.remove(&again);
        }
        let dir = tmp.path().join("cache").join("copies");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        assert_eq!(cache.copy(&file, &stamp), None);
    }
}
