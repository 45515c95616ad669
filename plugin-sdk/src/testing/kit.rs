//! The author test kit: a plugin crate loaded in its own tests as the host loads it, its tools
//! called by name with JSON arguments, checked and answered as the host does.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{TestCall, TestHost};
use crate::content::ToolResult;
use crate::host::UserInfo;
use crate::manifest::{CallerNeed, Manifest, ToolDescriptor, is_valid_tool_name};
use crate::runtime::{self, Invocation, PluginExport, PluginState};
use crate::validation::InputValidator;

/// Why a call never reached the tool: what the host answers with a protocol error instead of a
/// tool result.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TestCallError {
    /// The host serves no tool of this name (JSON-RPC `-32602 Unknown tool`): the plugin does not
    /// export it, its service is disabled, or its name or input schema is unusable (see
    /// [`TestPlugin::problems`]).
    UnknownTool(String),
    /// The tool takes `UserInfo` and the call had no caller (HTTP 401 from the host).
    CallerRequired(String),
}

impl std::fmt::Display for TestCallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestCallError::UnknownTool(name) => write!(f, "Unknown tool: {name}"),
            TestCallError::CallerRequired(name) => {
                write!(f, "tool {name} requires an authenticated caller")
            }
        }
    }
}

impl std::error::Error for TestCallError {}

/// A tool the host would serve: its descriptor, its compiled input schema, its handler's index.
struct Served {
    descriptor: ToolDescriptor,
    validator: InputValidator,
    index: usize,
}

/// This crate's plugin, loaded in its own tests without a host process: what `export_plugin!()`
/// exports (same name, services, `enabled()` gates and constructors), on a [`TestHost`].
///
/// Call a tool by name with JSON arguments, as a client would: the arguments are checked against
/// the tool's input schema with the host's own validator (a failure is the host's `isError`
/// result, word for word), the caller is injected only into tools that take one, a panic is the
/// host's `tool panicked: ...` result, and the result goes through JSON as it does on the wire.
/// [`TestPlugin::tools`] shows each tool as `tools/list` does (schemas included).
///
/// Enable it with the SDK's `testing` feature, for tests only:
///
/// ```toml
/// [dev-dependencies]
/// mcp-plugin-sdk = { path = "...", features = ["testing"] }
/// ```
///
/// ```
/// use mcp_plugin_sdk::testing::{CallEvent, TestCallError, TestHost, TestPlugin};
/// use mcp_plugin_sdk::{CallContext, HostApi, LogLevel, UserInfo, export_plugin, json, service};
///
/// pub struct Counter { start: u64 }
///
/// #[service]
/// impl Counter {
///     fn enabled(host: &HostApi) -> bool { host.config_value("off").is_none() }
///
///     pub fn new(host: &HostApi) -> Self {
///         Counter { start: host.config_value("start").and_then(|v| v.as_u64()).unwrap_or(0) }
///     }
///
///     /// Count from the configured start, for the caller.
///     ///
///     /// # Arguments
///     /// * `by` - How far to count.
///     pub fn count(&self, caller: UserInfo, ctx: &CallContext, #[arg(min = 1, max = 10)] by: u64) -> String {
///         ctx.log(LogLevel::Info, "counting");
///         format!("{}: {}", caller.user_id, self.start + by)
///     }
/// }
///
/// export_plugin!();
///
/// let plugin = TestPlugin::with_host(TestHost::new().with_config(json!({"start": 40})));
/// let ana = UserInfo::new("ana");
/// assert_eq!(plugin.call_as(&ana, "count", json!({"by": 2})).unwrap().text(), "ana: 42");
///
/// // The host's own checks and messages.
/// let bad = plugin.call_as(&ana, "count", json!({"by": 11})).unwrap();
/// assert!(bad.is_error);
/// assert_eq!(bad.text(), "Invalid arguments for tool count: argument `by`: 11 is greater than the maximum of 10 (rule: maximum)");
/// assert_eq!(plugin.call("count", json!({"by": 1})), Err(TestCallError::CallerRequired("count".into())));
/// assert_eq!(plugin.call("nope", json!({})), Err(TestCallError::UnknownTool("nope".into())));
///
/// // What the tool reported, and what clients see of it.
/// let call = plugin.host().call();
/// plugin.call_with(&call, Some(&ana), "count", json!({"by": 1})).unwrap();
/// assert_eq!(call.events(), [CallEvent::Log { level: LogLevel::Info, message: "counting".into() }]);
/// assert_eq!(plugin.tool("count").unwrap()["inputSchema"]["properties"]["by"]["maximum"], 10);
///
/// // A service its `enabled()` turns off serves nothing.
/// let off = TestPlugin::with_host(TestHost::new().with_config(json!({"off": true})));
/// assert!(off.tools().is_empty());
/// assert_eq!(off.problems()["count"], "service Counter is disabled: enabled() returned false");
/// ```
pub struct TestPlugin {
    host: TestHost,
    manifest: Manifest,
    state: PluginState,
    served: BTreeMap<String, Served>,
    problems: BTreeMap<String, String>,
}

impl std::fmt::Debug for TestPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPlugin")
            .field("plugin", &self.manifest.plugin)
            .field("tools", &self.served.keys().collect::<Vec<_>>())
            .field("problems", &self.problems)
            .finish_non_exhaustive()
    }
}

impl TestPlugin {
    /// This crate's plugin on a [`TestHost::new`] (no configuration, no data directory, no other
    /// tools).
    ///
    /// # Panics
    ///
    /// When the test binary has no `export_plugin!()`, or more than one (then use
    /// [`TestPlugin::named`]).
    pub fn new() -> Self {
        Self::with_host(TestHost::new())
    }

    /// This crate's plugin on `host`: its configuration, data directory and answers for nested
    /// calls are what the plugin gets; its records (host log, nested calls) fill as the tools run.
    ///
    /// # Panics
    ///
    /// As [`TestPlugin::new`].
    pub fn with_host(host: TestHost) -> Self {
        let exports = runtime::plugin_exports();
        match exports.as_slice() {
            [export] => Self::load(export, host),
            [] => panic!(
                "TestPlugin: no export_plugin!() in this test binary (call it once in the plugin \
                 crate, then test from that crate's own #[cfg(test)] modules)"
            ),
            several => panic!(
                "TestPlugin: several plugins in this test binary ({}): use TestPlugin::named",
                several
                    .iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The plugin called `name` (its `export_plugin!` name) on `host`, for a test binary that
    /// links several.
    ///
    /// # Panics
    ///
    /// When no plugin of that name is linked in.
    pub fn named(name: &str, host: TestHost) -> Self {
        let exports = runtime::plugin_exports();
        match exports.iter().find(|e| e.name == name) {
            Some(export) => Self::load(export, host),
            None => panic!(
                "TestPlugin: no plugin named {name} in this test binary (found: {})",
                exports
                    .iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn load(export: &PluginExport, host: TestHost) -> Self {
        let (manifest, state) = runtime::load(
            host.api().clone(),
            export.name,
            export.version,
            export.register,
        );
        let mut served = BTreeMap::new();
        let mut problems = BTreeMap::new();
        for (index, tool) in manifest.tools.iter().enumerate() {
            match admit(&manifest, tool, &served) {
                Ok(validator) => {
                    served.insert(
                        tool.name.clone(),
                        Served {
                            descriptor: tool.clone(),
                            validator,
                            index,
                        },
                    );
                }
                Err(problem) => {
                    problems.entry(tool.name.clone()).or_insert(problem);
                }
            }
        }
        TestPlugin {
            host,
            manifest,
            state,
            served,
            problems,
        }
    }

    /// The test host the plugin runs on: make [`TestCall`]s with [`TestHost::call`], read the
    /// host log and the nested calls.
    pub fn host(&self) -> &TestHost {
        &self.host
    }

    /// The plugin's name, as the host lists it.
    pub fn name(&self) -> &str {
        &self.manifest.plugin
    }

    /// The tools the host would serve, as `tools/list` shows them (name order): `name`,
    /// `description`, `inputSchema`, and `title`, `outputSchema`, `annotations` when set.
    pub fn tools(&self) -> Vec<Value> {
        self.served
            .values()
            .map(|s| s.descriptor.listing())
            .collect()
    }

    /// Tool `name` as `tools/list` shows it, when the host would serve it.
    pub fn tool(&self, name: &str) -> Option<Value> {
        self.served.get(name).map(|s| s.descriptor.listing())
    }

    /// The tools the host would not serve, each with the reason (a disabled service, a name
    /// clients reject, an unusable input schema, a name exported twice).
    pub fn problems(&self) -> BTreeMap<String, String> {
        self.problems.clone()
    }

    /// Call tool `name` with JSON `args` and no caller, as an anonymous client would.
    pub fn call(&self, name: &str, args: Value) -> Result<ToolResult, TestCallError> {
        self.call_with(&self.host.call(), None, name, args)
    }

    /// Call tool `name` with JSON `args` as `caller` (the verified caller the host injects into
    /// tools that take `UserInfo`).
    pub fn call_as(
        &self,
        caller: &UserInfo,
        name: &str,
        args: Value,
    ) -> Result<ToolResult, TestCallError> {
        self.call_with(&self.host.call(), Some(caller), name, args)
    }

    /// Call tool `name` with JSON `args`, as `caller` when given, in `call` (from
    /// [`TestHost::call`] on [`TestPlugin::host`]): it records the progress and log events the
    /// tool sends and can be cancelled beforehand.
    pub fn call_with(
        &self,
        call: &TestCall,
        caller: Option<&UserInfo>,
        name: &str,
        args: Value,
    ) -> Result<ToolResult, TestCallError> {
        let tool = self
            .served
            .get(name)
            .ok_or_else(|| TestCallError::UnknownTool(name.to_owned()))?;
        if let Err(message) = tool.validator.check(name, &args) {
            return Ok(ToolResult::error(message));
        }
        let caller = match (caller, tool.descriptor.caller) {
            (None, CallerNeed::Required) => {
                return Err(TestCallError::CallerRequired(name.to_owned()));
            }
            (Some(caller), CallerNeed::Optional | CallerNeed::Required) => {
                serde_json::to_string(caller).unwrap_or_default()
            }
            _ => String::new(),
        };
        let args = args.to_string();
        let handler = &self.state.handlers[tool.index];
        let result = runtime::invoke(handler, &Invocation::new(&args, &caller, call.context()));
        // Through JSON, as on the wire: what the client gets is what the test sees.
        Ok(serde_json::to_value(&result)
            .and_then(serde_json::from_value)
            .unwrap_or_else(|e| ToolResult::error(format!("the tool result is not JSON: {e}"))))
    }
}

impl Default for TestPlugin {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestPlugin {
    /// Run the services' `shutdown` hooks, as the host does when it retires a plugin.
    fn drop(&mut self) {
        self.state.shut_down();
    }
}

/// Whether the host would serve `tool` (the registry's rules, minus what only a host with other
/// plugins and prefixes can decide): its compiled schema, or why not.
fn admit(
    manifest: &Manifest,
    tool: &ToolDescriptor,
    served: &BTreeMap<String, Served>,
) -> Result<InputValidator, String> {
    if let Some(service) = manifest.disabled_service_of(tool) {
        return Err(format!(
            "service {} is disabled: {}",
            service.name,
            service.disabled_reason.as_deref().unwrap_or("disabled")
        ));
    }
    if !is_valid_tool_name(&tool.name) {
        return Err("invalid name: must match ^[a-zA-Z0-9_-]{1,64}$".into());
    }
    if served.contains_key(&tool.name) {
        return Err("exported twice: the first definition is served".into());
    }
    InputValidator::compile(&tool.input_schema)
        .map_err(|why| format!("invalid input schema: {why}"))
}
