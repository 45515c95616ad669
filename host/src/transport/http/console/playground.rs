//! The playground's one endpoint, `POST <console.path>/api/rpc`: a list, a tool call, a resource
//! read or a prompt, run through the protocol exactly as a 2026-07-28 client's request would be
//! (the agent's view, call policy, quotas, validation, the audit log), as the operator or — for an
//! admin — as another configured user. An input-required result comes back as it is; the page
//! asks its questions and sends the answers with the next request.

use std::sync::Arc;

use hyper::Response;
use mcp_plugin_sdk::UserInfo;
use serde_json::{Map, Value, json};

use super::super::State;
use super::super::body::{Body, json_response};
use super::{Operator, Refusal, refuse};
use crate::access::Identity;
use crate::exec::{CancelFlag, RequestContext};
use crate::protocol::{Exchange, MODERN_VERSION, Reply};

/// The methods the playground may send.
const METHODS: [&str; 8] = [
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

/// Run `{method, params, agent?, as?}` and answer `{status, response}` (the JSON-RPC response).
pub(super) async fn rpc(
    state: &Arc<State>,
    op: &Operator,
    body: &Value,
    peer: &Arc<str>,
) -> Response<Body> {
    let Some(method) = body["method"].as_str().filter(|m| METHODS.contains(m)) else {
        return refuse(
            400,
            &format!("method must be one of {}", METHODS.join(", ")),
        );
    };
    let mut params = match &body["params"] {
        Value::Object(p) => p.clone(),
        Value::Null => Map::new(),
        _ => return refuse(400, "params must be an object"),
    };
    let identity = match identity(state, op, body["agent"].as_str(), body["as"].as_str()) {
        Ok(identity) => identity,
        Err(refused) => return refused.response(),
    };
    // A 2026-07-28 client that can answer questions in a form.
    params.insert(
        "_meta".into(),
        json!({
            crate::protocol::META_VERSION: MODERN_VERSION,
            crate::protocol::META_CAPS: { "elicitation": { "form": {} } },
        }),
    );
    let ex = Exchange {
        request: Arc::new(RequestContext {
            quota_key: Some(identity.caller_key(Some(peer))),
            identity,
            cancel: CancelFlag::new(),
            trace: None,
            approved: Default::default(),
        }),
        cache_private: true,
        ..Exchange::default()
    };
    let id = json!(1);
    let protocol = state.core.protocol();
    match protocol.handle_request(id, method, params, ex).await {
        Reply::Response { body, status } => json_response(
            200,
            &json!({ "status": status, "response": body.to_value() }),
        ),
        _ => refuse(400, "that request does not make sense here"),
    }
}

/// Who the request runs as: the operator (through `agent`, as its endpoint would), or for an
/// admin, user `as` (see [`impersonate`]).
fn identity(
    state: &State,
    op: &Operator,
    agent: Option<&str>,
    as_user: Option<&str>,
) -> Result<Identity, Refusal> {
    let access = state.core.protocol().host().access();
    let agent = agent.filter(|a| !a.is_empty());
    match as_user.filter(|u| !u.is_empty() && Some(*u) != op.user()) {
        None => {
            let token = op.login.token.as_deref();
            access
                .resolve(agent, token, None)
                .map_err(|d| Refusal::new(403, format!("{d}")))
        }
        Some(_) if !op.admin => Err(Refusal::new(403, "only admins may call as another user")),
        Some(user) => impersonate(state, op, user, agent),
    }
}

/// An admin calling as `user`: only a user with a personal secret in the configuration that has
/// not expired, and only through an agent one of those secrets may use (a secret bound to an
/// agent only through that one). Claims-based rules see no claims (a secret has none). Recorded
/// in the audit log as a `console.call_as` action beside the call itself.
fn impersonate(
    state: &State,
    op: &Operator,
    user: &str,
    agent: Option<&str>,
) -> Result<Identity, Refusal> {
    let host = state.core.protocol().host();
    let config = host.config();
    let now = jiff::Timestamp::now().as_second();
    let live: Vec<&crate::config::SecretEntry> = config
        .auth
        .secrets
        .iter()
        .filter(|s| s.user == user)
        .filter(|s| {
            let expiry = s.expires.as_deref().map(crate::access::auth::parse_time);
            expiry.is_none_or(|e| e.is_some_and(|e| i64::try_from(e).is_ok_and(|e| e > now)))
        })
        .collect();
    if live.is_empty() {
        return Err(Refusal::new(
            403,
            format!("{user} has no personal secret in the configuration that is still valid"),
        ));
    }
    let bound: Vec<&str> = live.iter().filter_map(|s| s.agent.as_deref()).collect();
    let unbound = bound.len() < live.len();
    let agent = match agent {
        Some(a) if unbound || bound.contains(&a) => Some(a),
        None if unbound => None,
        None if bound.len() == 1 => Some(bound[0]),
        _ => {
            return Err(Refusal::new(
                403,
                format!(
                    "{user}'s secrets are bound to agent(s) {}",
                    bound.join(", ")
                ),
            ));
        }
    };
    let agent = match agent {
        Some(name) => Some(
            host.access()
                .agent(name)
                .ok_or_else(|| Refusal::new(404, format!("no agent {name}")))?,
        ),
        None => None,
    };
    let target = format!("as {user}");
    super::audit(host, op.user(), "console.call_as", &target, Ok(()));
    let mut caller = UserInfo::new(user);
    caller.agent = agent.as_ref().map(|a| a.name.clone());
    Ok(Identity {
        caller: Some(caller),
        agent,
        claims: None,
        subject_token: None,
    })
}
