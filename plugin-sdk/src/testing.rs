//! Unit-test tools without a host: a stand-in host API and call context that record what a tool
//! does with them.
//!
//! A tool is a plain function, so a test calls it directly. What it cannot build by itself are the
//! host-provided parameters: [`TestHost`] stands in for the host (the plugin's configuration,
//! answers for nested [`HostApi::call_tool`] calls, and a record of host log lines and nested
//! calls), and [`TestCall`] stands in for one call (a cancellation flag the test sets, and a record
//! of progress and client log events).
//!
//! Both sit behind the same binary interface the real host implements, so the tool sees exactly
//! the [`HostApi`] and [`CallContext`] it gets in production: arguments and results of nested
//! calls travel as JSON text, as they do through the real host.
//!
//! ```
//! use mcp_plugin_sdk::testing::{CallEvent, TestHost};
//! use mcp_plugin_sdk::{CallContext, Content, LogLevel, ToolResult, json, tool};
//!
//! /// Shout what `echo` says, reporting progress.
//! ///
//! /// # Arguments
//! /// * `text` - What to shout.
//! #[tool]
//! pub fn shout(ctx: &CallContext, text: String) -> Result<String, String> {
//!     if ctx.is_cancelled() {
//!         return Err("cancelled".into());
//!     }
//!     ctx.progress(1.0, Some(2.0), Some("echoing"));
//!     let echoed = ctx.call_tool("echo", &json!({"text": text})).map_err(|e| e.to_string())?;
//!     ctx.log(LogLevel::Info, "echoed");
//!     Ok(echoed.text().to_uppercase())
//! }
//!
//! let host = TestHost::new().with_tool("echo", |args| {
//!     Ok(ToolResult::new(vec![Content::text(args["text"].as_str().unwrap_or_default())]))
//! });
//! let call = host.call();
//! assert_eq!(shout(&call.context(), "hi".into()), Ok("HI".to_owned()));
//! assert_eq!(
//!     call.events(),
//!     [
//!         CallEvent::Progress { progress: 1.0, total: Some(2.0), message: Some("echoing".into()) },
//!         CallEvent::Log { level: LogLevel::Info, message: "echoed".into() },
//!     ]
//! );
//! assert_eq!(host.tool_calls()[0].arguments, json!({"text": "hi"}));
//!
//! let cancelled = host.call();
//! cancelled.cancel();
//! assert_eq!(shout(&cancelled.context(), "hi".into()), Err("cancelled".to_owned()));
//! ```

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{RResult, RStr, RString};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::abi::{CallContextFfi, CallContextFfi_TO, HostApiFfi, HostApiFfi_TO};
use crate::content::ToolResult;
use crate::host::{CallContext, CallToolError, HostApi, LogLevel};
use crate::input::InputError;
use crate::runtime::panic_message;

/// The plugin name a [`TestHost`] reports through [`HostApi::plugin_name`].
pub const TEST_PLUGIN_NAME: &str = "test";

/// One line a plugin wrote to the host's log with [`HostApi::log`].
///
/// ```
/// use mcp_plugin_sdk::testing::{HostLog, TestHost};
/// use mcp_plugin_sdk::LogLevel;
/// let host = TestHost::new();
/// host.api().log(LogLevel::Warning, "Store", "disk almost full");
/// assert_eq!(
///     host.logs(),
///     [HostLog { level: LogLevel::Warning, service: "Store".into(), message: "disk almost full".into() }]
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLog {
    /// Severity.
    pub level: LogLevel,
    /// The service that logged it (empty when none was named).
    pub service: String,
    /// The text.
    pub message: String,
}

/// One nested tool call a plugin made through [`HostApi::call_tool`] or [`CallContext::call_tool`].
///
/// ```
/// use mcp_plugin_sdk::testing::{TestHost, ToolCall};
/// use mcp_plugin_sdk::json;
/// let host = TestHost::new();
/// let _ = host.api().call_tool("lookup", &json!({"id": 7}));
/// assert_eq!(host.tool_calls(), [ToolCall { name: "lookup".into(), arguments: json!({"id": 7}) }]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool called.
    pub name: String,
    /// Its arguments (`Value::Null` if the plugin sent text that is not JSON).
    pub arguments: Value,
}

/// Something a tool reported through its [`CallContext`] during one [`TestCall`].
///
/// Each variant mirrors one call of the frozen call-context interface; new kinds of events (say, a
/// question to the client) would be new variants, hence `#[non_exhaustive]`.
///
/// ```
/// use mcp_plugin_sdk::testing::{CallEvent, TestCall};
/// use mcp_plugin_sdk::LogLevel;
/// let call = TestCall::new();
/// call.context().progress(3.0, None, None);
/// call.context().log(LogLevel::Debug, "done");
/// assert_eq!(
///     call.events(),
///     [
///         CallEvent::Progress { progress: 3.0, total: None, message: None },
///         CallEvent::Log { level: LogLevel::Debug, message: "done".into() },
///     ]
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CallEvent {
    /// [`CallContext::progress`].
    Progress {
        /// Work done.
        progress: f64,
        /// Total work, when given.
        total: Option<f64>,
        /// What is happening, when given.
        message: Option<String>,
    },
    /// [`CallContext::log`]: a log message for the client that made the call.
    Log {
        /// Severity.
        level: LogLevel,
        /// The text.
        message: String,
    },
    /// A question to the client ([`CallContext::elicit`], [`CallContext::sample`],
    /// [`CallContext::list_roots`], [`CallContext::ask`]), answered or not.
    Input {
        /// The question's key.
        key: String,
        /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
        method: String,
        /// The request's params.
        params: Value,
    },
    /// [`CallContext::start_task`]: a `#[tool(task, ask_first)]` tool became a task here.
    TaskStarted,
}

type ToolStub = Arc<dyn Fn(&Value) -> Result<ToolResult, CallToolError> + Send + Sync>;

/// What every [`HostApi`] of one [`TestHost`] shares: stubs in, records out.
#[derive(Default)]
struct Shared {
    tools: Mutex<HashMap<String, ToolStub>>,
    logs: Mutex<Vec<HostLog>>,
    tool_calls: Mutex<Vec<ToolCall>>,
    tools_changed: AtomicUsize,
    notifications: Mutex<Vec<(String, Value)>>,
}

/// A poisoned lock only means a test thread panicked while holding it; the records stay usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The host side of a [`TestHost`]'s [`HostApi`].
struct TestHostFfi {
    config: String,
    data_dir: Option<std::path::PathBuf>,
    shared: Arc<Shared>,
}

impl HostApiFfi for TestHostFfi {
    fn config(&self) -> RString {
        RString::from(self.config.as_str())
    }

    fn log(&self, level: u8, service: RStr<'_>, message: RStr<'_>) {
        lock(&self.shared.logs).push(HostLog {
            level: LogLevel::from_u8(level),
            service: service.as_str().to_owned(),
            message: message.as_str().to_owned(),
        });
    }

    fn call_tool(&self, name: RStr<'_>, args: RStr<'_>) -> RResult<RString, RString> {
        let name = name.as_str();
        let arguments = serde_json::from_str(args.as_str()).unwrap_or(Value::Null);
        lock(&self.shared.tool_calls).push(ToolCall {
            name: name.to_owned(),
            arguments: arguments.clone(),
        });
        let Some(stub) = lock(&self.shared.tools).get(name).cloned() else {
            return RResult::RErr(format!("unknown tool: {name}").into());
        };
        // The stub is test code running under an `extern "C"` frame: keep its panic on this side.
        let answer = catch_unwind(AssertUnwindSafe(|| stub(&arguments))).unwrap_or_else(|p| {
            Err(CallToolError(format!(
                "stub for {name} panicked: {}",
                panic_message(&*p)
            )))
        });
        match answer.map(|result| serde_json::to_string(&result)) {
            Ok(Ok(json)) => RResult::ROk(json.into()),
            Ok(Err(e)) => RResult::RErr(format!("stub result could not be serialized: {e}").into()),
            Err(e) => RResult::RErr(e.0.into()),
        }
    }

    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        match method.as_str() {
            "notify_tools_changed" => {
                self.shared.tools_changed.fetch_add(1, Ordering::Relaxed);
                RResult::ROk("null".into())
            }
            m @ ("notify_prompts_changed"
            | "notify_resources_changed"
            | "notify_resource_updated") => {
                let params = serde_json::from_str(params.as_str()).unwrap_or(Value::Null);
                lock(&self.shared.notifications).push((m.to_owned(), params));
                RResult::ROk("null".into())
            }
            "data_dir" => match &self.data_dir {
                Some(dir) => match std::fs::create_dir_all(dir) {
                    Ok(()) => RResult::ROk(Value::from(dir.to_string_lossy()).to_string().into()),
                    Err(e) => RResult::RErr(format!("cannot create {}: {e}", dir.display()).into()),
                },
                None => RResult::RErr(
                    "this test host has no data directory (TestHost::with_data_dir)".into(),
                ),
            },
            other => RResult::RErr(format!("unsupported host method: {other}").into()),
        }
    }
}

/// A stand-in for the host: the [`HostApi`] a service's `enabled` and `new` and a tool's `&HostApi`
/// parameter get, with a configuration, stubbed nested tools, and a record of what the plugin did.
///
/// ```
/// use mcp_plugin_sdk::testing::TestHost;
/// use mcp_plugin_sdk::{HostApi, json};
///
/// fn enabled(host: &HostApi) -> bool {
///     host.config_value("database").is_some()
/// }
///
/// assert!(!enabled(TestHost::new().api()));
/// assert!(enabled(TestHost::new().with_config(json!({"database": "db.sqlite"})).api()));
/// ```
pub struct TestHost {
    shared: Arc<Shared>,
    config: Value,
    data_dir: Option<std::path::PathBuf>,
    api: HostApi,
}

impl std::fmt::Debug for TestHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHost")
            .field("api", &self.api)
            .field("logs", &*lock(&self.shared.logs))
            .field("tool_calls", &*lock(&self.shared.tool_calls))
            .finish_non_exhaustive()
    }
}

impl Default for TestHost {
    fn default() -> Self {
        Self::new()
    }
}

impl TestHost {
    /// A host with no configuration for the plugin (`null`) and no other tools.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::{TEST_PLUGIN_NAME, TestHost};
    /// let host = TestHost::new();
    /// assert!(host.api().config().is_null());
    /// assert_eq!(host.api().plugin_name(), TEST_PLUGIN_NAME);
    /// ```
    pub fn new() -> Self {
        let shared = Arc::new(Shared::default());
        let api = Self::api_with(&shared, &Value::Null, None);
        TestHost {
            shared,
            config: Value::Null,
            data_dir: None,
            api,
        }
    }

    fn api_with(
        shared: &Arc<Shared>,
        config: &Value,
        data_dir: Option<&std::path::Path>,
    ) -> HostApi {
        let ffi = TestHostFfi {
            config: config.to_string(),
            data_dir: data_dir.map(std::path::Path::to_path_buf),
            shared: Arc::clone(shared),
        };
        HostApi::new(HostApiFfi_TO::from_value(ffi, TD_Opaque), TEST_PLUGIN_NAME)
    }

    /// The host API again after a setting changed (a `HostApi` reads its configuration once).
    fn rebuild_api(&mut self) {
        self.api = Self::api_with(&self.shared, &self.config, self.data_dir.as_deref());
    }

    /// This host, handing the plugin `config` as its section of the host configuration
    /// (`plugins.<name>.config`).
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// use mcp_plugin_sdk::json;
    /// let host = TestHost::new().with_config(json!({"start": 40}));
    /// assert_eq!(host.api().config_value("start"), Some(&json!(40)));
    /// ```
    pub fn with_config(mut self, config: Value) -> Self {
        self.config = config;
        self.rebuild_api();
        self
    }

    /// This host, giving the plugin `dir` as its data directory ([`HostApi::data_dir`]; created
    /// when the plugin asks for it). Without one, `data_dir()` is an error, as in a host that has
    /// none.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// let dir = std::env::temp_dir().join("mcp-sdk-doc-with-data-dir");
    /// let host = TestHost::new().with_data_dir(&dir);
    /// assert_eq!(host.api().data_dir().unwrap(), dir);
    /// assert!(dir.is_dir());
    /// ```
    pub fn with_data_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self.rebuild_api();
        self
    }

    /// This host, answering nested calls of tool `name` with `answer` (given the call's arguments).
    /// A nested call of a tool without an answer fails with `unknown tool: <name>`, as it does in
    /// the real host.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// use mcp_plugin_sdk::{CallToolError, ToolResult, json};
    /// let host = TestHost::new()
    ///     .with_tool("lookup", |args| Ok(ToolResult::json(&json!({"id": args["id"]}))))
    ///     .with_tool("flaky", |_| Err(CallToolError("timed out after 1 s".into())));
    /// let found = host.api().call_tool("lookup", &json!({"id": 7})).unwrap();
    /// assert_eq!(found.structured_content.unwrap()["id"], 7);
    /// assert_eq!(host.api().call_tool("flaky", &json!({})).unwrap_err().0, "timed out after 1 s");
    /// assert_eq!(host.api().call_tool("other", &json!({})).unwrap_err().0, "unknown tool: other");
    /// ```
    pub fn with_tool(
        self,
        name: impl Into<String>,
        answer: impl Fn(&Value) -> Result<ToolResult, CallToolError> + Send + Sync + 'static,
    ) -> Self {
        lock(&self.shared.tools).insert(name.into(), Arc::new(answer));
        self
    }

    /// The host API, as a plugin gets it.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// use mcp_plugin_sdk::HostApi;
    /// let host = TestHost::new();
    /// let api: &HostApi = host.api();
    /// assert!(api.config_as::<std::collections::HashMap<String, String>>().unwrap().is_empty());
    /// ```
    pub fn api(&self) -> &HostApi {
        &self.api
    }

    /// A new call on this host, for a tool that takes `&CallContext` (its nested calls and host
    /// log lines are recorded here).
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// use mcp_plugin_sdk::json;
    /// let host = TestHost::new().with_config(json!({"greeting": "hey"}));
    /// let call = host.call();
    /// assert_eq!(call.context().host().config_value("greeting"), Some(&json!("hey")));
    /// ```
    pub fn call(&self) -> TestCall {
        TestCall::on(self.api.clone())
    }

    /// The lines the plugin wrote to the host log ([`HostApi::log`]), oldest first.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// use mcp_plugin_sdk::LogLevel;
    /// let host = TestHost::new();
    /// host.api().log(LogLevel::Info, "", "started");
    /// assert_eq!(host.logs()[0].message, "started");
    /// ```
    pub fn logs(&self) -> Vec<HostLog> {
        lock(&self.shared.logs).clone()
    }

    /// The nested tool calls the plugin made, oldest first, answered or not.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// use mcp_plugin_sdk::json;
    /// let host = TestHost::new();
    /// assert!(host.api().call_tool("missing", &json!({})).is_err());
    /// assert_eq!(host.tool_calls()[0].name, "missing");
    /// ```
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        lock(&self.shared.tool_calls).clone()
    }

    /// How many times the plugin announced a tool-list change ([`HostApi::notify_tools_changed`]).
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// let host = TestHost::new();
    /// host.api().notify_tools_changed().unwrap();
    /// assert_eq!(host.tools_changed(), 1);
    /// ```
    pub fn tools_changed(&self) -> usize {
        self.shared.tools_changed.load(Ordering::Relaxed)
    }

    /// The other announcements the plugin made, oldest first: `notify_prompts_changed`,
    /// `notify_resources_changed` (params `null`) and `notify_resource_updated` (params `{"uri"}`).
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// use mcp_plugin_sdk::json;
    /// let host = TestHost::new();
    /// host.api().notify_resource_updated("time://zones").unwrap();
    /// assert_eq!(host.notifications(), [("notify_resource_updated".to_owned(), json!({"uri": "time://zones"}))]);
    /// ```
    pub fn notifications(&self) -> Vec<(String, Value)> {
        lock(&self.shared.notifications).clone()
    }
}

/// The per-call side of a [`TestCall`], behind its [`CallContext`].
struct CallState {
    cancelled: AtomicBool,
    events: Mutex<Vec<CallEvent>>,
    /// What the client declared.
    capabilities: Value,
    /// Answers to questions, by key.
    answers: Map<String, Value>,
    /// The calling user's credentials, by provider.
    credentials: Map<String, Value>,
}

impl Default for CallState {
    fn default() -> Self {
        CallState {
            cancelled: AtomicBool::new(false),
            events: Mutex::default(),
            capabilities: serde_json::json!({
                "elicitation": { "form": {}, "url": {} },
                "sampling": {},
                "roots": {},
            }),
            answers: Map::new(),
            credentials: Map::new(),
        }
    }
}

impl CallState {
    /// `input/ask` as the host answers it for a 2026 client: every question answered, or the
    /// unanswered ones recorded and `Asked`.
    fn ask(&self, params: &str) -> Result<Value, InputError> {
        let params: Value = serde_json::from_str(params)
            .map_err(|e| InputError::Failed(format!("unreadable questions: {e}")))?;
        let requests = params
            .get("requests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut responses = Map::new();
        let mut asked = false;
        for (key, request) in requests {
            let method = request["method"].as_str().unwrap_or_default().to_owned();
            let params = request.get("params").cloned().unwrap_or(Value::Null);
            lock(&self.events).push(CallEvent::Input {
                key: key.clone(),
                method: method.clone(),
                params: params.clone(),
            });
            if !crate::input::declares(&self.capabilities, &method, &params) {
                return Err(InputError::Unsupported { method });
            }
            match self.answers.get(&key) {
                Some(answer) => {
                    responses.insert(key, answer.clone());
                }
                None => asked = true,
            }
        }
        if asked {
            return Err(InputError::Asked);
        }
        Ok(serde_json::json!({ "responses": responses }))
    }
}

impl CallState {
    /// `credential/get` as the host answers it: the provider's credential given to this call,
    /// else "unavailable" (the user is not connected).
    fn credential(&self, params: &str) -> RResult<RString, RString> {
        let params: Value = serde_json::from_str(params).unwrap_or_default();
        let provider = params["provider"].as_str().unwrap_or_default();
        match self.credentials.get(provider) {
            Some(c) => RResult::ROk(c.to_string().into()),
            None => RResult::RErr(
                format!(
                    "{}no credential for {provider} in this test call (TestCall::with_credential)",
                    crate::credential::wire::UNAVAILABLE
                )
                .into(),
            ),
        }
    }
}

impl CallContextFfi for CallState {
    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    fn progress(&self, progress: f64, total: f64, message: RStr<'_>) {
        lock(&self.events).push(CallEvent::Progress {
            progress,
            total: (!total.is_nan()).then_some(total),
            message: (!message.is_empty()).then(|| message.as_str().to_owned()),
        });
    }

    fn log(&self, level: u8, message: RStr<'_>) {
        lock(&self.events).push(CallEvent::Log {
            level: LogLevel::from_u8(level),
            message: message.as_str().to_owned(),
        });
    }

    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        match method.as_str() {
            "client/capabilities" => RResult::ROk(self.capabilities.to_string().into()),
            "task/start" => {
                lock(&self.events).push(CallEvent::TaskStarted);
                RResult::ROk("null".into())
            }
            "input/ask" => match self.ask(params.as_str()) {
                Ok(v) => RResult::ROk(v.to_string().into()),
                Err(e) => RResult::RErr(crate::input::encode_input_error(&e).into()),
            },
            crate::credential::wire::METHOD => self.credential(params.as_str()),
            other => RResult::RErr(format!("unsupported call-context method: {other}").into()),
        }
    }
}

/// A stand-in for one call of a tool: the [`CallContext`] it gets, a cancellation flag the test
/// sets, and a record of the progress and log events it sent.
///
/// A [`CallContext`] borrows its call, so a test keeps the `TestCall` and passes
/// `&call.context()` to the tool. It is `Sync`: a test may cancel from another thread while the
/// tool runs.
///
/// ```
/// use mcp_plugin_sdk::testing::TestCall;
/// use mcp_plugin_sdk::CallContext;
///
/// fn count_until_cancelled(ctx: &CallContext, limit: u32) -> u32 {
///     (0..limit).take_while(|_| !ctx.is_cancelled()).count() as u32
/// }
///
/// let call = TestCall::new();
/// assert_eq!(count_until_cancelled(&call.context(), 5), 5);
/// call.cancel();
/// assert_eq!(count_until_cancelled(&call.context(), 5), 0);
/// ```
pub struct TestCall {
    host: HostApi,
    state: CallState,
}

impl std::fmt::Debug for TestCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCall")
            .field("cancelled", &self.state.cancelled.load(Ordering::Acquire))
            .field("events", &*lock(&self.state.events))
            .finish_non_exhaustive()
    }
}

impl Default for TestCall {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCall {
    /// A call on a fresh [`TestHost`] (no configuration, no other tools). Use [`TestHost::call`] to
    /// configure the host or read its records.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestCall;
    /// let call = TestCall::new();
    /// assert!(!call.context().is_cancelled());
    /// assert!(call.events().is_empty());
    /// ```
    pub fn new() -> Self {
        TestHost::new().call()
    }

    fn on(host: HostApi) -> Self {
        TestCall {
            host,
            state: CallState::default(),
        }
    }

    /// This call with the client's answer to the question `key` (an [`ElicitResult`](crate::ElicitResult),
    /// a [`Sampled`](crate::Sampled), or `Vec<Root>` for roots). A question without an answer is
    /// recorded and fails with [`InputError::Asked`], as it does with a 2026 client in its first
    /// round.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::{CallEvent, TestCall};
    /// use mcp_plugin_sdk::{ElicitResult, Elicitation, InputError, Root, Sampled, Sampling, json};
    /// let call = TestCall::new()
    ///     .answering("name", ElicitResult::accept(json!({"name": "Ana"})))
    ///     .answering("model", Sampled::text("Paris", "test-model"))
    ///     .answering("roots", vec![Root::new("file:///work", Some("work"))]);
    /// let ctx = call.context();
    /// let form = Elicitation::form("Name?", json!({"type": "object"}));
    /// assert_eq!(ctx.elicit("name", form.clone()).unwrap().content_value("name"), Some(&json!("Ana")));
    /// assert_eq!(ctx.sample("model", Sampling::text("Capital of France?", 10)).unwrap().text_content(), "Paris");
    /// assert_eq!(ctx.list_roots("roots").unwrap()[0].uri, "file:///work");
    /// assert_eq!(ctx.elicit("other", form), Err(InputError::Asked));
    /// assert!(matches!(&call.events()[3], CallEvent::Input { key, .. } if key == "other"));
    /// ```
    pub fn answering(mut self, key: impl Into<String>, answer: impl Serialize) -> Self {
        let answer = match serde_json::to_value(answer) {
            // Roots are answered as `{"roots": [...]}`.
            Ok(Value::Array(roots)) => serde_json::json!({ "roots": roots }),
            Ok(v) => v,
            Err(_) => Value::Null,
        };
        self.state.answers.insert(key.into(), answer);
        self
    }

    /// This call from a client that declared `capabilities` (MCP `ClientCapabilities`; by default
    /// form and URL elicitation, sampling and roots). A question the client cannot answer fails
    /// with [`InputError::Unsupported`].
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestCall;
    /// use mcp_plugin_sdk::{Elicitation, InputError, InputKind, json};
    /// let call = TestCall::new().with_client_capabilities(json!({"sampling": {}}));
    /// assert!(!call.context().client_supports(InputKind::Elicitation));
    /// assert!(call.context().client_supports(InputKind::Sampling));
    /// let asked = call.context().elicit("k", Elicitation::form("?", json!({"type": "object"})));
    /// assert_eq!(asked, Err(InputError::Unsupported { method: "elicitation/create".into() }));
    /// ```
    pub fn with_client_capabilities(mut self, capabilities: Value) -> Self {
        self.state.capabilities = capabilities;
        self
    }

    /// This call from a user holding `access_token` at credential provider `provider` (what
    /// [`CallContext::credential`] returns; any other provider is unavailable).
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestCall;
    /// let call = TestCall::new().with_credential("github", "gho_x");
    /// assert_eq!(call.context().credential("github").unwrap().access_token(), "gho_x");
    /// assert!(call.context().credential("linear").is_err());
    /// ```
    pub fn with_credential(mut self, provider: &str, access_token: &str) -> Self {
        self.state.credentials.insert(
            provider.to_owned(),
            serde_json::json!({ "access_token": access_token, "token_type": "Bearer" }),
        );
        self
    }

    /// The call context to pass to the tool (as `&call.context()`).
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestCall;
    /// use mcp_plugin_sdk::json;
    /// let call = TestCall::new();
    /// let ctx = call.context();
    /// assert_eq!(
    ///     ctx.request("elicit", &json!({})).unwrap_err().0,
    ///     "unsupported call-context method: elicit"
    /// );
    /// ```
    pub fn context(&self) -> CallContext<'_> {
        CallContext::new(
            CallContextFfi_TO::from_ptr(RRef::new(&self.state), TD_Opaque),
            &self.host,
        )
    }

    /// Cancel the call: from now on [`CallContext::is_cancelled`] is true, as when the client
    /// cancels or the call's time is up.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestCall;
    /// let call = TestCall::new();
    /// call.cancel();
    /// assert!(call.context().is_cancelled());
    /// ```
    pub fn cancel(&self) {
        self.state.cancelled.store(true, Ordering::Release);
    }

    /// The progress and log events the tool sent during this call, oldest first.
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::{CallEvent, TestCall};
    /// let call = TestCall::new();
    /// call.context().progress(1.0, Some(4.0), Some("first of four"));
    /// assert!(matches!(&call.events()[0], CallEvent::Progress { total: Some(t), .. } if *t == 4.0));
    /// ```
    pub fn events(&self) -> Vec<CallEvent> {
        lock(&self.state.events).clone()
    }
}

#[cfg(feature = "testing")]
mod kit;
#[cfg(feature = "testing")]
pub use kit::{TestCallError, TestPlugin};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::Content;

    #[test]
    fn a_panicking_stub_is_an_error_for_the_caller_not_an_abort() {
        let host = TestHost::new().with_tool("boom", |_| panic!("stub exploded"));
        let err = host.api().call_tool("boom", &Value::Null);
        assert_eq!(
            err.map_err(|e| e.0),
            Err("stub for boom panicked: stub exploded".to_owned())
        );
    }

    #[test]
    fn nested_results_cross_as_json_like_through_the_real_host() {
        let host = TestHost::new().with_tool("rich", |_| {
            Ok(ToolResult::new(vec![
                Content::text("a"),
                Content::resource_link("file:///x", "x"),
            ]))
        });
        let call = host.call();
        let result = call.context().call_tool("rich", &serde_json::json!({}));
        assert_eq!(
            result.map(|r| r.content),
            Ok(vec![
                Content::text("a"),
                Content::resource_link("file:///x", "x")
            ])
        );
        assert_eq!(host.tool_calls().len(), 1);
    }

    #[test]
    fn a_call_can_be_cancelled_from_another_thread_while_the_tool_runs() {
        let call = TestCall::new();
        std::thread::scope(|s| {
            let running = s.spawn(|| {
                let ctx = call.context();
                while !ctx.is_cancelled() {
                    std::thread::yield_now();
                }
                "stopped"
            });
            call.cancel();
            assert_eq!(running.join().ok(), Some("stopped"));
        });
    }
}
