//! The audit log: one JSON line per tool call (and per console [`Action`], and per call policy
//! [`Decision`] on a resource read or a prompt) — when, who (the verified caller and agent), what
//! (tool, plugin file and version), how it ended, how long it took and how big the arguments and
//! the result were. Never an argument's or a result's value, never a token.
//!
//! Records go to stderr or are appended to a file (opened once, owner-only on Unix; each record is
//! one `write` on an append-mode file, so records from concurrent calls never interleave and
//! `logrotate`'s `copytruncate` works).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

/// One audit record.
#[derive(Debug, Serialize)]
pub struct Record<'a> {
    /// When the call ended (RFC 3339, UTC, microseconds).
    pub time: String,
    /// The verified caller's user id, if the call had one.
    pub caller: Option<&'a str>,
    /// The agent whose view applied, if any.
    pub agent: Option<&'a str>,
    /// The tool, as clients name it.
    pub tool: &'a str,
    /// The source's own name for it, when overrides serve it under another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_tool: Option<&'a str>,
    /// The plugin serving it.
    pub plugin: &'a str,
    /// The plugin's version (its manifest's).
    pub plugin_version: &'a str,
    /// The plugin file it was loaded from.
    pub plugin_file: &'a Path,
    /// How the call ended (`ok`, `tool_error`, `invalid_arguments`, `caller_required`, `timeout`,
    /// `cancelled`, `plugin_failure`, `throttled`, `denied`).
    pub outcome: &'static str,
    /// From the request to the result, in milliseconds.
    pub duration_ms: f64,
    /// Of which waiting for a free slot, when the call got that far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<f64>,
    /// The arguments' size as JSON, in bytes.
    pub argument_bytes: usize,
    /// The result's size as JSON, in bytes (none when the call got no result).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_bytes: Option<usize>,
    /// 0 for a client's call; a tool calling a tool is one deeper than its caller.
    pub depth: u32,
    /// The call policy rule that decided the call, when one matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_rule: Option<&'a str>,
    /// What it decided (`allowed`, `denied`, `limited`, `approved`, `refused`); `approved` and
    /// `refused` were answered by the caller's client.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<&'static str>,
    /// The call's trace, when tracing is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// What the guardrails found in the result, per detector, and what they did (never what
    /// was found).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guardrails: Option<&'a [GuardFinding]>,
}

/// One detector's findings in a result, as the audit log records them.
#[derive(Debug, Clone, Serialize)]
pub struct GuardFinding {
    /// The detector (`aws_access_key`, `email`, …, or a result filter: `plugin:<plugin>/<filter>`).
    pub detector: std::borrow::Cow<'static, str>,
    /// How many times it matched.
    pub count: u32,
    /// What was done: `flag`, `redact`, `block`, or `found` (for the call policy only).
    pub action: &'static str,
}

/// A call policy rule's decision on a resource read or a prompt (a tool call's is in the call's
/// [`Record`]): what was asked for, by whom, which rule decided and what. Never an argument's
/// value (a prompt's arguments, a template's variables).
#[derive(Debug, Serialize)]
pub struct Decision<'a> {
    /// When it was decided (RFC 3339, UTC, microseconds).
    pub time: String,
    /// The verified caller's user id, if the request had one.
    pub caller: Option<&'a str>,
    /// The agent whose view applied, if any.
    pub agent: Option<&'a str>,
    /// The request: `resources/read` or `prompts/get`.
    pub request: &'static str,
    /// The URI read (a `resources/read`), in normal form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<&'a str>,
    /// The URI as the client sent it, when that is not its normal form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_raw: Option<&'a str>,
    /// The prompt's name (a `prompts/get`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<&'a str>,
    /// The plugin (or upstream server) serving it.
    pub plugin: &'a str,
    /// The rule that decided.
    pub policy_rule: &'a str,
    /// What it decided (`allowed`, `denied`, `limited`, `approved`, `refused`); `approved` and
    /// `refused` were answered by the caller's client.
    pub policy: &'static str,
}

/// One action an operator took in the console (accepting a pinned definition, retrying a
/// quarantined plugin, cancelling a task, logging in).
#[derive(Debug, Serialize)]
pub struct Action<'a> {
    /// When (RFC 3339, UTC, microseconds).
    pub time: String,
    /// The verified user who took it (none: the anonymous loopback operator).
    pub caller: Option<&'a str>,
    /// What (`console.login`, `console.accept_pin`, `console.retry_quarantined`,
    /// `console.cancel_task`).
    pub action: &'static str,
    /// What it acted on (a definition, a plugin file, a task id).
    pub target: &'a str,
    /// How it ended (`ok`, `refused`, `failed`).
    pub outcome: &'static str,
    /// Why, when it did not succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<&'a str>,
}

impl Action<'_> {
    /// The time for a record made now.
    pub fn now() -> String {
        format!("{:.6}", jiff::Timestamp::now())
    }
}

/// Where audit records go.
#[derive(Debug)]
pub enum AuditLog {
    /// The process's stderr (beside the log).
    Stderr,
    /// A file, appended to.
    File {
        /// Its path.
        path: PathBuf,
        /// The open file.
        file: Mutex<std::fs::File>,
    },
}

impl AuditLog {
    /// The log the `audit_log` setting names: `stderr`, or a file path (opened for appending,
    /// created owner-only when new).
    pub fn open(setting: &Path) -> std::io::Result<AuditLog> {
        if setting == Path::new("stderr") {
            return Ok(AuditLog::Stderr);
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(setting)?;
        Ok(AuditLog::File {
            path: setting.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Write one record as a line. A failed write is logged, never fatal to the call.
    pub fn write(&self, record: &impl Serialize) {
        let mut line = match serde_json::to_vec(record) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!("audit record not written: {e}");
                return;
            }
        };
        line.push(b'\n');
        let written = match self {
            AuditLog::Stderr => std::io::stderr().lock().write_all(&line),
            AuditLog::File { file, .. } => file
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .write_all(&line),
        };
        if let Err(e) = written {
            let to = match self {
                AuditLog::Stderr => "stderr".to_owned(),
                AuditLog::File { path, .. } => path.display().to_string(),
            };
            tracing::error!("audit record not written to {to}: {e}");
        }
    }
}
