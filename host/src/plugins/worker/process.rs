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
use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::LogLevel;
use mcp_plugin_sdk::wire::{BuildInfo, Manifest};

use super::wire::{FrameReader, FrameWriter, FromWorker, Source, ToWorker};
use crate::exec::{CallEvent, CallState, error_result};
use crate::plugins::backend::{HostCallbacks, host_request};
use crate::plugins::{LoadError, describe_exit, signal_name};

/// Lines of a worker's output kept for crash reports.
const TAIL_LINES: usize = 8;

/// What it takes to start a worker process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerCommand {
    /// The `mcp-host` executable.
    pub exe: PathBuf,
    /// Environment variables it keeps (`None`: all of the host's).
    pub env: Option<Vec<String>>,
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
    Async(tokio::sync::oneshot::Sender<Result<String, String>>),
    /// A blocking call (a nested call on a host thread).
    Blocking(mpsc::SyncSender<Result<String, String>>),
}

impl Waiter {
    fn complete(self, result: Result<String, String>) {
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

/// Forward a worker's output to the host's log, keeping the last lines for crash reports.
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
            for line in io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                tracing::warn!(plugin = &*plugin, pid, "worker output: {line}");
                let mut tail = lock(&kept);
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
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
        if let Some(keep) = &command.env {
            cmd.env_clear();
            for name in keep {
                if let Some(value) = std::env::var_os(name) {
                    cmd.env(name, value);
                }
            }
        }
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
                frames: FrameReader::new(channel.input),
                ready: Some(ready_tx),
            }),
            out: FrameWriter::new(channel.output),
            calls: Mutex::default(),
            ended: Condvar::new(),
            next_id: AtomicU64::new(1),
            child: Mutex::new(child),
            kill_reason: Mutex::new(None),
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

    fn complete(&self, id: u64, result: Result<String, String>) {
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
            FromWorker::CallTool {
                id,
                parent,
                name,
                args,
            } => self.nested(id, parent, name, args),
            FromWorker::Request { id, method, params } => {
                let result = host_request(&*self.host, &self.plugin, &method, &params);
                self.send(&ToWorker::Reply { id, result });
            }
            FromWorker::CallRequest {
                id,
                call,
                method,
                params,
            } => self.call_request(id, call, method, params),
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

    /// A nested tool call from the plugin: run it through the host on its own thread (it may take
    /// long, and it may call back into this very worker), then send the answer.
    /// Answer a request a running call makes through its context (`input/ask` may wait for the
    /// client: on a thread of its own, like nested calls).
    fn call_request(self: &Arc<Self>, id: u64, call: u64, method: String, params: String) {
        let Some(state) = self.call_of(call) else {
            self.send(&ToWorker::Reply {
                id,
                result: Err(format!("{method}: the call is no longer running")),
            });
            return;
        };
        let process = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("mcp-call-request".into())
            .spawn(move || {
                let result = state.request(&method, &params);
                process.send(&ToWorker::Reply { id, result });
            });
        if let Err(e) = spawned {
            self.send(&ToWorker::Reply {
                id,
                result: Err(format!("cannot answer a call's request: {e}")),
            });
        }
    }

    fn nested(self: &Arc<Self>, id: u64, parent: Option<u64>, name: String, args: String) {
        let parent = parent.and_then(|p| self.call_of(p));
        let process = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("mcp-nested".into())
            .spawn(move || {
                let result = process.host.call_nested(parent.as_ref(), &name, &args);
                process.send(&ToWorker::Reply { id, result });
            });
        if let Err(e) = spawned {
            self.send(&ToWorker::Reply {
                id,
                result: Err(format!("cannot run the nested call: {e}")),
            });
        }
    }
}

fn emit(call: &CallState, event: CallEvent) {
    if let Some(sink) = &call.events {
        sink(event);
    }
}
