//! Which client the host is at an authorization server, in MCP's order of preference: a client
//! registered beforehand — bound to the issuer it was registered with, and never presented to
//! another — then a client ID metadata document (its HTTPS URL is the client id; portable across
//! authorization servers) when the server supports them, then dynamic client registration
//! (RFC 7591: `application_type` `native` for a loopback redirect, `web` otherwise, and
//! `refresh_token` among its grant types). A registration is kept per issuer: when an upstream
//! moves to another authorization server, the host registers there anew. And how the client
//! authenticates at the token endpoint: as configured, else as the registration response says,
//! else from what the server supports.

use rmcp::transport::auth::AuthorizationMetadata;
use serde_json::{Value, json};

use super::http::Client;
use super::{AuthFailure, Secret};

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// A public client: its id alone.
    None,
    /// HTTP Basic with the client secret.
    ClientSecretBasic,
    /// The client secret in the form body.
    ClientSecretPost,
}

impl AuthMethod {
    /// Its name in RFC 7591 / RFC 8414 metadata.
    pub fn name(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::ClientSecretBasic => "client_secret_basic",
            AuthMethod::ClientSecretPost => "client_secret_post",
        }
    }

    /// The method of that name.
    pub fn named(name: &str) -> Option<AuthMethod> {
        match name {
            "none" => Some(AuthMethod::None),
            "client_secret_basic" => Some(AuthMethod::ClientSecretBasic),
            "client_secret_post" => Some(AuthMethod::ClientSecretPost),
            _ => None,
        }
    }
}

/// A client registered beforehand, out of band.
#[derive(Debug, Clone)]
pub struct Preregistered {
    /// Its id.
    pub client_id: String,
    /// Its secret (a confidential client).
    pub client_secret: Option<Secret>,
    /// The issuer it is registered with; `None`: the first one discovered (then bound to it).
    pub issuer: Option<String>,
}

/// How the client came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Registered beforehand.
    Preregistered,
    /// A client ID metadata document.
    MetadataDocument,
    /// Registered dynamically.
    Dynamic,
}

impl Kind {
    /// In words.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Preregistered => "registered beforehand",
            Kind::MetadataDocument => "a client metadata document",
            Kind::Dynamic => "registered dynamically",
        }
    }
}

/// The client the host is at one authorization server.
#[derive(Debug, Clone)]
pub struct Registration {
    /// How it came to be.
    pub kind: Kind,
    /// Its id.
    pub client_id: String,
    /// Its secret.
    pub client_secret: Option<Secret>,
    /// How it authenticates at the token endpoint.
    pub method: AuthMethod,
}

/// What the registration is chosen from.
#[derive(Debug, Clone, Copy)]
pub struct Choice<'a> {
    /// A client registered beforehand.
    pub preregistered: Option<&'a Preregistered>,
    /// This client's metadata document URL.
    pub metadata_url: Option<&'a str>,
}

/// What the authorization server's metadata says matters to the choice.
#[derive(Debug, Clone, Default)]
pub struct ServerFacts {
    /// Its issuer.
    pub issuer: String,
    /// It accepts client ID metadata documents.
    pub metadata_documents: bool,
    /// Its registration endpoint.
    pub registration_endpoint: Option<String>,
    /// The token endpoint authentication methods it lists (empty: it lists none).
    pub methods: Vec<String>,
}

impl ServerFacts {
    /// The facts of an authorization server's metadata.
    pub fn of(metadata: &AuthorizationMetadata) -> ServerFacts {
        let field = |name: &str| metadata.additional_fields.get(name);
        ServerFacts {
            issuer: metadata.issuer.clone().unwrap_or_default(),
            metadata_documents: field("client_id_metadata_document_supported")
                == Some(&Value::Bool(true)),
            registration_endpoint: metadata.registration_endpoint.clone(),
            methods: field("token_endpoint_auth_methods_supported")
                .and_then(Value::as_array)
                .map(|m| {
                    m.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The method a client with (or without) a secret uses here, unless configured: `none`
    /// without one; with one, `client_secret_basic` unless the server lists only
    /// `client_secret_post`.
    pub fn method_for(&self, secret: bool) -> AuthMethod {
        let lists = |m: &str| self.methods.iter().any(|x| x == m);
        match secret {
            false => AuthMethod::None,
            true if lists("client_secret_post") && !lists("client_secret_basic") => {
                AuthMethod::ClientSecretPost
            }
            true => AuthMethod::ClientSecretBasic,
        }
    }
}

/// Whether two issuer identifiers are the same for binding a registration: identical, or equal
/// but for the trailing slash of an empty path (RFC 8414's metadata comparison).
pub fn same_issuer(a: &str, b: &str) -> bool {
    let trim = |s: &str| -> String {
        match s.strip_suffix('/') {
            Some(bare)
                if url::Url::parse(bare).is_ok_and(|u| u.path().is_empty() || u.path() == "/") =>
            {
                bare.to_owned()
            }
            _ => s.to_owned(),
        }
    };
    a == b || trim(a) == trim(b)
}

/// What to do at an authorization server without a registration yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Use the client registered beforehand.
    Preregistered,
    /// Use the metadata document's URL as the client id.
    MetadataDocument(String),
    /// Register dynamically at this endpoint.
    Register(String),
}

/// Choose how to be a client at the server `facts` describes (see the module's documentation).
pub fn choose(choice: &Choice<'_>, facts: &ServerFacts) -> Result<Plan, AuthFailure> {
    if let Some(pre) = choice.preregistered {
        let bound = pre
            .issuer
            .as_deref()
            .is_none_or(|i| same_issuer(i, &facts.issuer));
        if bound {
            return Ok(Plan::Preregistered);
        }
    }
    if let Some(url) = choice.metadata_url
        && facts.metadata_documents
    {
        return Ok(Plan::MetadataDocument(url.to_owned()));
    }
    if let Some(endpoint) = &facts.registration_endpoint {
        return Ok(Plan::Register(endpoint.clone()));
    }
    let why = match choice.preregistered {
        Some(pre) => format!(
            "client {} is registered with {}, not with the upstream's authorization server {}; \
             it registers no client dynamically and takes no client metadata document",
            pre.client_id,
            pre.issuer.as_deref().unwrap_or("?"),
            facts.issuer
        ),
        None => format!(
            "the authorization server {} registers no client dynamically and takes no client \
             metadata document: register a client there and give its id (--client-id)",
            facts.issuer
        ),
    };
    Err(AuthFailure::Refused(why))
}

/// What a dynamic registration asks for.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The client's name.
    pub client_name: &'a str,
    /// Its redirect URI.
    pub redirect_uri: &'a str,
    /// `native` (a loopback redirect) or `web`.
    pub application_type: &'a str,
}

/// The token endpoint authentication method to ask a dynamic registration for: `none` (a public
/// client) where the server takes it or lists nothing, else the first of Basic and post it lists.
fn asked_method(facts: &ServerFacts) -> AuthMethod {
    let lists = |m: AuthMethod| facts.methods.iter().any(|x| x == m.name());
    if facts.methods.is_empty() || lists(AuthMethod::None) {
        AuthMethod::None
    } else if lists(AuthMethod::ClientSecretBasic) {
        AuthMethod::ClientSecretBasic
    } else if lists(AuthMethod::ClientSecretPost) {
        AuthMethod::ClientSecretPost
    } else {
        AuthMethod::None
    }
}

/// The body of a dynamic registration request.
pub fn registration_body(request: &Request<'_>, facts: &ServerFacts) -> Value {
    json!({
        "client_name": request.client_name,
        "redirect_uris": [request.redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": asked_method(facts).name(),
        "application_type": request.application_type,
    })
}

/// Register dynamically at `endpoint` (RFC 7591).
pub async fn register(
    http: &Client,
    endpoint: &str,
    request: &Request<'_>,
    facts: &ServerFacts,
) -> Result<Registration, AuthFailure> {
    let failed = |why: String| AuthFailure::Failed(format!("registering at {endpoint}: {why}"));
    let body = registration_body(request, facts).to_string();
    let post = http::Request::builder()
        .method("POST")
        .uri(endpoint)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(body.into_bytes())
        .map_err(|e| failed(e.to_string()))?;
    let answer = http
        .send(post, false)
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !answer.status().is_success() {
        let text = String::from_utf8_lossy(answer.body());
        let text: String = text.chars().filter(|c| !c.is_control()).take(300).collect();
        return Err(failed(format!("HTTP {}: {text}", answer.status())));
    }
    let response: Value =
        serde_json::from_slice(answer.body()).map_err(|e| failed(e.to_string()))?;
    registered(&response, facts).map_err(failed)
}

/// The registration a dynamic registration response describes.
pub fn registered(response: &Value, facts: &ServerFacts) -> Result<Registration, String> {
    let client_id = response
        .get("client_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= 1024)
        .ok_or("the response has no client_id")?;
    // An empty secret is no secret (a public client), as some servers answer.
    let client_secret = response
        .get("client_secret")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(Secret::new);
    let named = response
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .and_then(AuthMethod::named);
    let method = match named {
        Some(AuthMethod::None) | None if client_secret.is_none() => AuthMethod::None,
        Some(method) => method,
        None => facts.method_for(true),
    };
    Ok(Registration {
        kind: Kind::Dynamic,
        client_id: client_id.to_owned(),
        client_secret,
        method,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(cimd: bool, registration: bool, methods: &[&str]) -> ServerFacts {
        ServerFacts {
            issuer: "http://as.test".into(),
            metadata_documents: cimd,
            registration_endpoint: registration.then(|| "http://as.test/register".into()),
            methods: methods.iter().map(|m| (*m).to_owned()).collect(),
        }
    }

    #[test]
    fn a_client_is_chosen_preregistered_then_by_metadata_document_then_registered() {
        let pre = Preregistered {
            client_id: "pre".into(),
            client_secret: None,
            issuer: Some("http://as.test/".into()),
        };
        let url = "https://client.example/metadata.json";
        let cimd = Some(url);
        let all = facts(true, true, &[]);
        let choice = |preregistered, metadata_url| Choice {
            preregistered,
            metadata_url,
        };
        assert_eq!(
            choose(&choice(Some(&pre), cimd), &all),
            Ok(Plan::Preregistered)
        );
        assert_eq!(
            choose(&choice(None, cimd), &all),
            Ok(Plan::MetadataDocument(url.into()))
        );
        // A server that takes no metadata document: registered dynamically.
        assert_eq!(
            choose(&choice(None, cimd), &facts(false, true, &[])),
            Ok(Plan::Register("http://as.test/register".into()))
        );
        assert!(choose(&choice(None, None), &facts(false, false, &[])).is_err());
    }

    #[test]
    fn a_preregistered_client_is_presented_to_its_issuer_only() {
        let elsewhere = Preregistered {
            client_id: "as1-client".into(),
            client_secret: None,
            issuer: Some("http://as1.test".into()),
        };
        let choice = Choice {
            preregistered: Some(&elsewhere),
            metadata_url: None,
        };
        // At another issuer it is skipped: the host registers there instead...
        assert_eq!(
            choose(&choice, &facts(false, true, &[])),
            Ok(Plan::Register("http://as.test/register".into()))
        );
        // ... or refuses, naming why, where it cannot.
        let refused = choose(&choice, &facts(false, false, &[])).unwrap_err();
        assert!(refused.is_refusal() && refused.to_string().contains("as1-client"));
        // Unbound (no issuer given): usable at the first server.
        let unbound = Preregistered {
            issuer: None,
            ..elsewhere
        };
        let choice = Choice {
            preregistered: Some(&unbound),
            metadata_url: None,
        };
        assert_eq!(
            choose(&choice, &facts(false, false, &[])),
            Ok(Plan::Preregistered)
        );
        assert!(same_issuer("http://as.test", "http://as.test/"));
        assert!(!same_issuer(
            "http://as.test/tenant",
            "http://as.test/tenant/x"
        ));
    }

    #[test]
    fn the_token_endpoint_method_follows_the_registration_then_the_server() {
        let only_post = facts(false, true, &["client_secret_post"]);
        let with_secret = json!({"client_id": "c", "client_secret": "s"});
        // The response names none: from the server's list.
        assert_eq!(
            registered(&with_secret, &only_post).unwrap().method,
            AuthMethod::ClientSecretPost
        );
        assert_eq!(
            registered(&with_secret, &facts(false, true, &["none"]))
                .unwrap()
                .method,
            AuthMethod::ClientSecretBasic
        );
        // The response names one: that one.
        let named = json!({"client_id": "c", "client_secret": "s", "token_endpoint_auth_method": "client_secret_basic"});
        assert_eq!(
            registered(&named, &only_post).unwrap().method,
            AuthMethod::ClientSecretBasic
        );
        // No secret (or an empty one): a public client.
        let public = json!({"client_id": "c", "client_secret": ""});
        let public = registered(&public, &only_post).unwrap();
        assert_eq!(
            (public.method, public.client_secret),
            (AuthMethod::None, None)
        );
        assert!(registered(&json!({"client_secret": "s"}), &only_post).is_err());
        // What is asked for: a public, native client that may refresh.
        let request = Request {
            client_name: "mcp-host",
            redirect_uri: "http://127.0.0.1:5000/callback",
            application_type: "native",
        };
        let body = registration_body(&request, &facts(false, true, &["client_secret_basic"]));
        assert_eq!(body["token_endpoint_auth_method"], "client_secret_basic");
        assert_eq!(body["application_type"], "native");
        assert_eq!(
            body["grant_types"],
            json!(["authorization_code", "refresh_token"])
        );
        let body = registration_body(&request, &facts(false, true, &[]));
        assert_eq!(body["token_endpoint_auth_method"], "none");
    }
}
