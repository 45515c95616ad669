//! Prometheus metrics (OpenMetrics text, from `prometheus-client`): tool calls by tool, plugin and
//! outcome, their latency and queue wait, calls in flight, plugin loads that failed, reloads,
//! retained plugin images, refused credentials by reason, and open sessions.
//!
//! Every series a call touches is looked up once per tool and kept with it ([`ToolSeries`]), so a
//! call pays for a few atomic adds and two histogram observations, not for label lookups.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Metric, Registry, Unit};

use super::Outcome;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets, in seconds: 100 µs to 60 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];
/// Queue-wait buckets, in seconds: 10 µs to 30 s.
const QUEUE_BUCKETS: &[f64] = &[
    0.00001, 0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: Arc<str>,
    plugin: Arc<str>,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: Arc<str>,
    plugin: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
    decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GuardLabels {
    detector: String,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    sdk: String,
    target: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// `host_build`'s one series: this mcp-host's version, plugin SDK and target.
fn build_info() -> Info<BuildLabels> {
    let host = mcp_plugin_sdk::wire::BuildInfo::host();
    Info::new(BuildLabels {
        version: env!("CARGO_PKG_VERSION"),
        sdk: host.sdk_version,
        target: host.target,
    })
}

/// A metric of any kind, for [`Metrics::registrations`]' table: encoded as the metric it holds.
#[derive(Debug)]
struct AnyMetric(Box<dyn Metric>);

impl EncodeMetric for AnyMetric {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The host's metrics, registered once.
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    latency: HistogramFamily<ToolLabels>,
    queue_wait: HistogramFamily<PluginLabels>,
    in_flight: Family<PluginLabels, Gauge>,
    load_errors: Family<ReasonLabels, Counter>,
    policy: Family<RuleLabels, Counter>,
    guardrails: Family<GuardLabels, Counter>,
    reloads: Counter,
    images: Gauge,
    auth_failures: Family<ReasonLabels, Counter>,
    sessions: Family<TransportLabels, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// One tool's series, looked up once and kept with the tool.
#[derive(Debug)]
pub struct ToolSeries {
    calls: [Counter; Outcome::ALL.len()],
    latency: Histogram,
    queue_wait: Histogram,
    in_flight: Gauge,
}

impl ToolSeries {
    /// A call started: one more in flight.
    pub(crate) fn started(&self) {
        self.in_flight.inc();
    }

    /// A call waited `wait` for its permits.
    pub(crate) fn queued(&self, wait: Duration) {
        self.queue_wait.observe(wait.as_secs_f64());
    }

    /// A call ended with `outcome` after `took`.
    pub(crate) fn finished(&self, outcome: Outcome, took: Duration) {
        self.in_flight.dec();
        self.calls[outcome as usize].inc();
        self.latency.observe(took.as_secs_f64());
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS.iter().copied())
}

fn queue_histogram() -> Histogram {
    Histogram::new(QUEUE_BUCKETS.iter().copied())
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric, registered (prefix `mcp`) in [`Metrics::registrations`]' order.
    pub fn new() -> Self {
        let mut m = Metrics {
            calls: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            queue_wait: Family::new_with_constructor(queue_histogram),
            in_flight: Family::default(),
            load_errors: Family::default(),
            policy: Family::default(),
            guardrails: Family::default(),
            reloads: Counter::default(),
            images: Gauge::default(),
            auth_failures: Family::default(),
            sessions: Family::default(),
            registry: Registry::with_prefix("mcp"),
        };
        for (name, help, unit, metric) in m.registrations() {
            match unit {
                Some(unit) => m.registry.register_with_unit(name, help, unit, metric),
                None => m.registry.register(name, help, metric),
            }
        }
        m
    }

    /// What the registry lists: each metric's name, help text and unit, and the metric (a handle
    /// on this one's series).
    fn registrations(&self) -> [(&'static str, &'static str, Option<Unit>, AnyMetric); 12] {
        [
            (
                "host_build",
                "The running mcp-host: its version, plugin SDK and target",
                None,
                AnyMetric(Box::new(build_info())),
            ),
            (
                "tool_calls",
                "Tool calls by tool, plugin and outcome (ok, tool_error, invalid_arguments, \
                 caller_required, timeout, cancelled, plugin_failure, throttled, denied)",
                None,
                AnyMetric(Box::new(self.calls.clone())),
            ),
            (
                "tool_call_duration",
                "Tool call latency, from the request to the result (queue wait included)",
                Some(Unit::Seconds),
                AnyMetric(Box::new(self.latency.clone())),
            ),
            (
                "tool_call_queue_wait",
                "Time tool calls waited for a free slot (global and per-plugin concurrency limits)",
                Some(Unit::Seconds),
                AnyMetric(Box::new(self.queue_wait.clone())),
            ),
            (
                "tool_calls_in_flight",
                "Tool calls running or queued now, by plugin",
                None,
                AnyMetric(Box::new(self.in_flight.clone())),
            ),
            (
                "plugin_load_errors",
                "Plugin files that failed to load, by reason (library, abi, build, init, \
                 manifest, probe, copy, worker, sandbox, signature)",
                None,
                AnyMetric(Box::new(self.load_errors.clone())),
            ),
            (
                "policy_rule_decisions",
                "Tool calls a call policy rule matched, by rule and decision (matched, denied, \
                 limited, approved, refused)",
                None,
                AnyMetric(Box::new(self.policy.clone())),
            ),
            (
                "guardrail_findings",
                "Guardrail findings in tool results, by detector and action (flag, redact, ...)",
                None,
                AnyMetric(Box::new(self.guardrails.clone())),
            ),
            (
                "plugin_reloads",
                "Plugin versions loaded by rescans (file changes, configuration changes, SIGHUP)",
                None,
                AnyMetric(Box::new(self.reloads.clone())),
            ),
            (
                "plugin_images_retained",
                "Plugin images mapped in the process (libraries are never unloaded)",
                None,
                AnyMetric(Box::new(self.images.clone())),
            ),
            (
                "auth_failures",
                "Refused requests by reason (missing, invalid, rejected, expired, \
                 wrong_audience, no_keys, wrong_agent, unknown_agent, metrics_token)",
                None,
                AnyMetric(Box::new(self.auth_failures.clone())),
            ),
            (
                "sessions",
                "Open legacy (2025) sessions, by transport",
                None,
                AnyMetric(Box::new(self.sessions.clone())),
            ),
        ]
    }

    /// The series of tool `tool` of plugin `plugin`.
    pub fn tool(&self, tool: &str, plugin: &str) -> ToolSeries {
        let (tool, plugin): (Arc<str>, Arc<str>) = (Arc::from(tool), Arc::from(plugin));
        ToolSeries {
            calls: Outcome::ALL.map(|outcome| {
                self.calls.get_or_create_owned(&CallLabels {
                    tool: Arc::clone(&tool),
                    plugin: Arc::clone(&plugin),
                    outcome: outcome.as_str(),
                })
            }),
            latency: self.latency.get_or_create_owned(&ToolLabels {
                tool,
                plugin: Arc::clone(&plugin),
            }),
            queue_wait: self.queue_wait.get_or_create_owned(&PluginLabels {
                plugin: Arc::clone(&plugin),
            }),
            in_flight: self.in_flight.get_or_create_owned(&PluginLabels { plugin }),
        }
    }

    /// A plugin file failed to load, for `reason` (the kind of its load error).
    pub fn load_error(&self, reason: &'static str) {
        self.load_errors
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// A call policy rule `rule` matched a call (`matched`) or decided it (`denied`, `limited`,
    /// `approved`, `refused`).
    pub fn policy_decision(&self, rule: &str, decision: &'static str) {
        self.policy
            .get_or_create(&RuleLabels {
                rule: rule.to_owned(),
                decision,
            })
            .inc();
    }

    /// A guardrail `detector` found something in a result and `action` was taken.
    pub fn guardrail_finding(&self, detector: &str, action: &'static str) {
        let detector = detector.to_owned();
        self.guardrails
            .get_or_create(&GuardLabels { detector, action })
            .inc();
    }

    /// A rescan loaded `n` plugin versions.
    pub fn reloaded(&self, n: usize) {
        self.reloads.inc_by(n as u64);
    }

    /// `n` plugin images are mapped.
    pub fn images(&self, n: usize) {
        self.images.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A request was refused for `reason`.
    pub fn auth_failure(&self, reason: &'static str) {
        self.auth_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// The number of open sessions of `transport` (`http`, `stdio`).
    pub fn sessions(&self, transport: &'static str) -> Gauge {
        self.sessions
            .get_or_create_owned(&TransportLabels { transport })
    }

    /// Everything, in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
