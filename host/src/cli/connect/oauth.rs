//! `connect`'s OAuth: its flags, and the host's OAuth engine (`mcp_host::access::upstream`) built
//! from them — principal `@cli`, tokens kept in memory for this run only, a `native` client whose
//! redirect comes back to the loopback listener ([`super::callback`]), the authorization URL taken
//! to the user as `--browser` says ([`super::browser`]).

use std::sync::Arc;
use std::time::Duration;

use mcp_host::access::upstream::engine::{Engine, Options};
use mcp_host::access::upstream::grants::PrivateKey;
use mcp_host::access::upstream::registration::{AuthMethod, Preregistered};
use mcp_host::access::upstream::tokens::MemoryTokens;
use mcp_host::access::upstream::{Principal, Secret, Target};

use super::browser::Agent;
use super::callback::Listener;

/// How the authorization URL reaches the user (`--browser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Browser {
    /// Print it (on stderr) for the user to open.
    Print,
    /// Open it in the desktop's browser (and print it).
    Open,
    /// Fetch it here, without a user: follows redirects only to the loopback callback (for
    /// authorization servers that redirect at once, as test servers do).
    Fetch,
}

/// A token endpoint authentication method (`--token-endpoint-auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Method {
    /// A public client: its id alone.
    None,
    /// HTTP Basic with the client secret.
    #[value(name = "client_secret_basic")]
    ClientSecretBasic,
    /// The client secret in the request body.
    #[value(name = "client_secret_post")]
    ClientSecretPost,
}

impl From<Method> for AuthMethod {
    fn from(m: Method) -> AuthMethod {
        match m {
            Method::None => AuthMethod::None,
            Method::ClientSecretBasic => AuthMethod::ClientSecretBasic,
            Method::ClientSecretPost => AuthMethod::ClientSecretPost,
        }
    }
}

/// `connect`'s OAuth flags.
#[derive(Debug, clap::Args)]
pub(crate) struct OAuthArgs {
    /// A client id registered with the server's authorization server beforehand (used before
    /// a client metadata document or dynamic registration).
    #[arg(long, value_name = "ID")]
    pub(crate) client_id: Option<String>,
    /// The pre-registered client's secret (better in the environment than on a command line
    /// other users' `ps` shows).
    #[arg(
        long,
        value_name = "SECRET",
        requires = "client_id",
        env = "MCP_HOST_CLIENT_SECRET",
        hide_env_values = true
    )]
    pub(crate) client_secret: Option<String>,
    /// The issuer of the authorization server the client id is registered with (it is presented
    /// to no other; default: the first one discovered).
    #[arg(long, value_name = "URL", requires = "client_id")]
    pub(crate) issuer: Option<String>,
    /// The URL of this client's metadata document (a CIMD client id), used when the authorization
    /// server supports them.
    #[arg(long, value_name = "URL")]
    pub(crate) client_metadata_url: Option<String>,
    /// Request these scopes instead of those the server's challenge or metadata names
    /// (repeatable).
    #[arg(long = "scope", value_name = "SCOPE")]
    pub(crate) scopes: Vec<String>,
    /// Leave the RFC 8707 `resource` parameter out of the authorization and token requests (for
    /// authorization servers that reject it; MCP's spec requires it).
    #[arg(long)]
    pub(crate) no_resource: bool,
    /// Authenticate as the client itself (`client_credentials`, with --client-id and
    /// --client-secret or --private-key) instead of a user.
    #[arg(long, requires = "client_id")]
    pub(crate) client_credentials: bool,
    /// The client's private key (a PEM file): `client_credentials` authenticates with a signed
    /// JWT assertion (`private_key_jwt`, RFC 7523) instead of a secret.
    #[arg(long, value_name = "FILE", requires = "client_credentials")]
    pub(crate) private_key: Option<std::path::PathBuf>,
    /// The algorithm the private key signs with (ES256, ES384, RS256, PS256, EdDSA, ...).
    #[arg(
        long,
        value_name = "ALG",
        default_value = "ES256",
        requires = "private_key"
    )]
    pub(crate) signing_algorithm: String,
    /// How the client authenticates at the token endpoint (default: as its registration says,
    /// else as the authorization server supports).
    #[arg(long, value_enum, value_name = "METHOD")]
    pub(crate) token_endpoint_auth: Option<Method>,
    /// How the authorization URL reaches the user.
    #[arg(long, value_enum, default_value = "print")]
    pub(crate) browser: Browser,
    /// Where the loopback callback listener listens (127.0.0.1 and any port by default).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub(crate) callback: std::net::SocketAddr,
}

/// At most this many authorizations (and step-ups) in one run.
const MAX_AUTHORIZATIONS: u32 = 3;

/// The OAuth engine for `args`' upstream, or none when a static `Authorization` header is given.
pub(crate) fn authorizer(
    args: &super::ConnectArgs,
    timeout: Duration,
) -> anyhow::Result<Option<Arc<Engine>>> {
    let has_header = args.headers.iter().any(|h| {
        h.split_once('=')
            .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
    });
    if has_header {
        return Ok(None);
    }
    let oauth = &args.oauth;
    if let Some(url) = &oauth.client_metadata_url {
        let parsed = reqwest::Url::parse(url).ok();
        anyhow::ensure!(
            parsed.is_some_and(|u| u.scheme() == "https" && u.path() != "/"),
            "--client-metadata-url {url}: a client metadata document is an HTTPS URL with a path"
        );
    }
    anyhow::ensure!(
        !oauth.client_credentials || oauth.client_secret.is_some() || oauth.private_key.is_some(),
        "--client-credentials needs --client-secret or --private-key"
    );
    let private_key = match &oauth.private_key {
        Some(file) => {
            let pem = zeroize::Zeroizing::new(
                std::fs::read_to_string(file)
                    .map_err(|e| anyhow::anyhow!("--private-key {}: {e}", file.display()))?,
            );
            let key = PrivateKey::from_pem(&pem, Some(&oauth.signing_algorithm))
                .map_err(|e| anyhow::anyhow!("--private-key {}: {e}", file.display()))?;
            Some(key)
        }
        None => None,
    };
    let listener = Listener::start(oauth.callback)?;
    let agent = Agent {
        listener,
        mode: oauth.browser,
        timeout,
    };
    let mut options = options(args);
    options.private_key = private_key;
    let engine = Engine::new(options, Arc::new(MemoryTokens::default()), Arc::new(agent))?;
    Ok(Some(Arc::new(engine)))
}

/// The engine's options from the flags.
fn options(args: &super::ConnectArgs) -> Options {
    let oauth = &args.oauth;
    Options {
        principal: Principal::cli(),
        target: Target {
            upstream: upstream_name(&args.url),
            url: args.url.clone(),
        },
        preregistered: oauth.client_id.clone().map(|client_id| Preregistered {
            client_id,
            client_secret: oauth.client_secret.clone().map(Secret::new),
            issuer: oauth.issuer.clone(),
        }),
        metadata_url: oauth.client_metadata_url.clone(),
        client_name: "mcp-host".into(),
        application_type: "native",
        scopes: oauth.scopes.clone(),
        resource: !oauth.no_resource,
        method: oauth.token_endpoint_auth.map(AuthMethod::from),
        client_credentials: oauth.client_credentials,
        private_key: None,
        allow_private: false,
        max_authorizations: MAX_AUTHORIZATIONS,
        clients: None,
    }
}

/// What the log calls the server at `url`: its host.
pub(crate) fn upstream_name(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| url.to_owned())
}
