//! What an upstream sends toward the client during a call — log messages
//! (`notifications/message`), progress, and requests for input (`elicitation/create`,
//! `sampling/createMessage`) — and which call it belongs to.
//!
//! Progress names its request (its token). A request for input over Streamable HTTP comes on
//! the response stream of the request it is about, and rmcp says which
//! ([`InboundStreamOrigin`]); a log message does not say (rmcp marks requests only), nor does
//! anything over stdio: those belong to the one call in flight, and when several are, a log
//! message goes to the host's log only and a request for input is refused (a JSON-RPC error to
//! the upstream).
//!
//! A question goes to the client the way a plugin's does
//! ([`CallInput::ask`](crate::plugins::call::CallInput::ask)): a 2025 request on the call's
//! stream, answered while the upstream waits, or — in a 2026 round — recorded for the
//! `input_required` result; the upstream then gets an error, and the next round's call is made
//! again, its question answered at once from the round's answers (keyed by the question's
//! digest, so the same question finds its answer).

use std::sync::{Arc, Mutex};

use mcp_plugin_sdk::{InputError, LogLevel};
use rmcp::ErrorData as McpError;
#[allow(deprecated)]
use rmcp::model::{
    Extensions, LoggingLevel, LoggingMessageNotificationParam, ProgressToken, RequestId,
};
use rmcp::model::{JsonRpcMessage, ServerNotification};
use rmcp::service::{InboundStreamOrigin, RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::plugins::call::{CallEvent, CallState};
use crate::plugins::{lock, output};

/// One request in flight on an upstream: the call it serves, and once it is sent, its request id
/// and progress token.
struct InFlight {
    /// Numbers the entry (for its removal) from before the request has an id.
    seq: u64,
    id: Option<RequestId>,
    progress: Option<ProgressToken>,
    call: Arc<CallState>,
}

/// The requests in flight on one upstream — the one registry of where what it sends during a
/// call goes (log messages and requests for input by request id, progress by token). It is read
/// as the transport receives each message ([`Routing`]), in the upstream's order and before the
/// response that followed it — rmcp would hand each notification to a task of its own, in no set
/// order, and the response straight to the request, which could then answer its client first.
pub(super) struct Routes {
    /// The upstream's name, for the host's log.
    name: Arc<str>,
    inflight: Mutex<Vec<InFlight>>,
    next: std::sync::atomic::AtomicU64,
    /// Its log messages that go to the host's log, through the rate every stranger's output has.
    logged: Mutex<Logging>,
}

/// The log messages of an upstream that go to the host's log: their rate, and whether a task
/// logs what the rate holds back once it allows (or the upstream falls quiet).
struct Logging {
    burst: output::Burst,
    ticking: bool,
}

impl Routes {
    /// The routes of upstream `name`.
    pub(super) fn new(name: Arc<str>) -> Routes {
        Routes {
            name,
            inflight: Mutex::default(),
            next: std::sync::atomic::AtomicU64::new(0),
            logged: Mutex::new(Logging {
                burst: output::Burst::new(std::time::Instant::now()),
                ticking: false,
            }),
        }
    }

    /// `call` is in flight (its request about to be sent) until the guard is dropped.
    pub(super) fn enter(&self, call: &Arc<CallState>) -> Entered<'_> {
        let seq = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.inflight).push(InFlight {
            seq,
            id: None,
            progress: None,
            call: Arc::clone(call),
        });
        Entered { routes: self, seq }
    }

    /// A notification as it arrives: a log message or progress goes to its call.
    #[allow(deprecated)]
    fn arrived(self: &Arc<Self>, notification: &ServerNotification) {
        match notification {
            ServerNotification::LoggingMessageNotification(n) => {
                log(self, &n.params, &n.extensions);
            }
            ServerNotification::ProgressNotification(n) => {
                let params = &n.params;
                let sink = lock(&self.inflight)
                    .iter()
                    .find(|r| r.progress.as_ref() == Some(&params.progress_token))
                    .and_then(|r| r.call.events.clone());
                if let Some(sink) = sink {
                    sink(CallEvent::Progress {
                        progress: params.progress,
                        total: params.total,
                        message: params.message.clone(),
                    });
                }
            }
            _ => {}
        }
    }

    /// The call a message that arrived with `extensions` belongs to.
    fn route(&self, extensions: &Extensions) -> Routed {
        let inflight = lock(&self.inflight);
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = extensions.get() {
            return inflight
                .iter()
                .find(|r| r.id.as_ref() == Some(id))
                .map_or(Routed::None, |r| Routed::Call(Arc::clone(&r.call)));
        }
        match inflight.as_slice() {
            [] => Routed::None,
            [one] => Routed::Call(Arc::clone(&one.call)),
            many => Routed::Ambiguous(many.len()),
        }
    }
}

/// An upstream's transport that routes the log messages and progress it receives as it receives
/// them (see [`Routes`]).
pub(super) struct Routing<T> {
    /// The transport.
    pub(super) inner: T,
    /// Where they go.
    pub(super) routes: Arc<Routes>,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Routing<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Notification(n)) = &message {
            self.routes.arrived(&n.notification);
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The call an upstream's message belongs to.
enum Routed {
    /// This one.
    Call(Arc<CallState>),
    /// No call is in flight.
    None,
    /// Several are, and the message does not say which (`n`).
    Ambiguous(usize),
}

/// A request's entry in [`Routes`], removed when the request ends.
pub(super) struct Entered<'a> {
    routes: &'a Routes,
    seq: u64,
}

impl Entered<'_> {
    /// The request went out as `id`, with progress token `progress`.
    pub(super) fn bind(&mut self, id: &RequestId, progress: &ProgressToken) {
        let mut inflight = lock(&self.routes.inflight);
        if let Some(entry) = inflight.iter_mut().find(|r| r.seq == self.seq) {
            entry.id = Some(id.clone());
            entry.progress = Some(progress.clone());
        }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        let mut inflight = lock(&self.routes.inflight);
        if let Some(at) = inflight.iter().position(|r| r.seq == self.seq) {
            inflight.swap_remove(at);
        }
    }
}

/// An upstream's log message: to the client of the call it belongs to (as the call's own log
/// message, which the client's `logging/setLevel` or request level filters), and to the host's
/// log when it belongs to none — as one escaped line of bounded length, at the rate every
/// stranger's output has ([`output::Burst`]).
#[allow(deprecated)]
fn log(routes: &Arc<Routes>, params: &LoggingMessageNotificationParam, extensions: &Extensions) {
    if let Routed::Call(call) = routes.route(extensions)
        && let Some(sink) = &call.events
    {
        let text = match &params.data {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        sink(CallEvent::Log {
            level: level(params.level),
            message: text,
            logger: params
                .logger
                .clone()
                .unwrap_or_else(|| call.tool.to_string()),
        });
        return;
    }
    let logger = params
        .logger
        .as_deref()
        .map(|l| format!(" {}", output::one_line(l, MAX_LOGGER).0))
        .unwrap_or_default();
    let line = format!(
        "[{}{logger}] {}",
        level(params.level).as_str(),
        log_text(&params.data)
    );
    let mut logging = lock(&routes.logged);
    let name = &*routes.name;
    logging
        .burst
        .push(std::time::Instant::now(), line, &mut |l| host_log(name, l));
    if !logging.ticking
        && logging.burst.next_tick().is_some()
        && let Ok(runtime) = tokio::runtime::Handle::try_current()
    {
        logging.ticking = true;
        runtime.spawn(tick(Arc::clone(routes)));
    }
}

/// The longest logger name of an upstream's log message the host logs.
const MAX_LOGGER: usize = 128;

/// An upstream's log message's `data` as one line of at most [`output::MAX_LINE`] bytes (a
/// string as it is, anything else as JSON), however large it is.
fn log_text(data: &Value) -> String {
    if let Value::String(s) = data {
        return output::log_line(s, 0);
    }
    /// Takes the first `MAX_LINE` bytes written and refuses the rest.
    struct Capped(Vec<u8>);
    impl std::io::Write for Capped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = output::MAX_LINE + 1 - self.0.len();
            if room == 0 {
                return Err(std::io::Error::other("long enough"));
            }
            let n = buf.len().min(room);
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut capped = Capped(Vec::new());
    let cut = serde_json::to_writer(&mut capped, data).is_err();
    let text = String::from_utf8_lossy(&capped.0);
    let mut line = output::one_line(&text, output::MAX_LINE).0;
    if cut {
        line.push_str("… (cut)");
    }
    line
}

/// Log what the rate lets out of an upstream's log messages.
fn host_log(upstream: &str, logged: output::Logged<'_>) {
    match logged {
        output::Logged::Line(line) => tracing::info!(upstream, "{line}"),
        notice => tracing::warn!(upstream, "log messages: {notice}"),
    }
}

/// Log the messages `routes`' rate held back, as it allows them out and when the upstream falls
/// quiet; ends once none is held.
async fn tick(routes: Arc<Routes>) {
    loop {
        let until = {
            let mut logging = lock(&routes.logged);
            match logging.burst.next_tick() {
                Some(until) => until,
                None => {
                    logging.ticking = false;
                    return;
                }
            }
        };
        tokio::time::sleep_until(until.into()).await;
        let name = &*routes.name;
        lock(&routes.logged)
            .burst
            .tick(std::time::Instant::now(), &mut |l| host_log(name, l));
    }
}

// Logging is deprecated in 2026-07-28, but the servers of 2025 still send it.
#[allow(deprecated)]
fn level(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}

/// Ask the client of the call an upstream's request `method` (with `params`) belongs to, and
/// turn its answer into the result the upstream expects (an error when the client was not
/// asked, or did not answer).
pub(super) async fn ask<T: DeserializeOwned + Send + 'static>(
    routes: &Routes,
    method: &str,
    params: Value,
    extensions: &Extensions,
) -> Result<T, McpError> {
    let call = match routes.route(extensions) {
        Routed::Call(call) => call,
        Routed::None => {
            return Err(McpError::invalid_request(
                format!("mcp-host: {method} is answered only during a tool call"),
                None,
            ));
        }
        Routed::Ambiguous(n) => {
            return Err(McpError::invalid_request(
                format!(
                    "mcp-host: {n} calls to upstream {} are in flight and this \
                     {method} does not say which one it belongs to (over stdio nothing can): \
                     it cannot be passed to a client",
                    routes.name
                ),
                None,
            ));
        }
    };
    // The question's key: the same question in a later round finds this round's answer.
    let digest = crate::config::lock::digest(&json!([method, params]));
    let key = format!("upstream-{}", &digest[..16.min(digest.len())]);
    let mut requests = serde_json::Map::new();
    requests.insert(key.clone(), json!({"method": method, "params": params}));
    let mut answers = put(&call, requests)
        .await
        .map_err(|e| refused(method, &e))?;
    let answer = answers.remove(&key).unwrap_or_default();
    serde_json::from_value(answer).map_err(|e| {
        McpError::internal_error(
            format!("mcp-host: the client's answer to {method} is not its result: {e}"),
            None,
        )
    })
}

/// Put `requests` (key -> `{method, params}`) to the client of `call` the way a plugin's
/// questions go, on a blocking thread (a 2025 question waits there for the client's answer):
/// the answers by key.
pub(super) async fn put(
    call: &Arc<CallState>,
    requests: serde_json::Map<String, Value>,
) -> Result<serde_json::Map<String, Value>, InputError> {
    let Some(input) = call.input.clone() else {
        return Err(InputError::Failed(
            "the caller of this call cannot be asked".into(),
        ));
    };
    let questions = json!({ "requests": requests }).to_string();
    let asking = Arc::clone(call);
    let answered = tokio::task::spawn_blocking(move || input.ask(&questions, &asking))
        .await
        .map_err(|e| InputError::Failed(e.to_string()))??;
    match answered {
        Value::Object(mut answered) => match answered.remove("responses") {
            Some(Value::Object(responses)) => Ok(responses),
            _ => Err(InputError::Failed("no answers".into())),
        },
        _ => Err(InputError::Failed("no answers".into())),
    }
}

/// The upstream's error for a question the client did not answer.
fn refused(method: &str, error: &InputError) -> McpError {
    match error {
        InputError::Asked => McpError::internal_error(
            format!(
                "mcp-host: {method} was passed to the client in an input_required round; the \
                 call will be made again with the answer"
            ),
            None,
        ),
        InputError::Unsupported { .. } => McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("mcp-host: the calling client does not support {method}"),
            None,
        ),
        InputError::Failed(why) => McpError::internal_error(format!("mcp-host: {why}"), None),
        other => McpError::internal_error(format!("mcp-host: {other}"), None),
    }
}
