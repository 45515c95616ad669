//! An HTTP upstream's requests with the credential its [`Authorizer`] keeps: every POST, GET of
//! the event stream and DELETE carries the token the authorizer holds at that moment (read at
//! each request, so a token renewed meanwhile is used at once), and a request the upstream refuses
//! — 401, or 403 `insufficient_scope` — is answered by the authorizer (a refresh, a new
//! authorization, as it decides) and made again with the token it gives, a bounded number of
//! times. What the authorizer could not do is the request's error. The token never appears in an
//! error: only the upstream's `WWW-Authenticate` challenge does.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::AuthError;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use crate::access::upstream::challenge::Status;
use crate::access::upstream::{Authorizer, Refusal, Secret};

/// How many times one request is made again after a refusal: a new authorization, then a step-up,
/// then one more (the authorizer bounds its authorizations itself).
const MAX_RETRIES: usize = 3;

/// `C`, its requests authorized by an [`Authorizer`] (see the module's documentation); without
/// one, each request carries the header rmcp gives it (a configured token), as `C` alone would.
#[derive(Clone)]
pub(super) struct Credentialed<C> {
    inner: C,
    auth: Option<Arc<dyn Authorizer>>,
}

impl<C> Credentialed<C> {
    pub(super) fn new(inner: C, auth: Option<Arc<dyn Authorizer>>) -> Credentialed<C> {
        Credentialed { inner, auth }
    }
}

/// Why a request was refused for want of authorization, when it was: rmcp's errors for a 401 or
/// 403 with a challenge, and a 401 without one (which its clients report as an unexpected
/// response).
fn refusal<E: std::error::Error + Send + Sync + 'static>(
    error: &StreamableHttpError<E>,
) -> Option<Refusal> {
    match error {
        StreamableHttpError::AuthRequired(e) => Some(Refusal {
            status: Status::Unauthorized,
            challenge: e.www_authenticate_header.clone(),
        }),
        StreamableHttpError::InsufficientScope(e) => Some(Refusal {
            status: Status::Forbidden,
            challenge: e.www_authenticate_header.clone(),
        }),
        StreamableHttpError::UnexpectedServerResponse(text)
            if text.starts_with("HTTP 401")
                || text.starts_with("HTTP status client error (401") =>
        {
            Some(Refusal {
                status: Status::Unauthorized,
                challenge: String::new(),
            })
        }
        _ => None,
    }
}

/// How `token` is carried: as rmcp's bearer token, or — the authorizer names a key header
/// (`mode: api_key`) — in that header beside `custom` (replacing one of that name).
fn carried(
    auth: &dyn Authorizer,
    token: Option<&Secret>,
    custom: &HashMap<HeaderName, HeaderValue>,
) -> (Option<String>, HashMap<HeaderName, HeaderValue>) {
    let Some(key) = auth.key_header() else {
        return (token.map(|t| t.expose().to_owned()), custom.clone());
    };
    let mut headers = custom.clone();
    let name = HeaderName::from_bytes(key.name.as_bytes()).ok();
    let value = token.and_then(|t| HeaderValue::from_str(key.value(t).expose()).ok());
    if let (Some(name), Some(mut value)) = (name, value) {
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    (None, headers)
}

impl<C: StreamableHttpClient + Sync> Credentialed<C> {
    /// Make a request with the current token (`call`), and again with the authorizer's answer to
    /// each refusal, at most [`MAX_RETRIES`] times; without an authorizer, once with `header`.
    async fn authorized<T, F, Fut>(
        &self,
        header: Option<String>,
        custom: &HashMap<HeaderName, HeaderValue>,
        call: F,
    ) -> Result<T, StreamableHttpError<C::Error>>
    where
        F: Fn(Option<String>, HashMap<HeaderName, HeaderValue>) -> Fut,
        Fut: Future<Output = Result<T, StreamableHttpError<C::Error>>>,
    {
        let Some(auth) = &self.auth else {
            return call(header, custom.clone()).await;
        };
        let mut token: Option<Secret> = auth.token().await;
        let mut retries = 0;
        loop {
            let (bearer, headers) = carried(auth.as_ref(), token.as_ref(), custom);
            let error = match call(bearer, headers).await {
                Err(error) => error,
                done => return done,
            };
            let Some(refused) = refusal(&error) else {
                return Err(error);
            };
            if retries == MAX_RETRIES {
                return Err(error);
            }
            retries += 1;
            match auth.refused(refused, token.take()).await {
                Ok(fresh) => token = Some(fresh),
                Err(failure) => {
                    return Err(StreamableHttpError::Auth(AuthError::AuthorizationFailed(
                        failure.to_string(),
                    )));
                }
            }
        }
    }
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Credentialed<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<C::Error>> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<C::Error>> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<C::Error>> {
        self.authorized(auth_header, &custom_headers, |token, headers| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                headers,
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<C::Error>> {
        // The end of a session is not worth an authorization: the current token, once.
        let (token, headers) = match &self.auth {
            Some(auth) => {
                let token = auth.token().await;
                carried(auth.as_ref(), token.as_ref(), &custom_headers)
            }
            None => (auth_header, custom_headers),
        };
        self.inner
            .delete_session(uri, session_id, token, headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<C::Error>> {
        self.authorized(auth_header, &custom_headers, |token, headers| {
            self.inner.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                headers,
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<C::Error>> {
        self.authorized(auth_header, &custom_headers, |token, headers| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                headers,
                max_sse_event_size,
            )
        })
        .await
    }
}
