//! How `connect` takes the user to an authorization URL (`--browser`): printed on stderr for the
//! user to open, opened in the desktop's browser, or fetched here without a user — a GET that
//! follows the authorization server's redirects within its own origin and then only to the
//! loopback callback (what an authorization server that redirects at once, a test server, needs;
//! one that shows a login page cannot be used so). Then it waits for the callback.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use mcp_host::access::upstream::AuthFailure;
use mcp_host::access::upstream::flow::{Callback, UserAgent};
use mcp_host::access::upstream::http::same_origin;
use reqwest::Url;

use super::callback::Listener;
use super::oauth::Browser;

/// The most redirects `fetch` follows within the authorization server's origin.
const MAX_HOPS: usize = 5;

/// `connect`'s user agent.
pub(crate) struct Agent {
    pub(crate) listener: Arc<Listener>,
    pub(crate) mode: Browser,
    /// How long to wait for a callback.
    pub(crate) timeout: Duration,
}

impl UserAgent for Agent {
    fn redirect_uri(&self) -> String {
        self.listener.redirect_uri()
    }

    fn authorize<'a>(
        &'a self,
        url: &'a str,
        _state: &'a str,
    ) -> BoxFuture<'a, Result<Callback, AuthFailure>> {
        Box::pin(async move {
            match self.mode {
                Browser::Print => eprintln!("Open this URL to authorize mcp-host:\n  {url}"),
                Browser::Open => {
                    eprintln!("Opening the authorization URL in your browser:\n  {url}");
                    open(url);
                }
                Browser::Fetch => fetch(url, &self.redirect_uri()).await?,
            }
            self.listener.next(self.timeout).await.ok_or_else(|| {
                AuthFailure::Failed(format!(
                    "no authorization came back to {} within {} s",
                    self.redirect_uri(),
                    self.timeout.as_secs()
                ))
            })
        })
    }
}

/// Open `url` in the desktop's browser; a failure only leaves the printed URL.
fn open(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        eprintln!("(cannot run {opener}: {e}; open the URL yourself)");
    }
}

/// GET the authorization URL without a user: redirects within its origin followed, then the one
/// to `callback` (the loopback listener, which takes it); anything else is an error saying why.
async fn fetch(url: &str, callback: &str) -> Result<(), AuthFailure> {
    let failed = |why: String| AuthFailure::Failed(format!("--browser fetch: {why}"));
    mcp_host::config::tls::use_ring_provider();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let callback = Url::parse(callback).map_err(|e| failed(e.to_string()))?;
    let mut at = Url::parse(url).map_err(|e| failed(e.to_string()))?;
    for _ in 0..MAX_HOPS {
        let answer = client.get(at.clone()).send().await;
        let answer = answer.map_err(|e| failed(format!("{}: {e}", origin(&at))))?;
        let location = answer
            .headers()
            .get(http::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| at.join(l).ok());
        let Some(next) = location.filter(|_| answer.status().is_redirection()) else {
            return Err(failed(format!(
                "the authorization server answered HTTP {} (a page for a user, such as a \
                 login?): it cannot be used without one; use --browser print or open",
                answer.status()
            )));
        };
        if same_origin(&next, &callback) && next.path() == callback.path() {
            client
                .get(next)
                .send()
                .await
                .map_err(|e| failed(e.to_string()))?;
            return Ok(());
        }
        if !same_origin(&next, &at) {
            return Err(failed(format!(
                "the authorization server sends the browser to {}: only redirects to the \
                 loopback callback are followed; use --browser print or open",
                origin(&next)
            )));
        }
        at = next;
    }
    Err(failed(format!("more than {MAX_HOPS} redirects")))
}

/// A URL's origin, for messages (its path and query may carry anything).
fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}
