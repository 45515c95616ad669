//! The host: one handle over the four jobs of a running server — the current snapshots
//! (configuration, access policy, tool set), the plugin lifecycle (loading and rescans, in
//! [`crate::plugins::lifecycle`]), execution (in [`crate::exec`]) and change notification.
//! Transports and the protocol only ever talk to a [`Host`].

pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use arc_swap::ArcSwap;
use serde_json::{Value, json};

use crate::access::{Access, AccessError};
use crate::config::Config;
pub use crate::exec::{CallError, CallOptions, RequestContext};
use crate::exec::{CallState, Executor, ToolResult};
use crate::plugins::LoadError;
pub use crate::plugins::backend::Change;
use crate::plugins::backend::{DataDirError, HostCallbacks, NestedCallError};
use crate::plugins::discovery::{self, Candidate};
pub use crate::plugins::lifecycle::RescanReport;
use crate::plugins::lifecycle::{Loader, RuntimeDirError};
use crate::policy::{Policy, PolicyError};
use crate::registry::{BuildMemory, Registry, Tool};
use crate::telemetry::Telemetry;

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The auth or agents configuration is unusable.
    #[error("invalid auth or agents configuration: {0}")]
    Access(#[from] AccessError),
    /// The runtime directory for private plugin copies could not be created.
    #[error(transparent)]
    RuntimeDir(#[from] RuntimeDirError),
    /// A call policy rule or budget is unusable.
    #[error("invalid call policy: {0}")]
    Policy(#[from] PolicyError),
}

/// Changes clients may listen for, from [`Host::changes`].
#[derive(Debug)]
pub struct Changes(tokio::sync::broadcast::Receiver<Change>);

impl Changes {
    /// Wait for the next change; `None` once the host is gone. Changes missed while busy count as
    /// every list changing (resource updates missed then are lost, and logged).
    pub async fn next(&mut self) -> Option<Change> {
        use tokio::sync::broadcast::error::RecvError;
        match self.0.recv().await {
            Ok(change) => Some(change),
            Err(RecvError::Lagged(n)) => {
                tracing::warn!("a listener fell {n} changes behind: announcing every list");
                Some(Change::ALL_LISTS)
            }
            Err(RecvError::Closed) => None,
        }
    }
}

/// How to start a host.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// The `mcp-host` executable used for child-process probes (`None`: no probing, e.g. in a
    /// library user that trusts its files).
    pub probe_exe: Option<PathBuf>,
    /// Where metrics and audit records go (default: metrics only, no audit log).
    pub telemetry: Option<Arc<Telemetry>>,
    /// Load plugins that allow it at their first call, when the configuration's
    /// `load_on_first_call` agrees (`serve` does; commands that inspect plugins load them all).
    pub load_on_first_call: bool,
    /// The command line's layer over the configuration, applied at start and at every reload.
    pub overrides: crate::config::Overrides,
    /// Connect upstream servers in the background (`serve` does): start-up never waits for one,
    /// its tools join when it is ready, and a failed first connection is retried like a crash.
    /// Otherwise (commands that read the tool set once) start-up waits for each upstream to be
    /// ready or to fail, within its handshake and lists timeouts.
    pub connect_upstreams_in_background: bool,
}

/// A running tool host.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("tools", &self.inner.registry.load().len())
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// The configuration in force.
    config: ArcSwap<Config>,
    /// The access policy built from it.
    access: ArcSwap<Access>,
    /// The tool set.
    registry: ArcSwap<Registry>,
    /// Serializes rescans (start-up, file changes, SIGHUP).
    reload_lock: Mutex<()>,
    loader: Loader,
    exec: Executor,
    telemetry: Arc<Telemetry>,
    changes: tokio::sync::broadcast::Sender<Change>,
    /// Where plugins' announcements go besides this host's listeners (other replicas).
    forward: std::sync::OnceLock<Forward>,
    /// The command line's layer, applied over every configuration read.
    overrides: crate::config::Overrides,
    /// What this host's registry builds remember across rescans (schemas checked, problems
    /// reported).
    memory: BuildMemory,
    /// The rebuilds plugins asked for and not run yet.
    pending: Mutex<Pending>,
}

/// The rebuilds plugins asked for (a rescan, a refresh) and not run yet: a flag each, however
/// many times they were asked, and at most one thread that runs them — never a thread per
/// request (an upstream's `list_changed` storm once made thousands).
#[derive(Debug, Default)]
struct Pending {
    rescan: bool,
    refresh: bool,
    /// A thread runs them.
    worker: bool,
}

/// Rebuild kinds a plugin may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rebuild {
    /// Rescan (what a backend serves changed).
    Rescan,
    /// Rebuild from the plugins loaded (a plugin's health changed).
    Refresh,
}

impl Inner {
    /// Ask for `rebuild` on the rebuild thread, starting it when none runs.
    fn request(self: &Arc<Self>, rebuild: Rebuild) {
        {
            let mut pending = crate::plugins::lock(&self.pending);
            match rebuild {
                Rebuild::Rescan => pending.rescan = true,
                Rebuild::Refresh => pending.refresh = true,
            }
            if pending.worker {
                return;
            }
            pending.worker = true;
        }
        let inner = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("mcp-rebuild".into())
            .spawn(move || run_pending(&inner));
        if let Err(e) = spawned {
            crate::plugins::lock(&self.pending).worker = false;
            tracing::error!("cannot rebuild the tool set: {e}");
        }
    }
}

/// The rebuild thread: run what is pending (a rescan covers a refresh) until nothing is, off
/// the callers' threads (a rebuild waits for any rescan in progress).
fn run_pending(inner: &Weak<Inner>) {
    loop {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let rebuild = {
            let mut pending = crate::plugins::lock(&inner.pending);
            let rescan = std::mem::take(&mut pending.rescan);
            let refresh = std::mem::take(&mut pending.refresh);
            if !rescan && !refresh {
                pending.worker = false;
                return;
            }
            if rescan {
                Rebuild::Rescan
            } else {
                Rebuild::Refresh
            }
        };
        let host = Host { inner };
        match rebuild {
            Rebuild::Rescan => {
                host.rescan(None);
            }
            Rebuild::Refresh => host.refresh(),
        }
    }
}

/// Where a host forwards its plugins' announcements.
type Forward = Box<dyn Fn(&Change) + Send + Sync>;

impl Inner {
    /// Users' upstream credentials, when the host keeps any.
    fn user_credentials(&self) -> Option<Arc<crate::access::upstream::gateway::Credentials>> {
        self.loader.credentials.get().cloned()
    }

    /// Tell listeners about a change.
    fn announce(&self, change: Change) {
        // No receivers is fine: nobody is listening.
        let _ = self.changes.send(change);
    }
}

/// The plugins' way back into the host (nested calls, change announcements). Weak: plugins live
/// inside the host.
struct Callbacks(Weak<Inner>);

impl HostCallbacks for Callbacks {
    fn call_nested(
        &self,
        parent: Option<&Arc<CallState>>,
        name: &str,
        args: &str,
    ) -> Result<String, NestedCallError> {
        let inner = self.0.upgrade().ok_or(NestedCallError::ShuttingDown)?;
        let max_depth = inner.config.load().limits.max_call_depth;
        let registry = inner.registry.load_full();
        inner
            .exec
            .call_nested(&registry, max_depth, parent, name, args)
    }

    fn announce(&self, change: Change) {
        if let Some(inner) = self.0.upgrade() {
            if let Some(forward) = inner.forward.get() {
                forward(&change);
            }
            inner.announce(change);
        }
    }

    fn data_dir(&self, plugin: &str) -> Result<PathBuf, DataDirError> {
        let inner = self.0.upgrade().ok_or(DataDirError::ShuttingDown)?;
        plugin_data_dir(&inner.config.load(), plugin)
    }

    fn rescan_needed(&self) {
        if let Some(inner) = self.0.upgrade() {
            inner.request(Rebuild::Rescan);
        }
    }

    fn plugin_health_changed(&self) {
        if let Some(inner) = self.0.upgrade() {
            inner.request(Rebuild::Refresh);
        }
    }

    fn credential(
        &self,
        plugin: &str,
        call: &Arc<CallState>,
        provider: &str,
    ) -> Result<String, crate::plugins::host_request::HostRequestError> {
        let inner = self
            .0
            .upgrade()
            .ok_or(crate::plugins::host_request::HostRequestError::NoAnswer)?;
        // What the plugin's manifest declares (the registry's rows of the plugin carry it).
        let declared = inner
            .registry
            .load()
            .entries
            .iter()
            .find(|e| e.plugin.as_deref() == Some(plugin))
            .map(|e| e.declared.credentials.clone())
            .unwrap_or_default();
        let credentials = inner.user_credentials();
        crate::plugins::credential::answer(credentials.as_ref(), plugin, &declared, call, provider)
    }
}

/// Plugin `plugin`'s data directory (`<data_dir>/<plugin>` unless its settings name one), created
/// (owner-only on Unix: plugins keep their users' data there). A plugin name that is not a plain
/// file name gets no directory.
fn plugin_data_dir(config: &Config, plugin: &str) -> Result<PathBuf, DataDirError> {
    let plain = !plugin.is_empty()
        && plugin != "."
        && plugin != ".."
        && plugin
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !plain {
        return Err(DataDirError::NotAName(plugin.into()));
    }
    let dir = config.plugin_data_dir(plugin);
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir).map_err(|e| DataDirError::Create {
        dir: dir.clone(),
        reason: e.to_string(),
    })?;
    Ok(dir)
}

/// The guardrails of `config`, compiled: the global ones, each plugin's and each agent's.
fn guardrails_of(config: &Config) -> crate::policy::guardrails::Guardrails {
    crate::policy::guardrails::Guardrails::compile(
        &config.guardrails,
        config.plugins.iter().map(|(n, s)| (n, &s.guardrails)),
        config.agents.iter().map(|(n, s)| (n, &s.guardrails)),
    )
}

impl Host {
    /// Discover, probe and load every plugin in the configured tool directories. Started inside a
    /// tokio runtime, the host reads its plugin workers' channels on that runtime (else on a thread
    /// per worker).
    pub fn start(mut config: Config, options: HostOptions) -> Result<Host, HostError> {
        options.overrides.apply(&mut config);
        // A rule that does not compile stops start-up before any plugin loads.
        let policy = Policy::compile(&config.policy)?;
        let telemetry = options.telemetry.unwrap_or_default();
        let loader = Loader::new(
            &config,
            options.probe_exe.as_deref(),
            Arc::clone(&telemetry),
            options.load_on_first_call,
            options.connect_upstreams_in_background,
        )?;
        let access = Access::from_config(&config)?;
        let inner = Arc::new(Inner {
            access: ArcSwap::from_pointee(access),
            reload_lock: Mutex::new(()),
            loader,
            exec: Executor::new(&config.limits, Arc::clone(&telemetry)),
            telemetry,
            changes: tokio::sync::broadcast::channel(64).0,
            registry: ArcSwap::from_pointee(Registry::default()),
            config: ArcSwap::from_pointee(config),
            forward: std::sync::OnceLock::new(),
            overrides: options.overrides,
            memory: BuildMemory::default(),
            pending: Mutex::default(),
        });
        inner.exec.set_policy(Arc::new(policy));
        inner
            .exec
            .set_guardrails(Arc::new(guardrails_of(&inner.config.load())));
        let host = Host { inner };
        // A rescan an upstream asks for meanwhile waits for the first tool set.
        let serial = host
            .inner
            .reload_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let started = Instant::now();
        let config = host.config();
        let loaded = host.load(discovery::scan(&config.tool_dirs));
        let registry = Registry::build(loaded, &config, &host.inner.memory);
        tracing::info!(
            "Serving {} tools from {} plugins (loaded in {} ms)",
            registry.len(),
            registry.plugins.len(),
            started.elapsed().as_millis()
        );
        warn_missing_dirs(&config);
        // Upstream servers connecting in the background serve nothing yet: not worth a warning.
        let connecting = registry
            .plugins
            .iter()
            .any(|p| p.candidate.upstream.is_some());
        if registry.is_empty() && !config.tool_dirs.is_empty() && !connecting {
            let dirs: Vec<String> = config
                .tool_dirs
                .iter()
                .map(|d| d.path.display().to_string())
                .collect();
            tracing::warn!(
                "No tools to serve: no plugin found in {} ({})",
                dirs.join(", "),
                config_origin(&config)
            );
        }
        host.inner.exec.set_filters(registry.filters.clone());
        host.inner.registry.store(Arc::new(registry));
        drop(serial);
        Ok(host)
    }

    fn callbacks(&self) -> Arc<dyn HostCallbacks> {
        Arc::new(Callbacks(Arc::downgrade(&self.inner)))
    }

    /// Probe then load candidates (side by side; the results in the candidates' order), with the
    /// current configuration.
    pub fn load(&self, candidates: Vec<Candidate>) -> crate::plugins::lifecycle::Loaded {
        self.inner
            .loader
            .load(candidates, &self.config(), &self.callbacks())
    }

    /// The current tool set.
    pub fn registry(&self) -> Arc<Registry> {
        self.inner.registry.load_full()
    }

    /// Changes from now on, for `list_changed` and `resources/updated` notifications.
    pub fn changes(&self) -> Changes {
        Changes(self.inner.changes.subscribe())
    }

    /// Hand what plugins announce to `forward` as well (once: e.g. to tell other replicas);
    /// rescans are not forwarded, every replica watching the same tool directories rescans itself.
    pub fn forward_announcements(&self, forward: impl Fn(&Change) + Send + Sync + 'static) {
        if self.inner.forward.set(Box::new(forward)).is_err() {
            tracing::debug!("plugin announcements are already forwarded");
        }
    }

    /// Tell this host's listeners about a change made elsewhere (another replica's plugin).
    pub fn announce(&self, change: Change) {
        self.inner.announce(change);
    }

    /// The configuration the host runs with now.
    pub fn config(&self) -> Arc<Config> {
        self.inner.config.load_full()
    }

    /// Metrics and the audit log.
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.inner.telemetry
    }

    /// Users' upstream credentials (`server.auth`), once [`Host::open_credentials`] ran.
    pub fn credentials(&self) -> Option<Arc<crate::access::upstream::gateway::Credentials>> {
        self.inner.loader.credentials.get().cloned()
    }

    /// Keep users' upstream credentials in the store's vault `backend` (`replica` names this
    /// process in its refresh leases): once, when the store is open.
    pub fn open_credentials(
        &self,
        backend: Arc<dyn crate::access::upstream::vault::VaultBackend>,
        replica: &str,
    ) -> Result<(), String> {
        if self.inner.loader.credentials.get().is_some() {
            return Ok(());
        }
        let credentials = crate::access::upstream::gateway::Credentials::over(
            backend,
            Arc::clone(&self.inner.telemetry),
            &self.config(),
            replica,
        )?;
        let _ = self.inner.loader.credentials.set(Arc::clone(&credentials));
        crate::access::upstream::gateway::Credentials::start_refresher(&credentials);
        sweep_credentials(credentials, None, self.config());
        Ok(())
    }

    /// The current access policy (authentication and agents).
    pub fn access(&self) -> Arc<Access> {
        self.inner.access.load_full()
    }

    /// Re-read the configuration from where it came from (file, overlay and environment: every
    /// layer, then the command line's overrides) and rescan with it, applying any difference from
    /// what is loaded. A configuration that no longer loads is logged and the running one kept;
    /// the plugin files are rescanned anyway. When neither the configuration nor any plugin file
    /// changed (the watcher's catch-up at start, a SIGHUP with nothing to apply) the tool set in
    /// force stays: it was built from the same inputs, and rebuilding it re-checked every
    /// definition (at start, as much work again as the start's own build).
    pub fn reload(&self) -> RescanReport {
        let source = self.config().source.clone();
        let config = match Config::load(source.as_deref()) {
            Ok(mut c) => {
                self.inner.overrides.apply(&mut c);
                Some(c)
            }
            Err(e) => {
                tracing::error!("Not applying the changed configuration: {e}");
                None
            }
        };
        self.rescan_keeping(config, true)
    }

    /// Give quarantined plugins another chance at the next rescan (SIGHUP does), even when their
    /// file did not change (a changed file always gets one).
    pub fn retry_quarantined(&self) {
        self.inner.loader.retry_quarantined();
    }

    /// Rescan the tool directories (with `config` when the configuration changed) and swap in the new
    /// tool set. Unchanged files keep their loaded version; changed ones are probed and loaded from a
    /// fresh private copy; a file that fails keeps its previous good version in service. Calls
    /// already running finish on the version they started on.
    pub fn rescan(&self, config: Option<Config>) -> RescanReport {
        self.rescan_keeping(config, false)
    }

    /// [`Host::rescan`]; with `keep_unchanged`, a rescan that finds the configuration and every
    /// plugin as they were (the same loaded versions, the same failures) keeps the tool set in
    /// force instead of building the same one again. A rebuild asked for by a plugin (its lists
    /// changed while its file did not) passes `false`.
    fn rescan_keeping(&self, config: Option<Config>, keep_unchanged: bool) -> RescanReport {
        let inner = &self.inner;
        let _serial = inner.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let config_changed = config.is_some_and(|c| self.apply_config(c));
        let config = self.config();
        let old = self.registry();
        let (sources, mut report) = inner
            .loader
            .rescan(&config, &old.plugins, &self.callbacks());
        if keep_unchanged && !config_changed && same_sources(&sources, &old.sources) {
            return report;
        }
        let registry = Registry::build_logged(sources, &config, &inner.memory, false);
        report.tools_changed = !registry.same_tools(&old);
        report.resources_changed = !registry.same_resources(&old);
        report.prompts_changed = !registry.same_prompts(&old);
        drop(old);
        inner.exec.set_filters(registry.filters.clone());
        inner.registry.store(Arc::new(registry));
        inner.telemetry.metrics().reloaded(report.reloaded.len());
        // Agents or access may have changed what clients see, too: announce every list then.
        if config_changed {
            inner.announce(Change::ALL_LISTS);
        } else if report.tools_changed
            || report.versions_changed()
            || report.resources_changed
            || report.prompts_changed
        {
            inner.announce(Change::Lists {
                tools: report.tools_changed || report.versions_changed(),
                resources: report.resources_changed,
                prompts: report.prompts_changed,
            });
        }
        report
    }

    /// Rebuild the tool set from the plugins already loaded (no file is read), e.g. after a plugin
    /// was quarantined, and tell clients when what is served changed.
    pub fn refresh(&self) {
        let inner = &self.inner;
        let _serial = inner.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.registry();
        let registry =
            Registry::build_logged(old.sources.clone(), &self.config(), &inner.memory, false);
        let change = Change::Lists {
            tools: !registry.same_tools(&old),
            resources: !registry.same_resources(&old),
            prompts: !registry.same_prompts(&old),
        };
        inner.exec.set_filters(registry.filters.clone());
        inner.registry.store(Arc::new(registry));
        if change != Change::NONE {
            inner.announce(change);
        }
    }

    /// Swap in a new configuration and its access policy; whether anything changed. A configuration
    /// whose access policy cannot be built is not applied.
    fn apply_config(&self, config: Config) -> bool {
        // A policy that does not compile keeps the rules in force (and the whole old configuration).
        let policy = match Policy::compile(&config.policy) {
            Ok(policy) => policy,
            Err(e) => {
                tracing::error!(
                    "Not applying the changed configuration: {e}; the call policy in force stays"
                );
                return false;
            }
        };
        match Access::from_config(&config) {
            Ok(access) => {
                let old = self.inner.config.load_full();
                for key in old.start_only_changes(&config) {
                    tracing::warn!(
                        "Configuration key `{key}` changed, but it applies at start only: \
                         restart mcp-host to use the new value"
                    );
                }
                if old.tool_dirs != config.tool_dirs {
                    warn_missing_dirs(&config);
                }
                let changed = *old != config;
                self.inner.exec.set_limits(&config.limits);
                if old.policy != config.policy {
                    tracing::info!("Call policy reloaded: {} rules", config.policy.rules.len());
                }
                self.inner.exec.set_policy(Arc::new(policy));
                self.inner
                    .exec
                    .set_guardrails(Arc::new(guardrails_of(&config)));
                self.inner.access.store(Arc::new(access));
                if let Some(credentials) = self.inner.loader.credentials.get() {
                    credentials.reconfigure(&config);
                    crate::access::upstream::gateway::Credentials::start_refresher(credentials);
                    let now = Arc::new(config.clone());
                    sweep_credentials(Arc::clone(credentials), Some(Arc::clone(&old)), now);
                }
                self.inner.config.store(Arc::new(config));
                changed
            }
            Err(e) => {
                tracing::error!("Not applying the changed configuration: {e}");
                false
            }
        }
    }

    /// What the call policy would decide for a call of tool `name` with `args` by `user` (with
    /// JWT `claims`) through `agent`, without calling it.
    pub fn explain_policy(
        &self,
        name: &str,
        args: &Value,
        user: Option<&str>,
        agent: Option<&str>,
        claims: Option<&crate::access::auth::Claims>,
    ) -> Result<crate::exec::Explained, CallError> {
        let tool = self
            .inner
            .registry
            .load()
            .view(agent)
            .get(name)
            .cloned()
            .ok_or_else(|| CallError::UnknownTool(name.to_owned()))?;
        Ok(self.inner.exec.explain(&tool, args, user, agent, claims))
    }

    /// Call tool `name` with `args` (an object, or `None` for no arguments).
    ///
    /// Protocol-level refusals are `Err`; everything the tool or its arguments got wrong is an
    /// `isError` result, as MCP asks (SEP-1303). [`Host::call_tool`] keeps the plugin's answer as
    /// the JSON text it wrote, without parsing it.
    pub async fn call(
        &self,
        name: &str,
        args: Option<Value>,
        opts: CallOptions,
    ) -> Result<Value, CallError> {
        let agent = opts.request.agent().map(|a| a.name.as_str());
        let tool = self
            .inner
            .registry
            .load()
            .view(agent)
            .get(name)
            .cloned()
            .ok_or_else(|| CallError::UnknownTool(name.to_owned()))?;
        self.call_tool(tool, args.as_ref(), opts)
            .await
            .map(ToolResult::into_value)
    }

    /// [`Host::call`] for a tool already looked up in [`Host::registry`] (the protocol does, to apply
    /// agent views and capability checks first).
    pub async fn call_tool(
        &self,
        tool: Arc<Tool>,
        args: Option<&Value>,
        opts: CallOptions,
    ) -> Result<ToolResult, CallError> {
        self.inner.exec.call(tool, args, opts).await
    }

    /// Read a resource, render a prompt or complete an argument in the plugin of `slot` (see
    /// [`crate::exec::Executor::invoke`]).
    pub async fn invoke(
        &self,
        slot: &Arc<crate::registry::PluginSlot>,
        envelope: &mcp_plugin_sdk::wire::CallEnvelope,
        caller: mcp_plugin_sdk::wire::CallerNeed,
        timeout: std::time::Duration,
        what: &str,
        opts: CallOptions,
    ) -> Result<mcp_plugin_sdk::wire::EnvelopeOutcome, crate::exec::InvokeError> {
        self.inner
            .exec
            .invoke(slot, envelope, caller, timeout, what, opts)
            .await
    }

    /// Count the call policy's budgets with `counter`, shared by the replicas (the store's), from
    /// now on; on the runtime.
    pub fn share_budgets(&self, counter: Arc<dyn crate::policy::budget::SharedBudgets>) {
        self.inner.exec.share_budgets(counter);
    }

    /// The call policy's decision for a resource read or a prompt before it runs (see
    /// [`crate::exec::Executor::police_request`]): the budget slot to hold while it runs.
    pub async fn police_request(
        &self,
        subject: crate::policy::Subject<'_>,
        plugin: &str,
        args: impl FnOnce() -> Value,
        opts: &CallOptions,
    ) -> Result<Option<crate::policy::budget::BudgetPermit>, crate::exec::InvokeError> {
        self.inner
            .exec
            .police_request(subject, plugin, args, opts)
            .await
    }

    /// Whether the call policy refuses a read or a prompt outright (see
    /// [`crate::exec::Executor::denies`]).
    pub fn policy_denies(
        &self,
        subject: crate::policy::Subject<'_>,
        plugin: &str,
        args: &Value,
        request: &crate::exec::RequestContext,
    ) -> bool {
        self.inner.exec.denies(subject, plugin, args, request)
    }

    /// Every upstream server served now, by name, with how its connection stands (connecting
    /// since when, ready, restarting, quarantined or failed, and why): what `/healthz` and the
    /// console show.
    pub fn upstreams(&self) -> Vec<(String, crate::plugins::backend::Connection)> {
        self.registry()
            .plugins
            .iter()
            .filter_map(|slot| Some((slot.backend.name().to_owned(), slot.backend.connection()?)))
            .collect()
    }

    /// [`Host::upstreams`] as JSON: `name`, `state` and the one-line `detail` of each.
    pub fn upstreams_json(&self) -> Value {
        self.upstreams()
            .into_iter()
            .map(|(name, connection)| {
                json!({
                    "name": name,
                    "state": connection.state(),
                    "detail": connection.describe(),
                })
            })
            .collect()
    }

    /// The calls waiting for an admin's approval in the console (`approver: console`).
    pub fn approvals(&self) -> &crate::exec::approval::Approvals {
        self.inner.exec.approvals()
    }

    /// Run every loaded plugin's shutdown hook (images stay mapped).
    pub fn shutdown(&self) {
        for slot in &self.registry().plugins {
            slot.retire();
        }
    }
}

/// Whether a rescan found what the tool set in force was built from: the same candidates, each
/// with the same loaded version (the same slot) or the same failure.
fn same_sources(now: &crate::plugins::Sources, before: &crate::plugins::Sources) -> bool {
    now.len() == before.len()
        && now.iter().zip(before).all(|((c, r), (b, was))| {
            c == b
                && match (r, was) {
                    (Ok(slot), Ok(old)) => Arc::ptr_eq(slot, old),
                    (Err(e), Err(old)) => e.to_string() == old.to_string(),
                    _ => false,
                }
        })
}

/// Where the configuration came from and how its relative paths resolve, for messages about
/// what it names.
fn config_origin(config: &Config) -> String {
    match &config.source {
        Some(file) => format!(
            "config file {}; relative paths resolve against {}",
            file.display(),
            config.base_dir.display()
        ),
        None => format!(
            "no config file: neither --config nor MCP_HOST_CONFIG given and no {} in {}, so the \
             defaults apply, relative to that directory",
            crate::config::DEFAULT_CONFIG,
            config.base_dir.display()
        ),
    }
}

/// A warning for each tool directory that does not exist (its plugins cannot be served); one marked
/// `optional` (it may be made later, and is watched for) is only noted.
fn warn_missing_dirs(config: &Config) {
    for dir in config
        .tool_dirs
        .iter()
        .filter(|d| !d.is_upstream() && !d.path.is_dir())
    {
        let why = if dir.path.exists() {
            "is not a directory"
        } else if dir.optional {
            tracing::info!(
                "Optional tool directory {} does not exist yet: once it is made, plugins \
                 dropped there are served",
                dir.path.display()
            );
            continue;
        } else {
            "does not exist"
        };
        tracing::warn!(
            "Tool directory {} {why}: nothing is served from it ({})",
            dir.path.display(),
            config_origin(config)
        );
    }
}

/// Test-load one file (signature check where its directory requires one, child-process probe, then
/// as its tool directory runs plugins — sandboxed when it is in none — with its config section)
/// and describe it: its build fingerprint, manifest and signer, and the names the registry would
/// refuse to serve (`refused`: invalid or duplicate names). What `mcp-host check` prints.
pub fn check_file(config: &Config, file: &Path, options: &HostOptions) -> Result<Value, LoadError> {
    // `upstream:<name>`: the upstream server entry of that name (started, listed, stopped).
    if let Some(entry) = config
        .tool_dirs
        .iter()
        .position(|d| d.is_upstream() && d.path == file)
    {
        return check_upstream(config, entry, file, options);
    }
    let (config, candidate) = check_candidate(config, file);
    let host = Host::start(config, options.clone()).map_err(|e| LoadError::Copy(e.to_string()))?;
    let loaded = host.load(vec![candidate]);
    let refused = refused_names(&host, &loaded);
    let (_, result) = loaded
        .into_iter()
        .next()
        .ok_or_else(|| LoadError::Probe("nothing loaded".into()))?;
    let slot = result?;
    // How it runs, with the permissions a sandbox would grant even when it is not sandboxed.
    let mut run = serde_json::to_value(&slot.run).unwrap_or_default();
    if slot.run.permissions.is_none() {
        let grant = crate::plugins::worker::Grant::of(&host.config(), slot.backend.name(), file);
        run["permissions"] = serde_json::to_value(grant).unwrap_or_default();
    }
    Ok(json!({
        "file": file,
        "signature": slot.signer,
        "build": slot.backend.build(),
        "manifest": slot.backend.manifest(),
        "run": run,
        "refused": refused,
    }))
}

/// [`check_file`] for upstream server entry `entry` (`file` is its `upstream:<name>`): a host
/// serving that entry alone, started, described and stopped.
fn check_upstream(
    config: &Config,
    entry: usize,
    file: &Path,
    options: &HostOptions,
) -> Result<Value, LoadError> {
    let mut config = config.clone();
    let dir = config.tool_dirs.swap_remove(entry);
    config.tool_dirs = vec![dir];
    let host = Host::start(config, options.clone()).map_err(|e| LoadError::Copy(e.to_string()))?;
    let registry = host.registry();
    let (_, result) = registry
        .sources
        .first()
        .ok_or_else(|| LoadError::Probe("nothing loaded".into()))?;
    let slot = result.clone()?;
    // Its connection, as `list` shows it: a failure is the check's error, with its reason.
    if let Some(connection) = slot.backend.connection()
        && connection != crate::plugins::backend::Connection::Ready
    {
        host.shutdown();
        return Err(LoadError::Probe(format!(
            "upstream {} {}",
            slot.backend.name(),
            connection.describe()
        )));
    }
    let report = json!({
        "file": file,
        "signature": null,
        "build": slot.backend.build(),
        "manifest": slot.backend.manifest(),
        "run": slot.run,
        "refused": [],
    });
    host.shutdown();
    Ok(report)
}

/// The configuration (no tool directories, the file's signature rule) and the candidate that
/// [`check_file`] loads `file` as: a file in a tool directory gets that directory's prefix,
/// isolation and signature rule; any other file runs sandboxed.
fn check_candidate(config: &Config, file: &Path) -> (Config, Candidate) {
    let mut config = config.clone();
    let dir = std::path::absolute(file)
        .unwrap_or_else(|_| file.to_path_buf())
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let listed = config
        .tool_dirs
        .iter()
        .find(|d| d.path == dir || std::fs::canonicalize(&d.path).ok() == dir.canonicalize().ok())
        .cloned();
    config.trust.require_signature = config.requires_signature(usize::MAX, &dir);
    config.tool_dirs.clear();
    let candidate = Candidate {
        dir_index: 0,
        dir,
        prefix: listed
            .as_ref()
            .map(|d| d.prefix.clone())
            .unwrap_or_default(),
        // A file outside every tool directory is nobody's trusted plugin: it is opened as an
        // untrusted one would be, in a sandboxed probe and worker, never in this process.
        isolation: match &listed {
            Some(d) => d.isolation,
            None => Some(crate::config::Isolation::Sandbox),
        },
        path: file.to_path_buf(),
        upstream: None,
    };
    (config, candidate)
}

/// The names the registry would refuse to serve from `loaded`: invalid ones, and one defined
/// twice in the file.
fn refused_names(host: &Host, loaded: &crate::registry::Sources) -> Vec<Value> {
    Registry::build_logged(loaded.clone(), &host.config(), &host.inner.memory, false)
        .entries
        .iter()
        .filter_map(|e| {
            let why = match &e.status {
                crate::registry::Status::InvalidName(why) => format!("invalid name: {why}"),
                crate::registry::Status::OverriddenBy(_) => "defined twice in this plugin".into(),
                _ => return None,
            };
            Some(json!({"name": e.tool, "kind": e.kind, "why": why}))
        })
        .collect()
}

/// Revoke and delete, in the background, the users' upstream credentials `config` (after
/// `previous`, at a reload) leaves to nobody: a removed secret, a changed upstream identity.
fn sweep_credentials(
    credentials: Arc<crate::access::upstream::gateway::Credentials>,
    previous: Option<Arc<Config>>,
    config: Arc<Config>,
) {
    let Some(runtime) = credentials.runtime() else {
        return;
    };
    runtime.spawn(async move {
        if let Err(e) = credentials.sweep(previous.as_deref(), &config).await {
            tracing::warn!("Upstream credentials were not swept: {e}");
        }
    });
}
