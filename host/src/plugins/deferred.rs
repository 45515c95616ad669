//! Plugins loaded at their first call. A plugin that allows it (`export_plugin!(load:
//! on_first_call, ...)`) and whose manifest is remembered from an earlier start under the same key
//! ([`super::manifests`]) is served from that manifest: its tools are listed at once, and its
//! library is opened and its `init` run only when a call first needs it. A start pays neither the
//! `dlopen` nor the plugin's `init`, and a plugin no client calls never takes memory.
//!
//! The private copy was copied, signature-checked and probed at start like any other; it is opened
//! only if its identity is still the one checked then. A plugin that fails to load at its first
//! call, or exports something else than was remembered (its manifest depended on more than its
//! file and configuration), is withdrawn like a quarantined one (its tools leave the lists) until
//! its file changes or SIGHUP retries it, and is loaded at start from then on.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use mcp_plugin_sdk::wire::{BuildInfo, Manifest};

use super::LoadError;
use super::backend::{HostCallbacks, PluginBackend, PluginCallError};
use super::in_process::{InProcess, Layout, LoadContext};
use super::manifests::{ManifestKey, Manifests};
use super::slot::FileStamp;
use crate::plugins::call::CallState;
use crate::telemetry::Telemetry;

/// What a deferred load needs, gathered at start.
pub(crate) struct DeferredLoad {
    /// The file in its tool directory (for log lines and errors).
    pub file: PathBuf,
    /// Its private copy, checked at start.
    pub copy: PathBuf,
    /// The copy's identity when it was checked.
    pub copy_stamp: Option<FileStamp>,
    /// The plugin's `config` section.
    pub config: serde_json::Value,
    /// The plugin's way back into the host.
    pub host: Arc<dyn HostCallbacks>,
    /// Where its manifest is remembered, and under which key.
    pub remembered: (Manifests, ManifestKey),
    /// The loader's count of plugin images mapped.
    pub images: Arc<AtomicUsize>,
    /// Where the image count is reported.
    pub telemetry: Arc<Telemetry>,
}

/// Why a plugin deferred to its first call could not be loaded then.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeferredLoadError {
    /// The checked copy is no longer the file the probe checked.
    #[error("its private copy changed since it was checked at start")]
    CopyChanged,
    /// Loading it failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// It exports something else than it did when its manifest was remembered.
    #[error(
        "what it exports differs from what it exported at an earlier start (it must depend only \
         on its file and configuration to be loaded at its first call)"
    )]
    ManifestChanged,
}

/// A plugin served from its remembered manifest until its first call loads it.
pub(crate) struct Deferred {
    build: BuildInfo,
    manifest: Manifest,
    load: DeferredLoad,
    /// The loaded plugin, or why it could not be loaded; set by the first call.
    loaded: OnceLock<Result<InProcess, DeferredLoadError>>,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("name", &self.manifest.plugin)
            .field("loaded", &self.loaded.get().map(Result::is_ok))
            .finish_non_exhaustive()
    }
}

impl Deferred {
    /// A plugin serving `manifest` (remembered with `build`) until its first call loads it.
    pub(crate) fn new(build: BuildInfo, manifest: Manifest, load: DeferredLoad) -> Deferred {
        Deferred {
            build,
            manifest,
            load,
            loaded: OnceLock::new(),
        }
    }

    /// The loaded plugin, loading it now if this is the first call (other calls wait for it).
    fn plugin(&self) -> Result<&InProcess, PluginCallError> {
        let mut first = false;
        let loaded = self.loaded.get_or_init(|| {
            first = true;
            self.open()
        });
        if first && let Err(e) = loaded {
            tracing::error!(
                "Error loading plugin {} at its first call: {e}; its tools are withdrawn until the \
                 file changes or SIGHUP retries it",
                self.load.file.display()
            );
            let (store, key) = &self.load.remembered;
            store.forget(key);
            self.load.host.plugin_health_changed();
        }
        loaded.as_ref().map_err(|e| PluginCallError::LoadFailed {
            plugin: self.manifest.plugin.clone(),
            reason: e.to_string(),
        })
    }

    /// Open the checked copy, run `init`, and check it exports what was remembered.
    fn open(&self) -> Result<InProcess, DeferredLoadError> {
        let started = Instant::now();
        let load = &self.load;
        if FileStamp::of(&load.copy) != load.copy_stamp {
            return Err(DeferredLoadError::CopyChanged);
        }
        let config_for = |_: &str| load.config.clone();
        let cx = LoadContext {
            config_for: &config_for,
            host: Arc::clone(&load.host),
        };
        // Deferred only after a probe checked the copy, whose identity was just compared.
        let plugin = InProcess::load_copy(&load.file, &load.copy, Layout::CheckedByProbe, &cx)
            .map_err(DeferredLoadError::Load)?;
        let images = load.images.fetch_add(1, Ordering::AcqRel) + 1;
        load.telemetry.metrics().images(images);
        if plugin.manifest() != &self.manifest {
            plugin.shutdown();
            return Err(DeferredLoadError::ManifestChanged);
        }
        tracing::info!(
            "Loaded plugin {} at its first call ({:.1} ms)",
            load.file.display(),
            started.elapsed().as_secs_f64() * 1e3
        );
        Ok(plugin)
    }
}

impl PluginBackend for Deferred {
    fn build(&self) -> &BuildInfo {
        &self.build
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn ready(&self) -> bool {
        self.loaded.get().is_some()
    }

    fn call_blocking(
        &self,
        index: u32,
        args: &str,
        call: &Arc<CallState>,
    ) -> Result<String, PluginCallError> {
        self.plugin()?.call_blocking(index, args, call)
    }

    fn quarantined(&self) -> Option<String> {
        match self.loaded.get() {
            Some(Err(e)) => Some(format!("could not be loaded at its first call: {e}")),
            _ => None,
        }
    }

    fn shutdown(&self) {
        // Never loaded: its `init` never ran, so there is nothing to shut down.
        if let Some(Ok(plugin)) = self.loaded.get() {
            plugin.shutdown();
        }
    }
}
