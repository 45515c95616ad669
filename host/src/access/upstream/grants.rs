//! The token requests that need no user at the authorization server: `client_credentials` (the
//! host's own service identity, RFC 6749 §4.4) and token exchange (RFC 8693: a caller's verified
//! token exchanged for one with the upstream's audience). One form POST to the token endpoint,
//! the client authenticated by `client_secret_basic` (RFC 6749 §2.3.1: id and secret
//! form-encoded, then Basic) or `client_secret_post`, through the engine's bounded HTTP client
//! (no redirects, 1 MiB, 30 s). The answer's access token is kept as a [`Secret`]; an error
//! names the authorization server's `error` code and its one-line description, never a token.

use base64::Engine as _;
use serde::Deserialize;

use super::http::Client;
use super::registration::AuthMethod;
use super::{AuthFailure, Secret};

/// RFC 8693's grant type.
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693's type of an access token (what is asked for).
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The client that makes the request, and how it authenticates.
pub struct ClientAuth<'a> {
    /// Its id.
    pub client_id: &'a str,
    /// Its secret.
    pub secret: &'a Secret,
    /// `client_secret_basic` or `client_secret_post` (`none` is taken as basic: these grants
    /// are for confidential clients).
    pub method: AuthMethod,
}

/// What the token endpoint granted.
#[derive(Debug)]
pub struct Granted {
    /// The access token.
    pub access_token: Secret,
    /// `Bearer`, ...
    pub token_type: String,
    /// Seconds it is valid for, when said.
    pub expires_in: Option<u64>,
    /// The scopes granted, when said.
    pub scope: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    issued_token_type: Option<String>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// What a token exchange asks for.
pub struct Exchange<'a> {
    /// The caller's token.
    pub subject_token: &'a Secret,
    /// Its RFC 8693 type (URN).
    pub subject_token_type: &'a str,
    /// The upstream's canonical URI (RFC 8707 `resource`).
    pub resource: &'a str,
    /// An `audience`, when configured.
    pub audience: Option<&'a str>,
    /// The scopes asked for (none: as the authorization server decides).
    pub scopes: &'a [String],
}

/// Exchange `exchange.subject_token` at `token_endpoint` as `client` (RFC 8693).
pub async fn exchange(
    http: &Client,
    token_endpoint: &str,
    client: &ClientAuth<'_>,
    exchange: &Exchange<'_>,
) -> Result<Granted, AuthFailure> {
    let scope = exchange.scopes.join(" ");
    let mut form = vec![
        ("grant_type", TOKEN_EXCHANGE),
        ("subject_token", exchange.subject_token.expose()),
        ("subject_token_type", exchange.subject_token_type),
        ("requested_token_type", ACCESS_TOKEN_TYPE),
        ("resource", exchange.resource),
    ];
    if let Some(audience) = exchange.audience {
        form.push(("audience", audience));
    }
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    request(http, token_endpoint, client, &form, "token exchange").await
}

/// A `client_credentials` token for `resource` (RFC 8707), with `scopes`, as `client`.
pub async fn client_credentials(
    http: &Client,
    token_endpoint: &str,
    client: &ClientAuth<'_>,
    resource: &str,
    scopes: &[String],
) -> Result<Granted, AuthFailure> {
    let scope = scopes.join(" ");
    let mut form = vec![("grant_type", "client_credentials"), ("resource", resource)];
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    request(http, token_endpoint, client, &form, "client_credentials").await
}

/// POST `form` to `token_endpoint`, authenticated as `client`: what was granted.
async fn request(
    http: &Client,
    token_endpoint: &str,
    client: &ClientAuth<'_>,
    form: &[(&str, &str)],
    what: &str,
) -> Result<Granted, AuthFailure> {
    let request = build(token_endpoint, client, form)
        .map_err(|e| AuthFailure::Failed(format!("the {what} request: {e}")))?;
    let response = http
        .send(request, false)
        .await
        .map_err(|e| AuthFailure::Failed(format!("the {what} request to {token_endpoint}: {e}")))?;
    let status = response.status();
    let body = response.body();
    if !status.is_success() {
        return Err(refusal(status, body, what));
    }
    let answer: Answer = serde_json::from_slice(body).map_err(|_| {
        AuthFailure::Failed(format!(
            "the {what} answer of {token_endpoint} is not a token response"
        ))
    })?;
    if answer
        .issued_token_type
        .as_deref()
        .is_some_and(|t| t != ACCESS_TOKEN_TYPE)
    {
        return Err(AuthFailure::Refused(format!(
            "the {what} issued a token that is not an access token"
        )));
    }
    if answer.access_token.is_empty() || answer.access_token.len() > 16 * 1024 {
        return Err(AuthFailure::Failed(format!(
            "the {what} answer holds no usable access token"
        )));
    }
    Ok(Granted {
        access_token: Secret::new(answer.access_token),
        token_type: answer.token_type.unwrap_or_else(|| "Bearer".into()),
        expires_in: answer.expires_in,
        scope: answer.scope,
    })
}

/// The form request, the client authenticated as its method says.
fn build(
    token_endpoint: &str,
    client: &ClientAuth<'_>,
    form: &[(&str, &str)],
) -> Result<http::Request<Vec<u8>>, http::Error> {
    let mut body = url::form_urlencoded::Serializer::new(String::new());
    body.extend_pairs(form);
    let mut request = http::Request::post(token_endpoint)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .header(http::header::ACCEPT, "application/json");
    match client.method {
        AuthMethod::ClientSecretPost => {
            body.append_pair("client_id", client.client_id);
            body.append_pair("client_secret", client.secret.expose());
        }
        AuthMethod::ClientSecretBasic | AuthMethod::None => {
            request = request.header(http::header::AUTHORIZATION, basic(client).expose());
        }
    }
    request.body(body.finish().into_bytes())
}

/// `Basic` credentials of `client` (RFC 6749 §2.3.1: each part form-encoded first).
fn basic(client: &ClientAuth<'_>) -> Secret {
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = zeroize::Zeroizing::new(format!(
        "{}:{}",
        encode(client.client_id),
        encode(client.secret.expose())
    ));
    Secret::new(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair.as_bytes())
    ))
}

/// The authorization server's refusal, in words: its `error` code and description (one line,
/// bounded), never the request.
fn refusal(status: http::StatusCode, body: &[u8], what: &str) -> AuthFailure {
    match serde_json::from_slice::<ErrorAnswer>(body) {
        Ok(e) => {
            let code = super::engine::one_line(&e.error);
            let description = e
                .error_description
                .map(|d| format!(" ({})", super::engine::one_line(&d)))
                .unwrap_or_default();
            AuthFailure::Refused(format!(
                "the authorization server refused the {what}: {code}{description}"
            ))
        }
        Err(_) => AuthFailure::Failed(format!(
            "the {what} failed: the token endpoint answered HTTP {status}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(method: AuthMethod, secret: &Secret) -> ClientAuth<'_> {
        ClientAuth {
            client_id: "gate way",
            secret,
            method,
        }
    }

    #[test]
    fn the_client_authenticates_as_its_method_says() {
        let secret = Secret::new("s:3cr%t");
        let form = [("grant_type", "client_credentials")];
        let basic = build(
            "https://as/token",
            &client(AuthMethod::ClientSecretBasic, &secret),
            &form,
        )
        .unwrap();
        let header = basic.headers()[http::header::AUTHORIZATION]
            .to_str()
            .unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(header.strip_prefix("Basic ").unwrap())
            .unwrap();
        assert_eq!(decoded, b"gate+way:s%3A3cr%25t", "RFC 6749 2.3.1");
        assert_eq!(basic.body(), b"grant_type=client_credentials");
        let post = build(
            "https://as/token",
            &client(AuthMethod::ClientSecretPost, &secret),
            &form,
        )
        .unwrap();
        assert!(post.headers().get(http::header::AUTHORIZATION).is_none());
        assert_eq!(
            String::from_utf8_lossy(post.body()),
            "grant_type=client_credentials&client_id=gate+way&client_secret=s%3A3cr%25t"
        );
    }

    #[test]
    fn a_refusal_names_the_code_and_never_echoes_the_request() {
        let body = br#"{"error":"invalid_grant","error_description":"subject_token is not valid"}"#;
        let e = refusal(http::StatusCode::BAD_REQUEST, body, "token exchange");
        assert_eq!(
            e,
            AuthFailure::Refused(
                "the authorization server refused the token exchange: invalid_grant \
                 (subject_token is not valid)"
                    .into()
            )
        );
        let e = refusal(
            http::StatusCode::BAD_GATEWAY,
            b"<html>",
            "client_credentials",
        );
        assert!(!e.is_refusal() && e.to_string().contains("502"), "{e}");
    }
}
