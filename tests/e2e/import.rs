//! `mcp-host import`: a Claude Desktop configuration and an MCP registry `server.json` made into
//! `tool_dirs` entries (printed, and appended to a configuration file that keeps what it held),
//! secrets turned into `${NAME}` references — and the imported entries, unchanged, serving the
//! real `@modelcontextprotocol/server-everything` through the host.
//!
//! The entries run `npx -y @modelcontextprotocol/server-everything…` as imported. Offline, npx
//! resolves the package from a `node_modules` in its working directory (the configuration's
//! directory, an upstream's default): the test links the one `.ci/install-clients.sh` installed
//! there, so npx runs the installed package and fetches nothing.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use mcp_host_tests::clients::require_or_skip;
use mcp_host_tests::serve::StdioServer;
use mcp_host_tests::{Layout, artifacts, workspace_root};
use serde_json::{Value, json};

/// A layout whose directory has the installed npm servers as its `node_modules` (for npx), when
/// they and npx are there.
fn npx_layout() -> Option<Layout> {
    let modules = workspace_root().join(".ci/.tools/upstreams/node_modules");
    let everything = modules.join("@modelcontextprotocol/server-everything/package.json");
    let npx = Command::new("npx").arg("--version").output();
    let ok = everything.is_file() && npx.is_ok_and(|o| o.status.success());
    require_or_skip(
        "npx and the npm MCP server server-everything",
        ok.then(|| modules.clone()),
    )?;
    let l = Layout::new();
    std::os::unix::fs::symlink(&modules, l.root.path().join("node_modules")).unwrap();
    Some(l)
}

/// `mcp-host import ARGS…` with extra environment variables.
fn import(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(&artifacts().host)
        .arg("import")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Serve `cfg` over stdio with `env` and call `get-sum` and `get-env` of server-everything: the
/// sum's text and the environment the upstream saw.
fn serve_everything(cfg: &Path, env: &[(&str, &str)]) -> (String, String) {
    let mut server = StdioServer::start_with(cfg, &[], env);
    server.wait_for_tools(&["get-sum", "get-env"]);
    let text = |resp: &Value| {
        resp["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let sum = server.call_modern(
        1,
        "tools/call",
        json!({"name": "get-sum", "arguments": {"a": 2, "b": 3}}),
    );
    assert!(sum.get("error").is_none(), "{sum}\n{}", server.stderr());
    let seen = server.call_modern(2, "tools/call", json!({"name": "get-env", "arguments": {}}));
    (text(&sum), text(&seen))
}

#[test]
fn a_claude_desktop_config_is_imported_into_a_config_that_keeps_its_content_and_serves() {
    let Some(l) = npx_layout() else { return };
    let desktop = l.root.path().join("claude_desktop_config.json");
    let servers = json!({"mcpServers": {
        "everything": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-everything", "stdio"],
            "env": {"EVERYTHING_API_TOKEN": "tok-1234-do-not-copy", "EVERYTHING_MODE": "demo"},
        },
        "legacy-sse": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
    }});
    std::fs::write(&desktop, servers.to_string()).unwrap();
    let cfg =
        l.config("# mine: keep me\ntool_dirs:\n  - path: tools\n    optional: true\n# the end\n");

    let printed = stdout(&import(
        &[
            "claude-desktop",
            &desktop.to_string_lossy(),
            "--write",
            &cfg.to_string_lossy(),
        ],
        &[],
    ));
    assert!(printed.contains("${EVERYTHING_API_TOKEN}"), "{printed}");
    assert!(
        printed.contains("Set in the host's environment: EVERYTHING_API_TOKEN"),
        "{printed}"
    );
    assert!(printed.contains("Skipped legacy-sse"), "{printed}");
    assert!(printed.contains("Wrote to"), "{printed}");
    let written = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        written.starts_with("# mine: keep me\ntool_dirs:\n  - path: tools\n"),
        "{written}"
    );
    assert!(written.contains("# the end"), "{written}");
    assert!(
        !written.contains("tok-1234") && !printed.contains("tok-1234"),
        "{written}"
    );

    // Importing again adds nothing.
    let again = stdout(&import(
        &[
            "claude-desktop",
            &desktop.to_string_lossy(),
            "--write",
            &cfg.to_string_lossy(),
        ],
        &[],
    ));
    assert!(again.contains("Already in"), "{again}");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), written);

    // The entry as imported serves, its secret from the host's environment.
    let (sum, env) = serve_everything(&cfg, &[("EVERYTHING_API_TOKEN", "from-the-host-env")]);
    assert!(sum.contains('5'), "{sum}");
    assert!(
        env.contains("from-the-host-env") && env.contains("demo"),
        "{env}"
    );

    // Without FILE: Claude Desktop's file where this platform keeps it.
    let claude = l.dir("xdg/Claude");
    std::fs::copy(&desktop, claude.join("claude_desktop_config.json")).unwrap();
    let xdg = l.root.path().join("xdg");
    let default = stdout(&import(
        &["claude-desktop"],
        &[("XDG_CONFIG_HOME", &xdg.to_string_lossy())],
    ));
    assert!(
        default.contains("tool_dirs:") && default.contains("name: everything"),
        "{default}"
    );
}

#[test]
fn a_registry_server_json_becomes_an_npx_entry_that_serves() {
    let Some(l) = npx_layout() else { return };
    let version = {
        let package = workspace_root().join(
            ".ci/.tools/upstreams/node_modules/@modelcontextprotocol/server-everything/package.json",
        );
        let package: Value = serde_json::from_slice(&std::fs::read(package).unwrap()).unwrap();
        package["version"].as_str().unwrap().to_owned()
    };
    let server_json = l.root.path().join("server.json");
    let spec = json!({
        "$schema": "https://static.modelcontextprotocol.io/schemas/2025-09-29/server.schema.json",
        "name": "io.github.modelcontextprotocol/server-everything",
        "version": version,
        "packages": [
            {"registryType": "npm", "identifier": "@modelcontextprotocol/server-everything",
             "version": version, "transport": {"type": "stdio"},
             "packageArguments": [{"type": "positional", "value": "stdio"}],
             "environmentVariables": [
                 {"name": "EVERYTHING_API_TOKEN", "isRequired": true, "isSecret": true},
                 {"name": "EVERYTHING_MODE", "default": "registry"}]},
            {"registryType": "pypi", "identifier": "mcp-server-everything", "version": "1.0.0"}
        ],
        "remotes": [{"type": "sse", "url": "https://everything.example/sse"}]
    });
    std::fs::write(&server_json, spec.to_string()).unwrap();
    // A configuration file that does not exist yet is made.
    let cfg = l.root.path().join("made.yaml");
    let printed = stdout(&import(
        &[
            "server-json",
            &server_json.to_string_lossy(),
            "--write",
            &cfg.to_string_lossy(),
        ],
        &[],
    ));
    assert!(
        printed.contains(&format!(
            "@modelcontextprotocol/server-everything@{version}"
        )),
        "{printed}"
    );
    assert!(
        printed.contains("Skipped pypi package") && printed.contains("Skipped sse remote"),
        "{printed}"
    );
    let (sum, env) = serve_everything(&cfg, &[("EVERYTHING_API_TOKEN", "set-by-operator")]);
    assert!(sum.contains('5'), "{sum}");
    assert!(
        env.contains("set-by-operator") && env.contains("registry"),
        "{env}"
    );
}

#[test]
fn what_cannot_be_imported_is_said() {
    let l = Layout::new();
    let bad = l.root.path().join("bad.json");
    std::fs::write(&bad, r#"{"servers_typo": {}}"#).unwrap();
    let out = import(&["claude-desktop", &bad.to_string_lossy()], &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("mcpServers"),
        "{out:?}"
    );
    let flow = l.config("tool_dirs: [tools]\n");
    let one = l.root.path().join("one.json");
    std::fs::write(&one, r#"{"mcpServers": {"x": {"command": "x-server"}}}"#).unwrap();
    let out = import(
        &[
            "claude-desktop",
            &one.to_string_lossy(),
            "--write",
            &flow.to_string_lossy(),
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("flow style"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&flow).unwrap(),
        "tool_dirs: [tools]\n"
    );
}
