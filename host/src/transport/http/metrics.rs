//! `GET /metrics`: the host's metrics in the OpenMetrics text format Prometheus scrapes, on the
//! main listener or on a listener of its own (`metrics_listen`), behind a bearer token when
//! `metrics_token` is set.
//!
//! `/metrics` passes the same Origin and Host checks as the MCP endpoint (DNS rebinding), except
//! that a `Host` may also be an IP address, as scrapers often name the host
//! ([`check_scrape`]); a scrape by DNS name needs that name in `http.allowed_hosts`.
//!
//! The separate listener is bounded like the main one: at most [`MAX_CONNECTIONS`] at once (more
//! wait in the listen backlog), each closed once it has waited `http.header_read_timeout_secs`
//! for a request head.

use std::convert::Infallible;

use bytes::Bytes;
use hyper::body::Incoming as IncomingBody;
use hyper::header::{CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;
use tokio::net::TcpListener;

use super::body::{Body, empty, error_response, json_response};
use super::guard::check_scrape;
use super::headers::RequestHeaders;
use super::idle;
use crate::host::Host;
use crate::telemetry::metrics::CONTENT_TYPE as OPENMETRICS;

/// The answer to a request for `/metrics`.
pub(crate) fn respond<B>(host: &Host, req: &Request<B>) -> Response<Body> {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut resp = empty(StatusCode::METHOD_NOT_ALLOWED);
        resp.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    let config = host.config();
    let headers = RequestHeaders::read(req.headers());
    if let Err(e) = check_scrape(&headers, &config.http) {
        return error_response(&Value::Null, &e);
    }
    if let Some(token) = config.metrics_token.as_deref() {
        let sent = headers.bearer().unwrap_or("");
        if !bool::from(sent.as_bytes().ct_eq(token.as_bytes())) {
            host.telemetry().metrics().auth_failure("metrics_token");
            let mut resp =
                json_response(401, &json!({ "error": "a valid bearer token is required" }));
            resp.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mcp-host metrics\""),
            );
            return resp;
        }
    }
    let text = host.telemetry().metrics().encode();
    let mut resp = Response::new(Body::Full(Some(Bytes::from(text))));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    resp
}

/// Connections the separate metrics listener serves at once (a scraper needs one or two).
pub const MAX_CONNECTIONS: usize = 16;

/// Serve `/metrics` (and `/healthz`) on `listener` until the task is dropped: the separate
/// `metrics_listen` address.
pub async fn serve(host: Host, listener: TcpListener) -> std::io::Result<()> {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A slot first: beyond the limit, new connections wait in the backlog.
        let Ok(permit) = std::sync::Arc::clone(&slots).acquire_owned().await else {
            return Ok(());
        };
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("metrics listener: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let header_timeout =
            std::time::Duration::from_secs(host.config().http.header_read_timeout_secs.max(1));
        let watch = idle::Watch::new();
        let host = host.clone();
        let service = {
            let watch = std::sync::Arc::clone(&watch);
            hyper::service::service_fn(move |req: Request<IncomingBody>| {
                let busy = watch.begin();
                let host = host.clone();
                async move {
                    let resp = match req.uri().path() {
                        "/metrics" => respond(&host, &req),
                        "/healthz" => json_response(
                            200,
                            &json!({ "status": "ok", "upstreams": host.upstreams_json() }),
                        ),
                        _ => json_response(
                            404,
                            &json!({ "error": "not found", "metrics": "/metrics" }),
                        ),
                    };
                    Ok::<_, Infallible>(resp.map(|body| idle::Tracked::new(body, busy)))
                }
            })
        };
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .header_read_timeout(None)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                biased;
                ended = conn => if let Err(e) = ended {
                    tracing::debug!("metrics connection ended: {e}");
                },
                () = watch.expired(header_timeout) => tracing::debug!(
                    "closing a metrics connection that sent no request head in {} s",
                    header_timeout.as_secs()
                ),
            }
            drop(permit);
        });
    }
}
