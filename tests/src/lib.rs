//! Shared helpers for the end-to-end tests: build the real binary and plugins once per test binary,
//! lay plugins out in temporary tool directories, and run the host on them.

#![allow(clippy::unwrap_used)]

pub mod clients;
pub mod fleet;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Every plugin crate the tests use (packaged and fixtures).
pub const PLUGIN_CRATES: &[&str] = &[
    "fixture-basic",
    "fixture-override",
    "fixture-schema",
    "fixture-faulty",
    "fixture-abi-mismatch",
    "fixture-wrong-target",
    "fixture-garbage",
    "fixture-conformance",
    "fixture-exports",
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
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
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
