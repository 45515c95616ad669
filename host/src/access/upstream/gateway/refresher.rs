//! The background refresher: every [`TICK`], the credentials whose refresh is due (expired, or
//! within `min(30 s, half their life)` of it: the vault's `refresh_after`) are refreshed ahead of
//! the calls that will need them — each by one replica at a time (the vault's lease, as a call's
//! refresh), at most [`PER_TICK`] per tick. A credential no call used for [`IDLE`] is left to
//! expire (its next call refreshes it, or asks again); one whose refresh failed, or that cannot
//! be refreshed (no refresh token), is tried again after [`BACKOFF`] only, so it never holds up
//! the others. No task runs while no upstream has `server.auth` (it ends; a reload that adds one
//! starts it again: [`Credentials::start_refresher`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Credentials, Key, Spec, now_ms};
use crate::access::upstream::Principal;

/// How often due credentials are looked for.
pub const TICK: Duration = Duration::from_secs(5);
/// The most refreshes one tick attempts.
pub const PER_TICK: usize = 16;
/// The most due rows one tick reads.
const MAX_SCAN: usize = 1024;
/// A credential no call used for this long is not refreshed ahead.
pub const IDLE: Duration = Duration::from_secs(3600);
/// How long a credential the refresher could not refresh is left alone.
pub const BACKOFF: Duration = Duration::from_secs(60);

/// Which of the due rows `due` (most overdue first) this tick refreshes: those of an upstream
/// with `server.auth` in `specs`, not backed off in `backoff` at `now`, at most `max`.
pub fn pick(
    due: Vec<(String, String)>,
    specs: &HashMap<String, Arc<Spec>>,
    backoff: &HashMap<Key, Instant>,
    now: Instant,
    max: usize,
) -> Vec<Key> {
    due.into_iter()
        .filter(|(principal, upstream)| specs.contains_key(upstream) && !principal.is_empty())
        .filter(|k| backoff.get(k).is_none_or(|until| *until <= now))
        .take(max)
        .collect()
}

impl Credentials {
    /// Start the refresher over `credentials` unless one runs or no upstream has `server.auth`
    /// (at start, and after each reload); it needs a Tokio runtime (none: nothing starts).
    pub fn start_refresher(credentials: &Arc<Credentials>) {
        if credentials.specs.load().is_empty() {
            return;
        }
        let Some(runtime) = credentials.runtime() else {
            return;
        };
        if credentials.refresher.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(credentials);
        runtime.spawn(async move {
            tracing::debug!("Upstream credentials: the background refresher starts");
            let mut backoff: HashMap<Key, Instant> = HashMap::new();
            loop {
                tokio::time::sleep(TICK).await;
                let Some(credentials) = weak.upgrade() else {
                    return;
                };
                if credentials.specs.load().is_empty() {
                    credentials.refresher.store(false, Ordering::Release);
                    tracing::debug!("Upstream credentials: the background refresher stops");
                    return;
                }
                credentials.refresh_tick(&mut backoff).await;
            }
        });
    }

    /// One tick of the refresher: how many credentials it refreshed.
    pub async fn refresh_tick(&self, backoff: &mut HashMap<Key, Instant>) -> usize {
        let now = Instant::now();
        backoff.retain(|_, until| *until > now);
        let scan = (PER_TICK + backoff.len()).min(MAX_SCAN);
        let due = match self.vault.due_for_refresh(scan).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!("Upstream credentials: due refreshes cannot be read: {e}");
                return 0;
            }
        };
        let specs = self.specs.load_full();
        let mut refreshed = 0;
        for k in pick(due, &specs, backoff, now, PER_TICK) {
            let Some(spec) = specs.get(&k.1) else {
                continue;
            };
            if self.refresh_ahead(&k, spec).await {
                refreshed += 1;
            } else {
                backoff.insert(k, Instant::now() + BACKOFF);
            }
        }
        refreshed
    }

    /// Refresh `k`'s credential ahead of its calls if a call used it lately; whether the row
    /// now holds a token that is not due.
    async fn refresh_ahead(&self, k: &Key, spec: &Spec) -> bool {
        let who = Principal(k.0.clone());
        let stored = match self.vault.credential(&k.0, &k.1, &spec.identity).await {
            Ok(Some(stored)) => stored,
            _ => return false,
        };
        let idle_ms = IDLE.as_millis() as u64;
        if stored.last_used_ms.saturating_add(idle_ms) < now_ms()
            || stored.credential.refresh_token.is_none()
        {
            return false;
        }
        let _ = self.refresh(&who, spec, false).await;
        matches!(
            self.vault.credential(&k.0, &k.1, &spec.identity).await,
            Ok(Some(now)) if !super::due(&now.credential)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ServerAuth, UpstreamServer};

    fn specs(names: &[&str]) -> HashMap<String, Arc<Spec>> {
        names
            .iter()
            .map(|n| {
                let server = UpstreamServer {
                    url: Some(format!("https://{n}.example/mcp")),
                    auth: Some(ServerAuth::default()),
                    ..UpstreamServer::default()
                };
                ((*n).to_owned(), Arc::new(Spec::of(n, &server).unwrap()))
            })
            .collect()
    }

    fn row(p: &str, u: &str) -> (String, String) {
        (p.to_owned(), u.to_owned())
    }

    #[test]
    fn a_tick_picks_due_rows_of_configured_upstreams_not_backed_off_bounded() {
        let now = Instant::now();
        let specs = specs(&["github", "linear"]);
        let mut backoff = HashMap::new();
        backoff.insert(row("alice", "github"), now + BACKOFF);
        backoff.insert(row("carol", "github"), now - Duration::from_secs(1));
        let due = vec![
            row("alice", "github"),
            row("bob", "gone"),
            row("carol", "github"),
            row("dave", "linear"),
            row("erin", "linear"),
        ];
        assert_eq!(
            pick(due.clone(), &specs, &backoff, now, 10),
            [
                row("carol", "github"),
                row("dave", "linear"),
                row("erin", "linear")
            ]
        );
        // Bounded per tick; a backed-off head does not hold up the rest.
        assert_eq!(
            pick(due, &specs, &backoff, now, 1),
            [row("carol", "github")]
        );
        assert!(pick(Vec::new(), &specs, &backoff, now, 10).is_empty());
        assert!(pick(vec![row("a", "github")], &HashMap::new(), &backoff, now, 10).is_empty());
    }
}
