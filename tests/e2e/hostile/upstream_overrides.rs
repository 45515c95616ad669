//! Definition overrides and argument injection (issue 54), against the hostile upstream's
//! `issues` mode (`create_issue` answers with the name it was called by and the arguments it got)
//! and fixture-basic, over stdio and HTTP, in both eras (2025-11-25 sessions, 2026-07-28
//! stateless): an override renames a tool, re-describes it, hides an argument and injects a value
//! the upstream receives under its own tool name, while a client's attempt to set that argument
//! is refused with invalid params; `${caller.user}` is filled from the verified caller (and a
//! call without one is refused); an agent's own override is seen by that agent only; the lock
//! file pins the upstream's definition and the override apart, so an upstream whose tool changes
//! under an override is still held by pinning, and so is a changed override; policy rules see
//! `tool.source_name`; `mcp-host list` shows the original beside what is exposed.

use std::path::PathBuf;

use mcp_host_tests::serve::{HttpServer, LEGACY, MODERN};

use super::*;

/// The stdio `tool_dirs` entry of `hostile.py --mode issues --era ERA`, as upstream `gh`.
fn issues_entry(era: &str, extra: &str) -> String {
    let script = mcp_host_tests::workspace_root().join("tests/fixtures/upstream/hostile.py");
    format!(
        "  - server: {{command: [python3, {:?}, --mode, issues, --era, \"{era}\"]}}\n    name: gh\n{extra}",
        script.to_string_lossy()
    )
}

/// The overrides of `create_issue` every test starts from.
const OVERRIDES: &str = "plugins:\n  gh:\n    overrides:\n      tools:\n        create_issue:\n          \
     name: file_bug\n          title: File a bug\n          \
     description: File a bug in acme's repositories.\n          \
     annotations: {destructiveHint: false}\n          arguments:\n            \
     owner: {value: acme}\n            force: {hide: true}\n            \
     repo: {default: widgets, description: Which repository.}\n";

/// A layout serving fixture-basic from `d` and the issues upstream (era `era`), with `extra`.
fn issues_layout(era: &str, extra: &str) -> (Layout, PathBuf) {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config(&format!(
        "tool_dirs:\n  - d\n{}{extra}",
        issues_entry(era, "")
    ));
    (l, cfg)
}

/// One way of talking to the host: stdio or HTTP, in one era.
pub(super) enum Client {
    Stdio(StdioServer, &'static str),
    Modern(HttpServer),
    Legacy(HttpServer, String),
}

impl Client {
    pub(super) fn stdio(cfg: &Path, era: &'static str) -> Client {
        Client::stdio_serving(cfg, era, "say")
    }

    /// Over stdio in `era`, once the plugins' `tool` is served.
    pub(super) fn stdio_serving(cfg: &Path, era: &'static str, tool: &str) -> Client {
        let mut s = StdioServer::start(cfg);
        if era == LEGACY {
            let init = s.initialize(LEGACY);
            assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");
        }
        s.wait_for_tools(&[tool]);
        Client::Stdio(s, era)
    }

    pub(super) fn http(cfg: &Path, era: &'static str) -> Client {
        let s = HttpServer::start(cfg);
        if era == LEGACY {
            let (_, session) = s.initialize(LEGACY);
            Client::Legacy(s, session)
        } else {
            Client::Modern(s)
        }
    }

    pub(super) fn rpc(&mut self, id: u64, method: &str, params: Value) -> Value {
        match self {
            Client::Stdio(s, era) if *era == LEGACY => s.call(id, method, params),
            Client::Stdio(s, _) => s.call_modern(id, method, params),
            Client::Modern(s) => s.modern(id, method, params).message(),
            Client::Legacy(s, session) => s
                .post(
                    &[
                        ("Mcp-Session-Id", session),
                        ("MCP-Protocol-Version", LEGACY),
                    ],
                    &request(id, method, params),
                )
                .message(),
        }
    }

    pub(super) fn stderr(&self) -> String {
        match self {
            Client::Stdio(s, _) => s.stderr(),
            Client::Modern(s) | Client::Legacy(s, _) => s.stderr(),
        }
    }

    /// The tools listed, once `name` is among them (the upstream connects in the background).
    pub(super) fn tools_with(&mut self, name: &str) -> Vec<Value> {
        let deadline = Instant::now() + START;
        for id in 1000.. {
            let listed = self.rpc(id, "tools/list", json!({}));
            let tools = listed["result"]["tools"].as_array().cloned();
            let tools = tools.unwrap_or_else(|| panic!("{listed}\n{}", self.stderr()));
            if tools.iter().any(|t| t["name"] == name) {
                return tools;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never listed: {tools:?}\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        unreachable!()
    }

    pub(super) fn call(&mut self, id: u64, name: &str, args: Value) -> Value {
        self.rpc(id, "tools/call", json!({"name": name, "arguments": args}))
    }
}

/// What create_issue said it got: the name it was called by and its arguments.
#[track_caller]
fn received(response: &Value) -> Value {
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {response}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The served tool called `name` in `tools`.
#[track_caller]
fn tool<'t>(tools: &'t [Value], name: &str) -> &'t Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {tools:?}"))
}

/// The checks of an overridden create_issue (and an overridden fixture-basic echo), on `client`.
fn renamed_hidden_injected_and_refused(mut client: Client) {
    let tools = client.tools_with("file_bug");
    assert!(
        !tools.iter().any(|t| t["name"] == "create_issue"),
        "{tools:?}"
    );
    let bug = tool(&tools, "file_bug");
    assert_eq!(bug["title"], "File a bug", "{bug}");
    assert_eq!(bug["description"], "File a bug in acme's repositories.");
    assert_eq!(bug["annotations"]["destructiveHint"], false, "{bug}");
    let schema = &bug["inputSchema"];
    let properties = schema["properties"].as_object().unwrap();
    let mut shown: Vec<&str> = properties.keys().map(String::as_str).collect();
    shown.sort_unstable();
    assert_eq!(shown, ["repo", "title"], "{schema}");
    assert_eq!(schema["properties"]["repo"]["default"], "widgets");
    assert_eq!(
        schema["properties"]["repo"]["description"],
        "Which repository."
    );
    assert_eq!(schema["required"], json!(["title"]), "{schema}");
    // The upstream gets its own name, the fixed owner and the default repo.
    let got = received(&client.call(1, "file_bug", json!({"title": "It broke"})));
    assert_eq!(
        got,
        json!({"name": "create_issue",
               "arguments": {"owner": "acme", "repo": "widgets", "title": "It broke"}})
    );
    // A repo the client gives is kept.
    let got = received(&client.call(2, "file_bug", json!({"title": "t", "repo": "gadgets"})));
    assert_eq!(got["arguments"]["repo"], "gadgets", "{got}");
    // The fixed and the hidden arguments are the host's: a client that sends one is refused.
    for (id, argument, value) in [(3, "owner", json!("evil")), (4, "force", json!(true))] {
        let refused = client.call(id, "file_bug", json!({"title": "t", argument: value}));
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("argument {argument} is set by the host")),
            "{refused}"
        );
    }
    // The source's own name is not served.
    let unknown = client.call(
        5,
        "create_issue",
        json!({"owner": "a", "repo": "b", "title": "c"}),
    );
    assert!(
        unknown.get("error").is_some() || unknown["result"]["isError"] == true,
        "{unknown}"
    );
    // A plugin's tool: fixture-basic's echo as `say`, its text fixed.
    let tools = client.tools_with("say");
    // (the `echo` still listed is the upstream's: the name is free once fixture-basic's is `say`)
    let say = tool(&tools, "say");
    assert_eq!(say["inputSchema"]["properties"], json!({}), "{say}");
    assert!(say["inputSchema"].get("required").is_none(), "{say}");
    let said = client.call(6, "say", json!({}));
    assert_eq!(
        said["result"]["content"][0]["text"], "fixed by the host",
        "{said}"
    );
    let refused = client.call(7, "say", json!({"text": "mine"}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

/// fixture-basic's echo renamed `say`, its text fixed.
const SAY: &str = "  fixture-basic:\n    overrides:\n      tools:\n        echo:\n          \
     name: say\n          arguments:\n            text: {value: fixed by the host}\n";

#[test]
fn an_override_renames_hides_and_injects_over_stdio_in_both_eras() {
    for (era, upstream_era) in [(LEGACY, "2025"), (MODERN, "2026")] {
        let (_l, cfg) = issues_layout(upstream_era, &format!("{OVERRIDES}{SAY}"));
        renamed_hidden_injected_and_refused(Client::stdio(&cfg, era));
    }
}

#[test]
fn an_override_renames_hides_and_injects_over_http_in_both_eras() {
    for (era, upstream_era) in [(LEGACY, "2026"), (MODERN, "2025")] {
        let (_l, cfg) = issues_layout(upstream_era, &format!("{OVERRIDES}{SAY}"));
        renamed_hidden_injected_and_refused(Client::http(&cfg, era));
    }
}

/// `${caller.user}` as create_issue's owner, with alice's secret accepted.
fn caller_config() -> String {
    let overrides = "plugins:\n  gh:\n    overrides:\n      tools:\n        create_issue:\n          \
         arguments:\n            owner: {value: \"${caller.user}\"}\n";
    format!("{overrides}{}", alice_secret_config())
}

#[test]
fn the_verified_caller_is_injected_and_a_call_without_one_is_refused_in_both_eras() {
    let (_l, cfg) = issues_layout("2026", &caller_config());
    let s = HttpServer::start(&cfg);
    let bearer = format!("Bearer {ALICE}");
    // 2026-07-28, stateless: each request carries the secret.
    let modern = |id: u64, args: Value| {
        let params = with_meta(json!({"name": "create_issue", "arguments": args}));
        let mut headers = modern_headers("tools/call", Some("create_issue"));
        headers.push(("Authorization", bearer.clone()));
        s.post(&header_refs(&headers), &request(id, "tools/call", params))
            .message()
    };
    let deadline = Instant::now() + START;
    let got = loop {
        let answer = modern(1, json!({"repo": "r", "title": "t"}));
        if answer.get("error").is_none() {
            break received(&answer);
        }
        assert!(Instant::now() < deadline, "{answer}\n{}", s.stderr());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(got["arguments"]["owner"], "alice", "{got}");
    let refused = modern(2, json!({"owner": "mallory", "repo": "r", "title": "t"}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    // 2025-11-25: a session opened with the secret.
    let init = s.post(
        &[("Authorization", &bearer)],
        &request(
            1,
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": {},
                   "clientInfo": {"name": "e2e", "version": "0"}}),
        ),
    );
    let session = init.header("mcp-session-id").unwrap().to_owned();
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", LEGACY),
    ];
    s.post(
        &headers,
        &notification("notifications/initialized", Value::Null),
    );
    let args = json!({"name": "create_issue", "arguments": {"repo": "r", "title": "t"}});
    let answer = s
        .post(&headers, &request(3, "tools/call", args.clone()))
        .message();
    assert_eq!(received(&answer)["arguments"]["owner"], "alice", "{answer}");
    // Without a verified caller there is no one to fill the owner from: refused, not sent empty.
    let anonymous = s.modern(4, "tools/call", args).message();
    assert!(anonymous.get("error").is_some(), "{anonymous}");
    let message = anonymous["error"]["message"].as_str().unwrap();
    assert!(message.contains("needs a verified caller"), "{anonymous}");
}

#[test]
fn an_agents_own_override_is_seen_by_that_agent_only() {
    let agents = "agents:\n  triage:\n    overrides:\n      tools:\n        create_issue:\n          \
         name: bug\n          description: Report a bug for triage.\n          arguments:\n            \
         repo: {value: triage-inbox}\n  other: {}\n";
    let (_l, cfg) = issues_layout("2026", &format!("{OVERRIDES}{agents}"));
    let s = HttpServer::start(&cfg);
    s.wait_for_tools(&["file_bug"]);
    let at =
        |path: &str, method: &str, params: Value| s.modern_at(path, None, method, params).message();
    let names = |path: &str| {
        let tools = at(path, "tools/list", json!({}))["result"]["tools"].clone();
        let tools = tools.as_array().cloned().unwrap_or_default();
        (
            tools
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>(),
            tools,
        )
    };
    let (triage, tools) = names("/mcp/agents/triage");
    assert!(triage.contains(&"bug".to_owned()), "{triage:?}");
    assert!(!triage.contains(&"file_bug".to_owned()), "{triage:?}");
    let bug = tool(&tools, "bug");
    assert_eq!(bug["description"], "Report a bug for triage.");
    // The agent's override goes over the source's: its title and fixed owner stay.
    assert_eq!(bug["title"], "File a bug", "{bug}");
    assert_eq!(bug["inputSchema"]["required"], json!(["title"]), "{bug}");
    let call = json!({"name": "bug", "arguments": {"title": "t"}});
    let got = received(&at("/mcp/agents/triage", "tools/call", call));
    assert_eq!(
        got,
        json!({"name": "create_issue",
               "arguments": {"owner": "acme", "repo": "triage-inbox", "title": "t"}})
    );
    for path in ["/mcp", "/mcp/agents/other"] {
        let (others, _) = names(path);
        assert!(
            others.contains(&"file_bug".to_owned()),
            "{path}: {others:?}"
        );
        assert!(!others.contains(&"bug".to_owned()), "{path}: {others:?}");
        let refused = at(
            path,
            "tools/call",
            json!({"name": "bug", "arguments": {"title": "t"}}),
        );
        assert!(refused.get("error").is_some(), "{path}: {refused}");
    }
}

#[test]
fn the_upstream_definition_and_the_override_are_pinned_apart_and_a_change_of_either_is_held() {
    let l = Layout::new();
    let write = |description: &str| {
        let overrides = OVERRIDES.replace("File a bug in acme's repositories.", description);
        l.config(&format!(
            "tool_dirs:\n{}{overrides}",
            issues_entry("2026", "    pinning: enforce\n")
        ))
    };
    let cfg = write("File a bug in acme's repositories.");
    let pinned = l.run(&cfg, &["pin"]);
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    // The lock file holds the upstream's definition (its own name and description) and the
    // override apart, the fixed value as a digest.
    let lock: Value =
        serde_json::from_str(&std::fs::read_to_string(l.dir(".").join("mcp-host.lock")).unwrap())
            .unwrap();
    let pin = &lock["tools"]["file_bug"];
    assert_eq!(pin["definition"]["name"], "create_issue", "{pin}");
    assert_eq!(
        pin["definition"]["description"], "Create an issue.",
        "{pin}"
    );
    let o = &pin["override"]["definition"]["tool"];
    assert_eq!(
        o["description"], "File a bug in acme's repositories.",
        "{pin}"
    );
    assert!(
        o["arguments"]["owner"]["value"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{pin}"
    );
    // `list` shows the source's name beside the served one, and both definitions.
    let (rows, log) = l.list(&cfg);
    let row = rows
        .iter()
        .find(|r| r["tool"] == "file_bug")
        .unwrap_or_else(|| panic!("{rows:?}\n{log}"));
    assert_eq!(row["status"], "active", "{row}");
    assert_eq!(row["original"], "create_issue", "{row}");
    assert_eq!(
        row["exposed"]["source"]["description"], "Create an issue.",
        "{row}"
    );
    assert_eq!(
        row["exposed"]["served"]["description"],
        "File a bug in acme's repositories."
    );
    // A changed override is not what was reviewed: held until re-pinned.
    let changed = write("File a bug, and be quick.");
    let (rows, log) = l.list(&changed);
    let row = rows
        .iter()
        .find(|r| r["tool"] == "file_bug")
        .unwrap_or_else(|| panic!("{rows:?}\n{log}"));
    assert_eq!(row["status"], "held", "{row}\n{log}");
    // The upstream changes its tool under the override: held all the same.
    let cfg = write("File a bug in acme's repositories.");
    let mut server = StdioServer::start(&cfg);
    server.wait_for_tools(&["file_bug", "rug_pull"]);
    let pulled = server.call_modern(
        1,
        "tools/call",
        json!({"name": "rug_pull", "arguments": {}}),
    );
    assert_eq!(pulled["result"]["content"][0]["text"], "pulled", "{pulled}");
    let deadline = Instant::now() + WAIT;
    for id in 10.. {
        let listed = server.call_modern(id, "tools/list", json!({}));
        let names = mcp_host_tests::serve::tool_names(&listed);
        if !names.iter().any(|n| n == "file_bug") {
            assert!(names.iter().any(|n| n == "rug_pull"), "{names:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "file_bug still served:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        server.logged("is held (pinning: enforce)"),
        "{}",
        server.stderr()
    );
}

#[test]
fn policy_rules_see_the_exposed_name_and_the_source_name() {
    let policy = "policy:\n  rules:\n    - name: no-bugs-by-source\n      \
         when: \"tool.source_name == 'create_issue' && tool.name == 'file_bug' && args.repo == 'locked'\"\n      \
         outcome: deny\n      message: the locked repository takes no issues\n";
    let (l, cfg) = issues_layout(
        "2026",
        &format!("{OVERRIDES}audit_log: audit.jsonl\n{policy}"),
    );
    let mut s = StdioServer::start(&cfg);
    s.wait_for_tools(&["file_bug"]);
    let call = |s: &mut StdioServer, id: u64, repo: &str| {
        s.call_modern(
            id,
            "tools/call",
            json!({"name": "file_bug", "arguments": {"title": "t", "repo": repo}}),
        )
    };
    let denied = call(&mut s, 1, "locked");
    let text = denied.to_string();
    assert!(
        text.contains("the locked repository takes no issues"),
        "{denied}"
    );
    let allowed = call(&mut s, 2, "open");
    assert_eq!(received(&allowed)["arguments"]["repo"], "open", "{allowed}");
    // The audit names the tool as served and as its source calls it.
    let audit = std::fs::read_to_string(l.dir(".").join("audit.jsonl")).unwrap_or_default();
    let record: Value = audit
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|r| r["tool"] == "file_bug")
        .unwrap_or_else(|| panic!("{audit}"));
    assert_eq!(record["source_tool"], "create_issue", "{record}");
}

#[test]
fn an_override_that_cannot_apply_keeps_the_tool_out_and_a_bad_one_is_refused_at_load() {
    // Hiding a required argument without a value: the tool is not served (never served bare).
    let bad = "plugins:\n  gh:\n    overrides:\n      tools:\n        create_issue:\n          \
         arguments:\n            owner: {hide: true}\n";
    let (l, cfg) = issues_layout("2026", bad);
    let (rows, log) = l.list(&cfg);
    let row = rows
        .iter()
        .find(|r| r["tool"] == "create_issue")
        .unwrap_or_else(|| panic!("{rows:?}\n{log}"));
    assert_eq!(row["status"], "bad_override", "{row}");
    let detail = row["detail"].as_str().unwrap();
    assert!(detail.contains("argument owner is required"), "{row}");
    // A `${…}` that is no caller reference is refused when the configuration is read.
    let (l, cfg) = issues_layout(
        "2026",
        "overrides:\n  tools:\n    gh_x:\n      arguments:\n        a: {value: \"${caller.password}\"}\n",
    );
    let out = l.run(&cfg, &["list"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("overrides.tools.gh_x.arguments.a.value"),
        "{stderr}"
    );
}

#[test]
fn prompts_and_resources_of_an_sdk_upstream_are_renamed_and_redescribed() {
    let Some(py) = mcp_host_tests::clients::python() else {
        return;
    };
    let script = mcp_host_tests::workspace_root().join("tests/fixtures/upstream/server.py");
    let l = Layout::new();
    // The prompt by the upstream's own name under plugins.py, the resource by URI at the top.
    let cfg = l.config(&format!(
        "tool_dirs:\n  - server: {{command: [{:?}, {:?}]}}\n    name: py\n    prefix: py_\n\
         plugins:\n  py:\n    overrides:\n      prompts:\n        review:\n          \
         name: code_review\n          title: Code review\n          \
         description: Ask for a careful review.\n\
         overrides:\n  resources:\n    \"greeting://hello\":\n      \
         title: Hello\n      description: The greeting every test reads.\n",
        py.to_string_lossy(),
        script.to_string_lossy()
    ));
    let mut s = StdioServer::start(&cfg);
    s.wait_for_tools(&["py_echo"]);
    let prompts = s.call_modern(1, "prompts/list", json!({}));
    let prompts = prompts["result"]["prompts"].as_array().unwrap().clone();
    let review = tool(&prompts, "code_review");
    assert_eq!(review["title"], "Code review", "{review}");
    assert_eq!(
        review["description"], "Ask for a careful review.",
        "{review}"
    );
    assert!(
        !prompts.iter().any(|p| p["name"] == "py_review"),
        "{prompts:?}"
    );
    // The upstream is asked for its own prompt.
    let got = s.call_modern(
        2,
        "prompts/get",
        json!({"name": "code_review", "arguments": {"code": "fn main() {}"}}),
    );
    let message = got["result"]["messages"][0]["content"]["text"].as_str();
    assert!(message.unwrap_or("").contains("fn main() {}"), "{got}");
    let resources = s.call_modern(3, "resources/list", json!({}));
    let hello = resources["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == "greeting://hello")
        .unwrap_or_else(|| panic!("{resources}"))
        .clone();
    assert_eq!(hello["title"], "Hello", "{hello}");
    assert_eq!(
        hello["description"], "The greeting every test reads.",
        "{hello}"
    );
    let read = s.call_modern(4, "resources/read", json!({"uri": "greeting://hello"}));
    assert_eq!(
        read["result"]["contents"][0]["text"], "Hello from Python",
        "{read}"
    );
    // `list` shows each beside its source's definition.
    let (rows, log) = l.list(&cfg);
    let row = rows
        .iter()
        .find(|r| r["tool"] == "code_review")
        .unwrap_or_else(|| panic!("{rows:?}\n{log}"));
    assert_eq!(row["original"], "py_review", "{row}");
    assert_eq!(
        row["exposed"]["source"]["description"],
        "Ask for a review of some code."
    );
}

/// `hostile.py --mode poisoned` as upstream `bad`, with the entry's `extra` lines and `tail`.
fn poisoned_config(l: &Layout, extra: &str, tail: &str) -> PathBuf {
    let script = mcp_host_tests::workspace_root().join("tests/fixtures/upstream/hostile.py");
    l.config(&format!(
        "tool_dirs:\n  - server: {{command: [python3, {:?}, --mode, poisoned, --era, \"2026\"]}}\n    \
         name: bad\n{extra}{tail}",
        script.to_string_lossy()
    ))
}

#[test]
fn poisoned_definitions_are_held_at_load_and_an_override_that_replaces_the_text_serves_them() {
    let l = Layout::new();
    // By default (`warn`) they are served, and each finding is logged.
    let cfg = poisoned_config(&l, "", "");
    let (rows, log) = l.list(&cfg);
    let status = |rows: &[Value], name: &str| {
        rows.iter()
            .find(|r| r["tool"] == name)
            .unwrap_or_else(|| panic!("{name} not in {rows:?}"))
            .clone()
    };
    assert_eq!(status(&rows, "add")["status"], "active", "{rows:?}");
    assert!(
        log.contains("unicode tag characters in description"),
        "{log}"
    );
    assert!(log.contains("(definition_scan: warn)"), "{log}");
    // `pin --diff` shows what the scan found beside each new definition, and `pin` says it of
    // what it pins; a clean definition gets no such line.
    let diff = l.run(&cfg, &["pin", "--diff"]);
    let shown = String::from_utf8_lossy(&diff.stdout);
    assert_eq!(diff.status.code(), Some(1), "{shown}");
    let after = |head: &str| {
        let at = shown
            .find(head)
            .unwrap_or_else(|| panic!("{head} not in {shown}"));
        shown[at..]
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with("  ! "))
            .collect::<Vec<_>>()
    };
    let add = after("new tool add ");
    assert!(
        add.iter()
            .any(|l| l.contains("unicode tag characters in description")),
        "{shown}"
    );
    assert!(
        after("new tool lookup ")
            .iter()
            .any(|l| l.contains("an instruction to ignore instructions")),
        "{shown}"
    );
    assert_eq!(after("new tool echo "), Vec::<&str>::new(), "{shown}");
    let pinned = l.run(&cfg, &["pin"]);
    let said = String::from_utf8_lossy(&pinned.stdout);
    assert!(pinned.status.success(), "{said}");
    assert!(
        said.contains("prompt summary: the definition scan found zero-width characters"),
        "{said}"
    );
    assert!(!said.contains("tool echo: the definition scan"), "{said}");
    // What follows is about the scan, not about pins.
    let lock = cfg.with_file_name("mcp-host.lock");
    std::fs::remove_file(&lock).unwrap_or_else(|e| panic!("{}: {e}", lock.display()));
    // Under `hold`: the tool with tag characters, the one telling the model to ignore its
    // instructions and the prompt with a zero-width character are held; echo is served.
    let cfg = poisoned_config(&l, "    definition_scan: hold\n", "");
    let mut s = StdioServer::start(&cfg);
    s.wait_for_tools(&["echo"]);
    let names = mcp_host_tests::serve::tool_names(&s.call_modern(1, "tools/list", json!({})));
    assert_eq!(names, ["echo"], "{}", s.stderr());
    let prompts = s.call_modern(2, "prompts/list", json!({}));
    assert_eq!(prompts["result"]["prompts"], json!([]), "{prompts}");
    let refused = s.call_modern(
        3,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    );
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(
        s.logged("is held (definition_scan: hold)"),
        "{}",
        s.stderr()
    );
    drop(s);
    let (rows, _) = l.list(&cfg);
    let add = status(&rows, "add");
    assert_eq!(add["status"], "suspicious", "{add}");
    let detail = add["detail"].as_str().unwrap();
    assert!(
        detail.contains("unicode tag characters in description") && detail.contains("<U+E0073>"),
        "{add}"
    );
    let lookup = status(&rows, "lookup");
    assert!(
        lookup["detail"]
            .as_str()
            .unwrap()
            .contains("an instruction to ignore instructions"),
        "{lookup}"
    );
    let summary = status(&rows, "summary");
    assert!(
        summary["detail"]
            .as_str()
            .unwrap()
            .contains("zero-width characters"),
        "{summary}"
    );
    // An override that replaces the description is what clients are shown: served again.
    let fixed = "plugins:\n  bad:\n    overrides:\n      tools:\n        \
         lookup: {description: Look a word up.}\n";
    let cfg = poisoned_config(&l, "    definition_scan: hold\n", fixed);
    let mut s = StdioServer::start(&cfg);
    s.wait_for_tools(&["echo", "lookup"]);
    let looked = s.call_modern(
        4,
        "tools/call",
        json!({"name": "lookup", "arguments": {"word": "w"}}),
    );
    assert_eq!(
        looked["result"]["content"][0]["text"], "looked up w",
        "{looked}"
    );
}
