//! In-process plugins: loading one plugin file (a private copy, abi_stable's version and layout
//! checks, the build fingerprint, `init`) and running its tools on the calling thread through the
//! frozen ABI. The FFI objects the plugin talks to live in [`ffi`].
//!
//! Libraries are never unloaded (unloading Rust cdylibs is unsound), and each load works on a fresh
//! private copy: the same path can never be `dlopen`ed twice (the loader would hand back the old
//! image), and overwriting a mapped file in place crashes the process.

use std::path::Path;
use std::sync::Arc;

use abi_stable::library::{LibraryError, lib_header_from_path};
use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{RResult, RStr};
use mcp_plugin_sdk::wire::{
    BuildInfo, CallContextFfi_TO, HostApiBox, HostApiFfi_TO, Manifest, PluginModV1Ref,
};

mod ffi;

use crate::plugins::LoadError;
use crate::plugins::backend::{HostCallbacks, PluginBackend, PluginCallError};
use crate::plugins::call::CallState;
use ffi::{CurrentCall, HostApiImpl};

/// Keep the meaningful tail of abi_stable's (very long) layout report.
fn summarize_library_error(e: &LibraryError) -> LoadError {
    let text = e.to_string();
    match e {
        // The loader's own reason, without the (private copy's) path.
        LibraryError::OpenError { err, .. } => LoadError::Library(format!("dlopen failed: {err}")),
        // The loader's text repeats the symbol and the (private copy's) path: the hint says it all.
        LibraryError::GetSymbolError { symbol, .. } => LoadError::Library(format!(
            "not built with mcp-plugin-sdk: end the crate's lib.rs with `export_plugin!()` and \
             build it as a cdylib (it has no `{}` export)",
            String::from_utf8_lossy(symbol).trim_end_matches('\0')
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
            let mut s = picked
                .iter()
                .map(|l| l.trim_start_matches("Error:").trim())
                .collect::<Vec<_>>()
                .join(" | ");
            let host = BuildInfo::host();
            s.push_str(&format!(
                " (rebuild the plugin against mcp-plugin-sdk {}, the SDK of this mcp-host: \
                 `mcp-host --version`)",
                host.sdk_version
            ));
            if s.len() > 690 {
                let mut cut = 690;
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

/// Whether abi_stable's check of a plugin's type layouts still has to run when it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Check it: nothing has checked this file yet.
    Check,
    /// A probe checked this very file (its child opened these bytes, or the probe cache knows a
    /// file of this identity passed): the walk of the layouts (about a million instructions a
    /// plugin) is not repeated. The library's abi_stable version is still checked.
    CheckedByProbe,
}

/// Open a library file and check it is a compatible plugin, without running its `init`.
///
/// This is what the child-process probe does; in-process loads do it on the private copy.
pub(crate) fn open_module(
    path: &Path,
    layout: Layout,
) -> Result<(PluginModV1Ref, BuildInfo), LoadError> {
    let header = lib_header_from_path(path).map_err(|e| summarize_library_error(&e))?;
    let module = match layout {
        Layout::Check => header.init_root_module::<PluginModV1Ref>(),
        // SAFETY: `init_root_module` (the version and layout checks) passed on a file with these
        // very bytes in a probe, so the root module has the layout `PluginModV1Ref` expects.
        #[allow(unsafe_code)]
        Layout::CheckedByProbe => unsafe {
            header.init_root_module_with_unchecked_layout::<PluginModV1Ref>()
        },
    }
    .map_err(|e| summarize_library_error(&e))?;
    let raw = (module.build_info())();
    let build: BuildInfo = serde_json::from_str(raw.as_str())
        .map_err(|e| LoadError::Build(format!("unreadable build fingerprint: {e}")))?;
    if let Some(why) = build.incompatibility(&BuildInfo::host()) {
        return Err(LoadError::Build(why));
    }
    Ok((module, build))
}

/// Run an opened module's `init` with the host API it keeps (constructors and `enabled()` hooks
/// run here) and read its manifest. Both the in-process loader and the worker process use it.
pub(crate) fn init_module(module: PluginModV1Ref, host: HostApiBox) -> Result<Manifest, LoadError> {
    match (module.init())(host) {
        RResult::ROk(json) => serde_json::from_str::<Manifest>(json.as_str())
            .map_err(|e| LoadError::Manifest(e.to_string())),
        RResult::RErr(e) => Err(LoadError::Init(e.into_string())),
    }
}

/// A loaded, initialised plugin image, running its tools in this process.
pub(crate) struct InProcess {
    build: BuildInfo,
    manifest: Manifest,
    module: PluginModV1Ref,
    /// The host, for what a call's context asks that is the host's to answer (a user's
    /// credential).
    host: Arc<dyn crate::plugins::backend::HostCallbacks>,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.manifest.plugin)
            .finish_non_exhaustive()
    }
}

/// What the loader needs from the host to build a plugin's host API.
pub(crate) struct LoadContext<'a> {
    /// The plugin's `config` section by plugin name.
    pub config_for: &'a (dyn Fn(&str) -> serde_json::Value + Sync),
    /// The plugin's way back into the host.
    pub host: Arc<dyn HostCallbacks>,
}

impl InProcess {
    /// Load `copy`, a private copy of `file` (see [`private_copy`]), and run its `init`. The copy is
    /// unlinked once opened: the mapping stays valid, and nothing is left behind if the host dies.
    pub(crate) fn load_copy(
        file: &Path,
        copy: &Path,
        layout: Layout,
        cx: &LoadContext<'_>,
    ) -> Result<InProcess, LoadError> {
        let opened = open_module(copy, layout);
        crate::plugins::copies::discard(copy);
        let (module, build) = opened.map_err(|e| e.mentioning(copy, file))?;
        let host_api = HostApiImpl::new(
            build.plugin.clone(),
            &(cx.config_for)(&build.plugin),
            Arc::clone(&cx.host),
        );
        let host_box = HostApiFfi_TO::from_value(host_api, abi_stable::sabi_trait::TD_Opaque);
        let manifest = init_module(module, host_box)?;
        Ok(InProcess {
            build,
            manifest,
            module,
            host: Arc::clone(&cx.host),
        })
    }
}

impl PluginBackend for InProcess {
    fn build(&self) -> &BuildInfo {
        &self.build
    }

    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn call_blocking(
        &self,
        index: u32,
        args: &str,
        call: &Arc<CallState>,
    ) -> Result<String, PluginCallError> {
        // The plugin's nested calls find this call as their parent.
        let _current = CurrentCall::enter(Arc::clone(call));
        let caller = &*call.caller_json;
        let context = ffi::CallFfi {
            call,
            host: &*self.host,
            plugin: &self.manifest.plugin,
        };
        let ctx =
            CallContextFfi_TO::from_ptr(RRef::new(&context), abi_stable::sabi_trait::TD_Opaque);
        match (self.module.call())(index, RStr::from_str(args), RStr::from_str(caller), ctx) {
            RResult::ROk(json) => Ok(json.into_string()),
            RResult::RErr(e) => Err(PluginCallError::Plugin(e.into_string())),
        }
    }

    fn shutdown(&self) {
        (self.module.shutdown())();
    }
}
