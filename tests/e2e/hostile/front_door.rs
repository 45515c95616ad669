//! H1/H2: the probe confined like the worker, isolation and settings bound to where a plugin file
//! comes from. The attacker is `fixture-hostile`, whose constructor (run by `dlopen`, in the probe
//! and in the worker) reads a secret from the environment and a bait file, and writes a loot file
//! beside the bait: in a sandboxed directory none of that may succeed anywhere.

use super::*;

use mcp_host_tests::artifacts;
use std::process::{Command, Output};

/// The secret the host's environment holds and no sandboxed code may see.
const SECRET: &str = "hostile-suite-env-secret";

/// A layout with fixture-hostile in directory `sb` (`isolation: sandbox`), the bait file at the
/// root, and private copies made under the root (so the constructor, walking up from its copy,
/// finds the bait). `extra` is appended to the configuration.
fn sandboxed_hostile(extra: &str) -> (Layout, std::path::PathBuf) {
    let l = Layout::new();
    l.install("sb", "fixture-hostile", None);
    std::fs::write(l.root.path().join("hostile-bait"), "bait-contents").unwrap();
    let cfg = l.config(&format!(
        "tool_dirs:\n  - {{path: sb, isolation: sandbox}}\nruntime_dir: run\n\
         probe_cache: cache/probed\ndata_dir: data\n{extra}"
    ));
    (l, cfg)
}

/// Run `mcp-host --config cfg args...` with the secret in its environment.
fn run_with_secret(cfg: &Path, args: &[&str]) -> Output {
    Command::new(&artifacts().host)
        .arg("--config")
        .arg(cfg)
        .args(args)
        .env("RUST_LOG", "info")
        .env("MCP_HOSTILE_SECRET", SECRET)
        .env_remove("MCP_TOOL_DIRS")
        .output()
        .unwrap()
}

/// The loot files the constructor managed to write (none, when every load was confined).
fn loot(l: &Layout) -> Vec<String> {
    std::fs::read_dir(l.root.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("loot-"))
        .collect()
}

/// The constructor's reports in a log: each `hostile-ctor ...` line.
fn reports(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("hostile-ctor")).collect()
}

#[test]
fn a_sandboxed_plugins_constructor_is_confined_in_the_probe_as_in_the_worker() {
    let (l, cfg) = sandboxed_hostile("");
    for command in [&["list", "--json"][..], &["pin"][..]] {
        // A file the probe cache knows is not probed again: start each command without it.
        let _ = std::fs::remove_dir_all(l.root.path().join("cache"));
        let out = run_with_secret(&cfg, command);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command:?} failed: {log}");
        // The constructor ran (in the probe's child and in the worker) and was refused each time.
        let seen = reports(&log);
        assert!(
            seen.iter().any(|r| r.contains("probe output")),
            "{command:?}: no report from the probe's child: {log}"
        );
        assert!(
            seen.iter().any(|r| r.contains("worker output")),
            "{command:?}: no report from the worker: {log}"
        );
        for r in &seen {
            assert!(
                r.contains("env=unseen")
                    && r.contains("read=refused")
                    && r.contains("write=refused"),
                "{command:?}: plugin code ran unconfined: {r}"
            );
        }
        assert_eq!(loot(&l), Vec::<String>::new(), "{command:?}: {log}");
    }
    // The plugin is served all the same, in its sandbox.
    let (rows, _) = l.list(&cfg);
    let row = mcp_host_tests::row(&rows, "hostile_pid", "libfixture_hostile.so");
    assert_eq!(row["status"], "active", "{row}");
    assert_eq!(row["isolation"], "sandbox", "{row}");
}

#[test]
fn a_plugins_own_isolation_setting_raises_its_directorys_and_never_lowers_it() {
    // The plugin calls itself fixture-hostile; its settings ask for `process`, weaker than the
    // directory's `sandbox`: the directory's wins.
    let (l, cfg) = sandboxed_hostile("plugins:\n  fixture-hostile:\n    isolation: process\n");
    let out = run_with_secret(&cfg, &["list", "--json"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let row = mcp_host_tests::row(&rows, "hostile_pid", "libfixture_hostile.so");
    assert_eq!(row["isolation"], "sandbox", "{row}");
    assert!(
        reports(&log).iter().any(|r| r.contains("worker output")),
        "{log}"
    );
    assert_eq!(loot(&l), Vec::<String>::new(), "{log}");

    // And the other way: an in-process directory, a plugin that asks for a sandbox gets it.
    let l2 = Layout::new();
    l2.install("d", "fixture-crash", None);
    let cfg2 = l2.config("tool_dirs: [d]\nplugins:\n  fixture-crash:\n    isolation: sandbox\n");
    let (rows, log) = l2.list(&cfg2);
    let row = mcp_host_tests::row(&rows, "pid", "libfixture_crash.so");
    assert_eq!(row["isolation"], "sandbox", "{row}\n{log}");
}

#[test]
fn a_file_claiming_a_plugin_name_bound_elsewhere_is_refused_and_gets_none_of_its_settings() {
    // fixture-hostile's settings grant the bait's directory and bind the name to `trusted`; the
    // file in `sb` that calls itself fixture-hostile is refused before it is started.
    let (l, _) = sandboxed_hostile("");
    let root = l.root.path().display().to_string();
    let cfg = l.config(&format!(
        "tool_dirs:\n  - {{path: sb, isolation: sandbox}}\n  - trusted\nruntime_dir: run\n\
         probe_cache: cache/probed\ndata_dir: data\nplugins:\n  fixture-hostile:\n    \
         from: [trusted]\n    permissions: {{write: [\"{root}\"], read: [\"{root}\"]}}\n"
    ));
    let out = run_with_secret(&cfg, &["list", "--json"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let refused = rows
        .iter()
        .find(|r| {
            r["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("libfixture_hostile.so"))
        })
        .unwrap_or_else(|| panic!("no row for the file: {rows:#?}"));
    let status = refused.to_string();
    assert!(
        status.contains("bound elsewhere") && status.contains("plugins.fixture-hostile.from"),
        "{status}"
    );
    assert!(
        !reports(&log).iter().any(|r| r.contains("worker output")),
        "a refused plugin's worker was started: {log}"
    );
    assert_eq!(loot(&l), Vec::<String>::new(), "{log}");

    // Served from the directory it is bound to, it gets its settings.
    l.install("trusted", "fixture-hostile", None);
    std::fs::remove_file(l.root.path().join("sb/libfixture_hostile.so")).unwrap();
    let (rows, log) = l.list(&cfg);
    let row = mcp_host_tests::row(&rows, "hostile_pid", "libfixture_hostile.so");
    assert_eq!(row["status"], "active", "{row}\n{log}");
}

#[test]
fn one_plugin_name_served_from_two_files_is_flagged_naming_both() {
    let l = Layout::new();
    l.install("first", "fixture-basic", None);
    l.install("second", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [first, {path: second, prefix: b_}]\n");
    let (rows, log) = l.list(&cfg);
    let flagged: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("Plugin name fixture-basic"))
        .collect();
    assert_eq!(flagged.len(), 1, "{log}");
    assert!(
        flagged[0].contains("/first/") && flagged[0].contains("/second/"),
        "{}",
        flagged[0]
    );
    assert!(
        flagged[0].contains("plugins.fixture-basic.from"),
        "{}",
        flagged[0]
    );
    // Both are served (one build under two prefixes is legitimate).
    let row = mcp_host_tests::row(&rows, "b_echo", "libfixture_basic.so");
    assert_eq!(row["status"], "active", "{row}");
}
