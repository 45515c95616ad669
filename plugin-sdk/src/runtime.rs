//! The plugin-side runtime behind the exported entry points: tool registration, services, and the
//! `catch_unwind` wall that keeps every panic on the plugin's side of the FFI boundary.

use std::any::{Any, TypeId};
use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use abi_stable::std_types::{RResult, RStr, RString};
use serde::de::DeserializeOwned;

use crate::abi::{BuildInfo, CallContextRef, HostApiBox};
use crate::content::ToolResult;
use crate::host::{CallContext, HostApi, LogLevel, UserInfo};
use crate::manifest::{Manifest, ServiceDescriptor, ToolDescriptor};

/// One tool as the macros describe it: how to describe it, and how to run it against a service `S`
/// (`()` for a free function).
pub struct ToolSpec<S> {
    /// Builds the tool's descriptor (schemas are generated here, once, at `init`).
    pub descriptor: fn() -> ToolDescriptor,
    /// Runs the tool.
    pub handler: fn(&S, &Invocation<'_>) -> ToolResult,
}

/// A `#[tool]` free function (implemented by the macro on a type named after the function).
pub trait ToolFactory {
    /// The tool's spec.
    fn spec() -> ToolSpec<()>;
}

/// A `#[service]` impl block: a named group of tools sharing one value constructed at load.
pub trait Service: Sized + Send + Sync + 'static {
    /// The service name (the type's name).
    const NAME: &'static str;
    /// The doc comment on the impl block.
    const DESCRIPTION: Option<&'static str>;
    /// The `enabled()` gate; `true` when the impl block has none.
    fn enabled(host: &HostApi) -> bool;
    /// Build the service value: its `new` function, or `Default`.
    fn construct(host: &HostApi) -> Result<Self, String>;
    /// The service's tools, in declaration order.
    fn tools() -> Vec<ToolSpec<Self>>;
    /// The `shutdown(&self)` hook: the host retired this version of the plugin (after its last call).
    fn shutdown(&self) {}
}

/// The arguments of one call, as the generated handler sees them.
pub struct Invocation<'a> {
    args: &'a str,
    caller: &'a str,
    ctx: CallContext<'a>,
}

impl<'a> Invocation<'a> {
    /// Deserialize the arguments into the tool's generated argument struct.
    pub fn parse_args<T: DeserializeOwned>(&self) -> Result<T, ToolResult> {
        let text = if self.args.trim().is_empty() {
            "{}"
        } else {
            self.args
        };
        serde_json::from_str(text).map_err(|e| ToolResult::error(format!("invalid arguments: {e}")))
    }

    /// The caller, required: an error result when the host supplied none.
    pub fn caller(&self) -> Result<UserInfo, ToolResult> {
        self.optional_caller()?.ok_or_else(|| {
            ToolResult::error("this tool needs an authenticated caller, and the call had none")
        })
    }

    /// The caller, when there is one.
    pub fn optional_caller(&self) -> Result<Option<UserInfo>, ToolResult> {
        if self.caller.is_empty() {
            return Ok(None);
        }
        serde_json::from_str(self.caller)
            .map(Some)
            .map_err(|e| ToolResult::error(format!("unreadable caller from host: {e}")))
    }

    /// The call context.
    pub fn ctx(&self) -> &CallContext<'a> {
        &self.ctx
    }

    /// The host API.
    pub fn host(&self) -> &HostApi {
        self.ctx.host()
    }
}

#[cfg(feature = "testing")]
impl<'a> Invocation<'a> {
    /// A call with JSON `args`, the caller as JSON (empty for none) and its context.
    pub(crate) fn new(args: &'a str, caller: &'a str, ctx: CallContext<'a>) -> Self {
        Invocation { args, caller, ctx }
    }
}

pub(crate) type Handler = Box<dyn Fn(&Invocation<'_>) -> ToolResult + Send + Sync>;
type ShutdownHook = Box<dyn Fn() + Send + Sync>;

/// A plugin's tools, ready to run: what `init` keeps for the life of the image, and what the test
/// kit keeps for one [`TestPlugin`](crate::testing::TestPlugin).
pub(crate) struct PluginState {
    pub(crate) host: HostApi,
    /// Per tool, in manifest order.
    pub(crate) handlers: Vec<Handler>,
    shutdown_hooks: Vec<ShutdownHook>,
}

impl PluginState {
    /// Run every service's `shutdown` hook (a panicking hook is contained).
    pub(crate) fn shut_down(&self) {
        for hook in &self.shutdown_hooks {
            let _ = catch_unwind(AssertUnwindSafe(hook));
        }
    }
}

/// The `export_plugin!()` of a crate: its name, version and registration, collected at load like
/// the tools, so the test kit loads a plugin crate exactly as its export does.
#[derive(Debug)]
pub struct PluginExport {
    /// `module_path!()` of the `export_plugin!` call.
    pub module: &'static str,
    /// The plugin's name.
    pub name: &'static str,
    /// The plugin crate's version.
    pub version: &'static str,
    /// Registers its tools and services.
    pub register: fn(&mut Registrar),
}

inventory::collect!(PluginExport);

/// Every `export_plugin!()` linked into this binary (in a plugin crate's own tests: its own).
#[cfg(feature = "testing")]
pub(crate) fn plugin_exports() -> Vec<&'static PluginExport> {
    inventory::iter::<PluginExport>.into_iter().collect()
}

static STATE: OnceLock<PluginState> = OnceLock::new();

/// Whether an [`AutoExport`] is a free tool or a service (tools are registered first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExportKind {
    /// A `#[tool]` free function.
    Tool,
    /// A `#[service]` impl block.
    Service,
}

/// A `#[tool]` or `#[service]`, submitted by the macro expansion and collected at load time (each
/// entry is added by a constructor that runs when the library is loaded), so `export_plugin!` finds
/// every one without a list.
#[derive(Debug)]
pub struct AutoExport {
    /// `module_path!()` where it was defined; its first segment is the defining crate.
    pub module: &'static str,
    /// The function's or type's name.
    pub name: &'static str,
    /// Tool or service.
    pub kind: ExportKind,
    /// Registers it.
    pub register: fn(&mut Registrar),
}

impl AutoExport {
    /// The entry of the `#[tool]` function `T`.
    pub const fn tool<T: ToolFactory + 'static>(module: &'static str, name: &'static str) -> Self {
        AutoExport {
            module,
            name,
            kind: ExportKind::Tool,
            register: Registrar::tool::<T>,
        }
    }

    /// The entry of the `#[service]` `S`.
    pub const fn service<S: Service>(module: &'static str, name: &'static str) -> Self {
        AutoExport {
            module,
            name,
            kind: ExportKind::Service,
            register: Registrar::service::<S>,
        }
    }
}

inventory::collect!(AutoExport);

/// The crate a `module_path!()` belongs to.
fn crate_of(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The `#[tool]`s and `#[service]`s defined in the crate of `module`, in registration order: free
/// tools, then services, each by name (then module). Other crates' entries are left out, so what a
/// plugin exports never depends on which of a dependency's objects the linker kept.
fn select<'a>(
    entries: impl IntoIterator<Item = &'a AutoExport>,
    module: &str,
) -> Vec<&'a AutoExport> {
    let krate = crate_of(module);
    let mut found: Vec<&AutoExport> = entries
        .into_iter()
        .filter(|e| crate_of(e.module) == krate)
        .collect();
    found.sort_by_key(|e| (e.kind, e.name, e.module));
    found
}

/// Collects a plugin's tools and services during `init`.
pub struct Registrar {
    host: HostApi,
    services: Vec<ServiceDescriptor>,
    tools: Vec<ToolDescriptor>,
    handlers: Vec<Handler>,
    shutdown_hooks: Vec<ShutdownHook>,
    /// The tool and service types registered so far: each is registered once, however often it
    /// is listed or found.
    registered: HashSet<TypeId>,
}

impl Registrar {
    /// Register everything `#[tool]` and `#[service]` defined in the crate of `module` (the crate
    /// calling `export_plugin!`) that is not registered yet.
    pub fn auto_exports(&mut self, module: &str) {
        for export in select(inventory::iter::<AutoExport>, module) {
            (export.register)(self);
        }
    }

    /// Register a free `#[tool]` function (once: a repeat is ignored).
    pub fn tool<T: ToolFactory + 'static>(&mut self) {
        if !self.registered.insert(TypeId::of::<T>()) {
            return;
        }
        let spec = T::spec();
        let handler = spec.handler;
        self.tools.push((spec.descriptor)());
        self.handlers.push(Box::new(move |inv| handler(&(), inv)));
    }

    /// Register a `#[service]`: evaluate `enabled()`, construct it once, register its tools (once:
    /// a repeat is ignored).
    pub fn service<S: Service>(&mut self) {
        if !self.registered.insert(TypeId::of::<S>()) {
            return;
        }
        let host = self.host.clone();
        let gate = catch_unwind(AssertUnwindSafe(|| S::enabled(&host)));
        let built: Result<Arc<S>, (String, bool)> = match gate {
            Ok(true) => match catch_unwind(AssertUnwindSafe(|| S::construct(&host))) {
                Ok(Ok(service)) => Ok(Arc::new(service)),
                Ok(Err(e)) => Err((format!("constructor failed: {e}"), true)),
                Err(p) => Err((
                    format!("constructor panicked: {}", panic_message(&*p)),
                    true,
                )),
            },
            Ok(false) => Err(("enabled() returned false".to_owned(), false)),
            Err(p) => Err((format!("enabled() panicked: {}", panic_message(&*p)), true)),
        };
        if let Ok(service) = &built {
            let service = Arc::clone(service);
            self.shutdown_hooks
                .push(Box::new(move || service.shutdown()));
        }
        let (enabled, reason, failed) = match &built {
            Ok(_) => (true, None, false),
            Err((why, failed)) => (false, Some(why.clone()), *failed),
        };
        self.services.push(ServiceDescriptor {
            name: S::NAME.to_owned(),
            description: S::DESCRIPTION.map(str::to_owned),
            enabled,
            disabled_reason: reason,
            failed,
        });
        for spec in S::tools() {
            let mut descriptor = (spec.descriptor)();
            descriptor.service = Some(S::NAME.to_owned());
            self.tools.push(descriptor);
            let handler = spec.handler;
            self.handlers.push(match &built {
                Ok(service) => {
                    let service = Arc::clone(service);
                    Box::new(move |inv| handler(&service, inv))
                }
                Err(_) => Box::new(|_| ToolResult::error("this tool's service is disabled")),
            });
        }
    }
}

/// The build fingerprint of a plugin named `plugin` at `version`, as JSON.
pub fn build_info(plugin: &str, version: &str) -> RString {
    let info = BuildInfo {
        plugin: plugin.to_owned(),
        plugin_version: version.to_owned(),
        ..BuildInfo::host()
    };
    RString::from(serde_json::to_string(&info).unwrap_or_default())
}

/// The `init` entry point: register everything and return the manifest.
pub fn init(
    ffi: HostApiBox,
    plugin: &str,
    version: &str,
    register: fn(&mut Registrar),
) -> RResult<RString, RString> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let host = HostApi::new(ffi, plugin);
        install_panic_hook(host.clone());
        let (manifest, state) = load(host, plugin, version, register);
        let json = serde_json::to_string(&manifest)
            .map_err(|e| format!("manifest could not be serialized: {e}"))?;
        STATE
            .set(state)
            .map_err(|_| "init called twice on the same plugin image".to_owned())?;
        Ok::<_, String>(json)
    }));
    match outcome {
        Ok(Ok(json)) => RResult::ROk(json.into()),
        Ok(Err(e)) => RResult::RErr(e.into()),
        Err(p) => RResult::RErr(format!("init panicked: {}", panic_message(&*p)).into()),
    }
}

/// Register a plugin's tools and services with `host` (evaluating each service's `enabled()` and
/// constructing it): its manifest, and its tools ready to run.
pub(crate) fn load(
    host: HostApi,
    plugin: &str,
    version: &str,
    register: fn(&mut Registrar),
) -> (Manifest, PluginState) {
    let mut registrar = Registrar {
        host: host.clone(),
        services: Vec::new(),
        tools: Vec::new(),
        handlers: Vec::new(),
        shutdown_hooks: Vec::new(),
        registered: HashSet::new(),
    };
    register(&mut registrar);
    let manifest = Manifest {
        plugin: plugin.to_owned(),
        version: version.to_owned(),
        sdk_version: crate::abi::SDK_VERSION.to_owned(),
        services: registrar.services,
        tools: registrar.tools,
    };
    let state = PluginState {
        host,
        handlers: registrar.handlers,
        shutdown_hooks: registrar.shutdown_hooks,
    };
    (manifest, state)
}

/// Run one tool's handler, turning a panic into an error result.
pub(crate) fn invoke(handler: &Handler, invocation: &Invocation<'_>) -> ToolResult {
    catch_unwind(AssertUnwindSafe(|| handler(invocation)))
        .unwrap_or_else(|p| ToolResult::error(format!("tool panicked: {}", panic_message(&*p))))
}

/// The `call` entry point: run tool number `tool`, turning a panic into an error result.
pub fn call(
    tool: u32,
    args: RStr<'_>,
    caller: RStr<'_>,
    ctx: CallContextRef<'_>,
) -> RResult<RString, RString> {
    let Some(state) = STATE.get() else {
        return RResult::RErr("plugin called before init".into());
    };
    let Some(handler) = state.handlers.get(tool as usize) else {
        return RResult::RErr(format!("plugin has no tool #{tool}").into());
    };
    let invocation = Invocation {
        args: args.as_str(),
        caller: caller.as_str(),
        ctx: CallContext::new(ctx.sabi_reborrow(), &state.host),
    };
    let result = invoke(handler, &invocation);
    // Serializing our own types cannot fail; guard anyway so nothing unwinds out of here.
    match catch_unwind(AssertUnwindSafe(|| serde_json::to_string(&result))) {
        Ok(Ok(json)) => RResult::ROk(json.into()),
        _ => RResult::RErr("tool result could not be serialized".into()),
    }
}

/// The `shutdown` entry point: run the services' `shutdown` hooks, then stop the plugin's async
/// runtime if it started one. Each hook runs once; a panicking hook is contained.
pub fn shutdown() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    if let Some(state) = STATE.get() {
        state.shut_down();
    }
    let _ = catch_unwind(|| {
        #[cfg(feature = "async")]
        crate::async_rt::shutdown();
    });
}

fn install_panic_hook(host: HostApi) {
    std::panic::set_hook(Box::new(move |info| {
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = panic_message(info.payload());
        host.log(LogLevel::Error, "", &format!("panic{location}: {message}"));
    }));
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(module: &'static str, name: &'static str, kind: ExportKind) -> AutoExport {
        AutoExport {
            module,
            name,
            kind,
            register: |_| {},
        }
    }

    #[test]
    fn only_the_exporting_crates_items_are_selected_tools_first_then_by_name() {
        let entries = [
            entry("plugin::store", "Store", ExportKind::Service),
            entry("plugin", "zeta", ExportKind::Tool),
            entry("other_crate", "alpha", ExportKind::Tool),
            entry("plugin::util", "alpha", ExportKind::Tool),
            entry("plugin_extra", "beta", ExportKind::Tool),
            entry("plugin", "Clock", ExportKind::Service),
        ];
        let picked: Vec<(&str, &str)> = select(&entries, "plugin")
            .iter()
            .map(|e| (e.module, e.name))
            .collect();
        assert_eq!(
            picked,
            [
                ("plugin::util", "alpha"),
                ("plugin", "zeta"),
                ("plugin", "Clock"),
                ("plugin::store", "Store"),
            ]
        );
        assert!(select(&entries, "nobody::here").is_empty());
    }
}
