//! Remembered manifests: what a plugin exported at an earlier start, kept beside the probe cache so
//! a later start can serve the plugin's tools without loading it (see [`super::deferred`]).
//!
//! Only plugins that allow it are remembered (`export_plugin!(load: on_first_call, ...)`: what they
//! export depends only on their file and their configuration). An entry is keyed by everything
//! that reaches the plugin's `init`: the file's identity (path and [`FileStamp`]), the host build,
//! the plugin's name, its `config` section and its data directory. Any change to one of them is a
//! different key, so the plugin is loaded at start again and what it exports then is remembered.
//! Each entry is one file, `<cache>/manifests/<SHA-256 of the key>.json`, written atomically;
//! losing one only costs a load at start.

use std::path::{Path, PathBuf};

use mcp_plugin_sdk::wire::{BuildInfo, Manifest};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::slot::FileStamp;

/// The most entries kept; beyond it the oldest half is removed when a new one is written.
const MAX_ENTRIES: usize = 1024;

/// Where manifests are remembered.
#[derive(Debug, Clone)]
pub(crate) struct Manifests {
    dir: PathBuf,
}

/// What decides a plugin's manifest, as one text (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ManifestKey(String);

impl ManifestKey {
    /// The key of plugin `plugin` loaded from `file` (with identity `stamp`) with `config` as its
    /// `config` section and `data_dir` as its data directory.
    pub(crate) fn new(
        file: &Path,
        stamp: &FileStamp,
        plugin: &str,
        config: &serde_json::Value,
        data_dir: &Path,
    ) -> ManifestKey {
        ManifestKey(format!(
            "{}\t{}\t{}\t{plugin}\t{}\t{}",
            file.display(),
            stamp.key(),
            super::probe::host_build(),
            data_dir.display(),
            config
        ))
    }

    fn file_name(&self) -> String {
        let digest = Sha256::digest(self.0.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}.json")
    }
}

/// One remembered manifest, as stored.
#[derive(Serialize, Deserialize)]
struct Entry {
    key: String,
    build: BuildInfo,
    manifest: Manifest,
}

impl Manifests {
    /// The store beside the probe cache file `probe_cache` (`<its directory>/manifests`).
    pub(crate) fn beside(probe_cache: &Path) -> Option<Manifests> {
        Some(Manifests {
            dir: probe_cache.parent()?.join("manifests"),
        })
    }

    /// What the plugin with `key` exported when it was last loaded with that key, if it allows
    /// being loaded at its first call.
    pub(crate) fn get(&self, key: &ManifestKey) -> Option<(BuildInfo, Manifest)> {
        let text = std::fs::read(self.dir.join(key.file_name())).ok()?;
        let entry: Entry = serde_json::from_slice(&text).ok()?;
        (entry.key == key.0 && entry.manifest.load_on_first_call)
            .then_some((entry.build, entry.manifest))
    }

    /// Remember what the plugin with `key` exported (only when it allows being loaded at its first
    /// call; best effort).
    pub(crate) fn put(&self, key: &ManifestKey, build: &BuildInfo, manifest: &Manifest) {
        if !manifest.load_on_first_call {
            return;
        }
        let entry = Entry {
            key: key.0.clone(),
            build: build.clone(),
            manifest: manifest.clone(),
        };
        let written = serde_json::to_string(&entry)
            .map_err(std::io::Error::other)
            .and_then(|text| {
                super::copies::private_dir(&self.dir)?;
                super::probe::write_atomically(&self.dir.join(key.file_name()), &text)
            });
        match written {
            Ok(()) => self.prune(),
            Err(e) => tracing::debug!("manifest not remembered in {}: {e}", self.dir.display()),
        }
    }

    /// Forget the entry of `key` (the plugin failed to load with it, or exported something else).
    pub(crate) fn forget(&self, key: &ManifestKey) {
        let _ = std::fs::remove_file(self.dir.join(key.file_name()));
    }

    /// Beyond [`MAX_ENTRIES`], remove the oldest half.
    fn prune(&self) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = dir
            .flatten()
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if entries.len() <= MAX_ENTRIES {
            return;
        }
        entries.sort();
        for (_, path) in entries.iter().take(entries.len() / 2) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(load_on_first_call: bool) -> Manifest {
        serde_json::from_value(serde_json::json!({
            "plugin": "p", "version": "1", "sdkVersion": "0.1.0",
            "tools": [{"name": "t", "description": "A tool.", "inputSchema": {"type": "object"}}],
            "loadOnFirstCall": load_on_first_call,
        }))
        .expect("a manifest")
    }

    #[test]
    fn a_manifest_is_remembered_under_everything_that_reaches_init() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("libp.so");
        std::fs::write(&file, b"x").expect("write");
        let stamp = FileStamp::of(&file).expect("stamp");
        let store = Manifests::beside(&dir.path().join("probed")).expect("store");
        let config = serde_json::json!({"greeting": "hi"});
        let data = dir.path().join("data");
        let key = ManifestKey::new(&file, &stamp, "p", &config, &data);
        let build = BuildInfo::host();
        assert!(store.get(&key).is_none());

        // A plugin that must load at start is never remembered.
        store.put(&key, &build, &manifest(false));
        assert!(store.get(&key).is_none());

        store.put(&key, &build, &manifest(true));
        let (got_build, got) = store.get(&key).expect("remembered");
        assert_eq!((got_build, got), (build, manifest(true)));

        // Another configuration, name or data directory is another key.
        let other_config = serde_json::json!({"greeting": "hello"});
        for other in [
            ManifestKey::new(&file, &stamp, "p", &other_config, &data),
            ManifestKey::new(&file, &stamp, "q", &config, &data),
            ManifestKey::new(&file, &stamp, "p", &config, dir.path()),
        ] {
            assert!(store.get(&other).is_none(), "{other:?}");
        }
        store.forget(&key);
        assert!(store.get(&key).is_none());
    }
}
