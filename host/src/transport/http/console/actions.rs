//! The console's actions (`POST <console.path>/api/...`, admins only): accept a definition that
//! drifted from its pin (written to the lock file, then the host reloads), give a quarantined
//! plugin another chance, cancel a task, approve or refuse a call waiting for an admin (a policy
//! rule's `approver: console`). Each lands in the audit log, done or refused.

use std::sync::Arc;

use hyper::Response;
use serde_json::{Value, json};

use super::super::State;
use super::super::body::{Body, json_response};
use super::{Operator, audit, refuse};
use crate::config::lock::{Pin, PinLock};
use crate::host::Host;
use crate::registry::pins;

/// Run the action at `path` with `body`.
pub(super) async fn act(
    state: &Arc<State>,
    op: &Operator,
    path: &str,
    body: &Value,
) -> Response<Body> {
    let host = state.core.protocol().host().clone();
    let name = match path {
        "/api/pins/accept" => "console.accept_pin",
        "/api/quarantine/retry" => "console.retry_quarantined",
        "/api/tasks/cancel" => "console.cancel_task",
        "/api/approvals/answer" if body["approve"] == json!(true) => "console.approve_call",
        "/api/approvals/answer" => "console.refuse_call",
        _ => return refuse(404, "no such action"),
    };
    let target = match path {
        "/api/pins/accept" => body["name"].as_str(),
        "/api/quarantine/retry" => Some("every quarantined plugin"),
        _ => body["id"].as_str(),
    }
    .unwrap_or("")
    .to_owned();
    if !op.admin {
        audit(&host, op.user(), name, &target, Err("not an admin"));
        return refuse(403, "only the users in console.admins may do this");
    }
    let done = match path {
        "/api/pins/accept" => accept_pin(&host, body).await,
        "/api/quarantine/retry" => retry(&host).await,
        "/api/approvals/answer" => answer(&host, op, &target, body),
        _ => cancel(state, op, &target).await,
    };
    audit(
        &host,
        op.user(),
        name,
        &target,
        done.as_ref().map(|_| ()).map_err(String::as_str),
    );
    match done {
        Ok(answer) => json_response(200, &answer),
        Err(why) => refuse(409, &why),
    }
}

/// Record the definition now served for `{section, name}` in the lock file, then reload.
async fn accept_pin(host: &Host, body: &Value) -> Result<Value, String> {
    let (Some(section), Some(name), Some(seen)) = (
        body["section"].as_str(),
        body["name"].as_str(),
        body["sha256"].as_str(),
    ) else {
        return Err(
            "send {\"section\": \"tool\"|\"resource\"|\"prompt\", \"name\": ..., \"sha256\": \
             the digest of the definition you reviewed}"
                .into(),
        );
    };
    let registry = host.registry();
    let drift = registry
        .drifts
        .iter()
        .find(|d| d.difference.section.singular() == section && d.difference.name == name)
        .ok_or_else(|| format!("no {section} {name} differs from its pin now"))?;
    let (section, pin) = match &drift.difference.new {
        Some(pin) => (drift.difference.section, pin.clone()),
        None => return Err(format!("{name} is no longer served: nothing to accept")),
    };
    // Only the definition the admin reviewed: it may have changed again since the page showed it.
    if pin.sha256 != seen {
        return Err(format!(
            "{name} changed again since you reviewed it (now {}): reload the page and review it",
            pin.sha256
        ));
    }
    let host = host.clone();
    let name = name.to_owned();
    tokio::task::spawn_blocking(move || {
        write_pin(&host, section, &name, pin)?;
        let report = host.reload();
        Ok(json!({ "accepted": name, "reloaded": report.reloaded.len() }))
    })
    .await
    .map_err(|e| format!("the reload did not finish: {e}"))?
}

/// Put `pin` for `name` in the lock file, under the managed directory's lock (as `mcp-host pin`
/// writes), keeping everything else in it.
fn write_pin(host: &Host, section: pins::Section, name: &str, pin: Pin) -> Result<(), String> {
    let config = host.config();
    let path = config.lock_path();
    let managed = config.installed_dir();
    let _held = managed
        .is_dir()
        .then(|| crate::install::lock_dir(&managed))
        .transpose()
        .map_err(|e| e.to_string())?;
    let mut lock = PinLock::read(&path);
    if let Some(problem) = &lock.problem {
        return Err(format!("the lock file cannot be updated: {problem}"));
    }
    pins::insert(&mut lock, section, name, pin);
    lock.write(&path)
        .map_err(|e| format!("cannot write the lock file {}: {e}", path.display()))
}

/// Give quarantined plugins another chance, and rescan.
async fn retry(host: &Host) -> Result<Value, String> {
    let host = host.clone();
    tokio::task::spawn_blocking(move || {
        host.retry_quarantined();
        let report = host.rescan(None);
        json!({ "reloaded": report.reloaded.len(), "failed": report.failed.len() })
    })
    .await
    .map_err(|e| format!("the rescan did not finish: {e}"))
}

/// Cancel task `id`, whoever owns it.
async fn cancel(state: &State, op: &Operator, id: &str) -> Result<Value, String> {
    let why = format!(
        "cancelled by {} in the console",
        op.user().unwrap_or("an operator")
    );
    match state.core.protocol().cancel_task(id, None, &why).await {
        Ok(true) => Ok(json!({ "cancelled": id })),
        Ok(false) => Err(format!("task {id} is not running or waiting")),
        Err(e) => Err(format!("the store cannot cancel it: {e}")),
    }
}

/// Answer the call waiting for approval as `id`: `{"id": ..., "approve": true|false}`.
fn answer(host: &Host, op: &Operator, id: &str, body: &Value) -> Result<Value, String> {
    let Some(approve) = body["approve"].as_bool() else {
        return Err("send {\"id\": ..., \"approve\": true|false}".into());
    };
    let by = op.user().unwrap_or("the anonymous admin");
    host.approvals().answer(id, approve, by)?;
    Ok(json!({ "id": id, "approved": approve }))
}
