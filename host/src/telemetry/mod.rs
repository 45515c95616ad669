//! Telemetry: what operators see of a running host. [`metrics`] (Prometheus text on `/metrics`),
//! [`audit`] (one structured record per tool call or console action), [`feed`] (the console's totals and live stream), [`trace`] (OpenTelemetry spans over OTLP, off
//! unless configured) and [`logging`] (the log subscriber: text or JSON lines on stderr, with the
//! span exporter when tracing is on).
//!
//! The call path reports to one place, `exec::observe` (a call's span, its timings, its outcome in
//! the metrics and the audit log); this stage knows nothing of tools or calls beyond names.

pub mod audit;
pub mod feed;
pub mod logging;
pub mod metrics;
pub mod trace;

use serde_json::Value;

pub use audit::AuditLog;
pub use metrics::Metrics;

/// How a tool call ended, as metrics and the audit log name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool returned a result.
    Ok,
    /// The tool returned an error result (`isError`).
    ToolError,
    /// The arguments failed the tool's schema; the plugin did not run.
    InvalidArguments,
    /// The tool needs a verified caller and the call had none; the plugin did not run.
    CallerRequired,
    /// The call ran past its timeout.
    Timeout,
    /// The client cancelled the call, or went away, before it finished.
    Cancelled,
    /// The plugin could not run the tool, or returned something that is not a result (or one
    /// over the result limits).
    PluginFailure,
    /// The caller was over its share (`limits.per_caller`); the plugin did not run.
    Throttled,
    /// A call policy rule refused it (`deny`, or an `approve` the client did not give); the
    /// plugin did not run.
    Denied,
}

impl Outcome {
    /// Every outcome, in the order of its discriminant.
    pub const ALL: [Outcome; 9] = [
        Outcome::Ok,
        Outcome::ToolError,
        Outcome::InvalidArguments,
        Outcome::CallerRequired,
        Outcome::Timeout,
        Outcome::Cancelled,
        Outcome::PluginFailure,
        Outcome::Throttled,
        Outcome::Denied,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::InvalidArguments => "invalid_arguments",
            Outcome::CallerRequired => "caller_required",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::PluginFailure => "plugin_failure",
            Outcome::Throttled => "throttled",
            Outcome::Denied => "denied",
        }
    }
}

/// The host's metrics and, when configured, its audit log.
#[derive(Debug, Default)]
pub struct Telemetry {
    pub(crate) metrics: Metrics,
    pub(crate) audit: Option<AuditLog>,
    pub(crate) feed: std::sync::Arc<feed::Feed>,
}

impl Telemetry {
    /// Metrics, and an audit log written to `audit` when given.
    pub fn new(audit: Option<AuditLog>) -> Self {
        Telemetry {
            metrics: Metrics::new(),
            audit,
            feed: std::sync::Arc::default(),
        }
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The call feed (the console's charts and live stream).
    pub fn feed(&self) -> &std::sync::Arc<feed::Feed> {
        &self.feed
    }

    /// Record an action taken outside the protocol (the console's): in the audit log when there
    /// is one, and on the live stream.
    pub fn audit_action(&self, action: &audit::Action<'_>) {
        if let Some(log) = &self.audit {
            log.write(action);
        }
        self.feed.publish(action);
    }

    /// Whether audit records are wanted (an audit log, or somebody watching the live stream).
    pub fn auditing(&self) -> bool {
        self.audit.is_some() || self.feed.watched()
    }

    /// Record a call policy decision on a read or a prompt: in the audit log when there is one,
    /// and on the live stream.
    pub fn audit_decision(&self, decision: &audit::Decision<'_>) {
        if let Some(log) = &self.audit {
            log.write(decision);
        }
        self.feed.publish(decision);
    }
}

/// The length of `value` as compact JSON text, without building the text.
pub(crate) fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
