//! The plugin lifecycle: copy, probe and load plugin files into versions, and rescans that keep
//! unchanged versions, load changed ones, keep the previous version of a file that fails, and
//! never retry a file that failed until it changes.
//!
//! Every load works on a private copy (in the copy cache while the file is unchanged since an
//! earlier run, else in a runtime directory): the copy's signature is checked, the
//! copy is probed in a child process and that same copy is loaded, so a file replaced in between
//! can never be loaded unchecked or unprobed. The probe also reads the plugin's name, which picks
//! its settings and so its isolation: an isolated plugin is started in a worker process and never
//! loaded into the host (its name is probed even when `probe: false`).

use crate::plugins::lock;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::LoadError;
use super::backend::{HostCallbacks, PluginBackend};
use super::copies::CopyCache;
use super::deferred::{Deferred, DeferredLoad};
use super::discovery::{self, Candidate, LIBRARY_EXTENSION, UpstreamEntry};
use super::in_process::{InProcess, Layout, LoadContext};
use super::manifests::{ManifestKey, Manifests};
use super::probe::{Confinement, ProbeCache, Prober};
use super::signature::{self, Signer};
use super::slot::{FileStamp, PluginSlot};
use super::upstream;
use super::worker::{self, RunSpec};
use crate::config::{Config, Isolation};
use crate::telemetry::Telemetry;

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
    /// Whether the served resources or resource templates changed.
    pub resources_changed: bool,
    /// Whether the served prompts changed.
    pub prompts_changed: bool,
}

impl RescanReport {
    /// Whether any plugin version came or went.
    pub fn versions_changed(&self) -> bool {
        !self.reloaded.is_empty() || !self.removed.is_empty()
    }
}

/// The runtime directory for private copies could not be created.
#[derive(Debug, thiserror::Error)]
#[error("cannot create runtime directory {path}: {source}")]
pub struct RuntimeDirError {
    /// The directory.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// The private directory plugin copies are made in: always created fresh (mode 0700, a random
/// name, never an existing directory) and removed at exit.
struct RuntimeDir(tempfile::TempDir);

impl RuntimeDir {
    /// A fresh directory under `configured` (created 0700 when missing; when it exists it must be
    /// ours: see [`check_parent`]), or under the system's temp directory.
    fn create(configured: Option<&Path>) -> Result<RuntimeDir, RuntimeDirError> {
        let parent = configured.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let error = |source| RuntimeDirError {
            path: parent.clone(),
            source,
        };
        if configured.is_some() && !parent.exists() {
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            builder.create(&parent).map_err(error)?;
        }
        // A new directory with a random name (creation fails rather than reuse an existing name).
        let mut builder = tempfile::Builder::new();
        builder.prefix("mcp-host-");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            builder.permissions(std::fs::Permissions::from_mode(0o700));
        }
        let dir = builder.tempdir_in(&parent).map_err(error)?;
        if configured.is_some() {
            check_parent(&parent, dir.path()).map_err(error)?;
        }
        Ok(RuntimeDir(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// A configured `runtime_dir` must not let anyone else swap our private directory: it is a real
/// directory (not a symlink), owned by us (the owner of the directory just made in it) or root,
/// and not writable by others unless sticky like `/tmp`.
fn check_parent(parent: &Path, ours: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(parent)?;
    if !meta.is_dir() {
        return Err(std::io::Error::other(
            "not a directory (or a symbolic link)",
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let me = std::fs::metadata(ours)?.uid();
        if meta.uid() != me && meta.uid() != 0 {
            return Err(std::io::Error::other(format!(
                "owned by uid {}, not by this user (uid {me}): refusing to keep plugin copies there",
                meta.uid()
            )));
        }
        let mode = meta.mode();
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(std::io::Error::other(format!(
                "writable by others (mode {:o}) without the sticky bit: refusing to keep plugin \
                 copies there",
                mode & 0o7777
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = ours;
    Ok(())
}

/// A loaded plugin's backend and how it runs.
type Backend = (Arc<dyn PluginBackend>, RunSpec);

/// A file that failed to load: its stamp and trust stamp then, and the error.
type Failure = (Option<FileStamp>, String, LoadError);

/// A load result per candidate, in discovery order.
pub(crate) type Loaded = super::Sources;

/// Loads plugin files and remembers what it needs across rescans.
pub(crate) struct Loader {
    /// Made when the first copy outside the copy cache is (at start when `runtime_dir` is
    /// configured, so a directory that is not ours fails the start).
    runtime_dir: std::sync::OnceLock<RuntimeDir>,
    runtime_parent: Option<PathBuf>,
    /// The `mcp-host` executable, for probes and plugin workers.
    exe: Option<PathBuf>,
    prober: Option<Prober>,
    /// Files known to pass the probe (when probing and a cache location are configured).
    probe_cache: Option<Mutex<ProbeCache>>,
    /// Private copies kept across runs (beside the probe cache), when it has a location.
    copies: Option<CopyCache>,
    /// What plugins that may load at their first call exported (beside the probe cache), when it
    /// has a location and the configuration allows loading at the first call.
    manifests: Option<Manifests>,
    /// Serve remembered manifests and load those plugins at their first call.
    defer: bool,
    /// Connect upstream servers in the background (serving) rather than wait for each (a
    /// one-shot command).
    background: bool,
    /// Files that failed to load, with their stamp and trust stamp then: unchanged, they are not
    /// retried (nor re-logged) on every rescan.
    failed: Mutex<HashMap<PathBuf, Failure>>,
    /// Plugin images loaded since start (never unloaded), for the `max_reloads` guard.
    images: Arc<AtomicUsize>,
    /// Load failures and retained images are counted there.
    telemetry: Arc<Telemetry>,
    /// The next rescan gives quarantined plugins another chance (SIGHUP asked for it).
    retry_quarantined: AtomicBool,
    /// The async runtime the host was started in, where workers' channels are read.
    runtime: Option<tokio::runtime::Handle>,
    /// Users' upstream credentials (`server.auth`), once the host's store is open.
    pub(crate) credentials: crate::access::upstream::gateway::CredentialSlot,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("runtime_dir", &self.runtime_dir.get().map(RuntimeDir::path))
            .field("images", &self.images())
            .finish_non_exhaustive()
    }
}

static COPY_SEQ: AtomicU64 = AtomicU64::new(0);

/// Warn when a plugin of a sandboxed directory is granted permissions by the name it gives itself
/// alone: any file dropped there could claim that name (and the grants) while the real one is
/// absent. `plugins.<name>.from` or `signed_by` binds them.
fn warn_unbound_grants(config: &Config, plugin: &str, candidate: &Candidate) {
    let Some(settings) = config.plugins.get(plugin) else {
        return;
    };
    let grants = settings.permissions != crate::config::Permissions::default();
    if candidate.isolation == Some(Isolation::Sandbox)
        && grants
        && settings.from.is_empty()
        && settings.signed_by.is_empty()
    {
        tracing::warn!(
            "{} gets the permissions of plugins.{plugin} by the name it gives itself; bind them to \
             its file or signer with plugins.{plugin}.from or signed_by",
            candidate.path.display()
        );
    }
}

/// Copy `file` to a unique name in `runtime_dir`: the file that is probed and then loaded.
fn private_copy(file: &Path, runtime_dir: &Path) -> Result<PathBuf, LoadError> {
    let seq = COPY_SEQ.fetch_add(1, Ordering::Relaxed);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| format!("plugin.{LIBRARY_EXTENSION}"));
    let dest = runtime_dir.join(format!("{seq}-{name}"));
    std::fs::copy(file, &dest).map_err(|e| LoadError::Copy(e.to_string()))?;
    Ok(dest)
}

/// One candidate file on its way through [`Loader::load`]: each step adds what it learns.
struct InFlight {
    candidate: Candidate,
    /// The file's identity before it was copied.
    stamp: Option<FileStamp>,
    /// What its signature status depends on besides the file ([`signature::trust_stamp`]).
    trust: String,
    /// The private copy that is checked, probed and loaded (or why there is none).
    copy: Result<PathBuf, LoadError>,
    /// Who signed the copy (`Ok(None)`: nothing to check, or not checked).
    signer: Result<Option<Signer>, LoadError>,
    /// `stamp`, when the file's identity did not change while it was copied: the copy holds the
    /// bytes of that identity, which the probe cache and remembered manifests are keyed by.
    stable: Option<FileStamp>,
    /// The plugin's name, when the probe read it (or why the file is refused).
    name: Result<Option<String>, LoadError>,
    /// The loaded backend, once opened or served from its remembered manifest.
    backend: Option<Result<Backend, LoadError>>,
}

impl InFlight {
    /// Step 3: keep the stamp only if the file is still what it was before the copy.
    fn mark_stable(&mut self) {
        self.stable = self
            .stamp
            .clone()
            .filter(|before| FileStamp::of(&self.candidate.path).as_ref() == Some(before));
    }

    /// Step 5: a name is what the file says of itself: one bound to other files or signers is
    /// refused before anything of its settings (isolation, grants, data, config) is given to it.
    fn bind_name(&mut self, config: &Config) {
        let Ok(Some(plugin)) = &self.name else {
            return;
        };
        let candidate = &self.candidate;
        let signer = self.signer.as_ref().ok().and_then(Option::as_ref);
        match config.check_binding(
            plugin,
            &candidate.path,
            &candidate.dir,
            signer.map(|s| s.key.as_str()),
        ) {
            Err(why) => self.name = Err(LoadError::Binding(why.to_string())),
            Ok(()) => warn_unbound_grants(config, plugin, candidate),
        }
    }

    /// Where its manifest is remembered, for a copied, named file whose identity held.
    fn manifest_key(&self, loader: &Loader, config: &Config) -> Option<(Manifests, ManifestKey)> {
        match (&self.copy, &self.name, &self.stable) {
            (Ok(_), Ok(Some(name)), Some(stamp)) => {
                loader.manifest_key(&self.candidate, stamp, name, config)
            }
            _ => None,
        }
    }
}

/// Step 2: check the signatures of the copies before any is opened (even in the probe's child);
/// a refused copy is removed and the file fails with the refusal.
fn check_signatures(flights: &mut [InFlight], config: &Config) {
    let files: Vec<(&Candidate, Option<&Path>)> = flights
        .iter()
        .map(|f| (&f.candidate, f.copy.as_ref().ok().map(PathBuf::as_path)))
        .collect();
    let signers = signature::check_all(&files, config);
    for (flight, signer) in flights.iter_mut().zip(signers) {
        if let (Ok(copy), Err(refused)) = (&flight.copy, &signer) {
            super::copies::discard(copy);
            flight.copy = Err(refused.clone());
        }
        flight.signer = signer;
    }
}

/// The copies to probe, one group per directory isolation: each group is probed confined as its
/// workers would be.
#[derive(Default)]
struct ProbeGroups(Vec<(Option<Isolation>, Vec<usize>, Vec<PathBuf>)>);

impl ProbeGroups {
    /// Adds the copy of file `index` from a directory with `isolation`.
    fn add(&mut self, isolation: Option<Isolation>, index: usize, copy: PathBuf) {
        match self.0.iter_mut().find(|g| g.0 == isolation) {
            Some(group) => {
                group.1.push(index);
                group.2.push(copy);
            }
            None => self.0.push((isolation, vec![index], vec![copy])),
        }
    }

    /// Probes every group; each result with its file's index.
    fn probe(
        self,
        prober: &Prober,
        config: &Config,
    ) -> impl Iterator<Item = (usize, Result<mcp_plugin_sdk::wire::BuildInfo, LoadError>)> {
        self.0.into_iter().flat_map(|(isolation, index, files)| {
            let confine = Confinement::for_directory(config, isolation, &files);
            index.into_iter().zip(prober.probe_all(&files, &confine))
        })
    }
}

impl Loader {
    /// A loader for `config`, probing and starting plugin workers with the `mcp-host` executable
    /// `exe` (no probing when `None` or when the configuration turns it off; no isolation without
    /// it), loading plugins that allow it at their first call when `defer` (and the configuration)
    /// says so, connecting upstream servers in the background when `background`.
    pub(crate) fn new(
        config: &Config,
        exe: Option<&Path>,
        telemetry: Arc<Telemetry>,
        defer: bool,
        background: bool,
    ) -> Result<Loader, RuntimeDirError> {
        let manifests = config
            .probe_cache
            .as_deref()
            .filter(|_| config.load_on_first_call)
            .and_then(Manifests::beside);
        let prober = exe
            .filter(|_| config.probe)
            .map(|exe| Prober::new(exe.to_path_buf()));
        Ok(Loader {
            runtime_dir: match &config.runtime_dir {
                Some(configured) => RuntimeDir::create(Some(configured))?.into(),
                None => std::sync::OnceLock::new(),
            },
            runtime_parent: config.runtime_dir.clone(),
            exe: exe.map(Path::to_path_buf),
            probe_cache: prober
                .as_ref()
                .and(config.probe_cache.clone())
                .map(|p| Mutex::new(ProbeCache::open(p))),
            copies: config.probe_cache.as_deref().and_then(CopyCache::beside),
            defer: defer && manifests.is_some(),
            background,
            manifests,
            prober,
            failed: Mutex::default(),
            images: Arc::default(),
            telemetry,
            retry_quarantined: AtomicBool::new(false),
            runtime: tokio::runtime::Handle::try_current().ok(),
            credentials: Arc::default(),
        })
    }

    /// A private copy of `file` in the runtime directory (made now if it was not yet).
    fn private_copy(&self, file: &Path) -> Result<PathBuf, LoadError> {
        let dir = match self.runtime_dir.get() {
            Some(dir) => dir,
            None => {
                let made = RuntimeDir::create(self.runtime_parent.as_deref())
                    .map_err(|e| LoadError::Copy(e.to_string()))?;
                // Another thread may have made one meanwhile: that one is used, this one removed.
                let _ = self.runtime_dir.set(made);
                self.runtime_dir
                    .get()
                    .ok_or_else(|| LoadError::Copy("no runtime directory".into()))?
            }
        };
        private_copy(file, dir.path())
    }

    /// Let the next rescan reload quarantined plugins whose file did not change.
    pub(crate) fn retry_quarantined(&self) {
        self.retry_quarantined.store(true, Ordering::Release);
    }

    /// Plugin images loaded so far (they stay mapped for the life of the process).
    pub(crate) fn images(&self) -> usize {
        self.images.load(Ordering::Acquire)
    }

    /// Load `candidates`, the results in their order: files through [`Loader::load_files`],
    /// upstream servers by connecting to them (side by side).
    pub(crate) fn load(
        &self,
        candidates: Vec<Candidate>,
        config: &Config,
        host: &Arc<dyn HostCallbacks>,
    ) -> Loaded {
        if candidates.iter().all(|c| c.upstream.is_none()) {
            return self.load_files(candidates, config, host);
        }
        let (upstreams, files): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .enumerate()
            .partition(|(_, c)| c.upstream.is_some());
        let (file_order, files): (Vec<usize>, Vec<Candidate>) = files.into_iter().unzip();
        let mut merged: Vec<(usize, (Candidate, _))> = file_order
            .into_iter()
            .zip(self.load_files(files, config, host))
            .collect();
        // Started side by side (each connects in the background); a one-shot command then
        // waits for each to connect or fail, all of them together.
        let started: Vec<_> = upstreams
            .into_iter()
            .map(|(i, c)| {
                let started = self.start_upstream(&c, config, host);
                (i, c, started)
            })
            .collect();
        merged.extend(started.into_iter().map(|(i, c, started)| {
            let slot = started.map(|(backend, spec)| {
                let backend = if self.background {
                    backend
                } else {
                    backend.settled()
                };
                upstream_slot(backend, &c, spec, config)
            });
            (i, (c, slot))
        }));
        merged.sort_by_key(|(i, _)| *i);
        merged.into_iter().map(|(_, loaded)| loaded).collect()
    }

    /// Start the upstream server of `candidate` connecting (in the background): its backend
    /// and how it runs, or why it cannot be started at all (its name bound elsewhere, its
    /// program not found, a sandbox refused).
    fn start_upstream(
        &self,
        candidate: &Candidate,
        config: &Config,
        host: &Arc<dyn HostCallbacks>,
    ) -> Result<(upstream::Upstream, RunSpec), LoadError> {
        let entry = candidate
            .upstream
            .as_ref()
            .ok_or_else(|| LoadError::Worker("not an upstream server".into()))?;
        let started = config
            .check_binding(&entry.name, &candidate.path, &candidate.dir, None)
            .map_err(|why| LoadError::Binding(why.to_string()))
            .and_then(|()| {
                let spec = upstream::run_spec(config, entry, &candidate.path, candidate.isolation);
                let options = upstream::StartOptions {
                    exe: self.exe.as_deref(),
                    background: self.background,
                    record: config
                        .source
                        .clone()
                        .map(|file| (file, candidate.path.clone())),
                    credentials: Arc::clone(&self.credentials),
                };
                upstream::start(entry, &spec, config, Arc::clone(host), options)
                    .map(|backend| (backend, spec))
            });
        if self.background && started.is_ok() {
            tracing::info!(
                "Connecting upstream {} in the background: its tools are served once it answers",
                entry.name
            );
        }
        started.inspect_err(|e| self.telemetry.metrics().load_error(e.kind()))
    }

    /// Copy, probe and load plugin files `candidates` (opened side by side, the results in order): each file
    /// moves through the steps as one [`InFlight`] — copy, signature, identity check, probe, name
    /// binding, open — and ends as a slot or a remembered failure.
    fn load_files(
        &self,
        candidates: Vec<Candidate>,
        config: &Config,
        host: &Arc<dyn HostCallbacks>,
    ) -> Loaded {
        let mut flights: Vec<InFlight> = candidates
            .into_iter()
            .map(|candidate| self.copy(candidate, config))
            .collect();
        check_signatures(&mut flights, config);
        for flight in &mut flights {
            flight.mark_stable();
        }
        self.probe(&mut flights, config);
        for flight in &mut flights {
            flight.bind_name(config);
        }
        if let Some(cache) = &self.copies {
            cache.prune_after_changes();
        }
        self.open_all(&mut flights, config, host);
        // Once all are in (each thread counting its own would let an older count land last).
        self.telemetry.metrics().images(self.images());
        flights
            .into_iter()
            .map(|flight| self.settle(flight, config))
            .collect()
    }

    /// Step 1: the file's private copy (kept in the copy cache, or made now). Copy first, then
    /// probe and load that same copy: the original may be replaced at any time. The stamp is
    /// taken before copying, so a change racing with the copy shows up as a new one.
    fn copy(&self, candidate: Candidate, config: &Config) -> InFlight {
        let stamp = FileStamp::of(&candidate.path);
        let kept = self
            .copies
            .as_ref()
            .zip(stamp.as_ref())
            .and_then(|(cache, stamp)| cache.copy(&candidate.path, stamp));
        let copy = kept.map_or_else(|| self.private_copy(&candidate.path), Ok);
        InFlight {
            trust: signature::trust_stamp(&candidate, config),
            candidate,
            stamp,
            copy,
            signer: Ok(None),
            stable: None,
            name: Ok(None),
            backend: None,
        }
    }

    /// Step 6: open every file not served from its remembered manifest, side by side: `dlopen`
    /// itself is serialised by the dynamic loader, but the ABI layout checks and each plugin's
    /// `init` are not.
    fn open_all(&self, flights: &mut [InFlight], config: &Config, host: &Arc<dyn HostCallbacks>) {
        let config_for = |name: &str| config.plugin(name).config;
        let cx = LoadContext {
            config_for: &config_for,
            host: Arc::clone(host),
        };
        let mut work = Vec::new();
        for flight in flights.iter_mut() {
            let remembered = flight.manifest_key(self, config);
            match self.deferred_flight(flight, remembered.as_ref(), config, host) {
                Some(backend) => flight.backend = Some(Ok(backend)),
                None => work.push((flight, remembered)),
            }
        }
        super::map_parallel(work, |(flight, remembered)| {
            flight.backend = Some(self.open(flight, remembered, config, &cx));
        });
    }

    /// A plugin served from its remembered manifest (loaded at its first call) needs nothing more
    /// now.
    fn deferred_flight(
        &self,
        flight: &InFlight,
        remembered: Option<&(Manifests, ManifestKey)>,
        config: &Config,
        host: &Arc<dyn HostCallbacks>,
    ) -> Option<Backend> {
        match (&flight.copy, &flight.name, remembered) {
            (Ok(copy), Ok(Some(name)), Some(key)) => {
                self.deferred(&flight.candidate, copy, name, key, config, host)
            }
            _ => None,
        }
    }

    /// Load one file's copy, or give up on it with the reason it got so far (the copy removed).
    fn open(
        &self,
        flight: &InFlight,
        remembered: Option<(Manifests, ManifestKey)>,
        config: &Config,
        cx: &LoadContext<'_>,
    ) -> Result<Backend, LoadError> {
        let candidate = &flight.candidate;
        let copy = flight.copy.clone()?;
        match &flight.name {
            Ok(name) => self.load_one(candidate, copy, name.as_deref(), remembered, config, cx),
            Err(e) => {
                super::copies::discard(&copy);
                Err(e.clone().mentioning(&copy, &candidate.path))
            }
        }
    }

    /// Step 7: remember a failure with the stamp the file had (unchanged, it is not retried), or
    /// make the loaded backend a slot with its settings, stamp and signature.
    fn settle(
        &self,
        flight: InFlight,
        config: &Config,
    ) -> (Candidate, Result<Arc<PluginSlot>, LoadError>) {
        let InFlight {
            candidate,
            stamp,
            trust,
            signer,
            backend,
            ..
        } = flight;
        let loaded = backend.unwrap_or_else(|| Err(LoadError::Probe("not loaded".into())));
        match &loaded {
            Ok(_) => lock(&self.failed).remove(&candidate.path),
            Err(e) => {
                self.telemetry.metrics().load_error(e.kind());
                lock(&self.failed).insert(
                    candidate.path.clone(),
                    (stamp.clone(), trust.clone(), e.clone()),
                )
            }
        };
        let result = loaded.map(|(backend, run)| {
            let settings = config.plugin(backend.name());
            let limit = settings
                .max_concurrent_calls
                .unwrap_or(config.limits.max_concurrent_calls_per_plugin);
            Arc::new(
                PluginSlot::new(backend, candidate.clone(), limit, stamp, settings, run)
                    .with_signature(signer.ok().flatten(), trust),
            )
        });
        (candidate, result)
    }

    /// Where the manifest of plugin `name` from `candidate` (with identity `stamp`) is remembered,
    /// when manifests are.
    fn manifest_key(
        &self,
        candidate: &Candidate,
        stamp: &FileStamp,
        name: &str,
        config: &Config,
    ) -> Option<(Manifests, ManifestKey)> {
        let store = self.manifests.clone()?;
        let settings = config.plugin(name);
        let key = ManifestKey::new(
            &candidate.path,
            stamp,
            name,
            &settings.config,
            &config.plugin_data_dir(name),
        );
        Some((store, key))
    }

    /// Plugin `name` from `candidate`, served from the manifest remembered under `key` and loaded
    /// from `copy` at its first call — when this loader defers loads, the plugin runs in the host
    /// and its manifest is remembered.
    fn deferred(
        &self,
        candidate: &Candidate,
        copy: &Path,
        name: &str,
        (store, key): &(Manifests, ManifestKey),
        config: &Config,
        host: &Arc<dyn HostCallbacks>,
    ) -> Option<Backend> {
        if !self.defer {
            return None;
        }
        let spec = RunSpec::of(config, name, &candidate.path, candidate.isolation);
        if spec.isolation.is_isolated() {
            return None;
        }
        let (build, manifest) = store.get(key)?;
        let load = DeferredLoad {
            file: candidate.path.clone(),
            copy: copy.to_path_buf(),
            copy_stamp: FileStamp::of(copy),
            config: config.plugin(name).config,
            host: Arc::clone(host),
            remembered: (store.clone(), key.clone()),
            images: Arc::clone(&self.images),
            telemetry: Arc::clone(&self.telemetry),
        };
        Some((Arc::new(Deferred::new(build, manifest, load)), spec))
    }

    /// Load one probed copy (`name` is the plugin's, when the probe read it): in a worker process
    /// when its settings isolate it, else in the host; a plugin loaded in the host that allows
    /// loading at its first call has its manifest `remembered` for the next start.
    fn load_one(
        &self,
        candidate: &Candidate,
        copy: PathBuf,
        name: Option<&str>,
        remembered: Option<(Manifests, ManifestKey)>,
        config: &Config,
        cx: &LoadContext<'_>,
    ) -> Result<Backend, LoadError> {
        let no_exe = || {
            LoadError::Worker(
                "isolation needs the mcp-host executable to start workers with \
                 (HostOptions::probe_exe)"
                    .into(),
            )
        };
        if let Some(name) = name {
            let spec = RunSpec::of(config, name, &candidate.path, candidate.isolation);
            if spec.isolation.is_isolated() {
                let exe = self.exe.as_deref().ok_or_else(no_exe)?;
                let copy_path = copy.clone();
                let (host, runtime) = (Arc::clone(&cx.host), self.runtime.clone());
                let plugin = worker::start(
                    exe,
                    &candidate.path,
                    copy,
                    name,
                    &spec,
                    config,
                    host,
                    runtime,
                )
                .map_err(|e| e.mentioning(&copy_path, &candidate.path))?;
                return Ok((Arc::new(plugin), spec));
            }
        } else if candidate.isolation.is_some_and(Isolation::is_isolated) {
            super::copies::discard(&copy);
            return Err(no_exe());
        }
        // A name comes from a probe of this copy (its child, or the cache for its identity).
        let layout = match name {
            Some(_) => Layout::CheckedByProbe,
            None => Layout::Check,
        };
        let plugin = InProcess::load_copy(&candidate.path, &copy, layout, cx)?;
        self.images.fetch_add(1, Ordering::AcqRel);
        if name.is_none() {
            // Loaded without a probe (no executable): its name is known only now. Without a
            // signature check result at hand, a binding to signers refuses it.
            config
                .check_binding(plugin.name(), &candidate.path, &candidate.dir, None)
                .map_err(|e| LoadError::Binding(e.to_string()))?;
        }
        let spec = RunSpec::of(config, plugin.name(), &candidate.path, candidate.isolation);
        if spec.isolation.is_isolated() {
            // Only without an executable is a name unknown before loading.
            return Err(no_exe());
        }
        if let Some((store, key)) = &remembered {
            store.put(key, plugin.build(), plugin.manifest());
        }
        Ok((Arc::new(plugin), spec))
    }

    /// Step 4: probe each copy in a child process, skipping files the probe cache knows to be
    /// good, and record each plugin's name. With probing off, only files whose isolation depends
    /// on their name are probed (an isolated plugin must never be opened in the host).
    fn probe(&self, flights: &mut [InFlight], config: &Config) {
        for flight in flights.iter_mut() {
            flight.name = flight.copy.clone().map(|_| None);
        }
        let Some(prober) = self
            .prober
            .clone()
            .or_else(|| self.exe.clone().map(Prober::new))
        else {
            return;
        };
        let needs_name = |c: &Candidate| {
            self.prober.is_some()
                || c.isolation.is_some_and(Isolation::is_isolated)
                || config.isolates_by_name()
        };
        // A file whose identity did not change across the copy, and that passed a probe with that
        // identity before, is known good: skip its child process.
        let mut cache: Option<std::sync::MutexGuard<'_, ProbeCache>> =
            self.probe_cache.as_ref().map(|c| lock(c));
        let stamp_key = |f: &InFlight| f.stable.as_ref().map(FileStamp::key);
        let mut groups = ProbeGroups::default();
        for (i, flight) in flights.iter_mut().enumerate() {
            let Ok(copy) = &flight.copy else { continue };
            let known = match (&cache, stamp_key(flight)) {
                (Some(cache), Some(key)) => cache.get(&flight.candidate.path, &key),
                _ => None,
            };
            if let Some(name) = known {
                flight.name = Ok(Some(name.to_owned()));
            } else if needs_name(&flight.candidate) {
                groups.add(flight.candidate.isolation, i, copy.clone());
            }
        }
        for (i, result) in groups.probe(&prober, config) {
            let flight = &mut flights[i];
            if let Ok(build) = &result
                && let (Some(cache), Some(key)) = (cache.as_mut(), stamp_key(flight))
            {
                cache.insert(&flight.candidate.path, &key, &build.plugin);
            }
            flight.name = result.map(|build| Some(build.plugin));
        }
        if let Some(cache) = cache.as_mut() {
            cache.save();
        }
    }

    /// Rescan the tool directories against the plugins loaded now (`old`): unchanged files keep
    /// their loaded version; changed ones are loaded from a fresh private copy; a file that fails
    /// keeps its previous version in service. Returns the new load results, in discovery order,
    /// and what changed among the files (the caller builds the tool set and compares what it
    /// serves).
    pub(crate) fn rescan(
        &self,
        config: &Config,
        old: &[Arc<PluginSlot>],
        host: &Arc<dyn HostCallbacks>,
    ) -> (Loaded, RescanReport) {
        let old_slots: HashMap<&Path, &Arc<PluginSlot>> = old
            .iter()
            .map(|s| (s.candidate.path.as_path(), s))
            .collect();
        let candidates = discovery::scan(&config.tool_dirs);
        let plan = self.plan(&candidates, &old_slots, config);
        let mut loaded: HashMap<PathBuf, Result<Arc<PluginSlot>, LoadError>> = self
            .load(plan.fresh, config, host)
            .into_iter()
            .map(|(c, r)| (c.path, r))
            .collect();
        let mut report = RescanReport::default();
        let merged: Loaded = candidates
            .into_iter()
            .zip(plan.kept)
            .map(|(c, kept)| {
                let result = match kept {
                    Some(slot) => Ok(slot),
                    None => settle(
                        &c.path,
                        plan.known_failures.get(&c.path),
                        loaded.remove(&c.path),
                        plan.refused.contains(&c.path),
                        // A previous version stays only while it meets the signature rules.
                        old_slots
                            .get(c.path.as_path())
                            .copied()
                            .filter(|p| signature::still_trusted(p.signer.as_ref(), &c, config)),
                        &mut report,
                    ),
                };
                (c, result)
            })
            .collect();
        let still_there: HashSet<&Path> = merged.iter().map(|(c, _)| c.path.as_path()).collect();
        for path in old_slots.keys().filter(|p| !still_there.contains(*p)) {
            tracing::info!("Removed plugin {}", path.display());
            report.removed.push(path.to_path_buf());
        }
        if report.versions_changed() {
            tracing::info!(
                "{} plugin images loaded so far (retained in memory; max_reloads {})",
                self.images(),
                config.limits.max_reloads
            );
        }
        (merged, report)
    }

    /// What a rescan must do with each candidate: keep its version, report its known failure, or
    /// load it (within the `max_reloads` budget).
    fn plan(
        &self,
        candidates: &[Candidate],
        old_slots: &HashMap<&Path, &Arc<PluginSlot>>,
        config: &Config,
    ) -> Plan {
        // Each file's stamp now, and its loaded slot when nothing that matters (file, prefix,
        // plugin settings) changed.
        let stamps: Vec<Option<FileStamp>> =
            candidates.iter().map(|c| FileStamp::of(&c.path)).collect();
        // A quarantined plugin stays out until its file changes, or SIGHUP asks to retry.
        let retry = self.retry_quarantined.swap(false, Ordering::AcqRel);
        let kept: Vec<Option<Arc<PluginSlot>>> = candidates
            .iter()
            .zip(&stamps)
            .map(|(c, stamp)| match &c.upstream {
                Some(entry) => self.keep_upstream(old_slots, c, entry, retry, config),
                None => keep_file(old_slots, c, stamp.as_ref(), retry, config),
            })
            .collect();
        let known_failures = self.known_failures(candidates, &stamps, &kept, config);
        let mut fresh: Vec<Candidate> = candidates
            .iter()
            .zip(&kept)
            .filter(|(c, kept)| kept.is_none() && !known_failures.contains_key(&c.path))
            .map(|(c, _)| c.clone())
            .collect();
        let refused = self.over_budget(&mut fresh, config);
        Plan {
            kept,
            known_failures,
            fresh,
            refused,
        }
    }

    /// Files that failed before and have not changed since (nor has their trust): they keep their
    /// error without a retry. `kept` are the candidates' kept slots.
    fn known_failures(
        &self,
        candidates: &[Candidate],
        stamps: &[Option<FileStamp>],
        kept: &[Option<Arc<PluginSlot>>],
        config: &Config,
    ) -> HashMap<PathBuf, LoadError> {
        let failed = lock(&self.failed);
        candidates
            .iter()
            .zip(stamps)
            .zip(kept)
            .filter(|(_, kept)| kept.is_none())
            .filter_map(|((c, now), _)| {
                let (stamp, trust, error) = failed.get(&c.path)?;
                (stamp.is_some() && stamp == now && *trust == signature::trust_stamp(c, config))
                    .then(|| (c.path.clone(), error.clone()))
            })
            .collect()
    }

    /// The files of `fresh` beyond the `max_reloads` budget, taken out of it (logged): they are
    /// refused until a restart.
    fn over_budget(&self, fresh: &mut Vec<Candidate>, config: &Config) -> HashSet<PathBuf> {
        let budget = config.limits.max_reloads.saturating_sub(self.images());
        if fresh.len() <= budget {
            return HashSet::new();
        }
        tracing::error!(
            "max_reloads ({}) reached: {} plugin images are mapped and never unloaded; \
             restart mcp-host to load new plugin versions",
            config.limits.max_reloads,
            self.images()
        );
        fresh
            .split_off(budget)
            .into_iter()
            .map(|c| c.path)
            .collect()
    }
}

/// A plugin file's slot kept by a rescan: the same file (by its stamp), prefix, way to run, trust
/// and settings, not quarantined when SIGHUP asked to retry.
fn keep_file(
    old_slots: &HashMap<&Path, &Arc<PluginSlot>>,
    c: &Candidate,
    stamp: Option<&FileStamp>,
    retry: bool,
    config: &Config,
) -> Option<Arc<PluginSlot>> {
    old_slots
        .get(c.path.as_path())
        .filter(|slot| {
            slot.stamp.is_some()
                && slot.stamp.as_ref() == stamp
                && slot.candidate.prefix == c.prefix
                && !(retry && slot.backend.quarantined().is_some())
                && slot.run == RunSpec::of(config, slot.backend.name(), &c.path, c.isolation)
                && slot.trust_stamp == signature::trust_stamp(c, config)
                && config
                    .plugins
                    .get(slot.backend.name())
                    .map_or(slot.settings == Default::default(), |s| *s == slot.settings)
        })
        .map(|slot| Arc::clone(slot))
}

/// The slot of upstream `backend` from `candidate`, run as `spec` says.
fn upstream_slot(
    backend: upstream::Upstream,
    candidate: &Candidate,
    spec: RunSpec,
    config: &Config,
) -> Arc<PluginSlot> {
    let settings = config.plugin(backend.name());
    let limit = settings
        .max_concurrent_calls
        .unwrap_or(config.limits.max_concurrent_calls_per_plugin);
    Arc::new(PluginSlot::new(
        Arc::new(backend),
        candidate.clone(),
        limit,
        None,
        settings,
        spec,
    ))
}

impl Loader {
    /// An upstream server's slot kept by a rescan: the same entry, settings and way to run, not
    /// quarantined when SIGHUP asked to retry; when its lists changed since, a new version over
    /// the same connection.
    fn keep_upstream(
        &self,
        old_slots: &HashMap<&Path, &Arc<PluginSlot>>,
        c: &Candidate,
        entry: &UpstreamEntry,
        retry: bool,
        config: &Config,
    ) -> Option<Arc<PluginSlot>> {
        let slot = old_slots.get(c.path.as_path()).filter(|slot| {
            slot.candidate == *c
                && !(retry && slot.backend.quarantined().is_some())
                && slot.run == upstream::run_spec(config, entry, &c.path, c.isolation)
                && config
                    .plugins
                    .get(&entry.name)
                    .map_or(slot.settings == Default::default(), |s| *s == slot.settings)
        })?;
        Some(match slot.backend.successor() {
            Some(backend) => Arc::new(PluginSlot::new(
                backend,
                slot.candidate.clone(),
                config
                    .plugin(&entry.name)
                    .max_concurrent_calls
                    .unwrap_or(config.limits.max_concurrent_calls_per_plugin),
                None,
                slot.settings.clone(),
                slot.run.clone(),
            )),
            None => Arc::clone(slot),
        })
    }
}

/// What [`Loader::plan`] decided.
struct Plan {
    /// Per candidate, its version when it is kept as it is.
    kept: Vec<Option<Arc<PluginSlot>>>,
    /// Unchanged files that failed before.
    known_failures: HashMap<PathBuf, LoadError>,
    /// Files to load.
    fresh: Vec<Candidate>,
    /// Files not loaded because `max_reloads` was reached.
    refused: HashSet<PathBuf>,
}

/// The outcome for a file that was not kept as it was: its new version, or its previous one when
/// the new one failed (logged once here), or the error.
fn settle(
    path: &Path,
    known_failure: Option<&LoadError>,
    loaded: Option<Result<Arc<PluginSlot>, LoadError>>,
    refused: bool,
    previous: Option<&Arc<PluginSlot>>,
    report: &mut RescanReport,
) -> Result<Arc<PluginSlot>, LoadError> {
    if let Some(error) = known_failure {
        // Already reported when it failed; the previous version (if any) stays.
        return previous.map(Arc::clone).ok_or_else(|| error.clone());
    }
    let result = match loaded {
        Some(r) => r,
        None if refused => Err(LoadError::Probe(
            "not loaded: max_reloads reached (restart mcp-host)".into(),
        )),
        None => Err(LoadError::Probe("not loaded".into())),
    };
    match (result, previous) {
        (Ok(slot), previous) => {
            // The tools it serves: a service its configuration turned on or off counts.
            let names = |s: &PluginSlot| -> HashSet<String> {
                let manifest = s.backend.manifest();
                let enabled = |service: &Option<String>| {
                    service.as_ref().is_none_or(|name| {
                        manifest
                            .services
                            .iter()
                            .find(|d| &d.name == name)
                            .is_none_or(|d| d.enabled)
                    })
                };
                manifest
                    .tools
                    .iter()
                    .filter(|t| enabled(&t.service))
                    .map(|t| t.name.clone())
                    .collect()
            };
            let before = previous.map(|p| names(p)).unwrap_or_default();
            let after = names(&slot);
            tracing::info!(
                "Reloaded plugin {}: +{} -{} tools",
                path.display(),
                after.difference(&before).count(),
                before.difference(&after).count()
            );
            report.reloaded.push(path.to_path_buf());
            Ok(slot)
        }
        (Err(e), Some(previous)) => {
            tracing::error!(
                "Error loading plugin {}: {e}; the previous version stays in service",
                path.display()
            );
            report.failed.push(path.to_path_buf());
            Ok(Arc::clone(previous))
        }
        (Err(e), None) => {
            tracing::error!("Error loading plugin {}: {e}", path.display());
            report.failed.push(path.to_path_buf());
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_directory_is_always_fresh_and_private() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let configured = tmp.path().join("rt");
        let a = RuntimeDir::create(Some(&configured)).expect("created");
        let b = RuntimeDir::create(Some(&configured)).expect("created again");
        assert_ne!(a.path(), b.path(), "never reused");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
            // A shared directory others can write to (no sticky bit) is refused.
            let shared = tmp.path().join("shared");
            std::fs::create_dir(&shared).unwrap();
            std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
            let err = RuntimeDir::create(Some(&shared)).err().expect("refused");
            assert!(err.to_string().contains("writable by others"), "{err}");
            // A symbolic link is refused too.
            let link = tmp.path().join("link");
            std::os::unix::fs::symlink(&configured, &link).unwrap();
            assert!(RuntimeDir::create(Some(&link)).is_err());
        }
    }
}
