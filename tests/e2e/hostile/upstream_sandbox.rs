//! A sandboxed stdio upstream tries to leave its sandbox (issue 51: F2, F7, F9 and the Python
//! friction), served through `mcp-host serve` from the hostile fixture in mode `sandbox`
//! (`tests/fixtures/upstream/hostile.py`): a real Redis listening on a Unix socket in a private
//! directory, a Unix datagram socket beside it, the dynamic loader run on a program, a secret beside
//! the configuration file, a temporary file and a Python package that runs a program at import.
//! Each tool of the fixture answers what happened ("denied: <error>" when the kernel refused).

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_host_tests::clients::{python, python_with};
use mcp_host_tests::fleet::redis_server;
use mcp_host_tests::serve::{ChildGuard, START, StdioServer};
use mcp_host_tests::{Layout, workspace_root};
use serde_json::{Value, json};

/// The hostile fixture.
fn hostile() -> PathBuf {
    workspace_root().join("tests/fixtures/upstream/hostile.py")
}

/// The configuration of one sandboxed upstream `box` running `script` (mode `sandbox`) with `py`,
/// and `settings` as its `plugins.box` section (YAML flow mapping, may be empty).
fn sandboxed(l: &Layout, py: &Path, script: &Path, settings: &str) -> PathBuf {
    l.config(&format!(
        "tool_dirs:\n  - server: {{command: [{py:?}, {script:?}, --mode, sandbox]}}\n    name: box\n    prefix: box_\n    isolation: sandbox\nplugins:\n  box: {{{settings}}}\n"
    ))
}

/// Wait until the upstream's tools are served (`true`) or the log says the sandbox refused to
/// start it (`false`): an upstream may join after the host started serving.
fn served_or_refused(server: &mut StdioServer) -> bool {
    let deadline = Instant::now() + START;
    for id in 1000.. {
        let listed = server.call_modern(id, "tools/list", json!({}));
        if listed.to_string().contains("box_echo") {
            return true;
        }
        if server.stderr().contains("sandbox refused") {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream was neither served nor refused:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    unreachable!()
}

/// Start the host on `cfg` and wait until the upstream is served.
fn serve(cfg: &Path) -> StdioServer {
    let mut server = StdioServer::start(cfg);
    assert!(served_or_refused(&mut server), "{}", server.stderr());
    server
}

/// Call tool `name` of the fixture (prefixed `box_`) and return its text.
fn call(server: &mut StdioServer, id: u64, name: &str, args: Value) -> String {
    let resp = server.call_modern(
        id,
        "tools/call",
        json!({"name": format!("box_{name}"), "arguments": args}),
    );
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: {resp}\n{}", server.stderr()))
        .to_owned()
}

/// A directory only its owner may enter (mode 0700), as the directories of privileged sockets are.
fn private_dir(l: &Layout, name: &str) -> PathBuf {
    let dir = l.dir(name);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// A real `redis-server` listening only on the Unix socket `socket` (mode 0600); killed on drop.
fn redis_on_socket(bin: &Path, socket: &Path) -> ChildGuard {
    let dir = socket.parent().unwrap();
    let child = ChildGuard::spawn(
        Command::new(bin)
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(socket)
            .args(["--unixsocketperm", "600", "--logfile", ""])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let deadline = Instant::now() + START;
    while UnixStream::connect(socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "redis-server never listened on {socket:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// The first dynamic loader of this machine (what the sandbox lets run for the command's own
/// `exec`).
fn loader() -> PathBuf {
    [
        "/lib64/ld-linux-x86-64.so.2",
        "/lib/ld-linux-aarch64.so.1",
        "/lib/ld-linux-x86-64.so.2",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("a dynamic loader")
}

#[test]
fn a_sandboxed_upstream_reaches_no_unix_socket_it_was_not_granted() {
    let (Some(py), Some(redis)) = (python(), redis_server()) else {
        return;
    };
    let l = Layout::new();
    let private = private_dir(&l, "private");
    let socket = private.join("redis.sock");
    let _redis = redis_on_socket(&redis, &socket);
    let dgram_path = private.join("log.sock");
    let dgram = UnixDatagram::bind(&dgram_path).unwrap();
    dgram.set_nonblocking(true).unwrap();
    let cfg = sandboxed(&l, &py, &hostile(), "");
    let mut server = serve(&cfg);
    assert_eq!(call(&mut server, 1, "echo", json!({"text": "up"})), "up");
    // A stream socket: no AF_UNIX socket() without a grant.
    let stream = call(&mut server, 2, "unix_connect", json!({"path": socket}));
    assert!(stream.starts_with("denied"), "{stream}");
    // A datagram sent from a socket pair's end (socketpair stays allowed) to a named socket.
    let sent = call(&mut server, 3, "unix_dgram", json!({"path": dgram_path}));
    assert!(sent.starts_with("denied"), "{sent}");
    // The tool has answered, so a datagram it sent would be queued by now.
    let mut buf = [0u8; 64];
    assert!(dgram.recv(&mut buf).is_err(), "a datagram came through");
    assert_eq!(
        call(&mut server, 4, "echo", json!({"text": "still"})),
        "still"
    );
}

#[test]
fn a_granted_unix_socket_is_reachable_and_the_kernels_limits_are_said() {
    let (Some(py), Some(redis)) = (python(), redis_server()) else {
        return;
    };
    let l = Layout::new();
    let private = private_dir(&l, "private");
    let granted = private.join("granted.sock");
    let other = private.join("other.sock");
    let _granted = redis_on_socket(&redis, &granted);
    let _other = redis_on_socket(&redis, &other);
    let grant = format!("permissions: {{unix_sockets: [{granted:?}]}}");
    let cfg = sandboxed(&l, &py, &hostile(), &grant);
    let mut server = StdioServer::start(&cfg);
    let served = served_or_refused(&mut server);
    if !served {
        // This kernel cannot hold connect(2) to the granted path: the sandbox refuses to start
        // the upstream and says so, and which setting accepts the weaker sandbox.
        assert!(
            server.logged("unix_sockets") && server.logged("allow_weaker_sandbox"),
            "{}",
            server.stderr()
        );
        drop(server);
        let weaker = format!("{grant}, allow_weaker_sandbox: true");
        let cfg = sandboxed(&l, &py, &hostile(), &weaker);
        server = serve(&cfg);
        assert!(
            server.logged("connect to any Unix socket"),
            "{}",
            server.stderr()
        );
    }
    let reached = call(&mut server, 2, "unix_connect", json!({"path": granted}));
    assert_eq!(reached, "connected: +PONG", "{}", server.stderr());
    let elsewhere = call(&mut server, 3, "unix_connect", json!({"path": other}));
    if served {
        // Enforced per path (Landlock ABI 9): the socket beside it stays out of reach.
        assert!(elsewhere.starts_with("denied"), "{elsewhere}");
    } else {
        // Accepted as weaker: what the log said holds.
        assert_eq!(elsewhere, "connected: +PONG");
    }
}

#[test]
fn a_sandboxed_upstream_runs_no_program_through_the_dynamic_loader() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    // /bin/sh is readable (not executable) in this sandbox, as any program under a read grant is.
    let cfg = sandboxed(&l, &py, &hostile(), "permissions: {read: [/usr/bin, /bin]}");
    let mut server = serve(&cfg);
    let direct = call(&mut server, 1, "run", json!({"program": "/bin/sh"}));
    assert!(direct.starts_with("denied"), "{direct}");
    let loader = loader();
    let through = call(
        &mut server,
        2,
        "loader_exec",
        json!({"loader": loader, "program": "/bin/sh"}),
    );
    assert!(through.starts_with("denied"), "{through}");
    // Its own interpreter, run again: refused as well (only the command's own exec passes).
    let again = call(&mut server, 3, "run", json!({"program": py}));
    assert!(again.starts_with("denied"), "{again}");
    drop(server);
    // With `exec: true`, programs of the system's directories run (inside the same sandbox).
    let cfg = sandboxed(&l, &py, &hostile(), "permissions: {exec: true}");
    let mut server = serve(&cfg);
    let granted = call(&mut server, 4, "run", json!({"program": "/bin/sh"}));
    assert_eq!(granted, "ran: ran (status 0)", "{}", server.stderr());
}

#[test]
fn a_scripts_read_grant_is_its_own_package_never_the_configuration_directory() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    // A lone script beside the configuration file and a secret.
    let script = l.root.path().join("server.py");
    std::fs::copy(hostile(), &script).unwrap();
    let secret = l.root.path().join("secret.txt");
    std::fs::write(&secret, "secret").unwrap();
    let cfg = sandboxed(&l, &py, &script, "");
    let mut server = serve(&cfg);
    assert_eq!(call(&mut server, 1, "echo", json!({"text": "up"})), "up");
    let read = call(&mut server, 2, "read", json!({"path": secret}));
    assert!(read.starts_with("denied"), "{read}");
    drop(server);
    // A script of a package (`__init__.py` beside it, and above): the whole package is readable,
    // nothing above it.
    let package = l.dir("tools/box");
    std::fs::write(l.dir("tools").join("__init__.py"), "").unwrap();
    std::fs::write(package.join("__init__.py"), "").unwrap();
    let script = package.join("server.py");
    std::fs::copy(hostile(), &script).unwrap();
    let data = l.dir("tools/data").join("stations.csv");
    std::fs::write(&data, "in the package").unwrap();
    let cfg = sandboxed(&l, &py, &script, "");
    let mut server = serve(&cfg);
    let inside = call(&mut server, 3, "read", json!({"path": data}));
    assert_eq!(inside, "read: in the package", "{}", server.stderr());
    let read = call(&mut server, 4, "read", json!({"path": secret}));
    assert!(read.starts_with("denied"), "{read}");
}

#[test]
fn a_sandboxed_python_upstream_has_a_temporary_directory_and_imports_trio_without_exec() {
    let Some(py) = python_with("trio", "Python with trio (.ci/install-clients.sh)") else {
        return;
    };
    let l = Layout::new();
    let cfg = sandboxed(&l, &py, &hostile(), "");
    let mut server = serve(&cfg);
    let made = call(&mut server, 1, "temp_file", json!({}));
    assert!(made.starts_with("made: "), "{made}");
    // trio looks for libpthread at import: `ldconfig -p` (refused here), then a compiler, which
    // needs a temporary file; with one, the import succeeds without `exec`.
    let imported = call(&mut server, 2, "import", json!({"module": "trio"}));
    assert_eq!(imported, "imported trio", "{}", server.stderr());
}

#[test]
fn a_command_the_sandbox_cannot_start_is_named_with_the_grant_it_needs() {
    let Some(py) = python() else { return };
    let l = Layout::new();
    // A script run through `/usr/bin/env`, which must start another program: `exec` is needed.
    let script = l.dir("bin").join("server");
    std::fs::write(
        &script,
        format!(
            "#!/usr/bin/env {}\n{}",
            py.display(),
            std::fs::read_to_string(hostile()).unwrap()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {{command: [{script:?}, --mode, sandbox]}}\n    name: box\n    prefix: box_\n    isolation: sandbox\n"
    ));
    let server = StdioServer::start(&cfg);
    let said = format!("the sandbox refused to run {}", script.display());
    assert!(server.logged(&said), "{}", server.stderr());
    assert!(server.logged("permissions.exec"), "{}", server.stderr());
    drop(server);
    // Its interpreter named on the `#!` line itself: the kernel runs it within the one `exec`.
    let body = std::fs::read_to_string(&script).unwrap();
    let direct = body.replacen("#!/usr/bin/env ", "#!", 1);
    std::fs::write(&script, direct).unwrap();
    let mut server = serve(&cfg);
    assert_eq!(call(&mut server, 1, "echo", json!({"text": "up"})), "up");
}
