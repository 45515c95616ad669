//! Requests that may ask the client for input (`tools/call`, `prompts/get`, `resources/read`): how
//! a call's questions reach the client in each era, and what the request answers afterwards.
//!
//! - **2026-07-28** (input-required results, "MRTR"): the request's `inputResponses` and its
//!   `requestState` (sealed by [`super::request_state`], bound to this request and caller, carrying
//!   the earlier rounds' answers) answer the call's questions; questions left open make the answer an
//!   `input_required` result with the questions and a fresh state, and the client retries.
//! - **2025** sessions: questions are JSON-RPC requests to the client on the request's stream (see
//!   [`super::session::SessionLink`]); the call waits for the answers.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::era::Era;
use super::jsonrpc::{ErrorKind, RpcError};
use super::request_state::Sealer;
use super::session::SessionLink;
use super::{Answer, Protocol, Request};
use crate::exec::{InputChannel, Round};

/// What a request asks of the server, to bind its state to: the method, the tool or prompt name
/// or resource URI, and the arguments.
pub(crate) struct Subject<'a> {
    /// `tools/call`, `prompts/get` or `resources/read`.
    pub method: &'a str,
    /// The tool or prompt name, or the resource URI.
    pub name: &'a str,
    /// The arguments (`null` for a resource).
    pub arguments: Option<&'a Value>,
}

impl Subject<'_> {
    /// SHA-256 over the canonical JSON of method, name and arguments (hex).
    fn digest(&self) -> String {
        crate::config::lock::digest(&json!([self.method, self.name, self.arguments]))
    }
}

/// Who asks, as bound into a state (and who may see a task): the verified user and the agent.
pub(crate) fn principal(req: &Request<'_>) -> String {
    let user = req.ex.request.caller().map_or("", |c| c.user_id.as_str());
    let agent = req.ex.request.agent().map_or("", |a| a.name.as_str());
    format!("{user}\u{0}{agent}")
}

impl Protocol {
    /// The sealer for request states: the configured keys, or this process's random one.
    fn sealer(&self, req: &Request<'_>) -> Sealer {
        let settings = &req.config.request_state;
        let keys = if settings.keys.is_empty() {
            vec![self.state_key.to_vec()]
        } else {
            settings
                .keys
                .iter()
                .map(|k| k.as_bytes().to_vec())
                .collect()
        };
        Sealer::new(keys, Duration::from_secs(settings.ttl_secs))
    }
}

/// How the call serving `req` asks the client: a 2026 round built from `inputResponses` and the
/// verified `requestState`, or the 2025 session's client over this request's stream. `None` where
/// nobody can be asked (a 2025 request without a session stream).
pub(crate) fn channel(
    protocol: &Protocol,
    req: &Request<'_>,
    subject: &Subject<'_>,
) -> Result<Option<Arc<InputChannel>>, RpcError> {
    match req.era {
        Era::Modern { caps, .. } => {
            let answers = answers(protocol, req, subject)?;
            Ok(Some(Arc::new(InputChannel::Round(Round::new(
                (*caps).clone(),
                answers,
            )))))
        }
        Era::Legacy(_) => {
            let (Some(session), Some(out)) = (&req.ex.session, &req.ex.notifier) else {
                return Ok(None);
            };
            Ok(Some(Arc::new(InputChannel::session(
                session.capabilities.clone(),
                session.version.clone(),
                Arc::new(SessionLink::new(Arc::clone(session), Arc::clone(out))),
            ))))
        }
    }
}

/// The answers a 2026 request brings: those of earlier rounds from its verified `requestState`
/// (bound to this request and caller), then its `inputResponses`.
pub(crate) fn answers(
    protocol: &Protocol,
    req: &Request<'_>,
    subject: &Subject<'_>,
) -> Result<Map<String, Value>, RpcError> {
    let mut answers = Map::new();
    if let Some(state) = req.params.get("requestState") {
        let Some(state) = state.as_str() else {
            return Err(RpcError::invalid_params("requestState must be a string"));
        };
        let payload = protocol
            .sealer(req)
            .open(state)
            .map_err(|e| RpcError::invalid_params(e.to_string()))?;
        if payload["sub"] != json!(subject.digest()) || payload["who"] != json!(principal(req)) {
            return Err(RpcError::invalid_params(
                "requestState belongs to another request or caller",
            ));
        }
        if let Some(Value::Object(earlier)) = payload.get("answers") {
            answers.extend(earlier.clone());
        }
    }
    match req.params.get("inputResponses") {
        None => {}
        Some(Value::Object(given)) => {
            if let Some((key, _)) = given.iter().find(|(_, v)| !v.is_object()) {
                return Err(RpcError::invalid_params(format!(
                    "inputResponses.{key} must be an object (the client's result for that request)"
                )));
            }
            answers.extend(given.clone());
        }
        Some(_) => {
            return Err(RpcError::invalid_params(
                "inputResponses must be an object of results by request key",
            ));
        }
    }
    Ok(answers)
}

/// What a 2026 round's questions make of a call that returned (`failed`: an `isError` result or
/// an error).
pub(crate) enum RoundEnd {
    /// Questions are open: the client must answer them (`open`), with the answers the call used.
    Open {
        /// Questions without an answer, by key.
        open: Map<String, Value>,
        /// Answers the call used, by key.
        used: Map<String, Value>,
    },
    /// The call's own answer stands.
    Answer,
    /// The request fails: an invalid answer (-32602), or a question the client had no capability
    /// for that made the call fail (-32021 naming the capability).
    Error(RpcError),
}

/// How a round ends once its call returned.
pub(crate) fn round_end(round: &Round, failed: bool, subject: &Subject<'_>) -> RoundEnd {
    let Some(asked) = round.asked() else {
        return RoundEnd::Answer;
    };
    if let Some(why) = asked.invalid {
        return RoundEnd::Error(RpcError::invalid_params(why));
    }
    if !asked.open.is_empty() {
        return RoundEnd::Open {
            open: asked.open,
            used: asked.used,
        };
    }
    if let Some(missing) = asked.missing.filter(|_| failed) {
        let names: Vec<String> = missing
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        return RoundEnd::Error(
            RpcError::new(
                ErrorKind::MissingCapability,
                format!(
                    "Missing required client capability: {} {} needs {}",
                    subject.method,
                    subject.name,
                    names.join(", ")
                ),
            )
            .with_data(json!({ "requiredCapabilities": missing })),
        );
    }
    RoundEnd::Answer
}

/// The input-required result asking `open`, with a fresh state carrying `used`.
pub(crate) fn input_required(
    protocol: &Protocol,
    req: &Request<'_>,
    subject: &Subject<'_>,
    open: Map<String, Value>,
    used: Map<String, Value>,
) -> Answer {
    let state = protocol.sealer(req).seal(json!({
        "sub": subject.digest(),
        "who": principal(req),
        "answers": used,
    }));
    Answer::InputRequired(json!({
        "inputRequests": open,
        "requestState": state,
    }))
}

/// A 2025 session's call that failed for want of a URL elicitation completed: the request fails
/// with -32042 (`URLElicitationRequiredError`) carrying the elicitations, for the client to
/// complete and retry; otherwise `answer` as it is.
fn url_required(
    session: &InputChannel,
    failed: bool,
    answer: Result<Answer, RpcError>,
) -> Result<Answer, RpcError> {
    let elicitations = session.urls_required();
    if !failed || elicitations.is_empty() {
        return answer;
    }
    Err(RpcError::new(
        ErrorKind::UrlElicitationRequired,
        "This request requires more information: complete the URL elicitation, then retry",
    )
    .with_data(json!({ "elicitations": elicitations })))
}

/// What the request answers once its call returned `answer` (`failed`: the call failed — an
/// `isError` result or an error): in a 2026 round, open questions make it an input-required result
/// with a fresh state, otherwise see [`round_end`]. Outside a round, `answer` as it is.
pub(crate) fn finish(
    protocol: &Protocol,
    req: &Request<'_>,
    subject: &Subject<'_>,
    channel: Option<&InputChannel>,
    failed: bool,
    answer: Result<Answer, RpcError>,
) -> Result<Answer, RpcError> {
    let round = match channel {
        Some(InputChannel::Round(round)) => round,
        Some(session) => return url_required(session, failed, answer),
        None => return answer,
    };
    match round_end(round, failed, subject) {
        RoundEnd::Open { open, used } => Ok(input_required(protocol, req, subject, open, used)),
        RoundEnd::Error(e) => Err(e),
        RoundEnd::Answer => answer,
    }
}
