//! Running a plugin's resource read, prompt or completion for a request: the call options (caller,
//! events, input channel), the plugin call, and the mapping of its outcome to a result or a
//! JSON-RPC error.

use std::sync::Arc;
use std::time::Duration;

use mcp_plugin_sdk::wire::{CallEnvelope, CallerNeed, EnvelopeErrorKind, EnvelopeOutcome};
use serde_json::Value;

use super::jsonrpc::{ErrorKind, RpcError};
use super::tools::call_options;
use super::{Protocol, Request};
use crate::exec::{InputChannel, InvokeError};
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
        Err(InvokeError::CallerRequired(what)) => Err(RpcError::new(
            ErrorKind::Unauthorized,
            format!("Authentication required: {what} needs a verified caller"),
        )),
        Err(InvokeError::Throttled(q)) => Err(super::tools::throttled(&q)),
        Err(e) => Err(RpcError::internal(e.to_string())),
    }
}
