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

/// RFC 7523's client assertion type.
pub const JWT_BEARER_ASSERTION: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// The client that makes the request, and how it authenticates.
pub struct ClientAuth<'a> {
    /// Its id.
    pub client_id: &'a str,
    /// Its secret, or its signed assertion.
    pub secret: &'a Secret,
    /// `client_secret_basic` or `client_secret_post` (`none` is taken as basic: these grants
    /// are for confidential clients); ignored with `assertion`.
    pub method: AuthMethod,
    /// `secret` is a signed client assertion (`private_key_jwt`, RFC 7523), not a secret.
    pub assertion: bool,
}

/// A client's private key for `private_key_jwt` (RFC 7523 client authentication): PEM, and the
/// algorithm it signs with (`ES256`, `ES384`, `RS256`, ...). `Debug` never shows it.
#[derive(Clone)]
pub struct PrivateKey {
    key: std::sync::Arc<jsonwebtoken::EncodingKey>,
    alg: jsonwebtoken::Algorithm,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateKey")
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

impl PrivateKey {
    /// The key in `pem` (PKCS#8, or SEC1/PKCS#1) for algorithm `alg` (default `ES256`). The
    /// error never quotes the key.
    pub fn from_pem(pem: &str, alg: Option<&str>) -> Result<PrivateKey, String> {
        use jsonwebtoken::{Algorithm, EncodingKey};
        let alg: Algorithm = alg
            .unwrap_or("ES256")
            .parse()
            .map_err(|_| format!("{}: not a signing algorithm", alg.unwrap_or_default()))?;
        let key = match alg {
            Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem.as_bytes()),
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => EncodingKey::from_rsa_pem(pem.as_bytes()),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()),
            _ => return Err(format!("{alg:?} is not an asymmetric signing algorithm")),
        }
        .map_err(|_| format!("not a PEM private key for {alg:?}"))?;
        Ok(PrivateKey {
            key: std::sync::Arc::new(key),
            alg,
        })
    }

    /// A client assertion of `client_id` for the authorization server `audience` (its issuer,
    /// as RFC 7523bis asks): `iss` = `sub` = the client, a fresh `jti`, valid for 60 s.
    pub fn assertion(&self, client_id: &str, audience: &str) -> Result<Secret, AuthFailure> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(|e| AuthFailure::Failed(e.to_string()))?;
        let claims = serde_json::json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + 60,
            "jti": jti.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        });
        let header = jsonwebtoken::Header::new(self.alg);
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map(Secret::new)
            .map_err(|e| AuthFailure::Failed(format!("the client assertion: {e}")))
    }
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
    if client.assertion {
        body.append_pair("client_id", client.client_id);
        body.append_pair("client_assertion_type", JWT_BEARER_ASSERTION);
        body.append_pair("client_assertion", client.secret.expose());
        return request.body(body.finish().into_bytes());
    }
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
            assertion: false,
        }
    }

    #[test]
    fn a_private_key_signs_an_assertion_of_the_client_for_the_issuer() {
        // A P-256 key made for this test (PKCS#8).
        let pem = "-----BEGIN PRIVATE KEY-----\n\
            MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgltD3foygOCZ6N0f/\n\
            LrdABxH1shU4GO02TJFYbfCysA6hRANCAATF1kJ/E52WRyM4TrqR428osXAtS79+\n\
            3uyXsSb0UJs9plVtaXwYGIzlTdDBUCiFBGr4a0h3OBxIf4EeBFN4l5W4\n\
            -----END PRIVATE KEY-----\n";
        let key = PrivateKey::from_pem(pem, Some("ES256")).unwrap();
        assert!(!format!("{key:?}").contains("MIG"));
        let assertion = key.assertion("cc-client", "https://as.example").unwrap();
        let claims = assertion.expose().split('.').nth(1).unwrap();
        let claims: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(claims)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["iss"], "cc-client");
        assert_eq!(claims["sub"], "cc-client");
        assert_eq!(claims["aud"], "https://as.example");
        let client = ClientAuth {
            client_id: "cc-client",
            secret: &assertion,
            method: AuthMethod::ClientSecretBasic,
            assertion: true,
        };
        let request = build(
            "https://as/token",
            &client,
            &[("grant_type", "client_credentials")],
        )
        .unwrap();
        assert!(request.headers().get(http::header::AUTHORIZATION).is_none());
        let body = String::from_utf8_lossy(request.body()).into_owned();
        assert!(
            body.contains("client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer"),
            "{body}"
        );
        assert!(
            PrivateKey::from_pem("not a key", None)
                .unwrap_err()
                .contains("PEM")
        );
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
