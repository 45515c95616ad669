//! The host: discovery, probing and loading wired into a [`Registry`], and the call path every
//! transport uses (validation, caller check, limits, timeout, cancellation, result mapping).

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use mcp_plugin_sdk::UserInfo;
use mcp_plugin_sdk::wire::CallerNeed;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::config::Config;
use crate::exec::pool::WorkerPool;
use crate::exec::{CancelFlag, EventSink};
use crate::plugins::discovery::{self, Candidate};
use crate::plugins::host_api::{CurrentCall, HostCallContext, HostCallbacks};
use crate::plugins::image::{LoadContext, LoadError, Plugin};
use crate::plugins::probe::Prober;
use crate::registry::{PluginSlot, Registry, Tool};

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The auth or agents configuration is unusable.
    #[error("invalid auth or agents configuration: {0}")]
    Access(#[from] crate::access::AccessError),
    /// The runtime directory for private plugin copies could not be created.
    #[error("cannot create runtime directory {path}: {source}")]
    RuntimeDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Why a call was refused before any tool ran (protocol-level errors; tool failures are results).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// No served tool has this name (JSON-RPC -32602).
    #[error("unknown tool: {0}")]
    UnknownTool(String),
    /// The tool takes `UserInfo` and the call has no verified caller.
    #[error("tool {0} requires an authenticated caller")]
    CallerRequired(String),
}

/// Tool-set changes, from [`Host::changes`].
#[derive(Debug)]
pub struct Changes(tokio::sync::broadcast::Receiver<u64>);

impl Changes {
    /// Wait for the next change (changes missed while busy count as one); `false` once the host
    /// is gone.
    pub async fn next(&mut self) -> bool {
        use tokio::sync::broadcast::error::RecvError;
        match self.0.recv().await {
            Ok(_) | Err(RecvError::Lagged(_)) => true,
            Err(RecvError::Closed) => false,
        }
    }
}

/// What a rescan changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RescanReport {
    /// Files loaded as new versions (or new plugins).
    pub reloaded: Vec<PathBuf>,
    /// Files that went away.
    pub removed: Vec<PathBuf>,
    /// Files that failed to load (their previous version, if any, stays).
    pub failed: Vec<PathBuf>,
    /// Whether the served tool list changed.
    pub tools_changed: bool,
}

/// Per-call inputs besides the tool name and arguments.
#[derive(Clone, Default)]
pub struct CallOptions {
    /// The verified caller, if any.
    pub caller: Option<UserInfo>,
    /// Cancellation shared with the transport (client cancel, closed stream).
    pub cancel: CancelFlag,
    /// Where progress and log events go.
    pub events: Option<EventSink>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

/// How to start a host.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// The `mcp-host` executable used for child-process probes (`None`: no probing, e.g. in a
    /// library user that trusts its files).
    pub probe_exe: Option<PathBuf>,
}

/// A running tool host.
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("tools", &self.inner.registry.load().len())
            .finish_non_exhaustive()
    }
}

struct HostInner {
    config: ArcSwap<Config>,
    access: ArcSwap<crate::access::Access>,
    /// Serializes rescans (start-up, file changes, SIGHUP).
    reload_lock: std::sync::Mutex<()>,
    /// Files that failed to load, with their stamp then: unchanged, they are not retried (nor
    /// re-logged) on every rescan.
    failed: std::sync::Mutex<
        std::collections::HashMap<PathBuf, (Option<crate::registry::FileStamp>, LoadError)>,
    >,
    /// Files known to pass the probe (when probing and a cache location are configured).
    probe_cache: Option<std::sync::Mutex<crate::plugins::probe::ProbeCache>>,
    /// Plugin images loaded since start (never unloaded), for the `max_reloads` guard.
    images: std::sync::atomic::AtomicUsize,
    changes: tokio::sync::broadcast::Sender<u64>,
    generation: std::sync::atomic::AtomicU64,
    registry: ArcSwap<Registry>,
    pool: WorkerPool,
    global: Arc<Semaphore>,
    runtime_dir: RuntimeDir,
    prober: Option<Prober>,
}

enum RuntimeDir {
    Temp(tempfile::TempDir),
    Fixed(PathBuf),
}

impl RuntimeDir {
    fn path(&self) -> &std::path::Path {
        match self {
            RuntimeDir::Temp(t) => t.path(),
            RuntimeDir::Fixed(p) => p,
        }
    }
}

/// The plugins' way back into the host for nested `call_tool`.
struct CallbackHandle(Weak<HostInner>);

impl HostCallbacks for CallbackHandle {
    fn call_nested(&self, name: &str, args: &str) -> Result<String, String> {
        let inner = self.0.upgrade().ok_or("the host is shutting down")?;
        inner.call_nested(name, args)
    }

    fn notify_tools_changed(&self) {
        if let Some(inner) = self.0.upgrade() {
            inner.announce_change();
        }
    }
}

impl Host {
    /// Discover, probe and load every plugin in the configured tool directories.
    pub fn start(config: Config, options: HostOptions) -> Result<Host, HostError> {
        let runtime_dir = match &config.runtime_dir {
            Some(dir) => {
                let path = dir.join(format!("mcp-host-{}", std::process::id()));
                std::fs::create_dir_all(&path).map_err(|source| HostError::RuntimeDir {
                    path: path.clone(),
                    source,
                })?;
                RuntimeDir::Fixed(path)
            }
            None => RuntimeDir::Temp(
                tempfile::Builder::new()
                    .prefix("mcp-host-")
                    .tempdir()
                    .map_err(|source| HostError::RuntimeDir {
                        path: std::env::temp_dir(),
                        source,
                    })?,
            ),
        };
        let prober = match (&options.probe_exe, config.probe) {
            (Some(exe), true) => Some(Prober::new(exe.clone())),
            _ => None,
        };
        let access = crate::access::Access::from_config(&config)?;
        let inner = Arc::new(HostInner {
            access: ArcSwap::from_pointee(access),
            reload_lock: std::sync::Mutex::new(()),
            failed: Default::default(),
            probe_cache: prober
                .as_ref()
                .and(config.probe_cache.clone())
                .map(|p| std::sync::Mutex::new(crate::plugins::probe::ProbeCache::open(p))),
            images: std::sync::atomic::AtomicUsize::new(0),
            changes: tokio::sync::broadcast::channel(16).0,
            generation: std::sync::atomic::AtomicU64::new(0),
            pool: WorkerPool::new(config.limits.max_concurrent_calls),
            global: Arc::new(Semaphore::new(config.limits.max_concurrent_calls.max(1))),
            registry: ArcSwap::from_pointee(Registry::default()),
            config: ArcSwap::from_pointee(config),
            runtime_dir,
            prober,
        });
        let host = Host { inner };
        let started = Instant::now();
        let config = host.config();
        let candidates = discovery::scan(&config.tool_dirs);
        let loaded = host.load(candidates);
        let registry = Registry::build(loaded, &config);
        tracing::info!(
            "Serving {} tools from {} plugins (loaded in {} ms)",
            registry.len(),
            registry.plugins.len(),
            started.elapsed().as_millis()
        );
        host.inner.registry.store(Arc::new(registry));
        Ok(host)
    }

    /// Probe then load candidates, in order.
    pub fn load(
        &self,
        candidates: Vec<Candidate>,
    ) -> Vec<(Candidate, Result<Arc<PluginSlot>, LoadError>)> {
        let inner = &self.inner;
        let runtime_dir = inner.runtime_dir.path();
        // Copy first, then probe and load that same copy: the original may be replaced at any time.
        // The stamp is taken before copying, so a change racing with the copy shows up as a new one.
        let stamps: Vec<_> = candidates
            .iter()
            .map(|c| crate::registry::FileStamp::of(&c.path))
            .collect();
        let copies: Vec<Result<PathBuf, LoadError>> = candidates
            .iter()
            .map(|c| crate::plugins::image::private_copy(&c.path, runtime_dir))
            .collect();
        let mut probes: Vec<Result<(), LoadError>> =
            copies.iter().map(|c| c.clone().map(|_| ())).collect();
        if let Some(prober) = &inner.prober {
            // A file whose identity did not change across the copy, and that passed a probe with
            // that identity before, is known good: skip its child process.
            let mut cache = inner
                .probe_cache
                .as_ref()
                .map(|c| c.lock().unwrap_or_else(|p| p.into_inner()));
            let stamp_keys: Vec<Option<String>> = candidates
                .iter()
                .zip(&stamps)
                .map(|(c, before)| {
                    let after = crate::registry::FileStamp::of(&c.path);
                    before
                        .as_ref()
                        .filter(|b| Some(*b) == after.as_ref())
                        .map(|b| b.key())
                })
                .collect();
            let (index, files): (Vec<usize>, Vec<PathBuf>) = copies
                .iter()
                .enumerate()
                .filter(|(i, _)| {
                    let known = match (&cache, &stamp_keys[*i]) {
                        (Some(cache), Some(key)) => cache.contains(&candidates[*i].path, key),
                        _ => false,
                    };
                    !known
                })
                .filter_map(|(i, c)| c.as_ref().ok().map(|p| (i, p.clone())))
                .unzip();
            for (i, result) in index.into_iter().zip(prober.probe_all(&files)) {
                if result.is_ok()
                    && let (Some(cache), Some(key)) = (cache.as_mut(), &stamp_keys[i])
                {
                    cache.insert(&candidates[i].path, key);
                }
                probes[i] = result.map(|_| ());
            }
            if let Some(cache) = cache.as_mut() {
                cache.save();
            }
        }
        let nested: Arc<dyn HostCallbacks> = Arc::new(CallbackHandle(Arc::downgrade(inner)));
        let config = inner.config.load_full();
        let config_for = |name: &str| config.plugin(name).config;
        let cx = LoadContext {
            config_for: &config_for,
            nested,
        };
        candidates
            .into_iter()
            .zip(copies.into_iter().zip(probes).zip(stamps))
            .map(|(candidate, ((copy, probe), stamp))| {
                let loaded = copy.and_then(|copy| match probe {
                    Ok(()) => Plugin::load_copy(&candidate.path, &copy, &cx),
                    Err(e) => {
                        let _ = std::fs::remove_file(&copy);
                        Err(e.mentioning(&copy, &candidate.path))
                    }
                });
                // Remember a failure with the stamp the file had: unchanged, it is not retried.
                {
                    let mut failed = inner.failed.lock().unwrap_or_else(|p| p.into_inner());
                    match &loaded {
                        Ok(_) => failed.remove(&candidate.path),
                        Err(e) => failed.insert(candidate.path.clone(), (stamp.clone(), e.clone())),
                    };
                }
                let result = loaded.map(|plugin| {
                    inner
                        .images
                        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    let settings = config.plugin(plugin.name());
                    let limit = settings
                        .max_concurrent_calls
                        .unwrap_or(config.limits.max_concurrent_calls_per_plugin);
                    Arc::new(PluginSlot::new(
                        plugin,
                        candidate.clone(),
                        limit,
                        stamp,
                        settings,
                    ))
                });
                (candidate, result)
            })
            .collect()
    }

    /// The current tool set.
    pub fn registry(&self) -> Arc<Registry> {
        self.inner.registry.load_full()
    }

    /// Tool-set changes from now on, for `tools/list_changed` notifications.
    pub fn changes(&self) -> Changes {
        Changes(self.inner.changes.subscribe())
    }

    /// The configuration the host runs with now.
    pub fn config(&self) -> Arc<Config> {
        self.inner.config.load_full()
    }

    /// The current access policy (authentication and agents).
    pub fn access(&self) -> Arc<crate::access::Access> {
        self.inner.access.load_full()
    }

    /// Re-read the configuration from where it came from (file, overlay and environment: every
    /// layer) and rescan with it, applying any difference from what is loaded. A configuration that
    /// no longer loads is logged and the running one kept; the plugin files are rescanned anyway.
    pub fn reload(&self) -> RescanReport {
        let source = self.config().source.clone();
        let config = match Config::load(source.as_deref()) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!("Not applying the changed configuration: {e}");
                None
            }
        };
        self.rescan(config)
    }

    /// Rescan the tool directories (with `config` when the configuration changed) and swap in the new
    /// tool set. Unchanged files keep their loaded image; changed ones are probed and loaded from a
    /// fresh private copy; a file that fails keeps its previous good version in service. Calls
    /// already running finish on the version they started on.
    pub fn rescan(&self, config: Option<Config>) -> RescanReport {
        let inner = &self.inner;
        let _serial = inner.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut config_changed = false;
        if let Some(config) = config {
            match crate::access::Access::from_config(&config) {
                Ok(access) => {
                    config_changed = *inner.config.load_full() != config;
                    inner.access.store(Arc::new(access));
                    inner.config.store(Arc::new(config));
                }
                Err(e) => tracing::error!("Not applying the changed configuration: {e}"),
            }
        }
        let config = self.config();
        let old = self.registry();
        let old_slots: std::collections::HashMap<&std::path::Path, &Arc<PluginSlot>> = old
            .plugins
            .iter()
            .map(|s| (s.candidate.path.as_path(), s))
            .collect();
        let candidates = discovery::scan(&config.tool_dirs);
        // Each file's state, computed once: its stamp now, and its loaded slot when nothing that
        // matters (file, prefix, plugin settings) changed.
        let states: Vec<(Option<crate::registry::FileStamp>, Option<Arc<PluginSlot>>)> = candidates
            .iter()
            .map(|c| {
                let stamp = crate::registry::FileStamp::of(&c.path);
                let kept = old_slots.get(c.path.as_path()).filter(|slot| {
                    slot.stamp.is_some()
                        && slot.stamp == stamp
                        && slot.candidate.prefix == c.prefix
                        && config
                            .plugins
                            .get(slot.plugin.name())
                            .map_or(slot.settings == Default::default(), |s| *s == slot.settings)
                });
                (stamp, kept.map(|slot| Arc::clone(slot)))
            })
            .collect();
        // Files that failed before and have not changed since keep their error without a retry.
        let known_failures: std::collections::HashMap<PathBuf, LoadError> = {
            let failed = inner.failed.lock().unwrap_or_else(|p| p.into_inner());
            candidates
                .iter()
                .zip(&states)
                .filter(|(_, (_, kept))| kept.is_none())
                .filter_map(|(c, (now, _))| {
                    let (stamp, error) = failed.get(&c.path)?;
                    (stamp.is_some() && stamp == now).then(|| (c.path.clone(), error.clone()))
                })
                .collect()
        };
        let mut fresh: Vec<Candidate> = candidates
            .iter()
            .zip(&states)
            .filter(|(c, (_, kept))| kept.is_none() && !known_failures.contains_key(&c.path))
            .map(|(c, _)| c.clone())
            .collect();
        let budget = config
            .limits
            .max_reloads
            .saturating_sub(inner.images.load(std::sync::atomic::Ordering::Acquire));
        let mut refused = Vec::new();
        if fresh.len() > budget {
            tracing::error!(
                "max_reloads ({}) reached: {} plugin images are mapped and never unloaded; \
                 restart mcp-host to load new plugin versions",
                config.limits.max_reloads,
                inner.images.load(std::sync::atomic::Ordering::Acquire)
            );
            refused = fresh.split_off(budget);
        }
        let mut loaded: std::collections::HashMap<PathBuf, Result<Arc<PluginSlot>, LoadError>> =
            self.load(fresh)
                .into_iter()
                .map(|(c, r)| (c.path, r))
                .collect();
        let mut report = RescanReport::default();
        let merged: Vec<(Candidate, Result<Arc<PluginSlot>, LoadError>)> = candidates
            .into_iter()
            .zip(states)
            .map(|(c, (_, kept))| {
                if let Some(slot) = kept {
                    return (c, Ok(slot));
                }
                if let Some(error) = known_failures.get(&c.path) {
                    // Already reported when it failed; the previous version (if any) stays.
                    return match old_slots.get(c.path.as_path()) {
                        Some(previous) => (c, Ok(Arc::clone(previous))),
                        None => (c, Err(error.clone())),
                    };
                }
                let result = match loaded.remove(&c.path) {
                    Some(r) => r,
                    None if refused.iter().any(|r| r.path == c.path) => Err(LoadError::Probe(
                        "not loaded: max_reloads reached (restart mcp-host)".into(),
                    )),
                    None => Err(LoadError::Probe("not loaded".into())),
                };
                match (result, old_slots.get(c.path.as_path())) {
                    (Ok(slot), old) => {
                        let before: std::collections::HashSet<&str> = old
                            .map(|o| {
                                o.plugin
                                    .manifest
                                    .tools
                                    .iter()
                                    .map(|t| t.name.as_str())
                                    .collect()
                            })
                            .unwrap_or_default();
                        let after: std::collections::HashSet<&str> = slot
                            .plugin
                            .manifest
                            .tools
                            .iter()
                            .map(|t| t.name.as_str())
                            .collect();
                        tracing::info!(
                            "Reloaded plugin {}: +{} -{} tools",
                            c.path.display(),
                            after.difference(&before).count(),
                            before.difference(&after).count()
                        );
                        report.reloaded.push(c.path.clone());
                        (c, Ok(slot))
                    }
                    (Err(e), Some(previous)) => {
                        tracing::error!(
                            "Error loading plugin {}: {e}; the previous version stays in service",
                            c.path.display()
                        );
                        report.failed.push(c.path.clone());
                        (c, Ok(Arc::clone(previous)))
                    }
                    (Err(e), None) => {
                        tracing::error!("Error loading plugin {}: {e}", c.path.display());
                        report.failed.push(c.path.clone());
                        (c, Err(e))
                    }
                }
            })
            .collect();
        let still_there: std::collections::HashSet<&std::path::Path> =
            merged.iter().map(|(c, _)| c.path.as_path()).collect();
        for path in old_slots.keys().filter(|p| !still_there.contains(*p)) {
            tracing::info!("Removed plugin {}", path.display());
            report.removed.push(path.to_path_buf());
        }
        let registry = Registry::build_logged(merged, &config, false);
        let listing =
            |r: &Registry| -> Vec<Value> { r.tools().map(|t| t.listing.clone()).collect() };
        report.tools_changed = listing(&registry) != listing(&old);
        drop(old_slots);
        drop(old);
        inner.registry.store(Arc::new(registry));
        if !report.reloaded.is_empty() || !report.removed.is_empty() {
            tracing::info!(
                "{} plugin images loaded so far (retained in memory; max_reloads {})",
                inner.images.load(std::sync::atomic::Ordering::Acquire),
                config.limits.max_reloads
            );
        }
        // Agents or access may have changed what clients see, too: announce on any change.
        if config_changed
            || report.tools_changed
            || !report.reloaded.is_empty()
            || !report.removed.is_empty()
        {
            inner.announce_change();
        }
        report
    }

    /// Call tool `name` with `args` (an object, or `None` for no arguments).
    ///
    /// Protocol-level refusals are `Err`; everything the tool or its arguments got wrong is an
    /// `isError` result, as MCP asks (SEP-1303).
    pub async fn call(
        &self,
        name: &str,
        args: Option<Value>,
        opts: CallOptions,
    ) -> Result<Value, CallError> {
        let tool = self
            .inner
            .registry
            .load()
            .get(name)
            .cloned()
            .ok_or_else(|| CallError::UnknownTool(name.to_owned()))?;
        self.call_tool(tool, args, opts).await
    }

    /// [`Host::call`] for a tool already looked up in [`Host::registry`] (the protocol does, to apply
    /// agent views and capability checks first).
    pub async fn call_tool(
        &self,
        tool: Arc<Tool>,
        args: Option<Value>,
        opts: CallOptions,
    ) -> Result<Value, CallError> {
        let name = tool.name.as_str();
        let args = args.unwrap_or_else(|| json!({}));
        if let Err(message) = validate(&tool, &args) {
            return Ok(error_result(&message));
        }
        if tool.descriptor.caller == CallerNeed::Required && opts.caller.is_none() {
            return Err(CallError::CallerRequired(name.to_owned()));
        }
        let caller_json: Arc<str> = match (&opts.caller, tool.descriptor.caller) {
            (Some(caller), CallerNeed::Optional | CallerNeed::Required) => {
                serde_json::to_string(caller).unwrap_or_default().into()
            }
            _ => Arc::from(""),
        };
        let started = Instant::now();
        let ctx = Arc::new(HostCallContext {
            cancel: opts.cancel.clone(),
            deadline: Some(started + tool.timeout),
            events: opts.events.clone(),
            caller_json,
            depth: 0,
            tool: Arc::from(name),
        });
        let args_text = serde_json::to_string(&args).unwrap_or_default();
        if tool.descriptor.inline {
            return Ok(run(&tool, &args_text, ctx));
        }

        let mut guard = CancelOnDrop(Some(opts.cancel.clone()));
        let inner = Arc::clone(&self.inner);
        let work = {
            let tool = Arc::clone(&tool);
            let ctx = Arc::clone(&ctx);
            async move {
                let global = Arc::clone(&inner.global).acquire_owned().await;
                let local = Arc::clone(&tool.slot.limiter).acquire_owned().await;
                let (tx, rx) = tokio::sync::oneshot::channel();
                inner.pool.submit(move || {
                    // Permits are released only when the plugin function has returned.
                    let _permits = (global, local);
                    let _ = tx.send(run(&tool, &args_text, ctx));
                });
                rx.await
            }
        };
        let outcome = tokio::time::timeout(tool.timeout, work).await;
        guard.0 = None;
        Ok(match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => error_result("the tool call was lost (its worker thread ended)"),
            Err(_) => {
                ctx.cancel.cancel();
                tracing::warn!(
                    tool = name,
                    "call timed out after {} s; cancellation requested",
                    fmt_secs(tool.timeout)
                );
                error_result(&format!("timed out after {} s", fmt_secs(tool.timeout)))
            }
        })
    }

    /// Run every loaded plugin's shutdown hook (images stay mapped).
    pub fn shutdown(&self) {
        for slot in &self.registry().plugins {
            slot.retire();
        }
    }
}

impl HostInner {
    /// Tell listeners the served tools changed.
    fn announce_change(&self) {
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            + 1;
        // No receivers is fine: nobody is listening.
        let _ = self.changes.send(generation);
    }

    fn call_nested(&self, name: &str, args: &str) -> Result<String, String> {
        let parent = CurrentCall::parent();
        let depth = parent.as_ref().map_or(0, |p| p.depth + 1);
        let max_depth = self.config.load().limits.max_call_depth;
        if depth > max_depth {
            return Err(format!(
                "tool calls nested deeper than {max_depth} (calling {name})"
            ));
        }
        let tool = self
            .registry
            .load()
            .get(name)
            .cloned()
            .ok_or_else(|| format!("unknown tool: {name}"))?;
        let args_value: Value = if args.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(args).map_err(|e| format!("arguments are not JSON: {e}"))?
        };
        if let Err(message) = validate(&tool, &args_value) {
            return Ok(error_result(&message).to_string());
        }
        let caller_json: Arc<str> = parent
            .as_ref()
            .map_or_else(|| Arc::from(""), |p| Arc::clone(&p.caller_json));
        if tool.descriptor.caller == CallerNeed::Required && caller_json.is_empty() {
            return Err(format!("tool {name} requires an authenticated caller"));
        }
        let ctx = Arc::new(HostCallContext {
            cancel: parent
                .as_ref()
                .map_or_else(CancelFlag::new, |p| p.cancel.clone()),
            deadline: parent
                .as_ref()
                .and_then(|p| p.deadline)
                .or_else(|| Some(Instant::now() + tool.timeout)),
            events: parent.as_ref().and_then(|p| p.events.clone()),
            caller_json,
            depth,
            tool: Arc::from(name),
        });
        Ok(run(&tool, args, ctx).to_string())
    }
}

/// Sets the call's cancellation flag if the call future is dropped before it finished.
struct CancelOnDrop(Option<CancelFlag>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(flag) = self.0.take() {
            flag.cancel();
        }
    }
}

/// Run a tool on this thread and map what the plugin returned.
fn run(tool: &Tool, args: &str, ctx: Arc<HostCallContext>) -> Value {
    let _current = CurrentCall::enter(Arc::clone(&ctx));
    match tool
        .slot
        .plugin
        .call_raw(tool.index, args, &ctx.caller_json, &ctx)
    {
        Ok(json) => match serde_json::from_str::<Value>(&json) {
            Ok(v) if v.get("content").is_some_and(Value::is_array) => v,
            _ => {
                tracing::error!(tool = %tool.name, "plugin returned an invalid result");
                error_result("the plugin returned an invalid result")
            }
        },
        Err(e) => {
            tracing::error!(tool = %tool.name, "plugin could not run the tool: {e}");
            error_result(&format!("the plugin could not run the tool: {e}"))
        }
    }
}

/// A tool result with `isError: true` and this text.
pub fn error_result(message: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": message }], "isError": true })
}

fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

/// Validate arguments against the tool's compiled schema; the message names each argument and rule.
fn validate(tool: &Tool, args: &Value) -> Result<(), String> {
    if !args.is_object() {
        return Err(format!(
            "Invalid arguments for tool {}: arguments must be a JSON object",
            tool.name
        ));
    }
    // The caller is injected by the host from verified credentials; it can never be an argument,
    // whatever a hand-written schema allows.
    let mut problems = Vec::new();
    if args.get("user_info").is_some() {
        problems.push(
            "argument `user_info` is not allowed: the caller comes from verified credentials, \
             never from arguments"
                .to_owned(),
        );
    }
    for error in tool.validator.iter_errors(args).take(5) {
        let path = error.instance_path().to_string();
        let rule = error
            .schema_path()
            .to_string()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let arg = path.trim_start_matches('/').replace('/', ".");
        if arg.is_empty() {
            problems.push(format!("{error} (rule: {rule})"));
        } else {
            problems.push(format!("argument `{arg}`: {error} (rule: {rule})"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Invalid arguments for tool {}: {}",
            tool.name,
            problems.join("; ")
        ))
    }
}

/// Test-load one file (child-process probe, then in-process with its config section) and describe it:
/// its build fingerprint and manifest. What `mcp-host check` prints.
pub fn check_file(
    config: &Config,
    file: &std::path::Path,
    options: &HostOptions,
) -> Result<Value, LoadError> {
    let mut config = config.clone();
    config.tool_dirs.clear();
    let host = Host::start(config, options.clone()).map_err(|e| LoadError::Copy(e.to_string()))?;
    let candidate = Candidate {
        dir_index: 0,
        dir: file.parent().map(PathBuf::from).unwrap_or_default(),
        prefix: String::new(),
        path: file.to_path_buf(),
    };
    let (_, result) = host
        .load(vec![candidate])
        .pop()
        .ok_or_else(|| LoadError::Probe("nothing loaded".into()))?;
    let slot = result?;
    Ok(json!({
        "file": file,
        "build": slot.plugin.build,
        "manifest": slot.plugin.manifest,
    }))
}
