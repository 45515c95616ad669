//! The stdio transport: newline-delimited JSON-RPC on stdin and (the protected) stdout.
//!
//! A reader thread takes each line and polls its request once, right there: `ping`, `tools/list`
//! and tools that declare themselves `inline` finish without a single thread hand-off. Anything
//! still pending (a tool on the worker pool, a subscription) moves to the async runtime, so a slow
//! tool never blocks other requests. Messages are written under one lock, so a request's
//! notifications always precede its response. The process exits when stdin closes, after in-flight
//! requests finish (up to a grace period).

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Waker};
use std::time::Duration;

use mcp_plugin_sdk::UserInfo;
use serde_json::Value;

use crate::plugins::host_api::CancelFlag;
use crate::protocol::jsonrpc::{self, Incoming, RpcError};
use crate::protocol::session::LegacySession;
use crate::protocol::{Exchange, Protocol, Reply};

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
    protocol: Protocol,
    out: Mutex<Box<dyn Write + Send>>,
    tasks: Mutex<tokio::task::JoinSet<()>>,
    session: OnceLock<Arc<LegacySession>>,
    inflight: Mutex<HashMap<String, CancelFlag>>,
    listens: Mutex<Vec<CancelFlag>>,
    options: StdioOptions,
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
        protocol,
        out: Mutex::new(Box::new(std::io::BufWriter::new(output))),
        tasks: Mutex::new(tokio::task::JoinSet::new()),
        session: OnceLock::new(),
        inflight: Mutex::new(HashMap::new()),
        listens: Mutex::new(Vec::new()),
        options,
    });
    let changes = tokio::spawn(forward_changes(Arc::clone(&conn)));
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
    for flag in lock(&conn.listens).drain(..) {
        flag.cancel();
    }
    let mut tasks = std::mem::take(&mut *lock(&conn.tasks));
    let grace = conn.options.grace;
    let _ = tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
    changes.abort();
    read
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
            conn.send(jsonrpc::error_response(
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
            conn.send(jsonrpc::error_response(
                &Value::Null,
                &RpcError::invalid_request(format!(
                    "message of {} bytes exceeds the limit of {} bytes",
                    line.len(),
                    conn.options.max_message_bytes
                )),
            ));
            continue;
        }
        let line = line.to_owned();
        let task = Arc::clone(&conn);
        let mut request: Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(async move { task.handle_line(&line).await });
        // Poll once here; a request that has to wait continues on the runtime, which polls it again
        // with a real waker (primitives re-check their state on every poll, so nothing is lost).
        if request
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
        {
            let mut tasks = lock(&conn.tasks);
            tasks.spawn_on(request, &runtime);
            // Reap finished tasks so the set stays small on long sessions.
            while tasks.try_join_next().is_some() {}
        }
    }
}

async fn forward_changes(conn: Arc<Connection>) {
    let mut changes = conn.protocol.host().changes();
    while changes.next().await {
        if conn.session.get().is_some() {
            conn.send(Protocol::tools_changed(None));
        }
    }
}

impl Connection {
    /// Write one message and flush (a broken pipe means the client is gone: nothing to do).
    fn send(&self, message: Value) {
        let mut out = lock(&self.out);
        let _ = serde_json::to_writer(&mut *out, &message)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
    }

    async fn handle_line(self: Arc<Self>, line: &str) {
        let value: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                self.send(jsonrpc::error_response(
                    &Value::Null,
                    &RpcError::parse(format!("invalid JSON: {e}")),
                ));
                return;
            }
        };
        if let Value::Array(items) = value {
            let batches_allowed = self.session.get().is_some_and(|s| s.allows_batches());
            if !batches_allowed || items.is_empty() {
                self.send(jsonrpc::error_response(
                    &Value::Null,
                    &RpcError::invalid_request(
                        "JSON-RPC batches are not supported by this protocol revision",
                    ),
                ));
                return;
            }
            let mut replies = Vec::new();
            for item in items {
                if let Some(reply) = Arc::clone(&self).handle_message(item, false).await {
                    replies.push(reply);
                }
            }
            if !replies.is_empty() {
                self.send(Value::Array(replies));
            }
            return;
        }
        if let Some(reply) = Arc::clone(&self).handle_message(value, true).await {
            self.send(reply);
        }
    }

    /// Handle one message; returns the response to write (if any).
    async fn handle_message(self: Arc<Self>, value: Value, streaming: bool) -> Option<Value> {
        let (id, method, params) = match jsonrpc::classify(value) {
            Ok(Incoming::Request { id, method, params }) => (id, method, params),
            Ok(Incoming::Notification { method, params }) => {
                if method == "notifications/cancelled"
                    && let Some(id) = crate::protocol::cancelled_request(&params)
                    && let Some(flag) = lock(&self.inflight).remove(&id.to_string())
                {
                    flag.cancel();
                }
                return None;
            }
            Ok(Incoming::Response) => return None,
            Err((id, e)) => return Some(jsonrpc::error_response(&id, &e)),
        };
        let cancel = CancelFlag::new();
        let key = id.to_string();
        lock(&self.inflight).insert(key.clone(), cancel.clone());
        let notify_to = Arc::clone(&self);
        let exchange = Exchange {
            session: self.session.get().cloned(),
            headers: None,
            caller: self.options.caller.clone(),
            agent: self
                .options
                .agent
                .as_deref()
                .and_then(|a| self.protocol.host().access().agent(a)),
            cancel: cancel.clone(),
            notifier: Some(Arc::new(move |n| notify_to.send(n))),
            cache_private: false,
        };
        let reply = self
            .protocol
            .handle_request(id.clone(), &method, params, exchange)
            .await;
        // `notifications/cancelled` takes the request out of `inflight`; the flag alone is not
        // enough, since the host also sets it when a call times out, and that call must be answered.
        let cancelled_by_client = lock(&self.inflight).remove(&key).is_none();
        if cancelled_by_client {
            // A cancelled request gets no response.
            return None;
        }
        match reply {
            Reply::Response { body, .. } => Some(body),
            Reply::Initialized {
                body,
                version,
                capabilities,
            } => {
                let session = Arc::new(LegacySession::new("stdio".into(), version, capabilities));
                if self.session.set(session).is_err() {
                    return Some(jsonrpc::error_response(
                        &id,
                        &RpcError::invalid_request("this connection is already initialized"),
                    ));
                }
                Some(body)
            }
            Reply::Listen { id, accepted } => {
                if !streaming {
                    return Some(jsonrpc::error_response(
                        &id,
                        &RpcError::invalid_request("subscriptions/listen cannot be batched"),
                    ));
                }
                self.send(Protocol::listen_ack(&id, &accepted));
                if accepted.get("toolsListChanged").is_some() {
                    let mut changes = self.protocol.host().changes();
                    let cancel_wait = async {
                        while !cancel.is_cancelled() {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    };
                    let forward = async {
                        while changes.next().await {
                            self.send(Protocol::tools_changed(Some(&id)));
                        }
                    };
                    lock(&self.inflight).insert(key.clone(), cancel.clone());
                    lock(&self.listens).push(cancel.clone());
                    tokio::select! {
                        _ = forward => {},
                        _ = cancel_wait => { lock(&self.inflight).remove(&key); return None; },
                    }
                    lock(&self.inflight).remove(&key);
                }
                Some(self.protocol.listen_end(&id))
            }
        }
    }
}
