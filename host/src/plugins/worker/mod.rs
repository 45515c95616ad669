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

pub(crate) use supervisor::backoff as restart_backoff;
pub(crate) mod wire;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::{BuildInfo, Manifest};
use serde::Serialize;

pub use child::run_worker;
pub(crate) use process::WorkerCommand;
pub use sandbox::Grant;
pub use supervisor::KILL_GRACE;

use self::supervisor::{CrashPolicy, Launch, Supervisor};
use crate::config::{Config, Isolation, WorkerLimits};
use crate::plugins::LoadError;
use crate::plugins::backend::{
    CallFuture, HostCallbacks, PluginBackend, PluginCallError, Returned,
};
use crate::plugins::call::CallState;

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

/// Room in a worker's frames past `limits.max_result_bytes`, so that a result somewhat over the
/// limit still arrives and is refused with an error naming its size (a frame over it ends the
/// worker).
const FRAME_ROOM: usize = 1 << 20;

/// The environment variables a worker of `plugin` keeps: a sandboxed one only its
/// `permissions.env`; a `process` one also [`process::BASE_ENV`] (never the host's whole
/// environment, whose variables may hold its secrets).
pub(crate) fn worker_env(spec: &RunSpec, config: &Config, plugin: &str) -> Vec<String> {
    match &spec.permissions {
        Some(grant) => grant.env.clone(),
        None => process::BASE_ENV
            .iter()
            .map(|name| (*name).to_owned())
            .chain(config.plugin(plugin).permissions.env)
            .collect(),
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
                // Private to the host's user (0700), also when an older version made it wider.
                use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .and_then(|()| {
                        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                    })
                    .map_err(|e| {
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
            env: worker_env(spec, config, plugin),
            max_frame: config
                .limits
                .max_result_bytes
                .saturating_add(FRAME_ROOM)
                .min(wire::MAX_FRAME),
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
    ) -> Result<String, PluginCallError> {
        self.supervisor.call_blocking(index, args, call)
    }

    fn call_async(&self, index: u32, args: &str, call: &Arc<CallState>) -> Option<CallFuture> {
        let supervisor = Arc::clone(&self.supervisor);
        let call = supervisor.call(index, args.to_owned(), Arc::clone(call));
        Some(Box::pin(async move { call.await.map(Returned::Text) }))
    }

    fn quarantined(&self) -> Option<String> {
        self.supervisor.quarantined()
    }

    fn shutdown(&self) {
        self.supervisor.retire();
    }
}

/// Entry points for the fuzz suite (`tests/fuzz`): the worker channel's frame reader and the
/// reader of a worker's output lines, on bytes from anywhere. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    use std::io::{self, Read};

    use super::wire::{self, FrameReader, FromWorker, Source};
    use crate::plugins::backend::HostRequest;
    use crate::plugins::output::{Line, MAX_LINE, OutputLines};

    /// Bytes handed out in pieces of the given sizes (cycled; a zero is a pause for `read_now`).
    struct Pieces {
        bytes: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        turn: usize,
        /// The last `read_now` was a pause (the next one reads).
        paused: bool,
    }

    impl Pieces {
        fn new(bytes: Vec<u8>, sizes: &[usize]) -> Self {
            let sizes = if sizes.is_empty() {
                vec![usize::MAX]
            } else {
                sizes.to_vec()
            };
            Pieces {
                bytes,
                at: 0,
                sizes,
                turn: 0,
                paused: false,
            }
        }

        fn size(&mut self) -> usize {
            let size = self.sizes[self.turn % self.sizes.len()];
            self.turn += 1;
            size
        }
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let size = self.size().max(1);
            let n = buf.len().min(size).min(self.bytes.len() - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    impl Source for Pieces {
        fn read_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            if !self.paused
                && self.at < self.bytes.len()
                && self.sizes[self.turn % self.sizes.len()] == 0
            {
                self.turn += 1;
                self.paused = true;
                return Ok(None);
            }
            self.paused = false;
            self.read(buf).map(Some)
        }
    }

    /// What reading a byte stream as worker frames came to.
    #[derive(Debug)]
    pub struct Frames {
        /// The messages decoded, in their `Debug` form.
        pub messages: Vec<String>,
        /// How the stream ended (`UnexpectedEof` at a clean end).
        pub end: io::ErrorKind,
        /// The end's message.
        pub end_message: String,
        /// The most memory the reader's buffer held at any point.
        pub peak_buffer: usize,
    }

    /// The largest buffer a frame reader with frame limit `limit` may hold.
    pub fn buffer_bound(limit: usize) -> usize {
        (64 * 1024usize).max(4 + limit)
    }

    /// Read `bytes`, delivered in pieces of `sizes`, as frames from a worker with frame limit
    /// `limit`, with non-blocking reads when `polling`, else blocking ones.
    pub fn read_frames(bytes: Vec<u8>, sizes: &[usize], limit: usize, polling: bool) -> Frames {
        let mut reader = FrameReader::with_limit(Pieces::new(bytes, sizes), limit);
        let mut messages = Vec::new();
        let mut peak_buffer = reader.held();
        let end = loop {
            let next = if polling {
                match reader.try_next::<FromWorker>() {
                    Ok(Some(m)) => Ok(m),
                    Ok(None) => continue,
                    Err(e) => Err(e),
                }
            } else {
                reader.next::<FromWorker>(false)
            };
            peak_buffer = peak_buffer.max(reader.held());
            match next {
                Ok(message) => messages.push(format!("{message:?}")),
                Err(e) => break e,
            }
        };
        Frames {
            messages,
            end: end.kind(),
            end_message: end.to_string(),
            peak_buffer,
        }
    }

    /// Frames for nested-call requests and log lines built from `parts`, and the `Debug` form
    /// of each message.
    pub fn encode_messages(parts: &[(u64, String, String)]) -> (Vec<u8>, Vec<String>) {
        let mut bytes = Vec::new();
        let mut shown = Vec::new();
        for (i, (id, a, b)) in parts.iter().enumerate() {
            let message = if i % 2 == 0 {
                FromWorker::Request {
                    id: *id,
                    call: id.checked_sub(1),
                    request: HostRequest::CallTool {
                        name: a.clone(),
                        args: b.clone(),
                    },
                }
            } else {
                FromWorker::Log {
                    id: *id,
                    level: (*id % 8) as u8,
                    message: format!("{a}{b}"),
                }
            };
            if let Ok(frame) = wire::encode(&message) {
                bytes.extend(frame);
                shown.push(format!("{message:?}"));
            }
        }
        (bytes, shown)
    }

    /// The longest line a worker's output reader keeps.
    pub const OUTPUT_LINE_LIMIT: usize = MAX_LINE;

    /// Read `bytes`, delivered in pieces of `sizes`, as a worker's output lines: each line kept,
    /// and the bytes dropped from it.
    pub fn read_output_lines(bytes: Vec<u8>, sizes: &[usize]) -> Vec<(String, u64)> {
        let mut lines = OutputLines::new(Pieces::new(bytes, sizes));
        let mut out = Vec::new();
        while let Some(line) = lines.next_line() {
            out.push(match line {
                Line::Whole(text) => (text, 0),
                Line::Cut(text, dropped) => (text, dropped),
            });
        }
        out
    }
}
