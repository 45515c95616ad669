//! A loaded plugin version as the registry and the executor see it: its backend, where it was
//! found, its concurrency limit, who signed it, and the file stamp, settings and isolation it was
//! loaded with (a different stamp, section or isolation means a new version). Its shutdown hook runs once, when the last call on it
//! has finished and the host has moved on to another version.

use std::sync::Arc;

use crate::plugins::backend::PluginBackend;
use crate::plugins::discovery::Candidate;
use crate::plugins::signature::Signer;
use crate::plugins::worker::RunSpec;

/// A loaded plugin as the registry and the executor see it.
#[derive(Debug)]
pub struct PluginSlot {
    /// What runs its tools.
    pub backend: Arc<dyn PluginBackend>,
    /// Where it was found.
    pub candidate: Candidate,
    /// Its concurrency limit.
    pub limiter: Arc<tokio::sync::Semaphore>,
    /// The file's stamp when it was loaded (a different stamp means a new version).
    pub stamp: Option<FileStamp>,
    /// The plugin's settings when it was loaded (a different section means a reload).
    pub settings: crate::config::PluginSettings,
    /// How it runs (in-process, or a worker's limits and permissions).
    pub run: RunSpec,
    /// Who signed the bytes that were loaded (`None`: unsigned, or not checked).
    pub signer: Option<Signer>,
    /// What its signature status depended on when it was loaded (signature file, keys,
    /// requirement); a different value means a new check.
    pub trust_stamp: String,
    retired: std::sync::atomic::AtomicBool,
}

/// What identifies a version of a file: size, modification and change times, and inode. The change
/// time moves on every write and metadata change and cannot be set back, so a file rewritten in
/// place with its size and modification time restored still gets a new identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    changed: (i64, i64),
    inode: u64,
}

impl FileStamp {
    /// A stable text form, for the probe and copy caches.
    pub fn key(&self) -> String {
        let nanos = self
            .modified
            .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let (secs, nsecs) = self.changed;
        format!(
            "{}:{}:{}.{:09}:{}",
            self.len, nanos, secs, nsecs, self.inode
        )
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.len
    }

    /// The stamp of `path` now.
    pub fn of(path: &std::path::Path) -> Option<FileStamp> {
        let m = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let (inode, changed) = {
            use std::os::unix::fs::MetadataExt as _;
            (m.ino(), (m.ctime(), m.ctime_nsec()))
        };
        #[cfg(not(unix))]
        let (inode, changed) = (0, (0, 0));
        Some(FileStamp {
            len: m.len(),
            modified: m.modified().ok(),
            changed,
            inode,
        })
    }
}

impl PluginSlot {
    /// A slot for a freshly loaded plugin.
    pub fn new(
        backend: Arc<dyn PluginBackend>,
        candidate: Candidate,
        limit: usize,
        stamp: Option<FileStamp>,
        settings: crate::config::PluginSettings,
        run: RunSpec,
    ) -> Self {
        PluginSlot {
            backend,
            candidate,
            limiter: Arc::new(tokio::sync::Semaphore::new(limit.max(1))),
            stamp,
            settings,
            run,
            signer: None,
            trust_stamp: String::new(),
            retired: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The same slot, recording who signed it and what its signature status depended on.
    pub fn with_signature(mut self, signer: Option<Signer>, trust_stamp: String) -> Self {
        self.signer = signer;
        self.trust_stamp = trust_stamp;
        self
    }

    /// Run the plugin's shutdown hook, once.
    pub fn retire(&self) {
        if !self.retired.swap(true, std::sync::atomic::Ordering::AcqRel) {
            self.backend.shutdown();
        }
    }
}

impl Drop for PluginSlot {
    /// The last reference is gone (no call is running on this version): run its shutdown hook. An
    /// in-process image stays mapped (libraries are never unloaded); a worker exits.
    fn drop(&mut self) {
        self.retire();
    }
}
