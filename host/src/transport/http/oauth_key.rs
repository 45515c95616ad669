//! The key form of `server.auth.mode: api_key` upstreams, at the consent link
//! `/oauth/connect/<flow id>` (`oauth` routes a key flow's link here): the page asks for the
//! user's API key (and, with `upstream_auth.consent.require_login`, the user's mcp-host
//! credential: only the flow's user may enter a key for it), guarded by the same double-submit
//! token as the OAuth connect form. The key is handed to `gateway::api_key` and never echoed,
//! logged or shown.

use std::collections::HashMap;

use hyper::Response;

use super::body::Body;
use super::oauth::{CSRF_COOKIE, add_cookie, cookie, page, prefix, random_token, user_of};
use crate::access::upstream::Secret;
use crate::access::upstream::gateway::Credentials;
use crate::access::upstream::gateway::api_key::KeyFlow;
use crate::access::upstream::gateway::consent::{CONNECT_PATH, html_safe};
use crate::host::Host;

/// `GET /oauth/connect/<id>` of a key flow: the form.
pub(super) fn key_page(credentials: &Credentials, id: &str, flow: &KeyFlow) -> Response<Body> {
    let Some(csrf) = random_token() else {
        return page(503, "Unavailable", "No randomness.", None);
    };
    let require = credentials.settings().require_login;
    let login = match require {
        true => {
            "<p><label>Your mcp-host credential (personal secret or token): \
             <input type=\"password\" name=\"credential\" autocomplete=\"off\"></label></p>"
        }
        false => "",
    };
    let body = format!(
        "<p>Enter your API key for <b>{u}</b> (mcp-host user <b>{p}</b>): it is kept sealed \
         and sent only on your calls to {u}.</p>\
         <form method=\"post\" action=\"{action}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">{login}\
         <p><label>API key: <input type=\"password\" name=\"api_key\" autocomplete=\"off\">\
         </label></p><button type=\"submit\">Save</button></form>",
        u = html_safe(&flow.upstream),
        p = html_safe(&flow.principal),
        action = html_safe(&format!("{}{CONNECT_PATH}{id}", prefix(credentials))),
    );
    let mut resp = page(200, "Enter your API key", &body, None);
    let set = cookie(credentials, CSRF_COOKIE, &csrf, "/oauth", "Strict", 900);
    add_cookie(&mut resp, &set);
    resp
}

/// `POST /oauth/connect/<id>` of a key flow (its double-submit token already checked): who
/// sends it, then the key kept.
pub(super) async fn key_entered(
    host: &Host,
    credentials: &Credentials,
    id: &str,
    flow: &KeyFlow,
    form: &HashMap<String, String>,
) -> Response<Body> {
    let login = match credentials.settings().require_login {
        true => match user_of(host, form) {
            Ok(user) => Some(user),
            Err(refused) => return refused.page(),
        },
        false => None,
    };
    let key = Secret::new(form.get("api_key").cloned().unwrap_or_default());
    match credentials.enter_key(id, login.as_deref(), &key).await {
        Ok(done) => page(
            200,
            "Connected",
            &format!(
                "<p>Your key for <b>{}</b> is kept for <b>{}</b>: return to your client.</p>",
                html_safe(&done.upstream),
                html_safe(&flow.principal)
            ),
            None,
        ),
        Err(refusal) => page(
            400,
            "Not connected",
            &format!("<p>{}</p>", html_safe(&refusal.message)),
            None,
        ),
    }
}
