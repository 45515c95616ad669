//! One HTTP upstream as a client of its own, for `mcp-host connect`: the production [`Link`] —
//! the same rmcp session, answers, relay of questions and authorization as a served upstream's —
//! made once (a failed connection is final, not retried), its lists read, then its tools called,
//! resources read and prompts got through the same [`Upstream`] backend the executor calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_plugin_sdk::wire::{CallEnvelope, ENVELOPE_INDEX, EnvelopeOutcome, Manifest};
use serde_json::{Map, Value};

pub use super::http::Lifecycle;

use super::http::Endpoint;
use super::link::{Link, Transport};
use super::supervise::Supervision;
use super::{Upstream, listing, runtime};
use crate::access::upstream::Authorizer;
use crate::config::FollowRedirects;
use crate::plugins::backend::{
    Change, Connection, DataDirError, HostCallbacks, NestedCallError, PluginBackend,
};
use crate::plugins::call::{
    CallEvent, CallInput, CallState, EventSink, EventWants, RequestContext,
};

/// How to reach the upstream.
pub struct ClientOptions {
    /// What to call it in the log.
    pub name: String,
    /// Its Streamable HTTP endpoint.
    pub url: String,
    /// Headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Which handshake to speak.
    pub lifecycle: Lifecycle,
    /// What obtains its access token when it asks for one.
    pub auth: Option<Arc<dyn Authorizer>>,
    /// How long the handshake (authorization included) may take, and then the reading of the
    /// lists.
    pub timeout: Duration,
}

/// Why the upstream could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// It could not be connected to (its handshake or lists failed).
    #[error("{0}")]
    Connect(String),
    /// It has no tool, prompt (or listed resource) of that name.
    #[error("the upstream lists no {what} named {name}")]
    Unknown {
        /// `tool`, `prompt`.
        what: &'static str,
        /// The name asked for.
        name: String,
    },
    /// A request failed (the upstream's error, or the connection's).
    #[error("{0}")]
    Request(String),
}

/// A connected upstream (see the module's documentation). Dropping it ends the session.
pub struct Client {
    upstream: Upstream,
    timeout: Duration,
}

/// The host callbacks of a one-shot client: nothing is served, so list changes and health go
/// nowhere, and an upstream has no nested calls nor data directory.
struct Detached;

impl HostCallbacks for Detached {
    fn call_nested(
        &self,
        _parent: Option<&Arc<CallState>>,
        _name: &str,
        _args: &str,
    ) -> Result<String, NestedCallError> {
        Err(NestedCallError::ShuttingDown)
    }

    fn announce(&self, _change: Change) {}

    fn data_dir(&self, _plugin: &str) -> Result<std::path::PathBuf, DataDirError> {
        Err(DataDirError::ShuttingDown)
    }

    fn plugin_health_changed(&self) {}
}

/// What one reading of the lists of a one-shot client may take besides its time.
const LIST_BOUNDS: listing::Bounds = listing::Bounds {
    timeout: Duration::from_secs(60),
    max_pages: 100,
    max_definitions: 10_000,
    max_bytes: 32 << 20,
};

impl Client {
    /// Connect to the upstream and read its lists, waiting on this (non-runtime) thread.
    pub fn connect(options: ClientOptions) -> Result<Client, ClientError> {
        let transport = Transport::Http(Endpoint {
            url: options.url,
            headers: options.headers,
            redirects: FollowRedirects::None,
            lifecycle: options.lifecycle,
            auth: options.auth,
        });
        let supervision = Supervision {
            handshake: options.timeout,
            lists: listing::Bounds {
                timeout: options.timeout,
                ..LIST_BOUNDS
            },
            crashes: (1, Duration::from_secs(1)),
            retry_first: false,
            record: None,
        };
        let runtime = runtime()
            .map_err(|e| ClientError::Connect(e.to_string()))?
            .clone();
        let link = Link::new(
            "upstream",
            transport,
            Arc::new(Detached),
            supervision,
            runtime,
        );
        link.begin();
        link.wait_settled(Instant::now() + options.timeout * 2 + Duration::from_secs(5));
        match link.connection() {
            Connection::Ready => {}
            Connection::Failed { reason } | Connection::Quarantined { reason } => {
                link.retire();
                return Err(ClientError::Connect(reason));
            }
            _ => {
                link.retire();
                return Err(ClientError::Connect(
                    "the upstream did not connect in time".into(),
                ));
            }
        }
        let manifest = link.latest();
        Ok(Client {
            upstream: Upstream::of(link, true, manifest),
            timeout: options.timeout,
        })
    }

    /// What the upstream lists: its tools, resources (and templates) and prompts.
    pub fn manifest(&self) -> &Manifest {
        &self.upstream.manifest
    }

    /// What the upstream said of itself in its handshake (`serverInfo`, the protocol version,
    /// its capabilities), as JSON.
    pub fn server(&self) -> Value {
        self.upstream.link.server_info().unwrap_or_default()
    }

    /// Call tool `name` with `arguments`: its result (a tool error result included), or why the
    /// request failed. Questions the upstream asks go to `input` (none: refused).
    pub fn call_tool(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        input: Option<Arc<dyn CallInput>>,
        events: Option<EventSink>,
    ) -> Result<Value, ClientError> {
        let index = self
            .manifest()
            .tools
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| ClientError::Unknown {
                what: "tool",
                name: name.to_owned(),
            })?;
        let args = Value::Object(arguments.clone()).to_string();
        let call = self.call_state(name, input, events);
        let index = u32::try_from(index).map_err(|e| ClientError::Request(e.to_string()))?;
        let text = self
            .upstream
            .call_blocking(index, &args, &call)
            .map_err(|e| ClientError::Request(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| ClientError::Request(e.to_string()))
    }

    /// Read resource `uri`.
    pub fn read_resource(
        &self,
        uri: &str,
        input: Option<Arc<dyn CallInput>>,
    ) -> Result<Value, ClientError> {
        self.envelope(
            uri,
            CallEnvelope::ReadResource {
                index: 0,
                uri: uri.to_owned(),
                variables: Map::new(),
            },
            input,
        )
    }

    /// Get prompt `name` with `arguments`.
    pub fn get_prompt(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        input: Option<Arc<dyn CallInput>>,
    ) -> Result<Value, ClientError> {
        let index = self
            .manifest()
            .prompts
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| ClientError::Unknown {
                what: "prompt",
                name: name.to_owned(),
            })?;
        let index = u32::try_from(index).map_err(|e| ClientError::Request(e.to_string()))?;
        let envelope = CallEnvelope::GetPrompt {
            index,
            arguments: arguments.clone(),
        };
        self.envelope(name, envelope, input)
    }

    /// Send an envelope (a resource read, a prompt) about `subject`.
    fn envelope(
        &self,
        subject: &str,
        envelope: CallEnvelope,
        input: Option<Arc<dyn CallInput>>,
    ) -> Result<Value, ClientError> {
        let args =
            serde_json::to_string(&envelope).map_err(|e| ClientError::Request(e.to_string()))?;
        let call = self.call_state(subject, input, None);
        let text = self
            .upstream
            .call_blocking(ENVELOPE_INDEX, &args, &call)
            .map_err(|e| ClientError::Request(e.to_string()))?;
        match serde_json::from_str::<EnvelopeOutcome>(&text) {
            Ok(EnvelopeOutcome::Ok(value)) => Ok(value),
            Ok(EnvelopeOutcome::Error(e)) => Err(ClientError::Request(e.message)),
            Err(e) => Err(ClientError::Request(e.to_string())),
        }
    }

    /// A call of this client's: its deadline the client's timeout, its questions to `input`.
    fn call_state(
        &self,
        subject: &str,
        input: Option<Arc<dyn CallInput>>,
        events: Option<EventSink>,
    ) -> Arc<CallState> {
        Arc::new(CallState {
            request: Arc::new(RequestContext::for_caller(None)),
            deadline: Some(Instant::now() + self.timeout),
            wants: EventWants::ALL,
            events,
            caller_json: Arc::from(""),
            depth: 0,
            tool: Arc::from(subject),
            input,
            inline: false,
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.upstream.link.retire();
    }
}

/// A sink for a call's events that hands each to `f`.
pub fn events(f: impl Fn(CallEvent) + Send + Sync + 'static) -> EventSink {
    Arc::new(f)
}
