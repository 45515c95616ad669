//! The HTTP client of the OAuth engine: every request it makes toward protected-resource
//! metadata, authorization servers' metadata, registration and token endpoints goes through it
//! (rmcp's engine calls it as its [`OAuthHttpClient`]). Bounded: 10 s to connect, 30 s per request,
//! 1 MiB per answer; redirects followed only where rmcp asks (discovery follows them itself, one
//! hop at a time, same origin only) and then only to the same origin, five at most. Which addresses
//! it connects to is decided after name resolution ([`Reach`]): never link-local, unspecified,
//! multicast or broadcast addresses nor cloud metadata names; loopback only for an upstream on
//! loopback; private networks only for an upstream on one (or when allowed). And the RFC 8707
//! `resource` parameter is taken out of token requests when the upstream's switch says so (some
//! identity providers reject it).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use reqwest::Url;
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};

/// The most bytes of an answer read.
pub const MAX_BODY: usize = 1 << 20;
/// The longest a request may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most redirects followed for one request (same origin only).
const MAX_REDIRECTS: usize = 5;
/// Names that reach a cloud provider's instance metadata: never connected to.
const CLOUD_METADATA: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.azure.internal",
];

/// Why a request was not made or its answer not read.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The address is not one this engine connects to for this upstream.
    #[error("{0}: not an address the host connects to for this upstream")]
    Disallowed(String),
    /// More than [`MAX_BODY`] bytes.
    #[error("the answer is larger than {MAX_BODY} bytes")]
    TooLarge,
    /// The request could not be built.
    #[error("{0}")]
    Request(String),
    /// reqwest's failure (connection, time-out, a refused redirect).
    #[error("{0}")]
    Transport(#[from] reqwest::Error),
}

/// Which address classes the engine may connect to, besides public ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// Loopback addresses (the upstream itself is on loopback).
    pub loopback: bool,
    /// Private networks (RFC 1918, unique local IPv6): the upstream is on one, or allowed.
    pub private: bool,
}

impl Reach {
    /// What an upstream at `url` may have its authorization servers at: its own class of address
    /// (loopback, private) besides public ones; private ones too when `allow_private`.
    pub fn of(url: &Url, allow_private: bool) -> Reach {
        let (loopback, private) = match url.host() {
            Some(url::Host::Domain(d)) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                (d == "localhost" || d.ends_with(".localhost"), false)
            }
            Some(url::Host::Ipv4(ip)) => (ip.is_loopback(), ip.is_private()),
            Some(url::Host::Ipv6(ip)) => (ip.is_loopback(), ip.is_unique_local()),
            None => (false, false),
        };
        Reach {
            loopback,
            private: private || allow_private,
        }
    }

    /// Whether `ip` may be connected to.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match ip {
            IpAddr::V4(v4) => {
                let [a, b, ..] = v4.octets();
                if v4.is_loopback() {
                    self.loopback
                } else if v4.is_private() {
                    self.private
                } else {
                    !(v4.is_link_local()
                        || v4.is_unspecified()
                        || v4.is_multicast()
                        || v4.is_broadcast()
                        || a == 0
                        || (a == 100 && (64..=127).contains(&b)))
                }
            }
            IpAddr::V6(v6) => {
                let first = v6.segments()[0];
                if v6.is_loopback() {
                    self.loopback
                } else if v6.is_unique_local() {
                    self.private
                } else {
                    !(v6.is_unspecified() || v6.is_multicast() || (first & 0xffc0) == 0xfe80)
                }
            }
        }
    }
}

/// Resolves names as the system does, keeping only the addresses a [`Reach`] allows.
struct Resolver(Reach);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reach = self.0;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            if CLOUD_METADATA.contains(&host.trim_end_matches('.').to_ascii_lowercase().as_str()) {
                return Err(Box::new(HttpError::Disallowed(host)) as _);
            }
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| reach.allows(a.ip()))
                .collect();
            if found.is_empty() {
                return Err(Box::new(HttpError::Disallowed(host)) as _);
            }
            Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The engine's HTTP client (see the module's documentation).
pub struct Client {
    follow: reqwest::Client,
    stop: reqwest::Client,
    reach: Reach,
    /// Take `resource` out of token requests.
    omit_resource: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("reach", &self.reach)
            .field("omit_resource", &self.omit_resource)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for the authorization of an upstream that may reach `reach`; `omit_resource`
    /// takes the `resource` parameter out of its token requests.
    pub fn new(reach: Reach, omit_resource: bool) -> Result<Client, HttpError> {
        crate::config::tls::use_ring_provider();
        let build = |redirect| {
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(TIMEOUT)
                .redirect(redirect)
                .referer(false)
                .dns_resolver(Arc::new(Resolver(reach)))
                .build()
        };
        let same_origin = reqwest::redirect::Policy::custom(move |attempt| {
            let first = attempt.previous().first().cloned();
            let same = first.is_some_and(|f| same_origin(&f, attempt.url()));
            if !same || attempt.previous().len() > MAX_REDIRECTS {
                attempt.stop()
            } else {
                attempt.follow()
            }
        });
        Ok(Client {
            follow: build(same_origin)?,
            stop: build(reqwest::redirect::Policy::none())?,
            reach,
            omit_resource,
        })
    }

    /// Send `request` (redirects followed when `follow`), its answer read whole (bounded).
    pub async fn send(
        &self,
        mut request: http::Request<Vec<u8>>,
        follow: bool,
    ) -> Result<http::Response<Vec<u8>>, HttpError> {
        if self.omit_resource {
            without_resource(&mut request);
        }
        let request =
            reqwest::Request::try_from(request).map_err(|e| HttpError::Request(e.to_string()))?;
        self.check_literal(request.url())?;
        let client = if follow { &self.follow } else { &self.stop };
        let response = client.execute(request).await?;
        let mut answer = http::Response::builder().status(response.status());
        for (name, value) in response.headers() {
            answer = answer.header(name, value);
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if chunk.len() > MAX_BODY - body.len() {
                return Err(HttpError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        answer
            .body(body)
            .map_err(|e| HttpError::Request(e.to_string()))
    }

    /// An IP literal in a URL is not resolved: it is checked here.
    fn check_literal(&self, url: &Url) -> Result<(), HttpError> {
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            _ => return Ok(()),
        };
        if self.reach.allows(ip) {
            Ok(())
        } else {
            Err(HttpError::Disallowed(ip.to_string()))
        }
    }
}

impl OAuthHttpClient for Client {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        let follow = request.redirect_policy == OAuthHttpRedirectPolicy::Follow;
        let request = request.request;
        Box::pin(async move {
            self.send(request, follow)
                .await
                .map_err(|e| Box::new(e) as OAuthHttpClientError)
        })
    }
}

/// Whether two URLs have the same origin (scheme, host, port), never from https to http.
pub fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str().map(str::to_ascii_lowercase) == b.host_str().map(str::to_ascii_lowercase)
        && a.port_or_known_default() == b.port_or_known_default()
}

/// Take the `resource` parameter out of a form-encoded request body (a token request's).
fn without_resource(request: &mut http::Request<Vec<u8>>) {
    let form = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return;
    }
    let kept: Vec<(String, String)> = url::form_urlencoded::parse(request.body())
        .filter(|(k, _)| k != "resource")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(kept)
        .finish();
    if let Ok(length) = http::HeaderValue::from_str(&body.len().to_string()) {
        request
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, length);
    }
    *request.body_mut() = body.into_bytes();
}

/// `url` without its `resource` query parameter (an authorization URL's).
pub fn url_without_resource(url: &str) -> String {
    let Ok(mut parsed) = Url::parse(url) else {
        return url.to_owned();
    };
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| k != "resource")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    parsed.query_pairs_mut().clear().extend_pairs(kept);
    parsed.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn an_upstream_reaches_public_addresses_and_its_own_class_only() {
        let public = Reach::of(&url("https://mcp.example.com/mcp"), false);
        let local = Reach::of(&url("http://localhost:8080/mcp"), false);
        let private = Reach::of(&url("http://10.1.2.3/mcp"), false);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(public.allows(ip("93.184.216.34")) && public.allows(ip("2606:2800::1")));
        for never in [
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "100.64.0.1",
            "fe80::1",
            "::",
        ] {
            assert!(
                !public.allows(ip(never)) && !local.allows(ip(never)),
                "{never}"
            );
        }
        assert!(!public.allows(ip("127.0.0.1")) && !public.allows(ip("::ffff:127.0.0.1")));
        assert!(!public.allows(ip("10.0.0.9")) && !public.allows(ip("fd00::1")));
        assert!(local.allows(ip("127.0.0.1")) && local.allows(ip("::1")));
        assert!(!local.allows(ip("192.168.1.1")));
        assert!(private.allows(ip("192.168.1.1")) && !private.allows(ip("127.0.0.1")));
        let allowed = Reach::of(&url("https://mcp.example.com/mcp"), true);
        assert!(allowed.allows(ip("10.0.0.9")) && !allowed.allows(ip("127.0.0.1")));
    }

    #[test]
    fn the_resource_parameter_is_taken_out_when_the_switch_says_so() {
        let mut request = http::Request::builder()
            .method("POST")
            .uri("https://as.example/token")
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(b"grant_type=authorization_code&code=c&resource=https%3A%2F%2Fmcp.example%2Fmcp&code_verifier=v".to_vec())
            .unwrap();
        without_resource(&mut request);
        assert_eq!(
            String::from_utf8(request.body().clone()).unwrap(),
            "grant_type=authorization_code&code=c&code_verifier=v"
        );
        let authorize = "https://as.example/authorize?response_type=code&client_id=x&state=s&resource=https%3A%2F%2Fmcp.example%2Fmcp&scope=a+b";
        let stripped = url_without_resource(authorize);
        assert!(!stripped.contains("resource="), "{stripped}");
        assert!(
            stripped.contains("state=s") && stripped.contains("scope=a+b"),
            "{stripped}"
        );
    }
}
