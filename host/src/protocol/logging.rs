//! Logging and progress toward the client: `logging/setLevel` (legacy sessions) and the mapping of a
//! running call's events to `notifications/progress` and `notifications/message`.

use std::sync::{Arc, Mutex};

use mcp_plugin_sdk::LogLevel;
use serde_json::{Value, json};

use super::era::parse_level;
use super::jsonrpc::{self, RpcError};
use super::session::LegacySession;
use super::{Answer, Notifier, Request};
use crate::exec::{CallEvent, EventSink};

/// `logging/setLevel`: the minimum level of this session's `notifications/message`.
pub(crate) fn set_level(req: &Request<'_>, session: &LegacySession) -> Result<Answer, RpcError> {
    match parse_level(req.params.get("level")) {
        Some(level) => {
            session.set_log_level(level);
            Ok(Answer::plain(json!({})))
        }
        None => Err(RpcError::invalid_params(
            "level must be one of debug, info, notice, warning, error, critical, alert, emergency",
        )),
    }
}

/// Turn call events into notifications: progress only with a token and strictly increasing, logs
/// only at or above the requested level. `None` when the client wants neither.
pub(crate) fn event_sink(
    notifier: Notifier,
    token: Option<Value>,
    level: Option<LogLevel>,
) -> Option<EventSink> {
    if token.is_none() && level.is_none() {
        return None;
    }
    let last = Mutex::new(f64::NEG_INFINITY);
    Some(Arc::new(move |event| match event {
        CallEvent::Progress {
            progress,
            total,
            message,
        } => {
            let Some(token) = &token else { return };
            {
                let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
                // Strictly increasing (NaN never passes).
                if progress.partial_cmp(&*last) != Some(std::cmp::Ordering::Greater) {
                    return;
                }
                *last = progress;
            }
            let mut params = json!({ "progressToken": token, "progress": progress });
            if let Some(total) = total {
                params["total"] = json!(total);
            }
            if let Some(message) = message {
                params["message"] = json!(message);
            }
            notifier(jsonrpc::notification("notifications/progress", params));
        }
        CallEvent::Log {
            level: l,
            message,
            logger,
        } => {
            if level.is_some_and(|min| l >= min) {
                notifier(jsonrpc::notification(
                    "notifications/message",
                    json!({ "level": l.as_str(), "logger": logger, "data": message }),
                ));
            }
        }
    }))
}
