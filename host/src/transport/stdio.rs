//! The stdio transport: newline-delimited JSON-RPC on stdin and (the protected) stdout, a pipe
//! around the connection [`Core`].
//!
//! A reader thread takes each line and polls its request once, right there: `ping`, `tools/list`
//! and tools that declare themselves `inline` finish without a single thread hand-off. Anything
//! still pending (a tool on the worker pool, a subscription) moves to the async runtime, so a slow
//! tool never blocks other requests. Messages are written under one lock, so a request's
//! notifications always precede its response. Answers given on the reader thread while more input
//! is already buffered are flushed together, before the reader next waits for input (a burst of
//! requests is answered in a few writes, not one per message); every other message is flushed as
//! it is written. The process exits when stdin closes, after in-flight
//! requests finish (up to a grace period).

use std::cell::Cell;
use std::future::Future;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Waker};
use std::time::Duration;

use mcp_plugin_sdk::UserInfo;
use serde_json::Value;

use super::core::{Batched, Core, Origin, Routed};
use crate::access::Identity;
use crate::exec::CancelFlag;
use crate::protocol::jsonrpc::{self, Received, RpcError};
use crate::protocol::session::{Inflight, LegacySession, Outbound};
use crate::protocol::{Message, Notifier, Protocol, Reply};

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
    /// Whom the per-caller limits count every request of this connection against.
    caller_key: Arc<str>,
    /// Where every request's notifications go: this connection's stdout.
    notifier: Notifier,
    options: StdioOptions,
}

/// The protected stdout, one whole message per write. The buffer is the writer's own type (not
/// behind the `dyn`): a message serialised token by token copies each into it without a call
/// through the vtable.
struct Writer(Mutex<BufWriter<Box<dyn Write + Send>>>);

thread_local! {
    /// Set on the reader thread while it answers a message with more input already buffered: the
    /// answer may wait in the buffer until the reader is about to block ([`Writer::flush`]).
    static DEFER_FLUSH: Cell<bool> = const { Cell::new(false) };
}

impl Writer {
    /// Write out whatever answers are buffered.
    fn flush(&self) {
        let _ = lock(&self.0).flush();
    }

    /// Write one reply (see [`Outbound::send`]).
    fn reply(&self, message: &Message) -> bool {
        self.line(|out| message.write_to(out))
    }

    /// Write one message with `write` and its newline, and flush unless the reader thread defers
    /// it (a broken pipe means the client is gone).
    fn line(
        &self,
        write: impl FnOnce(&mut BufWriter<Box<dyn Write + Send>>) -> std::io::Result<()>,
    ) -> bool {
        let mut out = lock(&self.0);
        write(&mut out)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| {
                if DEFER_FLUSH.get() {
                    Ok(())
                } else {
                    out.flush()
                }
            })
            .is_ok()
    }
}

impl Outbound for Writer {
    /// Write one message and flush unless the reader thread defers it (a broken pipe means the
    /// client is gone).
    fn send(&self, message: &Value) -> bool {
        self.line(|out| serde_json::to_writer(out, message).map_err(std::io::Error::from))
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
    // One caller for the whole connection: the process owner, or the agent named on the command
    // line (checked to exist at start).
    let caller_key = identity(&options, &protocol).caller_key(None);
    let conn = Arc::new_cyclic(|me: &std::sync::Weak<Connection>| Connection {
        notifier: {
            let me = me.clone();
            Arc::new(move |n: Value| {
                if let Some(conn) = me.upgrade() {
                    conn.out.send(&n);
                }
            })
        },
        caller_key,
        core: Core::new(protocol, CancelFlag::new()),
        // Large enough that a long answer (a full `tools/list` page) is one write.
        out: Writer(Mutex::new(BufWriter::with_capacity(
            64 * 1024,
            Box::new(output),
        ))),
        tasks: Mutex::new(tokio::task::JoinSet::new()),
        session: OnceLock::new(),
        inflight: Arc::new(Inflight::one_reader()),
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
    let (done, read) = tokio::sync::oneshot::channel();
    {
        let conn = Arc::clone(&conn);
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("mcp-stdin".into())
            .spawn(move || {
                let _ = done.send(read_loop(conn, input, runtime));
            })?;
    }
    // The sender is dropped unsent only if the reader panicked.
    let read = read
        .await
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
    let mut input = BufReader::new(input);
    let mut buf = Vec::new();
    let max = conn.options.max_message_bytes;
    loop {
        match read_line(&mut input, &mut buf, max, || conn.out.flush())? {
            Line::Eof => return Ok(()),
            Line::Message => {}
            Line::TooLong(size) => {
                conn.out.send(&jsonrpc::error_response(
                    &Value::Null,
                    &RpcError::invalid_request(format!(
                        "message of {size} bytes exceeds the limit of {max} bytes"
                    )),
                ));
                continue;
            }
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
        let read = match jsonrpc::read(line) {
            Ok(read) => read,
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
            Box::pin(async move { task.handle(read).await });
        // Poll once here; a message that has to wait continues on the runtime, which polls it again
        // with a real waker (primitives re-check their state on every poll, so nothing is lost).
        // With more input already buffered, what it writes here is flushed with the next answers.
        DEFER_FLUSH.set(!input.buffer().is_empty());
        let polled = message
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        DEFER_FLUSH.set(false);
        if polled.is_pending() {
            let mut tasks = lock(&conn.tasks);
            tasks.spawn_on(message, &runtime);
            // Reap finished tasks so the set stays small on long sessions.
            while tasks.try_join_next().is_some() {}
        }
    }
}

/// What [`read_line`] found.
#[derive(Debug, PartialEq)]
enum Line {
    /// A message (without its newline) is in the buffer.
    Message,
    /// A message of this many bytes (so far) was over the limit and skipped up to its newline.
    TooLong(usize),
    /// The input is closed.
    Eof,
}

/// Read one newline-terminated message into `buf` in the reader's own chunks, never holding more
/// than `max` bytes of it: a longer message is dropped as it streams in, up to its newline.
/// `idle` runs each time the reader has nothing buffered and is about to wait for input.
fn read_line(
    input: &mut BufReader<impl Read>,
    buf: &mut Vec<u8>,
    max: usize,
    mut idle: impl FnMut(),
) -> std::io::Result<Line> {
    buf.clear();
    let mut skipped: Option<usize> = None;
    loop {
        if input.buffer().is_empty() {
            idle();
        }
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match skipped {
                Some(size) => Line::TooLong(size),
                None if buf.is_empty() => Line::Eof,
                None => Line::Message,
            });
        }
        let newline = chunk.iter().position(|b| *b == b'\n');
        let part = &chunk[..newline.unwrap_or(chunk.len())];
        match &mut skipped {
            Some(size) => *size += part.len(),
            None if buf.len() + part.len() > max => {
                skipped = Some(buf.len() + part.len());
                buf.clear();
            }
            None => buf.extend_from_slice(part),
        }
        let used = newline.map_or(chunk.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            return Ok(skipped.map_or(Line::Message, Line::TooLong));
        }
    }
}

/// The connection's caller: the process owner, with the agent named on the command line as the
/// current configuration defines it.
fn identity(options: &StdioOptions, protocol: &Protocol) -> Identity {
    Identity {
        caller: options.caller.clone(),
        agent: (options.agent.as_deref()).and_then(|a| protocol.host().access().agent(a)),
        claims: None,
        subject_token: None,
    }
}

impl Connection {
    fn origin(&self) -> Origin {
        Origin {
            session: self.session.get().cloned(),
            headers: None,
            caller_key: Arc::clone(&self.caller_key),
            identity: identity(&self.options, self.core.protocol()),
            cache_private: false,
            inflight: Some(Arc::clone(&self.inflight)),
        }
    }

    async fn handle(self: Arc<Self>, read: Received) {
        let origin = self.origin();
        let (id, method, params) = match self.core.route(read, &origin) {
            Routed::Request { id, method, params } => (id, method, params),
            Routed::Batch(items) => {
                // Boxed: a batch's future holds a request's and more, and every message's future
                // would otherwise be that large and copied whole into its box (README, Performance).
                match Box::pin(self.core.batch(items, &origin)).await {
                    Batched::Replies(replies) => self.out.reply(&replies),
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
        let answered = self
            .core
            .request(
                id.clone(),
                &method,
                params,
                &origin,
                cancel.clone(),
                Some(Arc::clone(&self.notifier)),
            )
            .await;
        if answered.cancelled_by_client {
            // A cancelled request gets no response.
            return;
        }
        match answered.reply {
            Reply::Response { body, .. } => {
                self.out.reply(&body);
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
                self.out.reply(&body);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_line_is_skipped_to_its_newline_without_being_buffered() {
        let long = "x".repeat(100);
        let input = format!("{{}}\n{long}\nab\n{long}");
        // A small reader buffer: the long lines arrive in several chunks.
        let mut reader = std::io::BufReader::with_capacity(8, input.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut buf, 10, || {}).unwrap(),
            Line::Message
        );
        assert_eq!(buf, b"{}");
        assert_eq!(
            read_line(&mut reader, &mut buf, 10, || {}).unwrap(),
            Line::TooLong(100)
        );
        assert!(buf.capacity() <= 16, "held {} bytes", buf.capacity());
        assert_eq!(
            read_line(&mut reader, &mut buf, 10, || {}).unwrap(),
            Line::Message
        );
        assert_eq!(buf, b"ab");
        assert_eq!(
            read_line(&mut reader, &mut buf, 10, || {}).unwrap(),
            Line::TooLong(100)
        );
        assert_eq!(
            read_line(&mut reader, &mut buf, 10, || {}).unwrap(),
            Line::Eof
        );
    }
}
