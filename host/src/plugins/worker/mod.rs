//! Isolated plugins: each runs in a supervised worker process of its own (`mcp-host worker`, the
//! same binary), loaded through the same ABI, so a crash, an abort, running out of memory or a
//! runaway call takes down only its worker — its calls in flight answer `plugin <name> crashed
//! (<signal>)`, the worker restarts, and every other tool keeps working.
//!
//! - [`wire`]: the private channel (messages and framing, with a short spin before blocking);
//! - `process`: one worker process from the host's side (start, calls in flight, the reader);
//! - `supervisor`: restarts with backoff, quarantine after a crash loop, deadline kills,
//!   retirement;
//! - `child`: the worker process's side (limits, sandbox, load, the serving pool);
//! - [`sandbox`]: what a plugin is granted and how the worker enforces it (rlimits; Landlock and
//!   seccomp on Linux);
//! - [`quarantine`]: records of quarantined plugins, for `mcp-host list` in another process.
//!
//! Process isolation works wherever the host does (Unix socket pairs on Linux and macOS, pipes on
//! Windows); resource limits need Unix and the sandbox needs Linux (elsewhere `sandbox` is refused
//! unless the plugin allows a weaker one).

mod child;
mod process;
pub mod quarantine;
pub mod sandbox;
mod supervisor;
pub(crate) mod wire;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::{BuildInfo, Manifest};
use serde::Serialize;

pub use child::run_worker;
pub use sandbox::Grant;
pub use supervisor::KILL_GRACE;

use self::process::WorkerCommand;
use self::supervisor::{CrashPolicy, Launch, Supervisor};
use crate::config::{Config, Isolation, WorkerLimits};
use crate::exec::CallState;
use crate::plugins::LoadError;
use crate::plugins::backend::{CallFuture, HostCallbacks, PluginBackend};

/// How a plugin version runs: its isolation and, in a worker, the limits, grant and crash policy
/// it was started with (a change of any of them starts a new version).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunSpec {
    /// In-process, process or sandbox.
    pub isolation: Isolation,
    /// The worker's resource limits (none in-process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<WorkerLimits>,
    /// What a sandboxed plugin may reach.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Grant>,
    /// Crashes within the window that quarantine it, and the window in seconds.
    #[serde(skip)]
    pub crash_policy: Option<(u32, f64)>,
}

impl RunSpec {
    /// How plugin `plugin` from `file`, in a directory with isolation `dir`, runs under `config`.
    pub fn of(config: &Config, plugin: &str, file: &Path, dir: Option<Isolation>) -> RunSpec {
        let isolation = config.isolation(plugin, dir);
        if !isolation.is_isolated() {
            return RunSpec {
                isolation,
                limits: None,
                permissions: None,
                crash_policy: None,
            };
        }
        RunSpec {
            isolation,
            limits: Some(config.worker_limits(plugin)),
            permissions: (isolation == Isolation::Sandbox).then(|| Grant::of(config, plugin, file)),
            crash_policy: Some((config.limits.max_crashes, config.limits.crash_window_secs)),
        }
    }
}

/// The wire form of worker `limits` (memory in bytes).
pub(crate) fn wire_limits(limits: &WorkerLimits) -> wire::Limits {
    wire::Limits {
        address_space: limits.memory_mb.map(|mb| mb.saturating_mul(1 << 20)),
        cpu_secs: limits.cpu_secs,
        open_files: limits.open_files,
    }
}

/// A plugin served by a supervised worker process.
pub(crate) struct Isolated {
    build: BuildInfo,
    manifest: Manifest,
    supervisor: Arc<Supervisor>,
}

impl std::fmt::Debug for Isolated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Isolated")
            .field("plugin", &self.manifest.plugin)
            .field("pid", &self.supervisor.pid())
            .finish_non_exhaustive()
    }
}

/// Start plugin `plugin` (found as `file`, privately copied to `copy`, which the workers load and
/// which is removed when this version is dropped) in a worker as `spec` says; its channel is read
/// on the host's `runtime` when there is one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    exe: &Path,
    file: &Path,
    copy: PathBuf,
    plugin: &str,
    spec: &RunSpec,
    config: &Config,
    host: Arc<dyn HostCallbacks>,
    runtime: Option<tokio::runtime::Handle>,
) -> Result<Isolated, LoadError> {
    let limits = spec.limits.clone().unwrap_or_default();
    let sandbox = match &spec.permissions {
        Some(grant) => {
            if let Some(dir) = grant.data_dir() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    LoadError::Sandbox(format!(
                        "cannot create the data directory {}: {e}",
                        dir.display()
                    ))
                })?;
            }
            Some(grant.to_wire(&copy))
        }
        None => None,
    };
    let launch = Launch {
        runtime,
        file: file.to_path_buf(),
        command: WorkerCommand {
            exe: exe.to_path_buf(),
            env: spec.permissions.as_ref().map(|g| g.env.clone()),
        },
        init: wire::Init {
            file: copy,
            config: config.plugin(plugin).config.to_string(),
            limits: wire_limits(&limits),
            sandbox,
        },
    };
    let (max, window) = spec.crash_policy.unwrap_or((5, 60.0));
    let policy = CrashPolicy {
        max: max.max(1),
        window: Duration::try_from_secs_f64(window).unwrap_or(Duration::from_secs(60)),
    };
    let (supervisor, build, manifest) = Supervisor::start(plugin, launch, host, policy)?;
    Ok(Isolated {
        build,
        manifest,
        supervisor,
    })
}

impl PluginBackend for Isolated {
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
    ) -> Result<String, String> {
        self.supervisor.call_blocking(index, args, call)
    }

    fn call_async(&self, index: u32, args: &str, call: &Arc<CallState>) -> Option<CallFuture> {
        let supervisor = Arc::clone(&self.supervisor);
        Some(Box::pin(supervisor.call(
            index,
            args.to_owned(),
            Arc::clone(call),
        )))
    }

    fn quarantined(&self) -> Option<String> {
        self.supervisor.quarantined()
    }

    fn shutdown(&self) {
        self.supervisor.retire();
    }
}
