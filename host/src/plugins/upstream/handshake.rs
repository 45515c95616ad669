//! Which handshake a stdio upstream speaks, decided on its one pipe: the host asks
//! `server/discover` (2026-07-28) itself; a server that answers it with an error (other than a
//! 2026 refusal) is legacy, and `initialize` follows on the same pipe — the child is started
//! once, not killed and started again. A 2026-07-28 server's answer is handed to rmcp's own
//! discovery when it asks (the [`Replay`] transport), so it is asked once too.

use futures_util::future::Either;
use rmcp::model::{
    ClientRequest, DiscoverRequest, DiscoverRequestParams, ErrorCode, InitializeRequestParams,
    JsonRpcMessage, ProtocolVersion, RequestId, RequestMetaObject,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// The id of the host's own `server/discover` (rmcp numbers its requests).
const PROBE_ID: &str = "mcp-host-discover";

/// What the upstream's answer to `server/discover` says it speaks.
pub(super) enum Era {
    /// 2026-07-28 (or a 2026 refusal rmcp reports): its answer, for rmcp's discovery.
    Modern(Box<RxJsonRpcMessage<RoleClient>>),
    /// 2025: it answered with an error; `initialize` follows.
    Legacy,
}

/// Whether an error answer to `server/discover` comes from a 2026-07-28 server (it refuses the
/// request, it is not legacy).
fn modern_refusal(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH
            | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
    )
}

/// Ask `server/discover` on `transport` as `info` and wait for the answer (the caller bounds
/// the wait): what comes before it — notifications, the server's own requests — is not part of
/// the handshake and is dropped, as rmcp's discovery drops it.
pub(super) async fn probe<T: Transport<RoleClient>>(
    transport: &mut T,
    info: &InitializeRequestParams,
) -> Result<Era, String> {
    let meta = RequestMetaObject::with_client_context(
        ProtocolVersion::V_2026_07_28,
        info.client_info.clone(),
        info.capabilities.clone(),
    );
    let mut discover = DiscoverRequest::new(DiscoverRequestParams {});
    discover.extensions.insert(meta);
    let id = RequestId::String(PROBE_ID.into());
    transport
        .send(JsonRpcMessage::request(
            ClientRequest::DiscoverRequest(discover),
            id.clone(),
        ))
        .await
        .map_err(|e| format!("cannot write server/discover: {e}"))?;
    loop {
        let Some(message) = transport.receive().await else {
            return Err("the connection closed before it answered its handshake".into());
        };
        match message {
            JsonRpcMessage::Response(r) if r.id == id => {
                return Ok(Era::Modern(Box::new(JsonRpcMessage::Response(r))));
            }
            JsonRpcMessage::Error(e) if e.id.as_ref().is_none_or(|i| *i == id) => {
                return Ok(if modern_refusal(e.error.code) {
                    Era::Modern(Box::new(JsonRpcMessage::Error(e)))
                } else {
                    Era::Legacy
                });
            }
            _ => {}
        }
    }
}

/// A transport that answers rmcp's first `server/discover` with the answer [`probe`] already
/// had, instead of asking the upstream again; everything else passes through.
pub(super) struct Replay<T> {
    inner: T,
    answer: Option<RxJsonRpcMessage<RoleClient>>,
    pending: Option<RxJsonRpcMessage<RoleClient>>,
}

impl<T> Replay<T> {
    /// `inner`, answering rmcp's first `server/discover` with `answer` when there is one.
    pub(super) fn new(inner: T, answer: Option<RxJsonRpcMessage<RoleClient>>) -> Replay<T> {
        Replay {
            inner,
            answer,
            pending: None,
        }
    }
}

/// `answer` as the answer to request `id`.
fn answering(answer: RxJsonRpcMessage<RoleClient>, id: RequestId) -> RxJsonRpcMessage<RoleClient> {
    match answer {
        JsonRpcMessage::Response(mut r) => {
            r.id = id;
            JsonRpcMessage::Response(r)
        }
        JsonRpcMessage::Error(mut e) => {
            e.id = Some(id);
            JsonRpcMessage::Error(e)
        }
        other => other,
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Replay<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(r) = &item
            && matches!(r.request, ClientRequest::DiscoverRequest(_))
            && let Some(answer) = self.answer.take()
        {
            self.pending = Some(answering(answer, r.id.clone()));
            return Either::Left(std::future::ready(Ok(())));
        }
        Either::Right(self.inner.send(item))
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        if let Some(answer) = self.pending.take() {
            return Some(answer);
        }
        self.inner.receive().await
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
