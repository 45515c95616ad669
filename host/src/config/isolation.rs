//! How a plugin runs and what it may reach: its isolation (`in_process`, `process`, `sandbox`), the
//! resource limits of its worker process, and a sandboxed plugin's permissions. The settings only;
//! `plugins::worker` enforces them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where a plugin's code runs, from the weakest isolation to the strongest (the order compares
/// them: a plugin runs under the stronger of its directory's and its own setting).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Deserialize,
    Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Inside the host process: fastest, but a crash takes the host down.
    #[default]
    InProcess,
    /// In a supervised worker process of its own: a crash fails only its calls.
    Process,
    /// A worker process with deny-by-default kernel permissions (Landlock and seccomp on Linux).
    Sandbox,
}

impl Isolation {
    /// The configuration spelling (`in_process`, `process`, `sandbox`).
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::InProcess => "in_process",
            Isolation::Process => "process",
            Isolation::Sandbox => "sandbox",
        }
    }

    /// Whether the plugin runs in a worker process.
    pub fn is_isolated(self) -> bool {
        self != Isolation::InProcess
    }
}

/// Resource limits of a plugin's worker process (`limits.*` for every worker, overridden per plugin
/// by `plugins.<name>.limits.*`). Core dumps are always off in workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerLimits {
    /// Address space of the worker in MiB (`RLIMIT_AS`): past it, allocations fail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// CPU seconds over the worker's life (`RLIMIT_CPU`): past it, the worker is killed and
    /// restarted (a guard against runaway loops, not a per-call budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_secs: Option<u64>,
    /// Open file descriptors (`RLIMIT_NOFILE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
}

impl WorkerLimits {
    /// These limits, with each unset one taken from `defaults`.
    pub fn or(&self, defaults: &WorkerLimits) -> WorkerLimits {
        WorkerLimits {
            memory_mb: self.memory_mb.or(defaults.memory_mb),
            cpu_secs: self.cpu_secs.or(defaults.cpu_secs),
            open_files: self.open_files.or(defaults.open_files),
        }
    }
}

/// What a sandboxed plugin may reach (`plugins.<name>.permissions`); everything else is denied by
/// the kernel. The plugin's own file and its data directory are granted implicitly.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Permissions {
    /// Files and directories (with everything beneath) it may read.
    pub read: Vec<PathBuf>,
    /// Files and directories (with everything beneath) it may read, write, create and remove.
    pub write: Vec<PathBuf>,
    /// TCP endpoints it may connect to (`"host:port"`), or `"any"`.
    #[schemars(with = "ConnectSchema")]
    pub connect: Connect,
    /// Environment variables it sees (all others are removed).
    pub env: Vec<String>,
    /// Whether it may run programs (`execve`).
    pub exec: bool,
    /// Unix-domain sockets it may connect to, by path (a directory: the sockets beneath it).
    /// Without one it cannot create a Unix socket at all (socket pairs stay allowed). The kernel
    /// holds the paths from Landlock ABI 9 (Linux 7.1); an older kernel cannot, and then the
    /// grant opens every Unix socket the process can name — refused unless
    /// `allow_weaker_sandbox: true`.
    pub unix_sockets: Vec<PathBuf>,
}

/// The configuration's form of [`Connect`], for the reference: `"any"` or a list of `"host:port"`.
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only its schema is used
enum ConnectSchema {
    /// `"any"`.
    Any(String),
    /// `"host:port"` endpoints.
    Only(Vec<String>),
}

/// Outgoing TCP connections a sandboxed plugin may open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Connect {
    /// Only these endpoints (none by default).
    Only(Vec<Endpoint>),
    /// Any host and port.
    Any,
}

impl Default for Connect {
    fn default() -> Self {
        Connect::Only(Vec::new())
    }
}

/// A `host:port` a sandboxed plugin may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The host as written (a name or an address).
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    /// `host:port`, `[v6addr]:port` or `*:port`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected \"host:port\" or \"any\", got {s:?}");
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(Endpoint {
            host: host.to_owned(),
            port,
        })
    }
}

impl Serialize for Connect {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Connect::Any => s.serialize_str("any"),
            Connect::Only(list) => s.collect_seq(list.iter().map(ToString::to_string)),
        }
    }
}

impl<'de> Deserialize<'de> for Connect {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Word(String),
            List(Vec<String>),
        }
        let invalid = |m: String| serde::de::Error::custom(m);
        match Raw::deserialize(d)? {
            Raw::Word(w) if w == "any" => Ok(Connect::Any),
            Raw::Word(w) => Err(invalid(format!(
                "expected \"any\" or a list of \"host:port\", got {w:?}"
            ))),
            Raw::List(items) => items
                .iter()
                .map(|i| i.parse().map_err(invalid))
                .collect::<Result<_, _>>()
                .map(Connect::Only),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_reads_any_or_host_port_lists_and_refuses_the_rest() {
        let any: Connect = serde_json::from_str("\"any\"").expect("any");
        assert_eq!(any, Connect::Any);
        let list: Connect =
            serde_json::from_str(r#"["127.0.0.1:80", "[::1]:443", "example.com:8080"]"#)
                .expect("list");
        let Connect::Only(list) = list else {
            panic!("a list")
        };
        assert_eq!(list[1].host, "::1");
        assert_eq!(list[1].to_string(), "[::1]:443");
        assert_eq!(list[2].port, 8080);
        for bad in [
            r#""all""#,
            r#"["example.com"]"#,
            r#"["h:0"]"#,
            r#"["h:99999"]"#,
        ] {
            let err = serde_json::from_str::<Connect>(bad).expect_err(bad);
            assert!(err.to_string().contains("host:port"), "{bad}: {err}");
        }
    }
}
