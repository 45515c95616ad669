//! The log subscriber: `tracing` events to stderr (stdout belongs to the stdio protocol), as text
//! lines or JSON objects (`log_format`), one line per event whatever a message holds, filtered by
//! `RUST_LOG` or the command's default level (rmcp's own chatter kept to warnings unless
//! `RUST_LOG` names it); and, when `traces.otlp_endpoint` is set, the layer exporting the host's
//! spans over OTLP.

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

/// Targets whose events are kept to warnings unless `RUST_LOG` names them: rmcp logs every
/// notification an upstream sends at INFO with its whole payload (`received notification`), and
/// each session's start and end; the host logs what matters of those itself, bounded.
const QUIET_TARGETS: &[&str] = &["rmcp"];

/// The filter's directives: `RUST_LOG` when it is set and valid, else `default_filter`, after a
/// `warn` directive for each of [`QUIET_TARGETS`] they do not name themselves (so `RUST_LOG=rmcp=
/// info` still shows rmcp's INFO lines).
fn directives(rust_log: Option<&str>, default_filter: &str) -> String {
    let chosen = rust_log
        .filter(|v| EnvFilter::builder().parse(v).is_ok())
        .unwrap_or(default_filter);
    let names = |target: &str| {
        chosen.split(',').any(|d| {
            let d = d.trim();
            d.strip_prefix(target)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['=', ':', '[']))
        })
    };
    let mut out: Vec<String> = QUIET_TARGETS
        .iter()
        .filter(|t| !names(t))
        .map(|t| format!("{t}=warn"))
        .collect();
    out.push(chosen.to_owned());
    out.join(",")
}

/// A writer (stderr), each write (one event: the fmt layer writes an event whole) kept to one line: a line
/// break inside it is written as `\n` (or `\r`), so no message — whoever's text it carries — can
/// start a log line of its own.
struct OneLine<W>(W);

impl<W: std::io::Write> std::io::Write for OneLine<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let body = buf.strip_suffix(b"\n").unwrap_or(buf);
        if memchr::memchr2(b'\n', b'\r', body).is_none() {
            self.0.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut line = Vec::with_capacity(buf.len() + 16);
        for &b in body {
            match b {
                b'\n' => line.extend_from_slice(b"\\n"),
                b'\r' => line.extend_from_slice(b"\\r"),
                _ => line.push(b),
            }
        }
        line.extend_from_slice(&buf[body.len()..]);
        self.0.write_all(&line)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Install the log (once per process; later calls keep the first). `default_filter` applies when
/// `RUST_LOG` is unset or invalid.
pub fn init(
    default_filter: &str,
    format: LogFormat,
    traces: &TraceSettings,
) -> Result<LoggingGuard, TraceSetupError> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = EnvFilter::builder()
        .parse(directives(rust_log.as_deref(), default_filter))
        .unwrap_or_else(|_| EnvFilter::new(default_filter))
        // Spans exported as traces never show in the log, whatever RUST_LOG says.
        .add_directive(
            format!("{}=off", trace::TARGET)
                .parse()
                .expect("a target directive parses"),
        );
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(|| OneLine(std::io::stderr()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmcp_is_kept_to_warnings_unless_rust_log_names_it() {
        assert_eq!(directives(None, "info"), "rmcp=warn,info");
        assert_eq!(directives(Some("debug"), "info"), "rmcp=warn,debug");
        assert_eq!(directives(Some("not a [filter"), "warn"), "rmcp=warn,warn");
        assert_eq!(directives(Some("info,rmcp=info"), "warn"), "info,rmcp=info");
        assert_eq!(
            directives(Some("rmcp::service=debug"), "warn"),
            "rmcp::service=debug"
        );
        assert_eq!(
            directives(Some("rmcpx=debug"), "warn"),
            "rmcp=warn,rmcpx=debug"
        );
    }

    #[test]
    fn an_event_with_line_breaks_is_written_as_one_line() {
        let mut out = OneLine(Vec::new());
        let event = b"2026-12-07T00:00:00Z INFO a\n1999-12-31T23:59:59Z ERROR forged\r\n";
        assert_eq!(std::io::Write::write(&mut out, event).unwrap(), event.len());
        assert_eq!(
            out.0,
            b"2026-12-07T00:00:00Z INFO a\\n1999-12-31T23:59:59Z ERROR forged\\r\n"
        );
        let plain = b"2026-12-07T00:00:00Z INFO plain\n";
        std::io::Write::write_all(&mut out, plain).unwrap();
        assert!(out.0.ends_with(plain));
    }
}
