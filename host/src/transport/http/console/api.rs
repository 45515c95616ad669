//! The console's read endpoints (`GET <console.path>/api/...`): JSON views of what the host
//! knows, and the live call stream. Never an argument's or a result's value, never a credential.

use std::collections::BTreeSet;
use std::sync::Arc;

use hyper::Response;
use serde_json::{Value, json};

use super::super::State;
use super::super::body::{Body, json_response, sse_channel, sse_response};
use super::{Console, Operator, refuse};
use crate::protocol::session::Outbound as _;
use crate::registry::{Registry, Status};

/// Answer `GET api/<what>`.
pub(super) async fn get(
    state: &Arc<State>,
    console: &Console,
    op: &Operator,
    what: &str,
    headers: &hyper::HeaderMap,
    peer: &Arc<str>,
) -> Response<Body> {
    match what {
        "session" => json_response(200, &session(state, op)),
        "overview" => json_response(200, &overview(state, console)),
        "sources" => json_response(200, &sources(state)),
        "agents" => json_response(200, &agents(state)),
        "trust" => json_response(200, &trust(state)),
        "tasks" => tasks(state, op).await,
        "approvals" => json_response(200, &approvals(state, op)),
        "calls" => calls(state, op, headers, peer),
        "connections" => connections(state, op).await,
        _ => refuse(404, "no such view"),
    }
}

/// The upstream connections (`server.auth`): the login's own, or — an admin — everyone's; who,
/// where, which authorization server, scopes, expiry and last use — never a token. And the
/// upstreams one may connect to, with their connect links.
async fn connections(state: &State, op: &Operator) -> Response<Body> {
    let host = state.core.protocol().host();
    let Some(credentials) = host.credentials() else {
        return json_response(
            200,
            &json!({ "connections": [], "upstreams": [], "all": op.admin }),
        );
    };
    let user = op.user().map(str::to_owned);
    if !op.admin && user.is_none() {
        return json_response(
            200,
            &json!({ "connections": [], "upstreams": [], "all": false }),
        );
    }
    let filter = crate::access::upstream::vault::RowFilter {
        principal: if op.admin { None } else { user.as_deref() },
        upstream: None,
    };
    let rows = match credentials.vault().connections(filter).await {
        Ok(rows) => rows,
        Err(e) => return refuse(503, &e.to_string()),
    };
    let public = credentials
        .settings()
        .public_url
        .clone()
        .unwrap_or_default();
    let config = host.config();
    let upstreams: Vec<Value> = config
        .tool_dirs
        .iter()
        .filter(|d| d.server.as_ref().is_some_and(|s| s.auth.is_some()))
        .filter_map(|d| d.name.as_deref())
        .map(|name| json!({ "name": name, "connect": format!("{public}/oauth/connect?upstream={name}") }))
        .collect();
    let connections: Vec<Value> = rows
        .iter()
        .map(|c| {
            json!({
                "principal": c.principal,
                "upstream": c.upstream,
                "issuer": c.issuer,
                "scopes": c.scopes,
                "expiresMs": c.expires_ms,
                "lastUsedMs": c.last_used_ms,
                "updatedMs": c.updated_ms,
            })
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    json_response(
        200,
        &json!({ "connections": connections, "upstreams": upstreams, "all": op.admin, "now": now }),
    )
}

/// `POST api/connections/disconnect {upstream, principal?}`: revoke and delete a connection — the
/// login's own, or (an admin) anyone's.
pub(super) async fn disconnect(state: &State, op: &Operator, body: &Value) -> Response<Body> {
    let host = state.core.protocol().host();
    let Some(credentials) = host.credentials() else {
        return refuse(503, "the token vault is not open");
    };
    let upstream = body["upstream"].as_str().unwrap_or_default();
    let own = op.user().map(str::to_owned);
    let whose = match (body["principal"].as_str(), own) {
        (Some(p), Some(me)) if p == me => me,
        (Some(p), _) if op.admin => p.to_owned(),
        (Some(_), _) => return refuse(403, "only admins disconnect other users"),
        (None, Some(me)) => me,
        (None, None) => return refuse(403, "log in as a user to disconnect"),
    };
    if upstream.is_empty() {
        return refuse(400, "name the upstream");
    }
    let who = crate::access::upstream::Principal(whose);
    match credentials.disconnect(&who, upstream).await {
        Ok(n) => json_response(200, &json!({ "disconnected": n })),
        Err(e) => refuse(503, &e.to_string()),
    }
}

/// Who is logged in, what they may do, and what the playground may act as.
fn session(state: &State, op: &Operator) -> Value {
    let host = state.core.protocol().host();
    let config = host.config();
    let bound = op.identity.agent.as_ref().map(|a| a.name.clone());
    let agents: Vec<&String> = match &bound {
        Some(name) => config.agents.keys().filter(|a| *a == name).collect(),
        None => config.agents.keys().collect(),
    };
    // Admins may call as any user the configuration names (its personal secrets' users).
    let users: BTreeSet<&str> = if op.admin {
        config
            .auth
            .secrets
            .iter()
            .map(|s| s.user.as_str())
            .collect()
    } else {
        BTreeSet::new()
    };
    json!({
        "user": op.user(),
        "admin": op.admin,
        "csrf": op.login.csrf,
        "boundAgent": bound,
        "agents": agents,
        "users": users,
        "authenticates": host.access().authenticates(),
    })
}

/// Health, store, replica, uptime, what is served, and the charts' samples.
fn overview(state: &State, console: &Console) -> Value {
    let protocol = state.core.protocol();
    let host = protocol.host();
    let store = protocol.store();
    let registry = host.registry();
    let count =
        |f: &dyn Fn(&Status) -> bool| registry.entries.iter().filter(|e| f(&e.status)).count();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "replica": store.replica(),
        "store": store.describe(),
        "storeReachable": store.is_reachable(),
        "uptimeSecs": console.started.elapsed().as_secs(),
        "tools": registry.tools().count(),
        "resources": registry.resources().count() + registry.templates().count(),
        "prompts": registry.prompts().count(),
        "plugins": registry.plugins.len(),
        "quarantined": quarantined(&registry).len(),
        "upstreams": host.upstreams_json(),
        "held": count(&|s| matches!(s, Status::Held(_))),
        "loadErrors": count(&|s| matches!(s, Status::LoadError(_))),
        "totals": totals(host.telemetry().feed()),
        "stepSecs": super::history::STEP.as_secs(),
        "history": console.history.points(),
    })
}

fn totals(feed: &crate::telemetry::feed::Feed) -> Value {
    let t = feed.totals();
    json!({ "calls": t.calls, "failed": t.failed })
}

/// Every tool directory (and upstream server) in precedence order, each with what it serves and
/// the status of each: active, overridden by which file, disabled, quarantined, held by a pin;
/// an upstream server with how its connection stands, and why.
fn sources(state: &State) -> Value {
    let host = state.core.protocol().host();
    let config = host.config();
    let registry = host.registry();
    let dirs: Vec<Value> = config
        .tool_dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let connection = dir
                .is_upstream()
                .then(|| {
                    registry
                        .plugins
                        .iter()
                        .find(|slot| slot.candidate.path == dir.path)
                        .and_then(|slot| slot.backend.connection())
                })
                .flatten()
                .map(|c| json!({ "state": c.state(), "detail": c.describe() }));
            let entries: Vec<Value> = registry
                .entries
                .iter()
                .filter(|e| e.dir == dir.path || (dir.is_upstream() && e.file == dir.path))
                .map(|e| serde_json::to_value(e).unwrap_or_default())
                .collect();
            json!({
                "index": i,
                "path": dir.path,
                "upstream": dir.is_upstream(),
                "pinning": config.pinning(i, &dir.path),
                "isolation": dir.isolation,
                "prefix": dir.prefix,
                "server": dir.server.as_ref().map(upstream_view),
                "connection": connection,
                "entries": entries,
            })
        })
        .collect();
    json!({ "dirs": dirs })
}

/// What the console shows of an upstream server's settings: they may hold credentials (in the
/// command's arguments after `${VAR}` expansion, the headers, the environment, the URL), so only
/// the program, how many arguments it takes, the names of the headers and variables, and the URL
/// without its password or secret-looking parameters.
fn upstream_view(server: &crate::config::UpstreamServer) -> Value {
    json!({
        "program": server.command.first(),
        "arguments": server.command.len().saturating_sub(1),
        "url": server.url.as_deref().map(crate::store::redact_url),
        "headers": server.headers.keys().collect::<Vec<_>>(),
        "env": server.env.keys().collect::<Vec<_>>(),
    })
}

/// The agents and their settings (what each sees is asked through the playground's `tools/list`,
/// so it is exactly what its clients get).
fn agents(state: &State) -> Value {
    let config = state.core.protocol().host().config();
    let agents: Vec<Value> = config
        .agents
        .iter()
        .map(|(name, settings)| json!({ "name": name, "settings": settings }))
        .collect();
    json!({ "agents": agents })
}

/// Definitions that drifted from their pins (field by field), and quarantined plugins.
fn trust(state: &State) -> Value {
    let host = state.core.protocol().host();
    let config = host.config();
    let registry = host.registry();
    json!({
        "lockFile": config.lock_path(),
        "pinned": config.pins.len(),
        "drifts": drifts(&registry),
        "quarantined": quarantined(&registry),
    })
}

fn drifts(registry: &Registry) -> Vec<Value> {
    registry
        .drifts
        .iter()
        .map(|d| {
            let diff = &d.difference;
            let fields: Vec<Value> = diff
                .fields()
                .into_iter()
                .map(|(path, old, new)| json!({ "path": path, "old": old, "new": new }))
                .collect();
            json!({
                "section": diff.section.singular(),
                "name": diff.name,
                "held": d.held,
                "file": d.file,
                "change": match (&diff.old, &diff.new) {
                    (None, _) => "new",
                    (_, None) => "gone",
                    _ => "changed",
                },
                "plugin": diff.new.as_ref().or(diff.old.as_ref()).map(|p| p.plugin.clone()),
                // What an accept must name: the definition the admin saw.
                "sha256": diff.new.as_ref().map(|p| p.sha256.clone()),
                "fields": fields,
                "definition": diff.new.as_ref().map(|p| p.definition.clone()),
            })
        })
        .collect()
}

fn quarantined(registry: &Registry) -> Vec<Value> {
    let mut files = BTreeSet::new();
    registry
        .entries
        .iter()
        .filter_map(|e| match &e.status {
            Status::Quarantined(why) if files.insert(e.file.clone()) => Some(json!({
                "file": e.file,
                "plugin": e.plugin,
                "reason": why,
            })),
            _ => None,
        })
        .collect()
}

/// Whose calls and tasks `op` may see: everyone's for an admin, and where nobody authenticates
/// (every caller is the same anonymous one); else only the operator's own.
fn sees_all(state: &State, op: &Operator) -> bool {
    op.admin || !state.core.protocol().host().access().authenticates()
}

/// The calls waiting for an admin's approval on this replica that `op` may see (every caller's,
/// or their own): the tool, resource or prompt, the rule, the argument fields it shows.
fn approvals(state: &State, op: &Operator) -> Value {
    let host = state.core.protocol().host();
    let all = sees_all(state, op);
    json!({
        "approvals": host.approvals().pending(all, op.user()),
        "now": crate::store::now_ms(),
        "canAnswer": op.admin,
    })
}

/// The tasks `op` may see (every caller's, or their own): status, owner, tool, age; never their
/// arguments or results.
async fn tasks(state: &State, op: &Operator) -> Response<Body> {
    let all = sees_all(state, op);
    // A task's owner is `user\0agent` (protocol::input::principal).
    let own = op.user().map(|u| format!("{u}\u{0}"));
    let visible = |owner: &str| all || own.as_deref().is_some_and(|o| owner.starts_with(o));
    match state.core.protocol().all_tasks(200).await {
        Ok(tasks) => {
            let rows: Vec<Value> = tasks
                .iter()
                .filter(|t| visible(&t.owner))
                .map(|t| {
                    let (user, agent) = t.owner.split_once('\u{0}').unwrap_or((&t.owner, ""));
                    json!({
                        "id": t.id,
                        "status": t.status.as_str(),
                        "statusMessage": t.status_message,
                        "owner": if user.is_empty() { "anonymous" } else { user },
                        "tool": t.tool,
                        "agent": (!agent.is_empty()).then_some(agent),
                        "createdMs": t.created_ms,
                        "updatedMs": t.updated_ms,
                        "terminal": t.status.is_terminal(),
                    })
                })
                .collect();
            json_response(
                200,
                &json!({ "tasks": rows, "now": crate::store::now_ms(), "all": all }),
            )
        }
        Err(e) => refuse(503, &format!("the store cannot list tasks: {e}")),
    }
}

/// The live stream: each call's audit record (and each console action) as it happens, as SSE —
/// every caller's, or the operator's own ([`sees_all`]). It ends when the login does.
fn calls(
    state: &Arc<State>,
    op: &Operator,
    headers: &hyper::HeaderMap,
    peer: &Arc<str>,
) -> Response<Body> {
    let slot = match state.stream_slot(peer) {
        Ok(slot) => slot,
        Err(max) => {
            let why = format!("already {max} streams open (http.max_streams_per_caller)");
            return refuse(429, &why);
        }
    };
    let only = (!sees_all(state, op)).then(|| op.user().unwrap_or("").to_owned());
    let mut watch = state.core.protocol().host().telemetry().feed().watch();
    let (out, body) = sse_channel();
    let out = out.holding(Some(slot));
    out.comment(": watching");
    let (state, headers) = (Arc::clone(state), headers.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(state.options.keepalive);
        tick.tick().await;
        loop {
            tokio::select! {
                record = watch.next() => match record {
                    Some(line) => {
                        // Read back only to filter a non-admin's stream; sent as it was written.
                        let shown = only.as_deref().is_none_or(|u| {
                            serde_json::from_str::<Value>(&line).is_ok_and(|v| v["caller"] == u)
                        });
                        if shown && !out.send_json_text(&line) { return }
                    }
                    None => return,
                },
                _ = tick.tick() => {
                    let logged_in = state.console.as_ref().is_some_and(|c| c.logins.get(&headers).is_some());
                    if !logged_in || !out.keepalive() { return }
                }
                () = state.shutdown.cancelled() => return,
            }
        }
    });
    sse_response(body, None)
}
