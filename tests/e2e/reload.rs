//! Hot reload end to end: `mcp-host serve` (stdio and HTTP) as a child process watching real tool
//! directories and a real config file, while plugin files are copied in, replaced atomically, replaced
//! in bursts, truncated in place and deleted, and the config file is rewritten — with clients
//! connected that must hear `notifications/tools/list_changed`.
//!
//! Every wait polls (every [`POLL`]) for an event up to a generous deadline ([`WAIT`]); only the
//! negative checks (nothing happens without the watcher) wait a fixed, short time. How fast a change
//! is served is measured by the reload benchmark (`cargo bench -p mcp-host --bench reload`), never
//! asserted here: these tests must pass on a loaded 2-core machine.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use mcp_host_tests::serve::{
    EventStream, HttpServer, LEGACY, StdioServer, WAIT, header_refs, modern_headers, request,
    tool_names, with_meta,
};
use mcp_host_tests::{Layout, artifacts, open_gate, replace_atomically};
use serde_json::{Value, json};

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);
/// Where a 2026 listen stream's notifications carry their subscription.
const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";
const LIST_CHANGED: &str = "notifications/tools/list_changed";

// ---------------------------------------------------------------------------------------------
// Helpers

/// Call `probe` every [`POLL`] until it returns `Some` or `timeout` has passed; the value and how
/// long it took, or `None`.
fn poll<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<(T, Duration)> {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return Some((v, start.elapsed()));
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// The config section that makes fixture-basic's `Lifecycle` service write `marker` when the host
/// retires that version.
fn marker_config(marker: &Path) -> String {
    format!(
        "plugins:\n  fixture-basic:\n    config:\n      shutdown_marker: \"{}\"\n",
        marker.display()
    )
}

/// The text of a `tools/call` response, or `None` for an error response or an error result.
fn answer(resp: &Value) -> Option<String> {
    if resp["result"]["isError"] == true {
        return None;
    }
    resp["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_owned)
}

fn has(names: &[String], tool: &str) -> bool {
    names.iter().any(|n| n == tool)
}

fn count_lines(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

/// A stdio client that keeps every notification it sees, so polling with requests never swallows a
/// `list_changed`.
struct Client {
    s: StdioServer,
    legacy: bool,
    next: i64,
    notes: Vec<Value>,
}

impl Client {
    /// A 2026-07-28 client (no session) of `serve --stdio <args>`.
    fn modern(config: &Path, args: &[&str]) -> Self {
        Client {
            s: StdioServer::start_with(config, args, &[]),
            legacy: false,
            next: 0,
            notes: Vec::new(),
        }
    }

    /// A client with an initialized legacy session.
    fn legacy(config: &Path) -> Self {
        let mut s = StdioServer::start(config);
        let init = s.initialize(LEGACY);
        assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");
        Client {
            s,
            legacy: true,
            next: 0,
            notes: Vec::new(),
        }
    }

    /// Send a request without waiting; its id.
    fn start(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = json!(self.next);
        let params = if self.legacy {
            params
        } else {
            with_meta(params)
        };
        self.s.send(&request(id.clone(), method, params));
        id
    }

    /// The response to request `id` (other responses stay stashed).
    fn finish(&mut self, id: &Value, timeout: Duration) -> Value {
        let (resp, notes) = self.s.response_within(id, timeout);
        self.notes.extend(notes);
        resp
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        let id = self.start(method, params);
        self.finish(&id, WAIT)
    }

    fn tools(&mut self) -> Vec<String> {
        tool_names(&self.rpc("tools/list", json!({})))
    }

    fn call(&mut self, tool: &str, args: Value) -> Option<String> {
        answer(&self.rpc("tools/call", json!({ "name": tool, "arguments": args })))
    }

    fn echo(&mut self, text: &str) -> Option<String> {
        self.call("echo", json!({ "text": text }))
    }

    /// Whether a `list_changed` arrives (or already arrived) within `timeout`. Only call this with no
    /// request outstanding.
    fn heard_list_changed(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.notes.iter().any(|n| n["method"] == LIST_CHANGED) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if let Some(m) = self.s.recv(left.min(POLL))
                && m.get("method").is_some()
            {
                self.notes.push(m);
            }
        }
    }

    fn log(&self) -> String {
        self.s.stderr()
    }

    /// Whether the log shows `needle` within [`WAIT`] (stderr is read on its own thread, so a line
    /// may trail the answers that follow it).
    fn logged(&self, needle: &str) -> bool {
        self.s.logged(needle)
    }
}

/// A 2026-07-28 request to `path` (`/mcp` or `/mcp/agents/NAME`) on a fresh connection.
fn http_rpc(s: &HttpServer, path: &str, method: &str, params: Value) -> Value {
    let params = with_meta(params);
    let headers = modern_headers(method, params.get("name").and_then(Value::as_str));
    let body = request(1, method, params).to_string();
    let resp = s
        .connect()
        .post_to(path, &header_refs(&headers), body.as_bytes());
    assert_eq!(resp.status, 200, "{resp:?} {}", resp.text());
    resp.message()
}

fn http_tools(s: &HttpServer, path: &str) -> Vec<String> {
    tool_names(&http_rpc(s, path, "tools/list", json!({})))
}

fn http_echo(s: &HttpServer, text: &str) -> Option<String> {
    answer(&http_rpc(
        s,
        "/mcp",
        "tools/call",
        json!({ "name": "echo", "arguments": { "text": text } }),
    ))
}

/// A legacy session's GET stream (the stream-open comment already read past).
fn open_get_stream(s: &HttpServer) -> EventStream {
    let (conn, head) = s.open_legacy_get_stream(LEGACY);
    assert_eq!(head.status, 200, "{head:?}");
    EventStream::new(conn)
}

/// A 2026 `subscriptions/listen` stream for tool-list changes on `path`, acknowledged; its
/// subscription id.
fn open_listen_stream(s: &HttpServer, path: &str, id: &str) -> EventStream {
    let method = "subscriptions/listen";
    let params = with_meta(json!({ "notifications": { "toolsListChanged": true } }));
    let mut headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("Accept", "application/json, text/event-stream".to_owned()),
    ];
    headers.extend(modern_headers(method, None));
    let mut conn = s.connect();
    conn.send(
        "POST",
        path,
        &header_refs(&headers),
        request(id, method, params).to_string().as_bytes(),
    );
    let head = conn.read_head();
    assert_eq!(head.status, 200, "{head:?}");
    let mut stream = EventStream::new(conn);
    let ack = stream.next(WAIT);
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
    stream
}

// ---------------------------------------------------------------------------------------------
// New plugins

#[test]
fn a_plugin_copied_in_becomes_callable_and_a_stdio_session_hears_list_changed() {
    let l = Layout::new();
    l.dir("d");
    let cfg = l.config("tool_dirs: [d]\n");
    let mut c = Client::legacy(&cfg);
    assert!(!has(&c.tools(), "echo"), "the directory starts empty");
    assert!(!c.heard_list_changed(Duration::ZERO));

    l.install("d", "fixture-basic", None);
    let served = poll(WAIT, || {
        (has(&c.tools(), "echo") && c.echo("hi").as_deref() == Some("hi")).then_some(())
    });
    eprintln!("served {:?} after the copy", served.as_ref().map(|s| s.1));
    assert!(
        served.is_some(),
        "echo not listed and callable within {WAIT:?} of the copy:\n{}",
        c.log()
    );
    assert!(
        c.heard_list_changed(WAIT),
        "no list_changed on the legacy stdio session; got {:?}",
        c.notes
    );
    let note = c
        .notes
        .iter()
        .find(|n| n["method"] == LIST_CHANGED)
        .unwrap();
    assert!(note.get("id").is_none(), "a notification has no id: {note}");
    assert!(c.logged("Reloaded plugin"), "{}", c.log());
}

#[test]
fn a_plugin_copied_in_is_served_over_http_and_both_streams_hear_list_changed() {
    let l = Layout::new();
    l.dir("d");
    let cfg = l.config("tool_dirs: [d]\n");
    let s = HttpServer::start(&cfg);
    let mut get = open_get_stream(&s);
    let mut listen = open_listen_stream(&s, "/mcp", "sub-1");
    assert!(!has(&http_tools(&s, "/mcp"), "echo"));

    l.install("d", "fixture-basic", None);
    let served = poll(WAIT, || {
        (has(&http_tools(&s, "/mcp"), "echo") && http_echo(&s, "hi").as_deref() == Some("hi"))
            .then_some(())
    });
    eprintln!("served {:?} after the copy", served.as_ref().map(|s| s.1));
    assert!(
        served.is_some(),
        "echo not listed and callable within {WAIT:?} of the copy:\n{}",
        s.stderr()
    );

    let legacy = get.wait_for(LIST_CHANGED, WAIT);
    assert!(legacy.get("id").is_none(), "{legacy}");
    let modern = listen.wait_for(LIST_CHANGED, WAIT);
    assert_eq!(
        modern["params"]["_meta"][SUBSCRIPTION], "sub-1",
        "a listen stream's notification names its subscription: {modern}"
    );
}

// ---------------------------------------------------------------------------------------------
// Replacing and removing plugins

#[test]
fn a_replacement_takes_over_while_a_long_call_ends_on_the_old_version_which_retires_after() {
    let l = Layout::new();
    let marker = l.root.path().join("basic-retired");
    let gate = l.root.path().join("gate");
    let file = l.install("d", "fixture-basic", Some("libplug.so"));
    let cfg = l.config(&format!("tool_dirs: [d]\n{}", marker_config(&marker)));
    let mut c = Client::modern(&cfg, &[]);
    assert_eq!(c.echo("a").as_deref(), Some("a"));

    // A call that runs until the test opens its gate, however long the reload takes.
    let long = c.start(
        "tools/call",
        json!({ "name": "wait_for", "arguments": { "path": gate } }),
    );
    // A round trip after the long call was read: it has looked up its tool by now.
    assert_eq!(c.echo("b").as_deref(), Some("b"));

    replace_atomically(&artifacts().plugin("fixture-override"), &file);
    let swapped = poll(WAIT, || {
        (c.echo("c").as_deref() == Some("override: c")).then_some(())
    });
    assert!(
        swapped.is_some(),
        "the rebuilt version is not serving:\n{}",
        c.log()
    );
    let tools = c.tools();
    assert!(
        has(&tools, "wrap_count") && !has(&tools, "wait_for"),
        "{tools:?}"
    );
    // The old version is still running the long call: it must not be retired, now or a little later.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !marker.exists(),
        "the old version was retired while a call was still running on it:\n{}",
        c.log()
    );

    open_gate(&gate, "released");
    let resp = c.finish(&long, WAIT);
    assert_eq!(
        answer(&resp).as_deref(),
        Some("released"),
        "the long call completes on the old version (the new one has no `wait_for`): {resp}"
    );
    assert!(
        poll(WAIT, || marker.exists().then_some(())).is_some(),
        "the old version's shutdown hook did not run after its last call finished:\n{}",
        c.log()
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "retired");
    assert_eq!(c.echo("d").as_deref(), Some("override: d"));
}

#[test]
fn a_truncated_replacement_is_refused_and_the_previous_version_keeps_serving() {
    let l = Layout::new();
    let file = l.install("d", "fixture-basic", Some("libplug.so"));
    let cfg = l.config("tool_dirs: [d]\n");
    let mut c = Client::modern(&cfg, &[]);
    assert_eq!(c.echo("a").as_deref(), Some("a"));

    // A copy cut short: the first 64 KiB of the rebuilt library, written over the file in place.
    let rebuilt = std::fs::read(artifacts().plugin("fixture-override")).unwrap();
    std::fs::write(&file, &rebuilt[..64 * 1024]).unwrap();
    let logged = poll(WAIT, || {
        c.log()
            .lines()
            .any(|l| {
                l.contains("Error loading plugin")
                    && l.contains("libplug.so")
                    && l.contains("the previous version stays in service")
            })
            .then_some(())
    });
    assert!(
        logged.is_some(),
        "no `Error loading plugin … the previous version stays in service` for the truncated \
         file:\n{}",
        c.log()
    );
    assert_eq!(
        c.echo("b").as_deref(),
        Some("b"),
        "the old version still answers"
    );
    assert!(has(&c.tools(), "sleep"), "the old version's tools stay");
    assert!(!c.log().contains("Reloaded plugin"), "{}", c.log());
}

#[test]
fn deleting_an_overriding_plugin_brings_back_the_packaged_tool() {
    let l = Layout::new();
    let mine = l.install("mine", "fixture-override", None);
    l.install("packaged", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [mine, packaged]\n");
    let mut c = Client::modern(&cfg, &[]);
    assert_eq!(c.echo("x").as_deref(), Some("override: x"));

    std::fs::remove_file(&mine).unwrap();
    let back = poll(WAIT, || (c.echo("x").as_deref() == Some("x")).then_some(()));
    eprintln!(
        "packaged echo back {:?} after the delete",
        back.as_ref().map(|b| b.1)
    );
    assert!(
        back.is_some(),
        "the packaged echo is not back within {WAIT:?}:\n{}",
        c.log()
    );
    assert!(!has(&c.tools(), "wrap_count"));
    assert!(c.logged("Removed plugin"), "{}", c.log());
}

#[test]
fn twenty_rapid_replacements_are_debounced_into_a_few_reloads_and_the_last_version_wins() {
    let l = Layout::new();
    let file = l.install("d", "fixture-basic", Some("libplug.so"));
    // Two builds staged in the same directory under names discovery ignores; each replacement hard-
    // links one to a temporary name and renames that over the plugin (a new file every time).
    let basic = l.install("d", "fixture-basic", Some(".basic.staged"));
    let over = l.install("d", "fixture-override", Some(".override.staged"));
    let cfg = l.config("tool_dirs: [d]\n");
    let mut c = Client::modern(&cfg, &[]);
    assert_eq!(c.echo("x").as_deref(), Some("x"));

    let tmp = file.with_file_name(".libplug.so.tmp");
    // A gap between two replacements longer than this may legitimately end a burst (the debounce is
    // 150 ms); on a loaded machine the test's own sleeps can stretch that far, so such gaps are
    // counted and each allows one more reload.
    let burst_gap = Duration::from_millis(100);
    let mut long_gaps = 0;
    let mut last = Instant::now();
    for i in 0..20 {
        let src = if i % 2 == 0 { &basic } else { &over };
        std::fs::hard_link(src, &tmp).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        if last.elapsed() > burst_gap {
            long_gaps += 1;
        }
        last = Instant::now();
        // Well inside the 150 ms quiet period, but longer than a rescan takes (~30 ms for the debug
        // fixture), so without the debounce most replacements would be a reload of their own (10 to
        // 16 measured with DEBOUNCE = 0; a few ms apart, the rescans alone coalesce the burst).
        std::thread::sleep(Duration::from_millis(40));
    }
    let last = poll(WAIT, || {
        (c.echo("x").as_deref() == Some("override: x")).then_some(())
    });
    assert!(
        last.is_some(),
        "the last version is not serving:\n{}",
        c.log()
    );
    // Let any straggling rescan finish before counting: the count must stay put for a while.
    let (mut seen, mut since) = (usize::MAX, Instant::now());
    let settled = poll(WAIT, || {
        let n = count_lines(&c.log(), "Reloaded plugin");
        if n != seen {
            (seen, since) = (n, Instant::now());
        }
        (since.elapsed() >= Duration::from_millis(500)).then_some(n)
    });
    let (reloads, _) = settled.expect("the reload count never settled");
    assert!(
        (1..=5 + long_gaps).contains(&reloads),
        "{reloads} reloads for one burst of 20 replacements ({long_gaps} gaps over \
         {burst_gap:?}):\n{}",
        c.log()
    );
    assert!(c.s.is_running(), "the host died:\n{}", c.log());
    assert_eq!(c.echo("y").as_deref(), Some("override: y"));
    assert!(has(&c.tools(), "wrap_count"));
}

// ---------------------------------------------------------------------------------------------
// Configuration changes

#[test]
fn a_changed_agent_list_in_the_config_file_takes_effect_and_is_announced() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\nagents:\n  a:\n    allow: [\"echo\"]\n");
    let s = HttpServer::start(&cfg);
    let path = "/mcp/agents/a";
    assert_eq!(http_tools(&s, path), ["echo"]);
    let mut listen = open_listen_stream(&s, path, "agent-a");

    l.config("tool_dirs: [d]\nagents:\n  a:\n    allow: [\"echo\", \"count\"]\n");
    let widened = poll(WAIT, || {
        let tools = http_tools(&s, path);
        has(&tools, "count").then_some(tools)
    });
    let (tools, _) = widened.unwrap_or_else(|| {
        panic!(
            "the new agent list is not in effect within {WAIT:?}:\n{}",
            s.stderr()
        )
    });
    assert_eq!(tools, ["count", "echo"]);
    let note = listen.wait_for(LIST_CHANGED, WAIT);
    assert_eq!(note["params"]["_meta"][SUBSCRIPTION], "agent-a", "{note}");
}

#[test]
fn changes_made_before_the_watcher_is_in_place_are_applied_when_it_starts() {
    // Deterministic form of the start-up window: the host has loaded, then the configuration and a
    // tool directory change, and only then does watching begin. Nothing will ever signal those
    // changes; the watcher's catch-up must find them.
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\nagents:\n  a:\n    allow: [\"echo\"]\n");
    let host = l.host(&cfg);
    assert!(host.access().agent("b").is_none());
    assert!(host.registry().get("wrap_count").is_none());

    l.config("tool_dirs: [d]\nagents:\n  a:\n    allow: [\"echo\"]\n  b:\n    deny: [\"*\"]\n");
    l.install("d", "fixture-override", None);
    let _watcher = mcp_host::host::watch::watch(host.clone()).unwrap();

    let applied = poll(WAIT, || {
        (host.access().agent("b").is_some() && host.registry().get("wrap_count").is_some())
            .then_some(())
    });
    assert!(
        applied.is_some(),
        "the catch-up did not apply the configuration ({:?}) and the new file ({:?})",
        host.config().agents.keys().collect::<Vec<_>>(),
        host.registry().get("wrap_count").is_some()
    );
}

#[test]
fn a_reload_that_finds_nothing_changed_keeps_the_tool_set_and_a_change_still_applies() {
    // The watcher's catch-up at start reloads once with nothing to apply: the tool set start built
    // stays (not built again), and the next reload with a change builds the new one.
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\n");
    // Loaded as `serve` loads it (the process's environment is a layer, as at every reload).
    let host = mcp_host::Host::start(
        mcp_host::Config::load(Some(&cfg)).unwrap(),
        mcp_host::HostOptions {
            probe_exe: Some(artifacts().host.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let started = host.registry();
    let report = host.reload();
    assert!(
        !report.versions_changed() && !report.tools_changed,
        "{report:?}"
    );
    assert!(
        std::sync::Arc::ptr_eq(&started, &host.registry()),
        "a reload with nothing changed built the tool set again"
    );
    l.install("d", "fixture-override", None);
    let report = host.reload();
    assert!(report.tools_changed, "{report:?}");
    assert!(host.registry().get("wrap_count").is_some());
    let changed = host.registry();
    l.config("tool_dirs: [d]\nagents:\n  b:\n    deny: [\"*\"]\n");
    host.reload();
    assert!(host.access().agent("b").is_some());
    assert!(
        !std::sync::Arc::ptr_eq(&changed, &host.registry()),
        "a changed configuration kept the old tool set"
    );
}

#[test]
fn a_config_change_right_after_the_first_answer_is_applied() {
    // An operator (or a deployment) rewrites the configuration the moment the server answers: the
    // change must not fall into the window before the watcher is in place.
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\nagents:\n  a:\n    allow: [\"echo\"]\n");
    let mut c = Client::modern(&cfg, &["--agent", "a"]);
    assert_eq!(c.tools(), ["echo"]);
    l.config("tool_dirs: [d]\nagents:\n  a:\n    allow: [\"echo\", \"count\"]\n");
    let widened = poll(WAIT, || {
        let tools = c.tools();
        has(&tools, "count").then_some(tools)
    });
    let (tools, _) = widened
        .unwrap_or_else(|| panic!("the rewritten agent list never took effect:\n{}", c.log()));
    assert_eq!(tools, ["count", "echo"]);
}

#[test]
fn a_changed_plugin_config_section_reloads_that_plugin_with_the_new_settings() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let marker = |n: u32| l.root.path().join(format!("retired-{n}"));
    let cfg = l.config(&format!("tool_dirs: [d]\n{}", marker_config(&marker(1))));
    let mut c = Client::modern(&cfg, &[]);
    assert_eq!(c.echo("x").as_deref(), Some("x"));

    l.config(&format!("tool_dirs: [d]\n{}", marker_config(&marker(2))));
    let retired = poll(WAIT, || marker(1).exists().then_some(()));
    assert!(
        retired.is_some(),
        "the version with the old section was not retired:\n{}",
        c.log()
    );
    assert!(!marker(2).exists(), "the new version is still in service");
    assert_eq!(c.echo("y").as_deref(), Some("y"));
    assert!(c.logged("Reloaded plugin"), "{}", c.log());

    // The version now serving got the new section: retiring it writes the second marker.
    l.config(&format!("tool_dirs: [d]\n{}", marker_config(&marker(3))));
    let retired = poll(WAIT, || marker(2).exists().then_some(()));
    assert!(
        retired.is_some(),
        "the reloaded version did not get the new config section:\n{}",
        c.log()
    );
}

#[test]
fn a_reload_applies_protocol_settings_at_once_and_warns_about_start_only_keys() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let mut c = Client::modern(&cfg, &[]);
    let first = c.rpc("tools/list", json!({}));
    assert!(first["result"].get("nextCursor").is_none(), "{first}");

    l.config("tool_dirs: [d]\nlist_page_size: 1\nshutdown_grace_secs: 3\n");
    let paged = poll(WAIT, || {
        let r = c.rpc("tools/list", json!({}));
        (r["result"]["tools"].as_array().map(Vec::len) == Some(1)).then_some(r)
    });
    let (paged, _) = paged.unwrap_or_else(|| panic!("the page size did not apply:\n{}", c.log()));
    assert!(paged["result"]["nextCursor"].is_string(), "{paged}");
    assert!(
        c.logged("Configuration key `shutdown_grace_secs` changed, but it applies at start only"),
        "{}",
        c.log()
    );
    assert!(!c.log().contains("`list_page_size` changed"), "{}", c.log());
}

// ---------------------------------------------------------------------------------------------
// --no-watch and SIGHUP

#[test]
fn with_no_watch_a_new_file_is_ignored_until_sighup_rescans() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let mut c = Client::modern(&cfg, &["--no-watch"]);
    assert!(!has(&c.tools(), "wrap_count"));

    l.install("d", "fixture-override", None);
    // Nothing may happen: several debounce periods pass without a rescan.
    std::thread::sleep(Duration::from_millis(600));
    assert!(!has(&c.tools(), "wrap_count"), "reloaded without a watcher");
    assert!(!c.log().contains("Reloaded plugin"), "{}", c.log());

    let status = std::process::Command::new("kill")
        .args(["-HUP", &c.s.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rescanned = poll(WAIT, || has(&c.tools(), "wrap_count").then_some(()));
    assert!(rescanned.is_some(), "SIGHUP did not rescan:\n{}", c.log());
    assert!(c.logged("SIGHUP: rescanning"), "{}", c.log());
    assert!(c.s.is_running());
    // The earlier directory keeps precedence for `echo` (sorted file order within one directory).
    assert_eq!(c.echo("z").as_deref(), Some("z"));
}

#[test]
fn a_broken_file_is_reported_once_not_retried_on_unrelated_changes_and_loads_once_fixed() {
    let l = Layout::new();
    let broken = l.install("d", "fixture-override", Some("libbroken.so"));
    let bytes = std::fs::read(&broken).unwrap();
    std::fs::write(&broken, &bytes[..64 * 1024]).unwrap();
    l.install("d", "fixture-basic", Some("libgood.so"));
    let cfg = l.config("tool_dirs: [d]\n");
    let mut c = Client::modern(&cfg, &[]);
    assert_eq!(c.echo("a").as_deref(), Some("a"));
    let errors = |log: &str| {
        log.lines()
            .filter(|l| l.contains("Error loading plugin") && l.contains("libbroken.so"))
            .count()
    };
    // stderr is read on its own thread: the error line may trail the first answer.
    assert!(
        poll(WAIT, || (errors(&c.log()) == 1).then_some(())).is_some(),
        "{}",
        c.log()
    );

    // An unrelated change: a new plugin appears. The broken file is not probed or logged again.
    l.install("d", "fixture-faulty", Some("libother.so"));
    let other = poll(WAIT, || has(&c.tools(), "still_fine").then_some(()));
    assert!(
        other.is_some(),
        "the new plugin was not picked up:\n{}",
        c.log()
    );
    assert_eq!(errors(&c.log()), 1, "{}", c.log());

    // Fixed: it loads (its `wrap_count` tool appears).
    replace_atomically(&artifacts().plugin("fixture-override"), &broken);
    let fixed = poll(WAIT, || has(&c.tools(), "wrap_count").then_some(()));
    assert!(
        fixed.is_some(),
        "the fixed file was not loaded:\n{}",
        c.log()
    );
}
