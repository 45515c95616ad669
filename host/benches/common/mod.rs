//! What the benchmarks share: building release artifacts into `target/bench`, child processes
//! ([`process`]) and an HTTP client ([`http`]).

pub mod http;
pub mod kernel;
pub mod process;
pub mod report;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Build `packages` in release mode (or the profile `MCP_BENCH_PROFILE` names) into `target/bench` (never `target/release`, which the default
/// configuration serves), or the directory `MCP_BENCH_TARGET_DIR` names (the profile-guided build,
/// `packaging/pgo-build`, keeps its instrumented and optimised artifacts apart), and return that
/// release directory.
pub fn build_release(packages: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate lives in the workspace")
        .to_path_buf();
    let target = std::env::var_os("MCP_BENCH_TARGET_DIR")
        .map(|dir| root.join(dir))
        .unwrap_or_else(|| root.join("target").join("bench"));
    // `MCP_BENCH_PROFILE=dist` measures the deployment build (fat LTO).
    let profile = std::env::var("MCP_BENCH_PROFILE").unwrap_or_else(|_| "release".into());
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    // Without the variables `cargo bench` sets (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, …): with them,
    // ring's build script reruns and everything above it, the host included, is compiled again,
    // where the same build from a shell (the first_run test's, which CI's speed guard reuses) is
    // already there.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_") && name != "CARGO_HOME" {
            cmd.env_remove(name.as_ref());
        }
    }
    cmd.current_dir(&root)
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--profile", &profile, "--quiet"]);
    // Another profile setting to measure, e.g. `MCP_BENCH_CARGO_CONFIG=
    // 'profile.release.package.mcp-host.codegen-units=1'` (`;`-separated; cargo's own
    // `CARGO_PROFILE_*` variables are removed above with the rest).
    if let Ok(settings) = std::env::var("MCP_BENCH_CARGO_CONFIG") {
        for setting in settings.split(';').filter(|s| !s.trim().is_empty()) {
            cmd.args(["--config", setting.trim()]);
        }
    }
    for p in packages {
        cmd.args(["-p", p]);
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "{profile} build failed");
    target.join(&profile)
}
