//! Shared helpers for the end-to-end tests: build the real binary and plugins once per test binary,
//! lay plugins out in temporary tool directories, and run the host on them.

#![allow(clippy::unwrap_used)]

pub mod clients;
pub mod fleet;
pub mod oauth;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Every plugin crate the tests use (packaged and fixtures).
pub const PLUGIN_CRATES: &[&str] = &[
    "fixture-basic",
    "fixture-override",
    "fixture-schema",
    "fixture-faulty",
    "fixture-filters",
    "fixture-abi-mismatch",
    "fixture-wrong-target",
    "fixture-garbage",
    "fixture-conformance",
    "fixture-exports",
    "fixture-crash",
    "fixture-catalog",
    "fixture-lazy",
    "fixture-hostile",
    "fixture-installable",
    "fixture-installable-v2",
    "fixture-installable-v3",
    "fixture-credentials",
    "mcp-time",
    "mcp-text",
    "mcp-series",
];

pub mod serve;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Built artifacts: the `mcp-host` binary and plugin libraries.
#[derive(Debug)]
pub struct Artifacts {
    /// The `mcp-host` executable.
    pub host: PathBuf,
    dir: PathBuf,
}

impl Artifacts {
    /// The built library of plugin crate `name` (e.g. `fixture-basic`).
    pub fn plugin(&self, name: &str) -> PathBuf {
        let stem = name.replace('-', "_");
        let file = format!(
            "{}{stem}{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        );
        self.dir.join(file)
    }
}

/// Build the host and every plugin (debug profile, the workspace's target directory) once per test
/// binary. `cargo test` does not produce cdylib files, so the tests build them.
pub fn artifacts() -> &'static Artifacts {
    static BUILT: OnceLock<Artifacts> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = workspace_root();
        let target = target_dir();
        let mut cmd = cargo();
        cmd.current_dir(&root)
            .args(["build", "--quiet", "-p", "mcp-host"])
            .env("CARGO_TARGET_DIR", &target);
        for p in PLUGIN_CRATES {
            cmd.args(["-p", p]);
        }
        let status = cmd.status().expect("run cargo build");
        assert!(status.success(), "building the host and plugins failed");
        let dir = target.join("debug");
        Artifacts {
            host: dir.join(format!("mcp-host{}", std::env::consts::EXE_SUFFIX)),
            dir,
        }
    })
}

/// A `cargo` command as a user's shell runs it: without the variables cargo sets for a test or a
/// bench (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, `CARGO_TARGET_DIR`, …; `CARGO_HOME` is kept). With
/// them, a build differs from the one `cargo test` made in the same target directory: ring's build
/// script reruns when `CARGO_MANIFEST_DIR` or `CARGO_PKG_*` change, and everything above it (rustls,
/// reqwest, the host) is compiled again, then again by the next build from a shell.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_") && name != "CARGO_HOME" {
            cmd.env_remove(name.as_ref());
        }
    }
    cmd
}

/// The workspace's target directory (`CARGO_TARGET_DIR` when set).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// A target directory inside the workspace's, shared by the tests that run their own `cargo build`
/// (a fresh checkout, a scaffolded plugin), so a later run, or another test, reuses what one built.
pub fn shared_target(name: &str) -> PathBuf {
    let dir = target_dir().join("e2e").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A copy of this checkout as a fresh clone has it, in a temporary directory: the files `git
/// ls-files` lists (tracked, and new ones not ignored, so uncommitted work is included), without
/// build output or installed tools. Its `target` is a link to `target` (a shared build directory).
/// Copies keep their files' modification times, so a later copy of the same files reuses what an
/// earlier one built there (cargo compares times; fresh ones would rebuild every workspace crate).
pub fn fresh_checkout(target: &Path) -> tempfile::TempDir {
    let root = workspace_root();
    let copy = tempfile::tempdir().unwrap();
    let listed = Command::new("git")
        .current_dir(&root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output()
        .expect("git ls-files (the fresh-checkout test needs git)");
    assert!(listed.status.success(), "git ls-files failed");
    for file in listed.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let rel = Path::new(std::str::from_utf8(file).unwrap());
        let src = root.join(rel);
        // Listed but deleted in the work tree (or a broken link): not in a clone of this state.
        if !src.is_file() {
            continue;
        }
        let dest = copy.path().join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&src, &dest).unwrap();
        let modified = std::fs::metadata(&src).unwrap().modified().unwrap();
        std::fs::File::options()
            .write(true)
            .open(&dest)
            .unwrap()
            .set_modified(modified)
            .unwrap();
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink(target, copy.path().join("target")).unwrap();
    #[cfg(not(unix))]
    let _ = target;
    copy
}

/// A temporary tree of tool directories and a config file.
#[derive(Debug)]
pub struct Layout {
    /// The temporary root.
    pub root: tempfile::TempDir,
}

impl Default for Layout {
    fn default() -> Self {
        Self::new()
    }
}

impl Layout {
    /// An empty tree.
    pub fn new() -> Self {
        Layout {
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// The directory `name` under the root (created).
    pub fn dir(&self, name: &str) -> PathBuf {
        let d = self.root.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Copy plugin crate `krate`'s library into directory `dir` as `file` (default: its own name).
    pub fn install(&self, dir: &str, krate: &str, file: Option<&str>) -> PathBuf {
        let src = artifacts().plugin(krate);
        let name = file
            .map(str::to_owned)
            .unwrap_or_else(|| src.file_name().unwrap().to_string_lossy().into_owned());
        let dest = self.dir(dir).join(name);
        std::fs::copy(&src, &dest).unwrap();
        dest
    }

    /// Write the config file (YAML) and return its path.
    pub fn config(&self, yaml: &str) -> PathBuf {
        let p = self.root.path().join("mcp-host.yaml");
        std::fs::write(&p, yaml).unwrap();
        p
    }

    /// Run `mcp-host --config <config> <args...>`.
    pub fn run(&self, config: &Path, args: &[&str]) -> Output {
        Command::new(&artifacts().host)
            .arg("--config")
            .arg(config)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("MCP_TOOL_DIRS")
            .output()
            .unwrap()
    }

    /// `mcp-host list --json` as JSON rows, plus the log (stderr).
    pub fn list(&self, config: &Path) -> (Vec<serde_json::Value>, String) {
        let out = self.run(config, &["list", "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "list failed: {stderr}");
        let rows: Vec<serde_json::Value> =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!(
                    "list output is not JSON ({e}): {}",
                    String::from_utf8_lossy(&out.stdout)
                )
            });
        (rows, stderr)
    }

    /// `mcp-host check <file>` with `config`: the report (build fingerprint and manifest) as JSON;
    /// fails the test when the file does not load.
    pub fn check(&self, config: &Path, file: &Path) -> serde_json::Value {
        let out = self.run(config, &["check", &file.to_string_lossy()]);
        assert!(
            out.status.success(),
            "check {} failed: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "check output is not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Start an in-process host on `config`, probing with the real binary.
    pub fn host(&self, config: &Path) -> mcp_host::Host {
        let config = mcp_host::Config::load_with_env(Some(config), &[]).unwrap();
        mcp_host::Host::start(
            config,
            mcp_host::HostOptions {
                probe_exe: Some(artifacts().host.clone()),
                ..Default::default()
            },
        )
        .unwrap()
    }
}

/// Open a gate that fixture-basic's `wait_for` tool waits on: write `content` to a temporary file,
/// then rename it to `path`, so the tool never sees the file without its content.
pub fn open_gate(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Wait (generously: up to [`serve::START`]) until `path` exists, e.g. the `started` file of
/// fixture-basic's `wait_for` call; fails the test otherwise.
#[track_caller]
pub fn wait_for_file(path: &Path) {
    let deadline = std::time::Instant::now() + serve::START;
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} did not appear within {:?}",
            path.display(),
            serve::START
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Replace `dest` with a copy of `src` the way a build or deploy script should: write a temporary
/// file in the same directory (a name discovery ignores), then rename it over `dest`.
pub fn replace_atomically(src: &Path, dest: &Path) {
    let tmp = dest.with_file_name(format!(
        ".{}.tmp",
        dest.file_name().unwrap().to_string_lossy()
    ));
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dest).unwrap();
}

/// Rewrite the one occurrence of `from` in `file` with `to` (the same length), in place: a plugin
/// changed after it was built, signed or pinned.
pub fn patch_bytes(file: &Path, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len(), "a patch keeps the file's layout");
    let mut bytes = std::fs::read(file).unwrap();
    let found: Vec<usize> = bytes
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{:?} occurs {} times in {}",
        String::from_utf8_lossy(from),
        found.len(),
        file.display()
    );
    bytes[found[0]..found[0] + to.len()].copy_from_slice(to);
    std::fs::write(file, bytes).unwrap();
}

/// The row for `tool` from `file` (file name match) in `list --json` output.
pub fn row<'a>(rows: &'a [serde_json::Value], tool: &str, file: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["tool"] == tool && r["file"].as_str().is_some_and(|f| f.ends_with(file)))
        .unwrap_or_else(|| panic!("no row for {tool} from {file} in {rows:#?}"))
}

/// The text of the first content item of a tool result.
pub fn text(result: &serde_json::Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or("")
}

/// A multi-threaded runtime for in-process calls.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}
