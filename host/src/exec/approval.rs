//! The `approve` outcome of the call policy: before the plugin runs, the caller's client asks its
//! human a yes/no question naming the tool and the argument fields the rule shows — a 2026
//! input-required round, or a 2025 `elicitation/create` request the call waits on. Only an
//! accepted form with `approve: true` is a yes; a no, a decline, a cancel, a client without
//! elicitation, or no answer in time is a refusal. A question answered yes is not put again in the
//! same request (a read offered to several upstreams is policed for each).
//!
//! A rule with `approver: console` asks an admin in the operator console instead, for the calls
//! of agents nobody watches: the call waits in [`Approvals`] (this replica's) until an admin
//! answers, its client cancels it or the approval timeout passes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mcp_plugin_sdk::InputError;
use mcp_plugin_sdk::wire::declares;
use serde_json::{Map, Value, json};

use super::{CallOptions, CallState, InputChannel};
use crate::policy::Subject;

/// The `inputResponses` key of the approval question.
pub const APPROVAL_KEY: &str = "mcp-host.policy.approval";

/// What the human answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Yes: the call runs.
    Yes,
    /// Asked in a 2026 round: the request is answered input-required, the call does not run yet.
    Pending,
    /// A refusal, and why (completes "this call needs approval and …").
    No(String),
}

/// The elicitation that asks about `subject` (a call, a read or a prompt) by `rule`, showing
/// `shown`.
pub fn question(subject: &Subject<'_>, rule: &str, shown: &Map<String, Value>) -> Value {
    let mut message = match subject {
        Subject::Tool { name, .. } => format!("Allow the call of tool `{name}`?"),
        Subject::Resource { uri, .. } => format!("Allow reading resource `{uri}`?"),
        Subject::Prompt { name } => format!("Allow getting prompt `{name}`?"),
    };
    if !shown.is_empty() {
        let fields: Vec<String> = shown.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        message.push_str(&format!(" ({})", fields.join(", ")));
    }
    message.push_str(&format!(" [policy rule `{rule}`]"));
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {
                    "type": "boolean",
                    "title": "Approve",
                    "description": "Run this call"
                }
            },
            "required": ["approve"]
        }
    })
}

/// The text of question `params`, which keys the request's record of approvals: `None` when the
/// same question was answered yes earlier in this request (it is not put again).
fn unasked(params: &Value, opts: &CallOptions) -> Option<String> {
    let text = params["message"].as_str().unwrap_or_default();
    (!opts.request.approved.contains(text)).then(|| text.to_owned())
}

/// Ask the caller's client to approve `subject` (rule `rule`, showing `shown`), waiting at most
/// `timeout` for a 2025 client's answer.
pub async fn ask(
    subject: &Subject<'_>,
    rule: &str,
    shown: &Map<String, Value>,
    opts: &CallOptions,
    timeout: Duration,
) -> Answer {
    let Some(channel) = opts.input.clone() else {
        return Answer::No("this connection cannot ask the client".into());
    };
    let params = question(subject, rule, shown);
    let Some(text) = unasked(&params, opts) else {
        return Answer::Yes;
    };
    if !declares(channel.capabilities(), "elicitation/create", &params) {
        return Answer::No("the client does not support elicitation (form mode)".into());
    }
    let mut requests = Map::new();
    requests.insert(
        APPROVAL_KEY.into(),
        json!({ "method": "elicitation/create", "params": params }),
    );
    let asked = json!({ "requests": requests }).to_string();
    let call = CallState {
        request: Arc::clone(&opts.request),
        deadline: Some(Instant::now() + timeout),
        events: None,
        wants: crate::exec::EventWants::NONE,
        caller_json: Arc::from(""),
        depth: 0,
        tool: Arc::from(subject.name()),
        input: None,
        inline: false,
    };
    let answered = match channel.as_ref() {
        // A round never blocks: it answers from the request's responses or records the question.
        InputChannel::Round(_) => channel.ask(&asked, &call),
        // A session blocks until the client answers: off the async threads.
        InputChannel::Session { .. } => {
            let waiting = tokio::task::spawn_blocking(move || channel.ask(&asked, &call));
            match waiting.await {
                Ok(answered) => answered,
                Err(e) => Err(InputError::Failed(format!("the approval was lost: {e}"))),
            }
        }
    };
    match answered {
        Ok(responses) => {
            let answer = judge(&responses["responses"][APPROVAL_KEY]);
            if answer == Answer::Yes {
                opts.request.approved.insert(text);
            }
            answer
        }
        Err(InputError::Asked) => Answer::Pending,
        Err(InputError::Unsupported { .. }) => {
            Answer::No("the client does not support elicitation".into())
        }
        Err(InputError::Failed(why)) if why.contains("ran out of time") => {
            Answer::No("no answer came in time".into())
        }
        Err(e) => Answer::No(format!("the approval failed: {e}")),
    }
}

/// The calls waiting for an admin's answer in the console.
#[derive(Default)]
pub struct Approvals {
    waiting: Mutex<Vec<Waiting>>,
    next: AtomicU64,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = crate::plugins::lock(&self.waiting).len();
        f.debug_struct("Approvals")
            .field("waiting", &waiting)
            .finish()
    }
}

/// One call waiting: what the console shows of it, and where its answer goes.
struct Waiting {
    id: String,
    /// The caller's user (`None`: anonymous), to show a non-admin their own calls only.
    user: Option<String>,
    row: Value,
    answer: tokio::sync::oneshot::Sender<(bool, String)>,
}

impl Approvals {
    /// The calls waiting, oldest first, as the console lists them (`id`, `kind`, `name`, `rule`,
    /// `shown`, `user`, `agent`, `askedMs`, `expiresMs`) — of `user` only, unless `all`.
    pub fn pending(&self, all: bool, user: Option<&str>) -> Vec<Value> {
        crate::plugins::lock(&self.waiting)
            .iter()
            .filter(|w| all || (w.user.is_some() && w.user.as_deref() == user))
            .map(|w| w.row.clone())
            .collect()
    }

    /// `by` answers the call waiting as `id`: yes when `approve`.
    pub fn answer(&self, id: &str, approve: bool, by: &str) -> Result<(), String> {
        let mut waiting = crate::plugins::lock(&self.waiting);
        let at = waiting.iter().position(|w| w.id == id).ok_or_else(|| {
            format!("no call waits for approval as {id} (answered, cancelled or timed out)")
        })?;
        let w = waiting.remove(at);
        w.answer
            .send((approve, by.to_owned()))
            .map_err(|_| format!("the call {id} stopped waiting"))
    }

    /// Wait for an admin's answer about `subject` (rule `rule`, showing `shown`), at most
    /// `timeout`, or until the request is cancelled.
    pub async fn ask(
        &self,
        subject: &Subject<'_>,
        rule: &str,
        shown: &Map<String, Value>,
        opts: &CallOptions,
        timeout: Duration,
    ) -> Answer {
        let Some(text) = unasked(&question(subject, rule, shown), opts) else {
            return Answer::Yes;
        };
        let id = format!("a{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let identity = &opts.request.identity;
        let user = identity.caller.as_ref().map(|c| c.user_id.clone());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let row = json!({
            "id": id,
            "kind": subject.kind(),
            "name": subject.name(),
            "rule": rule,
            "question": text,
            "shown": shown,
            "user": user,
            "agent": identity.agent.as_ref().map(|a| a.name.clone()),
            "askedMs": millis(now),
            "expiresMs": millis(now + timeout),
        });
        let (tx, rx) = tokio::sync::oneshot::channel();
        crate::plugins::lock(&self.waiting).push(Waiting {
            id: id.clone(),
            user,
            row,
            answer: tx,
        });
        let answer = tokio::select! {
            answered = tokio::time::timeout(timeout, rx) => match answered {
                Ok(Ok((true, _))) => Answer::Yes,
                Ok(Ok((false, by))) => Answer::No(format!("{by} refused it in the console")),
                Ok(Err(_)) => Answer::No("the approval was lost".into()),
                Err(_) => Answer::No("no admin answered in the console in time".into()),
            },
            () = opts.request.cancel.cancelled() => Answer::No("the call was cancelled".into()),
        };
        crate::plugins::lock(&self.waiting).retain(|w| w.id != id);
        if answer == Answer::Yes {
            opts.request.approved.insert(text);
        }
        answer
    }
}

/// A yes only for an accepted form whose `approve` is true.
fn judge(answer: &Value) -> Answer {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") if answer["content"]["approve"] == json!(true) => Answer::Yes,
        Some("accept") => Answer::No("the answer was no".into()),
        Some("decline") => Answer::No("the user declined".into()),
        Some("cancel") => Answer::No("the user cancelled".into()),
        _ => Answer::No("the answer was not understood".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_accepted_yes_approves() {
        assert_eq!(
            judge(&json!({"action": "accept", "content": {"approve": true}})),
            Answer::Yes
        );
        for no in [
            json!({"action": "accept", "content": {"approve": false}}),
            json!({"action": "accept", "content": {}}),
            json!({"action": "decline"}),
            json!({"action": "cancel"}),
            json!(null),
        ] {
            assert!(matches!(judge(&no), Answer::No(_)), "{no}");
        }
    }

    #[test]
    fn the_question_names_the_tool_the_rule_and_the_shown_fields() {
        let mut shown = Map::new();
        shown.insert("indicator".into(), json!("temp"));
        let annotations = Value::Null;
        let tool = Subject::Tool {
            name: "delete_reading",
            source_name: "delete_reading",
            annotations: &annotations,
        };
        let q = question(&tool, "destructive", &shown);
        let message = q["message"].as_str().expect("message");
        assert!(message.contains("delete_reading"), "{message}");
        assert!(message.contains("indicator: \"temp\""), "{message}");
        assert!(message.contains("destructive"), "{message}");
    }
}
