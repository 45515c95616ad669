//! Plugins: from files in tool directories to loaded plugin versions — [`discovery`] (which files,
//! in which order), [`probe`] (a crash-isolated test load in a child process), [`lifecycle`]
//! (copy, probe, load, and rescans that reuse unchanged versions) with [`copies`] (private copies
//! kept across runs), [`backend`] (the seam every way
//! of running a plugin implements; [`in_process`] is the first, [`deferred`] loads one at its first
//! call from the manifest [`manifests`] remembered at an earlier start), [`slot`] (a loaded version),
//! [`signature`] (detached signatures checked on the private copy before the probe) and [`watch`]
//! (hot reload). [`worker`] runs isolated plugins in supervised worker processes; [`upstream`]
//! serves upstream MCP servers (`tool_dirs` entries with `server:`) as plugins; [`output`] is the
//! one bounded path what either writes toward the host's log takes.

pub mod backend;
pub mod call;
pub mod cancel;
pub(crate) mod copies;
pub(crate) mod credential;
pub(crate) mod deferred;
pub mod discovery;
pub(crate) mod host_request;
pub(crate) mod in_process;
pub(crate) mod lifecycle;
pub(crate) mod manifests;
pub(crate) mod output;
pub mod probe;
pub mod signature;
pub mod slot;
pub mod upstream;
pub mod worker;

use std::path::Path;
use std::sync::Mutex;

/// Load results per candidate, in discovery order: what a registry is built from.
pub type Sources = Vec<(
    discovery::Candidate,
    Result<std::sync::Arc<slot::PluginSlot>, LoadError>,
)>;

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
    /// The plugin's worker process could not be started or died while loading it.
    #[error("worker process: {0}")]
    Worker(String),
    /// The plugin's sandbox could not be set up (or would be weaker than configured).
    #[error("{0}")]
    Sandbox(String),
    /// Its directory requires a signature and the file has none, or one that does not check out.
    #[error("refused, signature check failed: {0}")]
    Signature(String),
    /// The plugin names itself after a plugin whose settings are bound (`plugins.<name>.from`,
    /// `signed_by`) to other files.
    #[error("refused, plugin name bound elsewhere: {0}")]
    Binding(String),
}

impl LoadError {
    /// What kind of failure it is, as metrics label it.
    pub fn kind(&self) -> &'static str {
        self.parts().0
    }

    /// The same error with every mention of the private copy replaced by the original file.
    pub fn mentioning(self, copy: &Path, file: &Path) -> LoadError {
        let (from, to) = (copy.display().to_string(), file.display().to_string());
        let (kind, text) = self.parts();
        LoadError::from_parts(kind, text.replace(&from, &to))
    }

    /// The error as a kind name and its text, to send it from a child process (see
    /// [`LoadError::from_parts`]).
    pub fn parts(&self) -> (&'static str, String) {
        match self {
            LoadError::Library(s) => ("library", s.clone()),
            LoadError::Abi(s) => ("abi", s.clone()),
            LoadError::Build(s) => ("build", s.clone()),
            LoadError::Init(s) => ("init", s.clone()),
            LoadError::Manifest(s) => ("manifest", s.clone()),
            LoadError::Probe(s) => ("probe", s.clone()),
            LoadError::Copy(s) => ("copy", s.clone()),
            LoadError::Worker(s) => ("worker", s.clone()),
            LoadError::Sandbox(s) => ("sandbox", s.clone()),
            LoadError::Signature(s) => ("signature", s.clone()),
            LoadError::Binding(s) => ("binding", s.clone()),
        }
    }

    /// The error [`LoadError::parts`] described (an unknown kind is a probe error).
    pub fn from_parts(kind: &str, text: String) -> LoadError {
        match kind {
            "library" => LoadError::Library(text),
            "abi" => LoadError::Abi(text),
            "build" => LoadError::Build(text),
            "init" => LoadError::Init(text),
            "manifest" => LoadError::Manifest(text),
            "copy" => LoadError::Copy(text),
            "worker" => LoadError::Worker(text),
            "sandbox" => LoadError::Sandbox(text),
            "signature" => LoadError::Signature(text),
            "binding" => LoadError::Binding(text),
            _ => LoadError::Probe(text),
        }
    }
}

/// Write a line a plugin logs through its host API to the host's log, at its level.
pub(crate) fn log_plugin_line(plugin: &str, level: u8, service: &str, message: &str) {
    use mcp_plugin_sdk::LogLevel;
    match LogLevel::from_u8(level) {
        LogLevel::Debug => tracing::debug!(plugin, service, "{message}"),
        LogLevel::Info | LogLevel::Notice => tracing::info!(plugin, service, "{message}"),
        LogLevel::Warning => tracing::warn!(plugin, service, "{message}"),
        _ => tracing::error!(plugin, service, "{message}"),
    }
}

/// The name of the signal that ended a child process, if one did (`SIGSEGV`, `SIGABRT`, ...).
pub fn signal_name(status: std::process::ExitStatus) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        let sig = status.signal()?;
        let name = match sig {
            libc::SIGHUP => "SIGHUP",
            libc::SIGINT => "SIGINT",
            libc::SIGQUIT => "SIGQUIT",
            libc::SIGILL => "SIGILL",
            libc::SIGTRAP => "SIGTRAP",
            libc::SIGABRT => "SIGABRT",
            libc::SIGBUS => "SIGBUS",
            libc::SIGFPE => "SIGFPE",
            libc::SIGKILL => "SIGKILL",
            libc::SIGSEGV => "SIGSEGV",
            libc::SIGPIPE => "SIGPIPE",
            libc::SIGALRM => "SIGALRM",
            libc::SIGTERM => "SIGTERM",
            libc::SIGXCPU => "SIGXCPU",
            libc::SIGXFSZ => "SIGXFSZ",
            libc::SIGSYS => "SIGSYS",
            _ => return Some(format!("signal {sig}")),
        };
        Some(name.to_owned())
    }
    #[cfg(not(unix))]
    {
        let _ = status;
        None
    }
}

/// How a child process ended: `killed by SIGSEGV (11)`, `exited with status 3`.
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    if let Some(name) = signal_name(status) {
        use std::os::unix::process::ExitStatusExt as _;
        return format!("killed by {name} ({})", status.signal().unwrap_or(0));
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "ended abnormally".into(),
    }
}

/// `f` over `items` on this thread and up to one more thread per further core, the results in the
/// order of `items` (plugin loads and signature checks: CPU work per file, independent). The extra
/// threads get the main thread's stack size (a plugin's `init` runs on them). A panic in `f`
/// stops the others taking new items and reaches the caller with its own message.
pub(crate) fn map_parallel<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    /// The main thread's default stack on Linux.
    const STACK: usize = 8 << 20;
    let threads = crate::plugins::call::cores().min(items.len());
    if threads <= 1 {
        return items.into_iter().map(f).collect();
    }
    let count = items.len();
    let queue = Mutex::new(items.into_iter().enumerate());
    let done = Mutex::new(Vec::with_capacity(count));
    let panicked = Mutex::new(None);
    let work = || {
        loop {
            let next = lock(&queue).next();
            let Some((i, item)) = next else { break };
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(item))) {
                Ok(out) => lock(&done).push((i, out)),
                Err(payload) => {
                    lock(&panicked).get_or_insert(payload);
                    // Leave the rest: the caller is about to panic anyway.
                    lock(&queue).by_ref().for_each(drop);
                    break;
                }
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads {
            // Without another thread, this one does all the work.
            let _ = std::thread::Builder::new()
                .stack_size(STACK)
                .spawn_scoped(scope, work);
        }
        work();
    });
    if let Some(payload) = panicked.into_inner().unwrap_or_else(|p| p.into_inner()) {
        std::panic::resume_unwind(payload);
    }
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, out)| out).collect()
}

/// A poisoned lock only means another thread panicked while holding it; the data is still whole.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod parallel_tests {
    use super::*;

    #[test]
    fn map_parallel_keeps_the_order_and_runs_every_item_once() {
        let seen = Mutex::new(Vec::new());
        let out = map_parallel((0..200).collect(), |i: u32| {
            lock(&seen).push(i);
            // Uneven work, so the threads finish out of order.
            std::thread::sleep(std::time::Duration::from_micros(u64::from(i % 7) * 50));
            i * 2
        });
        assert_eq!(out, (0..200).map(|i| i * 2).collect::<Vec<_>>());
        let mut seen = seen.into_inner().expect("not poisoned");
        seen.sort_unstable();
        assert_eq!(seen, (0..200).collect::<Vec<_>>());
        assert!(map_parallel(Vec::<u32>::new(), |i| i).is_empty());
    }

    #[test]
    fn a_panic_in_one_item_reaches_the_caller_with_its_message() {
        let caught = std::panic::catch_unwind(|| {
            map_parallel((0..50).collect(), |i: u32| {
                assert_ne!(i, 7, "item seven is bad");
                i
            })
        });
        let payload = caught.expect_err("the panic is passed on");
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains("item seven is bad"), "{message}");
    }
}
