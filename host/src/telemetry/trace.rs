//! Traces: OpenTelemetry spans exported over OTLP/HTTP (protobuf), off unless `traces.otlp_endpoint`
//! is configured.
//!
//! Spans are `tracing` spans of their own target ([`TARGET`]), turned into OpenTelemetry spans by
//! the `tracing-opentelemetry` layer that [`super::logging`] installs when tracing is on; the log
//! output never shows them, and with tracing off no layer wants them, so creating one costs a
//! cached "disabled" check. Each request gets a server span (`tools/call echo`, `tools/list`, ...)
//! whose parent is the client's W3C `traceparent` (the HTTP header, or `_meta.traceparent` of the
//! request); each tool call a child span (`execute_tool <name>`) with its phases (`validate`,
//! `queue`, `plugin`) and its outcome.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::Outcome;
use crate::config::TraceSettings;

/// The `tracing` target of every span exported as a trace (kept out of the log output).
pub const TARGET: &str = "mcp_host::trace";

/// Whether spans are exported (a layer for them was installed): when not, the span functions
/// below return `Span::none()` at once, without asking the subscriber about the callsite — a
/// check per span that cost about a tenth of a request's user-space time under load.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Spans are exported from now on ([`layer`] calls this).
fn set_exporting() {
    EXPORTING.store(true, Ordering::Release);
}

pub(crate) fn exporting() -> bool {
    EXPORTING.load(Ordering::Acquire)
}

/// Tracing could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot export traces to {endpoint}: {message}")]
pub struct TraceSetupError {
    /// The configured endpoint.
    pub endpoint: String,
    /// Why.
    pub message: String,
}

/// The endpoint with `/v1/traces` added when it has no path.
fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains('/'));
    if has_path {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/traces")
    }
}

/// A tracer provider exporting to the configured endpoint (spans are batched and sent from a
/// thread of the exporter's own), or `None` when tracing is off.
pub fn provider(settings: &TraceSettings) -> Result<Option<SdkTracerProvider>, TraceSetupError> {
    let Some(endpoint) = settings.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    let url = traces_url(endpoint);
    let fail = |message: String| TraceSetupError {
        endpoint: url.clone(),
        message,
    };
    // The exporter's reqwest client panics at build time without a process provider.
    crate::config::tls::use_ring_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let ratio = settings.sample_ratio.clamp(0.0, 1.0);
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .build(),
    ))
}

/// The `tracing` layer turning this module's spans into OpenTelemetry spans of `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    set_exporting();
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("mcp-host"))
        .with_level(false)
        .with_threads(false)
        .with_location(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.target() == TARGET
        }))
}

/// A W3C trace context: `traceparent` and `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `traceparent`.
    pub parent: String,
    /// `tracestate`, when there is one.
    pub state: Option<String>,
}

impl TraceContext {
    /// The trace context of a request: its `traceparent` and `tracestate` HTTP headers
    /// (`header`), else those of its params' `_meta`.
    pub fn of_request(
        header: Option<&(String, Option<String>)>,
        params: &Map<String, Value>,
    ) -> Option<TraceContext> {
        if let Some((parent, state)) = header {
            return Some(TraceContext {
                parent: parent.clone(),
                state: state.clone(),
            });
        }
        let meta = params.get("_meta")?;
        let field = |key: &str| meta.get(key).and_then(Value::as_str).map(str::to_owned);
        Some(TraceContext {
            parent: field("traceparent")?,
            state: field("tracestate"),
        })
    }
}

/// The span of one request: `method` (with the tool's name for `tools/call`), a child of the
/// client's trace when it sent a `traceparent` (the HTTP header's, else `_meta.traceparent`).
pub fn request_span(
    method: &str,
    id: &Value,
    params: &Map<String, Value>,
    trace: Option<&TraceContext>,
) -> tracing::Span {
    if !exporting() {
        return tracing::Span::none();
    }
    let tool = (method == "tools/call")
        .then(|| params.get("name").and_then(Value::as_str))
        .flatten();
    let span = tracing::info_span!(
        target: TARGET,
        "mcp.request",
        otel.name = %match tool {
            Some(tool) => format!("{method} {tool}"),
            None => method.to_owned(),
        },
        otel.kind = "server",
        mcp.method.name = method,
        jsonrpc.request.id = %id,
        gen_ai.tool.name = tool,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(trace) = trace {
        let mut carrier = HashMap::new();
        carrier.insert("traceparent".to_owned(), trace.parent.clone());
        if let Some(state) = &trace.state {
            carrier.insert("tracestate".to_owned(), state.clone());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        if cx.span().span_context().is_valid() {
            let _ = span.set_parent(cx);
        }
    }
    span
}

/// A phase of a call (`validate`, `queue`, `plugin`).
pub(crate) fn phase_span(call: &tracing::Span, name: &'static str) -> tracing::Span {
    if call.is_none() {
        return tracing::Span::none();
    }
    tracing::info_span!(target: TARGET, parent: call, "phase", otel.name = name)
}

/// Put a call's outcome on its span (an error status for anything but a result).
pub(crate) fn record_outcome(span: &tracing::Span, outcome: Outcome) {
    if span.is_disabled() {
        return;
    }
    span.record("mcp_host.outcome", outcome.as_str());
    if outcome != Outcome::Ok {
        span.record("error.type", outcome.as_str());
        span.record("otel.status_code", "ERROR");
    }
}

/// The W3C trace context (`traceparent`, `tracestate`) that continues `span`'s trace, when it is
/// exported: what a request the host makes on its behalf carries.
pub(crate) fn propagation(span: &tracing::Span) -> Option<TraceContext> {
    if !exporting() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    Some(TraceContext {
        parent: carrier.remove("traceparent")?,
        state: carrier.remove("tracestate").filter(|s| !s.is_empty()),
    })
}

/// The trace id of `span`, when it is exported.
pub(crate) fn trace_id(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let id = cx.span().span_context().trace_id();
    (id != opentelemetry::trace::TraceId::INVALID).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_endpoint_gets_the_traces_path() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/custom/traces"),
            "http://collector:4318/custom/traces"
        );
    }
}
