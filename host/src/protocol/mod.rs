//! The MCP protocol, independent of the transport: one engine for both eras.
//!
//! A request goes through three steps, each in one place: [`era`] decides the revision it is served
//! in (running every check that goes with it), [`Protocol::dispatch`] hands it to the handler of its
//! method family (`discover`, `tools`, `logging`, `listen`), and the era finishes the result
//! (`resultType`, server info, caching hints in 2026). Adding a method family is a module and a line
//! in the dispatch table.
//!
//! Transports hand each request to [`Protocol::handle_request`] with an [`Exchange`] describing what
//! they know (session, HTTP headers, caller, where request-scoped notifications go) and send back the
//! [`Reply`], whose HTTP status comes from the error's kind ([`jsonrpc::ErrorKind::http_status`]).

mod discover;
mod era;
pub mod headers;
pub mod jsonrpc;
mod listen;
mod logging;
pub mod session;
mod tools;

use std::sync::Arc;

use mcp_plugin_sdk::UserInfo;
use serde_json::{Map, Value, json};
use tracing::Instrument as _;

use crate::config::Config;
use crate::exec::CancelFlag;
use crate::host::Host;
pub use headers::{HttpHeaders, decode_header_value};
use jsonrpc::{RpcError, response};
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
    pub headers: Option<HttpHeaders>,
    /// The verified caller.
    pub caller: Option<UserInfo>,
    /// Cancellation of this request (client cancel, closed stream).
    pub cancel: CancelFlag,
    /// Where this request's progress and log notifications go.
    pub notifier: Option<Notifier>,
    /// The answer depends on who asks (agent views, authentication): `cacheScope: private`.
    pub cache_private: bool,
    /// The agent whose view of the tools applies (tools it cannot see do not exist for it).
    pub agent: Option<Arc<crate::access::agents::Agent>>,
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
        body: Value,
        /// HTTP status.
        status: u16,
    },
    /// A legacy `initialize` succeeded: the transport opens a session with this version.
    Initialized {
        /// The JSON-RPC response.
        body: Value,
        /// Negotiated version.
        version: String,
        /// The client's capabilities.
        capabilities: Value,
    },
    /// `subscriptions/listen`: the transport keeps a stream open for these notifications.
    Listen {
        /// The request id (also the subscription id).
        id: Value,
        /// The acknowledged filter (`{"toolsListChanged": true}` or `{}`).
        accepted: Value,
    },
}

impl Reply {
    /// An error response; its status follows from the error's kind and the era.
    pub fn error(id: &Value, e: &RpcError, in_legacy_session: bool) -> Reply {
        Reply::Response {
            body: jsonrpc::error_response(id, e),
            status: e.kind.http_status(in_legacy_session),
        }
    }

    fn ok(id: &Value, result: Value) -> Reply {
        Reply::Response {
            body: response(id, result),
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

/// What a method handler produced.
pub(crate) enum Answer {
    /// A result; `cacheable` ones carry `ttlMs` and `cacheScope` in 2026.
    Result {
        /// The result object.
        value: Value,
        /// Whether clients may cache it.
        cacheable: bool,
    },
    /// Open a listen stream with this accepted filter.
    Listen(Value),
}

impl Answer {
    fn plain(value: Value) -> Answer {
        Answer::Result {
            value,
            cacheable: false,
        }
    }

    fn cacheable(value: Value) -> Answer {
        Answer::Result {
            value,
            cacheable: true,
        }
    }
}

/// The protocol engine shared by all transports.
#[derive(Debug, Clone)]
pub struct Protocol {
    host: Host,
    server_info: Arc<Value>,
}

impl Protocol {
    /// A protocol engine over `host`. Its settings (page size, cache TTL, instructions) are read
    /// from the host's configuration at each request, so a reload applies them at once.
    pub fn new(host: Host) -> Self {
        Protocol {
            host,
            server_info: Arc::new(
                json!({ "name": "mcp-host", "version": env!("CARGO_PKG_VERSION") }),
            ),
        }
    }

    /// The host behind it.
    pub fn host(&self) -> &Host {
        &self.host
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
        let trace_context = ex.headers.as_ref().and_then(|h| h.trace_context.as_ref());
        let span = crate::telemetry::trace::request_span(
            method,
            &id,
            &params,
            trace_context.map(|(parent, state)| (parent.as_str(), state.as_deref())),
        );
        match self.dispatch(method, &req).instrument(span).await {
            Ok(Answer::Result { value, cacheable }) => {
                let caching = cacheable.then(|| era::Caching {
                    ttl_ms: req.config.cache_ttl_ms,
                    private: ex.cache_private || ex.agent.is_some(),
                });
                Reply::ok(&id, era::decorate(&era, value, caching, &self.server_info))
            }
            Ok(Answer::Listen(accepted)) => Reply::Listen { id, accepted },
            Err(e) => Reply::error(&id, &e, era.is_legacy()),
        }
    }

    /// The dispatch table: which handler serves a method, in which era.
    async fn dispatch(&self, method: &str, req: &Request<'_>) -> Result<Answer, RpcError> {
        use era::Era::{Legacy, Modern};
        match (method, req.era) {
            ("server/discover", Modern { .. }) => discover::discover(self, req),
            ("ping", Legacy(_)) => Ok(Answer::plain(json!({}))),
            ("logging/setLevel", Legacy(session)) => logging::set_level(req, session),
            ("tools/list", _) => tools::list(self, req),
            ("tools/call", _) => tools::call(self, req).await,
            ("subscriptions/listen", Modern { .. }) => listen::listen(req),
            (other, _) => Err(RpcError::method_not_found(other)),
        }
    }
}

/// The request id a `notifications/cancelled` names.
pub fn cancelled_request(params: &Map<String, Value>) -> Option<&Value> {
    params.get("requestId")
}
