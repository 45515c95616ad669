//! What an isolated plugin is allowed, and how its worker process enforces it on itself before it
//! loads the plugin: resource limits (`setrlimit`: address space, CPU seconds, open files, no core
//! dumps) for every worker, and for `isolation: sandbox` a deny-by-default Landlock ruleset
//! (filesystem, TCP bind/connect ports, signals and abstract sockets scoped to the sandbox, and
//! pathname Unix sockets where the kernel governs them) plus a seccomp filter (no `ptrace` or
//! other process inspection, no `execve` unless granted, no socket families or types beyond
//! TCP/UDP over IP — and none at all without a network grant — no Unix socket without a
//! `unix_sockets` grant, and none of the kernel's more dangerous interfaces). `no_new_privs` is
//! set first. The same code confines a stdio upstream's child (`upstream::confine`).
//!
//! Landlock filters TCP by port: a `host:port` grant opens that port for every host, and the host
//! part is shown but not enforced by the kernel. UDP is not filtered (name resolution needs it) but
//! is only available with a network grant. `connect(2)` to a pathname Unix socket is governed by
//! Landlock from ABI 9 (Linux 7.1) only: below it, no Unix socket can be created without a grant,
//! and a grant opens every socket the process can name (refused unless `allow_weaker_sandbox`).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::wire;
use crate::config::{Config, Connect};

/// Why a worker (or a probe) could not put its restrictions in place: it then refuses to load the
/// plugin at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SandboxError {
    /// A resource limit could not be set.
    #[error("cannot set {limit}: {reason}")]
    Limit {
        /// The limit, as operators know it (`RLIMIT_AS (limits.memory_mb)`).
        limit: &'static str,
        /// The system's error.
        reason: String,
    },
    /// The kernel enforces less than asked, and the plugin does not accept a weaker sandbox.
    #[error(
        "sandbox refused: {0}; set allow_weaker_sandbox: true in the plugin's settings to run it \
         with what this system can enforce"
    )]
    Weaker(String),
    /// The Landlock ruleset could not be built or applied.
    #[error("Landlock: {0}")]
    Landlock(String),
    /// The seccomp filter could not be built or applied.
    #[error("seccomp: {0}")]
    Seccomp(String),
}

/// Everything a sandboxed plugin is granted: what its configuration lists, and what it gets
/// implicitly (its own file, its data directory, the system's shared libraries and time zones).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// Paths it may read (configured).
    pub read: Vec<PathBuf>,
    /// Paths it may read and write (configured).
    pub write: Vec<PathBuf>,
    /// TCP endpoints it may connect to.
    pub connect: Connect,
    /// Environment variables it sees.
    pub env: Vec<String>,
    /// Whether it may run programs.
    pub exec: bool,
    /// Unix-domain sockets it may connect to, by path.
    pub unix_sockets: Vec<PathBuf>,
    /// Paths it may read without asking: its file, shared libraries, time zones.
    pub implicit_read: Vec<PathBuf>,
    /// Paths it may write without asking: its data directory and `/dev/null`.
    pub implicit_write: Vec<PathBuf>,
    /// Whether it starts when the kernel cannot enforce all of this.
    pub allow_weaker_sandbox: bool,
}

/// System paths every sandboxed plugin may read: the dynamic loader's libraries and cache, time
/// zones, and the harmless devices.
#[cfg(target_os = "linux")]
pub(crate) const SYSTEM_READ: &[&str] = &[
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/usr/share/zoneinfo",
    "/dev/urandom",
    "/dev/zero",
];
#[cfg(not(target_os = "linux"))]
pub(crate) const SYSTEM_READ: &[&str] = &[];

/// Where programs live, readable and executable when a plugin may run programs.
const SYSTEM_EXEC: &[&str] = &["/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"];

impl Grant {
    /// What plugin `plugin`, loaded from `file`, is granted under `config`.
    pub fn of(config: &Config, plugin: &str, file: &Path) -> Grant {
        let settings = config.plugin(plugin);
        // A plugin `mcp-host add` installed gets what it declared, unless the operator grants
        // otherwise.
        let p = if settings.permissions == crate::config::Permissions::default() {
            crate::config::installed::declared_grant(config, plugin, file).unwrap_or_default()
        } else {
            settings.permissions.clone()
        };
        let mut implicit_read = vec![file.to_path_buf()];
        implicit_read.extend(SYSTEM_READ.iter().map(PathBuf::from));
        Grant {
            read: p.read,
            write: p.write,
            connect: p.connect,
            env: p.env,
            exec: p.exec,
            unix_sockets: p.unix_sockets,
            implicit_read,
            implicit_write: implicit_write(config, plugin),
            allow_weaker_sandbox: settings.allow_weaker_sandbox,
        }
    }

    /// The data directory (created before the worker starts, so it can be granted).
    pub(crate) fn data_dir(&self) -> Option<&Path> {
        self.implicit_write.first().map(PathBuf::as_path)
    }

    /// The worker's side of this grant, for a worker loading the private copy `copy`.
    pub(crate) fn to_wire(&self, copy: &Path) -> wire::Sandbox {
        let mut read: Vec<PathBuf> = self.read.clone();
        read.extend(self.implicit_read.iter().cloned());
        read.push(copy.to_path_buf());
        let exec_paths = if self.exec {
            program_paths(&self.read)
        } else {
            Vec::new()
        };
        wire::Sandbox {
            read,
            write: self
                .write
                .iter()
                .chain(&self.implicit_write)
                .cloned()
                .collect(),
            exec_paths,
            connect_ports: connect_ports(&self.connect),
            exec: self.exec,
            allow_weaker: self.allow_weaker_sandbox,
            unix_sockets: self.unix_sockets.clone(),
        }
    }
}

/// What a sandboxed plugin or upstream `name` may write without asking: its data directory and
/// `/dev/null`.
pub(crate) fn implicit_write(config: &Config, name: &str) -> Vec<PathBuf> {
    vec![config.plugin_data_dir(name), PathBuf::from("/dev/null")]
}

/// What a sandbox granted `exec` may run: the system's program and library directories, and the
/// paths it is granted to read (`granted_read`).
pub(crate) fn program_paths(granted_read: &[PathBuf]) -> Vec<PathBuf> {
    SYSTEM_EXEC
        .iter()
        .chain(SYSTEM_READ)
        .map(PathBuf::from)
        .chain(granted_read.iter().cloned())
        .collect()
}

/// The TCP ports a connect grant opens, sorted and each once (Landlock filters TCP by port);
/// `None` for any.
pub(crate) fn connect_ports(connect: &Connect) -> Option<Vec<u16>> {
    match connect {
        Connect::Any => None,
        Connect::Only(list) => {
            let mut ports: Vec<u16> = list.iter().map(|e| e.port).collect();
            ports.sort_unstable();
            ports.dedup();
            Some(ports)
        }
    }
}

/// The sandbox of a probe child that opens `copies` (one tool directory's, `isolation: sandbox`):
/// it may read those copies and the system's libraries, and nothing else — no writes, no network,
/// no programs.
pub(crate) fn probe_sandbox(copies: &[PathBuf], allow_weaker: bool) -> wire::Sandbox {
    let mut read: Vec<PathBuf> = copies.to_vec();
    read.extend(SYSTEM_READ.iter().map(PathBuf::from));
    wire::Sandbox {
        read,
        write: vec![PathBuf::from("/dev/null")],
        exec_paths: Vec::new(),
        connect_ports: Some(Vec::new()),
        exec: false,
        allow_weaker,
        unix_sockets: Vec::new(),
    }
}

/// Apply the worker's resource limits to this process (and always turn core dumps off).
#[cfg(unix)]
pub(crate) fn apply_limits(limits: &wire::Limits) -> Result<(), SandboxError> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let set = |resource: Resource, name: &'static str, soft: u64, hard: u64| {
        // An unprivileged process cannot raise its hard limit: stay within the one it has.
        let ceiling = getrlimit(resource).maximum.unwrap_or(u64::MAX);
        let limit = Rlimit {
            current: Some(soft.min(ceiling)),
            maximum: Some(hard.min(ceiling)),
        };
        setrlimit(resource, limit).map_err(|e| SandboxError::Limit {
            limit: name,
            reason: e.to_string(),
        })
    };
    set(Resource::Core, "RLIMIT_CORE", 0, 0)?;
    if let Some(bytes) = limits.address_space {
        set(Resource::As, "RLIMIT_AS (limits.memory_mb)", bytes, bytes)?;
    }
    if let Some(secs) = limits.cpu_secs {
        // SIGXCPU at the soft limit, SIGKILL a second later.
        set(
            Resource::Cpu,
            "RLIMIT_CPU (limits.cpu_secs)",
            secs,
            secs + 1,
        )?;
    }
    if let Some(files) = limits.open_files {
        set(
            Resource::Nofile,
            "RLIMIT_NOFILE (limits.open_files)",
            files,
            files,
        )?;
    }
    Ok(())
}

/// Resource limits need `setrlimit`; elsewhere they are not applied.
#[cfg(not(unix))]
pub(crate) fn apply_limits(_limits: &wire::Limits) -> Result<(), SandboxError> {
    Ok(())
}

/// Tasks (processes and threads) a sandboxed worker may add to those its user already runs, by
/// `RLIMIT_NPROC`.
pub(crate) const EXTRA_TASKS: u64 = 1024;

/// Cap the tasks a sandboxed worker can create (`RLIMIT_NPROC`), against fork and thread bombs.
/// The kernel counts the limit against every task of the real user id, the host's own included,
/// and checks it only when this process (or its children) creates one; so the limit is set to
/// what the user runs now plus [`EXTRA_TASKS`]: the worker can neither starve the host (the host
/// is not bound by the worker's limit) nor be starved by a user who already runs many tasks.
/// Returns the limit set.
#[cfg(target_os = "linux")]
pub(crate) fn limit_tasks() -> Result<u64, SandboxError> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = user_tasks().saturating_add(EXTRA_TASKS);
    let ceiling = getrlimit(Resource::Nproc).maximum.unwrap_or(u64::MAX);
    let limit = limit.min(ceiling);
    setrlimit(
        Resource::Nproc,
        Rlimit {
            current: Some(limit),
            maximum: Some(limit),
        },
    )
    .map_err(|e| SandboxError::Limit {
        limit: "RLIMIT_NPROC",
        reason: e.to_string(),
    })?;
    Ok(limit)
}

/// Elsewhere there is no cheap count of a user's tasks: no limit.
#[cfg(not(target_os = "linux"))]
pub(crate) fn limit_tasks() -> Result<u64, SandboxError> {
    Ok(u64::MAX)
}

/// The tasks (threads of every process) of this process's real user id, from `/proc`.
#[cfg(target_os = "linux")]
fn user_tasks() -> u64 {
    let uid = rustix::process::getuid().as_raw();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut tasks = 0u64;
    for entry in dir.flatten() {
        if !entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            tasks += field("Threads:").unwrap_or(1);
        }
    }
    tasks
}

/// The one `execve` a confined process without `exec` may still make: its own, of its command,
/// before which the filter is installed. seccomp cannot read the path a call names, only the
/// address it is passed at: this is the address of the path the process is about to pass, and a
/// call with any other address is refused. After that `exec` the address space is new, so the
/// program it runs reaches that address only by mapping memory there on purpose, which only code
/// already running arbitrary instructions in it can do (and such code can run any code it can read
/// without `exec`, under the same sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OwnExec {
    /// The address of the path (a NUL-terminated string) passed to `execve`.
    pub path_address: u64,
}

/// Restrict this process to `sandbox`: Landlock, then seccomp. Call it before any other thread
/// starts (Landlock restricts the calling thread and the threads it starts later). `own_exec` is
/// the `execve` still to come when the sandbox grants no `exec` (a stdio upstream's helper);
/// `None` refuses every one. `Ok` carries a note when the kernel enforces less than asked and
/// `allow_weaker` accepted that.
#[cfg(target_os = "linux")]
pub(crate) fn enforce(
    sandbox: &wire::Sandbox,
    own_exec: Option<OwnExec>,
) -> Result<Option<String>, SandboxError> {
    let note = linux::landlock(sandbox)?;
    linux::seccomp(sandbox, own_exec)?;
    Ok(note)
}

/// Without Landlock and seccomp, a sandbox can only be refused (or, with `allow_weaker`, run as
/// plain process isolation).
#[cfg(not(target_os = "linux"))]
pub(crate) fn enforce(
    sandbox: &wire::Sandbox,
    _own_exec: Option<OwnExec>,
) -> Result<Option<String>, SandboxError> {
    weaker_or_refuse(
        sandbox.allow_weaker,
        "this OS has no Landlock or seccomp; the plugin runs with process isolation only",
    )
}

/// What to do when the kernel enforces less than asked: go on with a note when the plugin's
/// configuration accepts a weaker sandbox, else refuse to start it.
pub(crate) fn weaker_or_refuse(
    allow_weaker: bool,
    what: &str,
) -> Result<Option<String>, SandboxError> {
    if allow_weaker {
        Ok(Some(format!(
            "weaker sandbox (allow_weaker_sandbox: true): {what}"
        )))
    } else {
        Err(SandboxError::Weaker(what.to_owned()))
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
        PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    };
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };

    use super::{SandboxError, weaker_or_refuse, wire};

    /// The Landlock ABI the sandbox is written for: filesystem rights including truncate and device
    /// ioctls, TCP ports, and signal / abstract-socket scoping.
    const ABI_WANTED: ABI = ABI::V6;

    /// The rights of `access` that make sense on `path` (directory rights only on directories).
    fn rights_for(path: &std::path::Path, access: BitFlags<AccessFs>) -> BitFlags<AccessFs> {
        if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(ABI_WANTED)
        }
    }

    /// Whether this kernel's Landlock governs `connect(2)` to pathname Unix sockets
    /// (`LANDLOCK_ACCESS_FS_RESOLVE_UNIX`, ABI 9): asked of the kernel as a hard requirement, which
    /// fails below it.
    pub(super) fn governs_unix_paths() -> bool {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::ResolveUnix)
            .is_ok()
    }

    pub(super) fn landlock(sandbox: &wire::Sandbox) -> Result<Option<String>, SandboxError> {
        let fail = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
        // Taken only where the kernel has it, so that an older kernel still enforces the rest in
        // full; what it then cannot hold is said below.
        let unix_paths = governs_unix_paths();
        let read = AccessFs::from_read(ABI_WANTED) & !BitFlags::from(AccessFs::Execute);
        let write = AccessFs::from_all(ABI_WANTED) & !BitFlags::from(AccessFs::Execute);
        let exec = AccessFs::from_read(ABI_WANTED);
        let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
        rules.extend(sandbox.read.iter().map(|p| (p.clone(), read)));
        rules.extend(sandbox.write.iter().map(|p| (p.clone(), write)));
        rules.extend(sandbox.exec_paths.iter().map(|p| (p.clone(), exec)));
        let net = match sandbox.connect_ports {
            // Any connection: only binding stays denied.
            None => BitFlags::from(AccessNet::BindTcp),
            Some(_) => AccessNet::from_all(ABI_WANTED),
        };
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI_WANTED))
            .map_err(fail)?
            .handle_access(net)
            .map_err(fail)?
            .scope(Scope::from_all(ABI_WANTED))
            .map_err(fail)?;
        if unix_paths {
            ruleset = ruleset.handle_access(AccessFs::ResolveUnix).map_err(fail)?;
            rules.extend(
                sandbox
                    .unix_sockets
                    .iter()
                    .map(|p| (p.clone(), BitFlags::from(AccessFs::ResolveUnix))),
            );
        }
        let mut ruleset = ruleset.create().map_err(fail)?;
        for (path, access) in rules {
            // A granted path that does not exist grants nothing.
            let Ok(fd) = PathFd::new(&path) else { continue };
            let access = match access == AccessFs::ResolveUnix {
                // A file right, meant for the socket file itself too.
                true => access,
                false => rights_for(&path, access),
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(fail)?;
        }
        for port in sandbox.connect_ports.iter().flatten() {
            ruleset = ruleset
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(fail)?;
        }
        let status = ruleset.restrict_self().map_err(fail)?;
        let mut weaker = Vec::new();
        if status.ruleset != RulesetStatus::FullyEnforced {
            weaker.push(format!(
                "this kernel's Landlock ({:?}) enforces the permissions only partly ({:?}; \
                 Linux 6.12 or later enforces all of them)",
                status.landlock, status.ruleset
            ));
        }
        if !unix_paths && !sandbox.unix_sockets.is_empty() {
            weaker.push(UNIX_PATHS_NOT_HELD.to_owned());
        }
        match weaker.is_empty() {
            true => Ok(None),
            false => weaker_or_refuse(sandbox.allow_weaker, &weaker.join("; ")),
        }
    }

    /// What a `unix_sockets` grant means on a kernel whose Landlock does not govern pathname
    /// Unix sockets.
    const UNIX_PATHS_NOT_HELD: &str = "this kernel's Landlock cannot hold connect(2) to the \
        paths of permissions.unix_sockets (Landlock ABI 9, Linux 7.1, can): with the grant, the \
        process can connect to any Unix socket it can name";

    /// Syscalls no sandboxed plugin may make: process inspection, kernel configuration, new
    /// mounts and namespaces, and interfaces that would bypass this filter (io_uring).
    const DENIED: &[i64] = &[
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
    ];

    /// Socket types never allowed (masked from `socket`'s type argument).
    const DENIED_SOCKET_TYPES: &[libc::c_int] = &[
        libc::SOCK_RAW,
        libc::SOCK_RDM,
        libc::SOCK_SEQPACKET,
        10, // SOCK_PACKET (obsolete, deprecated in libc)
        6,  // SOCK_DCCP
    ];

    fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(fail)
    }

    /// The rules under which `socket(2)` is refused: every call without a network grant; with
    /// one, any family but IPv4/IPv6 and any type but stream and datagram. `AF_UNIX` only with a
    /// `unix_sockets` grant.
    fn socket_rules(network: bool, unix_sockets: bool) -> Result<Vec<SeccompRule>, SandboxError> {
        let rule = |c: Vec<SeccompCondition>| SeccompRule::new(c).map_err(fail);
        if !network {
            // Refused outright, or for every family but AF_UNIX.
            return match unix_sockets {
                false => Ok(Vec::new()),
                true => Ok(vec![rule(vec![condition(
                    0,
                    SeccompCmpOp::Ne,
                    libc::AF_UNIX as u64,
                )?])?]),
            };
        }
        let mut families = vec![
            condition(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
            condition(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
        ];
        if unix_sockets {
            families.push(condition(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?);
        }
        let mut rules = vec![rule(families)?];
        for kind in DENIED_SOCKET_TYPES {
            rules.push(rule(vec![condition(
                1,
                SeccompCmpOp::MaskedEq(0xf),
                *kind as u64,
            )?])?);
        }
        Ok(rules)
    }

    /// The rules under which `socketpair(2)` is refused (`None`: never): with a `unix_sockets`
    /// grant, never; without one, for datagram pairs, whose ends can still `sendto`/`connect` a
    /// named socket (stream and seqpacket pairs are connected for good: runtimes use them, as
    /// pipes). An empty list of rules would refuse every call.
    fn socketpair_rules(unix_sockets: bool) -> Result<Option<Vec<SeccompRule>>, SandboxError> {
        if unix_sockets {
            return Ok(None);
        }
        let dgram = condition(1, SeccompCmpOp::MaskedEq(0xf), libc::SOCK_DGRAM as u64)?;
        Ok(Some(vec![SeccompRule::new(vec![dgram]).map_err(fail)?]))
    }

    /// The rules under which `execve(2)` and `execveat(2)` are refused: none with `exec`;
    /// without it, every call but the process's own `own_exec` (see [`super::OwnExec`]).
    fn exec_rules(
        exec: bool,
        own_exec: Option<super::OwnExec>,
    ) -> Result<Vec<(i64, Vec<SeccompRule>)>, SandboxError> {
        if exec {
            return Ok(Vec::new());
        }
        let execve = match own_exec {
            None => Vec::new(),
            Some(own) => {
                let other = SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::Ne,
                    own.path_address,
                )
                .map_err(fail)?;
                vec![SeccompRule::new(vec![other]).map_err(fail)?]
            }
        };
        Ok(vec![
            (libc::SYS_execve, execve),
            (libc::SYS_execveat, Vec::new()),
        ])
    }

    fn fail(e: impl std::fmt::Display) -> SandboxError {
        SandboxError::Seccomp(e.to_string())
    }

    pub(super) fn seccomp(
        sandbox: &wire::Sandbox,
        own_exec: Option<super::OwnExec>,
    ) -> Result<(), SandboxError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().map(|s| (*s, Vec::new())).collect();
        rules.extend(exec_rules(sandbox.exec, own_exec)?);
        let network = sandbox.connect_ports.as_ref().is_none_or(|p| !p.is_empty());
        let unix_sockets = !sandbox.unix_sockets.is_empty();
        rules.insert(libc::SYS_socket, socket_rules(network, unix_sockets)?);
        if let Some(pairs) = socketpair_rules(unix_sockets)? {
            rules.insert(libc::SYS_socketpair, pairs);
        }
        // No new user namespace through clone(2) (`unshare` is denied outright).
        let newuser = SeccompRule::new(vec![condition(
            0,
            SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
            libc::CLONE_NEWUSER as u64,
        )?])
        .map_err(fail)?;
        rules.insert(libc::SYS_clone, vec![newuser]);
        let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into().map_err(fail)?;
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .map_err(fail)?;
        // clone3(2) passes its flags in memory, which a filter cannot read: it fails as if the
        // kernel lacked it (ENOSYS), and the C library falls back to clone(2), filtered above.
        let clone3 = SeccompFilter::new(
            [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .map_err(fail)?;
        for filter in [filter, clone3] {
            let program: BpfProgram = filter.try_into().map_err(fail)?;
            seccompiler::apply_filter_all_threads(&program).map_err(fail)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Endpoint, Permissions, PluginSettings};

    #[test]
    fn the_grant_adds_the_plugin_file_and_data_dir_and_the_wire_form_lists_ports() {
        let mut config = Config {
            base_dir: PathBuf::from("/srv/mcp"),
            data_dir: PathBuf::from("/srv/mcp/data"),
            ..Config::default()
        };
        config.plugins.insert(
            "demo".into(),
            PluginSettings {
                permissions: Permissions {
                    read: vec![PathBuf::from("/srv/in")],
                    connect: Connect::Only(vec![
                        Endpoint {
                            host: "a".into(),
                            port: 443,
                        },
                        Endpoint {
                            host: "b".into(),
                            port: 443,
                        },
                    ]),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let grant = Grant::of(&config, "demo", Path::new("/tools/libdemo.so"));
        assert_eq!(grant.implicit_read[0], PathBuf::from("/tools/libdemo.so"));
        assert_eq!(grant.data_dir(), Some(Path::new("/srv/mcp/data/demo")));
        let wire = grant.to_wire(Path::new("/run/1-libdemo.so"));
        assert!(wire.read.contains(&PathBuf::from("/srv/in")));
        assert!(wire.read.contains(&PathBuf::from("/run/1-libdemo.so")));
        assert!(wire.write.contains(&PathBuf::from("/srv/mcp/data/demo")));
        assert_eq!(wire.connect_ports, Some(vec![443]));
        assert!(wire.exec_paths.is_empty() && !wire.exec);
    }

    #[test]
    fn a_weaker_sandbox_is_refused_unless_the_plugin_accepts_it() {
        let refused = weaker_or_refuse(false, "no Landlock")
            .expect_err("refused")
            .to_string();
        assert!(
            refused.contains("sandbox refused: no Landlock"),
            "{refused}"
        );
        assert!(refused.contains("allow_weaker_sandbox: true"), "{refused}");
        let note = weaker_or_refuse(true, "no Landlock").expect("accepted");
        assert!(note.is_some_and(|n| n.contains("no Landlock")));
    }
}
