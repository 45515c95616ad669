//! The worker process (`mcp-host worker`, started by the host with the channel as its stdin): read
//! the set-up message, apply the resource limits and the sandbox while still single-threaded, load
//! the plugin through the same ABI as the host (its `init` runs `enabled()` and constructors here),
//! and serve calls until the host says stop or goes away.
//!
//! Calls run on a leader/follower pool: one thread at a time reads the channel; when it takes a
//! call it hands reading to the next idle thread (starting one when none is idle) and runs the call
//! itself, so a call goes from the socket to the plugin without a thread hand-off. The host API and
//! call context the plugin sees forward over the channel: progress and log events, host log lines,
//! nested `call_tool` (answered by the host, which applies agent views, depth and validation).

use crate::plugins::lock;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, mpsc};
use std::time::{Duration, Instant};

use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{RResult, RStr, RString};
use mcp_plugin_sdk::wire::{
    CallContextFfi, CallContextFfi_TO, HostApiFfi, HostApiFfi_TO, PluginModV1Ref,
};

use super::sandbox;
use super::wire::{FrameReader, FrameWriter, FromWorker, Init, Source, ToWorker};
use crate::plugins::backend::{HostRequest, HostRequestError, PluginCallError};
use crate::plugins::in_process::{Layout, init_module, open_module};

/// A channel read spins first when a message arrived this recently (traffic is flowing).
const RECENT: Duration = Duration::from_millis(1);

type Input = FrameReader<Box<dyn Source + Send>>;

thread_local! {
    /// The call running on this thread, for the parent of the plugin's nested calls.
    static CURRENT: Cell<Option<u64>> = const { Cell::new(None) };
    /// The channel's reading side while this thread runs an inline tool: a nested call gives it
    /// up, since its answer comes through the channel.
    static LEADER: RefCell<Option<MutexGuard<'static, Input>>> = const { RefCell::new(None) };
}

/// The worker's shared state (one per process, never freed).
struct Worker {
    out: FrameWriter<Box<dyn Write + Send>>,
    input: Mutex<Input>,
    module: OnceLock<PluginModV1Ref>,
    /// Per tool: whether it promised to be quick (`#[tool(inline)]`).
    inline: OnceLock<Vec<bool>>,
    /// Cancellation flags of the calls running here.
    running: Mutex<HashMap<u64, Arc<AtomicBool>>>,
    /// Nested calls and host requests waiting for the host's answer.
    waiting: Mutex<HashMap<u64, mpsc::SyncSender<Result<String, HostRequestError>>>>,
    next_request: AtomicU64,
    /// Threads not running a call (one of them is reading the channel).
    idle: AtomicUsize,
    started: Instant,
    /// Microseconds after `started` when the last message arrived.
    last_message: AtomicU64,
}

/// The channel: the socket the host passed as stdin (Unix), moved to a close-on-exec descriptor
/// with `/dev/null` put in its place, so neither the plugin nor a program it runs can read from
/// it or keep it open; stdin and stdout elsewhere.
#[cfg(unix)]
fn channel() -> io::Result<(Box<dyn Source + Send>, Box<dyn Write + Send>)> {
    use std::os::fd::AsFd as _;
    let socket = io::stdin().as_fd().try_clone_to_owned()?;
    rustix::stdio::dup2_stdin(std::fs::File::open("/dev/null")?)?;
    let stream = std::os::unix::net::UnixStream::from(socket);
    Ok((Box::new(stream.try_clone()?), Box::new(stream)))
}

#[cfg(not(unix))]
fn channel() -> io::Result<(Box<dyn Source + Send>, Box<dyn Write + Send>)> {
    Ok((
        Box::new(super::wire::Blocking(io::stdin())),
        Box::new(io::stdout()),
    ))
}

/// Close every descriptor above stdin, stdout and stderr that this process inherited (the host's
/// listening sockets, files, or anything a parent of the host left open without close-on-exec):
/// the plugin gets none of them. The channel is still stdin here.
#[cfg(unix)]
fn close_inherited() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range(2) only closes descriptors; none above 2 is in use by this process
        // yet (this runs first thing in the worker, before any file or thread is opened).
        #[allow(unsafe_code)]
        let closed = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
        if closed == 0 {
            return;
        }
    }
    // Without close_range: every descriptor number this process may have.
    let max = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 16)
        .min(1 << 20);
    for fd in 3..max {
        let Ok(fd) = i32::try_from(fd) else { break };
        // SAFETY: as above: closing descriptors nothing in this process uses.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(fd);
        }
    }
}

/// Run the worker process until the host stops it.
pub fn run_worker() -> ExitCode {
    #[cfg(unix)]
    close_inherited();
    let (input, output) = match channel() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-host worker: no channel to the host on stdin: {e}");
            return ExitCode::from(2);
        }
    };
    let mut input = FrameReader::new(input);
    let out = FrameWriter::new(output);
    let init = match input.next::<ToWorker>(false) {
        Ok(ToWorker::Init(init)) => init,
        Ok(_) | Err(_) => {
            eprintln!("mcp-host worker: the host did not send a set-up message");
            return ExitCode::from(2);
        }
    };
    let fail = |out: &FrameWriter<_>, kind: &str, message: String| {
        let _ = out.send(&FromWorker::Failed {
            kind: kind.to_owned(),
            message,
        });
        ExitCode::from(1)
    };
    // Still single-threaded: what is set now holds for every thread the worker or plugin starts.
    if let Err(e) = sandbox::apply_limits(&init.limits) {
        return fail(&out, "worker", e.to_string());
    }
    if let Some(rules) = &init.sandbox {
        if let Err(e) = sandbox::limit_tasks() {
            return fail(&out, "sandbox", e.to_string());
        }
        match sandbox::enforce(rules, None) {
            Ok(None) => {}
            Ok(Some(note)) => {
                let _ = out.send(&FromWorker::HostLog {
                    level: mcp_plugin_sdk::LogLevel::Warning as u8,
                    service: String::new(),
                    message: note,
                });
            }
            Err(e) => return fail(&out, "sandbox", e.to_string()),
        }
    }
    let worker: &'static Worker = Box::leak(Box::new(Worker {
        out,
        input: Mutex::new(input),
        module: OnceLock::new(),
        inline: OnceLock::new(),
        running: Mutex::default(),
        waiting: Mutex::default(),
        next_request: AtomicU64::new(1),
        idle: AtomicUsize::new(0),
        started: Instant::now(),
        last_message: AtomicU64::new(0),
    }));
    // A reader for the host's answers to calls the plugin makes while it initialises.
    worker.add_thread();
    match load(worker, init) {
        Ok(ready) => worker.send(&ready),
        Err((kind, message)) => return fail(&worker.out, kind, message),
    }
    worker.idle.fetch_add(1, Ordering::AcqRel);
    worker.serve()
}

/// Open the plugin and run its `init` with the worker's host API.
fn load(worker: &'static Worker, init: Init) -> Result<FromWorker, (&'static str, String)> {
    let as_parts = |e: crate::plugins::LoadError| e.parts();
    let (module, build) = open_module(&init.file, Layout::Check).map_err(as_parts)?;
    let host = HostApiFfi_TO::from_value(
        WorkerHost {
            worker,
            config: init.config,
        },
        abi_stable::sabi_trait::TD_Opaque,
    );
    let manifest = init_module(module, host).map_err(as_parts)?;
    let _ = worker
        .inline
        .set(manifest.tools.iter().map(|t| t.inline).collect());
    let _ = worker.module.set(module);
    let json = |v: serde_json::Result<String>| v.map_err(|e| ("manifest", e.to_string()));
    Ok(FromWorker::Ready {
        build: json(serde_json::to_string(&build))?,
        manifest: json(serde_json::to_string(&manifest))?,
    })
}

impl Worker {
    fn send(&self, message: &FromWorker) {
        if self.out.send(message).is_err() {
            // The host is gone: nothing left to serve.
            std::process::exit(0);
        }
    }

    /// Start one more serving thread.
    fn add_thread(&'static self) {
        self.idle.fetch_add(1, Ordering::AcqRel);
        let spawned = std::thread::Builder::new()
            .name("mcp-worker".into())
            .spawn(move || self.serve());
        if let Err(e) = spawned {
            self.idle.fetch_sub(1, Ordering::AcqRel);
            eprintln!("mcp-host worker: cannot start a thread: {e}");
        }
    }

    fn recently_active(&self) -> bool {
        let now = self.started.elapsed().as_micros() as u64;
        now.saturating_sub(self.last_message.load(Ordering::Relaxed)) < RECENT.as_micros() as u64
    }

    /// Serve the channel on this thread, forever.
    fn serve(&'static self) -> ! {
        let mut leading: Option<MutexGuard<'static, Input>> = None;
        loop {
            let mut input = leading.take().unwrap_or_else(|| lock(&self.input));
            let spin = self.recently_active();
            let message = match input.next::<ToWorker>(spin) {
                Ok(message) => message,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => std::process::exit(0),
                Err(e) => {
                    eprintln!("mcp-host worker: broken channel: {e}");
                    std::process::exit(3)
                }
            };
            self.last_message
                .store(self.started.elapsed().as_micros() as u64, Ordering::Relaxed);
            match message {
                ToWorker::Call {
                    id,
                    tool,
                    args,
                    caller,
                    deadline_ms,
                } => {
                    let deadline = deadline_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
                    self.idle.fetch_sub(1, Ordering::AcqRel);
                    let quick = self.inline.get().and_then(|i| i.get(tool as usize)) == Some(&true);
                    if quick {
                        // Quick by promise: run it here and go on reading the channel after.
                        LEADER.with(|l| *l.borrow_mut() = Some(input));
                    } else {
                        // Let another thread read the channel (start one when none is idle).
                        drop(input);
                        if self.idle.load(Ordering::Acquire) == 0 {
                            self.add_thread();
                        }
                    }
                    let result = self.run(id, tool, &args, &caller, deadline);
                    leading = LEADER.with(|l| l.borrow_mut().take());
                    self.send(&FromWorker::Result { id, result });
                    self.idle.fetch_add(1, Ordering::AcqRel);
                }
                ToWorker::Cancel { id } => {
                    if let Some(flag) = lock(&self.running).get(&id) {
                        flag.store(true, Ordering::Release);
                    }
                    leading = Some(input);
                }
                ToWorker::Reply { id, result } => {
                    if let Some(waiter) = lock(&self.waiting).remove(&id) {
                        let _ = waiter.try_send(result);
                    }
                    leading = Some(input);
                }
                ToWorker::Shutdown => {
                    if let Some(module) = self.module.get() {
                        (module.shutdown())();
                    }
                    std::process::exit(0);
                }
                ToWorker::Init(_) => {
                    eprintln!("mcp-host worker: ignoring a second set-up message");
                    leading = Some(input);
                }
            }
        }
    }

    /// Run one call on this thread.
    fn run(
        &'static self,
        id: u64,
        tool: u32,
        args: &str,
        caller: &str,
        deadline: Option<Instant>,
    ) -> Result<String, PluginCallError> {
        let Some(module) = self.module.get() else {
            return Err(PluginCallError::NotLoadedYet);
        };
        let cancelled = Arc::new(AtomicBool::new(false));
        lock(&self.running).insert(id, Arc::clone(&cancelled));
        let call = WorkerCall {
            id,
            cancelled,
            deadline,
            worker: self,
        };
        let previous = CURRENT.with(|c| c.replace(Some(id)));
        let ctx = CallContextFfi_TO::from_ptr(RRef::new(&call), abi_stable::sabi_trait::TD_Opaque);
        let result = (module.call())(tool, RStr::from_str(args), RStr::from_str(caller), ctx);
        CURRENT.with(|c| c.set(previous));
        lock(&self.running).remove(&id);
        match result {
            RResult::ROk(json) => Ok(json.into_string()),
            RResult::RErr(e) => Err(PluginCallError::Plugin(e.into_string())),
        }
    }

    /// Ask the host `request` (made in call `call`) and wait for its answer, as the ABI carries
    /// it back to the plugin. A request that does not parse is answered here.
    fn ask(
        &'static self,
        call: Option<u64>,
        request: Result<HostRequest, HostRequestError>,
    ) -> RResult<RString, RString> {
        let answer = request.and_then(|request| self.ask_host(call, request));
        match answer {
            Ok(json) => RResult::ROk(json.into()),
            Err(e) => RResult::RErr(e.to_plugin().into()),
        }
    }

    /// Send `request` to the host and wait for its answer.
    fn ask_host(
        &'static self,
        call: Option<u64>,
        request: HostRequest,
    ) -> Result<String, HostRequestError> {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::sync_channel(1);
        lock(&self.waiting).insert(id, tx);
        // An inline tool reading the channel gives that up: the answer must be read by another.
        if let Some(reading) = LEADER.with(|l| l.borrow_mut().take()) {
            drop(reading);
            if self.idle.load(Ordering::Acquire) == 0 {
                self.add_thread();
            }
        }
        self.send(&FromWorker::Request { id, call, request });
        rx.recv().unwrap_or(Err(HostRequestError::NoAnswer))
    }
}

/// The call context of one call running in the worker.
struct WorkerCall {
    id: u64,
    cancelled: Arc<AtomicBool>,
    deadline: Option<Instant>,
    worker: &'static Worker,
}

impl CallContextFfi for WorkerCall {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn progress(&self, progress: f64, total: f64, message: RStr<'_>) {
        self.worker.send(&FromWorker::Progress {
            id: self.id,
            progress,
            total: (!total.is_nan()).then_some(total),
            message: (!message.is_empty()).then(|| message.as_str().to_owned()),
        });
    }

    fn log(&self, level: u8, message: RStr<'_>) {
        self.worker.send(&FromWorker::Log {
            id: self.id,
            level,
            message: message.as_str().to_owned(),
        });
    }

    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        let request = HostRequest::from_call_context(method.as_str(), params.as_str());
        self.worker.ask(Some(self.id), request)
    }
}

/// The host API a plugin holds in the worker: its configuration, and the rest over the channel.
struct WorkerHost {
    worker: &'static Worker,
    config: String,
}

impl HostApiFfi for WorkerHost {
    fn config(&self) -> RString {
        RString::from(self.config.as_str())
    }

    fn log(&self, level: u8, service: RStr<'_>, message: RStr<'_>) {
        self.worker.send(&FromWorker::HostLog {
            level,
            service: service.as_str().to_owned(),
            message: message.as_str().to_owned(),
        });
    }

    fn call_tool(&self, name: RStr<'_>, args: RStr<'_>) -> RResult<RString, RString> {
        let request = HostRequest::CallTool {
            name: name.as_str().to_owned(),
            args: args.as_str().to_owned(),
        };
        self.worker.ask(CURRENT.with(Cell::get), Ok(request))
    }

    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        let request = HostRequest::from_host_api(method.as_str(), params.as_str());
        self.worker.ask(CURRENT.with(Cell::get), request)
    }
}
