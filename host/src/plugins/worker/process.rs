//! One worker process, from the host's side: starting it (`mcp-host worker` with the channel as its
//! stdin and its output in the host's log), the calls in flight on it, and the reading of its
//! messages — results, progress and log events, nested tool calls, host requests — until its
//! channel closes; then it is reaped and whatever was still in flight fails.
//!
//! The channel is read on the host's async runtime when it has one (readiness from the runtime's
//! reactor, then non-blocking reads): an answer then wakes the runtime thread that waits for it,
//! with no thread in between. A host started outside a runtime reads on a thread of its own. Either
//! way, a caller alone on the worker may read its answer itself while it spins.

use crate::plugins::lock;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::LogLevel;
use mcp_plugin_sdk::wire::{BuildInfo, Manifest};

use super::wire::{FrameReader, FrameWriter, FromWorker, Source, ToWorker};
use crate::plugins::backend::{
    self, HostCallbacks, HostRequest, HostRequestError, PluginCallError,
};
use crate::plugins::call::{CallEvent, CallState, error_result};
use crate::plugins::{LoadError, describe_exit, output, signal_name};

/// Lines of a worker's output kept for crash reports.
const TAIL_LINES: usize = 8;
/// Host threads answering one worker's nested calls and call requests at a time.
pub(crate) const NESTED_THREADS: usize = 16;
/// One worker's nested calls and call requests waiting for one of those threads; past this, a
/// request is answered with an error at once.
pub(crate) const NESTED_QUEUE: usize = 256;
/// How long an idle nested-call thread stays for the next request.
const NESTED_IDLE: Duration = Duration::from_secs(5);
/// Environment variables every worker keeps from the host's (`process` isolation; a sandboxed
/// worker keeps only its `permissions.env`), besides the plugin's `permissions.env`. Names ending
/// in `*` are prefixes.
pub(crate) const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
];
/// Prefixes of variables no worker ever gets, even when its `permissions.env` names them: the
/// host's own configuration (`MCP_HOST_AUTH__...` carries secrets such as the JWT key).
pub(crate) const NEVER_ENV: &[&str] = &["MCP_HOST_"];

/// What it takes to start a worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerCommand {
    /// The `mcp-host` executable.
    pub exe: PathBuf,
    /// Environment variables it keeps (names; a trailing `*` keeps every name with that prefix).
    /// Everything else is removed, and [`NEVER_ENV`] always is.
    pub env: Vec<String>,
    /// The largest frame the host reads from it (`limits.max_result_bytes` and some room).
    pub max_frame: usize,
}

impl WorkerCommand {
    /// The environment a worker started by this command gets, from the host's `vars`.
    pub(crate) fn environment(
        &self,
        vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        vars.filter(|(name, _)| {
            let Some(name) = name.to_str() else {
                return false;
            };
            let listed = self.env.iter().any(|keep| match keep.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == keep,
            });
            listed && !NEVER_ENV.iter().any(|never| name.starts_with(never))
        })
        .collect()
    }
}

/// A plugin loaded in a worker: its fingerprint and manifest.
pub(crate) type Loaded = (BuildInfo, Manifest);

/// Receives a worker's load result.
pub(crate) type ReadyReceiver = mpsc::Receiver<Result<Loaded, LoadError>>;

/// Runs once a worker process has ended, with how it ended.
pub(crate) type OnExit = Box<dyn FnOnce(&Arc<Process>, String) + Send>;

/// Who waits for a call's result.
pub(super) enum Waiter {
    /// An async call (the executor's task).
    Async(tokio::sync::oneshot::Sender<Result<String, PluginCallError>>),
    /// A blocking call (a nested call on a host thread).
    Blocking(mpsc::SyncSender<Result<String, PluginCallError>>),
}

impl Waiter {
    fn complete(self, result: Result<String, PluginCallError>) {
        match self {
            Waiter::Async(tx) => {
                let _ = tx.send(result);
            }
            Waiter::Blocking(tx) => {
                let _ = tx.try_send(result);
            }
        }
    }
}

/// Work for the host threads that answer a worker's nested calls and call requests.
type Job = Box<dyn FnOnce() + Send>;

/// The bounded pool of host threads for one worker's nested calls and call requests.
#[derive(Default)]
struct NestedPool {
    /// The jobs waiting, with the id of the request each answers.
    queue: VecDeque<(u64, Job)>,
    threads: usize,
    idle: usize,
}

struct InFlight {
    call: Arc<CallState>,
    waiter: Waiter,
}

#[derive(Default)]
struct Calls {
    running: HashMap<u64, InFlight>,
    /// Set when the process is gone: how it ended (`SIGSEGV`, `exited with status 3`, ...).
    ended: Option<String>,
}

/// The reading side of a worker's channel.
struct Input {
    frames: FrameReader<Box<dyn Source + Send>>,
    /// Where the load result goes, until it came.
    ready: Option<mpsc::SyncSender<Result<Loaded, LoadError>>>,
}

/// A running worker process.
pub(crate) struct Process {
    /// Its process id.
    pub(crate) pid: u32,
    plugin: Arc<str>,
    host: Arc<dyn HostCallbacks>,
    input: Mutex<Input>,
    out: FrameWriter<Box<dyn Write + Send>>,
    calls: Mutex<Calls>,
    ended: Condvar,
    next_id: AtomicU64,
    child: Mutex<Child>,
    /// Why the host killed it, when it did.
    kill_reason: Mutex<Option<String>>,
    tail: Arc<Mutex<VecDeque<String>>>,
    nested: Mutex<NestedPool>,
    nested_ready: Condvar,
    /// Whether refusing nested calls (too many at once) was logged for this worker.
    refusal_logged: AtomicBool,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("plugin", &self.plugin)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// The channel's two ends on this platform: a socket pair on Unix (the worker's end becomes its
/// stdin, and its stdout joins its stderr in the host's log); the worker's stdin and stdout pipes
/// elsewhere.
struct Channel {
    input: Box<dyn Source + Send>,
    output: Box<dyn Write + Send>,
    /// The socket, for readiness from the async runtime.
    #[cfg(unix)]
    readiness: std::os::fd::OwnedFd,
}

#[cfg(unix)]
fn connect(
    cmd: &mut Command,
    log: io::PipeWriter,
) -> io::Result<impl FnOnce(&mut Child) -> io::Result<Channel> + use<>> {
    use std::os::unix::net::UnixStream;
    let (host_end, worker_end) = UnixStream::pair()?;
    cmd.stdin(Stdio::from(std::os::fd::OwnedFd::from(worker_end)))
        .stdout(log.try_clone()?)
        .stderr(log);
    Ok(move |_: &mut Child| {
        Ok(Channel {
            input: Box::new(host_end.try_clone()?),
            readiness: std::os::fd::OwnedFd::from(host_end.try_clone()?),
            output: Box::new(host_end),
        })
    })
}

#[cfg(not(unix))]
fn connect(
    cmd: &mut Command,
    log: io::PipeWriter,
) -> io::Result<impl FnOnce(&mut Child) -> io::Result<Channel> + use<>> {
    use super::wire::Blocking;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(log);
    Ok(|child: &mut Child| {
        let missing = || io::Error::other("worker pipes missing");
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stdin = child.stdin.take().ok_or_else(missing)?;
        Ok(Channel {
            input: Box::new(Blocking(stdout)),
            output: Box::new(stdin),
        })
    })
}

/// Forward a worker's output to the host's log, keeping the last lines for crash reports, through
/// the bounded path every stranger's output takes ([`output::forward`]: each line escaped and cut
/// at [`output::MAX_LINE`] bytes; [`output::BURST`] lines at once, then [`output::RATE`] a second,
/// a burst's last lines kept and logged with the count of the others when it ends).
fn forward_output(
    plugin: Arc<str>,
    pid: u32,
    pipe: io::PipeReader,
) -> Arc<Mutex<VecDeque<String>>> {
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let kept = Arc::clone(&tail);
    let spawned = std::thread::Builder::new()
        .name(format!("mcp-worker-log-{pid}"))
        .spawn(move || {
            let each = |text: &str| {
                let mut tail = lock(&kept);
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(text.to_owned());
            };
            output::forward(pipe, each, |logged| {
                tracing::warn!(plugin = &*plugin, pid, "worker output: {logged}");
            });
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot forward the output of worker {pid}: {e}");
    }
    tail
}

impl Process {
    /// Start a worker for `plugin` and send it `init`; its channel is read on `runtime` when
    /// given, else on a thread; `on_exit` runs once it has ended, with how it ended. Returns the
    /// process and a receiver for its load result.
    pub(crate) fn spawn(
        command: &WorkerCommand,
        plugin: Arc<str>,
        init: super::wire::Init,
        host: Arc<dyn HostCallbacks>,
        runtime: Option<&tokio::runtime::Handle>,
        on_exit: OnExit,
    ) -> Result<(Arc<Process>, ReadyReceiver), LoadError> {
        let fail = |what: &str, e: io::Error| LoadError::Worker(format!("{what}: {e}"));
        let mut cmd = Command::new(&command.exe);
        cmd.arg("worker");
        // Only what the worker is meant to see: never the host's whole environment.
        cmd.env_clear();
        cmd.envs(command.environment(std::env::vars_os()));
        // The worker sets its address-space limit (`limits.memory_mb`, RLIMIT_AS) once it runs,
        // after the allocator reserved its first arena: that arena is 64 MiB in every mcp-host
        // process (`allocator::configure`), which leaves a 512 MB limit room for threads and a
        // plugin's segments.
        let (log_reader, log_writer) = io::pipe().map_err(|e| fail("cannot make a pipe", e))?;
        let channel =
            connect(&mut cmd, log_writer).map_err(|e| fail("cannot make a channel", e))?;
        let mut child = cmd
            .spawn()
            .map_err(|e| fail(&format!("cannot start {} worker", command.exe.display()), e))?;
        // The worker's ends (and the log pipe's writer) live in the command: close ours, so the
        // channel and the pipe end when the worker does.
        drop(cmd);
        let channel = channel(&mut child).map_err(|e| fail("cannot open the channel", e))?;
        let pid = child.id();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let process = Arc::new(Process {
            pid,
            tail: forward_output(Arc::clone(&plugin), pid, log_reader),
            plugin,
            host,
            input: Mutex::new(Input {
                frames: FrameReader::with_limit(channel.input, command.max_frame),
                ready: Some(ready_tx),
            }),
            out: FrameWriter::new(channel.output),
            calls: Mutex::default(),
            ended: Condvar::new(),
            next_id: AtomicU64::new(1),
            child: Mutex::new(child),
            kill_reason: Mutex::new(None),
            nested: Mutex::default(),
            nested_ready: Condvar::new(),
            refusal_logged: AtomicBool::new(false),
        });
        #[cfg(unix)]
        let read_async = runtime.map(|rt| (rt, channel.readiness));
        #[cfg(not(unix))]
        let read_async: Option<(&tokio::runtime::Handle, ())> = runtime.and(None);
        match read_async {
            Some((rt, readiness)) => {
                let process = Arc::clone(&process);
                rt.spawn(async move { process.read_async(readiness, on_exit).await });
            }
            None => {
                let reader = Arc::clone(&process);
                std::thread::Builder::new()
                    .name(format!("mcp-worker-{pid}"))
                    .spawn(move || reader.read_blocking(on_exit))
                    .map_err(|e| {
                        process.kill();
                        fail("cannot start the reader thread", e)
                    })?;
            }
        }
        if let Err(e) = process.out.send(&ToWorker::Init(init)) {
            // The reader sees the end and reports it as the load result.
            tracing::debug!("worker {pid}: cannot send its set-up: {e}");
        }
        Ok((process, ready_rx))
    }

    /// Register `call` as in flight; `None` when the process has already ended.
    pub(super) fn register(&self, call: &Arc<CallState>, waiter: Waiter) -> Option<u64> {
        let mut calls = lock(&self.calls);
        if calls.ended.is_some() {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        calls.running.insert(
            id,
            InFlight {
                call: Arc::clone(call),
                waiter,
            },
        );
        Some(id)
    }

    /// Send a message (a failure means the process is ending; its reader reports that).
    pub(super) fn send(&self, message: &ToWorker) {
        if let Err(e) = self.out.send(message) {
            tracing::debug!(
                plugin = &*self.plugin,
                "worker {}: send failed: {e}",
                self.pid
            );
        }
    }

    /// Kill the process (its reader then reaps it and fails its calls).
    pub(crate) fn kill(&self) {
        let _ = lock(&self.child).kill();
    }

    /// Kill it for `reason` (which its calls and the crash report then name).
    pub(super) fn kill_because(&self, reason: String) {
        lock(&self.kill_reason).get_or_insert(reason);
        self.kill();
    }

    /// Wait up to `limit` for the process to have ended; whether it has.
    pub(super) fn wait_ended(&self, limit: Duration) -> bool {
        let calls = lock(&self.calls);
        let (calls, _) = self
            .ended
            .wait_timeout_while(calls, limit, |c| c.ended.is_none())
            .unwrap_or_else(|p| p.into_inner());
        calls.ended.is_some()
    }

    fn has_calls(&self) -> bool {
        !lock(&self.calls).running.is_empty()
    }

    /// How many calls are in flight.
    pub(super) fn in_flight(&self) -> usize {
        lock(&self.calls).running.len()
    }

    fn call_of(&self, id: u64) -> Option<Arc<CallState>> {
        lock(&self.calls)
            .running
            .get(&id)
            .map(|c| Arc::clone(&c.call))
    }

    fn complete(&self, id: u64, result: Result<String, PluginCallError>) {
        let done = lock(&self.calls).running.remove(&id);
        if let Some(done) = done {
            done.waiter.complete(result);
        }
    }

    /// How the process ended, once it has.
    pub(super) fn ended_how(&self) -> Option<String> {
        lock(&self.calls).ended.clone()
    }

    /// Mark the process ended (`how`) and answer every call still in flight with `message` as an
    /// error result.
    fn end(&self, how: &str, message: &str) {
        let running = {
            let mut calls = lock(&self.calls);
            calls.ended = Some(how.to_owned());
            std::mem::take(&mut calls.running)
        };
        self.ended.notify_all();
        let result = error_result(message).to_string();
        for (_, call) in running {
            call.waiter.complete(Ok(result.clone()));
        }
    }

    /// Wait for the process to exit (it closed its channel; give it a moment, then kill it) and
    /// say how it ended: the signal's name or the exit status, and why the host killed it.
    fn reap(&self, broken: bool) -> (String, String) {
        let mut child = lock(&self.child);
        if broken {
            let _ = child.kill();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(None) => {
                    let _ = child.kill();
                    break child.wait().ok();
                }
                Err(_) => break None,
            }
        };
        let killed = lock(&self.kill_reason).clone();
        let short = match (status.and_then(signal_name), status) {
            (Some(sig), _) => sig,
            (None, Some(s)) => describe_exit(s),
            (None, None) => "lost".into(),
        };
        let short = match killed {
            Some(why) => format!("{short}: {why}"),
            None => short,
        };
        let long = status.map_or_else(|| "lost".to_owned(), describe_exit);
        (short, long)
    }

    /// The last lines the worker wrote, for a crash report.
    fn tail(&self) -> String {
        let tail = lock(&self.tail);
        if tail.is_empty() {
            String::new()
        } else {
            format!("; its last output: {}", Vec::from(tail.clone()).join(" | "))
        }
    }
}

impl Process {
    /// Read the channel on this thread until it ends.
    fn read_blocking(self: Arc<Self>, on_exit: OnExit) {
        let error = loop {
            // An answer is due soon when calls are in flight: spin briefly before blocking.
            let spin = self.has_calls();
            let mut input = lock(&self.input);
            match input.frames.next::<FromWorker>(spin) {
                Ok(message) => self.handle(&mut input, message),
                Err(e) => break e,
            }
        };
        self.finish(&error, on_exit);
    }

    /// Read the channel on the async runtime until it ends (then reap the process on a thread).
    #[cfg(unix)]
    async fn read_async(self: Arc<Self>, socket: std::os::fd::OwnedFd, on_exit: OnExit) {
        use tokio::io::unix::AsyncFd;
        // SAFETY: the `OwnedFd` is a valid open descriptor (a duplicate of the channel's socket)
        // that the `AsyncFd` owns: it stays open, on the same file description, and `as_raw_fd`
        // returns the same number until the `AsyncFd` is dropped.
        #[allow(unsafe_code)]
        let registered =
            unsafe { AsyncFd::register_with_interest(socket, tokio::io::Interest::READABLE) };
        let error = match registered.map_err(io::Error::from) {
            Ok(readiness) => loop {
                match readiness.readable().await {
                    Ok(mut ready) => match self.drain() {
                        Ok(()) => ready.clear_ready(),
                        Err(e) => break e,
                    },
                    Err(e) => break e,
                }
            },
            Err(e) => e,
        };
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-worker-end-{}", self.pid))
            .spawn(move || self.finish(&error, on_exit));
        if let Err(e) = spawned {
            tracing::error!("cannot reap a worker: {e}");
        }
    }

    /// Handle every message that can be read now, without blocking.
    fn drain(self: &Arc<Self>) -> io::Result<()> {
        let mut input = lock(&self.input);
        while let Some(message) = input.frames.try_next::<FromWorker>()? {
            self.handle(&mut input, message);
        }
        Ok(())
    }

    /// Read what has arrived, when no one else is reading: for a caller waiting alone, so its
    /// answer does not have to wait for the reader to be scheduled. A broken channel kills the
    /// process (the reader then reports its end).
    pub(super) fn read_now(self: &Arc<Self>) {
        let Ok(mut input) = self.input.try_lock() else {
            return;
        };
        loop {
            match input.frames.try_next::<FromWorker>() {
                Ok(Some(message)) => self.handle(&mut input, message),
                Ok(None) => return,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return,
                Err(e) => {
                    drop(input);
                    self.kill_because(format!("broken channel: {e}"));
                    return;
                }
            }
        }
    }

    /// The channel ended (`error`): reap the process, fail its calls, report how it ended.
    fn finish(self: Arc<Self>, error: &io::Error, on_exit: OnExit) {
        let broken = error.kind() != io::ErrorKind::UnexpectedEof;
        if broken {
            lock(&self.kill_reason).get_or_insert_with(|| format!("broken channel: {error}"));
            tracing::error!(
                plugin = &*self.plugin,
                "worker {}: broken channel ({error}); killing it",
                self.pid
            );
        }
        let (short, long) = self.reap(broken);
        let message = format!("plugin {} crashed ({short})", self.plugin);
        self.end(&short, &message);
        let ready = lock(&self.input).ready.take();
        if let Some(ready) = ready {
            let _ = ready.send(Err(LoadError::Worker(format!(
                "the worker process {long} while loading the plugin{}",
                self.tail()
            ))));
        } else {
            tracing::debug!(
                plugin = &*self.plugin,
                "worker {} {long}{}",
                self.pid,
                self.tail()
            );
        }
        on_exit(&self, short);
    }

    fn handle(self: &Arc<Self>, input: &mut Input, message: FromWorker) {
        match message {
            FromWorker::Result { id, result } => self.complete(id, result),
            FromWorker::Progress {
                id,
                progress,
                total,
                message,
            } => self.event(
                id,
                CallEvent::Progress {
                    progress,
                    total,
                    message,
                },
            ),
            FromWorker::Log { id, level, message } => {
                if let Some(call) = self.call_of(id) {
                    emit(
                        &call,
                        CallEvent::Log {
                            level: LogLevel::from_u8(level),
                            message,
                            logger: call.tool.to_string(),
                        },
                    );
                }
            }
            FromWorker::HostLog {
                level,
                service,
                message,
            } => crate::plugins::log_plugin_line(&self.plugin, level, &service, &message),
            FromWorker::Request { id, call, request } => self.request(id, call, request),
            FromWorker::Ready { build, manifest } => {
                let loaded = serde_json::from_str::<BuildInfo>(&build)
                    .map_err(|e| LoadError::Build(format!("unreadable build fingerprint: {e}")))
                    .and_then(|b| {
                        serde_json::from_str::<Manifest>(&manifest)
                            .map(|m| (b, m))
                            .map_err(|e| LoadError::Manifest(e.to_string()))
                    });
                if let Some(ready) = input.ready.take() {
                    let _ = ready.send(loaded);
                }
            }
            FromWorker::Failed { kind, message } => {
                if let Some(ready) = input.ready.take() {
                    let _ = ready.send(Err(LoadError::from_parts(&kind, message)));
                }
            }
        }
    }

    fn event(&self, id: u64, event: CallEvent) {
        if let Some(call) = self.call_of(id) {
            emit(&call, event);
        }
    }

    /// Answer request `id` the plugin made in call `call`: at once when that cannot take long
    /// (announcements, the data directory), else on a nested-call thread (a nested call may take
    /// long and call back into this very worker; a call-context request may wait for the client).
    /// A call-context request about a call that is no longer running is answered with that error;
    /// a nested call whose parent ended runs without one.
    fn request(self: &Arc<Self>, id: u64, call: Option<u64>, request: HostRequest) {
        let state = call.and_then(|c| self.call_of(c));
        if request.is_call_context() && state.is_none() {
            let method = request.method().into();
            self.send(&ToWorker::Reply {
                id,
                result: Err(HostRequestError::CallEnded { method }),
            });
            return;
        }
        if !request.may_wait() {
            let result = backend::answer(&*self.host, &self.plugin, state.as_ref(), request);
            self.send(&ToWorker::Reply { id, result });
            return;
        }
        let process = Arc::clone(self);
        self.on_nested_thread(id, move || {
            let result = backend::answer(&*process.host, &process.plugin, state.as_ref(), request);
            process.send(&ToWorker::Reply { id, result });
        });
    }

    /// Run `job` (which answers request `id`) on one of this worker's nested-call threads: at most
    /// [`NESTED_THREADS`] run at once and [`NESTED_QUEUE`] wait; past that (or when no thread can
    /// start) the request is answered with an error at once, so a worker flooding the channel with
    /// requests costs the host a bounded number of threads and a bounded queue.
    fn on_nested_thread(self: &Arc<Self>, id: u64, job: impl FnOnce() + Send + 'static) {
        let refused = {
            let mut pool = lock(&self.nested);
            if pool.idle > pool.queue.len() {
                pool.queue.push_back((id, Box::new(job)));
                self.nested_ready.notify_one();
                None
            } else if pool.threads < NESTED_THREADS {
                pool.queue.push_back((id, Box::new(job)));
                pool.threads += 1;
                drop(pool);
                let process = Arc::clone(self);
                let spawned = std::thread::Builder::new()
                    .name(format!("mcp-nested-{}", self.pid))
                    .spawn(move || process.nested_thread());
                match spawned {
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!(
                            plugin = &*self.plugin,
                            "worker {}: cannot start a nested-call thread: {e}",
                            self.pid
                        );
                        let mut pool = lock(&self.nested);
                        pool.threads -= 1;
                        // Queued jobs wait for a running thread; with none, answer them now.
                        let stranded: Vec<u64> = if pool.threads == 0 {
                            pool.queue.drain(..).map(|(id, _)| id).collect()
                        } else {
                            Vec::new()
                        };
                        drop(pool);
                        for id in stranded {
                            self.send(&ToWorker::Reply {
                                id,
                                result: Err(HostRequestError::NoThread(e.to_string())),
                            });
                        }
                        None
                    }
                }
            } else if pool.queue.len() < NESTED_QUEUE {
                pool.queue.push_back((id, Box::new(job)));
                None
            } else {
                Some(HostRequestError::Overloaded {
                    plugin: self.plugin.to_string(),
                    running: NESTED_THREADS,
                    waiting: NESTED_QUEUE,
                })
            }
        };
        if let Some(refused) = refused {
            self.warn_refused_nested();
            self.send(&ToWorker::Reply {
                id,
                result: Err(refused),
            });
        }
    }

    /// Log (once per worker) that its nested calls are being refused.
    fn warn_refused_nested(&self) {
        if !self.refusal_logged.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                plugin = &*self.plugin,
                "worker {}: too many nested calls at once ({NESTED_THREADS} running, \
                 {NESTED_QUEUE} waiting); refusing the rest",
                self.pid
            );
        }
    }

    /// A nested-call thread: run queued jobs until none came for [`NESTED_IDLE`].
    fn nested_thread(self: Arc<Self>) {
        let mut pool = lock(&self.nested);
        loop {
            if let Some((_, job)) = pool.queue.pop_front() {
                drop(pool);
                job();
                pool = lock(&self.nested);
                continue;
            }
            pool.idle += 1;
            let (next, timeout) = self
                .nested_ready
                .wait_timeout_while(pool, NESTED_IDLE, |p| p.queue.is_empty())
                .unwrap_or_else(|p| p.into_inner());
            pool = next;
            pool.idle -= 1;
            if timeout.timed_out() && pool.queue.is_empty() {
                pool.threads -= 1;
                return;
            }
        }
    }
}

fn emit(call: &CallState, event: CallEvent) {
    if let Some(sink) = &call.events {
        sink(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_keeps_listed_variables_and_prefixes_but_never_the_hosts_own() {
        let command = WorkerCommand {
            exe: PathBuf::from("mcp-host"),
            env: vec![
                "PATH".into(),
                "LC_*".into(),
                "MCP_HOST_AUTH__JWT__SECRET".into(),
            ],
            max_frame: 1024,
        };
        let vars = [
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("SECRET_TOKEN", "s"),
            ("MCP_HOST_AUTH__JWT__SECRET", "k"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let kept: Vec<_> = command
            .environment(vars.into_iter())
            .into_iter()
            .map(|(k, _)| k.into_string().unwrap_or_default())
            .collect();
        assert_eq!(kept, ["PATH", "LC_ALL"]);
    }
}
