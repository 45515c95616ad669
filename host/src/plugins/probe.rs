//! The child-process probe: test-load plugin files in short-lived `mcp-host probe` processes.
//!
//! A damaged library can kill the process inside `dlopen` itself (SIGBUS on a truncated `.so`, an
//! ld.so assertion on overwritten bytes). So every file is first opened in a child, which checks the
//! header, the ABI layout and the build fingerprint without running `init`. Files are checked in
//! batches, one child per core; when a child dies, the file it was on is blamed and the rest of its
//! batch goes to a fresh child.
//!
//! Opening a library runs its constructors, so a probe runs plugin code: each child is confined
//! like the worker that would run the plugins of the tool directory it probes ([`Confinement`]) —
//! a cleared environment for every probe, the workers' resource limits for isolated directories,
//! and for `isolation: sandbox` the worker's Landlock and seccomp, with nothing readable but the
//! copies it opens and the system's libraries, nothing writable, no network and no programs. What
//! a child prints while it loads is logged (a few bounded lines), never parsed as an answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use mcp_plugin_sdk::wire::BuildInfo;
use serde::{Deserialize, Serialize};

use crate::config::{Config, Isolation};
use crate::plugins::in_process::{Layout, open_module};
use crate::plugins::output::{self, Line, OutputLines};
use crate::plugins::worker::{sandbox, wire};
use crate::plugins::{LoadError, describe_exit};

const MARK: &str = "\u{1}MCPPROBE ";

/// Environment variables a probe of a directory that is not sandboxed keeps (all others, the
/// host's secrets among them, are removed); a sandboxed directory's probe keeps none.
const PROBE_ENV: &[&str] = &["PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "TZ"];

/// Lines of a probe child's own output (what a library prints while it loads) that are logged.
const OUTPUT_LINES: usize = 16;

/// How a probe child confines itself before it opens any file: like the worker that would run
/// the plugins of the directory it probes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Confinement {
    /// The isolation of the directory probed (`in_process` when it has none).
    pub isolation: Isolation,
    /// Resource limits (isolated directories).
    pub limits: Option<wire::Limits>,
    /// Landlock and seccomp (sandboxed directories): `read` lists the copies it may open.
    pub sandbox: Option<wire::Sandbox>,
}

impl Confinement {
    /// The confinement for probing copies `files` found in a directory with isolation `dir`.
    pub(crate) fn for_directory(
        config: &Config,
        dir: Option<Isolation>,
        files: &[PathBuf],
    ) -> Self {
        let isolation = dir.unwrap_or_default();
        let limits = isolation
            .is_isolated()
            .then(|| crate::plugins::worker::wire_limits(&config.limits.worker()));
        // The plugin's name (and so its own `allow_weaker_sandbox`) is what the probe learns:
        // a weaker sandbox is accepted here when some plugin accepts one.
        let allow_weaker = config.plugins.values().any(|p| p.allow_weaker_sandbox);
        let sandbox =
            (isolation == Isolation::Sandbox).then(|| sandbox::probe_sandbox(files, allow_weaker));
        Confinement {
            isolation,
            limits,
            sandbox,
        }
    }

    /// The environment variables the child keeps.
    fn env(&self) -> &'static [&'static str] {
        if self.sandbox.is_some() {
            &[]
        } else {
            PROBE_ENV
        }
    }
}

/// Runs probes in child processes of the `mcp-host` executable.
#[derive(Debug, Clone)]
pub struct Prober {
    exe: PathBuf,
    parallelism: usize,
    file_timeout: Duration,
}

impl Prober {
    /// Probe with the `mcp-host` binary at `exe` (it must support the hidden `probe` command).
    pub fn new(exe: PathBuf) -> Self {
        Prober {
            exe,
            parallelism: crate::plugins::call::cores(),
            file_timeout: Duration::from_secs(10),
        }
    }

    /// Probe every file under `confine` (built for these files); results are in the same order
    /// as `files`.
    pub(crate) fn probe_all(
        &self,
        files: &[PathBuf],
        confine: &Confinement,
    ) -> Vec<Result<BuildInfo, LoadError>> {
        if files.is_empty() {
            return Vec::new();
        }
        let chunks = self.parallelism.clamp(1, files.len().div_ceil(8).max(1));
        let per_chunk = files.len().div_ceil(chunks);
        let mut results = Vec::with_capacity(files.len());
        std::thread::scope(|scope| {
            let handles: Vec<_> = files
                .chunks(per_chunk)
                .map(|chunk| scope.spawn(move || self.probe_batch(chunk, confine)))
                .collect();
            for (handle, chunk) in handles.into_iter().zip(files.chunks(per_chunk)) {
                match handle.join() {
                    Ok(r) => results.extend(r),
                    Err(_) => results.extend(
                        chunk
                            .iter()
                            .map(|_| Err(LoadError::Probe("probe thread panicked".into()))),
                    ),
                }
            }
        });
        results
    }

    /// Probe one batch, restarting the child after a crash until every file has an answer.
    fn probe_batch(
        &self,
        files: &[PathBuf],
        confine: &Confinement,
    ) -> Vec<Result<BuildInfo, LoadError>> {
        let mut results: Vec<Option<Result<BuildInfo, LoadError>>> = vec![None; files.len()];
        let mut start = 0;
        while start < files.len() {
            let done = self.run_child(&files[start..], &mut results[start..], confine);
            // `done` files have answers; the next one (if any) took the child down.
            let culprit = start + done;
            if culprit < files.len() && results[culprit].is_none() {
                // run_child records the crash reason itself; this is a fallback.
                results[culprit] = Some(Err(LoadError::Probe(
                    "probe process ended without an answer".into(),
                )));
            }
            start = culprit + 1;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(LoadError::Probe("not probed".into()))))
            .collect()
    }

    /// Run one child over `files`; returns how many got an answer before it stopped: start it,
    /// read its answers as they come, and charge the file it stopped at with the reason.
    fn run_child(
        &self,
        files: &[PathBuf],
        results: &mut [Option<Result<BuildInfo, LoadError>>],
        confine: &Confinement,
    ) -> usize {
        let mut child = match self.spawn_child(files, confine) {
            Ok(c) => c,
            Err(e) => {
                for r in results.iter_mut() {
                    *r = Some(Err(LoadError::Probe(format!(
                        "cannot start probe process {}: {e}",
                        self.exe.display()
                    ))));
                }
                return files.len();
            }
        };
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return 0;
        };
        let output = child.stderr.take().map(|stderr| {
            let pid = child.id();
            std::thread::spawn(move || log_output(pid, stderr))
        });
        let (answered, timed_out) = self.read_answers(&mut child, stdout, results);
        let status = child.wait();
        if let Some(output) = output {
            let _ = output.join();
        }
        if answered < files.len() {
            let why = self.stop_reason(timed_out, status);
            results[answered] = Some(Err(LoadError::Probe(format!(
                "crashed the probe process: {why}; the file is damaged or not a plugin"
            ))));
        }
        answered
    }

    /// The probe child over `files`, with only the environment `confine` passes on.
    fn spawn_child(&self, files: &[PathBuf], confine: &Confinement) -> std::io::Result<Child> {
        let mut command = Command::new(&self.exe);
        command.env_clear();
        for var in confine.env() {
            if let Some(value) = std::env::var_os(var) {
                command.env(var, value);
            }
        }
        // A confinement always serialises (plain data), so the fallback is never used.
        let confine_json = serde_json::to_string(confine).unwrap_or_default();
        command
            .arg("probe")
            .arg("--confine")
            .arg(confine_json)
            .arg("--")
            .args(files)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("RUST_LOG", "off")
            .spawn()
    }

    /// Record the child's answers until its output ends, or no answer came for a file's timeout
    /// (the child is killed then); returns how many files were answered and whether it timed out.
    fn read_answers(
        &self,
        child: &mut Child,
        stdout: ChildStdout,
        results: &mut [Option<Result<BuildInfo, LoadError>>],
    ) -> (usize, bool) {
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut answered = 0;
        let mut timed_out = false;
        loop {
            match rx.recv_timeout(self.file_timeout) {
                Ok(line) => {
                    if let Some((i, result)) = parse_answer(&line, results.len()) {
                        results[i] = Some(result);
                        answered = i + 1;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    let _ = child.kill();
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        // After a kill the pipe closes, so the reader ends.
        let _ = reader.join();
        (answered, timed_out)
    }

    /// Why the child stopped before answering every file.
    fn stop_reason(&self, timed_out: bool, status: std::io::Result<ExitStatus>) -> String {
        if timed_out {
            return format!(
                "probe timed out after {} s while loading it (a hang in dlopen or a static constructor)",
                self.file_timeout.as_secs()
            );
        }
        match status {
            Ok(s) => describe_exit(s),
            Err(e) => format!("probe process lost: {e}"),
        }
    }
}

/// Log what a probe child printed while it loaded libraries (a plugin's constructor, a damaged
/// library's loader error): the first few lines, each cut short as a worker's are; the rest is
/// read and dropped.
fn log_output(pid: u32, stderr: impl Read) {
    let mut lines = OutputLines::new(stderr);
    let mut logged = 0;
    while let Some(line) = lines.next_line() {
        if logged < OUTPUT_LINES {
            logged += 1;
            let text = match &line {
                Line::Whole(text) => output::log_line(text.trim_end(), 0),
                Line::Cut(text, more) => output::log_line(text, *more),
            };
            tracing::warn!(pid, "probe output: {text}");
        }
    }
}

fn encode_error(e: &LoadError) -> String {
    let (kind, text) = e.parts();
    format!("{kind} {}", text.replace('\n', " "))
}

/// A child's answer line: the index of the file it is about and its result (`None` for any other
/// line, e.g. something a library printed while loading).
fn parse_answer(line: &str, files: usize) -> Option<(usize, Result<BuildInfo, LoadError>)> {
    let rest = &line[line.find(MARK)? + MARK.len()..];
    let mut parts = rest.splitn(3, ' ');
    let (kind, index, payload) = (
        parts.next().unwrap_or(""),
        parts.next().and_then(|i| i.parse::<usize>().ok()),
        parts.next().unwrap_or(""),
    );
    let i = index.filter(|i| *i < files)?;
    match kind {
        "ok" => Some((
            i,
            serde_json::from_str(payload)
                .map_err(|e| LoadError::Probe(format!("unreadable probe answer: {e}"))),
        )),
        "err" => Some((i, Err(decode_error(payload)))),
        _ => None,
    }
}

fn decode_error(payload: &str) -> LoadError {
    let (kind, text) = payload.split_once(' ').unwrap_or(("probe", payload));
    LoadError::from_parts(kind, text.to_owned())
}

/// Files that passed a probe, by identity (path, size, modification time, inode) and host build, with
/// the plugin name the probe read (it chooses the plugin's settings, isolation included), kept
/// across runs in the user's cache directory: a client that starts the host for every session
/// does not pay for a probe of files it already checked. A changed file has a new identity and is
/// probed again.
#[derive(Debug)]
pub struct ProbeCache {
    path: PathBuf,
    /// Identity → plugin name; one `identity\tname` line each in the file.
    entries: std::collections::BTreeMap<String, String>,
    dirty: bool,
}

impl ProbeCache {
    /// Read the cache at `path` (empty when absent or unreadable).
    pub fn open(path: PathBuf) -> Self {
        // An identity has five tab-separated fields, then comes the name (lines of another shape,
        // e.g. from older hosts, are ignored and probed again).
        let entries = std::fs::read_to_string(&path)
            .map(|text| {
                text.lines()
                    .filter(|l| l.split('\t').count() == 6)
                    .filter_map(|l| l.rsplit_once('\t'))
                    .map(|(key, name)| (key.to_owned(), name.to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        ProbeCache {
            path,
            entries,
            dirty: false,
        }
    }

    fn key(file: &Path, stamp: &str) -> String {
        format!("{}\t{stamp}\t{}", file.display(), host_build())
    }

    /// The plugin name of `file` with this stamp, when it passed a probe before.
    pub fn get(&self, file: &Path, stamp: &str) -> Option<&str> {
        self.entries
            .get(&Self::key(file, stamp))
            .map(String::as_str)
    }

    /// Record that `file`, with this stamp, passed as plugin `plugin`.
    pub fn insert(&mut self, file: &Path, stamp: &str, plugin: &str) {
        let plugin = plugin.replace(['\t', '\n'], " ");
        self.dirty |= self.entries.insert(Self::key(file, stamp), plugin.clone()) != Some(plugin);
    }

    /// Write the cache back (atomically; best effort).
    pub fn save(&mut self) {
        if !self.dirty {
            return;
        }
        let Some(dir) = self.path.parent() else {
            return;
        };
        // Forget files that no longer exist, so the cache stays as small as the tool directories.
        self.entries
            .retain(|e, _| e.split('\t').next().is_some_and(|p| Path::new(p).exists()));
        let text: String = self
            .entries
            .iter()
            .map(|(e, name)| format!("{e}\t{name}\n"))
            .collect();
        if let Err(e) =
            std::fs::create_dir_all(dir).and_then(|()| write_atomically(&self.path, &text))
        {
            tracing::debug!("probe cache not saved to {}: {e}", self.path.display());
        }
        self.dirty = false;
    }
}

/// What a cached verdict about a plugin file depends on besides the file: this host's version, the
/// SDK it was built with and its target (tab-separated).
pub(crate) fn host_build() -> String {
    let host = mcp_plugin_sdk::wire::BuildInfo::host();
    format!(
        "{}\t{}\t{}",
        env!("CARGO_PKG_VERSION"),
        host.sdk_version,
        host.target
    )
}

/// Replace `path` with `text` through a file beside it renamed into place, so a reader sees the
/// old contents or the new, never part of them (the temporary file is removed on failure).
pub(crate) fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The child's side: confine this process as `confine` (the JSON the host passed) says, then open
/// each file and report on `out`. Never runs a plugin's `init`; a confinement that cannot be applied
/// is every file's answer.
pub fn run_probe_child(
    files: &[PathBuf],
    confine: Option<&str>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if let Err(e) = confine_self(confine) {
        for i in 0..files.len() {
            writeln!(out, "\n{MARK}err {i} {}", encode_error(&e))?;
        }
        return out.flush();
    }
    for (i, file) in files.iter().enumerate() {
        writeln!(out, "\n{MARK}begin {i} ")?;
        out.flush()?;
        match open_module(Path::new(file), Layout::Check) {
            Ok((_, build)) => {
                let json = serde_json::to_string(&build).unwrap_or_default();
                writeln!(out, "\n{MARK}ok {i} {json}")?;
            }
            Err(e) => writeln!(out, "\n{MARK}err {i} {}", encode_error(&e))?,
        }
        out.flush()?;
    }
    Ok(())
}

/// Apply a probe's confinement to this (still single-threaded) process.
fn confine_self(confine: Option<&str>) -> Result<(), LoadError> {
    let Some(json) = confine else {
        return Ok(());
    };
    let confine: Confinement = serde_json::from_str(json)
        .map_err(|e| LoadError::Probe(format!("unreadable probe confinement: {e}")))?;
    if let Some(limits) = &confine.limits {
        sandbox::apply_limits(limits).map_err(|e| LoadError::Sandbox(e.to_string()))?;
    }
    if let Some(sandbox) = &confine.sandbox {
        sandbox::limit_tasks().map_err(|e| LoadError::Sandbox(e.to_string()))?;
        sandbox::enforce(sandbox, None).map_err(|e| LoadError::Sandbox(e.to_string()))?;
    }
    Ok(())
}
