//! The log subscriber: `tracing` events to stderr (stdout belongs to the stdio protocol), as text
//! lines or JSON objects (`log_format`), filtered by `RUST_LOG` or the command's default level;
//! and, when `traces.otlp_endpoint` is set, the layer exporting the host's spans over OTLP.

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use super::trace::{self, TraceSetupError};
use crate::config::{LogFormat, TraceSettings};

/// Keeps the span exporter running; dropping it sends the spans still buffered (within a few
/// seconds) and stops it.
#[must_use = "dropping the guard stops exporting spans"]
#[derive(Debug, Default)]
pub struct LoggingGuard(Option<SdkTracerProvider>);

impl LoggingGuard {
    /// Whether spans are exported.
    pub fn tracing(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for LoggingGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(e) = provider.shutdown_with_timeout(std::time::Duration::from_secs(5))
        {
            eprintln!("mcp-host: not every span was exported: {e}");
        }
    }
}

/// Install the log (once per process; later calls keep the first). `default_filter` applies when
/// `RUST_LOG` is unset or invalid.
pub fn init(
    default_filter: &str,
    format: LogFormat,
    traces: &TraceSettings,
) -> Result<LoggingGuard, TraceSetupError> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_filter))
        // Spans exported as traces never show in the log, whatever RUST_LOG says.
        .add_directive(
            format!("{}=off", trace::TARGET)
                .parse()
                .expect("a target directive parses"),
        );
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false);
    let fmt = match format {
        LogFormat::Text => fmt.with_ansi(ansi).with_filter(filter).boxed(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
    };
    let provider = trace::provider(traces)?;
    let otel = provider.as_ref().map(trace::layer);
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    Ok(LoggingGuard(provider))
}
