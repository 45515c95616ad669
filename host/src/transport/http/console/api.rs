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
    peer: &Arc<str>,
) -> Response<Body> {
    match what {
        "session" => json_response(200, &session(state, op)),
        "overview" => json_response(200, &overview(state, console)),
        "sources" => json_response(200, &sources(state)),
        "agents" => json_response(200, &agents(state)),
        "trust" => json_response(200, &trust(state)),
        "tasks" => tasks(state).await,
        "calls" => calls(state, peer),
        _ => refuse(404, "no such view"),
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
/// the status of each: active, overridden by which file, disabled, quarantined, held by a pin.
fn sources(state: &State) -> Value {
    let host = state.core.protocol().host();
    let config = host.config();
    let registry = host.registry();
    let dirs: Vec<Value> = config
        .tool_dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let mut settings = serde_json::to_value(dir).unwrap_or_default();
            redact_secrets(&mut settings);
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
                "settings": settings,
                "entries": entries,
            })
        })
        .collect();
    json!({ "dirs": dirs })
}

/// An upstream's headers, environment and URL may hold credentials: only the names of headers and
/// variables are shown, and the URL without its password or secret-looking parameters.
fn redact_secrets(settings: &mut Value) {
    if let Some(url) = settings.pointer_mut("/server/url")
        && let Some(text) = url.as_str()
    {
        *url = Value::String(crate::store::redact_url(text));
    }
    if let Some(headers) = settings
        .pointer_mut("/server/headers")
        .and_then(Value::as_object_mut)
    {
        for v in headers.values_mut() {
            *v = Value::String("(set)".into());
        }
    }
    if let Some(env) = settings
        .pointer_mut("/server/env")
        .and_then(Value::as_object_mut)
    {
        for v in env.values_mut() {
            *v = Value::String("(set)".into());
        }
    }
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

/// Every caller's tasks: status, owner, tool, age (never their arguments or results).
async fn tasks(state: &State) -> Response<Body> {
    match state.core.protocol().all_tasks(200).await {
        Ok(tasks) => {
            let rows: Vec<Value> = tasks
                .iter()
                .map(|t| {
                    json!({
                        "id": t.id,
                        "status": t.status.as_str(),
                        "statusMessage": t.status_message,
                        "owner": t.owner,
                        "tool": t.tool,
                        "agent": t.agent,
                        "createdMs": t.created_ms,
                        "updatedMs": t.updated_ms,
                        "terminal": t.status.is_terminal(),
                    })
                })
                .collect();
            json_response(
                200,
                &json!({ "tasks": rows, "now": crate::store::now_ms() }),
            )
        }
        Err(e) => refuse(503, &format!("the store cannot list tasks: {e}")),
    }
}

/// The live stream: each call's audit record (and each console action) as it happens, as SSE.
fn calls(state: &Arc<State>, peer: &Arc<str>) -> Response<Body> {
    let slot = match state.stream_slot(peer) {
        Ok(slot) => slot,
        Err(max) => {
            return refuse(
                429,
                &format!("already {max} streams open (http.max_streams_per_caller)"),
            );
        }
    };
    let mut watch = state.core.protocol().host().telemetry().feed().watch();
    let (out, body) = sse_channel();
    let out = out.holding(Some(slot));
    out.comment(": watching");
    let shutdown = state.shutdown.clone();
    let keepalive = state.options.keepalive;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(keepalive);
        tick.tick().await;
        loop {
            tokio::select! {
                record = watch.next() => match record {
                    Some(line) => {
                        let value: Value = serde_json::from_str(&line).unwrap_or_default();
                        if !out.send(&value) { return }
                    }
                    None => return,
                },
                _ = tick.tick() => if !out.keepalive() { return },
                () = shutdown.cancelled() => return,
            }
        }
    });
    sse_response(body, None)
}
