//! Child processes of the benchmarks: CPU placement (server on one core, load generator on
//! another), servers that are stopped and reaped when dropped, newline-delimited reading with
//! deadlines, what `/proc` says about a process (CPU time, resident memory), and servers run
//! under valgrind's callgrind (instructions).

// Each benchmark uses part of this module.
#![allow(dead_code)]
// CPU affinity, poll(2), setrlimit and PR_SET_PDEATHSIG go through libc.
#![allow(unsafe_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest wait for any single step outside a measuring loop (start-up, one response, exit).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bitmask the kernel fills; its size is passed along.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pin the calling thread (and the threads and processes it starts afterwards) to `cpu`.
pub fn pin_to(cpu: usize) -> std::io::Result<()> {
    // SAFETY: as above; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
pub struct Placement {
    /// Where servers run (`None`: unpinned, fewer than two CPUs allowed).
    pub server: Option<usize>,
    /// Where this process's load generator runs.
    pub client: Option<usize>,
    /// Pin servers with `taskset -c` (else `sched_setaffinity` in `pre_exec`).
    pub taskset: bool,
}

pub fn placement() -> Placement {
    let cpus = allowed_cpus();
    let taskset = Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if cpus.len() < 2 {
        eprintln!(
            "warning: fewer than two CPUs allowed ({cpus:?}); server and client are not pinned"
        );
        return Placement {
            server: None,
            client: None,
            taskset,
        };
    }
    Placement {
        server: Some(cpus[0]),
        client: Some(cpus[1]),
        taskset,
    }
}

/// A command for `exe args`, pinned to the server CPU. The child also gets SIGKILL if this process
/// dies, so an interrupted benchmark leaves no server behind.
pub fn server_command(exe: &Path, args: &[&str], place: Placement, use_taskset: bool) -> Command {
    let mut cmd = match place.server {
        Some(cpu) if use_taskset && place.taskset => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpu.to_string()).arg(exe);
            c
        }
        _ => Command::new(exe),
    };
    cmd.args(args);
    let pin = if use_taskset && place.taskset {
        None
    } else {
        place.server
    };
    // SAFETY: only async-signal-safe calls (prctl, sched_setaffinity on a stack bitmask) between fork
    // and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(cpu) = pin {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd
}

/// A child process that is killed and reaped when dropped (also on panic).
pub struct Server {
    pub name: &'static str,
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    /// The last lines of its stderr (for error messages).
    pub log: Arc<Mutex<Vec<String>>>,
    /// Receives lines containing `listening on` (HTTP servers).
    pub listening: mpsc::Receiver<String>,
    /// A stdio server: the end of its stdin stops it.
    pub stdio: bool,
}

impl Server {
    pub fn spawn(name: &'static str, mut cmd: Command) -> Server {
        let stdio = cmd.get_args().any(|a| a == "--stdio");
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        eprintln!("started {name}: pid {}", child.id());
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, listening) = mpsc::channel();
        {
            // Drain stderr for the whole life of the child so its pipe never fills.
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if line.contains("listening on ") {
                        let _ = tx.send(line.clone());
                    }
                    let mut log = log.lock().unwrap();
                    if log.len() == 50 {
                        log.remove(0);
                    }
                    log.push(line);
                }
            });
        }
        Server {
            name,
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            log,
            listening,
            stdio,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The address from the `listening on http://ADDR/mcp` line.
    pub fn wait_listening(&self) -> SocketAddr {
        let line = self
            .listening
            .recv_timeout(STEP_TIMEOUT)
            .unwrap_or_else(|e| {
                panic!(
                    "{} did not report its address ({e}):\n{}",
                    self.name,
                    self.log()
                )
            });
        line.split("listening on http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("cannot parse the address in {line:?}"))
    }

    /// Resident set size in bytes (`VmRSS`).
    pub fn rss(&self) -> u64 {
        status_bytes(self.pid(), "VmRSS")
    }
}

impl Server {
    /// Wait up to `limit` for the child to exit; true when it has.
    pub fn exited_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return true,
                Ok(None) if Instant::now() >= deadline => return false,
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
}

impl Drop for Server {
    /// Stop the child gracefully, so `mcp-host` removes its runtime directory: the end of stdin for a
    /// stdio server, SIGTERM otherwise (or if that did not work); SIGKILL when it has still not
    /// exited after a few seconds.
    fn drop(&mut self) {
        drop(self.stdin.take());
        // Already reaped (waited for by its caller): its pid may be another process's by now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if self.stdio && self.exited_within(Duration::from_secs(3)) {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: signalling our own child, which has not been reaped yet (so the pid is its).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        if self.exited_within(Duration::from_secs(3)) {
            return;
        }
        let _ = self.child.kill();
        if !self.exited_within(Duration::from_secs(5)) {
            eprintln!("warning: {} (pid {}) did not exit", self.name, self.pid());
        }
    }
}

/// CPU time (user + system) process `pid` has used so far, all threads included.
pub fn own_cpu_time(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may contain spaces): state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// The live children of process `pid` (an `mcp-host`'s plugin workers).
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// CPU time of process `pid` and its live children (plugin workers), all threads included.
pub fn cpu_time(pid: u32) -> Duration {
    std::iter::once(pid)
        .chain(children(pid))
        .map(own_cpu_time)
        .sum()
}

/// A `/proc/<pid>/status` field in bytes (`VmRSS`, `RssAnon`, ...).
pub fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Newline-delimited reading from a child's stdout with a deadline on every wait (poll(2)).
pub struct Lines {
    out: ChildStdout,
    buf: Vec<u8>,
    start: usize,
}

impl Lines {
    pub fn new(out: ChildStdout) -> Lines {
        Lines {
            out,
            buf: Vec::with_capacity(64 * 1024),
            start: 0,
        }
    }

    pub fn next_line(&mut self, deadline: Instant) -> std::io::Result<&[u8]> {
        loop {
            if let Some(pos) = self.buf[self.start..].iter().position(|&b| b == b'\n') {
                let line = self.start..self.start + pos;
                self.start += pos + 1;
                return Ok(&self.buf[line]);
            }
            self.buf.drain(..self.start);
            self.start = 0;
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fd = libc::pollfd {
                fd: self.out.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready =
                unsafe { libc::poll(&mut fd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if ready < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if ready == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no response from the server",
                ));
            }
            let len = self.buf.len();
            self.buf.resize(len + 64 * 1024, 0);
            let n = self.out.read(&mut self.buf[len..])?;
            self.buf.truncate(len + n);
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed stdout",
                ));
            }
        }
    }
}

/// Raise this process's soft limit on open files to its hard limit (children inherit it); the new
/// soft limit.
pub fn raise_nofile() -> u64 {
    // SAFETY: `limit` is a plain struct the kernel reads and fills.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur as u64
    }
}

/// `exe args...` under valgrind's callgrind, writing its counts to `out`: per instruction, at
/// absolute addresses ([`Executed::read`]).
pub fn under_callgrind(exe: &Path, args: &[&str], out: &Path) -> Command {
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .args(["--dump-instr=yes", "--compress-pos=no"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .args(args)
        .env("RUST_LOG", "info");
    cmd
}

/// The total instruction count callgrind wrote to `out`.
pub fn counted_instructions(out: &Path) -> u64 {
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    text.lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no totals in {}", out.display()))
}

/// How many times each instruction ran, per object (the executable, each shared library), from a
/// callgrind output written with `--dump-instr=yes --compress-pos=no`.
#[derive(Debug, Default)]
pub struct Executed(std::collections::HashMap<String, std::collections::HashMap<u64, u64>>);

impl Executed {
    pub fn read(out: &Path) -> Executed {
        let text =
            std::fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        let mut names: std::collections::HashMap<String, String> = Default::default();
        // `ob=(3) /path` names object 3 the first time, `ob=(3)` refers to it afterwards.
        let mut object = |spec: &str| -> String {
            let spec = spec.trim();
            match spec.strip_prefix('(').and_then(|s| s.split_once(')')) {
                Some((id, name)) if !name.trim().is_empty() => {
                    names.insert(id.to_owned(), name.trim().to_owned());
                    name.trim().to_owned()
                }
                Some((id, _)) => names.get(id).cloned().unwrap_or_default(),
                None => spec.to_owned(),
            }
        };
        let mut executed = Executed::default();
        let (mut current, mut function_object, mut after_call) =
            (String::new(), String::new(), false);
        for line in text.lines() {
            if let Some(spec) = line.strip_prefix("ob=") {
                current = object(spec);
            } else if let Some(spec) = line.strip_prefix("cob=") {
                // A called function's object, named here the first time it appears.
                object(spec);
            } else if line.starts_with("fn=") {
                function_object.clone_from(&current);
            } else if line.starts_with("calls=") {
                after_call = true;
            } else if let Some(hex) = line.strip_prefix("0x") {
                // The line after `calls=` is the call's inclusive cost, not the instruction's own.
                if std::mem::take(&mut after_call) {
                    continue;
                }
                let mut fields = hex.split_whitespace();
                let address = fields.next().and_then(|a| u64::from_str_radix(a, 16).ok());
                let count = fields.last().and_then(|c| c.parse::<u64>().ok());
                if let (Some(address), Some(count)) = (address, count) {
                    *executed
                        .0
                        .entry(function_object.clone())
                        .or_default()
                        .entry(address)
                        .or_default() += count;
                }
            }
        }
        executed
    }
}

/// The code a request runs: the instructions that ran at least once every four extra requests in
/// a longer run than in a shorter one (start-up, exit and code run once cancel out), as cache lines
/// (64 B: the instruction cache's unit) and pages (4 kB: the instruction TLB's), per object.
#[derive(Debug, Clone, Default)]
pub struct Footprint {
    pub lines: usize,
    pub pages: usize,
    /// Each object's lines and pages, most lines first (a plugin's copy named without its
    /// identity prefix).
    pub by_object: Vec<(String, usize, usize)>,
}

impl Footprint {
    pub fn between(short: &Executed, long: &Executed, extra_requests: u64) -> Footprint {
        let mut footprint = Footprint::default();
        for (object, counts) in &long.0 {
            let before = short.0.get(object);
            let hot: Vec<u64> = counts
                .iter()
                .filter(|&(address, count)| {
                    let earlier = before.and_then(|b| b.get(address)).copied().unwrap_or(0);
                    4 * count.saturating_sub(earlier) >= extra_requests
                })
                .map(|(address, _)| *address)
                .collect();
            let lines: std::collections::HashSet<u64> = hot.iter().map(|a| a >> 6).collect();
            let pages: std::collections::HashSet<u64> = hot.iter().map(|a| a >> 12).collect();
            if lines.is_empty() {
                continue;
            }
            footprint.lines += lines.len();
            footprint.pages += pages.len();
            let name = Path::new(object)
                .file_name()
                .map_or_else(|| object.clone(), |n| n.to_string_lossy().into_owned());
            // A plugin's private copy is `<16 hex digits>-<file>`.
            let name = match name.split_once('-') {
                Some((id, file)) if id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    file.to_owned()
                }
                _ => name,
            };
            footprint.by_object.push((name, lines.len(), pages.len()));
        }
        footprint.by_object.sort_by_key(|b| std::cmp::Reverse(b.1));
        footprint
    }

    /// `1,355 lines (85 kB) in 216 pages: mcp-host 1,117 / 169, …`
    pub fn show(&self) -> String {
        let parts: Vec<String> = self
            .by_object
            .iter()
            .take(4)
            .map(|(name, lines, pages)| format!("{name} {lines} / {pages}"))
            .collect();
        format!(
            "{} lines of 64 B ({} kB) in {} pages of 4 kB ({})",
            self.lines,
            self.lines * 64 / 1024,
            self.pages,
            parts.join(", ")
        )
    }
}
