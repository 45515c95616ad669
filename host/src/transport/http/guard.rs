//! Who may talk to the HTTP endpoint at all: Origin/Host validation against DNS rebinding, the
//! bearer token, and the answers for refused identities (401 with its challenge, 403, 404).

use hyper::Response;
use hyper::header::HeaderValue;
use serde_json::Value;

use super::body::{Body, error_response, message_response};
use super::headers::{Header, RequestHeaders};
use crate::access::{Access, Denied};
use crate::config::HttpSettings;
use crate::protocol::Message;
use crate::protocol::jsonrpc::{ErrorKind, RpcError};
use crate::telemetry::Metrics;

/// The MCP headers a response carries, named once.
pub(crate) mod names {
    use hyper::header::HeaderName;

    /// `Mcp-Session-Id`: the legacy session a new session's answer opens.
    pub(crate) const SESSION: HeaderName = HeaderName::from_static("mcp-session-id");
    /// `Mcp-Replica`: the replica that served a response.
    pub(crate) const REPLICA: HeaderName = HeaderName::from_static("mcp-replica");
}

pub(super) fn host_part(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

pub(super) fn is_local(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1") || host.ends_with(".localhost")
}

/// DNS-rebinding protection: Origin (when present) and Host must be local or explicitly allowed.
pub(crate) fn check_origin(
    headers: &RequestHeaders,
    settings: &HttpSettings,
) -> Result<(), RpcError> {
    check(headers, settings, false)
}

/// [`check_origin`] for `/metrics`, where a scraper may also name the host by an IP address: a
/// page a browser loaded from a DNS name (what rebinding needs) never sends an IP literal as its
/// `Host`, so that proves no rebinding; any other name must be local or in `http.allowed_hosts`.
pub(crate) fn check_scrape(
    headers: &RequestHeaders,
    settings: &HttpSettings,
) -> Result<(), RpcError> {
    check(headers, settings, true)
}

fn check(
    headers: &RequestHeaders,
    settings: &HttpSettings,
    ip_hosts: bool,
) -> Result<(), RpcError> {
    let forbidden = |what: &str| RpcError::new(ErrorKind::Forbidden, format!("Forbidden: {what}"));
    let origin = headers.single(Header::Origin).map_err(|e| forbidden(&e))?;
    let host = headers.single(Header::Host).map_err(|e| forbidden(&e))?;
    if let Some(origin) = origin {
        let authority = origin.split("://").nth(1).unwrap_or(origin);
        if !(is_local(host_part(authority)) || settings.allowed_origins.iter().any(|o| o == origin))
        {
            return Err(forbidden(&format!("Origin {origin} is not allowed")));
        }
    }
    if let Some(host) = host {
        let name = host_part(host);
        if !(is_local(name)
            || (ip_hosts && name.parse::<std::net::IpAddr>().is_ok())
            || settings
                .allowed_hosts
                .iter()
                .any(|h| h == name || h == host))
        {
            return Err(forbidden(&format!("Host {host} is not allowed")));
        }
    }
    Ok(())
}

/// A 401 with its `WWW-Authenticate` challenge (naming the metadata of the endpoint asked, `agent`
/// for `/mcp/agents/{agent}`), or the 403/404 for a refused identity (counted in `metrics` by
/// reason).
pub(crate) fn denied(
    access: &Access,
    metrics: &Metrics,
    agent: Option<&str>,
    id: &Value,
    d: Denied,
) -> Response<Body> {
    metrics.auth_failure(d.reason());
    match d {
        Denied::Unauthorized {
            error, description, ..
        } => challenge(
            access,
            agent,
            error_response(
                id,
                &RpcError::new(
                    ErrorKind::Unauthorized,
                    format!("Unauthorized: {description}"),
                ),
            ),
            error,
            &description,
        ),
        Denied::Forbidden(why) => error_response(
            id,
            &RpcError::new(ErrorKind::Forbidden, format!("Forbidden: {why}")),
        ),
        Denied::UnknownAgent(name) => error_response(
            id,
            &RpcError::new(ErrorKind::NotFound, format!("No such agent: {name}")),
        ),
    }
}

/// A 401 response (`body`) for a tool that needs a verified caller, with its challenge.
pub(crate) fn unauthorized(access: &Access, agent: Option<&str>, body: &Message) -> Response<Body> {
    challenge(access, agent, message_response(401, body), None, "")
}

fn challenge(
    access: &Access,
    agent: Option<&str>,
    mut resp: Response<Body>,
    error: Option<&str>,
    description: &str,
) -> Response<Body> {
    if let Ok(v) = HeaderValue::from_str(&access.challenge(agent, error, description)) {
        resp.headers_mut()
            .insert(hyper::header::WWW_AUTHENTICATE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderMap;

    fn check(h: &HeaderMap, opts: &HttpSettings) -> Result<(), RpcError> {
        check_origin(&RequestHeaders::read(h), opts)
    }

    #[test]
    fn only_local_origins_and_hosts_pass_by_default() {
        let opts = HttpSettings::default();
        let mut h = HeaderMap::new();
        h.insert("origin", HeaderValue::from_static("http://localhost:3000"));
        h.insert("host", HeaderValue::from_static("127.0.0.1:18080"));
        assert!(check(&h, &opts).is_ok());
        h.insert(
            "origin",
            HeaderValue::from_static("http://evil.example.com"),
        );
        assert_eq!(check(&h, &opts).unwrap_err().kind, ErrorKind::Forbidden);
        h.remove("origin");
        h.insert("host", HeaderValue::from_static("evil.example.com"));
        assert!(check(&h, &opts).is_err());
        h.insert("host", HeaderValue::from_static("[::1]:8080"));
        assert!(check(&h, &opts).is_ok());
    }

    #[test]
    fn a_scrape_may_name_the_host_by_ip_but_not_by_a_foreign_name() {
        let opts = HttpSettings::default();
        let scrape = |host: &'static str| {
            let mut h = HeaderMap::new();
            h.insert("host", HeaderValue::from_static(host));
            check_scrape(&RequestHeaders::read(&h), &opts)
        };
        assert!(scrape("10.1.2.3:9090").is_ok());
        assert!(scrape("[fd00::5]:9090").is_ok());
        assert!(scrape("localhost:9090").is_ok());
        assert!(scrape("evil.example:9090").is_err());
        assert!(scrape("10.1.2.3.evil.example").is_err());
    }

    #[test]
    fn non_ascii_or_repeated_origin_and_host_are_refused_not_ignored() {
        let opts = HttpSettings::default();
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("127.0.0.1:18080"));
        h.insert(
            "origin",
            HeaderValue::from_bytes(b"http://evil.example\xc3\xa9").unwrap(),
        );
        let e = check(&h, &opts).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Forbidden);
        assert!(e.message.contains("not plain ASCII"), "{}", e.message);
        h.remove("origin");
        h.insert("host", HeaderValue::from_bytes(b"localhost\xff").unwrap());
        assert!(check(&h, &opts).is_err());
        h.insert("host", HeaderValue::from_static("localhost"));
        h.append("host", HeaderValue::from_static("evil.example.com"));
        assert!(check(&h, &opts).is_err());
    }
}
