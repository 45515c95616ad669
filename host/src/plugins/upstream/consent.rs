//! Asking a caller to connect their account at an upstream with `server.auth` (their first call
//! without a token, or a step-up): a consent flow is begun for them and their client is asked to
//! open its link, `<public_url>/oauth/connect/<flow id>` — a URL-mode `elicitation/create`, the way
//! the call's era allows:
//!
//! - **2026-07-28**: the question goes into the call's `input_required` result (key
//!   `mcp-host-oauth-<upstream>-<flow id>-<n>`); the client retries once the user followed the
//!   link. If the callback landed, the retry's call simply succeeds; if not yet, the same link is
//!   asked again (`n + 1`, at most [`MAX_ASKS`] times); a declined question fails the call.
//! - **2025-11-25 session**: the elicitation is sent on the call's stream; once the client
//!   accepts, the call waits (at most `upstream_auth.consent.wait_secs`, within its deadline) for
//!   the callback — on any replica — then sends `notifications/elicitation/complete` and goes on;
//!   past the wait the request fails with -32042 (`URLElicitationRequiredError`) carrying the
//!   elicitation.
//! - **A client without URL elicitation** gets a tool error result naming the link (safe to show
//!   through the model: the link is bound to the user, and needs the user's own login).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_plugin_sdk::InputError;
use serde_json::{Map, Value, json};

use super::link::{Failure, Link};
use super::{Unanswered, relay};
use crate::access::upstream::Principal;
use crate::access::upstream::gateway::consent::CONNECT_PATH;
use crate::access::upstream::gateway::{Consent, Credentials, Need};
use crate::plugins::call::{CallInput, CallState};

/// The prefix of the keys of consent questions.
const PREFIX: &str = "mcp-host-oauth-";
/// The most times one consent link is asked in the rounds of one call.
pub(super) const MAX_ASKS: u64 = 8;
/// What a 2025 call keeps of its deadline when it waits for a consent (to answer in time).
const MARGIN: Duration = Duration::from_secs(1);
/// The most consents one request asks for (a consent, then a step-up).
const MAX_CONSENTS: u32 = 2;

/// Get the caller of `call` authorized at `link`'s upstream as `need` says (the request's
/// `nth` consent): `Ok` once a credential landed (a 2025 session waited for it); otherwise the
/// call ends as the module's documentation says.
pub(super) async fn authorize(
    link: &Arc<Link>,
    call: &Arc<CallState>,
    need: Need,
    nth: u32,
) -> Result<(), Unanswered> {
    let name = link.name().to_owned();
    if nth > MAX_CONSENTS {
        let who = super::callers::principal(call, &name).map_err(Unanswered::Failed)?;
        return Err(Unanswered::Asked(need.describe(&who, &name)));
    }
    let Some(callers) = link.callers.get() else {
        return Err(Unanswered::Failed(Failure::Unavailable(format!(
            "upstream {name} needs its callers' authorization, which this command cannot ask"
        ))));
    };
    let credentials = Arc::clone(callers.credentials().map_err(Unanswered::Failed)?);
    let who = super::callers::principal(call, &name).map_err(Unanswered::Failed)?;
    let prefix = format!("{PREFIX}{name}-");
    if let Some(input) = &call.input
        && let Some((consent, n)) =
            again(&credentials, &who, &name, input.as_ref(), &prefix).await?
    {
        let key = format!("{prefix}{}-{n}", consent.flow_id);
        return ask(&credentials, call, &who, &name, &consent, key).await;
    }
    let consent = credentials
        .begin_consent(&who, &name, &need, &call.tool)
        .await
        .map_err(|e| Unanswered::Asked(format!("upstream {name}: {e}")))?;
    let url_capable = call.input.as_ref().is_some_and(|i| {
        mcp_plugin_sdk::wire::declares(
            i.capabilities(),
            "elicitation/create",
            &json!({"mode": "url"}),
        )
    });
    if !url_capable {
        return Err(Unanswered::Asked(open_yourself(&consent)));
    }
    let key = format!("{prefix}{}-0", consent.flow_id);
    ask(&credentials, call, &who, &name, &consent, key).await
}

/// What a client without URL elicitation is told.
fn open_yourself(consent: &Consent) -> String {
    format!(
        "Authorization needed: {} Open {} in your browser, then call again.",
        consent.message, consent.url
    )
}

/// A 2026 retry whose client answered an earlier consent question of this upstream while its
/// flow is still pending: that flow, and the number of the next question about it. `None`: no
/// such answer (or its flow is gone): a new flow. A declined question fails the call.
async fn again(
    credentials: &Credentials,
    who: &Principal,
    upstream: &str,
    input: &dyn CallInput,
    prefix: &str,
) -> Result<Option<(Consent, u64)>, Unanswered> {
    let latest = input
        .answered(prefix)
        .into_iter()
        .filter_map(|(key, answer)| {
            let (flow, n) = key[prefix.len()..].rsplit_once('-')?;
            Some((flow.to_owned(), n.parse::<u64>().ok()?, answer))
        })
        .max_by_key(|(_, n, _)| *n);
    let Some((flow_id, n, answer)) = latest else {
        return Ok(None);
    };
    if answer.get("action").and_then(Value::as_str) != Some("accept") {
        return Err(Unanswered::Asked(format!(
            "The authorization of upstream {upstream} was declined."
        )));
    }
    if n + 1 >= MAX_ASKS {
        return Err(Unanswered::Asked(format!(
            "The authorization of upstream {upstream} did not complete: call again for a new link."
        )));
    }
    let flow = credentials.flow(&flow_id).await.ok().flatten();
    let Some(_flow) = flow.filter(|f| f.principal == who.0 && f.upstream == upstream) else {
        return Ok(None);
    };
    let Some(public_url) = credentials.settings().public_url.clone() else {
        return Ok(None);
    };
    Ok(Some((
        Consent {
            url: format!("{public_url}{CONNECT_PATH}{flow_id}"),
            message: format!(
                "{upstream} needs your authorization: open the link to connect your account."
            ),
            flow_id,
            since_ms: 0,
        },
        n + 1,
    )))
}

/// Ask the client of `call` to open `consent`'s link (question `key`), and in a 2025 session
/// wait for the callback.
async fn ask(
    credentials: &Credentials,
    call: &Arc<CallState>,
    who: &Principal,
    upstream: &str,
    consent: &Consent,
    key: String,
) -> Result<(), Unanswered> {
    let params = json!({
        "mode": "url",
        "message": consent.message,
        "url": consent.url,
        "elicitationId": consent.flow_id,
    });
    let mut questions = Map::new();
    questions.insert(
        key.clone(),
        json!({"method": "elicitation/create", "params": params}),
    );
    let mut answers = match relay::put(call, questions).await {
        Ok(answers) => answers,
        // A 2026 round: the question is in the call's input_required result.
        Err(InputError::Asked) => {
            return Err(Unanswered::Asked(format!(
                "upstream {upstream} needs your authorization: {}",
                consent.url
            )));
        }
        Err(InputError::Unsupported { .. }) => {
            return Err(Unanswered::Asked(open_yourself(consent)));
        }
        Err(e) => {
            return Err(Unanswered::Asked(format!(
                "{} ({e})",
                open_yourself(consent)
            )));
        }
    };
    let answer = answers.remove(&key).unwrap_or_default();
    let action = answer.get("action").and_then(|a| a.as_str()).unwrap_or("-");
    tracing::info!("Upstream {upstream}: {who}'s client answered the consent question: {action}");
    if answer.get("action").and_then(Value::as_str) != Some("accept") {
        return Err(Unanswered::Asked(format!(
            "The authorization of upstream {upstream} was declined."
        )));
    }
    wait(credentials, call, who, upstream, consent, params).await
}

/// A 2025 session's client accepted to open the link: wait for the callback (bounded), then tell
/// the client the elicitation completed; past the wait, the request fails with -32042.
async fn wait(
    credentials: &Credentials,
    call: &Arc<CallState>,
    who: &Principal,
    upstream: &str,
    consent: &Consent,
    params: Value,
) -> Result<(), Unanswered> {
    let wait = credentials.settings().wait;
    let mut until = Instant::now() + wait;
    if let Some(deadline) = call.deadline {
        until = until.min(deadline.checked_sub(MARGIN).unwrap_or(deadline));
    }
    let began = Instant::now();
    let landed = tokio::select! {
        landed = credentials.wait_landed(who, upstream, consent.since_ms, until) => landed,
        () = call.cancel().cancelled() => {
            tracing::info!("Upstream {upstream}: {who}'s call was cancelled while waiting for their consent");
            false
        }
    };
    if !landed {
        tracing::info!(
            "Upstream {upstream}: {who}'s consent did not land within {} ms of waiting",
            began.elapsed().as_millis()
        );
    }
    let Some(input) = &call.input else {
        return Err(Unanswered::Asked(open_yourself(consent)));
    };
    if landed {
        tracing::info!("Upstream {upstream}: {who}'s consent landed: the call goes on");
        input.completed(&consent.flow_id);
        return Ok(());
    }
    input.url_required(params);
    Err(Unanswered::Asked(format!(
        "The authorization of upstream {upstream} did not complete in time: open {}, then call \
         again.",
        consent.url
    )))
}
