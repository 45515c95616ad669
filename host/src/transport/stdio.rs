//! The stdio transport: newline-delimited JSON-RPC on stdin and (the protected) stdout, a pipe
//! around the connection [`Core`].
//!
//! A reader thread takes each line and polls its request once, right there: `ping`, `tools/list`
//! and tools that declare themselves `inline` finish without a single thread hand-off. Anything
//! still pending (a tool on the worker pool, a subscription) moves to the async runtime, so a slow
//! tool never blocks other requests. Messages are written under one lock, so a request's
//! notifications always precede its response. The process exits when stdin closes, after in-flight
//! requests finish (up to a grace period).

use std::future::Future;
use std::io::{BufRead, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Waker};
use std::time::Duration;

use mcp_plugin_sdk::UserInfo;
use serde_json::Value;

use super::core::{Batched, Core, Origin, Routed};
use crate::access::Identity;
use crate::exec::CancelFlag;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::session::{Inflight, LegacySession, Outbound};
use crate::protocol::{Protocol, Reply};

/// Settings of the stdio transport.
#[derive(Debug, Clone)]
pub struct StdioOptions {
    /// The caller every stdio request runs as (the process owner).
    pub caller: Option<UserInfo>,
    /// The agent whose view applies (`serve --stdio --agent NAME`), looked up per request so a
    /// reloaded configuration applies.
    pub agent: Option<String>,
    /// Largest accepted message, in bytes.
    pub max_message_bytes: usize,
    /// How long to wait for in-flight requests after stdin closes.
    pub grace: Duration,
}

struct Connection {
    core: Core,
    out: Writer,
    tasks: Mutex<tokio::task::JoinSet<()>>,
    session: OnceLock<Arc<LegacySession>>,
    inflight: Arc<Inflight>,
    /// Set when stdin closes: subscription streams end.
    closed: CancelFlag,
    options: StdioOptions,
}

/// The protected stdout, one whole message per write.
struct Writer(Mutex<Box<dyn Write + Send>>);

impl Outbound for Writer {
    /// Write one message and flush (a broken pipe means the client is gone).
    fn send(&self, message: &Value) -> bool {
        let mut out = lock(&self.0);
        serde_json::to_writer(&mut *out, message)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush())
            .is_ok()
    }
}

/// The stdio session's stream: the connection's stdout (weak: the connection owns the session).
struct SessionStream(std::sync::Weak<Connection>);

impl Outbound for SessionStream {
    fn send(&self, message: &Value) -> bool {
        self.0.upgrade().is_some_and(|conn| conn.out.send(message))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serve `protocol` over `input` and `output` until `input` closes. Call it inside a tokio runtime.
pub async fn serve(
    protocol: Protocol,
    input: impl Read + Send + 'static,
    output: impl Write + Send + 'static,
    options: StdioOptions,
) -> std::io::Result<()> {
    let conn = Arc::new(Connection {
        core: Core::new(protocol, CancelFlag::new()),
        out: Writer(Mutex::new(Box::new(std::io::BufWriter::new(output)))),
        tasks: Mutex::new(tokio::task::JoinSet::new()),
        session: OnceLock::new(),
        inflight: Arc::default(),
        closed: CancelFlag::new(),
        options,
    });
    let changes = tokio::spawn({
        let conn = Arc::clone(&conn);
        async move {
            let sessions = || conn.session.get().cloned().into_iter().collect();
            conn.core.fan_out_changes(sessions).await;
        }
    });
    let reader = {
        let conn = Arc::clone(&conn);
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("mcp-stdin".into())
            .spawn(move || read_loop(conn, input, runtime))?
    };
    let read = tokio::task::spawn_blocking(move || reader.join())
        .await
        .map_err(std::io::Error::other)?
        .unwrap_or_else(|_| Err(std::io::Error::other("the stdin reader panicked")));
    // stdin closed: subscription streams end now; in-flight requests finish within the grace period.
    conn.closed.cancel();
    let mut tasks = std::mem::take(&mut *lock(&conn.tasks));
    let grace = conn.options.grace;
    let _ = tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
    changes.abort();
    if conn.session.get().is_some() {
        conn.sessions_gauge().dec();
    }
    read
}

impl Connection {
    /// The `sessions{transport="stdio"}` gauge.
    fn sessions_gauge(&self) -> prometheus_client::metrics::gauge::Gauge {
        self.core
            .protocol()
            .host()
            .telemetry()
            .metrics()
            .sessions("stdio")
    }
}

/// Read lines; run each request on this thread until it would wait, then hand it to the runtime.
fn read_loop(
    conn: Arc<Connection>,
    input: impl Read,
    runtime: tokio::runtime::Handle,
) -> std::io::Result<()> {
    // Timers and semaphores in the call path need the runtime's context when first polled here.
    let _context = runtime.enter();
    let mut input = std::io::BufReader::new(input);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            conn.out.send(&jsonrpc::error_response(
                &Value::Null,
                &RpcError::parse("input is not valid UTF-8"),
            ));
            continue;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.len() > conn.options.max_message_bytes {
            conn.out.send(&jsonrpc::error_response(
                &Value::Null,
                &RpcError::invalid_request(format!(
                    "message of {} bytes exceeds the limit of {} bytes",
                    line.len(),
                    conn.options.max_message_bytes
                )),
            ));
            continue;
        }
        let value: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                conn.out.send(&jsonrpc::error_response(
                    &Value::Null,
                    &RpcError::parse(format!("invalid JSON: {e}")),
                ));
                continue;
            }
        };
        let task = Arc::clone(&conn);
        let mut message: Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(async move { task.handle(value).await });
        // Poll once here; a message that has to wait continues on the runtime, which polls it again
        // with a real waker (primitives re-check their state on every poll, so nothing is lost).
        if message
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
        {
            let mut tasks = lock(&conn.tasks);
            tasks.spawn_on(message, &runtime);
            // Reap finished tasks so the set stays small on long sessions.
            while tasks.try_join_next().is_some() {}
        }
    }
}

impl Connection {
    fn origin(&self) -> Origin {
        let host = self.core.protocol().host();
        Origin {
            session: self.session.get().cloned(),
            headers: None,
            identity: Identity {
                caller: self.options.caller.clone(),
                agent: self
                    .options
                    .agent
                    .as_deref()
                    .and_then(|a| host.access().agent(a)),
            },
            cache_private: false,
            inflight: Some(Arc::clone(&self.inflight)),
        }
    }

    async fn handle(self: Arc<Self>, value: Value) {
        let origin = self.origin();
        let (id, method, params) = match self.core.route(value, Some(&self.inflight)) {
            Routed::Request { id, method, params } => (id, method, params),
            Routed::Batch(items) => {
                match self.core.batch(items, &origin).await {
                    Batched::Replies(replies) => self.out.send(&replies),
                    Batched::Refused(e) => {
                        self.out.send(&jsonrpc::error_response(&Value::Null, &e))
                    }
                    Batched::Nothing => true,
                };
                return;
            }
            Routed::Invalid(id, e) => {
                self.out.send(&jsonrpc::error_response(&id, &e));
                return;
            }
            Routed::Done => return,
        };
        let cancel = CancelFlag::new();
        let notify_to = Arc::clone(&self);
        let notifier = Arc::new(move |n: Value| {
            notify_to.out.send(&n);
        });
        let answered = self
            .core
            .request(
                id.clone(),
                &method,
                params,
                &origin,
                cancel.clone(),
                Some(notifier),
            )
            .await;
        if answered.cancelled_by_client {
            // A cancelled request gets no response.
            return;
        }
        match answered.reply {
            Reply::Response { body, .. } => {
                self.out.send(&body);
            }
            Reply::Initialized {
                body,
                version,
                capabilities,
            } => {
                let session = Arc::new(LegacySession::new("stdio".into(), version, capabilities));
                session.attach_stream(Arc::new(SessionStream(Arc::downgrade(&self))));
                if self.session.set(session).is_err() {
                    self.out.send(&jsonrpc::error_response(
                        &id,
                        &RpcError::invalid_request("this connection is already initialized"),
                    ));
                    return;
                }
                self.sessions_gauge().inc();
                self.out.send(&body);
            }
            Reply::Listen { id, accepted } => {
                // The stream lasts until the client cancels it or stdin closes.
                self.inflight.track(&id, cancel.clone());
                tokio::select! {
                    () = self.core.listen(&id, &accepted, &self.out, None, &cancel) => {},
                    () = self.closed.cancelled() => {},
                }
                self.inflight.finish(&id);
            }
        }
    }
}
