//! The 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663): long-running
//! tool calls the client polls.
//!
//! A `tools/call` of a tool with task support, from a request declaring the extension, is
//! answered with a task (`resultType: "task"`) once the task is stored, and the call runs detached
//! on this replica, which holds a lease on the task while it runs. How the call ends is recorded
//! in the store: its result (`completed`, `isError` results included), its protocol error
//! (`failed`), or the questions it asked (`input_required`). Answers come with `tasks/update`;
//! once every open question is answered the call runs again from the start with all the answers
//! (the same model as input-required rounds: ask before you act), on whichever replica took the
//! last answer. `tasks/get`, `tasks/update` and `tasks/cancel` work on any replica sharing the
//! store; a `working` task whose lease ran out was left by a replica that stopped and is reported
//! failed. Every change is published on the bus for the listen streams that asked for the task
//! (`notifications/tasks`).
//!
//! A `#[tool(task, ask_first)]` tool runs in the request first: what it asks there goes back as
//! input-required rounds of the `tools/call`, and the task begins when it calls
//! `CallContext::start_task`.

use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::TaskSupport;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, oneshot};

use super::era::Era;
use super::input::{self, RoundEnd, Subject};
use super::jsonrpc::{ErrorKind, RpcError};
use super::tools;
use super::{Answer, Protocol, Request};
use crate::access::Identity;
use crate::access::agents::Agent;
use crate::exec::{
    CallError, CallOptions, CancelFlag, InputChannel, RequestContext, Round, ToolResult,
    error_result,
};
use crate::registry::Tool;
use crate::store::{Event, Lease, StoreError, StoredTask, TaskRecord, TaskStatus, new_id, now_ms};

/// The extension's identifier, under `capabilities.extensions`.
pub(crate) const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// How often a change is retried when another replica changed the task first.
const ATTEMPTS: usize = 8;

/// Whether client capabilities declare the tasks extension.
pub(crate) fn declared(caps: &Value) -> bool {
    caps.get("extensions")
        .and_then(|e| e.get(EXTENSION))
        .is_some()
}

/// -32021 naming the extension, as the specification shapes it.
pub(crate) fn missing_extension(what: &str) -> RpcError {
    RpcError::new(
        ErrorKind::MissingCapability,
        format!("Missing required client capability: {what} needs the {EXTENSION} extension"),
    )
    .with_data(json!({ "requiredCapabilities": { "extensions": { EXTENSION: {} } } }))
}

fn require_extension(req: &Request<'_>, what: &str) -> Result<(), RpcError> {
    match req.era {
        Era::Modern { caps, .. } if declared(caps) => Ok(()),
        _ => Err(missing_extension(what)),
    }
}

/// The answer to a request the store could not serve.
pub(crate) fn store_error(e: StoreError) -> RpcError {
    match e {
        StoreError::Unavailable(_) => RpcError::new(ErrorKind::Unavailable, e.to_string()),
        StoreError::Full(why) => RpcError::too_many_requests(why, 60),
    }
}

fn not_found() -> RpcError {
    RpcError::invalid_params("Failed to retrieve task: Task not found")
}

/// RFC 3339 (ISO 8601) UTC time of Unix milliseconds.
fn iso(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The `Task` fields: what `CreateTaskResult` carries.
fn summary(task: &TaskRecord) -> Value {
    let mut v = json!({
        "taskId": task.id,
        "status": task.status.as_str(),
        "createdAt": iso(task.created_ms),
        "lastUpdatedAt": iso(task.updated_ms),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": task.poll_ms,
    });
    if let Some(message) = &task.status_message {
        v["statusMessage"] = json!(message);
    }
    v
}

/// `DetailedTask`: the task, with its questions, result or error by status (what `tasks/get`
/// answers and `notifications/tasks` carries).
pub(crate) fn detailed(task: &TaskRecord) -> Value {
    let mut v = summary(task);
    match task.status {
        TaskStatus::InputRequired => v["inputRequests"] = json!(task.input_requests),
        TaskStatus::Completed => v["result"] = task.result.clone().unwrap_or(Value::Null),
        TaskStatus::Failed => v["error"] = task.error.clone().unwrap_or(Value::Null),
        TaskStatus::Working | TaskStatus::Cancelled => {}
    }
    v
}

impl Protocol {
    /// The store, sealing task records under the `request_state.keys` configured now (a reload
    /// rotates them).
    fn tasks_store(&self) -> &crate::store::Store {
        self.store
            .set_record_keys(&self.host.config().request_state.keys);
        &self.store
    }

    /// This replica's lease on a task, from now.
    fn lease(&self) -> Lease {
        let secs = self.host.config().tasks.lease_secs.max(1);
        Lease {
            runner: self.store.replica().to_owned(),
            until_ms: now_ms() + secs * 1000,
        }
    }

    /// Tell listen streams (here and on other replicas) that `task` changed.
    fn publish(&self, task: &TaskRecord) {
        self.store.bus().publish(Event::Task {
            id: task.id.clone(),
            owner: task.owner.clone(),
            view: detailed(task),
        });
    }

    fn is_running(&self, id: &str) -> bool {
        lock(&self.running).contains_key(id)
    }

    /// Stop every task this replica runs and record them failed (the server is stopping).
    pub async fn stop_tasks(&self) {
        let running: Vec<(String, CancelFlag)> = lock(&self.running).drain().collect();
        for (id, cancel) in running {
            cancel.cancel();
            let error = RpcError::internal("the server stopped before the call ended");
            self.change(&id, |task| {
                (task.status == TaskStatus::Working).then(|| fail(task, &error))
            })
            .await
            .ok();
        }
    }

    /// Apply `edit` to task `id` by compare-and-set, re-reading after a conflict. `edit` returns
    /// the lease to keep, or `None` to leave the task as it is. The task as it ends up.
    async fn change(
        &self,
        id: &str,
        mut edit: impl FnMut(&mut TaskRecord) -> Option<Option<Lease>>,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let settings = self.host.config().tasks.clone();
        for _ in 0..ATTEMPTS {
            let Some(stored) = self.tasks_store().task(id).await? else {
                return Ok(None);
            };
            let mut task = stored.task;
            let Some(lease) = edit(&mut task) else {
                return Ok(Some(task));
            };
            task.updated_ms = now_ms().max(task.updated_ms);
            if self
                .tasks_store()
                .update_task(&task, stored.version, lease.as_ref(), &settings)
                .await?
            {
                self.publish(&task);
                return Ok(Some(task));
            }
        }
        Err(StoreError::Unavailable(format!(
            "task {id} kept changing under {ATTEMPTS} attempts to update it"
        )))
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Mark `task` failed with `error` (no lease).
fn fail(task: &mut TaskRecord, error: &RpcError) -> Option<Lease> {
    task.status = TaskStatus::Failed;
    task.status_message = Some(error.message.clone());
    task.error = Some(error.to_value());
    task.input_requests.clear();
    None
}

// ---------------------------------------------------------------------------------------------
// Creating a task

/// `tools/call` of `tool`: a task when the tool supports one and the request declares the
/// extension (`None`: answer the call as usual). A tool requiring a task refuses a client without
/// the extension (-32021); with the store unreachable an optional one runs without a task and a
/// required one is refused (503).
pub(crate) async fn start(
    protocol: &Protocol,
    req: &Request<'_>,
    tool: &Arc<Tool>,
    args: Option<&Value>,
) -> Result<Option<Answer>, RpcError> {
    let support = tool.descriptor().task_support;
    let Era::Modern { caps, .. } = req.era else {
        return Ok(None);
    };
    if support == TaskSupport::Forbidden {
        return Ok(None);
    }
    if !declared(caps) {
        return match support {
            TaskSupport::Required => Err(missing_extension(&format!("tool {}", tool.name))),
            _ => Ok(None),
        };
    }
    if !protocol.store.is_reachable() {
        let why =
            StoreError::Unavailable(format!("{} cannot be reached", protocol.store.describe()));
        if support == TaskSupport::Optional {
            tracing::warn!(tool = tool.name, "{why}: running the call without a task");
            return Ok(None);
        }
        return Err(store_error(why));
    }
    let subject = Subject {
        method: "tools/call",
        name: &tool.name,
        arguments: args,
    };
    let answers = input::answers(protocol, req, &subject)?;
    let task = new_task(req, tool, args, caps, answers);
    if tool.descriptor().ask_first {
        return ask_first(protocol, req, tool, &subject, task)
            .await
            .map(Some);
    }
    protocol
        .tasks_store()
        .create_task(&task, Some(&protocol.lease()), &req.config.tasks)
        .await
        .map_err(store_error)?;
    let round = Round::new(task.capabilities.clone(), task.answers.clone());
    let run = launch(
        protocol,
        Arc::clone(tool),
        &task,
        req.ex.request.identity.agent.clone(),
        round,
    );
    let answer = Answer::Task(summary(&task));
    tokio::spawn(follow(protocol.clone(), task, run));
    Ok(Some(answer))
}

/// A new `working` task for a call of `tool` by the caller of `req`.
fn new_task(
    req: &Request<'_>,
    tool: &Tool,
    args: Option<&Value>,
    caps: &Value,
    answers: Map<String, Value>,
) -> TaskRecord {
    let now = now_ms();
    let settings = &req.config.tasks;
    TaskRecord {
        id: new_id(),
        owner: input::principal(req),
        quota_key: req.ex.request.quota_key.as_deref().unwrap_or("").to_owned(),
        status: TaskStatus::Working,
        status_message: None,
        created_ms: now,
        updated_ms: now,
        ttl_ms: settings.ttl_secs.max(1) * 1000,
        poll_ms: settings.poll_interval_ms.max(1),
        tool: tool.name.clone(),
        arguments: args.cloned(),
        caller: req.ex.request.identity.caller.clone(),
        agent: req.ex.request.agent().map(|a| a.name.clone()),
        capabilities: caps.clone(),
        answers,
        input_requests: Map::new(),
        result: None,
        error: None,
        run: 0,
    }
}

/// A `#[tool(task, ask_first)]` call: run it in the request until it starts its task (then store
/// the task and answer with it while the call goes on) or returns first (then its questions are
/// an input-required round; a result is the answer, or for a tool requiring a task, a task that
/// is already over).
async fn ask_first(
    protocol: &Protocol,
    req: &Request<'_>,
    tool: &Arc<Tool>,
    subject: &Subject<'_>,
    mut task: TaskRecord,
) -> Result<Answer, RpcError> {
    let (started_tx, mut started) = oneshot::channel();
    let round = Round::new(task.capabilities.clone(), task.answers.clone()).on_start(move || {
        let _ = started_tx.send(());
    });
    let mut run = launch(
        protocol,
        Arc::clone(tool),
        &task,
        req.ex.request.identity.agent.clone(),
        round,
    );
    tokio::select! {
        biased;
        Ok(()) = &mut started => {
            task.updated_ms = now_ms();
            if let Err(e) = protocol
                .tasks_store()
                .create_task(&task, Some(&protocol.lease()), &req.config.tasks)
                .await
            {
                run.cancel.cancel();
                return Err(store_error(e));
            }
            let answer = Answer::Task(summary(&task));
            tokio::spawn(follow(protocol.clone(), task, run));
            Ok(answer)
        }
        result = &mut run.done => {
            let result = result.unwrap_or_else(|_| Ok(lost()));
            let failed = result.as_ref().map_or(true, |r| r["isError"] == true);
            if let InputChannel::Round(round) = &*run.round {
                match input::round_end(round, failed, subject) {
                    RoundEnd::Open { open, used } => {
                        return Ok(input::input_required(protocol, req, subject, open, used));
                    }
                    RoundEnd::Error(e) if tool.descriptor().task_support == TaskSupport::Optional => {
                        return Err(e);
                    }
                    RoundEnd::Error(_) | RoundEnd::Answer => {}
                }
            }
            if tool.descriptor().task_support == TaskSupport::Optional {
                return result.map(Answer::plain).map_err(tools::refused);
            }
            ending(&run.round, result, &task.tool).apply(&mut task, &req.config.tasks);
            protocol
                .tasks_store()
                .create_task(&task, None, &req.config.tasks)
                .await
                .map_err(store_error)?;
            Ok(Answer::Task(summary(&task)))
        }
        () = req.ex.request.cancel.cancelled() => {
            run.cancel.cancel();
            Err(RpcError::invalid_request("the request was cancelled"))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running a task's call

/// A call running detached for a task.
struct Run {
    /// How its questions are answered (the task's answers).
    round: Arc<InputChannel>,
    /// Its cancellation (`tasks/cancel`, a stopping server).
    cancel: CancelFlag,
    /// What it returns.
    done: oneshot::Receiver<Result<Value, CallError>>,
}

/// The result of a call whose task lost track of it (the call's task ended without answering).
fn lost() -> Value {
    error_result("the tool call was lost (its worker ended without answering)")
}

/// Start the call of `task` on `tool`, with the task's caller, `agent`'s view and `round`'s
/// answers; no progress or log notifications (the extension sends none for tasks). It counts
/// against the caller's share like any call.
fn launch(
    protocol: &Protocol,
    tool: Arc<Tool>,
    task: &TaskRecord,
    agent: Option<Arc<Agent>>,
    round: Round,
) -> Run {
    let round = Arc::new(InputChannel::Round(round));
    let cancel = CancelFlag::new();
    // The task outlives the request that started it: its own request context, cancelled by
    // `tasks/cancel` or a stopping server.
    let request = Arc::new(RequestContext {
        // No JWT claims: the policy decided the call when the task was created.
        identity: Identity {
            caller: task.caller.clone(),
            agent,
            claims: None,
            subject_token: None,
        },
        quota_key: Some(Arc::from(task.quota_key.as_str())),
        cancel: cancel.clone(),
        trace: None,
        approved: Default::default(),
    });
    let opts = CallOptions {
        request,
        events: None,
        wants: crate::exec::EventWants::NONE,
        input: Some(Arc::clone(&round)),
    };
    let (tx, done) = oneshot::channel();
    let host = protocol.host.clone();
    let args = task.arguments.clone();
    tokio::spawn(async move {
        let called = host.call_tool(tool, args.as_ref(), opts).await;
        // A task keeps its result as a tree (it is stored, measured and served again).
        let _ = tx.send(called.map(ToolResult::into_value));
    });
    Run {
        round,
        cancel,
        done,
    }
}

/// How a task's call ended.
#[derive(Clone)]
enum Ending {
    /// A result (an `isError` one included).
    Completed(Value),
    /// A protocol error.
    Failed(RpcError),
    /// Questions for the client, by key.
    Asked(Map<String, Value>),
}

/// How the call of tool `name` ended, from what it returned and what it asked.
fn ending(round: &InputChannel, result: Result<Value, CallError>, name: &str) -> Ending {
    let failed = result.as_ref().map_or(true, |r| r["isError"] == true);
    if let InputChannel::Round(round) = round {
        let subject = Subject {
            method: "tools/call",
            name,
            arguments: None,
        };
        match input::round_end(round, failed, &subject) {
            RoundEnd::Open { open, .. } => return Ending::Asked(open),
            RoundEnd::Error(e) => return Ending::Failed(e),
            RoundEnd::Answer => {}
        }
    }
    match result {
        Ok(result) => Ending::Completed(result),
        Err(e) => Ending::Failed(tools::refused(e)),
    }
}

impl Ending {
    /// Record this ending in `task` (a result over `tasks.max_result_bytes` fails the task with
    /// an error naming its size; the result is not kept).
    fn apply(self, task: &mut TaskRecord, settings: &crate::config::TaskSettings) {
        task.updated_ms = now_ms().max(task.updated_ms);
        task.input_requests.clear();
        task.status_message = None;
        match self {
            Ending::Completed(result) => {
                let size = serde_json::to_string(&result).map_or(0, |s| s.len());
                if size > settings.max_result_bytes {
                    fail(
                        task,
                        &RpcError::internal(format!(
                            "the tool's result is {size} bytes, over the limit of {} bytes a \
                             task keeps (tasks.max_result_bytes): it was not stored",
                            settings.max_result_bytes
                        )),
                    );
                    return;
                }
                task.status = TaskStatus::Completed;
                task.result = Some(result);
            }
            Ending::Failed(e) => {
                fail(task, &e);
            }
            Ending::Asked(open) => {
                task.status = TaskStatus::InputRequired;
                task.status_message =
                    Some("waiting for the client's answers (tasks/update)".into());
                task.input_requests = open;
            }
        }
    }
}

/// Follow the call of `task` until it ends, renewing this replica's lease and stopping the call
/// when the task is cancelled (a `CancelTask` event, or a status seen at renewal), then record
/// how it ended — unless the task moved on meanwhile (cancelled, or a later run).
async fn follow(protocol: Protocol, task: TaskRecord, mut run: Run) {
    let id = task.id.clone();
    lock(&protocol.running).insert(id.clone(), run.cancel.clone());
    let secs = protocol.host.config().tasks.lease_secs.max(1);
    let mut renew = tokio::time::interval(
        Duration::from_millis(secs * 1000 / 3).max(Duration::from_millis(100)),
    );
    renew.tick().await;
    let mut events = protocol.store.bus().subscribe();
    let result = loop {
        tokio::select! {
            result = &mut run.done => break result.unwrap_or_else(|_| Ok(lost())),
            _ = renew.tick() => match protocol.store.renew_lease(&id, &protocol.lease()).await {
                Ok(Some(TaskStatus::Working)) | Err(_) => {}
                Ok(_) => run.cancel.cancel(),
            },
            event = events.recv() => match event {
                Ok(Event::CancelTask { id: cancelled }) if cancelled == id => run.cancel.cancel(),
                Err(broadcast::error::RecvError::Closed) => {}
                _ => {}
            },
        }
    };
    lock(&protocol.running).remove(&id);
    let settings = protocol.host.config().tasks.clone();
    let mut ending = ending(&run.round, result, &task.tool);
    for attempt in 0..ATTEMPTS {
        let outcome = protocol
            .change(&id, |current| {
                if current.run != task.run || current.status != TaskStatus::Working {
                    return None;
                }
                ending.clone().apply(current, &settings);
                Some(None)
            })
            .await;
        match outcome {
            Ok(_) => return,
            // Over the bytes the store keeps for this caller or in all: the task fails instead
            // (a failure is always recorded).
            Err(StoreError::Full(why)) => {
                tracing::warn!(task = id, "the task's outcome is not stored: {why}");
                ending = Ending::Failed(RpcError::internal(format!(
                    "the task's outcome was not stored: {why}"
                )));
            }
            Err(e) => {
                tracing::warn!(
                    task = id,
                    "cannot record how the task ended (attempt {}): {e}",
                    attempt + 1
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Run the call of `task` again with all its answers (after `tasks/update` answered the last
/// question), in the tool set and agent view of now.
fn resume(protocol: &Protocol, task: TaskRecord) {
    let agent = task
        .agent
        .as_deref()
        .and_then(|name| protocol.host.access().agent(name));
    let tool = protocol
        .host
        .registry()
        .get(&task.tool)
        .filter(|_| agent.as_ref().is_none_or(|a| a.permits(&task.tool)))
        .cloned();
    let round = Round::new(task.capabilities.clone(), task.answers.clone());
    match tool {
        Some(tool) => {
            let run = launch(protocol, tool, &task, agent, round);
            tokio::spawn(follow(protocol.clone(), task, run));
        }
        None => {
            let (tx, done) = oneshot::channel();
            let _ = tx.send(Err(CallError::UnknownTool(task.tool.clone())));
            let run = Run {
                round: Arc::new(InputChannel::Round(round)),
                cancel: CancelFlag::new(),
                done,
            };
            tokio::spawn(follow(protocol.clone(), task, run));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// tasks/get, tasks/update, tasks/cancel

/// The `taskId` of a `tasks/*` request.
fn task_id<'a>(req: &'a Request<'_>) -> Result<&'a str, RpcError> {
    req.params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("a tasks request needs a string \"taskId\""))
}

/// The task `id`, if it exists and belongs to the caller of `req` (else "not found": another
/// caller's task does not exist for this one).
async fn lookup(protocol: &Protocol, req: &Request<'_>, id: &str) -> Result<StoredTask, RpcError> {
    match protocol.tasks_store().task(id).await.map_err(store_error)? {
        Some(stored) if stored.task.owner == input::principal(req) => Ok(stored),
        _ => Err(not_found()),
    }
}

/// `tasks/get`: the task in detail. A `working` task nobody holds a lease on is reported failed
/// (its replica stopped).
pub(crate) async fn get(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    require_extension(req, "tasks/get")?;
    let id = task_id(req)?;
    let stored = lookup(protocol, req, id).await?;
    let task = if stored.abandoned(now_ms()) && !protocol.is_running(id) {
        let error =
            RpcError::internal("the server running this task stopped before the call ended");
        protocol
            .change(id, |task| {
                let abandoned = task.status == TaskStatus::Working;
                abandoned.then(|| fail(task, &error))
            })
            .await
            .map_err(store_error)?
            .ok_or_else(not_found)?
    } else {
        stored.task
    };
    Ok(Answer::plain(detailed(&task)))
}

/// `tasks/update`: answers to the task's open questions (others are ignored). Once none is open,
/// the call runs again (here) with every answer. An empty acknowledgement.
pub(crate) async fn update(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    require_extension(req, "tasks/update")?;
    let id = task_id(req)?;
    let responses = match req.params.get("inputResponses") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(r)) => r.clone(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "inputResponses must be an object of results by request key",
            ));
        }
    };
    lookup(protocol, req, id).await?;
    let owner = input::principal(req);
    let mut invalid = None;
    let lease = protocol.lease();
    let changed = protocol
        .change(id, |task| {
            // The record is read again: it must still be the caller's.
            if task.status != TaskStatus::InputRequired || task.owner != owner {
                return None;
            }
            let mut took = false;
            for (key, answer) in &responses {
                let Some(question) = task.input_requests.get(key) else {
                    continue;
                };
                let method = question["method"].as_str().unwrap_or("");
                if let Err(why) = crate::exec::input::check_answer(method, answer) {
                    invalid = Some(format!("inputResponses.{key}: {why}"));
                    return None;
                }
                task.input_requests.remove(key);
                task.answers.insert(key.clone(), answer.clone());
                took = true;
            }
            if !took {
                return None;
            }
            if !task.input_requests.is_empty() {
                return Some(None);
            }
            task.status = TaskStatus::Working;
            task.status_message = None;
            task.run += 1;
            Some(Some(lease.clone()))
        })
        .await
        .map_err(store_error)?;
    if let Some(why) = invalid {
        return Err(RpcError::invalid_params(why));
    }
    if let Some(task) = changed.filter(|t| t.status == TaskStatus::Working && t.owner == owner) {
        resume(protocol, task);
    }
    Ok(Answer::plain(json!({})))
}

/// `tasks/cancel`: a task still running or waiting is cancelled (its call is told to stop,
/// wherever it runs); a finished one stays as it is. An empty acknowledgement either way.
pub(crate) async fn cancel(protocol: &Protocol, req: &Request<'_>) -> Result<Answer, RpcError> {
    require_extension(req, "tasks/cancel")?;
    let id = task_id(req)?;
    lookup(protocol, req, id).await?;
    let owner = input::principal(req);
    protocol
        .cancel_task(id, Some(&owner), "cancelled by the client")
        .await
        .map_err(store_error)?;
    Ok(Answer::plain(json!({})))
}

impl Protocol {
    /// Up to `limit` tasks of every caller, newest first (the operator console's list).
    pub async fn all_tasks(&self, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        self.tasks_store().tasks(limit).await
    }

    /// Cancel task `id` if it is still running or waiting — only if `owner` owns it, when given
    /// (an operator's cancel gives none) — and tell its call to stop wherever it runs. Whether
    /// this cancelled it.
    pub async fn cancel_task(
        &self,
        id: &str,
        owner: Option<&str>,
        why: &str,
    ) -> Result<bool, StoreError> {
        let owned = |task: &TaskRecord| owner.is_none_or(|o| task.owner == o);
        let cancelled = self
            .change(id, |task| {
                if task.status.is_terminal() || !owned(task) {
                    return None;
                }
                task.status = TaskStatus::Cancelled;
                task.status_message = Some(why.to_owned());
                task.input_requests.clear();
                Some(None)
            })
            .await?;
        let done = cancelled.is_some_and(|t| t.status == TaskStatus::Cancelled && owned(&t));
        if done {
            self.store
                .bus()
                .publish(Event::CancelTask { id: id.to_owned() });
        }
        Ok(done)
    }
}

/// The task ids a listen request may follow: those that exist and belong to its caller.
pub(crate) async fn followable(
    protocol: &Protocol,
    req: &Request<'_>,
    ids: &[Value],
) -> Result<Vec<Value>, RpcError> {
    require_extension(req, "subscriptions/listen with taskIds")?;
    let mut known = Vec::new();
    for id in ids.iter().filter_map(Value::as_str).take(MAX_FOLLOWED) {
        if lookup(protocol, req, id).await.is_ok() {
            known.push(json!(id));
        } else if !protocol.store.is_reachable() {
            return Err(store_error(StoreError::Unavailable(format!(
                "{} cannot be reached",
                protocol.store.describe()
            ))));
        }
    }
    Ok(known)
}

/// Most task ids one listen stream follows.
pub(crate) const MAX_FOLLOWED: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detailed_task_carries_what_its_status_brings() {
        let mut task = crate::store::sample_task("t1", "x");
        task.status = TaskStatus::Completed;
        task.result = Some(json!({"content": []}));
        let v = detailed(&task);
        assert_eq!(v["status"], "completed");
        assert_eq!(v["result"], json!({"content": []}));
        assert!(v.get("error").is_none() && v.get("inputRequests").is_none());
        let created = v["createdAt"].as_str().unwrap();
        assert!(created.ends_with('Z') && created.contains('T'), "{created}");
        let s = summary(&task);
        assert!(s.get("result").is_none());
        assert_eq!(s["ttlMs"], task.ttl_ms);
    }

    #[test]
    fn the_extension_is_declared_per_request_under_extensions() {
        assert!(declared(&json!({"extensions": {EXTENSION: {}}})));
        assert!(!declared(&json!({"tasks": {}})));
        let e = missing_extension("tasks/get");
        assert_eq!(e.code(), -32021);
        assert!(e.data.unwrap()["requiredCapabilities"]["extensions"][EXTENSION].is_object());
    }
}
