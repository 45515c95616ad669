//! A stdio upstream's child process: started in a process group of its own (so a launcher's
//! children — `npx` starts `node` — end with it) and, on Linux, with `PR_SET_PDEATHSIG` (so the
//! direct child dies with the host even when the host is killed with SIGKILL); its group killed
//! when the attempt or session holding it is dropped (every timeout and abandon path), when it
//! exits, and at the host's exit ([`kill_all`]); the last lines of its stderr kept, so that its
//! end reads "exited with status 3; last stderr: ModuleNotFoundError: …".

use std::collections::{HashSet, VecDeque};
use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::plugins::lock;

/// Lines of a child's stderr kept for its status.
const TAIL_LINES: usize = 5;
/// The longest stderr line kept for a status, in characters.
const TAIL_LINE_CHARS: usize = 300;
/// How long the end of a child waits for the rest of its stderr (its last lines come after the
/// exit is seen, read on another thread).
const STDERR_GRACE: Duration = Duration::from_millis(500);

/// The process groups of the upstream children of this process not reaped yet.
fn live() -> &'static Mutex<HashSet<u32>> {
    static LIVE: OnceLock<Mutex<HashSet<u32>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

/// Kill the process group of every upstream child this process started and has not reaped (at
/// the host's exit: the end of `list`, `check`, `call`, or `serve` stopping).
pub fn kill_all() {
    let groups: Vec<u32> = lock(live()).iter().copied().collect();
    for pid in groups {
        kill_group(pid);
    }
}

/// Kill process group `pid` (SIGKILL).
pub(super) fn kill_group(pid: u32) {
    #[cfg(unix)]
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// One started child: its pid (and process group), how it ended, its last stderr lines.
#[derive(Debug)]
pub(super) struct Child {
    pid: u32,
    /// Reaped: its group was killed then, and its pid may be reused.
    reaped: AtomicBool,
    /// How it ended (with its last stderr line), once it has.
    ended: OnceLock<String>,
    ended_notify: tokio::sync::Notify,
    tail: Tail,
}

impl Child {
    /// The child's pid (its process group's id).
    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    /// Kill its process group, unless it was reaped (and its group killed) already.
    pub(super) fn kill(&self) {
        if !self.reaped.load(Ordering::Acquire) {
            kill_group(self.pid);
        }
    }

    /// How it ended, when it ends within `grace`: a failed handshake or a closed pipe is
    /// explained by the exit that caused it.
    pub(super) async fn ended_within(&self, grace: Duration) -> Option<String> {
        let notified = self.ended_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(how) = self.ended.get() {
            return Some(how.clone());
        }
        let _ = tokio::time::timeout(grace, notified).await;
        self.ended.get().cloned()
    }

    /// Where its stderr lines are kept (the log's reader adds each).
    pub(super) fn tail(&self) -> &Tail {
        &self.tail
    }
}

/// A started child held by a connection attempt or a session: dropping it kills the child's
/// process group (a timeout, an abandoned attempt, a retired link).
#[derive(Debug)]
pub(super) struct Owned(pub(super) Arc<Child>);

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.kill();
    }
}

/// The last lines a child wrote to its stderr, and whether its stderr has ended.
#[derive(Debug, Default)]
pub(super) struct Tail {
    lines: Mutex<VecDeque<String>>,
    done: Mutex<bool>,
    done_cond: Condvar,
    /// Whether the child runs sandboxed: a refused program start among its lines is then the
    /// sandbox's refusal, said as such.
    sandboxed: bool,
}

impl Tail {
    /// The tail of a child, sandboxed or not.
    fn new(sandboxed: bool) -> Tail {
        Tail {
            sandboxed,
            ..Tail::default()
        }
    }

    /// One more line of stderr (control characters made spaces, cut to [`TAIL_LINE_CHARS`]).
    pub(super) fn push(&self, line: &str) {
        let line: String = line
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(TAIL_LINE_CHARS)
            .collect();
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let mut lines = lock(&self.lines);
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.to_owned());
    }

    /// Its stderr ended (end of file).
    pub(super) fn finish(&self) {
        *lock(&self.done) = true;
        self.done_cond.notify_all();
    }

    /// Wait (at most `grace`) until its stderr ended.
    fn wait_finished(&self, grace: Duration) {
        let done = lock(&self.done);
        let _ = self
            .done_cond
            .wait_timeout_while(done, grace, |done| !*done);
    }

    fn last(&self) -> Option<String> {
        lock(&self.lines).back().cloned()
    }

    /// What its last lines say of why it ended: for a sandboxed child, the sandbox's refusal of
    /// a program it tried to start (a runtime reports it among its last lines, e.g. Python's
    /// `PermissionError` before its traceback ends), else its last line.
    fn reason(&self) -> Option<String> {
        let refused = self.sandboxed.then(|| {
            lock(&self.lines)
                .iter()
                .rev()
                .find_map(|line| super::confine::exec_refusal(line))
        });
        let last = self.last()?;
        Some(match refused.flatten() {
            Some(refusal) if refusal != last => format!("{refusal}; last stderr: {last}"),
            _ => format!("last stderr: {last}"),
        })
    }
}

/// A started child's pipes and its handle.
pub(super) struct Spawned {
    pub(super) stdout: tokio::process::ChildStdout,
    pub(super) stdin: tokio::process::ChildStdin,
    pub(super) child: Owned,
}

/// Start `argv` with exactly `env` in `cwd`: its stdin and stdout for the protocol, its stderr
/// to `log` (on a thread of its own), and `on_exit` called (on another) with how it ended once it
/// has — its group killed then, its last stderr line in the description.
pub(super) fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
    sandboxed: bool,
    log: impl FnOnce(u32, std::process::ChildStderr, Arc<Child>) + Send + 'static,
    on_exit: impl FnOnce(String) + Send + 'static,
) -> Result<Spawned, String> {
    let mut command = command(argv, env, cwd)?;
    let mut child = command.spawn().map_err(|e| {
        format!(
            "cannot start {}: {e}",
            argv.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        )
    })?;
    let pid = child.id();
    lock(live()).insert(pid);
    let handle = Arc::new(Child {
        pid,
        reaped: AtomicBool::new(false),
        ended: OnceLock::new(),
        ended_notify: tokio::sync::Notify::new(),
        tail: Tail::new(sandboxed),
    });
    let owned = Owned(Arc::clone(&handle));
    let io = (child.stdout.take(), child.stdin.take(), child.stderr.take());
    let (Some(stdout), Some(stdin), stderr) = io else {
        let _ = child.kill();
        return Err("the child's pipes are missing".into());
    };
    match stderr {
        Some(stderr) => log(pid, stderr, Arc::clone(&handle)),
        None => handle.tail.finish(),
    }
    watch_exit(child, Arc::clone(&handle), on_exit)?;
    let stdout =
        tokio::process::ChildStdout::from_std(stdout).map_err(|e| format!("child stdout: {e}"))?;
    let stdin =
        tokio::process::ChildStdin::from_std(stdin).map_err(|e| format!("child stdin: {e}"))?;
    Ok(Spawned {
        stdout,
        stdin,
        child: owned,
    })
}

/// The command for `argv`: piped, its own process group, and on Linux killed when the thread
/// that started it (the upstream runtime's, which lives as long as the host) ends.
fn command(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> Result<std::process::Command, String> {
    use std::process::Stdio;
    let (program, args) = argv.split_first().ok_or("no command")?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    #[cfg(target_os = "linux")]
    die_with_parent(&mut command);
    Ok(command)
}

/// `PR_SET_PDEATHSIG(SIGKILL)` in the child before it runs the command (it survives `execve` of
/// the `upstream-exec` helper and of the command, neither set-uid): a host killed outright still
/// takes its direct children with it. A host that died before the child set it is noticed (its
/// parent is no longer the host) and the start fails.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    let host = rustix::process::getpid();
    let hook = move || -> std::io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
        if rustix::process::getppid() != Some(host) {
            return Err(std::io::Error::other("the host exited"));
        }
        Ok(())
    };
    // SAFETY: the hook only makes two system calls (prctl, getppid), which are async-signal-safe,
    // and touches no memory shared with the parent: what `pre_exec` requires.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(hook);
    }
}

/// Reap `child` on a thread of its own: then kill its group (what it started), wait briefly
/// for its last stderr lines, and report how it ended.
fn watch_exit(
    mut child: std::process::Child,
    handle: Arc<Child>,
    on_exit: impl FnOnce(String) + Send + 'static,
) -> Result<(), String> {
    let pid = handle.pid;
    let spawned = std::thread::Builder::new()
        .name("mcp-upstream-wait".into())
        .spawn(move || {
            let status = child.wait();
            kill_group(pid);
            handle.reaped.store(true, Ordering::Release);
            lock(live()).remove(&pid);
            let mut how = match status {
                Ok(status) => crate::plugins::describe_exit(status),
                Err(e) => format!("lost: {e}"),
            };
            handle.tail.wait_finished(STDERR_GRACE);
            if let Some(reason) = handle.tail.reason() {
                how.push_str("; ");
                how.push_str(&reason);
            }
            let _ = handle.ended.set(how.clone());
            handle.ended_notify.notify_waiters();
            on_exit(how);
        });
    spawned.map(|_| ()).map_err(|e| {
        kill_group(pid);
        format!("cannot watch the child: {e}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_the_last_lines_on_one_line_each() {
        let tail = Tail::default();
        for i in 0..10 {
            tail.push(&format!("line {i}"));
        }
        tail.push("  \t ");
        tail.push("Traceback\r\x1b[31mModuleNotFoundError: No module named 'foo'");
        assert_eq!(
            tail.last().as_deref(),
            Some("Traceback  [31mModuleNotFoundError: No module named 'foo'")
        );
        assert_eq!(lock(&tail.lines).len(), TAIL_LINES);
        tail.push(&"x".repeat(5000));
        assert_eq!(tail.last().map(|l| l.len()), Some(TAIL_LINE_CHARS));
    }

    #[test]
    fn a_sandboxed_childs_refused_program_start_is_its_reason() {
        let lines = [
            "Traceback (most recent call last):",
            "PermissionError: [Errno 1] Operation not permitted: '/usr/bin/uname'",
            "  raised during import",
        ];
        let (sandboxed, plain) = (Tail::new(true), Tail::new(false));
        for line in lines {
            sandboxed.push(line);
            plain.push(line);
        }
        assert_eq!(
            sandboxed.reason().as_deref(),
            Some(
                "the sandbox refused to run /usr/bin/uname (grant exec: permissions.exec: true); \
                 last stderr: raised during import"
            )
        );
        assert_eq!(
            plain.reason().as_deref(),
            Some("last stderr: raised during import")
        );
    }
}
