//! The plugin's side of the host API and of a call: [`HostApi`], [`CallContext`], [`UserInfo`], [`LogLevel`].

use std::sync::Arc;

use abi_stable::std_types::{RResult, RStr};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::abi::{CallContextRef, HostApiBox};
use crate::content::ToolResult;
use crate::credential::{Credential, CredentialError};
use crate::input::{
    ElicitResult, Elicitation, InputError, InputKind, InputRequests, InputResponses, Root, Sampled,
    Sampling, decode_input_error, kind_declared,
};

/// Severity of a log message, with MCP's (RFC 5424) levels.
///
/// ```
/// use mcp_plugin_sdk::LogLevel;
/// assert!(LogLevel::Warning > LogLevel::Info);
/// assert_eq!(LogLevel::from_u8(LogLevel::Error as u8), LogLevel::Error);
/// assert_eq!(LogLevel::Notice.as_str(), "notice");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum LogLevel {
    /// Debugging detail.
    Debug = 0,
    /// Normal operation.
    Info = 1,
    /// Normal but significant.
    Notice = 2,
    /// Something unexpected that was handled.
    Warning = 3,
    /// A failure.
    Error = 4,
    /// A critical failure.
    Critical = 5,
    /// Action must be taken immediately.
    Alert = 6,
    /// The system is unusable.
    Emergency = 7,
}

impl LogLevel {
    /// The level for a number sent over the ABI (out-of-range numbers are `Emergency`).
    pub fn from_u8(n: u8) -> Self {
        match n {
            0 => LogLevel::Debug,
            1 => LogLevel::Info,
            2 => LogLevel::Notice,
            3 => LogLevel::Warning,
            4 => LogLevel::Error,
            5 => LogLevel::Critical,
            6 => LogLevel::Alert,
            _ => LogLevel::Emergency,
        }
    }

    /// The MCP name of the level.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

/// The authenticated caller of a tool, filled in by the host from verified credentials.
///
/// Declare a parameter of this type (or `Option<UserInfo>`) and the host injects it; it never appears in
/// the tool's input schema, so a model can neither see nor forge it. Scope every query to `user_id`.
///
/// `#[non_exhaustive]`: the host will pass more verified facts about the caller over time. Build one
/// (in a unit test) with [`UserInfo::new`] and set the other fields, which stay public.
///
/// ```
/// use mcp_plugin_sdk::UserInfo;
/// let mut u = UserInfo::new("alice");
/// assert_eq!(u.user_id, "alice");
/// assert!(u.agent.is_none());
/// u.agent = Some("support".into());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UserInfo {
    /// The verified user id (a JWT's `sub`, or the user a personal secret belongs to).
    pub user_id: String,
    /// The MCP session, when the client has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The agent whose view of the tools the call came through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl UserInfo {
    /// A caller with just a user id (useful in a plugin's unit tests).
    pub fn new(user_id: impl Into<String>) -> Self {
        UserInfo {
            user_id: user_id.into(),
            session_id: None,
            agent: None,
        }
    }
}

/// Why a nested [`HostApi::call_tool`] could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallToolError(pub String);

impl std::fmt::Display for CallToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallToolError {}

/// What the host offers a plugin: its configuration, the host log, and calls to other tools.
///
/// A `&HostApi` is passed to a service's `enabled` and `new`, and is reachable from every call through
/// [`CallContext::host`].
#[derive(Clone)]
pub struct HostApi {
    inner: Arc<HostInner>,
}

struct HostInner {
    ffi: HostApiBox,
    config: Value,
    plugin: String,
}

impl std::fmt::Debug for HostApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostApi")
            .field("plugin", &self.inner.plugin)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl HostApi {
    pub(crate) fn new(ffi: HostApiBox, plugin: &str) -> Self {
        let raw = ffi.config();
        let config = serde_json::from_str(raw.as_str()).unwrap_or(Value::Null);
        HostApi {
            inner: Arc::new(HostInner {
                ffi,
                config,
                plugin: plugin.to_owned(),
            }),
        }
    }

    /// A host API for a unit test: `config` as the plugin's configuration section, no other tools.
    ///
    /// Shorthand for [`TestHost::new().with_config(config).api()`](crate::testing::TestHost); use a
    /// [`TestHost`](crate::testing::TestHost) to also answer nested tool calls and read the host log.
    ///
    /// ```
    /// use mcp_plugin_sdk::{HostApi, json};
    /// let host = HostApi::for_test(json!({"database": "readings.db"}));
    /// assert_eq!(host.config_value("database"), Some(&json!("readings.db")));
    /// assert!(host.config_value("missing").is_none());
    /// ```
    pub fn for_test(config: Value) -> HostApi {
        crate::testing::TestHost::new()
            .with_config(config)
            .api()
            .clone()
    }

    /// The plugin's name.
    pub fn plugin_name(&self) -> &str {
        &self.inner.plugin
    }

    /// This plugin's section of the host configuration (`plugins.<name>.config`), `Null` when absent.
    pub fn config(&self) -> &Value {
        &self.inner.config
    }

    /// One key of the plugin's configuration section, when present and not null.
    pub fn config_value(&self, key: &str) -> Option<&Value> {
        self.inner.config.get(key).filter(|v| !v.is_null())
    }

    /// The plugin's configuration section deserialized into `T` (a missing section reads as `{}`).
    pub fn config_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match &self.inner.config {
            Value::Null => serde_json::from_value(Value::Object(Default::default())),
            other => T::deserialize(other),
        }
    }

    /// Write to the host's log (not to the client), tagged with this plugin and `service`.
    pub fn log(&self, level: LogLevel, service: &str, message: &str) {
        self.inner.ffi.log(
            level as u8,
            RStr::from_str(service),
            RStr::from_str(message),
        );
    }

    /// Call another tool through the host (the wrapper pattern): it is validated against that tool's
    /// schema and, inside a call, runs as the same caller.
    pub fn call_tool(&self, name: &str, args: &Value) -> Result<ToolResult, CallToolError> {
        let args = args.to_string();
        match self
            .inner
            .ffi
            .call_tool(RStr::from_str(name), RStr::from_str(&args))
        {
            RResult::ROk(json) => serde_json::from_str(json.as_str())
                .map_err(|e| CallToolError(format!("host returned an unreadable result: {e}"))),
            RResult::RErr(e) => Err(CallToolError(e.into_string())),
        }
    }

    /// Tell clients the tool list changed (`notifications/tools/list_changed` to every listener), for
    /// a plugin whose tools depend on something outside the host.
    pub fn notify_tools_changed(&self) -> Result<(), CallToolError> {
        self.request("notify_tools_changed", &Value::Null)
            .map(|_| ())
    }

    /// Tell clients the prompt list changed (`notifications/prompts/list_changed`), for a plugin
    /// whose prompts depend on something outside the host.
    pub fn notify_prompts_changed(&self) -> Result<(), CallToolError> {
        self.request("notify_prompts_changed", &Value::Null)
            .map(|_| ())
    }

    /// Tell clients the resource list changed (`notifications/resources/list_changed`).
    pub fn notify_resources_changed(&self) -> Result<(), CallToolError> {
        self.request("notify_resources_changed", &Value::Null)
            .map(|_| ())
    }

    /// Tell clients subscribed to `uri` that its contents changed (`notifications/resources/updated`,
    /// to 2025 sessions that called `resources/subscribe` and 2026 listen streams that named it).
    pub fn notify_resource_updated(&self, uri: &str) -> Result<(), CallToolError> {
        self.request(
            "notify_resource_updated",
            &serde_json::json!({ "uri": uri }),
        )
        .map(|_| ())
    }

    /// This plugin's own data directory, for the files it keeps (a database, a cache):
    /// `<data_dir>/<plugin name>` under the host's `data_dir` setting, created by the host when first
    /// asked. Resolve relative paths from the plugin's configuration against it, never against the
    /// host's working directory. `Err` when the host has none to give (a host older than this
    /// method, or a directory it could not create).
    ///
    /// ```
    /// use mcp_plugin_sdk::testing::TestHost;
    /// let tmp = std::env::temp_dir().join("mcp-sdk-doc-data");
    /// let host = TestHost::new().with_data_dir(&tmp);
    /// assert_eq!(host.api().data_dir().unwrap(), tmp);
    /// assert!(TestHost::new().api().data_dir().is_err());
    /// ```
    pub fn data_dir(&self) -> Result<std::path::PathBuf, CallToolError> {
        match self.request("data_dir", &Value::Null)? {
            Value::String(dir) => Ok(dir.into()),
            other => Err(CallToolError(format!(
                "the host answered {other} for the data directory"
            ))),
        }
    }

    /// A host capability by name, JSON in and out (the ABI's extension point).
    pub fn request(&self, method: &str, params: &Value) -> Result<Value, CallToolError> {
        let params = params.to_string();
        match self
            .inner
            .ffi
            .request(RStr::from_str(method), RStr::from_str(&params))
        {
            RResult::ROk(json) => serde_json::from_str(json.as_str())
                .map_err(|e| CallToolError(format!("host returned unreadable JSON: {e}"))),
            RResult::RErr(e) => Err(CallToolError(e.into_string())),
        }
    }
}

/// The per-call view a tool can take as `ctx: &CallContext`: cancellation, progress, client logs.
///
/// A context borrows its call. In a unit test, make the call with
/// [`TestCall`](crate::testing::TestCall) (which records what the tool reports and can be cancelled)
/// and pass `&call.context()`.
///
/// ```
/// use mcp_plugin_sdk::testing::{CallEvent, TestCall};
/// use mcp_plugin_sdk::CallContext;
///
/// fn halfway(ctx: &CallContext) {
///     ctx.progress(50.0, Some(100.0), None);
/// }
///
/// let call = TestCall::new();
/// halfway(&call.context());
/// assert_eq!(call.events(), [CallEvent::Progress { progress: 50.0, total: Some(100.0), message: None }]);
/// ```
pub struct CallContext<'a> {
    ffi: CallContextRef<'a>,
    host: &'a HostApi,
}

impl std::fmt::Debug for CallContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl<'a> CallContext<'a> {
    pub(crate) fn new(ffi: CallContextRef<'a>, host: &'a HostApi) -> Self {
        CallContext { ffi, host }
    }

    /// True once the client cancelled the call or its timeout passed: stop work and return soon.
    /// The host cannot stop a running function, so long loops should check this.
    pub fn is_cancelled(&self) -> bool {
        self.ffi.is_cancelled()
    }

    /// Report progress to the client (sent only if the client asked for progress).
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        self.ffi.progress(
            progress,
            total.unwrap_or(f64::NAN),
            RStr::from_str(message.unwrap_or("")),
        );
    }

    /// Send a log message to the client that made this call (sent at or above its requested level).
    pub fn log(&self, level: LogLevel, message: &str) {
        self.ffi.log(level as u8, RStr::from_str(message));
    }

    /// The host API (configuration, host log, nested tool calls).
    pub fn host(&self) -> &HostApi {
        self.host
    }

    /// Call another tool as the same caller (shorthand for `ctx.host().call_tool`).
    pub fn call_tool(&self, name: &str, args: &Value) -> Result<ToolResult, CallToolError> {
        self.host.call_tool(name, args)
    }

    /// Ask the client to fill in a form (or visit a URL); `key` names the question across rounds
    /// (see [`crate::input`] for how this works with 2025 and 2026 clients).
    ///
    /// `Err(InputError::Asked)`: return now (with `?`), the host calls again with the answer;
    /// `Err(InputError::Unsupported)`: the client cannot answer this kind of question.
    pub fn elicit(&self, key: &str, request: Elicitation) -> Result<ElicitResult, InputError> {
        self.ask(InputRequests::new().elicit(key, request))?
            .elicitation(key)
    }

    /// Ask the client's model for a completion (`sampling/createMessage`), under `key`.
    pub fn sample(&self, key: &str, request: Sampling) -> Result<Sampled, InputError> {
        self.ask(InputRequests::new().sample(key, request))?
            .sampling(key)
    }

    /// Ask the client for its roots (`roots/list`), under `key`.
    pub fn list_roots(&self, key: &str) -> Result<Vec<Root>, InputError> {
        self.ask(InputRequests::new().list_roots(key))?.roots(key)
    }

    /// Ask several questions at once (one round with a 2026 client); all are answered or none.
    pub fn ask(&self, requests: InputRequests) -> Result<InputResponses, InputError> {
        let params = requests.to_wire().to_string();
        match self
            .ffi
            .request(RStr::from_str("input/ask"), RStr::from_str(&params))
        {
            RResult::ROk(json) => serde_json::from_str(json.as_str())
                .map_err(|e| InputError::Failed(format!("host returned unreadable JSON: {e}")))
                .and_then(InputResponses::from_wire),
            RResult::RErr(e) if e.as_str().starts_with("unsupported call-context method") => Err(
                InputError::Failed("this host cannot ask the client for input".into()),
            ),
            RResult::RErr(e) => Err(decode_input_error(e.as_str())),
        }
    }

    /// The point where a `#[tool(task, ask_first)]` tool becomes a task: the questions it asked
    /// before were answered by the client as input-required rounds of its `tools/call`; from here
    /// the client has its task and the rest of the function runs detached (later questions go to
    /// the task: `input_required`, answered with `tasks/update`). Anywhere else — a tool without
    /// `ask_first`, a call that is not a task, a run of the function after the task began — it does
    /// nothing, so the function reads the same for every client.
    ///
    /// ```
    /// use mcp_plugin_sdk::{CallContext, Elicitation, json, tool};
    ///
    /// /// Render a long report for a title the user gives first.
    /// #[tool(task = "required", ask_first)]
    /// pub fn report(ctx: &CallContext) -> Result<String, String> {
    ///     let form = json!({"type": "object", "properties": {"title": {"type": "string"}}});
    ///     let title = ctx.elicit("title", Elicitation::form("Report title?", form))?;
    ///     ctx.start_task();
    ///     // ... the long part ...
    ///     Ok(format!("report {:?} done", title.content_value("title")))
    /// }
    ///
    /// use mcp_plugin_sdk::{ElicitResult, testing::{CallEvent, TestCall}};
    /// let call = TestCall::new().answering("title", ElicitResult::accept(json!({"title": "Q3"})));
    /// assert!(report(&call.context()).is_ok());
    /// assert!(call.events().contains(&CallEvent::TaskStarted));
    /// # mcp_plugin_sdk::export_plugin!();
    /// # fn main() {}
    /// ```
    pub fn start_task(&self) {
        // A host without tasks does not know the method: nothing to do there either.
        let _ = self
            .ffi
            .request(RStr::from_str("task/start"), RStr::from_str("null"));
    }

    /// The capabilities the client declared (MCP `ClientCapabilities`; `{}` when unknown).
    pub fn client_capabilities(&self) -> Value {
        self.request("client/capabilities", &Value::Null)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| serde_json::json!({}))
    }

    /// Whether the client can answer questions of this kind (checked by the host on every question
    /// anyway; use this to offer a path that does without).
    pub fn client_supports(&self, kind: InputKind) -> bool {
        kind_declared(&self.client_capabilities(), kind)
    }

    /// The calling user's access token for credential provider `provider` — obtained, kept and
    /// refreshed by the host, so the plugin acts at the provider as the user who made this call
    /// and never holds a refresh token or another user's token. Ask for it in each call (do not
    /// keep it); send it only to the provider's API.
    ///
    /// The provider must be declared (`export_plugin!(permissions: { credentials: ["github"] })`,
    /// shown by `mcp-host check` and `mcp-host add`); the operator configures what it is. Errors:
    /// [`CredentialError::NotDeclared`], [`CredentialError::NoUser`] (an anonymous call),
    /// [`CredentialError::Unavailable`] (the user has not connected that account yet: the text
    /// says how — return it), [`CredentialError::Unsupported`] (an older host).
    ///
    /// ```
    /// use mcp_plugin_sdk::{CallContext, CredentialError, export_plugin, tool};
    ///
    /// /// The signed-in user's GitHub login.
    /// #[tool]
    /// pub fn my_login(ctx: &CallContext) -> Result<String, String> {
    ///     let github = ctx.credential("github")?;
    ///     // A real plugin sends it to the API, e.g. with ureq:
    ///     //   ureq::get("https://api.github.com/user")
    ///     //       .header("Authorization", &github.authorization()).call()
    ///     Ok(format!("would call GitHub with a {} token", github.token_type()))
    /// }
    ///
    /// export_plugin!(permissions: { net: ["api.github.com:443"], credentials: ["github"] });
    ///
    /// use mcp_plugin_sdk::testing::TestCall;
    /// let call = TestCall::new().with_credential("github", "gho_test");
    /// assert_eq!(my_login(&call.context()).unwrap(), "would call GitHub with a Bearer token");
    /// assert!(matches!(
    ///     TestCall::new().context().credential("github"),
    ///     Err(CredentialError::Unavailable(_))
    /// ));
    /// # fn main() {}
    /// ```
    pub fn credential(&self, provider: &str) -> Result<Credential, CredentialError> {
        let params = serde_json::json!({ "provider": provider }).to_string();
        match self.ffi.request(
            RStr::from_str(crate::credential::wire::METHOD),
            RStr::from_str(&params),
        ) {
            RResult::ROk(json) => crate::credential::decode(json.as_str()),
            RResult::RErr(e) => Err(crate::credential::decode_error(e.as_str())),
        }
    }

    /// A per-call capability by name, JSON in and out (the ABI's extension point).
    pub fn request(&self, method: &str, params: &Value) -> Result<Value, CallToolError> {
        let params = params.to_string();
        match self
            .ffi
            .request(RStr::from_str(method), RStr::from_str(&params))
        {
            RResult::ROk(json) => serde_json::from_str(json.as_str())
                .map_err(|e| CallToolError(format!("host returned unreadable JSON: {e}"))),
            RResult::RErr(e) => Err(CallToolError(e.into_string())),
        }
    }
}
