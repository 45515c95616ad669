//! An HTTP upstream's client and its failures in words. The client (one per session, reqwest with
//! rustls on the ring provider, under rmcp's Streamable HTTP transport) sends the entry's
//! `server.headers` with every request — POST, the GET of the event stream, the DELETE that ends
//! a session — and follows **no redirect**: a 3xx is an error naming its `Location`, since a
//! redirect would carry those headers (an `X-Api-Key`) and every JSON-RPC body to wherever the
//! upstream points. `server.follow_redirects: same_origin` follows redirects to the endpoint's own
//! origin (scheme, host and port), never another, never from https to http.
//!
//! A failure reads as what happened and where — `HTTP 404 Not Found from http://…/mcp`,
//! `connection refused: http://…`, a redirect not followed — not as rmcp's and reqwest's types.

use std::collections::HashMap;
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};

use super::credentialed::Credentialed;
use crate::access::upstream::Authorizer;
use crate::config::FollowRedirects;
use crate::plugins::{LoadError, output};

/// The most redirects followed for one request (`same_origin`).
const MAX_REDIRECTS: usize = 5;

/// An HTTP upstream's client: reqwest, its answers read as [`super::answers`] says, its requests
/// authorized as [`super::credentialed`] says.
pub(super) type Client = Credentialed<super::answers::Client>;

/// How an HTTP upstream is reached.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// The Streamable HTTP endpoint.
    pub(crate) url: String,
    /// Headers sent with every request (`server.headers`).
    pub(crate) headers: Vec<(String, String)>,
    /// Which redirects are followed (`server.follow_redirects`).
    pub(crate) redirects: FollowRedirects,
    /// Which handshake it speaks: found out (`server/discover`, then `initialize`), or pinned.
    pub(crate) lifecycle: Lifecycle,
    /// What obtains and renews its access token when it asks for one (OAuth); none: the
    /// headers alone.
    pub(crate) auth: Option<Arc<dyn Authorizer>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("lifecycle", &self.lifecycle)
            .field("auth", &self.auth.is_some())
            .finish_non_exhaustive()
    }
}

/// Which handshake an HTTP upstream is spoken to with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lifecycle {
    /// `server/discover` (2026-07-28) first; `initialize` (2025) when it answers that with an
    /// error.
    #[default]
    Auto,
    /// `initialize` only (2025-11-25 and before: sessions).
    Initialize,
    /// `server/discover` only (2026-07-28: stateless).
    Discover,
}

/// A redirect the client did not follow.
#[derive(Debug, thiserror::Error)]
#[error("HTTP {status} from {from} redirects to {location}: not followed ({why})")]
pub(crate) struct Refused {
    status: u16,
    from: String,
    location: String,
    why: &'static str,
}

/// rmcp's Streamable HTTP client for `endpoint` of upstream `name`: its headers on every request,
/// redirects as configured, a session re-initialised when the server forgets it (404), a
/// stateless session's answers read by [`super::answers::Client`].
pub(super) fn transport(
    name: &str,
    endpoint: &Endpoint,
) -> Result<rmcp::transport::StreamableHttpClientTransport<Client>, LoadError> {
    let client = pool(name, endpoint.redirects)
        .map_err(|e| LoadError::Worker(format!("cannot build the HTTP client: {e}")))?;
    transport_over(endpoint, client, endpoint.auth.clone())
}

/// [`transport`] over `client` (connections shared with every transport of that client), its
/// requests authorized by `auth` (instead of `endpoint`'s): a caller's session.
pub(super) fn transport_over(
    endpoint: &Endpoint,
    client: reqwest::Client,
    auth: Option<Arc<dyn Authorizer>>,
) -> Result<rmcp::transport::StreamableHttpClientTransport<Client>, LoadError> {
    let bad = |what: String| LoadError::Worker(format!("server.headers: {what}"));
    let mut custom = HashMap::new();
    let mut header = None;
    for (name, value) in &endpoint.headers {
        if name.eq_ignore_ascii_case("authorization") {
            // rmcp sends it as a bearer token: give it the token alone.
            header = Some(
                value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "))
                    .unwrap_or(value)
                    .to_owned(),
            );
            continue;
        }
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| bad(format!("{name}: {e}")))?;
        let value = http::HeaderValue::from_str(value).map_err(|e| bad(format!("{name}: {e}")))?;
        custom.insert(name, value);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(endpoint.url.clone())
        .custom_headers(custom)
        .reinit_on_expired_session(true);
    // An authorizer's token replaces a configured one.
    if let (Some(token), None) = (header, &auth) {
        config = config.auth_header(token);
    }
    let client = Credentialed::new(super::answers::Client::new(client), auth);
    Ok(rmcp::transport::StreamableHttpClientTransport::with_client(
        client, config,
    ))
}

/// The reqwest client of upstream `name`: connections reused, TLS by rustls with the ring
/// provider, redirects judged by [`judge`] (a refusal logged, and the request's error). One
/// serves every caller's session of an upstream (one connection pool).
pub(super) fn pool(name: &str, redirects: FollowRedirects) -> reqwest::Result<reqwest::Client> {
    crate::config::tls::use_ring_provider();
    let name: Arc<str> = Arc::from(name);
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        let previous = attempt.previous();
        let (Some(origin), Some(from)) = (previous.first(), previous.last()) else {
            return attempt.stop();
        };
        let judged = judge(
            redirects,
            attempt.status().as_u16(),
            origin,
            from,
            attempt.url(),
            previous.len(),
        );
        match judged {
            Ok(()) => attempt.follow(),
            Err(refused) => {
                tracing::warn!(upstream = &*name, "{refused}");
                attempt.error(refused)
            }
        }
    });
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        .redirect(policy)
        .referer(false)
        .build()
}

/// Whether a redirect (`status`) from `from` to `location` is followed, for a request first sent
/// to `origin` and redirected `hops - 1` times before.
fn judge(
    redirects: FollowRedirects,
    status: u16,
    origin: &Url,
    from: &Url,
    location: &Url,
    hops: usize,
) -> Result<(), Refused> {
    let why = if redirects == FollowRedirects::None {
        "redirects are not followed unless `server.follow_redirects: same_origin`, and then \
         only to the same origin"
    } else if origin.scheme() == "https" && location.scheme() != "https" {
        "from https to http: never followed"
    } else if origin.scheme() != location.scheme()
        || origin.host_str() != location.host_str()
        || origin.port_or_known_default() != location.port_or_known_default()
    {
        "another origin: only redirects to the endpoint's own origin are followed"
    } else if hops > MAX_REDIRECTS {
        "more than 5 redirects"
    } else {
        return Ok(());
    };
    Err(Refused {
        status,
        from: shown(from),
        location: shown(location),
        why,
    })
}

/// A URL as the log shows it: without credentials, its query (which may carry a key) elided.
fn shown(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let query = url.query().is_some();
    url.set_query(None);
    url.set_fragment(None);
    let mut text = url.to_string();
    if query {
        text.push_str("?…");
    }
    output::one_line(&text, 512).0
}

/// [`shown`] for a URL as configured.
fn shown_text(url: &str) -> String {
    Url::parse(url).map_or_else(|_| output::one_line(url, 512).0, |u| shown(&u))
}

/// Why the handshake with an upstream at `url` (an HTTP one's) failed, in words.
pub(super) fn init_failure(error: &ClientInitializeError, url: Option<&str>) -> String {
    match error {
        ClientInitializeError::TransportError { error, context } => {
            format!("{} ({context})", transport_failure(error, url))
        }
        other => other.to_string(),
    }
}

/// Why a request to an upstream at `url` (an HTTP one's) failed, in words.
pub(super) fn service_failure(error: &ServiceError, url: Option<&str>) -> String {
    match error {
        ServiceError::TransportSend(error) => transport_failure(error, url),
        other => other.to_string(),
    }
}

/// What a transport said went wrong: an HTTP failure in words, anything else as its own message
/// (without rmcp's name for the transport, a Rust type).
fn transport_failure(error: &DynamicTransportError, url: Option<&str>) -> String {
    let inner: &(dyn Error + 'static) = &*error.error;
    url.and_then(|url| http_failure(inner, url))
        .unwrap_or_else(|| inner.to_string())
}

/// An HTTP failure found in `error`'s chain, in words; `None` when there is none.
fn http_failure(error: &(dyn Error + 'static), url: &str) -> Option<String> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return Some(refused.to_string());
        }
        if let Some(e) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return Some(streamable(e, url));
        }
        if let Some(e) = e.downcast_ref::<reqwest::Error>() {
            return Some(request(e, url));
        }
        current = e.source();
    }
    None
}

/// What rmcp's Streamable HTTP client said, in words.
fn streamable(error: &StreamableHttpError<reqwest::Error>, url: &str) -> String {
    let at = shown_text(url);
    match error {
        StreamableHttpError::Client(e) => request(e, url),
        StreamableHttpError::HttpStatus(e) => format!("HTTP {} from {at}", e.status),
        StreamableHttpError::UnexpectedServerResponse(text) => match text.strip_prefix("HTTP ") {
            Some(rest) => {
                let (status, body) = rest.split_once(": ").unwrap_or((rest, ""));
                let body = output::one_line(body.trim(), 200).0;
                if body.is_empty() {
                    format!("HTTP {status} from {at}")
                } else {
                    format!("HTTP {status} from {at}: {body}")
                }
            }
            None => format!("{at} answered: {}", output::one_line(text, 300).0),
        },
        StreamableHttpError::UnexpectedContentType(kind) => format!(
            "{at} answered with Content-Type {}, neither JSON nor an event stream",
            output::one_line(kind.as_deref().unwrap_or("(none)"), 100).0
        ),
        StreamableHttpError::SessionExpired => format!("{at} forgot the session (HTTP 404)"),
        StreamableHttpError::AuthRequired(_) => format!("{at} requires authorization (HTTP 401)"),
        StreamableHttpError::InsufficientScope(_) => {
            format!("{at} refused the request: insufficient scope (HTTP 403)")
        }
        StreamableHttpError::Auth(rmcp::transport::auth::AuthError::AuthorizationFailed(why)) => {
            format!("{why} ({at})")
        }
        other => format!("{at}: {}", output::one_line(&other.to_string(), 300).0),
    }
}

/// What reqwest said of a request to `url`, in words.
fn request(error: &reqwest::Error, url: &str) -> String {
    if let Some(refused) = found::<Refused>(error) {
        return refused.to_string();
    }
    let at = error.url().map_or_else(|| shown_text(url), shown);
    if let Some(status) = error.status() {
        return format!("HTTP {status} from {at}");
    }
    let mut cause: &(dyn Error + 'static) = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let cause = output::one_line(&cause.to_string(), 300).0;
    if error.is_timeout() {
        format!("timed out: {at}")
    } else if error.is_connect() {
        match found::<std::io::Error>(error).map(std::io::Error::kind) {
            Some(std::io::ErrorKind::ConnectionRefused) => format!("connection refused: {at}"),
            _ => format!("cannot connect to {at}: {cause}"),
        }
    } else if error.is_redirect() {
        format!("{cause} (redirects from {at})")
    } else {
        format!("{at}: {cause}")
    }
}

/// The first error of type `T` in `error`'s chain (itself included).
fn found<'a, T: Error + 'static>(error: &'a (dyn Error + 'static)) -> Option<&'a T> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(t) = e.downcast_ref::<T>() {
            return Some(t);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};

    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn only_same_origin_redirects_are_followed_and_only_when_asked() {
        let origin = url("https://tools.example/mcp");
        let judged = |redirects, to: &str, hops| {
            judge(redirects, 307, &origin, &origin, &url(to), hops).map_err(|r| r.why)
        };
        let same = FollowRedirects::SameOrigin;
        assert!(judged(FollowRedirects::None, "https://tools.example/other", 1).is_err());
        assert_eq!(judged(same, "https://tools.example/other", 1), Ok(()));
        assert_eq!(judged(same, "https://TOOLS.example:443/x", 1), Ok(()));
        assert!(judged(same, "https://tools.example:8443/x", 1).is_err());
        assert!(judged(same, "https://evil.example/mcp", 1).is_err());
        let downgrade = judged(same, "http://tools.example/mcp", 1).unwrap_err();
        assert!(downgrade.contains("never"), "{downgrade}");
        assert!(judged(same, "https://tools.example/x", MAX_REDIRECTS + 1).is_err());
        let refused = judge(
            FollowRedirects::None,
            308,
            &origin,
            &origin,
            &url("https://user:pw@evil.example/k?key=secret"),
            1,
        )
        .unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!(
                "HTTP 308 from https://tools.example/mcp redirects to https://evil.example/k?…: \
                 not followed ({})",
                refused.why
            )
        );
    }

    /// One request read from `conn`: its head (lowercased) and body.
    fn read_request(conn: &TcpStream) -> (String, Vec<u8>) {
        let mut reader = BufReader::new(conn);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |n| n.trim().parse().unwrap());
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        (head, body)
    }

    /// What a test server received: each request's head and body.
    type Seen = Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

    /// A server on 127.0.0.1 answering each request with `answer(head)` (a status line and
    /// headers), closing each connection after it; what it received, in order.
    fn serve(answer: impl Fn(&str) -> String + Send + 'static) -> (SocketAddr, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        std::thread::spawn(move || {
            for mut conn in listener.incoming().map_while(Result::ok) {
                let (head, body) = read_request(&conn);
                let reply = answer(&head);
                record.lock().unwrap().push((head, body));
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        (addr, seen)
    }

    #[test]
    fn no_method_follows_a_redirect_to_another_origin_and_same_origin_ones_need_the_opt_in() {
        let (elsewhere, received) = serve(|_| {
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
        });
        let (upstream, at_upstream) = serve(move |head| {
            let to = if head.starts_with("post /same") {
                "/landed".to_owned()
            } else if head.starts_with("post /landed") {
                return "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    .to_owned();
            } else {
                format!("http://{elsewhere}/mcp")
            };
            format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {to}\r\ncontent-length: 0\r\n\
                 connection: close\r\n\r\n"
            )
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let send = |redirects, method: reqwest::Method, path: &str| {
            let client = pool("t", redirects).unwrap();
            let request = client
                .request(method, format!("http://{upstream}{path}"))
                .header("x-api-key", "secret")
                .body("{\"jsonrpc\":\"2.0\"}");
            runtime.block_on(request.send())
        };
        for redirects in [FollowRedirects::None, FollowRedirects::SameOrigin] {
            for method in [
                reqwest::Method::POST,
                reqwest::Method::GET,
                reqwest::Method::DELETE,
            ] {
                let error = send(redirects, method.clone(), "/mcp").unwrap_err();
                let said = request(&error, "http://unused");
                assert!(
                    said.starts_with(&format!("HTTP 307 from http://{upstream}/mcp redirects to http://{elsewhere}/mcp: not followed")),
                    "{method}: {said}"
                );
            }
        }
        // The client gave up before anything went there.
        assert!(received.lock().unwrap().is_empty());
        // The same origin: followed with the opt-in only, the body and the header going along.
        let error = send(FollowRedirects::None, reqwest::Method::POST, "/same").unwrap_err();
        assert!(request(&error, "").contains("/landed: not followed"));
        let landed = send(FollowRedirects::SameOrigin, reqwest::Method::POST, "/same").unwrap();
        assert_eq!(landed.status(), 200);
        let seen = at_upstream.lock().unwrap();
        let (head, body) = seen.last().unwrap();
        assert!(head.starts_with("post /landed") && head.contains("x-api-key: secret"));
        assert_eq!(body, b"{\"jsonrpc\":\"2.0\"}");
    }

    #[test]
    fn a_refused_connection_reads_as_one() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = pool("t", FollowRedirects::None).unwrap();
        let target = format!("http://127.0.0.1:{port}/mcp");
        let error = runtime.block_on(client.post(&target).send()).unwrap_err();
        assert_eq!(
            request(&error, &target),
            format!("connection refused: {target}")
        );
    }
}
