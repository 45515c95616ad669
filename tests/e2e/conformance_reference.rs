//! The official conformance suites THROUGH the host, in front of the conformance repository's own
//! reference servers (its `examples/servers/typescript/everything-server.ts`): the 2025-11-25 suite
//! (0.1.16) in front of the server of the repository's v0.1.16 tag, the 2026-07-28 suite in front
//! of the server of its main line (0.2.0 prereleases). Each suite runs against the reference server
//! directly, then through `mcp-host serve` serving that server as an HTTP upstream without a
//! prefix; every check that does not pass through the host (FAILURE or WARNING) must not pass
//! directly either, save the few in [`THROUGH_THE_HOST_ONLY`], each with why.
//!
//! The servers are not on any registry and nothing of that repository is committed here: each test
//! runs when its variable (`MCP_CONFORMANCE_REFERENCE_2025`, `MCP_CONFORMANCE_REFERENCE_2026`)
//! names a staged server, and otherwise skips, even in CI (see
//! `mcp_host_tests::clients::conformance_reference`). tests/conformance/README.md says what to
//! stage.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mcp_host_tests::Layout;
use mcp_host_tests::clients::{conformance_reference, conformance_runner};
use mcp_host_tests::serve::{HttpServer, START, tool_names};
use serde_json::{Value, json};

/// Checks that cannot pass through the host, whatever it does, with why: `(revision, scenario,
/// check id)`.
const THROUGH_THE_HOST_ONLY: &[(&str, &str, &str, &str)] = &[
    (
        "2026-07-28",
        "server-stateless",
        "sep-2575-server-sends-tools-list-changed-on-subscription",
        "the suite changes the list by calling test_trigger_tool_change, a hook the reference \
         server serves without listing it; the host serves listed tools only",
    ),
    (
        "2026-07-28",
        "server-stateless",
        "sep-2575-server-sends-prompts-list-changed-on-subscription",
        "the same, with test_trigger_prompt_change",
    ),
];

/// The 2025 run's call policy: the v0.1.16 server's `test_reconnection` never answers anyone (it
/// closes the call's stream, and its event store replays nothing on `GET` with `Last-Event-ID`),
/// so through the host the call would stay in flight until its timeout, and an elicitation of a
/// later scenario — which that server sends on its standalone stream, naming no request — would
/// meet two calls in flight and be refused rather than guessed (docs/operators/upstream-servers.md).
/// The host refuses that one tool instead; directly, the suite never waits for its answer.
const POLICY_2025: &str = "policy:\n  rules:\n    - name: never-answers\n      when: \"tool.name == 'test_reconnection'\"\n      outcome: deny\n      message: the reference server never answers it\n";

/// A reference server on a port of its own (`node --import tsx everything-server.ts`, one
/// process), killed when dropped.
struct Reference {
    child: Child,
    port: u16,
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Reference {
    /// Start the server staged in `dir` and wait (generously: it compiles TypeScript first) until
    /// it accepts connections.
    fn start(dir: &Path) -> Reference {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let node = mcp_host_tests::workspace_root().join(".ci/.tools/bin/node");
        let child = Command::new(node)
            .args(["--import", "tsx", "everything-server.ts"])
            .current_dir(dir)
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = Reference { child, port };
        let deadline = Instant::now() + START * 4;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                server.child.try_wait().unwrap().is_none(),
                "the reference server in {} exited",
                dir.display()
            );
            assert!(
                Instant::now() < deadline,
                "the reference server did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

/// What one suite run found: each scenario's checks, as `(check id, status)`.
type Outcome = BTreeMap<String, Vec<(String, String)>>;

/// Run the suite for `revision` against `url` (tests/conformance/run.sh, whose exit status is
/// the host's own baseline's and means nothing here), its results in `out`.
fn run_suite(runner: &Path, url: &str, revision: &str, out: &Path) -> Outcome {
    let run = Command::new("bash")
        .arg(runner)
        .arg(url)
        .arg(revision)
        .env("CONFORMANCE_OUT", out)
        .output()
        .unwrap();
    let mut outcome = Outcome::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("checks.json")) else {
            continue;
        };
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let checks: Vec<Value> = serde_json::from_str(&text).unwrap();
        let checks = checks.iter().map(|c| {
            (
                c["id"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        });
        outcome.insert(scenario_of(&name).to_owned(), checks.collect());
    }
    assert!(
        outcome.len() >= 20,
        "the {revision} suite ran {} scenarios against {url}:\n{}\n{}",
        outcome.len(),
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    outcome
}

/// A result directory's scenario: `server-<scenario>-<timestamp>`.
fn scenario_of(dir: &str) -> &str {
    let name = dir.strip_prefix("server-").unwrap_or(dir);
    let bytes = name.as_bytes();
    let stamp = (0..bytes.len()).rev().find(|&i| {
        let shape = b"-0000-00-00T";
        bytes.len() >= i + shape.len()
            && shape.iter().enumerate().all(|(k, &c)| {
                let b = bytes[i + k];
                if c == b'0' {
                    b.is_ascii_digit()
                } else {
                    b == c
                }
            })
    });
    stamp.map_or(name, |i| &name[..i])
}

/// The checks that did not pass (FAILURE or WARNING), as `(scenario, check id)`.
fn not_passed(outcome: &Outcome) -> BTreeSet<(String, String)> {
    outcome
        .iter()
        .flat_map(|(scenario, checks)| {
            checks
                .iter()
                .filter(|(_, status)| status == "FAILURE" || status == "WARNING")
                .map(move |(id, _)| (scenario.clone(), id.clone()))
        })
        .collect()
}

/// "N scenarios: P passed, F failed (W with warnings only); C checks failed, K warned".
fn summary(outcome: &Outcome) -> String {
    let has = |checks: &[(String, String)], s: &str| checks.iter().any(|(_, st)| st == s);
    let failed = outcome.values().filter(|c| has(c, "FAILURE")).count();
    let warned = outcome
        .values()
        .filter(|c| !has(c, "FAILURE") && has(c, "WARNING"))
        .count();
    let count = |s: &str| outcome.values().flatten().filter(|(_, st)| st == s).count();
    format!(
        "{} scenarios: {} passed, {failed} failed, {warned} passed with warnings; checks: {} passed, {} failed, {} warnings",
        outcome.len(),
        outcome.len() - failed - warned,
        count("SUCCESS"),
        count("FAILURE"),
        count("WARNING"),
    )
}

/// Wait (generously) until `host` serves the reference server's tools.
fn wait_until_served(host: &HttpServer) {
    let deadline = Instant::now() + START * 4;
    loop {
        let listed = tool_names(&host.modern(1, "tools/list", json!({})).message());
        if listed.iter().any(|t| t == "test_simple_text") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the host never served the reference server's tools ({listed:?}):\n{}",
            host.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Run `revision`'s suite directly against the reference server staged where `var` says, then
/// through the host (its configuration with `extra`), and compare.
fn direct_and_through(var: &str, what: &str, revision: &str, extra: &str) {
    let Some(dir) = conformance_reference(var, what) else {
        return;
    };
    let Some(runner) = conformance_runner() else {
        return;
    };
    let server = Reference::start(&dir);
    let l = Layout::new();
    let direct = run_suite(&runner, &server.url(), revision, &l.dir("direct"));
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {{url: \"{}\"}}\n    name: reference\n{extra}",
        server.url()
    ));
    let host = HttpServer::start(&cfg);
    wait_until_served(&host);
    let url = format!("http://{}/mcp", host.addr);
    let through = run_suite(&runner, &url, revision, &l.dir("through"));
    eprintln!(
        "{revision} suite, {what} reference server directly: {}",
        summary(&direct)
    );
    eprintln!("{revision} suite, through the host: {}", summary(&through));
    let allowed: BTreeSet<(String, String)> = THROUGH_THE_HOST_ONLY
        .iter()
        .filter(|(r, ..)| *r == revision)
        .map(|(_, s, id, _)| ((*s).to_owned(), (*id).to_owned()))
        .collect();
    let direct_bad = not_passed(&direct);
    let worse: Vec<_> = not_passed(&through)
        .into_iter()
        .filter(|c| !direct_bad.contains(c) && !allowed.contains(c))
        .collect();
    assert!(
        worse.is_empty(),
        "through the host, these {revision} checks did not pass but pass directly: {worse:?}\n\
         (results in {})\nthe host's log:\n{}",
        l.root.path().display(),
        host.stderr()
    );
    assert_eq!(
        direct.keys().collect::<Vec<_>>(),
        through.keys().collect::<Vec<_>>(),
        "the same scenarios ran"
    );
}

#[test]
fn the_2025_suite_through_the_host_fails_no_check_the_v0_1_16_reference_server_passes() {
    direct_and_through(
        "MCP_CONFORMANCE_REFERENCE_2025",
        "v0.1.16",
        "2025-11-25",
        POLICY_2025,
    );
}

#[test]
fn the_2026_suite_through_the_host_fails_no_check_the_main_line_reference_server_passes() {
    direct_and_through(
        "MCP_CONFORMANCE_REFERENCE_2026",
        "main-line (0.2.0 prerelease)",
        "2026-07-28",
        "",
    );
}
