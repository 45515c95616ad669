//! What an upstream sends toward the client during a call — log messages
//! (`notifications/message`) — and which call it belongs to.
//!
//! Over Streamable HTTP an upstream sends them on the response stream of the request they are
//! about, and rmcp says which ([`InboundStreamOrigin`]). Over stdio nothing ties them to a
//! request: they belong to the one call in flight, and when several are, a log message goes to
//! the host's log only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mcp_plugin_sdk::LogLevel;
#[allow(deprecated)]
use rmcp::model::{Extensions, LoggingLevel, LoggingMessageNotificationParam, RequestId};
use rmcp::service::InboundStreamOrigin;
use serde_json::Value;

use crate::plugins::call::{CallEvent, CallState};
use crate::plugins::lock;

/// The calls in flight on one upstream, by the id of their request to it.
#[derive(Default)]
pub(super) struct Calls {
    by_request: Mutex<HashMap<String, Arc<CallState>>>,
    /// Numbers the calls whose request is not sent yet.
    pending: std::sync::atomic::AtomicU64,
}

/// The call an upstream's message belongs to.
enum Routed {
    /// This one.
    Call(Arc<CallState>),
    /// No call is in flight.
    None,
    /// Several are, and the message does not say which.
    Ambiguous,
}

/// A call's entry in [`Calls`], removed when its request ends.
pub(super) struct Entered<'a> {
    calls: &'a Calls,
    key: String,
}

impl Entered<'_> {
    /// The call's request went out as `id`.
    pub(super) fn bind(&mut self, id: &RequestId) {
        let key = key(id);
        let mut calls = lock(&self.calls.by_request);
        if let Some(call) = calls.remove(&self.key) {
            calls.insert(key.clone(), call);
        }
        self.key = key;
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        lock(&self.calls.by_request).remove(&self.key);
    }
}

fn key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

impl Calls {
    /// `call` is in flight (its request about to be sent) until the guard is dropped.
    pub(super) fn enter(&self, call: &Arc<CallState>) -> Entered<'_> {
        let n = self
            .pending
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = format!("pending-{n}");
        lock(&self.by_request).insert(key.clone(), Arc::clone(call));
        Entered { calls: self, key }
    }

    /// The call a message that arrived with `extensions` belongs to.
    fn route(&self, extensions: &Extensions) -> Routed {
        let calls = lock(&self.by_request);
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = extensions.get() {
            return calls
                .get(&key(id))
                .map_or(Routed::None, |c| Routed::Call(Arc::clone(c)));
        }
        let mut all = calls.values();
        match (all.next(), calls.len()) {
            (None, _) => Routed::None,
            (Some(call), 1) => Routed::Call(Arc::clone(call)),
            (Some(_), _) => Routed::Ambiguous,
        }
    }
}

/// An upstream's log message: to the client of the call it belongs to (as the call's own log
/// message, which the client's `logging/setLevel` or request level filters), and to the host's
/// log when it belongs to none.
#[allow(deprecated)]
pub(super) fn log(
    upstream: &str,
    calls: &Calls,
    params: &LoggingMessageNotificationParam,
    extensions: &Extensions,
) {
    let text = match &params.data {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Routed::Call(call) = calls.route(extensions)
        && let Some(sink) = &call.events
    {
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
    tracing::info!(upstream, logger = params.logger, "{text}");
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
