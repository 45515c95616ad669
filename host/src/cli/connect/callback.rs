//! The loopback listener an authorization server's redirect comes back to (RFC 8252 §7.3): HTTP on
//! 127.0.0.1 (or `--callback`, loopback only), any port, `GET /callback?code=…&state=…&iss=…`. Each
//! callback is handed to the authorization waiting for it; the browser is told it may close the
//! window. Bounded: one connection at a time, a request head of at most 8 KiB read within 10 s,
//! at most [`MAX_PENDING`] callbacks not yet taken (more are answered 503).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use mcp_host::access::upstream::flow::Callback;
use tokio::sync::mpsc;

/// The path callbacks come to.
pub(crate) const PATH: &str = "/callback";
/// The longest request head read.
const MAX_HEAD: usize = 8 << 10;
/// How long a connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Callbacks received and not yet taken.
const MAX_PENDING: usize = 8;

/// A listening callback endpoint.
pub(crate) struct Listener {
    addr: SocketAddr,
    received: tokio::sync::Mutex<mpsc::Receiver<Callback>>,
}

impl Listener {
    /// Listen on `addr` (a loopback address; port 0: any), in a thread of its own.
    pub(crate) fn start(addr: SocketAddr) -> anyhow::Result<Arc<Listener>> {
        anyhow::ensure!(
            addr.ip().is_loopback(),
            "--callback {addr}: the callback listener listens on a loopback address only"
        );
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("cannot listen for the OAuth callback on {addr}"))?;
        let addr = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(MAX_PENDING);
        std::thread::Builder::new()
            .name("mcp-oauth-callback".into())
            .spawn(move || {
                for stream in listener.incoming().map_while(Result::ok) {
                    serve(stream, &tx);
                }
            })?;
        Ok(Arc::new(Listener {
            addr,
            received: tokio::sync::Mutex::new(rx),
        }))
    }

    /// The redirect URI it receives.
    pub(crate) fn redirect_uri(&self) -> String {
        format!("http://{}{PATH}", self.addr)
    }

    /// The next callback, within `timeout`.
    pub(crate) async fn next(&self, timeout: Duration) -> Option<Callback> {
        let mut received = self.received.lock().await;
        tokio::time::timeout(timeout, received.recv())
            .await
            .ok()
            .flatten()
    }
}

/// Answer one connection: a callback is handed on, anything else refused.
fn serve(mut stream: TcpStream, tx: &mpsc::Sender<Callback>) {
    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
    let (status, text) = match read_target(&mut stream) {
        Some(target) => match target.split_once('?') {
            Some((path, query)) if path == PATH => match tx.try_send(Callback::from_query(query)) {
                Ok(()) => (
                    "200 OK",
                    "Authorization received: you may close this window.",
                ),
                Err(_) => ("503 Service Unavailable", "Too many callbacks."),
            },
            _ => ("404 Not Found", "Not an OAuth callback."),
        },
        None => ("400 Bad Request", "Not an HTTP GET request."),
    };
    let body = format!("<!doctype html><title>mcp-host</title><p>{text}</p>\n");
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\n\
         content-security-policy: default-src 'none'\r\ncache-control: no-store\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// The request target of a GET read from `stream` (at most [`MAX_HEAD`] bytes of head).
fn read_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&head) {
            Ok(httparse::Status::Complete(_)) if request.method == Some("GET") => {
                return request.path.map(str::to_owned);
            }
            Ok(httparse::Status::Complete(_)) | Err(_) => return None,
            Ok(httparse::Status::Partial) if head.len() > MAX_HEAD => return None,
            Ok(httparse::Status::Partial) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        answer
    }

    #[tokio::test]
    async fn a_callback_is_handed_on_and_anything_else_refused() {
        let listener = Listener::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.addr;
        assert_eq!(listener.redirect_uri(), format!("http://{addr}/callback"));
        let answer = get(
            addr,
            "GET /elsewhere?code=c&state=s HTTP/1.1\r\nhost: x\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        let answer = get(addr, "POST /callback?code=c HTTP/1.1\r\nhost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        let answer = get(
            addr,
            "GET /callback?code=c1&state=s1&iss=x HTTP/1.1\r\nhost: x\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let callback = listener.next(Duration::from_secs(30)).await.unwrap();
        assert_eq!(callback.state.as_deref(), Some("s1"));
        assert_eq!(callback.code.unwrap().expose(), "c1");
        // A head that never ends is not read past its bound (the connection is answered or
        // reset), and the listener serves the next one.
        let long = format!("GET /callback?x={} HTTP/1.1\r\n", "a".repeat(MAX_HEAD * 2));
        let mut conn = TcpStream::connect(addr).unwrap();
        let _ = conn.write_all(long.as_bytes());
        let mut answer = String::new();
        let _ = conn.read_to_string(&mut answer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 400"),
            "{answer}"
        );
        let answer = get(addr, "GET /callback?state=s2 HTTP/1.1\r\nhost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let callback = listener.next(Duration::from_secs(30)).await.unwrap();
        assert_eq!(callback.state.as_deref(), Some("s2"));
        assert!(Listener::start("0.0.0.0:0".parse().unwrap()).is_err());
    }
}
