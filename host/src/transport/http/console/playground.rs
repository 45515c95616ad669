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
/// admin, user `as` (through `agent`).
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
        Some(user) if !configured_user(state, user) => Err(Refusal::new(
            403,
            format!("{user} is not a user the configuration names (auth.secrets)"),
        )),
        Some(user) => {
            let agent = match agent {
                Some(name) => Some(
                    access
                        .agent(name)
                        .ok_or_else(|| Refusal::new(404, format!("no agent {name}")))?,
                ),
                None => None,
            };
            tracing::info!(
                "console: {} calls as user {user}",
                op.user().unwrap_or("the anonymous operator")
            );
            let mut caller = UserInfo::new(user);
            caller.agent = agent.as_ref().map(|a| a.name.clone());
            Ok(Identity {
                caller: Some(caller),
                agent,
                claims: None,
            })
        }
    }
}

/// Whether `user` is one of the configuration's personal secrets' users.
fn configured_user(state: &State, user: &str) -> bool {
    let config = state.core.protocol().host().config();
    config.auth.secrets.iter().any(|s| s.user == user)
}
