//! Isolation: a plugin that panics, has the wrong ABI, is damaged, or returns garbage is contained,
//! logged with a clear message, and every other tool keeps working.

#![allow(clippy::unwrap_used)]

use mcp_host::CallOptions;
use mcp_host_tests::{Layout, row, runtime, text};
use serde_json::json;

fn load_error(rows: &[serde_json::Value], file: &str) -> String {
    row(rows, "-", file)["detail"].as_str().unwrap().to_owned()
}

#[test]
fn a_panicking_tool_returns_an_error_result_and_the_host_keeps_serving() {
    let l = Layout::new();
    l.install("d", "fixture-faulty", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let host = l.host(&cfg);
    let rt = runtime();
    let result = rt
        .block_on(host.call("explode", None, CallOptions::default()))
        .unwrap();
    assert_eq!(result["isError"], true);
    assert_eq!(text(&result), "tool panicked: boom from a tool");
    let fine = rt
        .block_on(host.call("still_fine", None, CallOptions::default()))
        .unwrap();
    assert_eq!(text(&fine), "still fine");
    // And the same plugin can panic again.
    let again = rt
        .block_on(host.call("explode", None, CallOptions::default()))
        .unwrap();
    assert_eq!(again["isError"], true);
}

#[test]
fn an_abi_mismatch_is_rejected_with_a_short_clear_error_naming_the_file() {
    let l = Layout::new();
    l.install("d", "fixture-abi-mismatch", None);
    l.install("d", "fixture-override", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, log) = l.list(&cfg);
    let err = load_error(&rows, "libfixture_abi_mismatch.so");
    assert!(err.starts_with("incompatible plugin ABI:"), "{err}");
    assert!(
        err.len() < 700,
        "the report should be summarized, got {} bytes",
        err.len()
    );
    assert!(
        log.contains("Error loading plugin") && log.contains("libfixture_abi_mismatch.so"),
        "{log}"
    );
    assert_eq!(
        row(&rows, "echo", "libfixture_override.so")["status"],
        "active"
    );
}

/// Loading skips the layout walk only for a file a probe checked; with probing off the host checks
/// the layouts itself.
#[test]
fn with_probing_off_an_abi_mismatch_is_still_rejected_by_the_hosts_own_check() {
    let l = Layout::new();
    l.install("d", "fixture-abi-mismatch", None);
    let cfg = l.config("tool_dirs: [d]\nprobe: false\n");
    let (rows, _) = l.list(&cfg);
    let err = load_error(&rows, "libfixture_abi_mismatch.so");
    assert!(err.starts_with("incompatible plugin ABI:"), "{err}");
}

#[test]
fn a_plugin_built_for_another_target_is_refused_by_its_fingerprint() {
    let l = Layout::new();
    l.install("d", "fixture-wrong-target", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, _) = l.list(&cfg);
    let err = load_error(&rows, "libfixture_wrong_target.so");
    assert!(
        err.contains("built for target sparc64-unknown-openbsd"),
        "{err}"
    );
}

#[test]
fn a_truncated_library_is_caught_by_the_probe_and_the_host_still_starts() {
    let l = Layout::new();
    let damaged = l.install("d", "fixture-basic", Some("libdamaged.so"));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&damaged)
        .unwrap();
    f.set_len(64 * 1024).unwrap();
    drop(f);
    l.install("d", "fixture-override", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, log) = l.list(&cfg);
    let err = load_error(&rows, "libdamaged.so");
    assert!(!err.is_empty(), "{rows:?}");
    assert!(
        log.contains(&format!("Error loading plugin {}", damaged.display())),
        "{log}"
    );
    assert_eq!(
        row(&rows, "echo", "libfixture_override.so")["status"],
        "active"
    );
}

#[test]
fn corrupted_bytes_in_a_library_are_caught_and_the_host_still_starts() {
    let l = Layout::new();
    let damaged = l.install("d", "fixture-basic", Some("libcorrupt.so"));
    let mut bytes = std::fs::read(&damaged).unwrap();
    // Overwrite the program headers and part of the dynamic section.
    for b in bytes.iter_mut().skip(64).take(4096) {
        *b = 0xA5;
    }
    std::fs::write(&damaged, bytes).unwrap();
    l.install("d", "fixture-override", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, _) = l.list(&cfg);
    assert!(!load_error(&rows, "libcorrupt.so").is_empty());
    assert_eq!(
        row(&rows, "echo", "libfixture_override.so")["status"],
        "active"
    );
}

#[test]
fn a_file_that_is_not_a_library_is_rejected_with_the_loader_message() {
    let l = Layout::new();
    std::fs::write(l.dir("d").join("libtext.so"), "this is text, not ELF").unwrap();
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, _) = l.list(&cfg);
    let err = load_error(&rows, "libtext.so");
    assert!(err.starts_with("not a loadable plugin:"), "{err}");
}

#[test]
fn garbage_and_dispatch_errors_from_a_plugin_become_error_results() {
    let l = Layout::new();
    l.install("d", "fixture-garbage", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let host = l.host(&cfg);
    let rt = runtime();
    for (tool, expect) in [
        ("returns_garbage", "the plugin returned an invalid result"),
        (
            "returns_wrong_shape",
            "the plugin returned an invalid result",
        ),
        (
            "fails_dispatch",
            "the plugin could not run the tool: internal failure",
        ),
    ] {
        let r = rt
            .block_on(host.call(tool, None, CallOptions::default()))
            .unwrap();
        assert_eq!(r["isError"], true, "{tool}: {r}");
        assert_eq!(text(&r), expect, "{tool}");
    }
}

#[test]
fn check_prints_the_manifest_or_fails_with_the_exact_error() {
    let l = Layout::new();
    let good = l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: []\n");
    let out = l.run(&cfg, &["check", good.to_str().unwrap()]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["manifest"]["plugin"], "fixture-basic");
    assert_eq!(report["build"]["abi"], 1);
    assert!(report["manifest"]["tools"].as_array().unwrap().len() >= 7);

    let bad = l.install("d", "fixture-wrong-target", None);
    let out = l.run(&cfg, &["check", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("incompatible build: built for target sparc64-unknown-openbsd"),
        "{err}"
    );
}

#[test]
fn a_plugins_stdout_print_never_reaches_the_command_output() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let out = l.run(&cfg, &["call", "noisy"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not pure JSON ({e}): {stdout}"));
    assert_eq!(text(&result), "quiet result");
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOISE FROM PLUGIN STDOUT"));
}

#[test]
fn a_tool_can_call_a_tool_of_another_plugin_through_the_host() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    l.install("d", "fixture-override", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let host = l.host(&cfg);
    let rt = runtime();
    let r = rt
        .block_on(host.call(
            "wrap_count",
            Some(json!({"steps": 2})),
            CallOptions::default(),
        ))
        .unwrap();
    assert_eq!(text(&r), "wrapped: counted to 2");
    // The wrapper's arguments are validated by the callee's schema too.
    let r = rt
        .block_on(host.call(
            "wrap_count",
            Some(json!({"steps": 0})),
            CallOptions::default(),
        ))
        .unwrap();
    assert_eq!(r["isError"], true);
    assert!(text(&r).contains("minimum"), "{r}");
}

#[test]
fn a_remembered_probe_never_hides_a_file_that_changed_since() {
    let l = Layout::new();
    let plugin = l.install("d", "fixture-basic", Some("libremembered.so"));
    let cache = l.root.path().join("probe-cache");
    let cfg = l.config(&format!(
        "tool_dirs: [d]\nprobe_cache: {}\n",
        cache.display()
    ));
    let (rows, _) = l.list(&cfg);
    assert_eq!(row(&rows, "echo", "libremembered.so")["status"], "active");
    let remembered = std::fs::read_to_string(&cache).unwrap();
    assert!(remembered.contains("libremembered.so"), "{remembered}");
    // Damage the file in place: its identity changes, so it is probed (and caught) again.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&plugin)
        .unwrap();
    f.set_len(64 * 1024).unwrap();
    drop(f);
    let (rows, _) = l.list(&cfg);
    let err = load_error(&rows, "libremembered.so");
    assert!(err.contains("crashed the probe process"), "{err}");
}
