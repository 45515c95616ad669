//! A running call as a plugin backend sees it — the call side of the backend seam: the request it
//! serves ([`RequestContext`]: who asks, whom the quotas count it against, its cancellation), what
//! the plugin can ask about it (deadline, the client's capabilities, questions to the client),
//! where its events go, and what a nested call inherits from it (the request, depth, deadline).
//!
//! A [`RequestContext`] is built once, by the transport that received the request, and shared
//! (`Arc`) by every stage on the way to the plugin: the protocol's `Exchange`, the executor's
//! `CallOptions` and the [`CallState`] of each call made for it (nested calls included) hold the
//! same one. The execution stage fills in a [`CallState`]; backends only read it.

pub use crate::telemetry::trace::TraceContext;
use std::sync::Arc;
use std::time::Instant;

use mcp_plugin_sdk::{InputError, LogLevel, UserInfo};
use serde_json::{Value, json};

use super::cancel::CancelFlag;
use super::host_request::{HostRequest, HostRequestError};
use crate::access::Identity;
use crate::access::agents::Agent;

/// One client request as every stage sees it, from the transport that received it to the plugin
/// that serves it (the shape of rmcp's `RequestContext`): who asks, whom the per-caller limits
/// count it against, and its cancellation. Built once per request by the transport (a task, the
/// CLI and tests build their own) and shared by reference-counting, never copied field by field;
/// what belongs to one call (deadline, events, depth) lives in that call's [`CallState`].
#[derive(Debug, Clone, Default)]
pub struct RequestContext {
    /// Who asks: the verified caller, and the agent whose view applies (tools it cannot see do
    /// not exist for the request, nor for its nested calls).
    pub identity: Identity,
    /// Whom `limits.per_caller` counts the request's tool calls against, nested ones included
    /// (`None`: not counted, e.g. the CLI).
    pub quota_key: Option<Arc<str>>,
    /// Set on client cancellation (`notifications/cancelled`, a closed stream, `tasks/cancel`)
    /// and when a call made for the request times out.
    pub cancel: CancelFlag,
    /// The caller's W3C trace context (the HTTP headers', else the request's `_meta`), passed on
    /// to an upstream server's requests when the host exports no spans of its own.
    pub trace: Option<TraceContext>,
    /// The call policy's approval questions the client answered yes to during this request.
    pub approved: Approved,
}

/// The approval questions (their text: subject, rule and shown fields) answered yes during one
/// request: the same question is not put to the human twice in one request — a read of a URI
/// nothing lists, offered to several upstreams, is policed for each.
#[derive(Debug, Clone, Default)]
pub struct Approved(Arc<std::sync::Mutex<std::collections::HashSet<String>>>);

impl Approved {
    /// Whether `question` was answered yes.
    pub fn contains(&self, question: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(question)
    }

    /// `question` was answered yes.
    pub fn insert(&self, question: String) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(question);
    }
}

impl RequestContext {
    /// A request by `caller` (if any), counted against nobody, with a fresh cancellation flag.
    pub fn for_caller(caller: Option<UserInfo>) -> Self {
        RequestContext {
            identity: Identity {
                caller,
                ..Identity::default()
            },
            ..RequestContext::default()
        }
    }

    /// The verified caller.
    pub fn caller(&self) -> Option<&UserInfo> {
        self.identity.caller.as_ref()
    }

    /// The agent whose view applies.
    pub fn agent(&self) -> Option<&Agent> {
        self.identity.agent.as_deref()
    }
}

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

/// What the client of a call asked to receive of its events: progress (it sent a
/// `progressToken`), and log messages from which level (its `logging/setLevel`, or its request's
/// `_meta` log level). An upstream MCP server is asked for just that. [`EventWants::ALL`] by
/// default: an events sink that filters for itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventWants {
    /// Progress notifications.
    pub progress: bool,
    /// Log messages at this level and above (`None`: none).
    pub log_level: Option<LogLevel>,
}

impl EventWants {
    /// Every event: progress, and log messages from `debug`.
    pub const ALL: EventWants = EventWants {
        progress: true,
        log_level: Some(LogLevel::Debug),
    };
    /// No event.
    pub const NONE: EventWants = EventWants {
        progress: false,
        log_level: None,
    };
}

impl Default for EventWants {
    fn default() -> Self {
        EventWants::ALL
    }
}

/// How a call reaches its client: its capabilities, the start of a task, and questions (the
/// execution stage's input rounds and elicitations implement it).
pub trait CallInput: Send + Sync {
    /// The client's capabilities.
    fn capabilities(&self) -> &Value;
    /// The call has become a task (a 2026 round answers with the task from now on).
    fn start_task(&self);
    /// Ask the client the questions in `params` (JSON) on behalf of `call`; the answers.
    fn ask(&self, params: &str, call: &CallState) -> Result<Value, InputError>;

    /// The answers the client brought with this request (a 2026-07-28 retry's, its earlier
    /// rounds' included) to questions whose key starts with `prefix`, by key.
    fn answered(&self, _prefix: &str) -> Vec<(String, Value)> {
        Vec::new()
    }

    /// Tell the client that the URL elicitation `elicitation_id` it was sent completed
    /// (`notifications/elicitation/complete`; 2025 sessions).
    fn completed(&self, _elicitation_id: &str) {}

    /// The call cannot go on until the client completes `elicitation` (a URL elicitation, the
    /// params of its `elicitation/create`): once it returns failed, the request fails with
    /// -32042 (`URLElicitationRequiredError`) carrying it, for the client to retry later (2025
    /// sessions).
    fn url_required(&self, _elicitation: Value) {}
}

/// A tool result with `isError: true` and this text.
pub fn error_result(message: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": message }], "isError": true })
}

/// How many CPUs this process may run on, read once (the standard library reads the cgroup files
/// again at every call: a dozen system calls each time).
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES
        .get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

/// One running call, shared with the plugin for as long as it runs.
pub struct CallState {
    /// The request it serves (a nested call: its outer call's): caller, agent, quota key, and the
    /// cancellation flag, set on client cancellation and on timeout.
    pub request: Arc<RequestContext>,
    /// When the call's time is up.
    pub deadline: Option<Instant>,
    /// Where progress and log events go.
    pub events: Option<EventSink>,
    /// Which of them the client asked for (what an upstream is asked to send; the sink filters).
    pub wants: EventWants,
    /// The caller as JSON, as this call's plugin sees it (empty when there is none, or when the
    /// tool does not take it), inherited by nested calls.
    pub caller_json: Arc<str>,
    /// Nesting depth (0 for a client's call).
    pub depth: u32,
    /// The tool being called, for log messages.
    pub tool: Arc<str>,
    /// How questions to the client are answered (`None`: this call cannot ask).
    pub input: Option<Arc<dyn CallInput>>,
    /// The call runs inline on the async runtime: it must never block waiting for the client.
    pub inline: bool,
}

impl std::fmt::Debug for CallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallState")
            .field("tool", &self.tool)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl CallState {
    /// The call's cancellation flag (its request's).
    pub fn cancel(&self) -> &CancelFlag {
        &self.request.cancel
    }

    /// Whether the call should stop: cancelled, or past its deadline.
    pub fn is_cancelled(&self) -> bool {
        self.request.cancel.is_cancelled() || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Answer a request the plugin makes about this call (`client/capabilities`, `task/start`,
    /// `input/ask`), whichever backend runs it: the answer as JSON, or why not. Any other request
    /// is not about a call: it is refused as an unsupported call-context method.
    pub fn answer(&self, request: &HostRequest) -> Result<String, HostRequestError> {
        match (request, &self.input) {
            (HostRequest::ClientCapabilities, Some(input)) => Ok(input.capabilities().to_string()),
            (HostRequest::ClientCapabilities, None) => Ok("{}".into()),
            (HostRequest::StartTask, input) => {
                if let Some(input) = input {
                    input.start_task();
                }
                Ok("null".into())
            }
            (HostRequest::Ask { questions }, Some(input)) => input
                .ask(questions, self)
                .map(|answers| answers.to_string())
                .map_err(HostRequestError::from),
            (HostRequest::Ask { .. }, None) => Err(InputError::Failed(
                "this call has no client to ask (e.g. `mcp-host call`)".into(),
            )
            .into()),
            (other, _) => Err(HostRequestError::UnsupportedCallMethod(
                other.method().into(),
            )),
        }
    }
}
