//! Console logins: a random session id in an `HttpOnly`, `SameSite=Strict` cookie, the
//! credentials it was opened with kept on the server (verified again at every request, so an
//! expired token or a secret removed from the configuration ends the login), and a CSRF token the
//! page sends back with every state-changing request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::HeaderMap;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// The cookie carrying a login's id.
pub(super) const COOKIE: &str = "mcp_console";
/// The header carrying the CSRF token.
pub(super) const CSRF_HEADER: &str = "x-console-csrf";
/// Logins kept at most (the oldest make room).
const MAX_LOGINS: usize = 1024;

/// One login.
#[derive(Debug, Clone)]
pub(super) struct Login {
    /// The bearer token or personal secret it was opened with (`None`: the anonymous operator,
    /// where the host requires no authentication).
    pub token: Option<String>,
    /// What state-changing requests must carry in [`CSRF_HEADER`].
    pub csrf: String,
    expires: Instant,
}

impl Login {
    /// Whether `headers` carry this login's CSRF token.
    pub(super) fn csrf_matches(&self, headers: &HeaderMap) -> bool {
        headers
            .get(CSRF_HEADER)
            .is_some_and(|v| bool::from(v.as_bytes().ct_eq(self.csrf.as_bytes())))
    }
}

/// The open logins, by the SHA-256 of their id (the id itself is never kept).
#[derive(Debug, Default)]
pub(super) struct Logins(Mutex<HashMap<[u8; 32], Login>>);

/// A new login's cookie value and CSRF token.
pub(super) struct Opened {
    pub id: String,
    pub csrf: String,
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

fn random_hex() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Logins {
    /// Open a login with `token` for `lifetime`.
    pub(super) fn open(
        &self,
        token: Option<String>,
        lifetime: Duration,
    ) -> Result<Opened, getrandom::Error> {
        let opened = Opened {
            id: random_hex()?,
            csrf: random_hex()?,
        };
        let now = Instant::now();
        let mut logins = self.0.lock().unwrap_or_else(|p| p.into_inner());
        logins.retain(|_, l| l.expires > now);
        // Full: an anonymous login makes room first (anybody on loopback can open those), then
        // the one expiring soonest.
        if logins.len() >= MAX_LOGINS
            && let Some(oldest) = logins
                .iter()
                .min_by_key(|(_, l)| (l.token.is_some(), l.expires))
                .map(|(k, _)| *k)
        {
            logins.remove(&oldest);
        }
        logins.insert(
            digest(&opened.id),
            Login {
                token,
                csrf: opened.csrf.clone(),
                expires: now + lifetime,
            },
        );
        Ok(opened)
    }

    /// The login whose id `headers`' cookie carries, unless it expired.
    pub(super) fn get(&self, headers: &HeaderMap) -> Option<Login> {
        let id = cookie(headers)?;
        let mut logins = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let key = digest(id);
        match logins.get(&key) {
            Some(l) if l.expires > Instant::now() => Some(l.clone()),
            Some(_) => {
                logins.remove(&key);
                None
            }
            None => None,
        }
    }

    /// End the login `headers`' cookie names.
    pub(super) fn close(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers) {
            let mut logins = self.0.lock().unwrap_or_else(|p| p.into_inner());
            logins.remove(&digest(id));
        }
    }
}

/// The login id in the request's cookies.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The `Set-Cookie` value opening a login at `path` for `lifetime` (or ending it: `None`);
/// `secure` when the page was served over HTTPS.
pub(super) fn set_cookie(path: &str, login: Option<(&str, Duration)>, secure: bool) -> String {
    let (value, max_age) = login.map_or(("", 0), |(id, life)| (id, life.as_secs()));
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}")
}

/// Failed logins allowed per remote address in [`FAILURE_WINDOW`].
const MAX_FAILURES: u32 = 10;
/// The window failed logins are counted in.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most (beyond, the table starts over).
const MAX_FAILING: usize = 4096;

/// Failed logins per remote address: past [`MAX_FAILURES`] in a minute, logins from there are
/// refused (429) until the minute is over.
#[derive(Debug, Default)]
pub(super) struct Failures(Mutex<HashMap<String, (u32, Instant)>>);

impl Failures {
    /// Whether `peer` may try to log in now.
    pub(super) fn allows(&self, peer: &str) -> bool {
        let failures = self.0.lock().unwrap_or_else(|p| p.into_inner());
        failures
            .get(peer)
            .is_none_or(|(n, since)| *n < MAX_FAILURES || since.elapsed() >= FAILURE_WINDOW)
    }

    /// `peer` failed a login.
    pub(super) fn failed(&self, peer: &str) {
        let mut failures = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= MAX_FAILING {
            failures.retain(|_, (_, since)| since.elapsed() < FAILURE_WINDOW);
            if failures.len() >= MAX_FAILING {
                failures.clear();
            }
        }
        let now = Instant::now();
        let entry = failures.entry(peer.to_owned()).or_insert((0, now));
        if entry.1.elapsed() >= FAILURE_WINDOW {
            *entry = (0, now);
        }
        entry.0 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let v = format!("other=1; {COOKIE}={value}");
        headers.insert(hyper::header::COOKIE, v.parse().unwrap());
        headers
    }

    #[test]
    fn a_login_is_found_by_its_cookie_until_it_expires_or_is_closed() {
        let logins = Logins::default();
        let opened = logins
            .open(Some("t".into()), Duration::from_secs(60))
            .unwrap();
        let headers = with_cookie(&opened.id);
        let login = logins.get(&headers).unwrap();
        assert_eq!(login.token.as_deref(), Some("t"));
        let mut csrf = HeaderMap::new();
        csrf.insert(CSRF_HEADER, opened.csrf.parse().unwrap());
        assert!(login.csrf_matches(&csrf));
        assert!(!login.csrf_matches(&HeaderMap::new()));
        assert!(logins.get(&with_cookie(&"0".repeat(64))).is_none());
        logins.close(&headers);
        assert!(logins.get(&headers).is_none());
        let gone = logins.open(None, Duration::ZERO).unwrap();
        assert!(logins.get(&with_cookie(&gone.id)).is_none());
    }

    #[test]
    fn an_address_that_keeps_failing_is_refused_and_others_are_not() {
        let failures = Failures::default();
        for _ in 0..MAX_FAILURES {
            assert!(failures.allows("a"));
            failures.failed("a");
        }
        assert!(!failures.allows("a"));
        assert!(failures.allows("b"));
    }

    #[test]
    fn the_cookie_is_secure_only_over_https() {
        let life = Some(("id", Duration::from_secs(60)));
        assert!(set_cookie("/ui", life, true).ends_with("SameSite=Strict; Secure"));
        assert!(!set_cookie("/ui", life, false).contains("Secure"));
    }
}
