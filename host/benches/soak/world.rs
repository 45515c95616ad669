//! The world the soak runs against: a real Redis, three release `mcp-host serve` replicas sharing
//! it behind a real nginx (the fleet helpers of `mcp-host-tests`), a stdio and an HTTP upstream
//! (the hostile fixture in its well-behaved `plain` mode), a sandboxed worker plugin, and a stdio
//! host of its own on the SQLite store.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mcp_host_tests::fleet::{Nginx, Redis, SHARED_KEY, free_port, nginx, redis_server};
use mcp_host_tests::serve::{ChildGuard, HttpServer};

/// The file name of plugin crate `krate`'s library.
pub fn library(krate: &str) -> String {
    format!(
        "{}{}{}",
        std::env::consts::DLL_PREFIX,
        krate.replace('-', "_"),
        std::env::consts::DLL_SUFFIX
    )
}

/// The hostile upstream fixture (run in its well-behaved mode).
pub fn hostile_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/upstream/hostile.py")
}

/// The files of the run: tool directories, configurations, state.
pub struct Files {
    pub root: tempfile::TempDir,
    pub release: PathBuf,
}

impl Files {
    /// Lay the plugins out: `d` (in process: basic, conformance) and `w` (sandboxed worker:
    /// override, served as `w_*`).
    pub fn new(release: &Path) -> Files {
        let root = tempfile::tempdir().unwrap();
        for (dir, krate) in [
            ("d", "fixture-basic"),
            ("d", "fixture-conformance"),
            ("w", "fixture-override"),
        ] {
            let d = root.path().join(dir);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::copy(release.join(library(krate)), d.join(library(krate))).unwrap();
        }
        std::fs::create_dir_all(root.path().join("staging")).unwrap();
        Files {
            root,
            release: release.to_owned(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// Replace the worker plugin's file by a fresh copy, atomically (a rename): a hot reload.
    pub fn replace_worker_plugin(&self) {
        let name = library("fixture-override");
        let staged = self.path("staging").join(&name);
        std::fs::copy(self.release.join(&name), &staged).unwrap();
        std::fs::rename(&staged, self.path("w").join(&name)).unwrap();
    }

    /// The replicas' configuration: both upstreams, the worker directory, the shared store, the
    /// call policy (a deny rule and a budget).
    pub fn replica_config(&self, redis: &str, http_upstream: u16) -> PathBuf {
        let script = hostile_script();
        let yaml = format!(
            r#"tool_dirs:
  - d
  - {{path: w, prefix: w_, isolation: sandbox}}
  - server: {{command: [python3, "{script}", --mode, plain, --era, "2025"]}}
    name: upstdio
    prefix: us_
  - server: {{url: "http://127.0.0.1:{http_upstream}/mcp"}}
    name: uphttp
    prefix: uh_
store: {redis}
request_state: {{keys: ["{SHARED_KEY}"]}}
tasks: {{lease_secs: 5, poll_interval_ms: 100, ttl_secs: 120}}
limits: {{per_caller: {{max_in_flight: 512}}}}
policy:
  rules:
    - name: no-forbidden-echo
      when: "tool.name == 'echo' && args.text == 'forbidden'"
      outcome: deny
      message: "echo refuses the forbidden text"
    - name: greets-on-a-budget
      when: "tool.name == 'greet'"
      outcome: limit
      budget: greets
  budgets:
    greets: {{calls: {BUDGET_CALLS}, per_secs: {BUDGET_SECS}}}
"#,
            script = script.display(),
        );
        let p = self.path("replica.yaml");
        std::fs::write(&p, yaml).unwrap();
        p
    }

    /// The stdio host's configuration: the in-process plugins on the default (SQLite) store.
    pub fn stdio_config(&self) -> PathBuf {
        let p = self.path("stdio.yaml");
        std::fs::write(&p, "tool_dirs: [d]\ntasks: {lease_secs: 5}\n").unwrap();
        p
    }
}

/// The greet budget: `BUDGET_CALLS` calls per `BUDGET_SECS` seconds per caller, fleet-wide.
pub const BUDGET_CALLS: u64 = 10;
pub const BUDGET_SECS: u64 = 5;

/// `mcp-host --config CONFIG` with a clean environment (no `MCP_*`), its state under `state`.
pub fn host_command(exe: &Path, config: &Path, state: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn,mcp_host::cli::serve=info")
        .env("XDG_STATE_HOME", state);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("MCP_") {
            cmd.env_remove(k);
        }
    }
    if std::env::var_os("USER").is_none() {
        cmd.env("USER", "soak");
    }
    cmd
}

/// One replica: its name, port (kept across restarts: nginx names it) and process.
pub struct Replica {
    pub name: String,
    pub port: u16,
    pub server: Option<HttpServer>,
    pub starts: u32,
}

impl Replica {
    pub fn pid(&mut self) -> Option<u32> {
        self.server.as_mut().map(|s| s.child().id())
    }
}

/// The HTTP upstream: the hostile fixture serving 2026 over Streamable HTTP.
pub struct HttpUpstream {
    pub port: u16,
    /// Killed when the world is dropped.
    _child: ChildGuard,
}

impl HttpUpstream {
    pub fn start(port: u16) -> HttpUpstream {
        let child = ChildGuard::spawn(
            Command::new("python3")
                .arg(hostile_script())
                .args([
                    "--mode",
                    "plain",
                    "--era",
                    "2026",
                    "--http",
                    &port.to_string(),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the HTTP upstream did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpUpstream {
            port,
            _child: child,
        }
    }
}

/// Everything the soak runs against.
pub struct World {
    pub files: Files,
    pub exe: PathBuf,
    pub replica_config: PathBuf,
    pub _upstream: HttpUpstream,
    pub redis: Redis,
    pub replicas: Vec<Replica>,
    pub nginx: Nginx,
    /// The stdio host's pid (the host belongs to its client's thread).
    pub stdio_pid: Option<u32>,
}

impl World {
    /// Start it all; `None` when Redis or nginx is not installed.
    pub fn start(release: &Path) -> Option<World> {
        let redis_bin = redis_server()?;
        let nginx_bin = nginx()?;
        let files = Files::new(release);
        let exe = release.join("mcp-host");
        let redis = Redis::start(&redis_bin);
        let upstream = HttpUpstream::start(free_port());
        let replica_config = files.replica_config(&redis.url(), upstream.port);
        let mut replicas = Vec::new();
        for i in 1..=3 {
            let mut r = Replica {
                name: format!("r{i}"),
                port: free_port(),
                server: None,
                starts: 0,
            };
            start_replica(&exe, &replica_config, &files, &mut r);
            replicas.push(r);
        }
        let addrs: Vec<SocketAddr> = replicas
            .iter()
            .map(|r| SocketAddr::from(([127, 0, 0, 1], r.port)))
            .collect();
        let nginx = Nginx::start(&nginx_bin, &addrs);
        Some(World {
            files,
            exe,
            replica_config,
            _upstream: upstream,
            redis,
            replicas,
            nginx,
            stdio_pid: None,
        })
    }

    /// Start replica `i` again on its port (after a crash).
    pub fn restart_replica(&mut self, i: usize) {
        let r = &mut self.replicas[i];
        start_replica(&self.exe, &self.replica_config, &self.files, r);
    }
}

/// Start `r` on its port, its state in a directory of its own; wait until it listens.
fn start_replica(exe: &Path, config: &Path, files: &Files, r: &mut Replica) {
    let state = files.path(&format!("state-{}", r.name));
    std::fs::create_dir_all(&state).unwrap();
    let mut cmd = host_command(exe, config, &state);
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{}", r.port)])
        .env("MCP_HOST_REPLICA", &r.name);
    r.server = Some(HttpServer::spawn(cmd));
    r.starts += 1;
}

/// A `serve --stdio` host: requests written to its stdin, answers read on a thread.
pub struct StdioHost {
    pub child: Child,
    pub stdin: ChildStdin,
    pub lines: mpsc::Receiver<String>,
}

impl StdioHost {
    pub fn start(exe: &Path, config: &Path, state: &Path) -> StdioHost {
        std::fs::create_dir_all(state).unwrap();
        let mut child = host_command(exe, config, state)
            .args(["serve", "--stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        StdioHost {
            stdin: child.stdin.take().unwrap(),
            child,
            lines,
        }
    }

    /// Send one line.
    pub fn send(&mut self, line: &str) -> std::io::Result<()> {
        self.stdin.write_all(line.as_bytes())?;
        self.stdin.write_all(b"\n")?;
        self.stdin.flush()
    }
}

impl Drop for StdioHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The live children of `pid` whose command line contains `needle` (a worker, an upstream).
pub fn children_matching(pid: u32, needle: &str) -> Vec<u32> {
    crate::common::process::children(pid)
        .into_iter()
        .filter(|c| {
            std::fs::read(format!("/proc/{c}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// Send `signal` to `pid` (ours or a child of ours).
pub fn signal(pid: u32, signal: i32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) on a pid we started (or our child started); no memory is involved.
        unsafe { libc::kill(pid, signal) };
    }
}
