//! Execution: where and how tool calls run — [`call`] (the call path: validation, permits,
//! timeout, result mapping, nested calls), [`state`] (one running call), [`pool`] (worker threads
//! off the async reactor), [`cancel`] (cancellation shared with the caller), [`quota`] (fair
//! sharing between callers), [`input`] (questions a call asks the client), [`result`] (what a tool
//! call answered, kept as the plugin's text), [`detached`] (a future
//! that finishes on its own task when its owner stops waiting), and the events a running call
//! reports.

pub mod call;
pub mod cancel;
pub(crate) mod detached;
pub mod input;
pub(crate) mod pool;
pub mod quota;
pub mod result;
pub mod state;

use std::sync::Arc;

use mcp_plugin_sdk::LogLevel;

pub use call::{CallError, CallOptions, Executor, InvokeError, error_result};
pub use cancel::CancelFlag;
pub use input::{ClientLink, InputChannel, Round};
pub use pool::cores;
pub use result::ToolResult;
pub use state::CallState;

/// Something a running call reports to whoever asked for it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    /// Progress, for `notifications/progress`.
    Progress {
        /// Work done.
        progress: f64,
        /// Total work, when known.
        total: Option<f64>,
        /// What is happening.
        message: Option<String>,
    },
    /// A log message for the client, for `notifications/message`.
    Log {
        /// Severity.
        level: LogLevel,
        /// The text.
        message: String,
        /// The tool that logged it.
        logger: String,
    },
}

/// Receives a call's events (the protocol layer turns them into notifications).
pub type EventSink = Arc<dyn Fn(CallEvent) + Send + Sync>;
