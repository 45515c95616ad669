//! Plugins: from files in tool directories to loaded plugin versions — [`discovery`] (which files,
//! in which order), [`probe`] (a crash-isolated test load in a child process), [`lifecycle`]
//! (copy, probe, load, and rescans that reuse unchanged versions), [`backend`] (the seam every way
//! of running a plugin implements; [`in_process`] is the first), [`slot`] (a loaded version),
//! [`signature`] (detached signatures checked on the private copy before the probe) and [`watch`]
//! (hot reload).

pub mod backend;
pub mod discovery;
pub(crate) mod in_process;
pub(crate) mod lifecycle;
pub mod probe;
pub mod signature;
pub mod slot;
pub mod watch;

use std::path::Path;

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
    /// Its directory requires a signature and the file has none, or one that does not check out.
    #[error("refused, signature check failed: {0}")]
    Signature(String),
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
            LoadError::Signature(s) => LoadError::Signature(fix(s)),
        }
    }
}
