//! Questions a running call asks the client (elicitation, sampling, roots), answered the way the
//! call's protocol era allows:
//!
//! - **2026-07-28** ([`InputChannel::Round`]): the client is never sent a request. The answers it
//!   gave with this request (`inputResponses`, plus the earlier rounds' answers carried in the
//!   verified `requestState`) answer the questions at once; a question without an answer is
//!   recorded and the plugin is told [`InputError::Asked`]; the protocol then answers the request
//!   with the recorded questions (an input-required result).
//! - **2025** ([`InputChannel::Session`]): the question is sent to the client as a JSON-RPC request
//!   on the request's own stream, and the call blocks (on its worker thread) until the client's
//!   response arrives, the call is cancelled or its deadline passes.
//!
//! Either way a question needs the capability the client declared ([`declares`]).

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_plugin_sdk::InputError;
use mcp_plugin_sdk::wire::{declares, required_capability};
use serde_json::{Map, Value, json};

use super::CallState;

/// How often a blocked question looks at its call's cancellation flag and deadline.
const CANCEL_CHECK: Duration = Duration::from_millis(50);

/// The client's end of a 2025 session, as a question needs it.
pub trait ClientLink: Send + Sync {
    /// Send request `method` with `params` to the client; its id, and where its response (`Ok`
    /// result or `Err` error object) will arrive.
    fn send(
        &self,
        method: &str,
        params: Value,
    ) -> Result<(Value, Receiver<Result<Value, Value>>), String>;

    /// Stop waiting for request `id` (the call ended first) and tell the client.
    fn abandon(&self, id: &Value);

    /// Send notification `method` with `params` to the client (on the request's stream).
    fn notify(&self, _method: &str, _params: Value) {}
}

/// How the questions of one call reach the client.
pub enum InputChannel {
    /// A 2026 round: answers come with the request; open questions go back in the result.
    Round(Round),
    /// A 2025 session: questions are requests to the client, answered while the call waits.
    Session {
        /// What the client declared at `initialize`.
        capabilities: Value,
        /// The session's negotiated revision.
        version: String,
        /// The client.
        link: Arc<dyn ClientLink>,
        /// URL elicitations the call could not go on without (see
        /// [`crate::plugins::call::CallInput::url_required`]).
        url_required: Mutex<Vec<Value>>,
    },
}

impl std::fmt::Debug for InputChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputChannel::Round(_) => f.write_str("InputChannel::Round"),
            InputChannel::Session { version, .. } => write!(f, "InputChannel::Session({version})"),
        }
    }
}

/// One 2026 round: the answers available and what the call asked.
pub struct Round {
    capabilities: Value,
    answers: Map<String, Value>,
    /// `None` until the call asks something (most never do).
    asked: Mutex<Option<Box<Asked>>>,
    /// Called (once) when the call becomes a task (`CallContext::start_task`).
    on_start: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round")
            .field("answers", &self.answers.len())
            .finish_non_exhaustive()
    }
}

/// What a call asked during its round.
#[derive(Debug, Default, Clone)]
pub struct Asked {
    /// Questions without an answer: key -> `{"method", "params"}` (MCP `InputRequest`).
    pub open: Map<String, Value>,
    /// Answers the call used: key -> answer (carried into the next round's state).
    pub used: Map<String, Value>,
    /// A question the client lacks the capability for: the capability (MCP `ClientCapabilities`).
    pub missing: Option<Value>,
    /// An answer that is not the right shape for its question.
    pub invalid: Option<String>,
}

impl Round {
    /// A round with the client's `capabilities` (from this request) and `answers` (this request's
    /// `inputResponses` over the earlier rounds' verified ones).
    pub fn new(capabilities: Value, answers: Map<String, Value>) -> Self {
        Round {
            capabilities,
            answers,
            asked: Mutex::default(),
            on_start: Mutex::default(),
        }
    }

    /// Call `hook` when the call becomes a task (the first `CallContext::start_task`).
    pub fn on_start(self, hook: impl FnOnce() + Send + 'static) -> Self {
        *self.on_start.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(hook));
        self
    }

    /// The answers this round started with.
    pub fn answers(&self) -> &Map<String, Value> {
        &self.answers
    }

    /// The client's capabilities (from the request).
    pub fn capabilities(&self) -> &Value {
        &self.capabilities
    }

    /// What the call asked, once it returned (`None`: nothing).
    pub fn asked(&self) -> Option<Asked> {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_deref()
            .cloned()
    }

    fn ask(&self, requests: &Map<String, Value>) -> Result<Value, InputError> {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        let asked = asked.get_or_insert_with(Box::default);
        // Every question must be one the client can answer before any is recorded as asked.
        for request in requests.values() {
            let (method, params) = parts(request)?;
            if !declares(&self.capabilities, method, params) {
                asked.missing = required_capability(method, params);
                return Err(InputError::Unsupported {
                    method: method.to_owned(),
                });
            }
        }
        let mut responses = Map::new();
        for (key, request) in requests {
            let (method, params) = parts(request)?;
            match self.answers.get(key) {
                Some(answer) => {
                    if let Err(why) = check_answer(method, answer) {
                        let why = format!("inputResponses.{key}: {why}");
                        asked.invalid = Some(why.clone());
                        return Err(InputError::Failed(why));
                    }
                    asked.used.insert(key.clone(), answer.clone());
                    responses.insert(key.clone(), answer.clone());
                }
                None => {
                    // A question without params (`roots/list`) is asked with empty ones: the
                    // schema wants an object where it has any.
                    let params = if params.is_null() { &json!({}) } else { params };
                    asked
                        .open
                        .insert(key.clone(), json!({ "method": method, "params": params }));
                }
            }
        }
        if responses.len() < requests.len() {
            return Err(InputError::Asked);
        }
        Ok(json!({ "responses": responses }))
    }
}

/// The method and params of one question.
fn parts(request: &Value) -> Result<(&str, &Value), InputError> {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .filter(|m| required_capability(m, &Value::Null).is_some())
        .ok_or_else(|| InputError::Failed(format!("not a question for the client: {request}")))?;
    Ok((method, request.get("params").unwrap_or(&Value::Null)))
}

/// A client's answer that is not the result type of the question it answers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("not a valid answer to {method}: {answer}")]
pub struct InvalidAnswer {
    /// The question's method (`elicitation/create`, ...).
    pub method: String,
    /// What the client answered.
    pub answer: Value,
}

/// Whether `answer` is the result type of `method` (`ElicitResult`, `CreateMessageResult`,
/// `ListRootsResult`).
pub fn check_answer(method: &str, answer: &Value) -> Result<(), InvalidAnswer> {
    let ok = match method {
        "elicitation/create" => {
            matches!(
                answer.get("action").and_then(Value::as_str),
                Some("accept" | "decline" | "cancel")
            ) && answer
                .get("content")
                .is_none_or(|c| c.is_object() || c.is_null())
        }
        "sampling/createMessage" => {
            answer.get("role").is_some_and(Value::is_string)
                && answer.get("model").is_some_and(Value::is_string)
                && answer
                    .get("content")
                    .is_some_and(|c| c.is_object() || c.is_array())
        }
        "roots/list" => answer.get("roots").is_some_and(Value::is_array),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(InvalidAnswer {
            method: method.to_owned(),
            answer: answer.clone(),
        })
    }
}

impl InputChannel {
    /// The capabilities the client declared.
    pub fn capabilities(&self) -> &Value {
        match self {
            InputChannel::Round(r) => &r.capabilities,
            InputChannel::Session { capabilities, .. } => capabilities,
        }
    }

    /// The call reached `CallContext::start_task`: a round whose request waits for that becomes a
    /// task now; anywhere else nothing happens.
    pub fn start_task(&self) {
        if let InputChannel::Round(round) = self {
            let hook = round
                .on_start
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some(hook) = hook {
                hook();
            }
        }
    }

    /// Ask the questions of an `input/ask` (`{"requests": {key: {method, params}}}`) on behalf of
    /// `call`; `{"responses": {key: answer}}` when all are answered.
    pub fn ask(&self, params: &str, call: &CallState) -> Result<Value, InputError> {
        let params: Value = serde_json::from_str(params)
            .map_err(|e| InputError::Failed(format!("unreadable questions: {e}")))?;
        let Some(requests) = params.get("requests").and_then(Value::as_object) else {
            return Err(InputError::Failed("no questions".into()));
        };
        match self {
            InputChannel::Round(round) => round.ask(requests),
            InputChannel::Session {
                capabilities,
                version,
                link,
                ..
            } => {
                if call.inline {
                    return Err(InputError::Failed(
                        "an `inline` tool cannot wait for the client: drop `inline` from its \
                         #[tool] options"
                            .into(),
                    ));
                }
                let mut responses = Map::new();
                for (key, request) in requests {
                    let (method, params) = parts(request)?;
                    let params = for_version(version, method, params)
                        .filter(|_| declares(capabilities, method, params))
                        .ok_or_else(|| InputError::Unsupported {
                            method: method.to_owned(),
                        })?;
                    let answer = wait(link.as_ref(), method, params, call)?;
                    check_answer(method, &answer).map_err(|e| InputError::Failed(e.to_string()))?;
                    responses.insert(key.clone(), answer);
                }
                Ok(json!({ "responses": responses }))
            }
        }
    }
}

/// A question's params as revision `version` spells them; `None` when that revision cannot ask it
/// (2025-03-26 has no elicitation; URL elicitation is 2025-11-25's).
fn for_version(version: &str, method: &str, params: &Value) -> Option<Value> {
    if method != "elicitation/create" {
        return Some(params.clone());
    }
    let url = params.get("mode").and_then(Value::as_str) == Some("url");
    let mut params = params.clone();
    match version {
        "2025-03-26" => None,
        "2025-06-18" if url => None,
        "2025-06-18" => {
            if let Some(p) = params.as_object_mut() {
                p.remove("mode");
            }
            Some(params)
        }
        _ => {
            if url && params.get("elicitationId").is_none() {
                params["elicitationId"] = json!(fresh_id());
            }
            Some(params)
        }
    }
}

/// Send one question and block until its answer, the call's cancellation or its deadline.
fn wait(
    link: &dyn ClientLink,
    method: &str,
    params: Value,
    call: &CallState,
) -> Result<Value, InputError> {
    let (id, answer) = link.send(method, params).map_err(InputError::Failed)?;
    loop {
        if call.is_cancelled() {
            link.abandon(&id);
            return Err(InputError::Failed(
                "the call was cancelled or ran out of time while waiting for the client".into(),
            ));
        }
        let step = call.deadline.map_or(CANCEL_CHECK, |d| {
            d.saturating_duration_since(Instant::now())
                .min(CANCEL_CHECK)
        });
        match answer.recv_timeout(step) {
            Ok(Ok(result)) => return Ok(result),
            Ok(Err(error)) => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                return Err(InputError::Failed(format!(
                    "the client answered {method} with an error: {message}"
                )));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(InputError::Failed("the client's session ended".into()));
            }
        }
    }
}

impl InputChannel {
    /// A 2025 session's channel: the client declared `capabilities` in revision `version`, and is
    /// reached over `link`.
    pub fn session(capabilities: Value, version: String, link: Arc<dyn ClientLink>) -> Self {
        InputChannel::Session {
            capabilities,
            version,
            link,
            url_required: Mutex::default(),
        }
    }

    /// The URL elicitations the call could not go on without (a 2025 session's).
    pub fn urls_required(&self) -> Vec<Value> {
        match self {
            InputChannel::Session { url_required, .. } => url_required
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            InputChannel::Round(_) => Vec::new(),
        }
    }
}

impl crate::plugins::call::CallInput for InputChannel {
    fn capabilities(&self) -> &Value {
        InputChannel::capabilities(self)
    }

    fn start_task(&self) {
        InputChannel::start_task(self);
    }

    fn ask(&self, params: &str, call: &CallState) -> Result<Value, InputError> {
        InputChannel::ask(self, params, call)
    }

    fn answered(&self, prefix: &str) -> Vec<(String, Value)> {
        match self {
            InputChannel::Round(round) => round
                .answers
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            InputChannel::Session { .. } => Vec::new(),
        }
    }

    fn completed(&self, elicitation_id: &str) {
        if let InputChannel::Session { link, .. } = self {
            link.notify(
                "notifications/elicitation/complete",
                json!({ "elicitationId": elicitation_id }),
            );
        }
    }

    fn url_required(&self, elicitation: Value) {
        if let InputChannel::Session { url_required, .. } = self {
            let mut required = url_required.lock().unwrap_or_else(|p| p.into_inner());
            if required.len() < 8 {
                required.push(elicitation);
            }
        }
    }
}

/// A fresh unguessable id: 128 random bits as hex (an elicitation's id, a session's).
pub(crate) fn fresh_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // Without an OS RNG, fall back to time and address entropy (still unique per process).
        let t = Instant::now();
        let seed = format!("{t:?}{:p}", &bytes);
        for (i, b) in seed.bytes().enumerate() {
            bytes[i % 16] ^= b;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_against_their_question() {
        assert!(
            check_answer(
                "elicitation/create",
                &json!({"action": "accept", "content": {"a": 1}})
            )
            .is_ok()
        );
        assert!(check_answer("elicitation/create", &json!({"action": "maybe"})).is_err());
        assert!(check_answer("elicitation/create", &json!(12345)).is_err());
        assert!(
            check_answer(
                "sampling/createMessage",
                &json!({"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"})
            )
            .is_ok()
        );
        assert!(check_answer("roots/list", &json!({"roots": []})).is_ok());
        assert!(check_answer("roots/list", &json!({})).is_err());
    }

    #[test]
    fn a_round_answers_known_keys_records_open_ones_and_refuses_undeclared_capabilities() {
        let form =
            json!({"method": "elicitation/create", "params": {"mode": "form", "message": "?"}});
        let mut answers = Map::new();
        answers.insert("a".into(), json!({"action": "accept", "content": {}}));
        let round = Round::new(json!({"elicitation": {}}), answers);
        let mut both = Map::new();
        both.insert("a".into(), form.clone());
        both.insert("b".into(), form.clone());
        assert_eq!(round.ask(&both), Err(InputError::Asked));
        let asked = round.asked().expect("the call asked");
        assert_eq!(asked.open.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(asked.used.keys().collect::<Vec<_>>(), ["a"]);
        let mut sample = Map::new();
        sample.insert(
            "s".into(),
            json!({"method": "sampling/createMessage", "params": {}}),
        );
        assert!(matches!(
            round.ask(&sample),
            Err(InputError::Unsupported { .. })
        ));
        assert_eq!(
            round.asked().expect("the call asked").missing,
            Some(json!({"sampling": {}}))
        );
    }

    #[test]
    fn a_question_without_params_is_asked_with_empty_ones() {
        let round = Round::new(json!({"roots": {}}), Map::new());
        let mut roots = Map::new();
        roots.insert("r".into(), json!({"method": "roots/list"}));
        assert_eq!(round.ask(&roots), Err(InputError::Asked));
        let asked = round.asked().expect("the call asked");
        assert_eq!(
            asked.open["r"],
            json!({"method": "roots/list", "params": {}})
        );
    }

    #[test]
    fn elicitation_is_spelled_per_revision() {
        let form = json!({"mode": "form", "message": "?"});
        assert_eq!(for_version("2025-03-26", "elicitation/create", &form), None);
        assert_eq!(
            for_version("2025-06-18", "elicitation/create", &form),
            Some(json!({"message": "?"}))
        );
        let url = json!({"mode": "url", "message": "?", "url": "https://x"});
        assert_eq!(for_version("2025-06-18", "elicitation/create", &url), None);
        let sent = for_version("2025-11-25", "elicitation/create", &url).unwrap();
        assert!(sent["elicitationId"].is_string());
    }
}
