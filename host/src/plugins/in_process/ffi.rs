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

use crate::plugins::backend::{self, HostCallbacks, HostRequest};
use crate::plugins::call::{CallEvent, CallState};

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
        let answered = HostRequest::from_call_context(method.as_str(), params.as_str())
            .and_then(|request| self.answer(&request));
        match answered {
            Ok(json) => RResult::ROk(json.into()),
            Err(e) => RResult::RErr(e.to_plugin().into()),
        }
    }
}

/// A call's context as an in-process plugin holds it: the call, and the host and the plugin's
/// name for what the context asks that is the host's to answer (`credential/get`) — every
/// request goes through [`backend::answer`], as a worker's do.
pub(super) struct CallFfi<'a> {
    /// The call.
    pub(super) call: &'a Arc<CallState>,
    /// The host.
    pub(super) host: &'a dyn HostCallbacks,
    /// The plugin's name.
    pub(super) plugin: &'a str,
}

impl CallContextFfi for CallFfi<'_> {
    fn is_cancelled(&self) -> bool {
        CallState::is_cancelled(self.call)
    }

    fn progress(&self, progress: f64, total: f64, message: RStr<'_>) {
        CallContextFfi::progress(&**self.call, progress, total, message);
    }

    fn log(&self, level: u8, message: RStr<'_>) {
        CallContextFfi::log(&**self.call, level, message);
    }

    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        let answered = HostRequest::from_call_context(method.as_str(), params.as_str())
            .and_then(|request| backend::answer(self.host, self.plugin, Some(self.call), request));
        match answered {
            Ok(json) => RResult::ROk(json.into()),
            Err(e) => RResult::RErr(e.to_plugin().into()),
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

impl HostApiImpl {
    /// Answer a request the plugin made through its host API (in the innermost call running on
    /// this thread, if any), as the ABI carries it.
    fn answer(
        &self,
        request: Result<HostRequest, backend::HostRequestError>,
    ) -> RResult<RString, RString> {
        let parent = CurrentCall::innermost();
        let answered = request.and_then(|request| {
            backend::answer(&*self.host, &self.plugin, parent.as_ref(), request)
        });
        match answered {
            Ok(json) => RResult::ROk(json.into()),
            Err(e) => RResult::RErr(e.to_plugin().into()),
        }
    }
}

impl HostApiFfi for HostApiImpl {
    fn config(&self) -> RString {
        RString::from(self.config.as_str())
    }

    fn log(&self, level: u8, service: RStr<'_>, message: RStr<'_>) {
        crate::plugins::log_plugin_line(&self.plugin, level, service.as_str(), message.as_str());
    }

    fn call_tool(&self, name: RStr<'_>, args: RStr<'_>) -> RResult<RString, RString> {
        let request = HostRequest::CallTool {
            name: name.as_str().into(),
            args: args.as_str().into(),
        };
        self.answer(Ok(request))
    }

    fn request(&self, method: RStr<'_>, params: RStr<'_>) -> RResult<RString, RString> {
        self.answer(HostRequest::from_host_api(method.as_str(), params.as_str()))
    }
}
