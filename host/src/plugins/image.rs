//! Loading one plugin file: a private copy, abi_stable's version and layout checks, the build
//! fingerprint, `init`, and the raw call into the plugin.
//!
//! Libraries are never unloaded (unloading Rust cdylibs is unsound), and each load works on a fresh
//! private copy: the same path can never be `dlopen`ed twice (the loader would hand back the old
//! image), and overwriting a mapped file in place crashes the process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use abi_stable::library::{LibraryError, lib_header_from_path};
use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{RResult, RStr};
use mcp_plugin_sdk::wire::{BuildInfo, CallContextFfi_TO, HostApiFfi_TO, Manifest, PluginModV1Ref};

use crate::plugins::host_api::{HostApiImpl, HostCallContext};

/// Why a plugin file could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// dlopen failed, or the file is not an mcp-host plugin.
    #[error("not a loadable plugin: {0}")]
    Library(String),
    /// abi_stable's version or layout check failed.
    #[error("incompatible plugin ABI: {0}")]
    Abi(String),
    /// The build fingerprint does not match this host.
    #[error("incompatible build: {0}")]
    Build(String),
    /// `init` failed or panicked.
    #[error("init failed: {0}")]
    Init(String),
    /// The manifest is not what the SDK produces.
    #[error("unreadable manifest: {0}")]
    Manifest(String),
    /// The child-process probe failed (or crashed) on this file.
    #[error("{0}")]
    Probe(String),
    /// The private copy could not be made.
    #[error("cannot copy plugin to the runtime directory: {0}")]
    Copy(String),
}

impl LoadError {
    /// The same error with every mention of the private copy replaced by the original file.
    pub fn mentioning(self, copy: &Path, file: &Path) -> LoadError {
        let (from, to) = (copy.display().to_string(), file.display().to_string());
        let fix = |s: String| s.replace(&from, &to);
        match self {
            LoadError::Library(s) => LoadError::Library(fix(s)),
            LoadError::Abi(s) => LoadError::Abi(fix(s)),
            LoadError::Build(s) => LoadError::Build(fix(s)),
            LoadError::Init(s) => LoadError::Init(fix(s)),
            LoadError::Manifest(s) => LoadError::Manifest(fix(s)),
            LoadError::Probe(s) => LoadError::Probe(fix(s)),
            LoadError::Copy(s) => LoadError::Copy(fix(s)),
        }
    }
}

/// Keep the meaningful tail of abi_stable's (very long) layout report.
fn summarize_library_error(e: &LibraryError) -> LoadError {
    let text = e.to_string();
    match e {
        // The loader's own reason, without the (private copy's) path.
        LibraryError::OpenError { err, .. } => LoadError::Library(format!("dlopen failed: {err}")),
        LibraryError::GetSymbolError { symbol, err, .. } => LoadError::Library(format!(
            "missing export {} (not built with mcp-plugin-sdk's export_plugin!): {err}",
            String::from_utf8_lossy(symbol)
        )),
        _ => {
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let errors: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| l.contains("Error") || l.contains("incompatible"))
                .collect();
            let picked: Vec<&str> = if errors.is_empty() {
                lines.iter().rev().take(3).rev().copied().collect()
            } else {
                errors.iter().rev().take(3).rev().copied().collect()
            };
            let mut s = picked.join(" | ");
            if s.len() > 600 {
                let mut cut = 600;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                s.truncate(cut);
                s.push('…');
            }
            LoadError::Abi(s)
        }
    }
}

/// Open a library file and check it is a compatible plugin, without running its `init`.
///
/// This is what the child-process probe does; in-process loads do it on the private copy.
pub fn open_module(path: &Path) -> Result<(PluginModV1Ref, BuildInfo), LoadError> {
    let header = lib_header_from_path(path).map_err(|e| summarize_library_error(&e))?;
    let module = header
        .init_root_module::<PluginModV1Ref>()
        .map_err(|e| summarize_library_error(&e))?;
    let raw = (module.build_info())();
    let build: BuildInfo = serde_json::from_str(raw.as_str())
        .map_err(|e| LoadError::Build(format!("unreadable build fingerprint: {e}")))?;
    if let Some(why) = build.incompatibility(&BuildInfo::host()) {
        return Err(LoadError::Build(why));
    }
    Ok((module, build))
}

/// A loaded, initialised plugin image.
pub struct Plugin {
    /// Its build fingerprint.
    pub build: BuildInfo,
    /// What it exports.
    pub manifest: Manifest,
    module: PluginModV1Ref,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.manifest.plugin)
            .finish_non_exhaustive()
    }
}

static COPY_SEQ: AtomicU64 = AtomicU64::new(0);

/// Copy `file` to a unique name in `runtime_dir`: the file that is probed and then loaded, so a
/// replacement of the original in between can never slip in unprobed.
pub fn private_copy(file: &Path, runtime_dir: &Path) -> Result<PathBuf, LoadError> {
    let seq = COPY_SEQ.fetch_add(1, Ordering::Relaxed);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| format!("plugin.{}", crate::plugins::discovery::LIBRARY_EXTENSION));
    let dest = runtime_dir.join(format!("{seq}-{name}"));
    std::fs::copy(file, &dest).map_err(|e| LoadError::Copy(e.to_string()))?;
    Ok(dest)
}

/// What the loader needs from the host to build a plugin's host API.
pub struct LoadContext<'a> {
    /// The plugin's `config` section by plugin name.
    pub config_for: &'a dyn Fn(&str) -> serde_json::Value,
    /// Handle for nested tool calls.
    pub nested: Arc<dyn crate::plugins::host_api::HostCallbacks>,
}

impl Plugin {
    /// Load `copy`, a private copy of `file` (see [`private_copy`]), and run its `init`. The copy is
    /// unlinked once opened: the mapping stays valid, and nothing is left behind if the host dies.
    pub fn load_copy(file: &Path, copy: &Path, cx: &LoadContext<'_>) -> Result<Plugin, LoadError> {
        let opened = open_module(copy);
        let _ = std::fs::remove_file(copy);
        let (module, build) = opened.map_err(|e| e.mentioning(copy, file))?;
        let host_api = HostApiImpl::new(
            build.plugin.clone(),
            (cx.config_for)(&build.plugin),
            Arc::clone(&cx.nested),
        );
        let host_box = HostApiFfi_TO::from_value(host_api, abi_stable::sabi_trait::TD_Opaque);
        let manifest = match (module.init())(host_box) {
            RResult::ROk(json) => serde_json::from_str::<Manifest>(json.as_str())
                .map_err(|e| LoadError::Manifest(e.to_string()))?,
            RResult::RErr(e) => return Err(LoadError::Init(e.into_string())),
        };
        Ok(Plugin {
            build,
            manifest,
            module,
        })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.manifest.plugin
    }

    /// Call tool number `index` on this thread. `Err` when the plugin could not dispatch the call.
    pub fn call_raw(
        &self,
        index: u32,
        args: &str,
        caller: &str,
        ctx: &HostCallContext,
    ) -> Result<String, String> {
        let ctx = CallContextFfi_TO::from_ptr(RRef::new(ctx), abi_stable::sabi_trait::TD_Opaque);
        match (self.module.call())(index, RStr::from_str(args), RStr::from_str(caller), ctx) {
            RResult::ROk(json) => Ok(json.into_string()),
            RResult::RErr(e) => Err(e.into_string()),
        }
    }

    /// Run the plugin's shutdown hook (the image stays mapped).
    pub fn shutdown(&self) {
        (self.module.shutdown())();
    }
}
