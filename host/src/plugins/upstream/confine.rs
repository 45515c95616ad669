//! Confining a stdio upstream's child before it runs: the host starts the hidden
//! `mcp-host upstream-exec --confine <json> -- <command>…`, which applies the resource limits and,
//! under `isolation: sandbox`, Landlock and seccomp to itself, then `exec`s the command (the
//! workspace denies `unsafe`, so no `pre_exec` hook: the confinement happens in a process of our
//! own, exactly as the probe child confines itself). The environment is already cleared and
//! allow-listed by the host when it starts the helper; `exec` keeps it.
//!
//! What the sandbox grants a command by default (documented in
//! `docs/operators/upstream-servers.md`):
//! - read: the system's libraries and time zones (as for plugins), a few files of `/etc` that
//!   runtimes read (TLS roots, name resolution, `passwd`), `/proc/self`, `/dev/null` and the
//!   random devices; the command's own runtime: its resolved binary (and the interpreter a `#!`
//!   line names), a Python virtual environment it runs from (`…/bin/python` beside `pyvenv.cfg`),
//!   and the script it runs — its own package, never the configuration's directory (see
//!   [`script_root`]); `server.cwd` when one is configured; and `plugins.<name>.permissions.read`;
//! - write: `/dev/null`, the upstream's data directory (with `tmp/` in it as `TMPDIR`) and
//!   `permissions.write`;
//! - execute: nothing but its own command, once: the helper's `exec` of it is the only `execve`
//!   seccomp lets through (see [`sandbox::OwnExec`]), so neither a shell nor the dynamic loader
//!   run on a program (`ld.so PROGRAM`) start afterwards. With `permissions.exec`, the system's
//!   program directories and the read grants may be run;
//! - network: none — no Unix-domain socket either (socket pairs stay allowed) unless
//!   `permissions.unix_sockets` names them; `permissions.connect` grants TCP (Landlock filters the
//!   ports on this kernel).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::plugins::worker::{sandbox, wire};

/// Files of `/etc` a runtime reads (TLS roots, name resolution, users, locale aliases).
const ETC_READ: &[&str] = &[
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/locale.alias",
    "/etc/mime.types",
    "/usr/share/ca-certificates",
    "/usr/share/locale",
    "/proc/self",
    "/proc/sys/kernel",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
    "/dev/random",
];

/// Dynamic loaders an ELF program needs to run (executed by the kernel on `exec`).
const LOADERS: &[&str] = &[
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/ld-linux-x86-64.so.2",
    "/lib/ld-musl-x86_64.so.1",
    "/lib/ld-musl-aarch64.so.1",
];

/// How the helper confines itself before `exec`: the worker's wire forms, so the same code
/// applies them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExecConfinement {
    /// Resource limits.
    pub limits: Option<wire::Limits>,
    /// Landlock and seccomp (`isolation: sandbox`).
    pub sandbox: Option<wire::Sandbox>,
    /// The command's `TMPDIR` (made by the helper, in its writable data directory) unless its
    /// environment names one: a sandbox grants no shared temporary directory.
    #[serde(default)]
    pub temp_dir: Option<PathBuf>,
}

/// The private temporary directory of sandboxed upstream `name`: `tmp` in its data directory.
pub(crate) fn temp_dir(config: &Config, name: &str) -> PathBuf {
    config.plugin_data_dir(name).join("tmp")
}

/// The command's binary as `exec` will find it: an absolute or relative path as given, else the
/// first match on `path` (the child's `PATH`).
pub(crate) fn resolve_program(program: &str, path: Option<&str>, cwd: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let p = cwd.join(program);
        return p.is_file().then_some(p);
    }
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// The sandbox of upstream `name` running `command` (the program already resolved to `binary`)
/// in `cwd`: see the module's documentation for what it grants.
pub(crate) fn upstream_sandbox(
    config: &Config,
    name: &str,
    binary: &Path,
    command: &[String],
    cwd: &Path,
    configured_cwd: Option<&Path>,
) -> wire::Sandbox {
    let settings = config.plugin(name);
    let grant = settings.permissions;
    let real = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_path_buf());
    let mut read: Vec<PathBuf> = grant.read.clone();
    read.extend(sandbox::SYSTEM_READ.iter().map(PathBuf::from));
    read.extend(ETC_READ.iter().map(PathBuf::from));
    if let Some(cwd) = configured_cwd {
        read.push(cwd.to_path_buf());
    }
    read.extend(runtime_read(binary));
    let mut exec_paths = vec![real.clone()];
    // A script's interpreter, run by the kernel within the same `exec`.
    if let Some(interpreter) = interpreter(&real).filter(|i| !runs_another_program(i)) {
        read.extend(runtime_read(&interpreter));
        exec_paths.push(std::fs::canonicalize(&interpreter).unwrap_or(interpreter));
    }
    // The script it runs: the first argument that is a file.
    if let Some(script) = command
        .iter()
        .skip(1)
        .map(|a| cwd.join(a))
        .find(|p| p.is_file())
    {
        read.push(script_root(&script, &config.base_dir));
    }
    exec_paths.extend(
        LOADERS
            .iter()
            .map(Path::new)
            .filter(|p| p.exists())
            .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())),
    );
    if grant.exec {
        exec_paths.extend(sandbox::program_paths(&grant.read));
    }
    let mut write = grant.write.clone();
    write.extend(sandbox::implicit_write(config, name));
    wire::Sandbox {
        read,
        write,
        exec_paths,
        connect_ports: sandbox::connect_ports(&grant.connect),
        // Without it, seccomp still lets the helper's own `exec` of the command through.
        exec: grant.exec,
        allow_weaker: settings.allow_weaker_sandbox,
        unix_sockets: grant.unix_sockets.clone(),
    }
}

/// What running the program `binary` needs readable: the file itself (resolved), its prefix's
/// `lib` (`/usr/lib` for `/usr/bin/node`, the Python installation's for a pyenv or venv
/// `python`), and a Python virtual environment it runs from (`<venv>/bin/python` beside
/// `<venv>/pyvenv.cfg`).
fn runtime_read(binary: &Path) -> Vec<PathBuf> {
    let real = std::fs::canonicalize(binary).unwrap_or_else(|_| binary.to_path_buf());
    let mut read = Vec::new();
    if let Some(venv) = binary.parent().and_then(Path::parent)
        && venv.join("pyvenv.cfg").is_file()
    {
        read.push(venv.to_path_buf());
    }
    if let Some(prefix) = real.parent().and_then(Path::parent) {
        read.push(prefix.join("lib"));
    }
    read.push(real);
    read
}

/// The interpreter a script's `#!` line names (`None` for a program that is not a script).
fn interpreter(script: &Path) -> Option<PathBuf> {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head.get(..n)?.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let first = std::str::from_utf8(line).ok()?.split_whitespace().next()?;
    Some(PathBuf::from(first))
}

/// Whether `interpreter` is one that runs yet another program (`#!/usr/bin/env node`): a second
/// `exec`, which only `permissions.exec` allows.
fn runs_another_program(interpreter: &Path) -> bool {
    interpreter.file_name().is_some_and(|n| n == "env")
}

/// What a script needs readable: its own package, never the configuration's directory
/// (`config_dir`) nor a directory holding it.
/// - a file under `node_modules`: the outermost `node_modules` (its package's dependencies are
///   siblings there);
/// - a module of a Python package (`__init__.py` beside it): the top of its package, the
///   outermost directory of the unbroken `__init__.py` chain above it;
/// - a script of a Node package (a `package.json` in its directory or one above): the nearest such
///   directory, its `node_modules` included;
/// - anything else, a lone script: the file alone.
///
/// A package directory that is the configuration's directory, holds it, is the home directory or
/// `/` is not granted (the file alone is): grant it with `permissions.read` to mean it.
pub(crate) fn script_root(script: &Path, config_dir: &Path) -> PathBuf {
    let outermost_modules = script
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last();
    let package = outermost_modules
        .or_else(|| {
            script
                .ancestors()
                .skip(1)
                .take_while(|d| d.join("__init__.py").is_file())
                .last()
        })
        .or_else(|| {
            script
                .ancestors()
                .skip(1)
                .find(|d| d.join("package.json").is_file())
        });
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let config_dir = real(config_dir);
    let home = std::env::var_os("HOME").map(|h| real(Path::new(&h)));
    let too_wide = |dir: &Path| {
        let dir = real(dir);
        dir.parent().is_none() || config_dir.starts_with(&dir) || home.as_ref() == Some(&dir)
    };
    match package {
        Some(dir) if !too_wide(dir) => dir.to_path_buf(),
        _ => script.to_path_buf(),
    }
}

/// The helper's side (`mcp-host upstream-exec`): confine this process as `confine` (the host's
/// JSON) says, then replace it with `command`. Returns only on failure, with why.
pub fn run_upstream_exec(confine: Option<&str>, command: &[String]) -> String {
    let confine: ExecConfinement = match confine.map(serde_json::from_str).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => return format!("unreadable confinement: {e}"),
    };
    let Some((program, args)) = command.split_first() else {
        return "no command to run".into();
    };
    if let Some(limits) = &confine.limits
        && let Err(e) = sandbox::apply_limits(limits)
    {
        return e.to_string();
    }
    let mut cmd = program_command(program);
    cmd.args(args);
    if let Some(sandbox) = &confine.sandbox {
        if let Some(tmp) = &confine.temp_dir
            && std::env::var_os("TMPDIR").is_none()
            && std::fs::create_dir_all(tmp).is_ok()
        {
            cmd.env("TMPDIR", tmp);
        }
        if let Err(e) = sandbox::limit_tasks() {
            return e.to_string();
        }
        // The path `exec` passes is the program's own string, held by `cmd` from here on:
        // `Command::exec` hands it to `execvp`, which passes a path with a `/` to `execve` as it
        // is (the host always gives a path). Any other `execve` is refused.
        let own = sandbox::OwnExec {
            path_address: cmd.get_program().as_encoded_bytes().as_ptr().addr() as u64,
        };
        match sandbox::enforce(sandbox, (!sandbox.exec).then_some(own)) {
            Ok(Some(note)) => eprintln!("mcp-host upstream-exec: {note}"),
            Ok(None) => {}
            Err(e) => return e.to_string(),
        }
    }
    exec(cmd, program, confine.sandbox.is_some())
}

/// The command running `program`, found on `PATH` now when it is a bare name (the host gives a
/// path): `exec` is then handed a path of this process's own, the one the sandbox lets through.
fn program_command(program: &str) -> std::process::Command {
    let path = std::env::var("PATH").ok();
    let cwd = std::env::current_dir().unwrap_or_default();
    match resolve_program(program, path.as_deref(), &cwd) {
        #[cfg(unix)]
        Some(found) if !program.contains('/') => {
            use std::os::unix::process::CommandExt as _;
            let mut cmd = std::process::Command::new(found);
            cmd.arg0(program);
            cmd
        }
        _ => std::process::Command::new(program),
    }
}

/// Replace this process with `cmd` (running `program`); on failure, why — in the sandbox's words
/// when it refused.
#[cfg(unix)]
fn exec(mut cmd: std::process::Command, program: &str, sandboxed: bool) -> String {
    use std::os::unix::process::CommandExt as _;
    let e = cmd.exec();
    let refused = matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM));
    match interpreter(Path::new(program)) {
        Some(i) if sandboxed && refused && runs_another_program(&i) => format!(
            "the sandbox refused to run {program}: it is a script run through {}, which must \
             start another program (grant exec: permissions.exec: true, or make server.command \
             start its interpreter)",
            i.display()
        ),
        _ if sandboxed && refused => format!(
            "the sandbox refused to run {program} ({e}; grant exec: permissions.exec: true lets \
             it run the system's programs)"
        ),
        _ => format!("cannot run {program}: {e}"),
    }
}

#[cfg(not(unix))]
fn exec(_cmd: std::process::Command, program: &str, _sandboxed: bool) -> String {
    format!("cannot run {program}: upstream-exec needs Unix")
}

/// The operator's reading of a line a sandboxed upstream (without `exec`) wrote to stderr when
/// the line reports a refused program start: "the sandbox refused to run PATH (grant exec:
/// permissions.exec: true)". It recognises how the common runtimes report it — Python's
/// `PermissionError: [Errno 1] Operation not permitted: 'PATH'`, Node's `spawn PATH EPERM`, a
/// shell's or `env`'s `PATH: Operation not permitted` — for the upstream's status, which shows its
/// last stderr lines.
pub fn exec_refusal(line: &str) -> Option<String> {
    const DENIED: &str = "Operation not permitted";
    let unquote = |s: &str| s.trim().trim_matches(|c| c == '\'' || c == '"').to_owned();
    let path = if let Some((_, rest)) = line.split_once("[Errno 1] Operation not permitted: ") {
        unquote(rest)
    } else if let Some((_, rest)) = line.split_once("spawn ").or(line.split_once("spawnSync ")) {
        rest.strip_suffix(" EPERM")
            .or(rest.strip_suffix(" EACCES"))?
            .to_owned()
    } else {
        let before = line.strip_suffix(DENIED)?.trim_end().strip_suffix(':')?;
        unquote(before.rsplit(": ").next()?)
    };
    (!path.is_empty() && !path.contains(' '))
        .then(|| format!("the sandbox refused to run {path} (grant exec: permissions.exec: true)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripts_read_grant_is_its_own_package_never_the_configuration_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let file = |rel: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, b"").expect("write");
            p
        };
        let config = root.join("config");
        // Under node_modules: the outermost node_modules, as before.
        let js = file("srv/node_modules/@m/fs/node_modules/x/dist/index.js");
        assert_eq!(script_root(&js, &config), root.join("srv/node_modules"));
        // A lone script beside the configuration: the file alone.
        let lone = file("config/server.py");
        assert_eq!(script_root(&lone, &config), lone);
        // A module of a package: the top of the __init__.py chain, not above.
        file("config/tools/__init__.py");
        file("config/tools/box/__init__.py");
        let module = file("config/tools/box/server.py");
        assert_eq!(script_root(&module, &config), root.join("config/tools"));
        // A Node package's script: the package (its node_modules with it).
        file("apps/weather/package.json");
        let built = file("apps/weather/dist/index.js");
        assert_eq!(script_root(&built, &config), root.join("apps/weather"));
        // A package.json in the configuration's directory grants nothing wider than the file.
        file("config/package.json");
        let beside = file("config/lib/server.js");
        assert_eq!(script_root(&beside, &config), beside);
    }

    #[test]
    fn a_refused_program_start_is_read_from_what_the_runtimes_print() {
        let said = |path: &str| {
            Some(format!(
                "the sandbox refused to run {path} (grant exec: permissions.exec: true)"
            ))
        };
        assert_eq!(
            exec_refusal(
                "PermissionError: [Errno 1] Operation not permitted: '/usr/sbin/ldconfig'"
            ),
            said("/usr/sbin/ldconfig")
        );
        assert_eq!(exec_refusal("Error: spawn /bin/sh EPERM"), said("/bin/sh"));
        assert_eq!(
            exec_refusal("Error: spawnSync /usr/bin/git EPERM"),
            said("/usr/bin/git")
        );
        assert_eq!(
            exec_refusal("/usr/bin/env: 'node': Operation not permitted"),
            said("node")
        );
        assert_eq!(
            exec_refusal("sh: 1: /usr/bin/curl: Operation not permitted"),
            said("/usr/bin/curl")
        );
        assert_eq!(
            exec_refusal("PermissionError: [Errno 1] Operation not permitted"),
            None
        );
        assert_eq!(exec_refusal("Error: spawn EPERM"), None);
        assert_eq!(exec_refusal("all is well"), None);
    }

    #[test]
    fn programs_resolve_on_path_or_as_given() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).expect("mkdir");
        std::fs::write(bin.join("tool"), b"").expect("write");
        let path = format!("/nonexistent:{}", bin.display());
        assert_eq!(
            resolve_program("tool", Some(&path), tmp.path()),
            Some(bin.join("tool"))
        );
        assert_eq!(
            resolve_program("bin/tool", None, tmp.path()),
            Some(tmp.path().join("bin/tool"))
        );
        assert_eq!(resolve_program("missing", Some(&path), tmp.path()), None);
    }
}
