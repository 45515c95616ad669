//! A running call as a plugin backend sees it — the call side of the backend seam: what the plugin
//! can ask about it (cancellation, deadline, the client's capabilities, questions to the client),
//! where its events go, and what a nested call inherits from it (caller, agent view, depth,
//! deadline, quota). The execution stage fills it in; backends only read it.

use std::sync::Arc;
use std::time::Instant;

use mcp_plugin_sdk::{InputError, LogLevel};
use serde_json::{Value, json};

use super::cancel::CancelFlag;
use crate::access::agents::Agent;

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

/// How a call reaches its client: its capabilities, the start of a task, and questions (the
/// execution stage's input rounds and elicitations implement it).
pub trait CallInput: Send + Sync {
    /// The client's capabilities.
    fn capabilities(&self) -> &Value;
    /// The call has become a task (a 2026 round answers with the task from now on).
    fn start_task(&self);
    /// Ask the client the questions in `params` (JSON) on behalf of `call`; the answers.
    fn ask(&self, params: &str, call: &CallState) -> Result<Value, InputError>;
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
    /// Set on client cancellation and on timeout.
    pub cancel: CancelFlag,
    /// When the call's time is up.
    pub deadline: Option<Instant>,
    /// Where progress and log events go.
    pub events: Option<EventSink>,
    /// The caller as JSON (empty when there is none), inherited by nested calls.
    pub caller_json: Arc<str>,
    /// The agent whose view applies, inherited by nested calls.
    pub agent: Option<Arc<Agent>>,
    /// Nesting depth (0 for a client's call).
    pub depth: u32,
    /// The caller's quota key (`limits.per_caller`), which nested calls count against too.
    pub quota_key: Option<Arc<str>>,
    /// The tool being called, for log messages.
    pub tool: Arc<str>,
    /// How questions to the client are answered (`None`: this call cannot ask).
    pub input: Option<Arc<dyn CallInput>>,
    /// The call runs inline on the async runtime: it must never block waiting for the client.
    pub inline: bool,
    /// The verified caller's user id, whether or not the tool takes the caller: the call policy
    /// of its nested calls judges them as this user. Never shown to the plugin.
    pub user: Option<Arc<str>>,
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
    /// Whether the call should stop: cancelled, or past its deadline.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled() || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Answer a request the plugin makes through this call's context (`client/capabilities`,
    /// `task/start`, `input/ask`), whichever backend runs it: the answer as JSON, or the error text the SDK
    /// decodes.
    pub fn request(&self, method: &str, params: &str) -> Result<String, String> {
        use mcp_plugin_sdk::wire::encode_input_error;
        match (method, &self.input) {
            ("client/capabilities", Some(input)) => Ok(input.capabilities().to_string()),
            ("client/capabilities", None) => Ok("{}".into()),
            ("task/start", input) => {
                if let Some(input) = input {
                    input.start_task();
                }
                Ok("null".into())
            }
            ("input/ask", Some(input)) => input
                .ask(params, self)
                .map(|answers| answers.to_string())
                .map_err(|e| encode_input_error(&e)),
            ("input/ask", None) => Err(encode_input_error(&mcp_plugin_sdk::InputError::Failed(
                "this call has no client to ask (e.g. `mcp-host call`)".into(),
            ))),
            (other, _) => Err(format!("unsupported call-context method: {other}")),
        }
    }
}
