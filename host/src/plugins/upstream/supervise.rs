//! How a link to an upstream is kept up, like a plugin worker: its connection made in the
//! background on the upstream runtime (nothing waits for it but a one-shot command that asks
//! to), every step bounded (the handshake, each reading of the lists); a failure — an exit, a
//! closed connection, a timeout, a bound passed, a `list_changed` storm — restarts it with
//! backoff, and too many in the crash window quarantine it (its tools are withdrawn, clients are
//! told, and `mcp-host list` in another process reads why). A failed first connection of a
//! one-shot command is final. A list change is re-read one at a time: a change announced during
//! a re-reading marks one more after it, never a queue, and re-readings are spaced.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use mcp_plugin_sdk::wire::Manifest;

use super::link::{Link, Session};
use super::listing;
use crate::plugins::backend::{Connection, unix_ms};
use crate::plugins::lock;
use crate::plugins::worker::quarantine;

/// The shortest time between the starts of two re-readings of one upstream's lists.
const RELIST_INTERVAL: Duration = Duration::from_secs(1);
/// `list_changed` notifications within [`STORM_WINDOW`] that count as a failure (a storm).
const STORM_NOTIFICATIONS: u32 = 500;
/// The window [`STORM_NOTIFICATIONS`] counts in.
const STORM_WINDOW: Duration = Duration::from_secs(10);

/// How a link is supervised: its bounds, and what it does when it fails.
#[derive(Debug, Clone)]
pub(crate) struct Supervision {
    /// How long a handshake may take (`limits.upstream_handshake_timeout_secs`).
    pub(crate) handshake: Duration,
    /// What one reading of the lists may take.
    pub(crate) lists: listing::Bounds,
    /// Failures within the window that quarantine it, and the window.
    pub(crate) crashes: (u32, Duration),
    /// Whether a failed first connection is tried again (serving) or final (a one-shot command).
    pub(crate) retry_first: bool,
    /// Where its quarantine is recorded for `mcp-host list`: the configuration file, and the
    /// entry's `upstream:<name>`.
    pub(crate) record: Option<(PathBuf, PathBuf)>,
}

/// Where a link stands.
pub(super) enum Current {
    /// Never connected yet: the first attempt (since `since`), or a retry after `last` failed.
    Connecting {
        since: SystemTime,
        last: Option<String>,
    },
    Running(Arc<Session>),
    /// Connected before; failed for this reason and is being restarted.
    Restarting(String),
    Quarantined(String),
    /// Its first connection failed, and it is not retried.
    Failed(String),
    Retired,
}

impl Current {
    /// Whether a connection attempt is due.
    fn reconnecting(&self) -> bool {
        matches!(self, Current::Connecting { .. } | Current::Restarting(_))
    }
}

/// A link's state, and its recent failures.
pub(super) struct State {
    pub(super) current: Current,
    crashes: VecDeque<Instant>,
    /// A session that ended (or stormed) while it was connected, before it served: its id, and
    /// how (its failure once it serves).
    early: Option<(u64, String)>,
}

impl State {
    /// Connecting from now.
    pub(super) fn connecting() -> State {
        State {
            current: Current::Connecting {
                since: SystemTime::now(),
                last: None,
            },
            crashes: VecDeque::new(),
            early: None,
        }
    }
}

/// The re-reading of a link's lists, and its count of `list_changed` notifications.
#[derive(Debug, Default)]
pub(crate) struct Relists {
    /// A re-reading runs.
    running: bool,
    /// A change came during it: one more after it.
    again: bool,
    /// When the last one started.
    last: Option<Instant>,
    /// The storm window's start and the notifications in it.
    window: Option<(Instant, u32)>,
    /// A session said a list changed before it served (its id): re-read once it does.
    after_start: Option<u64>,
}

/// What follows a failure.
enum Next {
    /// Try again after this delay.
    Retry(Duration),
    /// Quarantined, for this reason.
    Quarantined(String),
    /// Failed for good (a one-shot command's first connection).
    Failed,
    /// Nothing (the link was retired meanwhile).
    Nothing,
}

impl Link {
    /// Start connecting, in the background.
    pub(crate) fn begin(self: &Arc<Self>) {
        self.schedule(Duration::ZERO);
    }

    /// Make a connection attempt after `delay`, on the upstream runtime.
    fn schedule(self: &Arc<Self>, delay: Duration) {
        let link = Arc::clone(self);
        let task = self.runtime.spawn(async move { link.connect(delay).await });
        *lock(&self.connecting) = Some(task.abort_handle());
    }

    /// One connection attempt, if one is still due after `delay`.
    async fn connect(self: Arc<Self>, delay: Duration) {
        tokio::time::sleep(delay).await;
        if !lock(&self.state).current.reconnecting() || !self.wait_for_operator().await {
            return;
        }
        let attempt = self.attempt().await;
        *lock(&self.attempt) = None;
        match attempt {
            Ok((session, manifest)) => self.connected(session, manifest),
            Err(why) => self.attempt_failed(why),
        }
    }

    /// An upstream listed as the operator (`server.auth.list_as: operator`) waits, without
    /// counting failures, until the operator's connection exists; `false` when the link was
    /// retired meanwhile.
    async fn wait_for_operator(self: &Arc<Self>) -> bool {
        let Some(listing) = self.listing.get() else {
            return true;
        };
        let mut told = false;
        loop {
            if !lock(&self.state).current.reconnecting() {
                return false;
            }
            if crate::access::upstream::Authorizer::token(listing.as_ref())
                .await
                .is_some()
            {
                return true;
            }
            let why = format!(
                "waiting for the operator's connection: an admin opens \
                 <public_url>/oauth/connect?upstream={} (or the console's Connect)",
                self.name
            );
            if !told {
                tracing::warn!("Upstream {} is {why}", self.name);
                told = true;
            }
            if let Current::Connecting { last, .. } = &mut lock(&self.state).current {
                *last = Some(why);
            }
            match listing.credentials() {
                Some(c) => c.landed_any(Duration::from_secs(5)).await,
                None => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Connect and read the lists: the handshake within its timeout, the lists within theirs.
    /// An abandoned attempt (a timeout, the link retired) kills its child.
    async fn attempt(self: &Arc<Self>) -> Result<(Arc<Session>, Manifest), String> {
        let limit = self.supervision.handshake;
        let connected = tokio::time::timeout(limit, self.handshake())
            .await
            .map_err(|_| {
                format!(
                    "did not answer its handshake within {} s \
                     (limits.upstream_handshake_timeout_secs)",
                    limit.as_secs_f64()
                )
            })??;
        let session = self.open(connected)?;
        let bounds = self.supervision.lists;
        if tokio::time::timeout(bounds.timeout, self.listen_for_changes(&session))
            .await
            .is_err()
        {
            tracing::warn!(
                "Upstream {} did not answer subscriptions/listen within {} s: its lists are \
                 read at start and after a restart only",
                self.name,
                bounds.timeout.as_secs()
            );
        }
        match listing::read(&session.peer, &self.name, bounds).await {
            Ok(manifest) => Ok((session, manifest)),
            Err(e) => {
                let why = format!("could not read its lists: {e}");
                let why = match session.child() {
                    Some(child) if !e.is_bound() => super::link::explained(child, why).await,
                    _ => why,
                };
                session.end();
                Err(why)
            }
        }
    }

    /// An attempt connected: serve `session` and its lists.
    fn connected(self: &Arc<Self>, session: Arc<Session>, manifest: Manifest) {
        let (id, pid) = (session.id, session.pid());
        let first = {
            let mut state = lock(&self.state);
            let first = matches!(state.current, Current::Connecting { .. });
            let due = state.current.reconnecting();
            if due {
                state.current = Current::Running(Arc::clone(&session));
            }
            due.then_some(first)
        };
        let Some(first) = first else {
            session.end();
            return;
        };
        self.changed.notify_waiters();
        let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        if first {
            tracing::info!(
                "Connected upstream {}{pid}: {} tools, {} resources, {} prompts",
                self.name,
                manifest.tools.len(),
                manifest.resources.len(),
                manifest.prompts.len()
            );
        } else {
            tracing::info!("Restarted upstream {}{pid}", self.name);
        }
        self.offer(manifest, !first);
        self.after_connected(id);
    }

    /// What became of session `id` while it connected: an end (or a storm) fails it now, a list
    /// change is read.
    fn after_connected(self: &Arc<Self>, id: u64) {
        let early = lock(&self.state).early.take().filter(|(s, _)| *s == id);
        let changed = lock(&self.relists).after_start.take() == Some(id);
        match early {
            Some((_, how)) => self.exited(id, &how),
            None if changed => self.start_relist(),
            None => {}
        }
    }

    /// An attempt failed (`why`): final for a one-shot command's first connection, else counted
    /// like a crash.
    fn attempt_failed(self: &Arc<Self>, why: String) {
        let next = {
            let mut state = lock(&self.state);
            let first = matches!(state.current, Current::Connecting { .. });
            if !state.current.reconnecting() {
                Next::Nothing
            } else if first && !self.supervision.retry_first {
                tracing::error!("Upstream {} failed to start: {why}", self.name);
                state.current = Current::Failed(why);
                Next::Failed
            } else {
                let what = if first { "start" } else { "restart" };
                tracing::error!("Upstream {} did not {what}: {why}", self.name);
                self.crashed(&mut state, why)
            }
        };
        self.then(next);
    }

    /// Session `id` ended (`how`: it exited, its connection closed, it stormed): when it was
    /// the one serving, that is a crash: restart, or quarantine after too many. One that ends
    /// while it connects fails once it serves (if its attempt does not fail first).
    pub(super) fn exited(self: &Arc<Self>, id: u64, how: &str) {
        let next = {
            let mut state = lock(&self.state);
            let serving = matches!(&state.current, Current::Running(s) if s.id == id);
            if !serving {
                let first = state.early.as_ref().is_none_or(|(s, _)| *s != id);
                if state.current.reconnecting() && id == self.session_id() && first {
                    state.early = Some((id, how.to_owned()));
                }
                return;
            }
            let Current::Running(session) = &state.current else {
                return;
            };
            session.end();
            tracing::error!(
                "Upstream {} failed ({how}): its requests in flight were answered with an error",
                self.name
            );
            self.crashed(&mut state, how.to_owned())
        };
        self.then(next);
    }

    /// Count a failure (`how`): try again after a backoff, or quarantine after too many in the
    /// window.
    fn crashed(&self, state: &mut State, how: String) -> Next {
        let now = Instant::now();
        let (max, window) = self.supervision.crashes;
        state.crashes.push_back(now);
        while state
            .crashes
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            state.crashes.pop_front();
        }
        let n = u32::try_from(state.crashes.len()).unwrap_or(u32::MAX);
        if n >= max {
            let times = if n == 1 {
                "once".into()
            } else {
                format!("{n} times")
            };
            let reason = format!("failed {times} in {} s (last: {how})", window.as_secs_f64());
            tracing::error!(
                "Quarantined upstream {}: {reason}; its tools are withdrawn until the \
                 configuration changes or SIGHUP",
                self.name
            );
            state.current = Current::Quarantined(reason.clone());
            return Next::Quarantined(reason);
        }
        state.current = match &state.current {
            Current::Connecting { since, .. } => Current::Connecting {
                since: *since,
                last: Some(how),
            },
            _ => Current::Restarting(how),
        };
        Next::Retry(crate::plugins::worker::restart_backoff(n))
    }

    /// After a failure: wake whoever waits on the state, then retry, or withdraw the tools.
    fn then(self: &Arc<Self>, next: Next) {
        self.changed.notify_waiters();
        match next {
            Next::Retry(delay) => self.schedule(delay),
            Next::Quarantined(reason) => {
                if let Some((config, entry)) = &self.supervision.record {
                    quarantine::write_upstream(config, entry, &reason);
                }
                self.host.plugin_health_changed();
            }
            Next::Failed | Next::Nothing => {}
        }
    }

    /// Whether session `id` is the one serving.
    fn serving(&self, id: u64) -> bool {
        matches!(&lock(&self.state).current, Current::Running(s) if s.id == id)
    }

    /// Session `id` said a list changed: re-read the lists — at once when no re-reading runs,
    /// else once more after it; after the session is serving when it is not yet (the change
    /// may have come while its lists were first read) — and count the notification: a storm of
    /// them is a failure of the session.
    pub(super) fn list_changed(self: &Arc<Self>, id: u64) {
        if id != self.session_id() {
            return;
        }
        let serving = self.serving(id);
        {
            let mut relists = lock(&self.relists);
            let now = Instant::now();
            let (since, count) = match relists.window {
                Some((since, count)) if now.duration_since(since) <= STORM_WINDOW => {
                    (since, count + 1)
                }
                _ => (now, 1),
            };
            relists.window = Some((since, count));
            if count >= STORM_NOTIFICATIONS {
                relists.window = None;
                let how = format!(
                    "sent {STORM_NOTIFICATIONS} list_changed notifications in {} s",
                    STORM_WINDOW.as_secs()
                );
                drop(relists);
                // Serving or not yet (then it fails once it serves: see `Link::exited`).
                self.exited(id, &how);
                return;
            }
            if !serving {
                relists.after_start = Some(id);
                return;
            }
        }
        self.start_relist();
    }

    /// Re-read the lists now, or once more after the re-reading that runs.
    fn start_relist(self: &Arc<Self>) {
        {
            let mut relists = lock(&self.relists);
            if relists.running {
                relists.again = true;
                return;
            }
            relists.running = true;
        }
        let link = Arc::clone(self);
        self.runtime.spawn(async move { link.relists().await });
    }

    /// Re-read the lists until no change came meanwhile, [`RELIST_INTERVAL`] apart.
    async fn relists(self: Arc<Self>) {
        loop {
            let due = lock(&self.relists).last.map(|t| t + RELIST_INTERVAL);
            if let Some(due) = due {
                tokio::time::sleep_until(due.into()).await;
            }
            lock(&self.relists).last = Some(Instant::now());
            self.relist().await;
            let mut relists = lock(&self.relists);
            if !std::mem::take(&mut relists.again) {
                relists.running = false;
                return;
            }
        }
    }

    /// Read the lists again after the upstream said they changed, within the lists' bounds: a
    /// bound passed is a failure; a session that ended meanwhile (a restart, the host stopping
    /// it) is not worth a warning.
    async fn relist(self: &Arc<Self>) {
        let bounds = self.supervision.lists;
        let Ok(session) = self.session(Some(Instant::now() + bounds.timeout)).await else {
            return;
        };
        match listing::read(&session.peer, &self.name, bounds).await {
            Ok(manifest) => self.offer(manifest, true),
            Err(e) if !self.serving(session.id) => tracing::debug!(
                "Upstream {}'s session ended while its lists were read again: {e}",
                self.name
            ),
            Err(e) if e.is_bound() => {
                self.exited(session.id, &format!("could not read its lists again: {e}"));
            }
            Err(e) => tracing::warn!(
                "Upstream {} said its lists changed, but they could not be read: {e}",
                self.name
            ),
        }
    }

    /// Lists just read: when they differ from the newest known, keep them and — once this
    /// link announces — ask the host to rebuild what it serves (pinning then decides whether a
    /// changed definition is served).
    pub(super) fn offer(&self, manifest: Manifest, log: bool) {
        {
            let mut latest = lock(&self.latest);
            if latest.as_ref() == Some(&manifest) {
                return;
            }
            *latest = Some(manifest);
        }
        if !self.announce.load(Ordering::Acquire) {
            return;
        }
        if log {
            tracing::info!(
                "Upstream {}'s lists changed: rebuilding what is served",
                self.name
            );
        }
        self.host.rescan_needed();
    }

    /// The newest lists read, once they were.
    pub(crate) fn latest(&self) -> Option<Manifest> {
        lock(&self.latest).clone()
    }

    /// From now on, lists read are offered to the host.
    pub(crate) fn announce(&self) {
        self.announce.store(true, Ordering::Release);
    }

    /// Wait on this (non-runtime) thread until the link is connected or has given up — or until
    /// `until`.
    pub(crate) fn wait_settled(self: &Arc<Self>, until: Instant) {
        let link = Arc::clone(self);
        self.block_on(async move {
            loop {
                let notified = link.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !lock(&link.state).current.reconnecting() {
                    return;
                }
                if tokio::time::timeout_at(until.into(), notified)
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
    }

    /// How its connection stands, with why.
    pub(crate) fn connection(&self) -> Connection {
        match &lock(&self.state).current {
            Current::Connecting { since, last } => Connection::Connecting {
                since_ms: unix_ms(*since),
                last_failure: last.clone(),
            },
            Current::Running(_) => Connection::Ready,
            Current::Restarting(reason) => Connection::Restarting {
                reason: reason.clone(),
            },
            Current::Quarantined(reason) => Connection::Quarantined {
                reason: reason.clone(),
            },
            Current::Failed(reason) => Connection::Failed {
                reason: reason.clone(),
            },
            Current::Retired => Connection::Stopped,
        }
    }

    /// Stop the upstream: an attempt in progress is abandoned and the current session ends (a
    /// child's process group is killed), and nothing restarts.
    pub(crate) fn retire(&self) {
        let current = std::mem::replace(&mut lock(&self.state).current, Current::Retired);
        if let Some(task) = lock(&self.connecting).take() {
            task.abort();
        }
        if let Some(child) = lock(&self.attempt).take() {
            child.kill();
        }
        if let Current::Running(session) = current {
            session.end();
        }
        if let Some(callers) = self.callers.get() {
            callers.close();
        }
        self.changed.notify_waiters();
        if let Some((config, entry)) = &self.supervision.record {
            quarantine::clear_upstream(config, entry);
        }
    }
}
