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
//!   random devices; the command's own runtime: its resolved binary, a Python virtual environment
//!   it runs from (`…/bin/python` beside `pyvenv.cfg`), and the script it runs (its directory, or
//!   for a file under `node_modules` the outermost `node_modules` directory with its packages);
//!   `server.cwd` when one is configured; and `plugins.<name>.permissions.read`;
//! - write: `/dev/null`, the upstream's data directory and `permissions.write`;
//! - execute: the resolved binary and the dynamic loader only (with `permissions.exec`, the
//!   system's program directories too: `npx` needs them, it starts a shell);
//! - network: Unix-domain sockets only, unless `permissions.connect` grants TCP (Landlock then
//!   filters the ports on this kernel).

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
    read.push(real.clone());
    // A Python virtual environment: `<venv>/bin/python` beside `<venv>/pyvenv.cfg`.
    if let Some(venv) = binary.parent().and_then(Path::parent)
        && venv.join("pyvenv.cfg").is_file()
    {
        read.push(venv.to_path_buf());
    }
    // The runtime's own tree (`/usr/lib/node_modules`, `/usr/lib/python3.x` are under /usr/lib).
    if let Some(prefix) = real.parent().and_then(Path::parent) {
        read.push(prefix.join("lib"));
    }
    // The script it runs: the first argument that is a file.
    if let Some(script) = command
        .iter()
        .skip(1)
        .map(|a| cwd.join(a))
        .find(|p| p.is_file())
    {
        read.push(script_root(&script));
    }
    let mut exec_paths = vec![real];
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
        // `exec` of the command itself must pass seccomp; Landlock limits what can be run.
        exec: true,
        allow_weaker: settings.allow_weaker_sandbox,
        unix_sockets: true,
    }
}

/// What a script needs readable: for a file under `node_modules`, the outermost `node_modules`
/// (its package's dependencies are siblings there); else its directory.
fn script_root(script: &Path) -> PathBuf {
    let outermost = script
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last();
    match outermost {
        Some(dir) => dir.to_path_buf(),
        None => script.parent().unwrap_or(script).to_path_buf(),
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
    if let Some(sandbox) = &confine.sandbox {
        if let Err(e) = sandbox::limit_tasks() {
            return e.to_string();
        }
        match sandbox::enforce(sandbox) {
            Ok(Some(note)) => eprintln!("mcp-host upstream-exec: {note}"),
            Ok(None) => {}
            Err(e) => return e.to_string(),
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let e = std::process::Command::new(program).args(args).exec();
        format!("cannot run {program}: {e}")
    }
    #[cfg(not(unix))]
    {
        let _ = args;
        format!("cannot run {program}: upstream-exec needs Unix")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_under_node_modules_gets_the_outermost_node_modules() {
        assert_eq!(
            script_root(Path::new(
                "/c/node_modules/@m/server-fs/node_modules/x/dist/index.js"
            )),
            PathBuf::from("/c/node_modules")
        );
        assert_eq!(
            script_root(Path::new("/srv/tools/server.py")),
            PathBuf::from("/srv/tools")
        );
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
