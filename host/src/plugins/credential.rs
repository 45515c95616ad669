//! A plugin's `credential/get` (`CallContext::credential` in the SDK): the access token the host
//! holds for the calling user at a credential provider — an upstream with `server.auth`, its
//! token obtained, kept in the vault and refreshed by the gateway's [`Credentials`] exactly as
//! for that user's calls to the upstream (consent, token exchange or service identity).
//!
//! Refused unless the plugin's manifest declares the provider (`export_plugin!(permissions: {
//! credentials: [...] })`, shown by `mcp-host check` and `mcp-host add`), and for a call without a
//! verified user (a credential is always a user's; the host's reserved `@…` identities are never
//! given to plugins). The plugin gets the access token, its type, expiry and scopes — never the
//! refresh token, never another user's. A user without a token there is told to connect (the
//! answer names the upstream; their next call through it asks for consent). Each answer is
//! audited (`plugin_credential`, with the plugin, the user and the provider — never the token).

use std::sync::Arc;

use serde_json::json;

use crate::access::upstream::Principal;
use crate::access::upstream::gateway::Credentials;
use crate::plugins::call::CallState;
use crate::plugins::host_request::HostRequestError;
use mcp_plugin_sdk::wire::credential as wire;

/// How long a plugin waits for the credential (an exchange or a refresh at the authorization
/// server).
const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The JSON answer to plugin `plugin`'s `credential/get` for `provider` in `call`: the token, or
/// why not (see the module's documentation). `declared`: the providers its manifest declares.
pub(crate) fn answer(
    credentials: Option<&Arc<Credentials>>,
    plugin: &str,
    declared: &[String],
    call: &CallState,
    provider: &str,
) -> Result<String, HostRequestError> {
    let refuse = |text: String| Err(HostRequestError::Credential(text));
    if !declared.iter().any(|d| d == provider) {
        tracing::warn!(
            "Plugin {plugin} asked for credential {provider:?}, which it does not declare"
        );
        return refuse(format!("{}{provider}", wire::NOT_DECLARED));
    }
    let Some(who) = call
        .request
        .caller()
        .map(|c| c.user_id.clone())
        .filter(|id| !id.is_empty() && !id.starts_with('@'))
    else {
        return refuse(format!(
            "{}: plugin {plugin} asked for {provider}",
            wire::NO_USER
        ));
    };
    let Some(credentials) = credentials.filter(|c| c.spec(provider).is_some()) else {
        return refuse(format!(
            "{}{provider} is not a credential provider of this host (an upstream with \
             server.auth)",
            wire::UNAVAILABLE
        ));
    };
    let who = Principal(who);
    let identity = &call.request.identity;
    let exp = identity
        .claims
        .as_ref()
        .and_then(|c| c.get("exp"))
        .and_then(serde_json::Value::as_u64);
    credentials.present_subject(&who, provider, identity.subject_token.as_ref(), exp);
    let (service, name) = (Arc::clone(credentials), provider.to_owned());
    let asked = who.clone();
    let found = crate::plugins::upstream::block_on_upstreams(async move {
        tokio::time::timeout(WAIT, service.credential_of(&asked, &name)).await
    });
    let outcome = match &found {
        Some(Ok(Ok(Some(_)))) => "ok",
        _ => "refused",
    };
    credentials.audit(
        "plugin_credential",
        Some(&who.0),
        provider,
        outcome,
        Some(plugin),
    );
    match found {
        Some(Ok(Ok(Some(c)))) => Ok(json!({
            "access_token": c.access_token.expose(),
            "token_type": c.token_type,
            "expires_at": c.expires_at_ms.map(|ms| ms / 1000),
            "scopes": c.scopes,
        })
        .to_string()),
        Some(Ok(Ok(None))) => refuse(format!(
            "{}{who} has not connected {provider} yet: call one of its tools through mcp-host to \
             be asked for consent, then try again",
            wire::UNAVAILABLE
        )),
        Some(Ok(Err(e))) => refuse(format!("{}{e}", wire::UNAVAILABLE)),
        Some(Err(_)) => refuse(format!(
            "{}{provider} did not answer within {} s",
            wire::UNAVAILABLE,
            WAIT.as_secs()
        )),
        None => refuse(format!("{}the host is stopping", wire::UNAVAILABLE)),
    }
}
