//! The MCP protocol, independent of the transport: one engine for both eras.
//!
//! A request goes through three steps, each in one place: [`era`] decides the revision it is served
//! in (running every check that goes with it), [`Protocol::dispatch`] hands it to the handler of its
//! method family (`discover`, `tools`, `resources`, `prompts`, `completion`, `logging`, `listen`),
//! and the era finishes the result (`resultType`, server info, caching hints in 2026). Adding a
//! method family is a module and a line in the dispatch table. Requests that may ask the client for
//! input (tools, prompts, resource reads) go through `input` (2026 input-required rounds with a
//! sealed [`request_state`], or 2025 server-to-client requests).
//!
//! Transports hand each request to [`Protocol::handle_request`] with an [`Exchange`] describing what
//! they know (session, HTTP headers, caller, where request-scoped notifications go) and send back the
//! [`Reply`], whose HTTP status comes from the error's kind ([`jsonrpc::ErrorKind::http_status`]).

mod completion;
mod discover;
mod era;
pub mod headers;
mod input;
mod invoke;
pub mod jsonrpc;
mod listen;
mod logging;
mod message;
mod pages;
mod prompts;
pub mod request_state;
mod resources;
pub mod session;
mod tasks;
mod tool_search;
mod tools;

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tracing::Instrument as _;

use crate::config::Config;
use crate::exec::{CancelFlag, RequestContext, ToolResult};
use crate::host::Host;
use crate::store::Store;
pub(crate) use era::{META_CAPS, META_VERSION};
pub use headers::{HttpHeaders, decode_header_value};
use jsonrpc::{RpcError, response};
pub use message::Message;
use session::LegacySession;

/// The current (stateless) protocol revision.
pub const MODERN_VERSION: &str = "2026-07-28";
/// Legacy revisions served through `initialize`, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Where a transport delivers request-scoped notifications (full JSON-RPC messages).
pub type Notifier = Arc<dyn Fn(Value) + Send + Sync>;

/// What the transport knows about one request.
#[derive(Clone, Default)]
pub struct Exchange {
    /// The legacy session this request belongs to, if any.
    pub session: Option<Arc<LegacySession>>,
    /// HTTP headers (`None` on stdio).
    pub headers: Option<Arc<HttpHeaders>>,
    /// The request as every stage sees it (built once by the transport, shared down to the
    /// plugin): the verified caller, the agent whose view of the tools applies (tools it cannot
    /// see do not exist for it), whom `limits.per_caller` counts its tool calls against, and its
    /// cancellation (client cancel, closed stream).
    pub request: Arc<RequestContext>,
    /// Where this request's progress and log notifications go.
    pub notifier: Option<Notifier>,
    /// The answer depends on who asks (agent views, authentication): `cacheScope: private`.
    pub cache_private: bool,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("session", &self.session.as_ref().map(|s| &s.id))
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// What to send back.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A response (success or error) with its HTTP status.
    Response {
        /// The JSON-RPC response.
        body: Message,
        /// HTTP status.
        status: u16,
    },
    /// A legacy `initialize` succeeded: the transport opens a session with this version.
    Initialized {
        /// The JSON-RPC response.
        body: Message,
        /// Negotiated version.
        version: String,
        /// The client's capabilities.
        capabilities: Value,
    },
    /// `subscriptions/listen`: the transport keeps a stream open for these notifications.
    Listen {
        /// The request id (also the subscription id).
        id: Value,
        /// The acknowledged filter (e.g. `{"toolsListChanged": true, "resourceSubscriptions": [...]}`).
        accepted: Value,
    },
}

impl Reply {
    /// An error response; its status follows from the error's kind and the era.
    pub fn error(id: &Value, e: &RpcError, in_legacy_session: bool) -> Reply {
        Reply::Response {
            body: jsonrpc::error_response(id, e).into(),
            status: e.kind.http_status(in_legacy_session),
        }
    }

    fn ok(id: &Value, result: Value) -> Reply {
        Reply::Response {
            body: response(id, result).into(),
            status: 200,
        }
    }
}

/// One request as a method handler sees it.
pub(crate) struct Request<'a> {
    /// Its params (`{}` when absent).
    pub params: &'a Map<String, Value>,
    /// What the transport knows.
    pub ex: &'a Exchange,
    /// The era it is served in.
    pub era: &'a era::Era<'a>,
    /// The configuration at the time of the request (reloadable settings apply at once).
    pub config: Arc<Config>,
}

/// Whether clients may cache a result (2026 `ttlMs` and `cacheScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cache {
    /// Not cacheable: no hints.
    No,
    /// Cacheable; `public` unless the answer depends on who asks.
    Yes,
    /// Cacheable for this caller only (`private`).
    Private,
}

/// What a method handler produced.
pub(crate) enum Answer {
    /// A tool's result (never cached).
    Tool(ToolResult),
    /// A page of a list, as the JSON text of its result object (cacheable).
    Page(String),
    /// A result, with its caching.
    Result {
        /// The result object.
        value: Value,
        /// Whether and for whom clients may cache it.
        cache: Cache,
    },
    /// 2026: the request needs input from the client first (`inputRequests`, `requestState`).
    InputRequired(Value),
    /// 2026 tasks extension: the call runs as this task (`CreateTaskResult`).
    Task(Value),
    /// Open a listen stream with this accepted filter.
    Listen(Value),
}

impl Answer {
    fn plain(value: Value) -> Answer {
        Answer::Result {
            value,
            cache: Cache::No,
        }
    }

    fn cacheable(value: Value) -> Answer {
        Answer::Result {
            value,
            cache: Cache::Yes,
        }
    }
}

/// The protocol engine shared by all transports.
#[derive(Clone)]
pub struct Protocol {
    host: Host,
    server_info: Arc<Value>,
    /// What a 2026 result adds after its own members (`resultType`, the server's info in
    /// `_meta`), as JSON text: written straight into a tool call's response.
    modern_members: Arc<str>,
    /// Seals `requestState` when the configuration names no keys (this process only).
    state_key: Arc<[u8; 32]>,
    /// Tasks (and, in a fleet, legacy sessions and the events between replicas).
    store: Store,
    /// The tasks whose calls run on this replica, with their cancellation.
    running: Arc<std::sync::Mutex<std::collections::HashMap<String, CancelFlag>>>,
}

impl std::fmt::Debug for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protocol")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl Protocol {
    /// A protocol engine over `host` with tasks kept in memory. Its settings (page size, cache
    /// TTL, instructions) are read from the host's configuration at each request, so a reload
    /// applies them at once.
    pub fn new(host: Host) -> Self {
        let replica = crate::store::bus::replica_name(host.config().replica.as_deref());
        Self::with_store(host, Store::memory(&replica))
    }

    /// A protocol engine over `host` with `store` for tasks (and sessions and events, in a
    /// fleet). A plugin's announcements go to the other replicas too.
    pub fn with_store(host: Host, store: Store) -> Self {
        if let Some(counter) = store.shared_budgets() {
            host.share_budgets(counter);
        }
        if let Err(e) = host.open_credentials(store.vault_backend(), store.replica()) {
            tracing::error!("Upstreams with server.auth cannot be used: the token vault: {e}");
        }
        let bus = store.bus().clone();
        host.forward_announcements(move |change| {
            bus.publish_to_others(crate::store::Event::from_change(change));
        });
        let mut state_key = [0u8; 32];
        if getrandom::fill(&mut state_key).is_err() {
            // No OS randomness: a key nobody else can guess is still better than none.
            let seed = format!(
                "{:?}{:p}{}",
                std::time::SystemTime::now(),
                &state_key,
                std::process::id()
            );
            for (i, b) in seed.bytes().enumerate() {
                state_key[i % 32] ^= b;
            }
        }
        let server_info = json!({ "name": "mcp-host", "version": env!("CARGO_PKG_VERSION") });
        let modern_members = format!(
            r#","resultType":"complete","_meta":{}"#,
            json!({ era::META_SERVER_INFO: server_info })
        );
        Protocol {
            host,
            server_info: Arc::new(server_info),
            modern_members: modern_members.into(),
            state_key: Arc::new(state_key),
            store,
            running: Arc::default(),
        }
    }

    /// The host behind it.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The store of tasks, sessions (in a fleet) and events between replicas.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Announce to this host's listeners what plugins on other replicas announced, for as long
    /// as the store's bus runs.
    pub async fn relay_announcements(&self) {
        // Announcements arrive on the bus only from other replicas.
        if !self.store.is_shared() {
            return;
        }
        let mut events = self.store.bus().subscribe();
        loop {
            match events.recv().await {
                Ok(event) => {
                    if let Some(change) = event.change() {
                        self.host.announce(change);
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    self.host.announce(crate::host::Change::ALL_LISTS);
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Handle one request.
    pub async fn handle_request(
        &self,
        id: Value,
        method: &str,
        params: Map<String, Value>,
        ex: Exchange,
    ) -> Reply {
        let era = match era::negotiate(method, &params, &ex) {
            Ok(era::Negotiated::Initialize) => {
                return discover::initialize(self, &id, &params, &ex);
            }
            Ok(era::Negotiated::Serve(era)) => era,
            Err(e) => return Reply::error(&id, &e, false),
        };
        let req = Request {
            params: &params,
            ex: &ex,
            era: &era,
            config: self.host.config(),
        };
        let span =
            crate::telemetry::trace::request_span(method, &id, &params, ex.request.trace.as_ref());
        match self.dispatch(method, &req).instrument(span).await {
            Ok(Answer::Tool(result)) => match result.into_plain() {
                // The plugin's text goes out as it is, with what the era adds.
                Ok(text) => Reply::Response {
                    body: Message::result_text(
                        id,
                        text,
                        (!era.is_legacy()).then(|| Arc::clone(&self.modern_members)),
                    ),
                    status: 200,
                },
                // A tree (an upstream's answer, a result the host made) is decorated as it is
                // written.
                Err(result) => Reply::Response {
                    body: Message::result_tree(
                        id,
                        result.into_value(),
                        (!era.is_legacy()).then(|| Arc::clone(&self.server_info)),
                    ),
                    status: 200,
                },
            },
            Ok(Answer::Page(text)) => {
                // What the era adds goes after the page's own members, as for a tool's result.
                let members = (!era.is_legacy()).then(|| {
                    let private = ex.cache_private || ex.request.agent().is_some();
                    Arc::from(format!(
                        r#","ttlMs":{},"cacheScope":"{}"{}"#,
                        req.config.cache_ttl_ms,
                        if private { "private" } else { "public" },
                        self.modern_members
                    ))
                });
                Reply::Response {
                    body: Message::result_text(id, text, members),
                    status: 200,
                }
            }
            Ok(Answer::Result { value, cache }) => {
                let caching = (cache != Cache::No).then(|| era::Caching {
                    ttl_ms: req.config.cache_ttl_ms,
                    private: cache == Cache::Private
                        || ex.cache_private
                        || ex.request.agent().is_some(),
                });
                Reply::ok(&id, era::decorate(&era, value, caching, &self.server_info))
            }
            Ok(Answer::InputRequired(value)) => Reply::ok(
                &id,
                era::decorate_interim("input_required", value, &self.server_info),
            ),
            Ok(Answer::Task(value)) => {
                Reply::ok(&id, era::decorate_interim("task", value, &self.server_info))
            }
            Ok(Answer::Listen(accepted)) => Reply::Listen { id, accepted },
            Err(e) => Reply::error(&id, &e, era.is_legacy()),
        }
    }

    /// The dispatch table: which handler serves a method, in which era. (Methods that wait on a
    /// plugin or the task store, other than `tools/call`, run boxed: every request's future is as
    /// large as the largest it may await, and stdio moves each one into a box.)
    async fn dispatch(&self, method: &str, req: &Request<'_>) -> Result<Answer, RpcError> {
        use era::Era::{Legacy, Modern};
        match (method, req.era) {
            ("server/discover", Modern { .. }) => discover::discover(self, req),
            ("ping", Legacy(_)) => Ok(Answer::plain(json!({}))),
            ("logging/setLevel", Legacy(session)) => logging::set_level(req, session),
            ("tools/list", _) => tools::list(self, req),
            ("tools/call", _) => tools::call(self, req).await,
            ("resources/list", _) => resources::list(self, req),
            ("resources/templates/list", _) => resources::templates(self, req),
            ("resources/read", _) => Box::pin(resources::read(self, req)).await,
            ("resources/subscribe", Legacy(session)) => resources::subscribe(self, req, session),
            ("resources/unsubscribe", Legacy(session)) => resources::unsubscribe(req, session),
            ("prompts/list", _) => prompts::list(self, req),
            ("prompts/get", _) => Box::pin(prompts::get(self, req)).await,
            ("completion/complete", _) => Box::pin(completion::complete(self, req)).await,
            ("subscriptions/listen", Modern { .. }) => Box::pin(listen::listen(self, req)).await,
            ("tasks/get", Modern { .. }) => Box::pin(tasks::get(self, req)).await,
            ("tasks/update", Modern { .. }) => Box::pin(tasks::update(self, req)).await,
            ("tasks/cancel", Modern { .. }) => Box::pin(tasks::cancel(self, req)).await,
            (other, _) => Err(RpcError::method_not_found(other)),
        }
    }
}

/// The request id a `notifications/cancelled` names.
pub fn cancelled_request(params: &Map<String, Value>) -> Option<&Value> {
    params.get("requestId")
}
