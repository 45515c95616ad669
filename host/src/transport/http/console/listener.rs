//! The console on an address of its own (`console.listen`): the console's pages and endpoints,
//! nothing else (no MCP endpoint, no health or metrics answers). Its connections are bounded like
//! the main listener's: [`MAX_CONNECTIONS`] at once, `http.max_connections_per_address` per
//! address, the head and write timeouts of `http`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming as IncomingBody;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::super::State;
use super::super::body::json_response;
use super::super::idle;

/// Connections the console's own listener serves at once (more wait in the backlog).
const MAX_CONNECTIONS: usize = 64;

/// Serve the console on `listener` until the task is aborted.
pub(in super::super) async fn serve(state: Arc<State>, listener: TcpListener) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (stream, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("console listener: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ip = addr.ip().to_canonical();
        let peer = crate::access::peer_key(ip);
        let (per_address, header_timeout, write_timeout) = {
            let http = &state.core.protocol().host().config().http;
            (
                http.connections_per_address(),
                Duration::from_secs(http.header_read_timeout_secs.max(1)),
                Duration::from_secs(http.write_timeout_secs.max(1)),
            )
        };
        // One address holds at most `http.max_connections_per_address` of the console's
        // connections too (counted with its MCP ones); beyond, it is closed at once.
        let Some(held) = state.addresses.try_take(&peer, per_address) else {
            tracing::debug!("console listener: {peer} holds all the connections it may");
            continue;
        };
        let watch = idle::Watch::new();
        let service = {
            let (state, watch) = (Arc::clone(&state), Arc::clone(&watch));
            hyper::service::service_fn(move |req: Request<IncomingBody>| {
                let busy = watch.begin();
                let (state, peer) = (Arc::clone(&state), Arc::clone(&peer));
                async move {
                    let resp = match state.console.as_ref() {
                        Some(console) if console.owns(req.uri().path()) => {
                            let visitor = super::Visitor { key: &peer, ip };
                            super::route(&state, console, req, visitor).await
                        }
                        Some(console) if req.uri().path() == "/" => {
                            super::redirect(&format!("{}/", console.base()))
                        }
                        _ => json_response(404, &serde_json::json!({ "error": "not found" })),
                    };
                    Ok::<_, Infallible>(resp.map(|body| idle::Tracked::new(body, busy)))
                }
            })
        };
        let shutdown = state.shutdown.clone();
        tokio::spawn(async move {
            let io = super::super::limits::WriteTimeout::new(stream, write_timeout);
            let conn = hyper::server::conn::http1::Builder::new()
                .header_read_timeout(None)
                .serve_connection(TokioIo::new(io), service);
            tokio::select! {
                ended = conn => if let Err(e) = ended {
                    tracing::debug!("console connection ended: {e}");
                },
                () = watch.expired(header_timeout) => {},
                () = shutdown.cancelled() => {},
            }
            drop((permit, held));
        });
    }
}
