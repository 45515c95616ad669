//! `mcp-host config [--json]`: the effective configuration — every layer merged (the file, its
//! `config.{MCP_HOST_ENV}.yaml` overlay, `MCP_HOST_*` variables, `${NAME}` references expanded),
//! defaults filled in, paths resolved — with secrets redacted: the JWT secret, the metrics token,
//! the request-state keys, credentials in every URL (the password of its userinfo, the values of
//! query parameters that name a secret: `pass`, `password`, `token`, `secret`, `key`, ...), and
//! every plugin-configuration value whose key names a secret (`key`, `secret`, `token`,
//! `password`, `credential`, ...), and an upstream server's secrets — its environment values,
//! headers and command-line values that `mcp-host import` would not copy either, and the values
//! definition overrides fix or fill for an argument that names or looks like a secret (one rule,
//! `mcp_host::config::secrets`).

use std::process::ExitCode;

use mcp_host::Config;
use serde_json::Value;

/// What a redacted value shows.
const REDACTED: &str = "<redacted>";

/// Print `config` as YAML (or JSON), redacted.
pub(crate) fn print(
    config: &Config,
    json: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let mut value = serde_json::to_value(config)?;
    redact(&mut value);
    if json {
        super::write_json(out, &value)?;
        return Ok(ExitCode::SUCCESS);
    }
    let source = config.source.as_ref().map_or_else(
        || "no configuration file (defaults)".to_owned(),
        |s| s.display().to_string(),
    );
    writeln!(
        out,
        "# Effective configuration of mcp-host {}",
        env!("CARGO_PKG_VERSION")
    )?;
    writeln!(
        out,
        "# from {source}, its overlay and MCP_HOST_* variables; secrets redacted"
    )?;
    write!(out, "{}", serde_saphyr::to_string(&value)?)?;
    Ok(ExitCode::SUCCESS)
}

/// Blank out what must not be printed.
fn redact(config: &mut Value) {
    for pointer in ["/auth/jwt/hs256_secret", "/metrics_token"] {
        if let Some(v) = config.pointer_mut(pointer).filter(|v| !v.is_null()) {
            *v = Value::from(REDACTED);
        }
    }
    for pointer in ["/request_state/keys", "/upstream_auth/vault/keys"] {
        if let Some(Value::Array(keys)) = config.pointer_mut(pointer) {
            keys.iter_mut().for_each(|k| *k = Value::from(REDACTED));
        }
    }
    if let Some(Value::Object(plugins)) = config.get_mut("plugins") {
        for settings in plugins.values_mut() {
            if let Some(section) = settings.get_mut("config") {
                redact_secrets(section);
            }
        }
    }
    if let Some(Value::Array(dirs)) = config.get_mut("tool_dirs") {
        dirs.iter_mut()
            .filter_map(|dir| dir.get_mut("server"))
            .for_each(redact_upstream);
    }
    // The values overrides fix or fill for an argument that names a secret, or that look like one.
    redact_overrides(config.get_mut("overrides"));
    for section in ["plugins", "agents"] {
        if let Some(Value::Object(entries)) = config.get_mut(section) {
            entries
                .values_mut()
                .for_each(|entry| redact_overrides(entry.get_mut("overrides")));
        }
    }
    // Every URL anywhere (the store, the OTLP endpoint, a plugin's database URL...).
    redact_urls(config);
}

/// Redact, in definition overrides, every argument's fixed `value` and `default` that is a secret
/// by the rule of upstream environment values (the argument's name says so — `token`, `api_key`,
/// … — or the value has a token's form); `${caller.user}` is kept.
fn redact_overrides(overrides: Option<&mut Value>) {
    let Some(Value::Object(tools)) = overrides.and_then(|o| o.get_mut("tools")) else {
        return;
    };
    let arguments = tools
        .values_mut()
        .filter_map(|tool| tool.get_mut("arguments").and_then(Value::as_object_mut));
    for (name, argument) in arguments.flat_map(|a| a.iter_mut()) {
        for field in ["value", "default"] {
            let Some(v) = argument.get_mut(field) else {
                continue;
            };
            let secret = match v {
                Value::String(s) => mcp_host::config::secrets::is_secret(name, s),
                Value::Null => false,
                _ => is_secret_key(name),
            };
            if secret {
                *v = Value::from(REDACTED);
            }
        }
    }
}

/// Redact an upstream server's secrets (`tool_dirs[].server`) by the rule `mcp-host import` uses
/// to decide what it must not copy: environment values and headers (every `Authorization`) that
/// name or look like a secret, and command-line values after a flag that names one
/// (`--api-key VALUE`, `--token=VALUE`) or with a token's known form.
fn redact_upstream(server: &mut Value) {
    use mcp_host::config::secrets;
    let redact_map = |map: Option<&mut Value>, secret: fn(&str, &str) -> bool| {
        if let Some(Value::Object(map)) = map {
            for (name, value) in map.iter_mut() {
                if value.as_str().is_some_and(|v| secret(name, v)) {
                    *value = Value::from(REDACTED);
                }
            }
        }
    };
    redact_map(server.get_mut("env"), secrets::is_secret);
    redact_map(server.get_mut("headers"), secrets::is_secret_header);
    if let Some(secret) = server
        .pointer_mut("/auth/client_secret")
        .filter(|v| !v.is_null())
    {
        *secret = Value::from(REDACTED);
    }
    if let Some(Value::Array(command)) = server.get_mut("command") {
        let argv: Vec<String> = command
            .iter()
            .map(|a| a.as_str().unwrap_or_default().to_owned())
            .collect();
        for (i, offset) in secrets::secret_arguments(&argv) {
            let kept = argv[i].get(..offset).unwrap_or_default();
            command[i] = Value::from(format!("{kept}{REDACTED}"));
        }
    }
}

/// Whether a configuration key names a secret.
fn is_secret_key(key: &str) -> bool {
    mcp_host::store::is_secret_name(key)
}

/// Redact the credentials of every string that holds a URL, at any depth.
fn redact_urls(value: &mut Value) {
    match value {
        Value::String(text) if text.contains("://") => *text = without_credentials(text),
        Value::Object(map) => map.values_mut().for_each(redact_urls),
        Value::Array(items) => items.iter_mut().for_each(redact_urls),
        _ => {}
    }
}

/// Redact, at any depth, the values of keys that name secrets.
fn redact_secrets(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if is_secret_key(key) && !v.is_null() {
                    *v = Value::from(REDACTED);
                } else {
                    redact_secrets(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_secrets),
        _ => {}
    }
}

/// `scheme://user:pass@host/...?token=...` as `scheme://<redacted>@host/...?token=<redacted>`:
/// the whole userinfo (a user name may be a token too) and every query value that names a secret.
fn without_credentials(url: &str) -> String {
    let redacted = mcp_host::store::redact_url(url);
    let Some((scheme, rest)) = redacted.split_once("://") else {
        return redacted;
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{REDACTED}@{}", &rest[at + 1..]),
        None => redacted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted_and_everything_else_kept() {
        let mut v = json!({
            "auth": {"jwt": {"hs256_secret": "s3cret", "issuer": "me"}},
            "metrics_token": "t0ken",
            "traces": {"otlp_endpoint": "http://u:p@collector:4318/v1/traces"},
            "plugins": {"mcp-text": {"config": {"hmac_key": "k", "nested": [{"api_token": "x", "zone": "UTC"}]}}},
            "upstream_auth": {"vault": {"keys": ["vault-key-1", "vault-key-2"], "max_pending_flows": 9}},
        });
        redact(&mut v);
        assert_eq!(
            v["upstream_auth"]["vault"]["keys"],
            json!([REDACTED, REDACTED])
        );
        assert_eq!(v["upstream_auth"]["vault"]["max_pending_flows"], 9);
        assert_eq!(v["auth"]["jwt"]["hs256_secret"], REDACTED);
        assert_eq!(v["auth"]["jwt"]["issuer"], "me");
        assert_eq!(v["metrics_token"], REDACTED);
        assert_eq!(
            v["traces"]["otlp_endpoint"],
            "http://<redacted>@collector:4318/v1/traces"
        );
        let text = &v["plugins"]["mcp-text"]["config"];
        assert_eq!(text["hmac_key"], REDACTED);
        assert_eq!(text["nested"][0]["api_token"], REDACTED);
        assert_eq!(text["nested"][0]["zone"], "UTC");
    }

    #[test]
    fn override_values_that_are_secrets_are_redacted() {
        let tool = json!({"arguments": {
            "api_key": {"value": "plain-looking"},
            "owner": {"value": "acme"},
            "user": {"value": "${caller.user}"},
            "auth": {"default": "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"}}});
        let mut v = json!({
            "overrides": {"tools": {"t": tool.clone()}},
            "plugins": {"p": {"overrides": {"tools": {"t": tool.clone()}}}},
            "agents": {"a": {"overrides": {"tools": {"t": tool}}}}
        });
        redact(&mut v);
        for at in ["/overrides", "/plugins/p/overrides", "/agents/a/overrides"] {
            let args = &v.pointer(at).unwrap()["tools"]["t"]["arguments"];
            assert_eq!(args["api_key"]["value"], REDACTED, "{at}");
            assert_eq!(args["auth"]["default"], REDACTED, "{at}");
            assert_eq!(args["owner"]["value"], "acme", "{at}");
            assert_eq!(args["user"]["value"], "${caller.user}", "{at}");
        }
    }

    #[test]
    fn upstream_secrets_are_redacted_by_the_rule_import_uses() {
        let mut v = json!({"tool_dirs": [
            {"path": "tools"},
            {"path": "upstream:github", "name": "github", "server": {
                "command": ["npx", "-y", "@modelcontextprotocol/server-github", "--api-key",
                            "abc", "--token=xyz", "--region", "eu"],
                "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_0123456789abcdefghij",
                        "LOG_LEVEL": "debug", "OTHER": "sk-live-0123"}}},
            {"path": "upstream:remote", "name": "remote", "server": {
                "url": "https://tools.example/mcp",
                "headers": {"Authorization": "Bearer abc.def", "X-Api-Key": "k1",
                            "X-Team": "blue"}}},
        ]});
        redact(&mut v);
        let text = v.to_string();
        for secret in ["ghp_0123", "sk-live", "abc.def", "k1", "\"abc\"", "xyz"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let github = &v["tool_dirs"][1]["server"];
        assert_eq!(github["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"], REDACTED);
        assert_eq!(github["env"]["LOG_LEVEL"], "debug");
        assert_eq!(github["command"][4], REDACTED);
        assert_eq!(github["command"][5], format!("--token={REDACTED}"));
        assert_eq!(github["command"][7], "eu");
        let remote = &v["tool_dirs"][2]["server"];
        assert_eq!(remote["headers"]["Authorization"], REDACTED);
        assert_eq!(remote["headers"]["X-Team"], "blue");
    }

    #[test]
    fn url_credentials_are_redacted_wherever_the_url_is() {
        let mut v = json!({
            "store": "rediss://app:pw1@db:6380/0?pass=pw2&protocol=resp3",
            "traces": {"otlp_endpoint": "http://collector:4318/v1/traces?api_key=pw3#frag"},
            "plugins": {"p": {"config": {"database": "postgres://u:pw4@h/db?sslmode=require"}}},
        });
        redact(&mut v);
        let text = v.to_string();
        for secret in ["pw1", "pw2", "pw3", "pw4"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            v["store"],
            "rediss://<redacted>@db:6380/0?pass=<redacted>&protocol=resp3"
        );
        assert_eq!(
            v["traces"]["otlp_endpoint"],
            "http://collector:4318/v1/traces?api_key=<redacted>#frag"
        );
        assert_eq!(
            v["plugins"]["p"]["config"]["database"],
            "postgres://<redacted>@h/db?sslmode=require"
        );
    }
}
