//! Running a plugin's resource read, prompt or completion for a request: the call options (caller,
//! events, input channel), the plugin call, and the mapping of its outcome to a result or a
//! JSON-RPC error.

use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::{CallEnvelope, CallerNeed, EnvelopeErrorKind, EnvelopeOutcome};
use serde_json::{Value, json};

use super::jsonrpc::{ErrorKind, RpcError};
use super::tools::call_options;
use super::{Protocol, Request};
use crate::exec::{InputChannel, InvokeError};
use crate::policy::Subject;
use crate::registry::PluginSlot;

/// What to run, and how.
pub(crate) struct Invocation<'a> {
    /// The plugin.
    pub slot: &'a Arc<PluginSlot>,
    /// The request to it.
    pub envelope: CallEnvelope,
    /// Whether it takes the caller.
    pub caller: CallerNeed,
    /// Its time.
    pub timeout: Duration,
    /// How log lines and errors name it (`resource test://x`, `prompt p`).
    pub what: String,
    /// What the call policy sees it as (a read or a prompt; none for a completion).
    pub policed: Option<Subject<'a>>,
}

/// What rules see as `args` of a read or a prompt: a template's variables, a prompt's arguments.
fn policy_args(envelope: &CallEnvelope) -> Value {
    match envelope {
        CallEnvelope::ReadResource { variables, .. } => Value::Object(variables.clone()),
        CallEnvelope::GetPrompt { arguments, .. } => Value::Object(arguments.clone()),
        _ => Value::Object(serde_json::Map::new()),
    }
}

/// Run `call` for `req`: the plugin's result, or the error to answer; `NotFound` outcomes are
/// `Ok(None)` (each method says what "not found" means).
pub(crate) async fn run(
    protocol: &Protocol,
    req: &Request<'_>,
    call: Invocation<'_>,
    input: Option<Arc<InputChannel>>,
) -> Result<Option<Value>, RpcError> {
    let opts = call_options(req, input);
    // The call policy decides first; a `limit` holds its budget's slot until the plugin answered.
    let _budget = match call.policed {
        Some(subject) => protocol
            .host
            .police_request(
                subject,
                call.slot.backend.name(),
                || policy_args(&call.envelope),
                &opts,
            )
            .await
            .map_err(|e| refused(&call.what, e))?,
        None => None,
    };
    let outcome = protocol
        .host
        .invoke(
            call.slot,
            &call.envelope,
            call.caller,
            call.timeout,
            &call.what,
            opts,
        )
        .await;
    match outcome {
        Ok(EnvelopeOutcome::Ok(value)) => Ok(Some(value)),
        Ok(EnvelopeOutcome::Error(e)) => match e.kind {
            EnvelopeErrorKind::NotFound => Ok(None),
            EnvelopeErrorKind::Invalid => Err(RpcError::invalid_params(e.message)),
            EnvelopeErrorKind::Failed => Err(RpcError::internal(format!(
                "{} failed: {}",
                call.what, e.message
            ))),
        },
        Err(e) => Err(refused(&call.what, e)),
    }
}

/// The error for a read, a prompt or a completion that did not run.
fn refused(what: &str, e: InvokeError) -> RpcError {
    match e {
        InvokeError::CallerRequired(what) => RpcError::new(
            ErrorKind::Unauthorized,
            format!("Authentication required: {what} needs a verified caller"),
        ),
        InvokeError::Throttled(q) => super::tools::throttled(&q),
        InvokeError::Limited(b) => super::tools::limited(&b),
        InvokeError::Denied { rule, message } | InvokeError::NotApproved { rule, message } => {
            RpcError::invalid_params(format!("{what}: {message}"))
                .with_data(json!({ "rule": rule }))
        }
        // Answered input-required by the round (its question is open): this error is not seen.
        InvokeError::AwaitingApproval => {
            RpcError::invalid_params(format!("{what}: waiting for approval"))
        }
        e => RpcError::internal(e.to_string()),
    }
}
