//! `GET /metrics`: the host's metrics in the OpenMetrics text format Prometheus scrapes, on the
//! main listener or on a listener of its own (`metrics_listen`), behind a bearer token when
//! `metrics_token` is set.
//!
//! Scrapers send no `Origin` and name the host by whatever address they reach it at, so `/metrics`
//! skips the `Host` check; a request with an `Origin` (a browser's) must pass the same check as
//! the MCP endpoint.

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
use super::guard::check_origin;
use super::headers::{Header, RequestHeaders};
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
    if headers.present(Header::Origin)
        && let Err(e) = check_origin(&headers, &config.http)
    {
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

/// Serve `/metrics` (and `/healthz`) on `listener` until the task is dropped: the separate
/// `metrics_listen` address.
pub async fn serve(host: Host, listener: TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("metrics listener: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let host = host.clone();
        let service = hyper::service::service_fn(move |req: Request<IncomingBody>| {
            let host = host.clone();
            async move {
                Ok::<_, Infallible>(match req.uri().path() {
                    "/metrics" => respond(&host, &req),
                    "/healthz" => json_response(200, &json!({ "status": "ok" })),
                    _ => {
                        json_response(404, &json!({ "error": "not found", "metrics": "/metrics" }))
                    }
                })
            }
        });
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("metrics connection ended: {e}");
            }
        });
    }
}
