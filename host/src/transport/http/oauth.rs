//! The host's OAuth endpoints as each user's client of upstreams with `server.auth`
//! (`access::upstream::gateway` does the work; this is the HTTP around it):
//!
//! - `GET /oauth/connect/<flow id>`: the consent link a user's client was asked to open. With
//!   `upstream_auth.consent.require_login` the page asks for the user's mcp-host credential (a
//!   personal secret or bearer token): the flow was begun for one user, and only that user may
//!   follow it (a link passed to someone else connects nobody's account to the wrong user). The
//!   form is guarded by a double-submit token (a cookie and a field): another site cannot post
//!   its own credential from the user's browser. `POST` checks, then gives this browser the
//!   flow's secret in a cookie and redirects to the authorization server.
//! - `GET /oauth/connect?upstream=NAME[&as=operator]`: the same, begun by the user (the console's
//!   Connect): a flow for the credential's user, or — an admin (`console.admins`) with
//!   `as=operator` — for the operator's own connection, which lists the upstream for everyone.
//! - `GET /oauth/callback`: where the authorization server sends the browser back; refused
//!   (audited, with a reason) unless it answers a pending flow, once, from the browser that passed
//!   the connect page, with the expected `iss`.
//! - `POST /oauth/disconnect`: revoke (RFC 7009 where offered) and delete the credential's user's
//!   connection to an upstream.
//! - `GET /oauth/client-metadata.json`: the host's client metadata document (over https).
//!
//! Pages never show a token, a code or a state; what a user typed is never echoed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming as IncomingBody;
use hyper::header::HeaderValue;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use serde_json::json;

use super::body::{Body, empty, json_response};
use crate::access::upstream::Principal;
use crate::access::upstream::flow::Callback;
use crate::access::upstream::gateway::consent::{
    BROWSER_COOKIE, CALLBACK_PATH, CONNECT_PATH, METADATA_PATH, cookies, html_safe,
};
use crate::access::upstream::gateway::{Credentials, FlowView, Need};
use crate::host::Host;

/// The cookie of the connect form's double-submit token.
pub(super) const CSRF_COOKIE: &str = "mcp_oauth_csrf";
/// The largest form accepted.
const MAX_FORM: usize = 16 * 1024;
/// The longest query accepted on the callback.
const MAX_QUERY: usize = 16 * 1024;

/// Whether `path` is one of these endpoints.
pub(super) fn owns(path: &str) -> bool {
    path == CALLBACK_PATH
        || path == METADATA_PATH
        || path == "/oauth/connect"
        || path == "/oauth/disconnect"
        || path.starts_with(CONNECT_PATH)
}

/// Answer a request to one of these endpoints.
pub(super) async fn route(host: &Host, req: Request<IncomingBody>) -> Response<Body> {
    let Some(credentials) = host.credentials() else {
        return page(503, "Unavailable", "The token vault is not open.", None);
    };
    let path = req.uri().path().to_owned();
    match (req.method().clone(), path.as_str()) {
        (Method::GET, METADATA_PATH) => match credentials.client_metadata() {
            Some(doc) => json_response(200, &doc),
            None => json_response(404, &json!({ "error": "not found" })),
        },
        (Method::GET, CALLBACK_PATH) => callback(&credentials, &req).await,
        (Method::GET, "/oauth/connect") => entry_page(&credentials, &req),
        (Method::POST, "/oauth/connect") => start(host, &credentials, req).await,
        (Method::POST, "/oauth/disconnect") => disconnect(host, &credentials, req).await,
        (Method::GET, p) if p.starts_with(CONNECT_PATH) => {
            flow_page(&credentials, &p[CONNECT_PATH.len()..]).await
        }
        (Method::POST, p) if p.starts_with(CONNECT_PATH) => {
            let id = p[CONNECT_PATH.len()..].to_owned();
            follow(host, &credentials, &id, req).await
        }
        _ => empty(StatusCode::METHOD_NOT_ALLOWED),
    }
}

/// An HTML page (the console's strict policy: no script, forms to `form_action` only).
pub(super) fn page(
    status: u16,
    title: &str,
    body_html: &str,
    form_action: Option<&str>,
) -> Response<Body> {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title></head>\
         <body><h1>{t}</h1>{body_html}</body></html>",
        t = html_safe(title)
    );
    let mut resp = Response::new(Body::Full(Some(Bytes::from(html))));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let csp = format!(
        "default-src 'none'; form-action 'self'{}; frame-ancestors 'none'; base-uri 'none'",
        form_action.map(|o| format!(" {o}")).unwrap_or_default()
    );
    let headers = resp.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    if let Ok(v) = HeaderValue::from_str(&csp) {
        headers.insert("content-security-policy", v);
    }
    resp
}

/// The cookies of `headers`, by name.
fn jar(headers: &HeaderMap) -> std::collections::HashMap<String, String> {
    let joined: Vec<&str> = headers
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    cookies(&joined.join("; "))
}

/// The path prefix of `public_url` (behind a proxy), and whether it is https.
fn cookie_scope(credentials: &Credentials) -> (String, bool) {
    let public = credentials
        .settings()
        .public_url
        .clone()
        .unwrap_or_default();
    let url = url::Url::parse(&public).ok();
    let prefix = url
        .as_ref()
        .map(|u| u.path().trim_end_matches('/').to_owned())
        .unwrap_or_default();
    (prefix, url.is_some_and(|u| u.scheme() == "https"))
}

/// A `Set-Cookie` value: `name=value` at `<prefix><path>`, `HttpOnly`, `same_site`, for `max_age`
/// seconds (`Secure` over https).
pub(super) fn cookie(
    credentials: &Credentials,
    name: &str,
    value: &str,
    path: &str,
    same_site: &str,
    max_age: u64,
) -> String {
    let (prefix, secure) = cookie_scope(credentials);
    format!(
        "{name}={value}; Path={prefix}{path}; Max-Age={max_age}; HttpOnly; SameSite={same_site}{}",
        if secure { "; Secure" } else { "" }
    )
}

pub(super) fn add_cookie(resp: &mut Response<Body>, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().append(hyper::header::SET_COOKIE, v);
    }
}

/// 256 random bits as hex.
pub(super) fn random_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A form, its double-submit token set in a cookie.
fn form_page(
    credentials: &Credentials,
    title: &str,
    intro: &str,
    action: &str,
    hidden: &[(&str, &str)],
    ask_credential: bool,
    form_action: Option<&str>,
) -> Response<Body> {
    let Some(csrf) = random_token() else {
        return page(503, "Unavailable", "No randomness.", None);
    };
    let mut fields = format!("<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">");
    for (name, value) in hidden {
        fields.push_str(&format!(
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            html_safe(name),
            html_safe(value)
        ));
    }
    if ask_credential {
        fields.push_str(
            "<p><label>Your mcp-host credential (personal secret or token): \
             <input type=\"password\" name=\"credential\" autocomplete=\"off\"></label></p>",
        );
    }
    let body = format!(
        "<p>{intro}</p><form method=\"post\" action=\"{}\">{fields}\
         <button type=\"submit\">Continue</button></form>",
        html_safe(action)
    );
    let mut resp = page(200, title, &body, form_action);
    let set = cookie(credentials, CSRF_COOKIE, &csrf, "/oauth", "Strict", 900);
    add_cookie(&mut resp, &set);
    resp
}

/// Why a form was refused: the status and what the page says.
pub(super) struct Refused(u16, &'static str);

impl Refused {
    pub(super) fn page(&self) -> Response<Body> {
        page(self.0, "Refused", self.1, None)
    }
}

/// A POSTed form (bounded), its double-submit token checked against the cookie when `csrf` (a
/// form whose credential alone authorizes it — a disconnect — needs none: another site posting
/// its own credential only disconnects itself).
pub(super) async fn read_form(
    req: Request<IncomingBody>,
    csrf: bool,
) -> Result<std::collections::HashMap<String, String>, Refused> {
    let (parts, body) = req.into_parts();
    let limited = http_body_util::Limited::new(body, MAX_FORM);
    let bytes = match tokio::time::timeout(Duration::from_secs(10), limited.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => return Err(Refused(413, "The form is too large or did not arrive.")),
    };
    let form: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(&bytes).into_owned().collect();
    let sent = form.get("csrf").map(String::as_str).unwrap_or_default();
    let kept = jar(&parts.headers).remove(CSRF_COOKIE).unwrap_or_default();
    let same = !csrf
        || !sent.is_empty()
            && sent.len() == kept.len()
            && subtle::ConstantTimeEq::ct_eq(sent.as_bytes(), kept.as_bytes()).into();
    if !same {
        return Err(Refused(
            403,
            "This form was not sent from this server's page: open the link again.",
        ));
    }
    Ok(form)
}

/// A POSTed form ([`read_form`]) and the verified user of its credential ([`user_of`]).
async fn signed_form(
    host: &Host,
    req: Request<IncomingBody>,
    csrf: bool,
) -> Result<(std::collections::HashMap<String, String>, String), Refused> {
    let form = read_form(req, csrf).await?;
    let user = user_of(host, &form)?;
    Ok((form, user))
}

/// The verified user of the credential in `form`, else the refusal page.
pub(super) fn user_of(
    host: &Host,
    form: &std::collections::HashMap<String, String>,
) -> Result<String, Refused> {
    let credential = form.get("credential").map(|c| c.trim()).unwrap_or_default();
    let refused = || Refused(403, "That credential is not valid here.");
    if credential.is_empty() {
        return Err(refused());
    }
    match host.access().resolve(None, Some(credential), None) {
        Ok(identity) => identity
            .caller
            .map(|c| c.user_id)
            .filter(|id| !id.is_empty() && !id.starts_with('@'))
            .ok_or_else(refused),
        Err(_) => Err(refused()),
    }
}

/// `GET /oauth/connect/<id>`: the consent link's page.
async fn flow_page(credentials: &Credentials, id: &str) -> Response<Body> {
    if let Ok(Some(flow)) = credentials.key_flow(id).await {
        return super::oauth_key::key_page(credentials, id, &flow);
    }
    let flow = match credentials.flow(id).await {
        Ok(Some(flow)) => flow,
        Ok(None) => {
            return page(
                410,
                "Link expired",
                "This authorization link is unknown, expired or used: call the tool again for a \
                 new one.",
                None,
            );
        }
        Err(e) => return page(503, "Unavailable", &html_safe(&e.to_string()), None),
    };
    let require = credentials.settings().require_login;
    let intro = format!(
        "Connect your account at <b>{}</b> for mcp-host user <b>{}</b>.{}",
        html_safe(&flow.upstream),
        html_safe(&flow.principal),
        if require {
            " Sign in as that user to continue."
        } else {
            ""
        }
    );
    let action = format!("{}{CONNECT_PATH}{id}", prefix(credentials));
    form_page(
        credentials,
        "Connect an account",
        &intro,
        &action,
        &[],
        require,
        Some(&flow.authorization_origin),
    )
}

pub(super) fn prefix(credentials: &Credentials) -> String {
    cookie_scope(credentials).0
}

/// `POST /oauth/connect/<id>`: check who follows the link, give this browser the flow's secret,
/// and send it to the authorization server.
async fn follow(
    host: &Host,
    credentials: &Credentials,
    id: &str,
    req: Request<IncomingBody>,
) -> Response<Body> {
    let form = match read_form(req, true).await {
        Ok(form) => form,
        Err(refused) => return refused.page(),
    };
    if let Ok(Some(flow)) = credentials.key_flow(id).await {
        return super::oauth_key::key_entered(host, credentials, id, &flow, &form).await;
    }
    let flow = match credentials.flow(id).await {
        Ok(Some(flow)) => flow,
        _ => {
            return page(
                410,
                "Link expired",
                "This authorization link expired.",
                None,
            );
        }
    };
    if credentials.settings().require_login {
        let user = match user_of(host, &form) {
            Ok(user) => user,
            Err(refused) => return refused.page(),
        };
        if user != flow.principal {
            credentials.audit(
                "upstream_auth.callback_refused",
                Some(&flow.principal),
                &flow.upstream,
                "refused",
                Some("other_user"),
            );
            tracing::warn!(
                "OAuth connect link of {} at {} followed by {user}: refused",
                flow.principal,
                flow.upstream
            );
            return page(
                403,
                "Refused",
                "This link was made for another user: ask your own client for a link.",
                None,
            );
        }
    }
    to_authorization_server(credentials, id, &flow)
}

/// The redirect to the authorization server of `flow`, this browser given its secret.
fn to_authorization_server(credentials: &Credentials, id: &str, flow: &FlowView) -> Response<Body> {
    let mut resp = empty(StatusCode::SEE_OTHER);
    if let Ok(v) = HeaderValue::from_str(flow.authorization_url.expose()) {
        resp.headers_mut().insert(hyper::header::LOCATION, v);
    }
    resp.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    resp.headers_mut()
        .insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    let name = format!("{BROWSER_COOKIE}{id}");
    let set = cookie(
        credentials,
        &name,
        flow.browser.expose(),
        CALLBACK_PATH,
        "Lax",
        flow.ttl_secs.max(60),
    );
    add_cookie(&mut resp, &set);
    resp
}

/// The value of query parameter `name` of `req`.
fn query_param(req: &Request<IncomingBody>, name: &str) -> Option<String> {
    let query = req.uri().query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.chars().take(256).collect())
}

/// `GET /oauth/connect?upstream=NAME[&as=operator]`: the form that begins a connection.
fn entry_page(credentials: &Credentials, req: &Request<IncomingBody>) -> Response<Body> {
    let Some(upstream) = query_param(req, "upstream").filter(|u| credentials.spec(u).is_some())
    else {
        return page(
            404,
            "Unknown upstream",
            "No upstream of that name obtains its users' authorization.",
            None,
        );
    };
    let operator = query_param(req, "as").as_deref() == Some("operator");
    let intro = match operator {
        true => format!(
            "Connect the operator's account at <b>{}</b> (an admin's credential): it lists the \
             upstream's tools for everyone.",
            html_safe(&upstream)
        ),
        false => format!("Connect your account at <b>{}</b>.", html_safe(&upstream)),
    };
    let base = prefix(credentials);
    let intro = match operator {
        true => intro,
        false => format!(
            "{intro}</p><form method=\"post\" action=\"{base}/oauth/disconnect\">\
             <input type=\"hidden\" name=\"upstream\" value=\"{u}\">\
             <p>Or disconnect it: <input type=\"password\" name=\"credential\" \
             autocomplete=\"off\" aria-label=\"your mcp-host credential\"> \
             <button type=\"submit\">Disconnect</button></p></form><p>",
            u = html_safe(&upstream)
        ),
    };
    let action = format!("{base}/oauth/connect");
    let role = if operator { "operator" } else { "user" };
    let hidden = [("upstream", upstream.as_str()), ("as", role)];
    // The authorization server is found when the form is sent: any https origin may follow.
    form_page(
        credentials,
        "Connect an account",
        &intro,
        &action,
        &hidden,
        true,
        Some("https: http://127.0.0.1:* http://localhost:*"),
    )
}

/// `POST /oauth/connect`: begin a flow for the credential's user (or the operator) and follow it.
async fn start(
    host: &Host,
    credentials: &Credentials,
    req: Request<IncomingBody>,
) -> Response<Body> {
    let (form, user) = match signed_form(host, req, true).await {
        Ok(signed) => signed,
        Err(refused) => return refused.page(),
    };
    let upstream = form.get("upstream").cloned().unwrap_or_default();
    if credentials.spec(&upstream).is_none() {
        return page(404, "Unknown upstream", "No such upstream.", None);
    }
    let who = match form.get("as").map(String::as_str) {
        Some("operator") if host.config().console.admins.contains(&user) => Principal::operator(),
        Some("operator") => {
            return page(
                403,
                "Refused",
                "Only an admin connects the operator's account.",
                None,
            );
        }
        _ => Principal(user),
    };
    let need = Need::Consent {
        scopes: Vec::new(),
        challenge: None,
        step_up: false,
    };
    let consent = match credentials
        .begin_consent(&who, &upstream, &need, "connect")
        .await
    {
        Ok(consent) => consent,
        Err(e) => return page(502, "Not connected", &html_safe(&e.to_string()), None),
    };
    if let Ok(Some(flow)) = credentials.key_flow(&consent.flow_id).await {
        return super::oauth_key::key_page(credentials, &consent.flow_id, &flow);
    }
    match credentials.flow(&consent.flow_id).await {
        Ok(Some(flow)) => to_authorization_server(credentials, &consent.flow_id, &flow),
        _ => page(
            503,
            "Unavailable",
            "The authorization could not be kept.",
            None,
        ),
    }
}

/// `GET /oauth/callback`: complete the flow the authorization server answers.
async fn callback(credentials: &Credentials, req: &Request<IncomingBody>) -> Response<Body> {
    let query = req.uri().query().unwrap_or_default();
    if query.len() > MAX_QUERY {
        return page(
            400,
            "Not connected",
            "The authorization response is too large.",
            None,
        );
    }
    let jar = jar(req.headers());
    let found = |name: &str| jar.get(name).cloned();
    // The flow's browser cookie expires with the flow (a refused callback must not clear it:
    // the real one may follow).
    match credentials
        .complete(Callback::from_query(query), None, &found)
        .await
    {
        Ok(done) => page(
            200,
            "Connected",
            &format!(
                "Your account at <b>{}</b> is connected for <b>{}</b>: return to your client.",
                html_safe(&done.upstream),
                html_safe(&done.principal)
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

/// `POST /oauth/disconnect`: revoke and delete the credential's user's connection to `upstream`.
async fn disconnect(
    host: &Host,
    credentials: &Arc<Credentials>,
    req: Request<IncomingBody>,
) -> Response<Body> {
    let (form, user) = match signed_form(host, req, false).await {
        Ok(signed) => signed,
        Err(refused) => return refused.page(),
    };
    let upstream = form.get("upstream").cloned().unwrap_or_default();
    match credentials.disconnect(&Principal(user), &upstream).await {
        Ok(n) => page(
            200,
            "Disconnected",
            &format!(
                "{n} connection{} to <b>{}</b> removed.",
                if n == 1 { "" } else { "s" },
                html_safe(&upstream)
            ),
            None,
        ),
        Err(e) => page(503, "Unavailable", &html_safe(&e.to_string()), None),
    }
}
