//! Execution: where and how tool calls run — [`call`] (the call path: validation, permits,
//! timeout, result mapping, nested calls), [`pool`] (worker threads off the async reactor),
//! [`observe`](observe) (a call's span, metrics and audit record), [`quota`] (fair
//! sharing between callers), `police` (the call policy on the call path), [`guard`] (the guardrails on results), [`input`] (questions a call asks the client), [`result`] (what a tool
//! call answered, kept as the plugin's text), [`detached`] (a future
//! that finishes on its own task when its owner stops waiting). A running call's state, events
//! and cancellation are the backend seam's ([`crate::plugins::call`]), re-exported here.

pub mod approval;
pub mod call;
pub(crate) mod detached;
pub mod guard;
pub mod input;
pub(crate) mod observe;
mod police;
pub(crate) mod pool;
pub mod quota;
pub mod result;

pub use crate::plugins::call::{
    CallEvent, CallState, EventSink, EventWants, RequestContext, cores, error_result,
};
pub use crate::plugins::cancel::CancelFlag;
pub use call::{CallError, CallOptions, Executor, Explained, InvokeError};
pub use input::{ClientLink, InputChannel, Round};
pub use result::ToolResult;
