//! Discovery and precedence: which files are read, in which order, and which definition of a tool
//! wins — proven with real plugins in real directories through `mcp-host list`.

#![allow(clippy::unwrap_used)]

use mcp_host_tests::{Layout, row};

#[test]
fn earlier_directory_overrides_a_later_one_and_the_loser_is_logged() {
    let l = Layout::new();
    let winner = l.install("mine", "fixture-override", None);
    let loser = l.install("packaged", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [mine, packaged]\n");
    let (rows, log) = l.list(&cfg);
    assert_eq!(
        row(&rows, "echo", "libfixture_override.so")["status"],
        "active"
    );
    let lost = row(&rows, "echo", "libfixture_basic.so");
    assert_eq!(lost["status"], "overridden_by");
    assert_eq!(lost["detail"], winner.to_str().unwrap());
    let line = format!(
        "Tool echo from {} overridden by {}",
        loser.display(),
        winner.display()
    );
    assert!(log.contains(&line), "missing {line:?} in log:\n{log}");
    // Tools only the later directory defines are still served.
    assert_eq!(
        row(&rows, "shout", "libfixture_basic.so")["status"],
        "active"
    );
}

#[test]
fn swapping_directory_order_swaps_the_winner() {
    let l = Layout::new();
    l.install("mine", "fixture-override", None);
    l.install("packaged", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [packaged, mine]\n");
    let (rows, _) = l.list(&cfg);
    assert_eq!(
        row(&rows, "echo", "libfixture_basic.so")["status"],
        "active"
    );
    assert_eq!(
        row(&rows, "echo", "libfixture_override.so")["status"],
        "overridden_by"
    );
}

#[test]
fn files_in_one_directory_are_taken_in_sorted_name_order() {
    let l = Layout::new();
    l.install("d", "fixture-basic", Some("b_basic.so"));
    l.install("d", "fixture-override", Some("a_override.so"));
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, _) = l.list(&cfg);
    assert_eq!(row(&rows, "echo", "a_override.so")["status"], "active");
    assert_eq!(row(&rows, "echo", "b_basic.so")["status"], "overridden_by");
    let files: Vec<&str> = rows.iter().filter_map(|r| r["file"].as_str()).collect();
    let first_b = files
        .iter()
        .position(|f| f.ends_with("b_basic.so"))
        .unwrap();
    assert!(
        files
            .iter()
            .take(first_b)
            .all(|f| f.ends_with("a_override.so"))
    );
}

#[test]
fn underscore_files_subdirectories_and_non_libraries_are_not_loaded() {
    let l = Layout::new();
    l.install("d", "fixture-basic", Some("_parked.so"));
    l.install("d/nested", "fixture-basic", None);
    let d = l.dir("d");
    std::fs::write(d.join("README.txt"), "not a plugin").unwrap();
    std::fs::copy(
        mcp_host_tests::artifacts().plugin("fixture-basic"),
        d.join("libfixture_basic.so.bak"),
    )
    .unwrap();
    l.install("d", "fixture-override", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, _) = l.list(&cfg);
    let files: Vec<&str> = rows.iter().filter_map(|r| r["file"].as_str()).collect();
    assert!(
        files.iter().all(|f| f.ends_with("libfixture_override.so")),
        "{files:?}"
    );
}

#[test]
fn relative_tool_dirs_resolve_against_the_config_file_directory() {
    let l = Layout::new();
    l.install("rel", "fixture-override", None);
    let cfg = l.config("tool_dirs: [./rel]\n");
    // Run from another working directory.
    let out = std::process::Command::new(&mcp_host_tests::artifacts().host)
        .current_dir(std::env::temp_dir())
        .args(["--config", cfg.to_str().unwrap(), "list", "--json"])
        .output()
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        row(&rows, "echo", "libfixture_override.so")["status"],
        "active"
    );
}

#[test]
fn mcp_tool_dirs_environment_variable_is_accepted_as_the_seed_alias() {
    let l = Layout::new();
    let d = l.dir("envdir");
    l.install("envdir", "fixture-override", None);
    let cfg = l.config("tool_dirs: [nowhere]\n");
    let out = std::process::Command::new(&mcp_host_tests::artifacts().host)
        .args(["--config", cfg.to_str().unwrap(), "list", "--json"])
        .env("MCP_TOOL_DIRS", &d)
        .output()
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        row(&rows, "echo", "libfixture_override.so")["status"],
        "active"
    );
}

#[test]
fn every_loaded_tool_is_logged_and_listed_as_a_table_with_the_prompts_and_resources() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (_, log) = l.list(&cfg);
    for tool in [
        "echo",
        "shout",
        "count",
        "sleep",
        "noisy",
        "whoami",
        "async_sleep",
    ] {
        assert!(
            log.contains(&format!("Loaded tool: {tool}")),
            "{tool} not logged:\n{log}"
        );
    }
    let out = l.run(&cfg, &["list"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("async_sleep") && table.contains("active"),
        "{table}"
    );
    // Prompts and resources are listed with what they are.
    assert!(
        table.contains("prompt greet") && table.contains("resource basic://greeting"),
        "{table}"
    );
    assert!(table.contains("template basic://echo/{text}"), "{table}");
}

#[test]
fn directory_and_plugin_prefixes_namespace_tools() {
    let l = Layout::new();
    l.install("ext", "fixture-override", None);
    let cfg = l.config(
        "tool_dirs:\n  - {path: ext, prefix: ext_}\nplugins:\n  fixture-override: {prefix: o_}\n",
    );
    let (rows, _) = l.list(&cfg);
    assert_eq!(
        row(&rows, "ext_o_echo", "libfixture_override.so")["status"],
        "active"
    );
}

#[test]
fn invalid_tool_names_are_rejected_with_a_log_line() {
    let l = Layout::new();
    l.install("d", "fixture-faulty", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, log) = l.list(&cfg);
    assert_eq!(
        row(&rows, "bad.name", "libfixture_faulty.so")["status"],
        "invalid_name"
    );
    assert!(log.contains("Invalid tool name \"bad.name\""), "{log}");
}

#[test]
fn a_user_id_parameter_is_warned_about_by_tool_name() {
    let l = Layout::new();
    l.install("d", "fixture-faulty", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (_, log) = l.list(&cfg);
    assert!(
        log.contains("Tool lookup_by_user_id takes a `user_id` argument"),
        "{log}"
    );
}

#[test]
fn disabled_service_is_skipped_whole_with_its_log_line() {
    let l = Layout::new();
    l.install("d", "fixture-faulty", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, log) = l.list(&cfg);
    let hidden = row(&rows, "hidden_tool", "libfixture_faulty.so");
    assert_eq!(hidden["status"], "disabled_service");
    assert_eq!(hidden["service"], "Disabled");
    assert!(log.contains("Skipping disabled service: Disabled"), "{log}");
}

#[test]
fn a_panicking_enabled_hook_counts_as_disabled_with_a_warning() {
    let l = Layout::new();
    l.install("d", "fixture-faulty", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let (rows, log) = l.list(&cfg);
    let gated = row(&rows, "gated_tool", "libfixture_faulty.so");
    assert_eq!(gated["status"], "disabled_service");
    assert!(
        gated["detail"]
            .as_str()
            .unwrap()
            .contains("enabled() panicked: boom from enabled()"),
        "{gated}"
    );
    assert!(
        log.contains("WARN") && log.contains("Skipping disabled service: PanickyGate"),
        "{log}"
    );
    // A failing constructor disables its service the same way.
    let unbuilt = row(&rows, "unconstructed_tool", "libfixture_faulty.so");
    assert!(
        unbuilt["detail"]
            .as_str()
            .unwrap()
            .contains("database unreachable")
    );
    // The plugin's other tools are served.
    assert_eq!(
        row(&rows, "still_fine", "libfixture_faulty.so")["status"],
        "active"
    );
}
