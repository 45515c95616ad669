//! The host's side of the FFI objects: the host API each plugin gets at `init`, and the per-call
//! context behind `CallContext` (cancellation, deadline, progress and log events).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use abi_stable::std_types::{RResult, RStr, RString};
use mcp_plugin_sdk::LogLevel;

use crate::exec::{CallEvent, CancelFlag, EventSink};
use mcp_plugin_sdk::wire::{CallContextFfi, HostApiFfi};

/// The state of one call, handed to the plugin through the FFI call context.
pub struct HostCallContext {
    /// Set on client cancellation and on timeout.
    pub cancel: CancelFlag,
    /// When the call's time is up.
    pub deadline: Option<Instant>,
    /// Where progress and log events go.
    pub events: Option<EventSink>,
    /// The caller as JSON (empty when there is none), inherited by nested calls.
    pub caller_json: Arc<str>,
    /// Nesting depth (0 for a client's call).
    pub depth: u32,
    /// The tool being called, for log messages.
    pub tool: Arc<str>,
}

impl std::fmt::Debug for HostCallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCallContext")
            .field("tool", &self.tool)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl HostCallContext {
    fn cancelled(&self) -> bool {
        self.cancel.is_cancelled() || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

impl CallContextFfi for HostCallContext {
    fn is_cancelled(&self) -> bool {
        self.cancelled()
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

    fn request(&self, method: RStr<'_>, _params: RStr<'_>) -> RResult<RString, RString> {
        RResult::RErr(format!("unsupported call-context method: {method}").into())
    }
}

thread_local! {
    /// The calls running on this thread, innermost last: a plugin's `call_tool` happens on the same
    /// thread as the call that makes it, so this is how a nested call finds its parent.
    static CURRENT: RefCell<Vec<Arc<HostCallContext>>> = const { RefCell::new(Vec::new()) };
}

/// Marks `ctx` as the running call on this thread until dropped.
pub struct CurrentCall(());

impl CurrentCall {
    /// Push `ctx` as this thread's innermost running call.
    pub fn enter(ctx: Arc<HostCallContext>) -> CurrentCall {
        CURRENT.with(|c| c.borrow_mut().push(ctx));
        CurrentCall(())
    }

    /// The innermost call running on this thread.
    pub fn parent() -> Option<Arc<HostCallContext>> {
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

/// How a plugin's host API reaches the host: the current tool set, and its change notifications.
pub trait HostCallbacks: Send + Sync {
    /// Call `name` with JSON `args` on this thread, inheriting the parent call when there is one.
    fn call_nested(&self, name: &str, args: &str) -> Result<String, String>;
    /// Tell every listening client that the tool list changed.
    fn notify_tools_changed(&self);
}

/// The host API object one plugin holds.
pub struct HostApiImpl {
    plugin: String,
    config: String,
    nested: Arc<dyn HostCallbacks>,
}

impl HostApiImpl {
    /// The host API for plugin `plugin` with its `config` section.
    pub fn new(plugin: String, config: serde_json::Value, nested: Arc<dyn HostCallbacks>) -> Self {
        HostApiImpl {
            plugin,
            config: config.to_string(),
            nested,
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
        match self.nested.call_nested(name.as_str(), args.as_str()) {
            Ok(json) => RResult::ROk(json.into()),
            Err(e) => RResult::RErr(e.into()),
        }
    }

    fn request(&self, method: RStr<'_>, _params: RStr<'_>) -> RResult<RString, RString> {
        match method.as_str() {
            "notify_tools_changed" => {
                self.nested.notify_tools_changed();
                RResult::ROk("null".into())
            }
            other => RResult::RErr(format!("unsupported host method: {other}").into()),
        }
    }
}
