//! The host's side of the FFI objects for in-process plugins: the host API each plugin gets at
//! `init`, and the call context behind the SDK's `CallContext` (a view of the host's
//! [`CallState`]).
//!
//! A plugin's `call_tool` arrives on the host API without saying which call makes it. In-process,
//! it always runs on the thread of that call, so a thread-local stack of running calls names the
//! parent; the nested call itself then goes through [`HostCallbacks::call_nested`] with that parent
//! passed explicitly. The thread-local never leaves this module.

use std::cell::RefCell;
use std::sync::Arc;

use abi_stable::std_types::{RResult, RStr, RString};
use mcp_plugin_sdk::LogLevel;
use mcp_plugin_sdk::wire::{CallContextFfi, HostApiFfi};

use crate::exec::{CallEvent, CallState};
use crate::plugins::backend::{Change, HostCallbacks};

impl CallContextFfi for CallState {
    fn is_cancelled(&self) -> bool {
        CallState::is_cancelled(self)
    }

    fn progress(&self, progress: f64, total: f64, message: RStr<'_>) {
        if let Some(sink) = &self.events {
            sink(CallEvent::Progress {
                progress,
                total: (!total.is_nan()).then_some(total),
                message: (!message.is_empty()).then(|| message.as_str().to_owned()),
            });
        }
    }

    fn log(&self, level: u8, message: RStr<'_>) {
        if let Some(sink) = &self.events {
            sink(CallEvent::Log {
                level: LogLevel::from_u8(level),
                message: message.as_str().to_owned(),
                logger: self.tool.to_string(),
            });
        }
    }

    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        match (method.as_str(), &self.input) {
            ("client/capabilities", Some(input)) => {
                RResult::ROk(input.capabilities().to_string().into())
            }
            ("client/capabilities", None) => RResult::ROk("{}".into()),
            ("task/start", input) => {
                if let Some(input) = input {
                    input.start_task();
                }
                RResult::ROk("null".into())
            }
            ("input/ask", Some(input)) => match input.ask(params.as_str(), self) {
                Ok(answers) => RResult::ROk(answers.to_string().into()),
                Err(e) => RResult::RErr(mcp_plugin_sdk::wire::encode_input_error(&e).into()),
            },
            ("input/ask", None) => RResult::RErr(
                mcp_plugin_sdk::wire::encode_input_error(&mcp_plugin_sdk::InputError::Failed(
                    "this call has no client to ask (e.g. `mcp-host call`)".into(),
                ))
                .into(),
            ),
            (other, _) => RResult::RErr(format!("unsupported call-context method: {other}").into()),
        }
    }
}

thread_local! {
    /// The calls running on this thread, innermost last.
    static CURRENT: RefCell<Vec<Arc<CallState>>> = const { RefCell::new(Vec::new()) };
}

/// Marks a call as running on this thread until dropped.
pub(super) struct CurrentCall(());

impl CurrentCall {
    /// Push `call` as this thread's innermost running call.
    pub(super) fn enter(call: Arc<CallState>) -> CurrentCall {
        CURRENT.with(|c| c.borrow_mut().push(call));
        CurrentCall(())
    }

    /// The innermost call running on this thread.
    fn innermost() -> Option<Arc<CallState>> {
        CURRENT.with(|c| c.borrow().last().cloned())
    }
}

impl Drop for CurrentCall {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            c.borrow_mut().pop();
        });
    }
}

/// The host API object one plugin holds.
pub(super) struct HostApiImpl {
    plugin: String,
    config: String,
    host: Arc<dyn HostCallbacks>,
}

impl HostApiImpl {
    /// The host API for plugin `plugin` with its `config` section.
    pub(super) fn new(
        plugin: String,
        config: &serde_json::Value,
        host: Arc<dyn HostCallbacks>,
    ) -> Self {
        HostApiImpl {
            plugin,
            config: config.to_string(),
            host,
        }
    }
}

impl HostApiFfi for HostApiImpl {
    fn config(&self) -> RString {
        RString::from(self.config.as_str())
    }

    fn log(&self, level: u8, service: RStr<'_>, message: RStr<'_>) {
        let plugin = self.plugin.as_str();
        let service = service.as_str();
        let message = message.as_str();
        match LogLevel::from_u8(level) {
            LogLevel::Debug => tracing::debug!(plugin, service, "{message}"),
            LogLevel::Info | LogLevel::Notice => tracing::info!(plugin, service, "{message}"),
            LogLevel::Warning => tracing::warn!(plugin, service, "{message}"),
            _ => tracing::error!(plugin, service, "{message}"),
        }
    }

    fn call_tool(&self, name: RStr<'_>, args: RStr<'_>) -> RResult<RString, RString> {
        let parent = CurrentCall::innermost();
        match self
            .host
            .call_nested(parent.as_ref(), name.as_str(), args.as_str())
        {
            Ok(json) => RResult::ROk(json.into()),
            Err(e) => RResult::RErr(e.into()),
        }
    }

    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        let lists = |tools, resources, prompts| Change::Lists {
            tools,
            resources,
            prompts,
        };
        let change = match method.as_str() {
            "notify_tools_changed" => lists(true, false, false),
            "notify_resources_changed" => lists(false, true, false),
            "notify_prompts_changed" => lists(false, false, true),
            "notify_resource_updated" => {
                let params: serde_json::Value =
                    serde_json::from_str(params.as_str()).unwrap_or_default();
                match params.get("uri").and_then(serde_json::Value::as_str) {
                    Some(uri) => Change::ResourceUpdated(uri.into()),
                    None => return RResult::RErr("notify_resource_updated needs a \"uri\"".into()),
                }
            }
            other => return RResult::RErr(format!("unsupported host method: {other}").into()),
        };
        self.host.announce(change);
        RResult::ROk("null".into())
    }
}
