//! What the kernel does for a server process, counted rather than timed: its system calls (strace,
//! every thread), its waits — voluntary context switches, one each time a thread blocks — and its
//! page faults and threads, read from `/proc` over all of its threads. Instructions (callgrind)
//! miss all of these; none of them moves with the machine's load the way a clock does.

// Each benchmark uses part of this module.
#![allow(dead_code)]
// mkfifo and kill, each with its SAFETY note.
#![allow(unsafe_code)]

use std::path::Path;
use std::process::{Command, Stdio};

/// Whether `strace` runs here.
pub fn strace_installed() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `exe args...` under `strace -f -c`: every thread's (and child's) system calls counted by name,
/// the summary written to `out` when the traced process exits.
pub fn under_strace(exe: &Path, args: &[&str], out: &Path) -> Command {
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-c", "-U", "name,calls", "-o"])
        .arg(out)
        .arg("--")
        .arg(exe)
        .args(args)
        .env("RUST_LOG", "info");
    cmd
}

/// The system calls of one strace summary: the total and each call by name, most frequent first.
#[derive(Debug, Clone, Default)]
pub struct Syscalls {
    pub total: u64,
    pub by_name: Vec<(String, u64)>,
}

impl Syscalls {
    /// The counts strace wrote to `out` (`-U name,calls`).
    pub fn read(out: &Path) -> Syscalls {
        let text =
            std::fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        let mut counts = Syscalls::default();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let (Some(name), Some(calls), None) = (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let Ok(calls) = calls.parse::<u64>() else {
                continue;
            };
            if name == "total" {
                counts.total = calls;
            } else {
                counts.by_name.push((name.to_owned(), calls));
            }
        }
        assert!(counts.total > 0, "no total in {}", out.display());
        counts
            .by_name
            .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        counts
    }

    /// Per call: (`self` − `fewer`) / `calls`, each name's and the total.
    pub fn per_call(&self, fewer: &Syscalls, calls: u64) -> PerCall {
        let before = |name: &str| {
            fewer
                .by_name
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, c)| *c)
        };
        let mut by_name: Vec<(String, f64)> = self
            .by_name
            .iter()
            .map(|(n, c)| (n.clone(), (*c as f64 - before(n) as f64) / calls as f64))
            .filter(|(_, per)| *per >= 0.05)
            .collect();
        by_name.sort_by(|a, b| b.1.total_cmp(&a.1));
        PerCall {
            total: (self.total as f64 - fewer.total as f64) / calls as f64,
            by_name,
        }
    }
}

/// System calls per request: the total and the calls made at least once in twenty requests.
#[derive(Debug, Clone)]
pub struct PerCall {
    pub total: f64,
    pub by_name: Vec<(String, f64)>,
}

impl PerCall {
    /// `read 1.0, write 1.0, …` (the first `n`).
    pub fn top(&self, n: usize) -> String {
        self.by_name
            .iter()
            .take(n)
            .map(|(name, per)| format!("{name} {per:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The context switches of every live thread of a process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switches {
    /// A thread blocked (waited for input, a lock, a wake-up, a timer).
    pub voluntary: u64,
    /// A thread was preempted (the machine's load moves these).
    pub involuntary: u64,
}

impl Switches {
    /// Summed over `/proc/PID/task/*/status` (the process's own line counts its first thread only).
    pub fn of(pid: u32) -> Switches {
        let mut sum = Switches::default();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
                continue;
            };
            for line in status.lines() {
                let value = |prefix: &str| {
                    line.strip_prefix(prefix)
                        .and_then(|v| v.trim().parse::<u64>().ok())
                };
                if let Some(v) = value("voluntary_ctxt_switches:") {
                    sum.voluntary += v;
                } else if let Some(v) = value("nonvoluntary_ctxt_switches:") {
                    sum.involuntary += v;
                }
            }
        }
        sum
    }

    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Switches) -> Switches {
        Switches {
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }
}

/// The page faults of a process so far, all threads (live and ended): minor and major.
pub fn faults(pid: u32) -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return (0, 0);
    };
    // After the command name (which may hold spaces): state is field 3, minflt 10, majflt 12.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0);
    (field(7), field(9))
}

/// How many threads a process has now.
pub fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// System calls of a running process counted by `perf stat` (the `raw_syscalls:sys_enter`
/// tracepoint, every thread; no tracer stops the process, so it runs at its own pace), switched
/// on and off around a window through perf's control pipe. `None` where perf cannot count them
/// (not installed, or not allowed: `perf_event_paranoid`).
pub struct PerfSyscalls {
    perf: std::process::Child,
    ctl: std::fs::File,
    ack: std::io::BufReader<std::fs::File>,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PerfSyscalls {
    /// Attach to `pid`, counting nothing until [`PerfSyscalls::enable`].
    pub fn attach(pid: u32) -> Option<PerfSyscalls> {
        let dir = tempfile::tempdir().ok()?;
        let (ctl, ack, out) = (
            dir.path().join("ctl"),
            dir.path().join("ack"),
            dir.path().join("out"),
        );
        for fifo in [&ctl, &ack] {
            let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).ok()?;
            // SAFETY: a NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                return None;
            }
        }
        let perf = Command::new("perf")
            .args([
                "stat",
                "-e",
                "raw_syscalls:sys_enter",
                "-x",
                ",",
                "-D",
                "-1",
            ])
            .arg("--control")
            .arg(format!("fifo:{},{}", ctl.display(), ack.display()))
            .arg("-o")
            .arg(&out)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // perf opens its end of `ctl` first, then `ack` for writing, which waits for this reader.
        let ctl = std::fs::OpenOptions::new().write(true).open(&ctl).ok()?;
        let ack = std::io::BufReader::new(std::fs::File::open(&ack).ok()?);
        let mut counter = PerfSyscalls {
            perf,
            ctl,
            ack,
            out,
            _dir: dir,
        };
        // A first command answered: perf is attached and can count.
        counter.command("disable").then_some(counter)
    }

    fn command(&mut self, what: &str) -> bool {
        use std::io::{BufRead as _, Write as _};
        if writeln!(self.ctl, "{what}").is_err() {
            return false;
        }
        let mut line = String::new();
        self.ack.read_line(&mut line).is_ok() && line.starts_with("ack")
    }

    /// Start counting (returns once perf counts).
    pub fn enable(&mut self) {
        self.command("enable");
    }

    /// Stop counting.
    pub fn disable(&mut self) {
        self.command("disable");
    }

    /// The system calls counted while enabled; perf is stopped.
    pub fn finish(mut self) -> Option<u64> {
        // SAFETY: signalling our own child, not yet reaped.
        unsafe { libc::kill(self.perf.id() as libc::pid_t, libc::SIGINT) };
        self.perf.wait().ok()?;
        let text = std::fs::read_to_string(&self.out).ok()?;
        text.lines()
            .find(|l| l.contains("raw_syscalls:sys_enter"))
            .and_then(|l| l.split(',').next())
            .and_then(|n| n.trim().parse().ok())
    }
}
