//! Loading at the first call: a plugin that allows it (`export_plugin!(load: on_first_call, ...)`)
//! is loaded at start the first time, and from then on served from the manifest remembered then,
//! its library opened and its `init` run only when a call needs it. A plugin that cannot be loaded
//! then (its checked copy changed), or exports something else than was remembered, is withdrawn,
//! never miscalled, and loaded at start the next time.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcp_host_tests::Layout;
use mcp_host_tests::serve::{StdioServer, request, result_text, tool_names};
use serde_json::{Value, json};

/// A layout with `fixture-lazy` in `d`, its own probe cache and data directory, and `greeting` in
/// its configuration; the config file and the file `init` appends to on every run.
fn lazy_layout(greeting: &str) -> (Layout, PathBuf, PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-lazy", None);
    let cfg = write_config(&l, greeting);
    let runs = l.root.path().join("data/fixture-lazy/init-runs");
    (l, cfg, runs)
}

fn write_config(l: &Layout, greeting: &str) -> PathBuf {
    let root = l.root.path();
    l.config(&format!(
        "tool_dirs: [d]\nprobe_cache: {}\ndata_dir: {}\nplugins:\n  fixture-lazy:\n    config: {{greeting: {greeting}}}\n",
        root.join("cache/probed").display(),
        root.join("data").display(),
    ))
}

/// How many times the plugin's `init` has run.
fn init_runs(runs: &Path) -> usize {
    std::fs::read_to_string(runs).map_or(0, |s| s.lines().count())
}

/// A served stdio session (2025-06-18, so list changes are notified) and its tool names.
fn serve(cfg: &Path, env: &[(&str, &str)]) -> (StdioServer, Vec<String>) {
    let mut s = StdioServer::start_with(cfg, &[], env);
    s.initialize("2025-06-18");
    let names = list_tools(&mut s, 100);
    (s, names)
}

fn list_tools(s: &mut StdioServer, id: u64) -> Vec<String> {
    tool_names(&s.call(id, "tools/list", json!({})))
}

fn call(s: &mut StdioServer, id: u64, tool: &str, args: Value) -> Value {
    s.call(id, "tools/call", json!({"name": tool, "arguments": args}))
}

/// Call `tool`; its response, and whether `notifications/tools/list_changed` arrived before it or
/// within a generous wait after it.
fn call_hearing_list_changed(
    s: &mut StdioServer,
    id: u64,
    tool: &str,
    args: Value,
) -> (Value, bool) {
    const LIST_CHANGED: &str = "notifications/tools/list_changed";
    s.send(&request(
        id,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    ));
    let (answer, before) = s.response_within(&json!(id), Duration::from_secs(30));
    let mut told = before.iter().any(|n| n["method"] == LIST_CHANGED);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !told && Instant::now() < deadline {
        told = s
            .recv(Duration::from_millis(500))
            .is_some_and(|n| n["method"] == LIST_CHANGED);
    }
    (answer, told)
}

/// Stop a server by closing its input, and wait for it to exit.
fn stop(mut s: StdioServer) -> String {
    s.close_stdin();
    s.wait_exit(Duration::from_secs(30)).expect("exits");
    s.stderr()
}

#[test]
fn a_plugin_that_allows_it_is_loaded_at_its_first_call_once_its_manifest_is_remembered() {
    let (l, cfg, runs) = lazy_layout("Hi");
    let both = vec!["lazy_extra".to_owned(), "lazy_greet".to_owned()];

    // First start: nothing is remembered, so the plugin loads at start.
    let (s, names) = serve(&cfg, &[]);
    assert_eq!(names, both);
    assert_eq!(init_runs(&runs), 1);
    stop(s);

    // Second start: the tools are served from the remembered manifest; `init` has not run.
    let (mut s, names) = serve(&cfg, &[]);
    assert_eq!(names, both);
    assert_eq!(init_runs(&runs), 1, "init ran before any call");
    let answer = call(&mut s, 1, "lazy_greet", json!({"name": "Ada"}));
    assert_eq!(result_text(&answer), "Hi, Ada!", "{answer}");
    assert_eq!(init_runs(&runs), 1 + 1);
    let again = call(&mut s, 2, "lazy_greet", json!({"name": "Bo"}));
    assert_eq!(result_text(&again), "Hi, Bo!", "{again}");
    assert_eq!(
        call(&mut s, 3, "lazy_extra", json!({}))["result"]["content"][0]["text"],
        "extra"
    );
    assert_eq!(init_runs(&runs), 2, "init runs once");
    let log = stop(s);
    assert!(log.contains("at its first call"), "{log}");
    assert!(!log.contains(" ERROR ") && !log.contains(" WARN "), "{log}");

    // Another configuration is another key: loaded at start again (and remembered again).
    let cfg = write_config(&l, "Hey");
    let (mut s, _) = serve(&cfg, &[]);
    assert_eq!(init_runs(&runs), 3, "a new configuration loads at start");
    let answer = call(&mut s, 1, "lazy_greet", json!({"name": "Ada"}));
    assert_eq!(result_text(&answer), "Hey, Ada!", "{answer}");
    stop(s);

    // Commands that inspect plugins load them for real.
    let (rows, _) = l.list(&cfg);
    assert!(
        rows.iter()
            .any(|r| r["tool"] == "lazy_greet" && r["status"] == "active")
    );
    assert_eq!(init_runs(&runs), 4);
}

#[test]
fn a_plugin_whose_checked_copy_changed_before_its_first_call_is_withdrawn_not_loaded() {
    let (l, cfg, runs) = lazy_layout("Hi");
    stop(serve(&cfg, &[]).0);

    // The private copy checked at start is altered before the first call: it is never opened.
    let (mut s, names) = serve(&cfg, &[]);
    assert_eq!(names, ["lazy_extra", "lazy_greet"]);
    let copies = kept_copies(&l.root.path().join("cache/copies"));
    assert_eq!(copies.len(), 1, "{copies:?}");
    let mut copy = std::fs::OpenOptions::new()
        .append(true)
        .open(&copies[0])
        .unwrap();
    std::io::Write::write_all(&mut copy, b"\0").unwrap();
    drop(copy);
    let (answer, told) = call_hearing_list_changed(&mut s, 1, "lazy_greet", json!({"name": "Ada"}));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let said = result_text(&answer);
    assert!(
        said.contains("could not be loaded") && said.contains("changed since it was checked"),
        "{said}"
    );
    // Its tools leave the list, and the client is told.
    assert!(told, "no tools/list_changed: {}", s.stderr());
    assert!(list_tools(&mut s, 3).is_empty());
    assert_eq!(init_runs(&runs), 1, "the altered copy was opened");
    let log = stop(s);
    assert!(
        log.contains("Error loading plugin") && log.contains("at its first call"),
        "{log}"
    );

    // Next start: nothing is remembered, so it is loaded at start (checked again, as any plugin).
    let (s, names) = serve(&cfg, &[]);
    assert_eq!(names, ["lazy_extra", "lazy_greet"]);
    assert_eq!(init_runs(&runs), 2);
    stop(s);
}

/// The library files under the copy cache `dir`.
fn kept_copies(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.path().is_dir() {
            found.extend(kept_copies(&entry.path()));
        } else if entry
            .path()
            .extension()
            .is_some_and(|e| e == "so" || e == "dylib" || e == "dll")
        {
            found.push(entry.path());
        }
    }
    found
}

#[test]
fn a_plugin_whose_exports_changed_since_they_were_remembered_is_withdrawn_not_miscalled() {
    let (_l, cfg, runs) = lazy_layout("Hi");
    stop(serve(&cfg, &[]).0);
    let hide = [("FIXTURE_LAZY_HIDE_EXTRA", "1")];

    // Remembered with both services; this `init` disables one, so its tool numbering differs.
    let (mut s, names) = serve(&cfg, &hide);
    assert_eq!(names, ["lazy_extra", "lazy_greet"]);
    let answer = call(&mut s, 1, "lazy_extra", json!({}));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(result_text(&answer).contains("differs"), "{answer}");
    assert_eq!(init_runs(&runs), 2, "init ran at this first call");
    stop(s);

    // Next start loads it at start: what it exports now is what is served.
    let (mut s, names) = serve(&cfg, &hide);
    assert_eq!(names, ["lazy_greet"]);
    let answer = call(&mut s, 1, "lazy_greet", json!({"name": "Ada"}));
    assert_eq!(result_text(&answer), "Hi, Ada!", "{answer}");
    stop(s);
}
