//! Write tools for `mcp-host` (an MCP server that serves compiled plugins) as plain Rust functions.
//!
//! A plugin is a `cdylib` crate. Its functions become MCP tools: the doc comment is the description,
//! the `# Arguments` section documents each parameter, and the parameter types give the JSON Schema.
//! Drop the built `.so` / `.dylib` / `.dll` into one of the host's tool directories and it is served.
//!
//! ```
//! use mcp_plugin_sdk::{tool, service, export_plugin, HostApi, UserInfo, CallContext};
//!
//! /// Add two numbers.
//! ///
//! /// # Arguments
//! /// * `a` - The first addend.
//! /// * `b` - The second addend, e.g. 2.5.
//! #[tool(read_only, idempotent)]
//! pub fn add(a: f64, b: f64) -> f64 {
//!     a + b
//! }
//!
//! /// Greetings, for the caller only.
//! #[derive(Default)]
//! pub struct Greeter;
//!
//! #[service]
//! impl Greeter {
//!     /// Only offered when the plugin's config sets `greeting`.
//!     fn enabled(host: &HostApi) -> bool {
//!         host.config_value("greeting").is_some()
//!     }
//!
//!     /// Greet the authenticated caller.
//!     ///
//!     /// # Arguments
//!     /// * `times` - How many greetings, 1 to 5.
//!     pub fn greet(&self, caller: UserInfo, ctx: &CallContext, #[arg(default = 1, min = 1, max = 5)] times: u32) -> String {
//!         let greeting = ctx.host().config_value("greeting").and_then(|v| v.as_str()).unwrap_or("hi");
//!         format!("{greeting}, {}! ", caller.user_id).repeat(times as usize)
//!     }
//! }
//!
//! // Exports every `#[tool]` and `#[service]` of the crate.
//! export_plugin!();
//! # fn main() {}
//! ```
//!
//! # What becomes what
//!
//! | Rust | tool |
//! |---|---|
//! | [`export_plugin!()`](export_plugin) | the plugin: every `#[tool]` and `#[service]` of the crate (lists are optional) |
//! | `#[tool] fn` | a tool named after the function |
//! | `#[service] impl T` | a service named `T`; each `pub fn` is a tool (a `pub fn` helper takes `#[tool(skip)]`; private methods are never tools); `fn enabled(&HostApi) -> bool` gates it; `fn new(&HostApi) -> Self` (or `Result<Self, E>`, or `Default`) builds it once at load; `fn shutdown(&self)` runs when the host retires this version (after its last call: stop threads, flush files) |
//! | doc comment before the first `# ` heading | `description` |
//! | `# Arguments` list: `` * `name` - text `` (continuation lines appended) | each parameter's `description` (an undocumented parameter is a compile error) |
//! | `String`, integers, floats, `bool`, `Vec<T>`, maps, enums, `JsonSchema` structs | their JSON Schema; integers carry their bounds; objects are strict (below) |
//! | `#[args] a: MyArgs` (a `Deserialize + JsonSchema` struct) | the struct *is* the input schema: its fields are the arguments (below) |
//! | `Option<T>` | an optional parameter |
//! | `#[arg(default = 30)]`, `#[arg(min = 0, max = 100)]` | `default` (applied when absent), `minimum`/`maximum` |
//! | `#[arg(header = "Region")]` | `x-mcp-header`: 2026 HTTP clients mirror the value into `Mcp-Param-Region` |
//! | `serde_json::Value` | any object |
//! | `UserInfo` / `Option<UserInfo>` | the caller, injected by the host, never in the schema |
//! | `&CallContext` | cancellation, progress and client logs for this call |
//! | `&HostApi` | the host API |
//! | returns `String` / `&str` | text content |
//! | returns a `Serialize + JsonSchema` struct | `structuredContent` plus the same JSON as text, and an `outputSchema` (a type missing either derive is a compile error saying so) |
//! | returns [`Content`], `Vec<Content>`, [`ToolResult`] | exactly that content (images, audio, resources, several items) |
//! | returns `Result<T, E>` with `E: Display` | `Ok` as above, `Err` as `isError: true` with the error text |
//! | panics | `isError: true`, `tool panicked: <message>`; the host keeps running |
//! | `async fn` | run to completion on the plugin's own tokio runtime (feature `async`, on by default) |
//!
//! `#[tool(...)]` options: `name = "..."`, `title = "..."`, `read_only`, `destructive`, `idempotent`,
//! `open_world`, `inline` (the tool is quick and never blocks, so the host may skip its thread hand-off),
//! `input_schema = expr` (a hand-written `serde_json::Value` schema used verbatim), `meta = expr`
//! (passed through as `_meta`), `client_capabilities = expr` (capabilities the client must have
//! declared, e.g. `json!({"sampling": {}})`), `task` / `task = "required"` (the call may run, or
//! always runs, as a task for 2026 clients with the tasks extension: the client gets a task at
//! once and polls it; `ask_first`: see [`CallContext::start_task`]) and `skip` (on a `pub fn` of a
//! service: a helper, not a tool). Misuse of the macros is a compile error that says what to do.
//!
//! # Tool names, checked when the crate compiles
//!
//! A tool's name (its function's name, or `name = "..."`) must be 1 to 64 ASCII letters, digits,
//! `_` or `-` (`^[a-zA-Z0-9_-]{1,64}$`, what every major client accepts; the host serves no other):
//! anything else is a compile error that suggests a valid name. Two tools of one crate with one
//! name (free tools in two modules, a `name = "..."` equal to another tool's, two services with a
//! method of one name) fail `cargo build` with ``symbol `mcp_plugin_sdk__two_tools_of_a_plugin_cannot_share_the_name__<name>` is already defined``
//! at the second one: rename one with `#[tool(name = "...")]`. (`cargo check` does not get that far;
//! the test kit, [`testing::TestPlugin`], reports it too.) A prefix set in the host's configuration
//! is added at load and checked there.
//!
//! # Nested arguments: strict objects, bounds, and a struct as the whole schema
//!
//! A struct argument (`Deserialize + JsonSchema`) is a nested object in the input schema, and like
//! the root it is **strict**: every generated object schema with `properties` gets
//! `"additionalProperties": false`, at any depth (in a `Vec`, an `Option`, a map's values, an enum's
//! variants). A misspelled field is refused by the host before the plugin runs (`Invalid arguments
//! for tool t: argument `point`: Additional properties are not allowed ('lable' was unexpected)`)
//! instead of being dropped while the tool runs on a default. A struct flattening an enum
//! (`#[serde(flatten)]`) is closed as a whole with `"unevaluatedProperties": false`.
//!
//! To let a nested struct take fields it does not name, opt out on that struct:
//! `#[schemars(extend("additionalProperties" = true))]`. Maps (`HashMap<String, T>`) and
//! `serde_json::Value` are open by nature and stay so.
//!
//! `#[arg(default, min, max)]` are for the function's own parameters. Inside a struct use serde's
//! and schemars' own attributes, which land in the schema the host validates against:
//! `#[schemars(range(min = 1, max = 48))]` (numbers), `#[schemars(length(min = 1, max = 100))]`
//! (strings and lists), `#[schemars(regex(pattern = r"^[a-z]+$"))]`, `#[serde(default = "f")]` (an
//! optional field with its default advertised). Field doc comments become descriptions.
//!
//! When the arguments are a struct already, mark the parameter `#[args]`: the struct's schema is
//! the tool's input schema (strict, as above) and its fields are the arguments. It may sit next to
//! `UserInfo`, `&CallContext` and `&HostApi`, but no other argument, and takes no `#[arg]`; its
//! fields are documented by their own doc comments, so the tool needs no `# Arguments` section.
//!
//! ```
//! use mcp_plugin_sdk::{Deserialize, JsonSchema, tool};
//!
//! /// Where to search.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(crate = "mcp_plugin_sdk::serde")]
//! #[schemars(crate = "mcp_plugin_sdk::schemars")]
//! pub struct Search {
//!     /// What to look for.
//!     #[schemars(length(min = 1, max = 100))]
//!     pub query: String,
//!     /// How many hours back.
//!     #[serde(default = "day")]
//!     #[schemars(range(min = 1, max = 48))]
//!     pub hours: u32,
//! }
//!
//! fn day() -> u32 {
//!     24
//! }
//!
//! /// Search recent events.
//! #[tool(read_only)]
//! pub fn search(#[args] Search { query, hours }: Search) -> String {
//!     format!("{query} in the last {hours} h")
//! }
//! # fn main() {}
//! ```
//!
//! # Durations
//!
//! `std::time::Duration` serializes as `{"secs": .., "nanos": ..}`, which models rarely get right.
//! Take and return [`Seconds`] instead: a number of seconds (fractions allowed) in JSON and in the
//! schema, a `Duration` in Rust.
//!
//! # Resources, prompts, completions and questions to the client
//!
//! `#[resource(uri = "scheme://path", mime_type = "...")]` serves what a function returns as a
//! resource; a URI with `{variables}` makes it a resource template whose variables are the
//! function's `String` parameters. `#[prompt]` serves a prompt whose arguments are the function's
//! `String` (required) and `Option<String>` (optional) parameters, documented under `# Arguments`.
//! `#[arg(complete = path)]` on either names a completion function taking a [`CompletionRequest`].
//! Both go on free functions or on methods of a `#[service]` and take `UserInfo`, `&CallContext` and
//! `&HostApi` like tools.
//!
//! ```
//! use mcp_plugin_sdk::{CompletionRequest, prompt, resource};
//!
//! /// A greeting for anyone.
//! #[resource(uri = "hello://{name}", mime_type = "text/plain")]
//! pub fn hello(#[arg(complete = names)] name: String) -> String {
//!     format!("Hello, {name}!")
//! }
//!
//! fn names(request: &CompletionRequest) -> Vec<&'static str> {
//!     ["Ada", "Alan"].into_iter().filter(|n| request.matches(n)).collect()
//! }
//!
//! /// Ask for a poem.
//! ///
//! /// # Arguments
//! /// * `topic` - What the poem is about.
//! #[prompt]
//! pub fn poem(topic: String) -> String {
//!     format!("Write a short poem about {topic}.")
//! }
//! # fn main() {}
//! ```
//!
//! A function asks the client for input through its [`CallContext`] ([`CallContext::elicit`],
//! [`CallContext::sample`], [`CallContext::list_roots`], [`CallContext::ask`]); see [`input`] for how
//! the same code serves 2025 clients (a request to the client, answered while the call waits) and
//! 2026 clients (an input-required result, then a retry with the answers).
//!
//! [`UserInfo`], [`ToolResult`] and [`Content`] (with each of its kinds) are `#[non_exhaustive]`:
//! build them with their constructors, and match content with `..`, so that fields MCP or the host
//! adds later do not break a plugin's source.
//!
//! # Testing
//!
//! Tools stay plain functions: a unit test calls them. [`testing`] has stand-ins for what only the
//! host can make: [`testing::TestHost`] (configuration, answers for nested tool calls, a record of
//! host log lines and nested calls) and [`testing::TestCall`] (cancellation, a record of progress and
//! client log events); [`HostApi::for_test`] is the one-line form.
//!
//! # Stability
//!
//! The binary interface is tiny and frozen (see [`wire`], which is the host's, not the authors'):
//! everything with structure crosses it as JSON, so this crate can grow without breaking plugins
//! already built.

#![warn(missing_docs)]

// `abi` keeps its path (`mcp_plugin_sdk::abi`), where the frozen types were first defined; it is
// private to authors and reached through `wire`. abi_stable compares a type's name, package and
// package version at load (not its module path), but nothing is gained by moving it.
mod abi;
#[cfg(feature = "async")]
mod async_rt;
mod completion;
mod content;
mod credential;
mod duration;
mod filter;
mod host;
pub mod input;
mod manifest;
mod prompt;
mod resource;
mod runtime;
mod schema;
pub mod testing;
#[cfg(feature = "validation")]
pub mod validation;

pub use completion::{Completion, CompletionRequest, IntoCompletion, MAX_COMPLETION_VALUES};
pub use content::{Content, EmbeddedResource, IntoToolResult, ToolResult};
pub use credential::{Credential, CredentialError};
pub use duration::Seconds;
pub use filter::{FilterInput, FilterVerdict};
pub use host::{CallContext, CallToolError, HostApi, LogLevel, UserInfo};
pub use input::{
    ElicitAction, ElicitResult, Elicitation, InputError, InputKind, InputRequests, InputResponses,
    Root, Sampled, Sampling,
};
pub use mcp_plugin_sdk_macros::{filter, prompt, resource, service, tool};
pub use prompt::{IntoPromptResult, PromptMessage, PromptResult, Role};
pub use resource::{IntoResourceContents, ResourceContents};
/// Re-exported for argument and result types. The derive expands to `::schemars` paths, so either
/// depend on `schemars` too or add `#[schemars(crate = "mcp_plugin_sdk::schemars")]`.
pub use schemars::{self, JsonSchema};
/// Re-exported for argument and result types. The derives expand to `serde` paths, so either depend
/// on `serde` too or add `#[serde(crate = "mcp_plugin_sdk::serde")]`.
pub use serde::{self, Deserialize, Serialize};
pub use serde_json::{self, Value, json};

pub mod wire {
    //! The host's side of the plugin interface: the frozen binary interface and the manifest.
    //!
    //! **For `mcp-host` (and hand-built plugins), not for plugin authors.** Nothing here is part of the
    //! authoring API: a plugin written with [`tool`](crate::tool), [`service`](crate::service) and
    //! [`export_plugin!`](crate::export_plugin) never names these types, and they may gain items or
    //! be reorganised in any release without notice to authors. What does not change is what crosses
    //! the boundary:
    //!
    //! - the binary interface ([`PluginModV1`], the [`HostApiFfi`] and [`CallContextFfi`] trait objects,
    //!   [`BuildInfo`]) is frozen for the life of the 0.1 line; abi_stable checks it when a plugin
    //!   loads. Its evolution rule: a type here is never changed once released (not a field, not a
    //!   method, not an order). An incompatible change adds a new root module (`PluginModV2`, under a
    //!   new symbol) that the host tries first, falling back to [`PluginModV1`] on the same library
    //!   header; [`ABI_VERSION`] names the newest one the SDK exports;
    //! - the manifest ([`Manifest`], [`ToolDescriptor`], ...) crosses as JSON and only grows by
    //!   optional fields (`#[serde(default)]`), so hosts and plugins of different SDK releases read each
    //!   other.
    //!
    //! ```
    //! use mcp_plugin_sdk::wire::BuildInfo;
    //! let host = BuildInfo::host();
    //! let plugin = BuildInfo { plugin: "demo".into(), plugin_version: "1.0.0".into(), ..host.clone() };
    //! assert!(plugin.incompatibility(&host).is_none());
    //! ```

    pub use crate::abi::*;
    /// The texts of `credential/get`'s errors.
    pub use crate::credential::wire as credential;
    pub use crate::input::{declares, encode_input_error, required_capability};
    pub use crate::manifest::*;
}

/// The README's examples, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// The authors' guide's examples, compiled by `cargo test --doc` like the README's.
#[cfg(doctest)]
#[doc = include_str!("../../docs/authors/writing-a-plugin.md")]
struct WritingAPluginDoctests;

/// See [`WritingAPluginDoctests`].
#[cfg(doctest)]
#[doc = include_str!("../../docs/authors/resources-prompts-input-tasks.md")]
struct ResourcesPromptsDoctests;

/// See [`WritingAPluginDoctests`].
#[cfg(doctest)]
#[doc = include_str!("../../docs/authors/testing.md")]
struct TestingDoctests;

/// See [`WritingAPluginDoctests`].
#[cfg(doctest)]
#[doc = include_str!("../../docs/authors/user-credentials.md")]
struct UserCredentialsDoctests;

/// What the macros expand to; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::abi::{CallContextRef, HostApiBox, PluginModV1, PluginModV1Ref};
    pub use crate::manifest::{
        Annotations, CallerNeed, EnvelopeErrorKind, PromptArgument, PromptDescriptor,
        ResourceDescriptor, TaskSupport, ToolDescriptor,
    };
    pub use crate::runtime::{
        AutoExport, EnvelopeResult, Invocation, PermissionKind, PluginExport, PromptFactory,
        PromptSpec, Registrar, ResourceFactory, ResourceSpec, Service, SurfaceSpec, ToolFactory,
        ToolSpec, build_info, call, envelope_error, init, shutdown,
    };
    pub use crate::schema::{input_schema_with_headers, object_schema};
    pub use abi_stable;
    pub use inventory;
    pub use schemars;
    pub use serde;
    pub use serde_json;

    #[cfg(feature = "async")]
    pub use crate::async_rt::block_on;

    use crate::content::{IntoToolResult, ToolResult};
    use crate::resource::{IntoResourceContents, ResourceContents};
    use std::cell::Cell;
    use std::marker::PhantomData;

    /// First choice for a resource function's value: its own contents mapping (`None`: not found).
    pub trait ViaResource {
        /// Convert.
        fn into_contents(self) -> Result<Option<Vec<ResourceContents>>, String>;
    }
    impl<T: IntoResourceContents> ViaResource for &&Returned<T> {
        fn into_contents(self) -> Result<Option<Vec<ResourceContents>>, String> {
            Ok(self.take().into_resource_contents())
        }
    }

    /// Second choice: anything `Serialize` becomes one JSON text item.
    pub trait ViaResourceJson {
        /// Convert.
        fn into_contents(self) -> Result<Option<Vec<ResourceContents>>, String>;
    }
    impl<T: serde::Serialize> ViaResourceJson for &Returned<T> {
        fn into_contents(self) -> Result<Option<Vec<ResourceContents>>, String> {
            crate::resource::json_contents(&self.take()).map(|c| Some(vec![c]))
        }
    }

    /// The `ReadResourceResult` of a resource function's converted value.
    pub fn read_result(
        inv: &crate::runtime::Invocation<'_>,
        mime_type: Option<&str>,
        contents: Result<Option<Vec<ResourceContents>>, String>,
    ) -> crate::runtime::EnvelopeResult {
        match contents {
            Ok(Some(items)) => Ok(crate::resource::read_result(inv.uri(), mime_type, items)),
            Ok(None) => Err(envelope_error(
                EnvelopeErrorKind::NotFound,
                format!("Resource not found: {}", inv.uri()),
            )),
            Err(e) => Err(envelope_error(EnvelopeErrorKind::Failed, e)),
        }
    }

    /// The `GetPromptResult` of a prompt function's value.
    pub fn prompt_result<T: crate::prompt::IntoPromptResult>(
        value: T,
    ) -> crate::runtime::EnvelopeResult {
        serde_json::to_value(value.into_prompt_result())
            .map_err(|e| envelope_error(EnvelopeErrorKind::Failed, e.to_string()))
    }

    /// A completion function's value as a [`crate::Completion`].
    pub fn completion<T: crate::completion::IntoCompletion>(value: T) -> crate::Completion {
        value.into_completion()
    }

    /// A resource or prompt function's `Err`: the client's arguments were not acceptable.
    pub fn envelope_invalid<E: std::fmt::Display>(e: E) -> crate::manifest::EnvelopeError {
        envelope_error(EnvelopeErrorKind::Invalid, format!("{e:#}"))
    }

    /// Holds a tool's return value while the autoref probes below pick its conversion.
    pub struct Returned<T>(Cell<Option<T>>);

    impl<T> Returned<T> {
        /// Wrap a value.
        pub fn new(value: T) -> Self {
            Returned(Cell::new(Some(value)))
        }
        fn take(&self) -> T {
            match self.0.take() {
                Some(v) => v,
                None => unreachable!("a returned value is converted once"),
            }
        }
    }

    /// What a tool may return: text and content types, or a `Serialize + JsonSchema` type. The
    /// macros check it before they probe for the conversion, so that a mistake reads as what to
    /// derive rather than as a missing method of these helpers.
    #[diagnostic::on_unimplemented(
        message = "a tool cannot return `{Self}`: derive `Serialize` and `JsonSchema` for it",
        label = "`{Self}` needs `#[derive(Serialize, JsonSchema)]` (both) to be a tool's result",
        note = "a tool returns text (`String`, `&str`), `Content`, `Vec<Content>`, `ToolResult`, \
                `()`, or a type that is both `serde::Serialize` (its JSON is the structured \
                content) and `schemars::JsonSchema` (the tool's outputSchema)",
        note = "a type from another crate: return a struct of your own that derives both, or \
                `ToolResult::json(&value)` (no outputSchema)"
    )]
    pub trait ToolOutput {}
    impl<T: serde::Serialize + schemars::JsonSchema> ToolOutput for T {}
    impl ToolOutput for ToolResult {}

    /// Fails to compile, with [`ToolOutput`]'s message, for a type a tool cannot return.
    pub fn tool_output<T: ToolOutput>() {}

    /// First choice: types with their own content mapping (`String`, `Content`, `ToolResult`, ...).
    pub trait ViaContent {
        /// Convert.
        fn into_result(self) -> ToolResult;
    }
    impl<T: IntoToolResult> ViaContent for &&&Returned<T> {
        fn into_result(self) -> ToolResult {
            self.take().into_tool_result()
        }
    }

    /// Second choice: anything `Serialize` becomes structured content plus JSON text.
    pub trait ViaJson {
        /// Convert.
        fn into_result(self) -> ToolResult;
    }
    impl<T: serde::Serialize> ViaJson for &&Returned<T> {
        fn into_result(self) -> ToolResult {
            ToolResult::json(&self.take())
        }
    }

    /// Last: a type that is neither, which [`tool_output`] has already refused at compile time;
    /// it is here so that the refusal is the only error.
    pub trait ViaNeither {
        /// Convert.
        fn into_result(self) -> ToolResult;
    }
    impl<T> ViaNeither for &Returned<T> {
        fn into_result(self) -> ToolResult {
            ToolResult::error("this tool's return type is neither content nor `Serialize`")
        }
    }

    /// Picks the output schema of a return type `T` by the same priorities.
    pub struct OutputOf<T>(PhantomData<T>);

    // `Copy` (whatever `T`), so that the last probe, which takes it by value, compiles for every
    // type: a type a tool cannot return is refused by [`tool_output`] alone.
    impl<T> Clone for OutputOf<T> {
        fn clone(&self) -> Self {
            *self
        }
    }
    impl<T> Copy for OutputOf<T> {}

    impl<T> OutputOf<T> {
        /// The probe.
        pub const NEW: Self = OutputOf(PhantomData);
    }

    /// Content-mapped types have no output schema.
    pub trait SchemaViaContent {
        /// The schema.
        fn output_schema(self) -> Option<serde_json::Value>;
    }
    impl<T: IntoToolResult> SchemaViaContent for &&OutputOf<T> {
        fn output_schema(self) -> Option<serde_json::Value> {
            None
        }
    }
    /// `JsonSchema` types get one when they are objects.
    pub trait SchemaViaJson {
        /// The schema.
        fn output_schema(self) -> Option<serde_json::Value>;
    }
    impl<T: schemars::JsonSchema> SchemaViaJson for &OutputOf<T> {
        fn output_schema(self) -> Option<serde_json::Value> {
            crate::schema::output_schema::<T>()
        }
    }
    /// Anything else has none.
    pub trait SchemaViaNothing {
        /// The schema.
        fn output_schema(self) -> Option<serde_json::Value>;
    }
    impl<T> SchemaViaNothing for OutputOf<T> {
        fn output_schema(self) -> Option<serde_json::Value> {
            None
        }
    }

    /// Format an error the way tool results show it (with its source chain where `{:#}` gives one).
    pub fn error_result<E: std::fmt::Display>(e: E) -> ToolResult {
        ToolResult::error(format!("{e:#}"))
    }
}

/// Export this crate's tools and services as an mcp-host plugin. Use it once, in the `cdylib` crate.
///
/// Every `#[tool]` function and `#[service]` impl block of the crate is exported, wherever it is
/// in the crate: nothing is dropped for want of being listed.
///
/// ```
/// # use mcp_plugin_sdk::{tool, export_plugin};
/// /// Say hello.
/// #[tool]
/// pub fn hello() -> &'static str { "hello" }
///
/// export_plugin!();
/// # fn main() {}
/// ```
///
/// Forms: `export_plugin!()`, `export_plugin!(tools: [a, b], services: [S, T])` (either list
/// optional), an optional leading `name: "...",` to override the plugin name (the crate name by
/// default), then an optional `load: on_first_call,` (below). The lists are optional: they
/// put those items first in the manifest, in list order (the others follow, free tools then
/// services, each by name), and they are how a plugin exports a `#[tool]` or `#[service]` defined
/// in another crate (only the exporting crate's own are found without a list). Naming an item
/// twice, or naming one that would be found anyway, exports it once.
///
/// `load: on_first_call` lets the host start faster and use less memory: once it has loaded the
/// plugin file at one start, later starts serve its tools from what it exported then, and run the
/// plugin's `init` (its services' constructors and `enabled()` hooks) only when a call first needs
/// it. Use it when what the plugin exports depends only on its file and its configuration (not on
/// the environment, the clock or files it reads), and nothing it does at `init` must happen before
/// its first call (no background work announcing changes, for example). `load: at_start` (the
/// default) always loads it at start.
///
/// ```
/// # use mcp_plugin_sdk::{tool, export_plugin};
/// /// Say hello.
/// #[tool]
/// pub fn hello() -> &'static str { "hello" }
///
/// export_plugin!(load: on_first_call, tools: [hello]);
/// # fn main() {}
/// ```
///
/// `permissions: { read: [...], write: [...], net: [...], env: [...], credentials: [...] }` (after
/// `name` and `load`, every list optional) declares what the plugin needs when it runs sandboxed:
/// absolute paths it reads, paths it writes, `"host:port"` endpoints it connects to, environment
/// variables it reads — and the credential providers whose token of the calling user it asks for
/// ([`CallContext::credential`]; the host refuses any provider not declared here).
/// The declaration is part of the manifest: `mcp-host check` shows it, `mcp-host add` asks the
/// operator to accept it, and a plugin installed that way runs under `isolation: sandbox` with
/// exactly these grants (docs/authors/publishing.md).
///
/// ```
/// # use mcp_plugin_sdk::{tool, export_plugin};
/// /// Say hello.
/// #[tool]
/// pub fn hello() -> &'static str { "hello" }
///
/// export_plugin!(permissions: { read: ["/etc/hostname"], net: ["api.example.com:443"], env: ["LANG"] });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($(name: $name:expr,)? load: $load:ident) => {
        $crate::export_plugin!($(name: $name,)? load: $load,);
    };
    ($(name: $name:expr,)? $(load: $load:ident,)? $(permissions: { $($kind:ident: [$($grant:expr),* $(,)?]),* $(,)? } $(,)?)? $(tools: [$($tool:path),* $(,)?])? $(,)? $(services: [$($svc:path),* $(,)?])? $(,)?) => {
        const _: () = {
            use $crate::__private::abi_stable as __abi;

            const __NAME: &str = $crate::export_plugin!(@name $($name)?);

            fn __register(registrar: &mut $crate::__private::Registrar) {
                $($( registrar.tool::<$tool>(); )*)?
                $($( registrar.service::<$svc>(); )*)?
                registrar.auto_exports(::core::module_path!());
                $( $crate::export_plugin!(@load registrar $load); )?
                $($( $crate::export_plugin!(@permission registrar $kind [$($grant),*]); )*)?
            }

            extern "C" fn __build_info() -> __abi::std_types::RString {
                $crate::__private::build_info(__NAME, env!("CARGO_PKG_VERSION"))
            }

            extern "C" fn __init(
                host: $crate::__private::HostApiBox,
            ) -> __abi::std_types::RResult<__abi::std_types::RString, __abi::std_types::RString> {
                $crate::__private::init(host, __NAME, env!("CARGO_PKG_VERSION"), __register)
            }

            extern "C" fn __call(
                tool: u32,
                args: __abi::std_types::RStr<'_>,
                caller: __abi::std_types::RStr<'_>,
                ctx: $crate::__private::CallContextRef<'_>,
            ) -> __abi::std_types::RResult<__abi::std_types::RString, __abi::std_types::RString> {
                $crate::__private::call(tool, args, caller, ctx)
            }

            extern "C" fn __shutdown() {
                $crate::__private::shutdown()
            }

            fn __root_module() -> $crate::__private::PluginModV1Ref {
                __abi::prefix_type::PrefixTypeTrait::leak_into_prefix($crate::__private::PluginModV1 {
                    build_info: __build_info,
                    init: __init,
                    call: __call,
                    shutdown: __shutdown,
                })
            }

            extern "C" fn __root_module_loader() -> __abi::library::RootModuleResult {
                __abi::library::__call_root_module_loader(__root_module)
            }

            // Found by the test kit (`testing::TestPlugin`), which loads the crate as this does.
            $crate::__private::inventory::submit! {
                $crate::__private::PluginExport {
                    module: ::core::module_path!(),
                    name: __NAME,
                    version: env!("CARGO_PKG_VERSION"),
                    register: __register,
                }
            }

            // The symbol abi_stable's loader looks up (`lib_header_from_path`).
            #[unsafe(no_mangle)]
            #[allow(unsafe_code)]
            pub static _1as_0lib_1header_0root_bmodule_bloader: __abi::library::LibHeader = unsafe {
                __abi::library::LibHeader::from_constructor::<$crate::__private::PluginModV1Ref>(
                    __root_module_loader,
                    __abi::library::CheckTypeLayout::Yes,
                )
            };
        };
    };
    (@name $name:expr) => { $name };
    (@name) => { env!("CARGO_PKG_NAME") };
    (@load $registrar:ident on_first_call) => { $registrar.load_on_first_call() };
    (@load $registrar:ident at_start) => { () };
    (@permission $registrar:ident read $grants:tt) => {
        $registrar.declare($crate::__private::PermissionKind::Read, &$grants)
    };
    (@permission $registrar:ident write $grants:tt) => {
        $registrar.declare($crate::__private::PermissionKind::Write, &$grants)
    };
    (@permission $registrar:ident net $grants:tt) => {
        $registrar.declare($crate::__private::PermissionKind::Net, &$grants)
    };
    (@permission $registrar:ident env $grants:tt) => {
        $registrar.declare($crate::__private::PermissionKind::Env, &$grants)
    };
    (@permission $registrar:ident credentials $grants:tt) => {
        $registrar.declare($crate::__private::PermissionKind::Credentials, &$grants)
    };
    (@permission $registrar:ident $other:ident $grants:tt) => {
        ::core::compile_error!("export_plugin!: `permissions:` declares `read`, `write`, `net`, `env` and `credentials` lists")
    };
    (@load $registrar:ident $other:ident) => {
        ::core::compile_error!("export_plugin!: `load:` is `at_start` (the default) or `on_first_call`")
    };
}
