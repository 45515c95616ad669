//! The private channel between the host and one plugin worker: the messages each side sends and
//! their framing on a byte stream — a little-endian `u32` length, then the message in postcard.
//!
//! Reads spin briefly before blocking when an answer is expected soon: waking an idle core costs
//! tens of microseconds on a VM, while a message usually arrives within a few. The spin polls the
//! socket without blocking (`MSG_DONTWAIT`) and yields the core between polls; idle channels block
//! at once, and a process allowed a single CPU never spins (the peer could not run meanwhile).

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::plugins::backend::{HostRequest, HostRequestError, PluginCallError};

/// Largest message either side accepts (a bigger length prefix is a broken or hostile peer).
pub(crate) const MAX_FRAME: usize = 256 << 20;

/// How long a read may poll before it blocks.
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// What the host sends a worker.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ToWorker {
    /// The first message: what to load and under which restrictions.
    Init(Init),
    /// Run tool number `tool`.
    Call {
        /// The call's id on this channel.
        id: u64,
        /// The tool's index in the manifest.
        tool: u32,
        /// Arguments as JSON.
        args: String,
        /// The caller as JSON (empty when none).
        caller: String,
        /// Milliseconds left before the call's deadline.
        deadline_ms: Option<u64>,
    },
    /// The call was cancelled.
    Cancel {
        /// The call.
        id: u64,
    },
    /// The answer to a worker's [`FromWorker::Request`].
    Reply {
        /// The request.
        id: u64,
        /// JSON, or why the host could not answer it.
        result: Result<String, HostRequestError>,
    },
    /// Run the plugin's shutdown hook and exit.
    Shutdown,
}

/// How a worker sets itself up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Init {
    /// The plugin file to load (the host's private copy).
    pub file: PathBuf,
    /// The plugin's configuration section as JSON.
    pub config: String,
    /// Resource limits.
    pub limits: Limits,
    /// Kernel-enforced permissions (`None`: no sandbox).
    pub sandbox: Option<Sandbox>,
}

/// Resource limits of the worker process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Limits {
    /// `RLIMIT_AS` in bytes.
    pub address_space: Option<u64>,
    /// `RLIMIT_CPU` in seconds.
    pub cpu_secs: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
}

/// What a sandboxed worker may reach; everything else is denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sandbox {
    /// Readable paths (and everything beneath).
    pub read: Vec<PathBuf>,
    /// Writable paths (and everything beneath).
    pub write: Vec<PathBuf>,
    /// Paths programs may be run from (the kernel executes them; when `exec` is false, only the
    /// confined process's own `exec` of its command can use them).
    pub exec_paths: Vec<PathBuf>,
    /// TCP ports it may connect to; `None`: any.
    pub connect_ports: Option<Vec<u16>>,
    /// Whether it may run programs.
    pub exec: bool,
    /// Start anyway when the kernel cannot enforce all of it.
    pub allow_weaker: bool,
    /// Unix-domain sockets it may connect to, by path (`permissions.unix_sockets`). Empty: no
    /// Unix socket may be created (socket pairs stay allowed, but not datagram ones, which can
    /// send to a named socket).
    pub unix_sockets: Vec<PathBuf>,
}

/// What a worker sends the host.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum FromWorker {
    /// The plugin is loaded: its build fingerprint and manifest, as JSON.
    Ready {
        /// [`mcp_plugin_sdk::wire::BuildInfo`] as JSON.
        build: String,
        /// [`mcp_plugin_sdk::wire::Manifest`] as JSON.
        manifest: String,
    },
    /// The worker could not set up or load the plugin.
    Failed {
        /// Which [`crate::plugins::LoadError`] it is.
        kind: String,
        /// The message.
        message: String,
    },
    /// A call's result.
    Result {
        /// The call.
        id: u64,
        /// The `CallToolResult` as JSON, or why the call could not run.
        result: Result<String, PluginCallError>,
    },
    /// A call's progress.
    Progress {
        /// The call.
        id: u64,
        /// Work done.
        progress: f64,
        /// Total work, when known.
        total: Option<f64>,
        /// What is happening.
        message: Option<String>,
    },
    /// A log message for the client that made a call.
    Log {
        /// The call.
        id: u64,
        /// The level number.
        level: u8,
        /// The text.
        message: String,
    },
    /// A line for the host's log.
    HostLog {
        /// The level number.
        level: u8,
        /// The service, may be empty.
        service: String,
        /// The text.
        message: String,
    },
    /// The plugin asks the host for something: a nested tool call, a change announcement, its
    /// data directory, or (through a call's context) the client's capabilities, the start of a
    /// task, a question to the client. Answered by [`ToWorker::Reply`] with the same id.
    Request {
        /// This request's id on this channel.
        id: u64,
        /// The call it is made in: the parent of a nested call, the call a call-context request
        /// is about (`None` outside calls, e.g. in a service's constructor).
        call: Option<u64>,
        /// What it asks.
        request: HostRequest,
    },
}

/// A message as one frame: length prefix and postcard body.
pub(crate) fn encode<T: Serialize>(message: &T) -> io::Result<Vec<u8>> {
    let mut frame = postcard::to_extend(message, vec![0u8; 4]).map_err(io::Error::other)?;
    let len = u32::try_from(frame.len() - 4)
        .ok()
        .filter(|l| *l as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "message too large"))?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    Ok(frame)
}

/// A byte stream frames are read from: a blocking read, and (where the platform allows it) a read
/// that returns at once when nothing is there.
pub(crate) trait Source: Read {
    /// Read what is available now; `None` when nothing is (or polling is not supported).
    fn read_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
}

impl<S: Source + ?Sized> Source for Box<S> {
    fn read_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).read_now(buf)
    }
}

/// A source that can only block (a pipe, where there is no non-blocking receive).
#[cfg(not(unix))]
pub(crate) struct Blocking<R>(pub R);

#[cfg(not(unix))]
impl<R: Read> Read for Blocking<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

#[cfg(not(unix))]
impl<R: Read> Source for Blocking<R> {
    fn read_now(&mut self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(None)
    }
}

#[cfg(unix)]
impl Source for std::os::unix::net::UnixStream {
    fn read_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        use rustix::net::{RecvFlags, recv};
        match recv(&*self, buf, RecvFlags::DONTWAIT) {
            Ok((_, n)) => Ok(Some(n)),
            Err(rustix::io::Errno::AGAIN) => Ok(None),
            Err(rustix::io::Errno::INTR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// The buffer a [`FrameReader`] starts with and shrinks back to after a large frame.
const BASE_BUFFER: usize = 64 * 1024;

/// Reads frames from a [`Source`], buffering what arrives past the current one.
///
/// Its memory follows the bytes that actually arrived, never a length prefix alone: a prefix over
/// the reader's limit is refused at once (the peer is broken or hostile), and a frame under it
/// grows the buffer only as its bytes come in; after a frame larger than [`BASE_BUFFER`] the
/// buffer shrinks back.
pub(crate) struct FrameReader<S> {
    source: S,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The largest frame body accepted.
    limit: usize,
}

impl<S: Source> FrameReader<S> {
    /// A reader over `source` accepting frames up to [`MAX_FRAME`].
    pub(crate) fn new(source: S) -> Self {
        Self::with_limit(source, MAX_FRAME)
    }

    /// A reader over `source` accepting frame bodies up to `limit` bytes (at most [`MAX_FRAME`]).
    pub(crate) fn with_limit(source: S, limit: usize) -> Self {
        FrameReader {
            source,
            buf: vec![0; BASE_BUFFER],
            start: 0,
            end: 0,
            limit: limit.min(MAX_FRAME),
        }
    }

    /// The bytes the reader holds now (its buffer's capacity), for tests and the fuzz suite.
    pub(crate) fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// The next message. With `spin`, poll for up to [`SPIN`] before blocking. An end of stream
    /// is `UnexpectedEof`; a frame that does not decode, or whose length is over the limit, is
    /// `InvalidData`.
    pub(crate) fn next<T: DeserializeOwned>(&mut self, spin: bool) -> io::Result<T> {
        loop {
            if let Some(message) = self.take()? {
                return Ok(message);
            }
            self.make_room();
            let spare = &mut self.buf[self.end..];
            let read = if spin {
                poll(&mut self.source, spare)?
            } else {
                None
            };
            let n = match read {
                Some(n) => n,
                None => loop {
                    match self.source.read(spare) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        other => break other?,
                    }
                },
            };
            self.filled(n)?;
        }
    }

    /// The next message if one can be read without blocking.
    pub(crate) fn try_next<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        loop {
            if let Some(message) = self.take()? {
                return Ok(Some(message));
            }
            self.make_room();
            match self.source.read_now(&mut self.buf[self.end..])? {
                Some(n) => self.filled(n)?,
                None => return Ok(None),
            }
        }
    }

    /// The length of the buffered frame's body, when its prefix is complete; an error when it is
    /// over the limit.
    fn pending_len(&self) -> io::Result<Option<usize>> {
        if self.end - self.start < 4 {
            return Ok(None);
        }
        let mut prefix = [0u8; 4];
        prefix.copy_from_slice(&self.buf[self.start..self.start + 4]);
        let len = u32::from_le_bytes(prefix) as usize;
        if len > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame of {len} bytes is over the {} byte limit", self.limit),
            ));
        }
        Ok(Some(len))
    }

    /// The buffered frame, decoded, when it is complete.
    fn take<T: DeserializeOwned>(&mut self) -> io::Result<Option<T>> {
        let Some(len) = self.pending_len()? else {
            return Ok(None);
        };
        if self.end - self.start < 4 + len {
            return Ok(None);
        }
        let body = &self.buf[self.start + 4..self.start + 4 + len];
        let message = postcard::from_bytes(body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
        self.start += 4 + len;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
            if self.buf.len() > BASE_BUFFER {
                // A large frame is done: give its memory back.
                self.buf = vec![0; BASE_BUFFER];
            }
        }
        message.map(Some)
    }

    /// Make sure there is room past `end` for the next bytes: move what is buffered to the front,
    /// and grow only when a frame's bytes that already arrived fill the buffer (by doubling, never
    /// past what the frame needs).
    fn make_room(&mut self) {
        if self.end < self.buf.len() {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
            return;
        }
        // The buffer holds the start of one frame and nothing else.
        let needed = match self.pending_len() {
            Ok(Some(len)) => 4 + len,
            // A too-long prefix is reported by the next `take`; a partial prefix needs 4 bytes.
            _ => self.buf.len() + 1,
        };
        let grown = (self.buf.len() * 2).min(needed.max(self.buf.len() + 1));
        self.buf.resize(grown, 0);
    }

    /// `n` bytes arrived (none: the end of the stream).
    fn filled(&mut self, n: usize) -> io::Result<()> {
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.end += n;
        Ok(())
    }
}

/// Whether spinning can pay: this process may run on more than one CPU, so the other side of the
/// channel can answer while this one polls.
pub(crate) fn spinning_pays() -> bool {
    crate::plugins::call::cores() > 1
}

/// Poll `source` for up to [`SPIN`], yielding the core between polls.
fn poll<S: Source>(source: &mut S, buf: &mut [u8]) -> io::Result<Option<usize>> {
    if !spinning_pays() {
        return Ok(None);
    }
    let until = Instant::now() + SPIN;
    loop {
        if let Some(n) = source.read_now(buf)? {
            return Ok(Some(n));
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        std::thread::yield_now();
    }
}

/// Writes whole frames, one at a time, from any thread.
pub(crate) struct FrameWriter<W> {
    sink: Mutex<W>,
}

impl<W: Write> FrameWriter<W> {
    /// A writer over `sink`.
    pub(crate) fn new(sink: W) -> Self {
        FrameWriter {
            sink: Mutex::new(sink),
        }
    }

    /// Write one encoded frame.
    pub(crate) fn send_frame(&self, frame: &[u8]) -> io::Result<()> {
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        sink.write_all(frame)?;
        sink.flush()
    }

    /// Encode and write one message.
    pub(crate) fn send<T: Serialize>(&self, message: &T) -> io::Result<()> {
        self.send_frame(&encode(message)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An in-memory source that hands out its bytes in small pieces.
    struct Pieces(Vec<u8>, usize);

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.1).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }

    impl Source for Pieces {
        fn read_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            self.read(buf).map(Some)
        }
    }

    #[test]
    fn frames_round_trip_across_split_reads_and_a_growing_buffer() {
        let big = "x".repeat(200_000);
        let messages = [
            ToWorker::Cancel { id: 7 },
            ToWorker::Call {
                id: 8,
                tool: 2,
                args: big.clone(),
                caller: String::new(),
                deadline_ms: Some(5),
            },
            ToWorker::Reply {
                id: 9,
                result: Err(HostRequestError::NoAnswer),
            },
        ];
        let mut bytes = Vec::new();
        for m in &messages {
            bytes.extend(encode(m).expect("encode"));
        }
        for piece in [1, 3, 4096, usize::MAX] {
            let mut reader = FrameReader::new(Pieces(bytes.clone(), piece));
            assert!(matches!(
                reader.next::<ToWorker>(piece % 2 == 1),
                Ok(ToWorker::Cancel { id: 7 })
            ));
            match reader.next::<ToWorker>(false) {
                Ok(ToWorker::Call { id: 8, args, .. }) => assert_eq!(args, big),
                other => panic!("{other:?}"),
            }
            assert!(matches!(
                reader.next::<ToWorker>(false),
                Ok(ToWorker::Reply {
                    id: 9,
                    result: Err(HostRequestError::NoAnswer)
                })
            ));
            let end = reader.next::<ToWorker>(false).expect_err("end");
            assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    /// A source whose bytes arrive in steps: `read_now` finds nothing between them.
    struct Steps(Vec<Vec<u8>>);

    impl Read for Steps {
        fn read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
            unreachable!("only read_now is used")
        }
    }

    impl Source for Steps {
        fn read_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            match self.0.first_mut() {
                None => Ok(Some(0)),
                Some(step) if step.is_empty() => {
                    self.0.remove(0);
                    Ok(None)
                }
                Some(step) => {
                    let n = buf.len().min(step.len());
                    buf[..n].copy_from_slice(&step[..n]);
                    step.drain(..n);
                    Ok(Some(n))
                }
            }
        }
    }

    #[test]
    fn try_next_returns_a_frame_only_once_it_is_complete() {
        let frame = encode(&ToWorker::Cancel { id: 5 }).expect("encode");
        let (head, tail) = frame.split_at(3);
        // Each step, once read, leaves a pause (an empty step) before the next.
        let mut reader = FrameReader::new(Steps(vec![head.to_vec(), tail.to_vec()]));
        assert!(reader.try_next::<ToWorker>().expect("partial").is_none());
        assert!(matches!(
            reader.try_next::<ToWorker>(),
            Ok(Some(ToWorker::Cancel { id: 5 }))
        ));
        assert!(reader.try_next::<ToWorker>().expect("nothing").is_none());
        let end = reader.try_next::<ToWorker>().expect_err("end");
        assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_length_prefix_alone_reserves_nothing_and_one_over_the_limit_is_refused() {
        // 200 MiB announced, 100 KiB sent: the buffer follows the bytes, not the prefix.
        let mut bytes = (200u32 << 20).to_le_bytes().to_vec();
        bytes.extend(vec![0; 100 * 1024]);
        let mut reader = FrameReader::with_limit(Pieces(bytes, 4096), MAX_FRAME);
        let end = reader.next::<FromWorker>(false).expect_err("incomplete");
        assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof);
        assert!(reader.held() <= 256 * 1024, "held {}", reader.held());
        let mut over = 1025u32.to_le_bytes().to_vec();
        over.extend([0; 8]);
        let err = FrameReader::with_limit(Pieces(over, 64), 1024)
            .next::<FromWorker>(false)
            .expect_err("over the limit");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(
            err.to_string().contains("over the 1024 byte limit"),
            "{err}"
        );
    }

    #[test]
    fn the_buffer_shrinks_back_after_a_large_frame() {
        let big = ToWorker::Reply {
            id: 1,
            result: Ok("x".repeat(1 << 20)),
        };
        let mut bytes = encode(&big).expect("encode");
        bytes.extend(encode(&ToWorker::Cancel { id: 2 }).expect("encode"));
        let mut reader = FrameReader::new(Pieces(bytes, 1 << 16));
        assert!(matches!(
            reader.next::<ToWorker>(false),
            Ok(ToWorker::Reply { .. })
        ));
        assert!(matches!(
            reader.next::<ToWorker>(false),
            Ok(ToWorker::Cancel { id: 2 })
        ));
        assert_eq!(reader.held(), BASE_BUFFER);
    }

    #[test]
    fn oversized_and_undecodable_frames_are_errors_not_panics() {
        let mut huge = ((MAX_FRAME as u32) + 1).to_le_bytes().to_vec();
        huge.extend([0; 16]);
        let err = FrameReader::new(Pieces(huge, 64))
            .next::<ToWorker>(false)
            .expect_err("too big");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let mut junk = 3u32.to_le_bytes().to_vec();
        junk.extend([250, 251, 252]);
        let err = FrameReader::new(Pieces(junk, 64))
            .next::<FromWorker>(false)
            .expect_err("junk");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
