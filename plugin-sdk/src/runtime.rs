//! The plugin-side runtime behind the exported entry points: tool registration, services, and the
//! `catch_unwind` wall that keeps every panic on the plugin's side of the FFI boundary.

use std::any::{Any, TypeId};
use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use abi_stable::std_types::{RResult, RStr, RString};
use serde::de::DeserializeOwned;

use crate::abi::{BuildInfo, CallContextRef, HostApiBox};
use crate::completion::{Completion, CompletionRequest};
use crate::content::ToolResult;
use crate::host::{CallContext, HostApi, LogLevel, UserInfo};
use crate::manifest::{
    CallEnvelope, CompletionTarget, DeclaredPermissions, ENVELOPE_INDEX, EnvelopeError,
    EnvelopeErrorKind, EnvelopeOutcome, Manifest, PromptDescriptor, ResourceDescriptor,
    ServiceDescriptor, ToolDescriptor,
};

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

/// What a resource read, a prompt or a completion produced: an MCP result, or why there is none.
pub type EnvelopeResult = Result<serde_json::Value, EnvelopeError>;

/// A completion function of one argument, against a service `S`.
pub type Completer<S> = (&'static str, fn(&S, &CompletionRequest) -> Completion);

/// One resource or prompt as the macros describe it (like [`ToolSpec`]), with the completion
/// functions of its arguments.
pub struct SurfaceSpec<S, D> {
    /// Builds the descriptor.
    pub descriptor: fn() -> D,
    /// Reads the resource or renders the prompt.
    pub handler: fn(&S, &Invocation<'_>) -> EnvelopeResult,
    /// Completion functions by argument name.
    pub completers: Vec<Completer<S>>,
}

/// A `#[resource]` (or resource template).
pub type ResourceSpec<S> = SurfaceSpec<S, ResourceDescriptor>;
/// A `#[prompt]`.
pub type PromptSpec<S> = SurfaceSpec<S, PromptDescriptor>;

/// A `#[resource]` free function.
pub trait ResourceFactory {
    /// The resource's spec.
    fn spec() -> ResourceSpec<()>;
}

/// A `#[prompt]` free function.
pub trait PromptFactory {
    /// The prompt's spec.
    fn spec() -> PromptSpec<()>;
}

/// An [`EnvelopeError`] of kind `kind`.
pub fn envelope_error(kind: EnvelopeErrorKind, message: impl Into<String>) -> EnvelopeError {
    EnvelopeError {
        kind,
        message: message.into(),
    }
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
    /// The service's resources and resource templates, in declaration order.
    fn resources() -> Vec<ResourceSpec<Self>> {
        Vec::new()
    }
    /// The service's prompts, in declaration order.
    fn prompts() -> Vec<PromptSpec<Self>> {
        Vec::new()
    }
    /// The `shutdown(&self)` hook: the host retired this version of the plugin (after its last call).
    fn shutdown(&self) {}
}

/// The arguments of one call, as the generated handler sees them.
pub struct Invocation<'a> {
    args: &'a str,
    caller: &'a str,
    /// The URI read (resources only).
    uri: &'a str,
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

    /// Deserialize a resource's template variables or a prompt's arguments.
    pub fn parse_envelope_args<T: DeserializeOwned>(&self) -> Result<T, EnvelopeError> {
        serde_json::from_str(self.args).map_err(|e| {
            envelope_error(
                EnvelopeErrorKind::Invalid,
                format!("invalid arguments: {e}"),
            )
        })
    }

    /// The caller of a resource read or prompt, required.
    pub fn envelope_caller(&self) -> Result<UserInfo, EnvelopeError> {
        self.caller()
            .map_err(|r| envelope_error(EnvelopeErrorKind::Invalid, r.text()))
    }

    /// The caller of a resource read or prompt, when there is one.
    pub fn envelope_optional_caller(&self) -> Result<Option<UserInfo>, EnvelopeError> {
        self.optional_caller()
            .map_err(|r| envelope_error(EnvelopeErrorKind::Failed, r.text()))
    }

    /// The URI being read (resources only).
    pub fn uri(&self) -> &str {
        self.uri
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
        Invocation {
            args,
            caller,
            uri: "",
            ctx,
        }
    }
}

pub(crate) type Handler = Box<dyn Fn(&Invocation<'_>) -> ToolResult + Send + Sync>;
type ShutdownHook = Box<dyn Fn() + Send + Sync>;
type SurfaceHandler = Box<dyn Fn(&Invocation<'_>) -> EnvelopeResult + Send + Sync>;
type CompleterFn = Box<dyn Fn(&CompletionRequest) -> Completion + Send + Sync>;

/// A registered resource or prompt: its handler and its arguments' completion functions.
pub(crate) struct SurfaceEntry {
    handler: SurfaceHandler,
    completers: Vec<(&'static str, CompleterFn)>,
}

impl SurfaceEntry {
    /// The entry of `spec` on `service` (`Err`: its service is disabled).
    fn new<S: Send + Sync + 'static, D>(
        spec: &SurfaceSpec<S, D>,
        service: Result<&Arc<S>, ()>,
    ) -> SurfaceEntry {
        let Ok(service) = service else {
            return SurfaceEntry {
                handler: Box::new(|_| {
                    Err(envelope_error(
                        EnvelopeErrorKind::Failed,
                        "this service is disabled",
                    ))
                }),
                completers: Vec::new(),
            };
        };
        let handler = spec.handler;
        let svc = Arc::clone(service);
        SurfaceEntry {
            handler: Box::new(move |inv| handler(&svc, inv)),
            completers: spec
                .completers
                .iter()
                .map(|&(name, f)| {
                    let svc = Arc::clone(service);
                    (
                        name,
                        Box::new(move |req: &CompletionRequest| f(&svc, req)) as CompleterFn,
                    )
                })
                .collect(),
        }
    }
}

/// A plugin's tools, resources and prompts, ready to run: what `init` keeps for the life of the
/// image, and what the test kit keeps for one [`TestPlugin`](crate::testing::TestPlugin).
pub(crate) struct PluginState {
    pub(crate) host: HostApi,
    /// Per tool, in manifest order.
    pub(crate) handlers: Vec<Handler>,
    /// Per resource (and template), in manifest order.
    pub(crate) resources: Vec<SurfaceEntry>,
    /// Per prompt, in manifest order.
    pub(crate) prompts: Vec<SurfaceEntry>,
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
    /// A `#[resource]` free function.
    Resource,
    /// A `#[prompt]` free function.
    Prompt,
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

    /// The entry of the `#[resource]` function `T`.
    pub const fn resource<T: ResourceFactory + 'static>(
        module: &'static str,
        name: &'static str,
    ) -> Self {
        AutoExport {
            module,
            name,
            kind: ExportKind::Resource,
            register: Registrar::resource::<T>,
        }
    }

    /// The entry of the `#[prompt]` function `T`.
    pub const fn prompt<T: PromptFactory + 'static>(
        module: &'static str,
        name: &'static str,
    ) -> Self {
        AutoExport {
            module,
            name,
            kind: ExportKind::Prompt,
            register: Registrar::prompt::<T>,
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

/// The kinds of permission `export_plugin!(permissions: {...})` declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionKind {
    /// `read: [...]`: paths read.
    Read,
    /// `write: [...]`: paths written.
    Write,
    /// `net: [...]`: `host:port` endpoints connected to.
    Net,
    /// `env: [...]`: environment variables read.
    Env,
    /// `credentials: [...]`: providers whose token of the calling user it asks for.
    Credentials,
}

/// Collects a plugin's tools and services during `init`.
pub struct Registrar {
    host: HostApi,
    services: Vec<ServiceDescriptor>,
    tools: Vec<ToolDescriptor>,
    handlers: Vec<Handler>,
    resource_descriptors: Vec<ResourceDescriptor>,
    resources: Vec<SurfaceEntry>,
    prompt_descriptors: Vec<PromptDescriptor>,
    prompts: Vec<SurfaceEntry>,
    shutdown_hooks: Vec<ShutdownHook>,
    /// `export_plugin!(load: on_first_call, ...)`: see [`Manifest::load_on_first_call`].
    load_on_first_call: bool,
    /// `export_plugin!(permissions: {...})`: see [`Manifest::permissions`].
    permissions: DeclaredPermissions,
    /// The tool and service types registered so far: each is registered once, however often it
    /// is listed or found.
    registered: HashSet<TypeId>,
}

impl Registrar {
    /// Let the host run this plugin's `init` at its first call (`export_plugin!(load:
    /// on_first_call)`; see [`Manifest::load_on_first_call`]).
    pub fn load_on_first_call(&mut self) {
        self.load_on_first_call = true;
    }

    /// Declare permissions the plugin needs (`export_plugin!(permissions: { kind: [...] })`; see
    /// [`Manifest::permissions`]). Repeats and duplicates are merged.
    pub fn declare(&mut self, kind: PermissionKind, values: &[&str]) {
        let list = match kind {
            PermissionKind::Read => &mut self.permissions.read,
            PermissionKind::Write => &mut self.permissions.write,
            PermissionKind::Net => &mut self.permissions.net,
            PermissionKind::Env => &mut self.permissions.env,
            PermissionKind::Credentials => &mut self.permissions.credentials,
        };
        for value in values {
            if !list.iter().any(|v| v == value) {
                list.push((*value).to_owned());
            }
        }
    }

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

    /// Register a free `#[resource]` function (once).
    pub fn resource<T: ResourceFactory + 'static>(&mut self) {
        if self.registered.insert(TypeId::of::<T>()) {
            self.add_resource(&T::spec(), None, Ok(&Arc::new(())));
        }
    }

    /// Register a free `#[prompt]` function (once).
    pub fn prompt<T: PromptFactory + 'static>(&mut self) {
        if self.registered.insert(TypeId::of::<T>()) {
            self.add_prompt(&T::spec(), None, Ok(&Arc::new(())));
        }
    }

    fn add_resource<S: Send + Sync + 'static>(
        &mut self,
        spec: &ResourceSpec<S>,
        service: Option<&str>,
        built: Result<&Arc<S>, ()>,
    ) {
        let mut descriptor = (spec.descriptor)();
        descriptor.service = service.map(str::to_owned);
        self.resource_descriptors.push(descriptor);
        self.resources.push(SurfaceEntry::new(spec, built));
    }

    fn add_prompt<S: Send + Sync + 'static>(
        &mut self,
        spec: &PromptSpec<S>,
        service: Option<&str>,
        built: Result<&Arc<S>, ()>,
    ) {
        let mut descriptor = (spec.descriptor)();
        descriptor.service = service.map(str::to_owned);
        self.prompt_descriptors.push(descriptor);
        self.prompts.push(SurfaceEntry::new(spec, built));
    }

    /// Register a `#[service]`: evaluate `enabled()`, construct it once, register its tools,
    /// resources and prompts (once: a repeat is ignored).
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
        let service = built.as_ref().map_err(|_| ());
        for spec in S::resources() {
            self.add_resource(&spec, Some(S::NAME), service);
        }
        for spec in S::prompts() {
            self.add_prompt(&spec, Some(S::NAME), service);
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
        resource_descriptors: Vec::new(),
        resources: Vec::new(),
        prompt_descriptors: Vec::new(),
        prompts: Vec::new(),
        shutdown_hooks: Vec::new(),
        load_on_first_call: false,
        permissions: DeclaredPermissions::default(),
        registered: HashSet::new(),
    };
    register(&mut registrar);
    let manifest = Manifest {
        plugin: plugin.to_owned(),
        version: version.to_owned(),
        sdk_version: crate::abi::SDK_VERSION.to_owned(),
        services: registrar.services,
        tools: registrar.tools,
        resources: registrar.resource_descriptors,
        prompts: registrar.prompt_descriptors,
        load_on_first_call: registrar.load_on_first_call,
        permissions: registrar.permissions,
    };
    let state = PluginState {
        host,
        handlers: registrar.handlers,
        resources: registrar.resources,
        prompts: registrar.prompts,
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
    if tool == ENVELOPE_INDEX {
        return envelope(state, args.as_str(), caller.as_str(), ctx);
    }
    let Some(handler) = state.handlers.get(tool as usize) else {
        return RResult::RErr(format!("plugin has no tool #{tool}").into());
    };
    let invocation = Invocation {
        args: args.as_str(),
        caller: caller.as_str(),
        uri: "",
        ctx: CallContext::new(ctx.sabi_reborrow(), &state.host),
    };
    let result = invoke(handler, &invocation);
    // Serializing our own types cannot fail; guard anyway so nothing unwinds out of here.
    match catch_unwind(AssertUnwindSafe(|| serde_json::to_string(&result))) {
        Ok(Ok(json)) => RResult::ROk(json.into()),
        _ => RResult::RErr("tool result could not be serialized".into()),
    }
}

/// A call through [`ENVELOPE_INDEX`]: read a resource, render a prompt or complete an argument.
fn envelope(
    state: &PluginState,
    args: &str,
    caller: &str,
    ctx: CallContextRef<'_>,
) -> RResult<RString, RString> {
    let request: CallEnvelope = match serde_json::from_str(args) {
        Ok(r) => r,
        Err(e) => return RResult::RErr(format!("unreadable call envelope: {e}").into()),
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| dispatch(state, request, caller, ctx)))
        .unwrap_or_else(|p| {
            Err(envelope_error(
                EnvelopeErrorKind::Failed,
                format!("panicked: {}", panic_message(&*p)),
            ))
        });
    let outcome = match outcome {
        Ok(v) => EnvelopeOutcome::Ok(v),
        Err(e) => EnvelopeOutcome::Error(e),
    };
    match serde_json::to_string(&outcome) {
        Ok(json) => RResult::ROk(json.into()),
        Err(e) => RResult::RErr(format!("envelope result could not be serialized: {e}").into()),
    }
}

fn dispatch(
    state: &PluginState,
    request: CallEnvelope,
    caller: &str,
    ctx: CallContextRef<'_>,
) -> EnvelopeResult {
    let missing = |what: &str, index: u32| {
        envelope_error(
            EnvelopeErrorKind::Failed,
            format!("plugin has no {what} #{index}"),
        )
    };
    let (entry, args, uri) = match &request {
        CallEnvelope::ReadResource {
            index,
            uri,
            variables,
        } => (
            state
                .resources
                .get(*index as usize)
                .ok_or_else(|| missing("resource", *index))?,
            serde_json::Value::Object(variables.clone()).to_string(),
            uri.as_str(),
        ),
        CallEnvelope::GetPrompt { index, arguments } => (
            state
                .prompts
                .get(*index as usize)
                .ok_or_else(|| missing("prompt", *index))?,
            serde_json::Value::Object(arguments.clone()).to_string(),
            "",
        ),
        CallEnvelope::Complete {
            target,
            index,
            argument,
            value,
            context,
        } => {
            let list = match target {
                CompletionTarget::Prompt => &state.prompts,
                CompletionTarget::Resource => &state.resources,
            };
            let entry = list
                .get(*index as usize)
                .ok_or_else(|| missing("entry", *index))?;
            let completion = match entry.completers.iter().find(|(n, _)| n == argument) {
                Some((_, complete)) => {
                    let mut req = CompletionRequest::new(argument.clone(), value.clone());
                    req.arguments = context
                        .iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                        .collect();
                    req.caller = (!caller.is_empty())
                        .then(|| serde_json::from_str(caller).ok())
                        .flatten();
                    complete(&req)
                }
                None => Completion::new(Vec::<String>::new()),
            };
            return serde_json::to_value(&completion)
                .map(|c| serde_json::json!({ "completion": c }))
                .map_err(|e| envelope_error(EnvelopeErrorKind::Failed, e.to_string()));
        }
    };
    let invocation = Invocation {
        args: &args,
        caller,
        uri,
        ctx: CallContext::new(ctx.sabi_reborrow(), &state.host),
    };
    (entry.handler)(&invocation)
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
