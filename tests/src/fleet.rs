//! A fleet for the tests: a real `redis-server` and a real nginx (plain round robin, no stickiness)
//! in front of several `mcp-host serve` replicas sharing the store, the `requestState` key and
//! the tool directories — on loopback ports, in the test's own temporary directories.
//!
//! Redis and nginx come from Debian's packages (`.ci/install-services.sh`). Where one is missing
//! the fleet tests skip with a message, unless `MCP_TEST_REQUIRE_CLIENTS` is set (`.ci/run`).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use crate::Layout;
use crate::clients::require_or_skip;
use crate::serve::{ChildGuard, HttpConn, HttpResponse, HttpServer, START};

/// How often a port is picked again when another process took it first.
const PORT_ATTEMPTS: usize = 5;

/// An executable found on `PATH` or in `/usr/sbin` (where Debian puts nginx).
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// `redis-server`, or `None` after saying why the test skips.
pub fn redis_server() -> Option<PathBuf> {
    require_or_skip(
        "redis-server (.ci/install-services.sh)",
        find("redis-server"),
    )
}

/// `nginx`, or `None` after saying why the test skips.
pub fn nginx() -> Option<PathBuf> {
    require_or_skip("nginx (.ci/install-services.sh)", find("nginx"))
}

/// A loopback port free right now (the caller retries when another process takes it first).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The lines a child writes to `reader`, as they come (read on their own thread).
pub fn output_lines(reader: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Wait for a line containing `ready` (`true`) or the end of the output (`false`: the process
/// exited), up to [`START`]; `seen` keeps the lines read.
fn wait_line(rx: &Receiver<String>, ready: &str, seen: &mut Vec<String>) -> bool {
    let deadline = Instant::now() + START;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(ready);
                seen.push(line);
                if found {
                    return true;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return false,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("no {ready:?} within {START:?}:\n{}", seen.join("\n"))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Redis

/// A `redis-server` of the test's own: a temporary directory, no persistence, a loopback port.
#[derive(Debug)]
pub struct Redis {
    child: ChildGuard,
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// The port it listens on.
    pub port: u16,
}

impl Redis {
    /// Start `bin` on a free loopback port and wait until it accepts connections.
    pub fn start(bin: &Path) -> Redis {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            if let Some(child) = Self::spawn(bin, dir.path(), port, &mut log) {
                return Redis {
                    child,
                    bin: bin.to_owned(),
                    dir,
                    port,
                };
            }
        }
        panic!("redis-server did not start:\n{}", log.join("\n"));
    }

    fn spawn(bin: &Path, dir: &Path, port: u16, log: &mut Vec<String>) -> Option<ChildGuard> {
        let mut cmd = Command::new(bin);
        cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--logfile", ""])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin:?}: {e}"));
        let rx = output_lines(child.stdout.take().unwrap());
        let mut child = ChildGuard::from_child(child);
        if wait_line(&rx, "Ready to accept connections", log) {
            // Keep draining its output so it never blocks on a full pipe.
            std::thread::spawn(move || for _ in rx {});
            return Some(child);
        }
        child.kill();
        None
    }

    /// The store URL for the replicas.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its process id (to pause it with SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop it abruptly (SIGKILL): the store is gone.
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Start it again on the same port (empty: nothing was saved).
    pub fn restart(&mut self) {
        let mut log = Vec::new();
        let deadline = Instant::now() + START;
        loop {
            if let Some(child) = Self::spawn(&self.bin, self.dir.path(), self.port, &mut log) {
                self.child = child;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start again on {}:\n{}",
                self.port,
                log.join("\n")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// nginx

/// The nginx configuration of a plain round-robin front on `port` for `upstreams`, with every
/// file under `prefix` (the one in docs/operators/replicas.md, with test paths).
pub fn nginx_config(port: u16, upstreams: &[SocketAddr], prefix: &Path) -> String {
    let p = prefix.display();
    let servers: String = upstreams
        .iter()
        .map(|a| format!("        server {a};\n"))
        .collect();
    format!(
        r#"daemon off;
worker_processes 1;
pid {p}/nginx.pid;
error_log {p}/error.log notice;
events {{
    worker_connections 512;
}}
http {{
    access_log {p}/access.log;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;

    # Plain round robin: no stickiness, any replica answers any request.
    upstream mcp_host {{
{servers}    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://mcp_host;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # The host checks Host against DNS rebinding: pass the client's.
            proxy_set_header Host $http_host;
            # Streams (SSE) go through as they are written.
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_cache off;
            # Listen streams and long calls stay open.
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
        }}
    }}
}}
"#
    )
}

/// A real nginx of the test's own (`daemon off`, its own prefix and logs) in front of
/// `upstreams`.
#[derive(Debug)]
pub struct Nginx {
    child: ChildGuard,
    dir: tempfile::TempDir,
    /// The port it listens on.
    pub port: u16,
}

impl Nginx {
    /// Start `bin` on a free loopback port in front of `upstreams`; wait until it serves.
    pub fn start(bin: &Path, upstreams: &[SocketAddr]) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        // Started as root, nginx runs its worker as `nobody`, which must reach the temporary
        // files' directories it creates under the prefix.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let mut log = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let conf = dir.path().join("nginx.conf");
            std::fs::write(&conf, nginx_config(port, upstreams, dir.path())).unwrap();
            let error_log = dir.path().join("error.log");
            let _ = std::fs::remove_file(&error_log);
            let mut child = ChildGuard::spawn(
                Command::new(bin)
                    .arg("-p")
                    .arg(dir.path())
                    .arg("-c")
                    .arg(&conf)
                    .arg("-e")
                    .arg(&error_log)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            );
            // Ready once the worker starts (after the bind); an exit means the bind failed.
            let deadline = Instant::now() + START;
            loop {
                let text = std::fs::read_to_string(&error_log).unwrap_or_default();
                if text.contains("start worker process") {
                    return Nginx { child, dir, port };
                }
                if child.exited() || Instant::now() >= deadline {
                    log.push(text);
                    child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("nginx did not start:\n{}", log.join("\n"));
    }

    /// The MCP endpoint through nginx.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Its error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    /// A fast shutdown (SIGTERM): the master stops its worker and reaps it before exiting. A
    /// SIGKILL would leave the worker running, holding the port.
    fn drop(&mut self) {
        if !self.child.exited() {
            self.child.terminate();
            let _ = self.child.wait_timeout(START);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fleet

/// The `requestState` key every replica shares (an HMAC key: any 32+ bytes).
pub const SHARED_KEY: &str = "fleet-test-request-state-key-0123456789abcdef";

/// The config of a replica sharing `redis_url`: tool directory `d` (shared), the shared
/// `requestState` key, and a task lease short enough for a stopped replica's task to be reported
/// failed soon yet long enough that a live one renews it on a loaded machine.
pub fn replica_config(l: &Layout, redis_url: &str) -> PathBuf {
    l.config(&format!(
        "tool_dirs: [d]\nstore: {redis_url}\nrequest_state: {{keys: [\"{SHARED_KEY}\"]}}\n\
         tasks: {{lease_secs: 5, poll_interval_ms: 100}}\n"
    ))
}

/// Redis, `n` replicas named `r1`…`rn` (the `Mcp-Replica` header) on one config, and nginx in
/// front of them.
#[derive(Debug)]
pub struct Fleet {
    /// The nginx front (declared first: dropped first).
    pub nginx: Nginx,
    /// The replicas, by name.
    pub replicas: Vec<(String, HttpServer)>,
    /// The shared store.
    pub redis: Redis,
}

impl Fleet {
    /// Start a fleet serving the tool directory `d` of `l`; `None` (the test skips) when Redis or
    /// nginx is not installed.
    pub fn start(l: &Layout, n: usize) -> Option<Fleet> {
        let redis_bin = redis_server()?;
        let nginx_bin = nginx()?;
        let redis = Redis::start(&redis_bin);
        let cfg = replica_config(l, &redis.url());
        let replicas: Vec<(String, HttpServer)> = (1..=n)
            .map(|i| {
                let name = format!("r{i}");
                let server = HttpServer::start_with_env(&cfg, &[("MCP_HOST_REPLICA", &name)]);
                (name, server)
            })
            .collect();
        let addrs: Vec<SocketAddr> = replicas.iter().map(|(_, s)| s.addr).collect();
        let nginx = Nginx::start(&nginx_bin, &addrs);
        Some(Fleet {
            nginx,
            replicas,
            redis,
        })
    }

    /// The MCP endpoint (through nginx).
    pub fn url(&self) -> String {
        self.nginx.url()
    }

    /// `GET path` through nginx on a fresh connection.
    pub fn get(&self, path: &str) -> HttpResponse {
        HttpConn::connect(self.nginx.addr()).request("GET", path, &[], b"")
    }

    /// The replica named `name`.
    pub fn replica(&mut self, name: &str) -> &mut HttpServer {
        self.replicas
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
            .unwrap_or_else(|| panic!("no replica {name}"))
    }

    /// Every replica's log, headed by its name.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (name, s) in &self.replicas {
            out.push_str(&format!("---- {name}\n{}\n", s.stderr()));
        }
        out.push_str(&format!("---- nginx\n{}\n", self.nginx.error_log()));
        out
    }
}
