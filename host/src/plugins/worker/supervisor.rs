//! Supervision of one isolated plugin version: its current worker process, a restart with backoff
//! after each crash, quarantine after a crash loop, the calls themselves (a future for the
//! executor, a blocking form for nested calls) with cancellation forwarded and a kill when a call
//! runs past its deadline plus [`KILL_GRACE`], and retirement (the host drained the version: the
//! worker runs the plugin's shutdown hook and exits, or is killed).

use crate::plugins::lock;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::wire::{BuildInfo, Manifest};
use tokio::sync::oneshot;

use super::process::{Process, Waiter, WorkerCommand};
use super::wire::{Init, SPIN, ToWorker, spinning_pays};
use crate::plugins::LoadError;
use crate::plugins::backend::{HostCallbacks, PluginCallError};
use crate::plugins::call::CallState;

/// How long a call may run past its deadline (its cancellation flag set, the client answered)
/// before its worker is killed to free the call's slots.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long a worker may take to load its plugin.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a retired worker may take to run the plugin's shutdown hook and exit.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The longest pause before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// When crashes become a crash loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CrashPolicy {
    /// Crashes within `window` that quarantine the plugin.
    pub max: u32,
    /// The window.
    pub window: Duration,
}

/// Everything needed to (re)start the plugin's worker.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// The plugin file (in its tool directory).
    pub file: PathBuf,
    pub command: WorkerCommand,
    pub init: Init,
    /// The host's async runtime, where the channel is read (a thread reads it without one).
    pub runtime: Option<tokio::runtime::Handle>,
}

enum Current {
    Starting,
    Running(Arc<Process>),
    Restarting,
    Quarantined(String),
    Retired,
}

struct State {
    current: Current,
    /// When recent crashes happened (within the policy's window).
    crashes: VecDeque<Instant>,
}

/// What to do after a crash, once the state lock is released.
enum Next {
    Restart(Duration),
    Quarantined(String),
}

/// The supervisor of one isolated plugin version.
pub(crate) struct Supervisor {
    plugin: Arc<str>,
    launch: Launch,
    host: Arc<dyn HostCallbacks>,
    policy: CrashPolicy,
    manifest: OnceLock<Manifest>,
    state: Mutex<State>,
    changed: Condvar,
    notify: tokio::sync::Notify,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("plugin", &self.plugin)
            .finish_non_exhaustive()
    }
}

/// The pause before restarting after the `n`th crash in the window: none for the first, then
/// doubling from 50 ms up to [`MAX_BACKOFF`] (workers and upstream servers alike).
pub(crate) fn backoff(n: u32) -> Duration {
    match n {
        0 | 1 => Duration::ZERO,
        n => Duration::from_millis(50)
            .saturating_mul(1 << (n - 2).min(16))
            .min(MAX_BACKOFF),
    }
}

impl Supervisor {
    /// Start the first worker and wait until it has loaded the plugin.
    pub(crate) fn start(
        plugin: &str,
        launch: Launch,
        host: Arc<dyn HostCallbacks>,
        policy: CrashPolicy,
    ) -> Result<(Arc<Supervisor>, BuildInfo, Manifest), LoadError> {
        let supervisor = Arc::new(Supervisor {
            plugin: Arc::from(plugin),
            launch,
            host,
            policy,
            manifest: OnceLock::new(),
            state: Mutex::new(State {
                current: Current::Starting,
                crashes: VecDeque::new(),
            }),
            changed: Condvar::new(),
            notify: tokio::sync::Notify::new(),
        });
        match supervisor.launch() {
            Ok((process, build, manifest)) => {
                let _ = supervisor.manifest.set(manifest.clone());
                supervisor.adopt(process);
                Ok((supervisor, build, manifest))
            }
            Err(e) => {
                lock(&supervisor.state).current = Current::Retired;
                Err(e)
            }
        }
    }

    /// Start a worker process and wait for its load result.
    fn launch(self: &Arc<Self>) -> Result<(Arc<Process>, BuildInfo, Manifest), LoadError> {
        let weak = Arc::downgrade(self);
        let on_exit = Box::new(move |process: &Arc<Process>, how: String| {
            if let Some(supervisor) = weak.upgrade() {
                supervisor.exited(process, &how);
            }
        });
        let (process, ready) = Process::spawn(
            &self.launch.command,
            Arc::clone(&self.plugin),
            self.launch.init.clone(),
            Arc::clone(&self.host),
            self.launch.runtime.as_ref(),
            on_exit,
        )?;
        match ready.recv_timeout(START_TIMEOUT) {
            Ok(Ok((build, manifest))) => Ok((process, build, manifest)),
            Ok(Err(e)) => {
                process.kill();
                Err(e)
            }
            Err(_) => {
                process.kill();
                Err(LoadError::Worker(format!(
                    "the worker did not load the plugin within {} s",
                    START_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// Make `process` the one serving calls (it may already have died: then it is a crash).
    fn adopt(self: &Arc<Self>, process: Arc<Process>) {
        {
            let mut state = lock(&self.state);
            if !matches!(state.current, Current::Starting | Current::Restarting) {
                drop(state);
                process.kill();
                return;
            }
            state.current = Current::Running(Arc::clone(&process));
        }
        self.wake();
        if let Some(how) = process.ended_how() {
            self.exited(&process, &how);
        }
    }

    fn wake(&self) {
        self.changed.notify_all();
        self.notify.notify_waiters();
    }

    /// A worker process ended (its reader thread reports `how`). When it was the one serving, that
    /// is a crash: restart it, or quarantine the plugin after too many.
    fn exited(self: &Arc<Self>, process: &Arc<Process>, how: &str) {
        let next = {
            let mut state = lock(&self.state);
            let serving = matches!(&state.current, Current::Running(p) if Arc::ptr_eq(p, process));
            if !serving {
                return;
            }
            tracing::error!(
                "Plugin {} crashed ({how}): its worker (pid {}) is gone and its calls in flight \
                 were answered with an error",
                self.plugin,
                process.pid
            );
            self.crashed(&mut state, how)
        };
        self.then(next);
    }

    /// Count a crash; restart after a pause, or quarantine the plugin.
    fn crashed(&self, state: &mut State, how: &str) -> Next {
        let now = Instant::now();
        state.crashes.push_back(now);
        while state
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.policy.window)
        {
            state.crashes.pop_front();
        }
        let n = u32::try_from(state.crashes.len()).unwrap_or(u32::MAX);
        if n >= self.policy.max {
            let reason = format!(
                "crashed {n} times in {} s (last: {how})",
                self.policy.window.as_secs_f64()
            );
            tracing::error!(
                "Quarantined plugin {}: {reason}; its tools are withdrawn until its file \
                 changes or SIGHUP",
                self.plugin
            );
            state.current = Current::Quarantined(reason.clone());
            Next::Quarantined(reason)
        } else {
            state.current = Current::Restarting;
            Next::Restart(backoff(n))
        }
    }

    fn then(self: &Arc<Self>, next: Next) {
        self.wake();
        match next {
            Next::Quarantined(reason) => {
                super::quarantine::write(&self.launch.file, &reason);
                self.host.plugin_health_changed();
            }
            Next::Restart(delay) => {
                let supervisor = Arc::clone(self);
                let spawned = std::thread::Builder::new()
                    .name("mcp-restart".into())
                    .spawn(move || supervisor.restart(delay));
                if let Err(e) = spawned {
                    tracing::error!("cannot restart plugin {}: {e}", self.plugin);
                }
            }
        }
    }

    fn restart(self: Arc<Self>, delay: Duration) {
        std::thread::sleep(delay);
        if !matches!(lock(&self.state).current, Current::Restarting) {
            return;
        }
        let started = self.launch().and_then(|(process, _, manifest)| {
            if self.manifest.get() == Some(&manifest) {
                Ok(process)
            } else {
                process.kill();
                Err(LoadError::Manifest(
                    "the plugin exported different tools after the restart".into(),
                ))
            }
        });
        match started {
            Ok(process) => {
                tracing::info!(
                    "Restarted plugin {} in a new worker (pid {})",
                    self.plugin,
                    process.pid
                );
                self.adopt(process);
            }
            Err(e) => {
                let next = {
                    let mut state = lock(&self.state);
                    if !matches!(state.current, Current::Restarting) {
                        return;
                    }
                    tracing::error!("Plugin {} did not restart: {e}", self.plugin);
                    self.crashed(&mut state, &format!("restart failed: {e}"))
                };
                self.then(next);
            }
        }
    }

    /// The serving process now: `Ok(None)` while one is starting.
    fn available(&self) -> Result<Option<Arc<Process>>, PluginCallError> {
        match &lock(&self.state).current {
            Current::Running(p) => Ok(Some(Arc::clone(p))),
            Current::Starting | Current::Restarting => Ok(None),
            Current::Quarantined(why) => Err(PluginCallError::Quarantined {
                plugin: self.plugin.to_string(),
                why: why.clone(),
            }),
            Current::Retired => Err(PluginCallError::Unloaded(self.plugin.to_string())),
        }
    }

    fn restarting_too_long(&self) -> PluginCallError {
        PluginCallError::RestartTimedOut(self.plugin.to_string())
    }

    /// The serving process, waiting (until `until`) through a restart.
    async fn process_async(&self, until: Option<Instant>) -> Result<Arc<Process>, PluginCallError> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(process) = self.available()? {
                return Ok(process);
            }
            match until {
                Some(t) => {
                    if tokio::time::timeout_at(t.into(), notified).await.is_err() {
                        return Err(self.restarting_too_long());
                    }
                }
                None => notified.await,
            }
        }
    }

    /// [`Supervisor::process_async`] for a blocking caller.
    fn process_blocking(&self, until: Option<Instant>) -> Result<Arc<Process>, PluginCallError> {
        loop {
            if let Some(process) = self.available()? {
                return Ok(process);
            }
            let state = lock(&self.state);
            // Re-checked under the lock, so a change in between is not missed.
            if !matches!(state.current, Current::Starting | Current::Restarting) {
                continue;
            }
            let wait = until.map_or(Duration::from_secs(3600), |t| {
                t.saturating_duration_since(Instant::now())
            });
            if wait.is_zero() {
                return Err(self.restarting_too_long());
            }
            drop(self.changed.wait_timeout(state, wait));
        }
    }

    /// A registration failed because `process` ended: make sure that is handled as its exit (its
    /// reader may not have reported it yet).
    fn ended(self: &Arc<Self>, process: &Arc<Process>) {
        let how = process.ended_how().unwrap_or_else(|| "exited".into());
        self.exited(process, &how);
    }

    fn call_message(id: u64, tool: u32, args: &str, call: &CallState) -> ToWorker {
        ToWorker::Call {
            id,
            tool,
            args: args.to_owned(),
            caller: call.caller_json.to_string(),
            deadline_ms: call.deadline.map(|d| {
                u64::try_from(d.saturating_duration_since(Instant::now()).as_millis())
                    .unwrap_or(u64::MAX)
            }),
        }
    }

    fn kill_for_deadline(&self, process: &Process, tool: &str) {
        tracing::warn!(
            "Plugin {}: {tool} is {} s past its deadline and ignores cancellation; killing its \
             worker (pid {}) to free its slots",
            self.plugin,
            KILL_GRACE.as_secs(),
            process.pid
        );
        process.kill_because(format!("killed after {tool} ran past its deadline"));
    }

    fn lost(&self) -> Result<String, PluginCallError> {
        Ok(
            crate::plugins::call::error_result(&format!("plugin {} crashed", self.plugin))
                .to_string(),
        )
    }

    /// Run tool `index` in the worker and wait for its result, forwarding cancellation; past the
    /// call's deadline plus [`KILL_GRACE`] the worker is killed (and restarted).
    pub(crate) async fn call(
        self: Arc<Self>,
        index: u32,
        args: String,
        call: Arc<CallState>,
    ) -> Result<String, PluginCallError> {
        let kill_at = call.deadline.map(|d| d + KILL_GRACE);
        loop {
            let process = self.process_async(kill_at).await?;
            let (tx, mut rx) = oneshot::channel();
            let Some(id) = process.register(&call, Waiter::Async(tx)) else {
                self.ended(&process);
                continue;
            };
            process.send(&Self::call_message(id, index, &args, &call));
            // Alone on the worker, the answer usually comes within microseconds: wait for it
            // here a moment before parking this thread (waking it costs more than that).
            if process.in_flight() == 1 && spinning_pays() {
                let until = Instant::now() + SPIN;
                loop {
                    process.read_now();
                    match rx.try_recv() {
                        Ok(result) => return result,
                        Err(oneshot::error::TryRecvError::Closed) => return self.lost(),
                        Err(oneshot::error::TryRecvError::Empty) if Instant::now() < until => {
                            std::thread::yield_now();
                        }
                        Err(oneshot::error::TryRecvError::Empty) => break,
                    }
                }
            }
            let mut cancel_sent = false;
            let mut killed = kill_at.is_none();
            let kill = tokio::time::sleep_until(
                kill_at
                    .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400))
                    .into(),
            );
            tokio::pin!(kill);
            loop {
                tokio::select! {
                    result = &mut rx => return result.unwrap_or_else(|_| self.lost()),
                    () = call.cancel().cancelled(), if !cancel_sent => {
                        cancel_sent = true;
                        process.send(&ToWorker::Cancel { id });
                    }
                    () = &mut kill, if !killed => {
                        killed = true;
                        self.kill_for_deadline(&process, &call.tool);
                    }
                }
            }
        }
    }

    /// [`Supervisor::call`] on the calling thread (a nested call).
    pub(crate) fn call_blocking(
        self: &Arc<Self>,
        index: u32,
        args: &str,
        call: &Arc<CallState>,
    ) -> Result<String, PluginCallError> {
        let kill_at = call.deadline.map(|d| d + KILL_GRACE);
        loop {
            let process = self.process_blocking(kill_at)?;
            let (tx, rx) = mpsc::sync_channel(1);
            let Some(id) = process.register(call, Waiter::Blocking(tx)) else {
                self.ended(&process);
                continue;
            };
            process.send(&Self::call_message(id, index, args, call));
            let (mut cancel_sent, mut killed) = (false, kill_at.is_none());
            loop {
                let mut wait = Duration::from_millis(20);
                if let Some(t) = kill_at.filter(|_| !killed) {
                    wait = wait.min(t.saturating_duration_since(Instant::now()));
                }
                match rx.recv_timeout(wait) {
                    Ok(result) => return result,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return self.lost(),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                if !cancel_sent && call.cancel().is_cancelled() {
                    cancel_sent = true;
                    process.send(&ToWorker::Cancel { id });
                }
                if !killed && kill_at.is_some_and(|t| Instant::now() >= t) {
                    killed = true;
                    self.kill_for_deadline(&process, &call.tool);
                }
            }
        }
    }

    /// Why the plugin's tools are withdrawn, when it is quarantined.
    pub(crate) fn quarantined(&self) -> Option<String> {
        match &lock(&self.state).current {
            Current::Quarantined(why) => Some(why.clone()),
            _ => None,
        }
    }

    /// The serving worker's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        match &lock(&self.state).current {
            Current::Running(p) => Some(p.pid),
            _ => None,
        }
    }

    /// Stop for good: the worker runs the plugin's shutdown hook and exits (killed if it takes
    /// longer than [`SHUTDOWN_GRACE`]).
    pub(crate) fn retire(&self) {
        let previous = std::mem::replace(&mut lock(&self.state).current, Current::Retired);
        self.wake();
        if let Current::Quarantined(_) = previous {
            super::quarantine::clear(&self.launch.file);
        }
        if let Current::Running(process) = previous {
            process.send(&ToWorker::Shutdown);
            let stopper = Arc::clone(&process);
            let spawned = std::thread::Builder::new()
                .name("mcp-worker-stop".into())
                .spawn(move || {
                    if !stopper.wait_ended(SHUTDOWN_GRACE) {
                        tracing::warn!(
                            "worker {} did not stop within {} s; killing it",
                            stopper.pid,
                            SHUTDOWN_GRACE.as_secs()
                        );
                        stopper.kill();
                    }
                });
            if spawned.is_err() {
                process.kill();
            }
        }
    }

    /// The private copy the workers load.
    fn copy(&self) -> &PathBuf {
        &self.launch.init.file
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.retire();
        crate::plugins::copies::discard(self.copy());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_from_immediate_to_a_ceiling() {
        assert_eq!(backoff(1), Duration::ZERO);
        assert_eq!(backoff(2), Duration::from_millis(50));
        assert_eq!(backoff(4), Duration::from_millis(200));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }
}
