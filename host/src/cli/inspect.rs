//! What plugin authors and operators run to look at the host without serving: `list` (every
//! discovered tool, prompt and resource, its status, isolation and signer), `check` (one file's signer and
//! manifest, or the exact load error) and `call` (one tool, in-process).

use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::exec::CallEvent;
use mcp_host::host::{CallOptions, RequestContext};
use mcp_host::registry::{Kind, Status};
use mcp_host::{Config, Host};
use mcp_plugin_sdk::UserInfo;
use serde_json::Value;

/// Print every discovered tool, prompt and resource (a table, or JSON rows): the entries with
/// quarantines recorded since, then one row each, laid out in columns.
pub(crate) fn print_list(
    host: &Host,
    json: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let entries = entries_now(host);
    if json {
        super::write_json(out, &entries)?;
        return Ok(());
    }
    let rows: Vec<[String; 7]> = entries.iter().map(list_row).collect();
    write_table(&rows, out)?;
    if rows.is_empty() {
        writeln!(
            out,
            "(no plugins found in: {})",
            host.config()
                .tool_dirs
                .iter()
                .map(|d| d.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    Ok(())
}

/// The registry's entries; a running server may have quarantined a plugin (or an upstream
/// server) this process loaded fine: its rows say so.
fn entries_now(host: &Host) -> Vec<mcp_host::registry::Entry> {
    let config = host.config();
    let mut entries = host.registry().entries.clone();
    for e in entries.iter_mut().filter(|e| {
        !matches!(
            e.status,
            Status::Quarantined(_) | Status::OverriddenBy(_) | Status::InvalidName(_)
        )
    }) {
        let upstream = config
            .tool_dirs
            .iter()
            .any(|d| d.is_upstream() && d.path == e.file);
        let recorded = match (&config.source, upstream) {
            (Some(source), true) => {
                mcp_host::plugins::worker::quarantine::recorded_upstream(source, &e.file)
            }
            (_, true) => None,
            (_, false) if e.status == Status::Active => {
                mcp_host::plugins::worker::quarantine::recorded(&e.file)
            }
            (_, false) => None,
        };
        if let Some(r) = recorded {
            e.status = Status::Quarantined(format!("{} (mcp-host pid {})", r.reason, r.pid));
        }
    }
    entries
}

/// The columns of the table.
const LIST_HEADER: [&str; 7] = [
    "NAME",
    "STATUS",
    "SERVICE",
    "PLUGIN",
    "ISOLATION",
    "SIGNER",
    "FILE",
];

/// One entry's row, in [`LIST_HEADER`]'s order.
fn list_row(e: &mcp_host::registry::Entry) -> [String; 7] {
    let status = match &e.status {
        Status::Active => "active".to_owned(),
        Status::OverriddenBy(p) => format!("overridden by {}", p.display()),
        Status::DisabledService(why) => format!("disabled service ({why})"),
        Status::InvalidName(why) => format!("invalid name ({why})"),
        Status::InvalidSchema(why) => format!("invalid schema ({why})"),
        Status::LoadError(why) => format!("load error: {why}"),
        Status::Quarantined(why) => format!("quarantined ({why})"),
        Status::Connecting(detail) => format!("connecting ({detail})"),
        Status::Restarting(why) => format!("restarting ({why})"),
        Status::Failed(why) => format!("failed ({why})"),
        Status::Held(why) => format!("held by pinning ({why})"),
        Status::BadOverride(why) => format!("overrides cannot apply ({why})"),
        Status::Suspicious(found) => format!("held by the definition scan ({found})"),
    };
    // The name clients see, and the one it has without overrides beside it.
    let shown = match &e.original {
        Some(original) if *original != e.tool => format!("{} (from {original})", e.tool),
        Some(_) => format!("{} (overridden)", e.tool),
        None => e.tool.clone(),
    };
    let shown = match e.exposed.as_ref().filter(|x| !x.agents.is_empty()) {
        Some(x) => {
            let agents: Vec<String> = x
                .agents
                .iter()
                .map(|(agent, d)| format!("{agent}: {}", d["name"].as_str().unwrap_or("-")))
                .collect();
            format!("{shown} [{}]", agents.join(", "))
        }
        None => shown,
    };
    let name = match e.kind {
        Kind::Tool => shown,
        Kind::Resource => format!("resource {shown}"),
        Kind::ResourceTemplate => format!("template {shown}"),
        Kind::Prompt => format!("prompt {shown}"),
    };
    [
        name,
        status,
        e.service.clone().unwrap_or_else(|| "-".into()),
        e.plugin.clone().unwrap_or_else(|| "-".into()),
        isolation(e),
        e.signer.clone().unwrap_or_else(|| "-".into()),
        e.file.display().to_string(),
    ]
}

/// The header and `rows` in columns as wide as their widest cell (at most 60), the last one free.
fn write_table(rows: &[[String; 7]], out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let header = LIST_HEADER.map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count()).min(60);
        }
    }
    for row in std::iter::once(&header).chain(rows.iter()) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// A plugin's isolation as the table shows it, with a summary of a sandbox's grant.
fn isolation(e: &mcp_host::registry::Entry) -> String {
    let Some(grant) = &e.permissions else {
        if e.declared.is_empty() {
            return e.isolation.as_str().to_owned();
        }
        let d = &e.declared;
        return format!(
            "{} (declares read {}, write {}, net {}, env {}, credentials {})",
            e.isolation.as_str(),
            d.read.len(),
            d.write.len(),
            d.net.len(),
            d.env.len(),
            d.credentials.len()
        );
    };
    let connect = match &grant.connect {
        mcp_host::config::Connect::Any => "any".to_owned(),
        mcp_host::config::Connect::Only(list) if list.is_empty() => "none".to_owned(),
        mcp_host::config::Connect::Only(list) => list
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
    };
    format!(
        "sandbox (read {}, write {}, connect {connect}, env {}, exec {})",
        grant.read.len(),
        grant.write.len(),
        grant.env.len(),
        if grant.exec { "yes" } else { "no" }
    )
}

/// How `check` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckFormat {
    /// The full report as JSON.
    Json,
    /// A summary for a person.
    Summary,
}

/// Test-load one file and print its manifest (a summary, or the JSON report), or with
/// `permissions` how it runs and what it is granted. Exit 1 with the reason when it does not load,
/// or when the host would refuse some of its names.
pub(crate) fn check(
    config: &Config,
    file: &std::path::Path,
    permissions: bool,
    format: CheckFormat,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let upstream = config
        .tool_dirs
        .iter()
        .any(|d| d.is_upstream() && d.path == file);
    if let Err(e) = std::fs::metadata(file)
        .map(|_| ())
        .or_else(|e| match upstream {
            true => Ok(()),
            false => Err(e),
        })
    {
        eprintln!("{}: cannot read the plugin file: {e}", file.display());
        return Ok(ExitCode::FAILURE);
    }
    let report = mcp_host::host::check_file(config, file, &crate::host_options());
    let mut report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            return Ok(ExitCode::FAILURE);
        }
    };
    let refused = report["refused"].as_array().cloned().unwrap_or_default();
    if permissions {
        report = serde_json::json!({
            "file": report["file"],
            "plugin": report["manifest"]["plugin"],
            "run": report["run"],
        });
    }
    match format {
        CheckFormat::Json => super::write_json(out, &report)?,
        CheckFormat::Summary if permissions => super::write_json(out, &report)?,
        CheckFormat::Summary => write_summary(&report, out)?,
    }
    if refused.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "{}: the host would not serve {} of its names (fix them in the plugin and rebuild):",
        file.display(),
        refused.len()
    );
    for r in &refused {
        eprintln!(
            "  {} {}: {}",
            r["kind"].as_str().unwrap_or("tool"),
            r["name"].as_str().unwrap_or("?"),
            r["why"].as_str().unwrap_or("refused")
        );
    }
    Ok(ExitCode::FAILURE)
}

/// `check`'s report for a person: who built the plugin for what, how it runs, and one line per
/// tool, resource and prompt (the JSON report has the schemas).
fn write_summary(report: &Value, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    write_build(report, out)?;
    write_declared(&report["manifest"], out)?;
    write_services(&report["manifest"], out)?;
    write_items(&report["manifest"], out)?;
    writeln!(
        out,
        "(the full report, schemas included: mcp-host check --json FILE)"
    )?;
    Ok(())
}

/// A JSON string's text, or `?`.
fn text(v: &Value) -> String {
    v.as_str().unwrap_or("?").to_owned()
}

/// A manifest's list under `key` (empty when absent).
fn list(manifest: &Value, key: &str) -> Vec<Value> {
    manifest[key].as_array().cloned().unwrap_or_default()
}

/// The summary's first lines: the file, the plugin and its build, how it runs and who signed it.
fn write_build(report: &Value, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let build = &report["build"];
    let manifest = &report["manifest"];
    writeln!(
        out,
        "{}: plugin {} {} (plugin SDK {}, ABI v{}, {})",
        text(&report["file"]),
        text(&manifest["plugin"]),
        text(&manifest["version"]),
        text(&build["sdk_version"]),
        build["abi"],
        text(&build["target"])
    )?;
    let signature = match &report["signature"] {
        Value::Null => "unsigned".to_owned(),
        Value::String(s) => format!("signed by {s}"),
        other => format!("signed ({other})"),
    };
    writeln!(
        out,
        "  runs: {}; {signature}",
        text(&report["run"]["isolation"])
    )?;
    Ok(())
}

/// The permissions the manifest declares, on one line.
fn write_declared(manifest: &Value, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let declared: Vec<String> = ["read", "write", "net", "env", "credentials"]
        .iter()
        .flat_map(|kind| {
            manifest["permissions"][*kind]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |v| format!("{kind} {}", v.as_str().unwrap_or("?")))
        })
        .collect();
    writeln!(
        out,
        "  declares permissions: {}",
        if declared.is_empty() {
            "none".to_owned()
        } else {
            declared.join(", ")
        }
    )?;
    Ok(())
}

/// A line per service: enabled, or disabled and why.
fn write_services(manifest: &Value, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    for service in list(manifest, "services") {
        let state = if service["enabled"] == Value::Bool(true) {
            "enabled".to_owned()
        } else {
            format!(
                "disabled: {}",
                service["disabled_reason"]
                    .as_str()
                    .or(service["disabledReason"].as_str())
                    .unwrap_or("enabled() said no")
            )
        };
        writeln!(out, "  service {} ({state})", text(&service["name"]))?;
    }
    Ok(())
}

/// A description's first line, cut to 72 characters.
fn first_line(v: &Value) -> String {
    let line = v.as_str().unwrap_or("").lines().next().unwrap_or("").trim();
    let mut short: String = line.chars().take(72).collect();
    if short.len() < line.len() {
        short.push('…');
    }
    short
}

/// The tools, result filters (`#[filter]`: in the manifest's tools, never served as tools),
/// resources and prompts, a line each: the name in a column, then the description's first line.
fn write_items(manifest: &Value, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let (filters, tools): (Vec<Value>, Vec<Value>) = list(manifest, "tools")
        .into_iter()
        .partition(|t| t["filter"] == true);
    let lists = [
        ("tools", "name", tools),
        ("filters", "name", filters),
        ("resources", "uri", list(manifest, "resources")),
        ("prompts", "name", list(manifest, "prompts")),
    ];
    for (key, name_key, items) in lists {
        if items.is_empty() {
            continue;
        }
        writeln!(out, "  {} {key}:", items.len())?;
        let names: Vec<String> = items
            .iter()
            .map(|i| {
                i[name_key]
                    .as_str()
                    .or(i["uriTemplate"].as_str())
                    .or(i["name"].as_str())
                    .unwrap_or("?")
                    .to_owned()
            })
            .collect();
        let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        for (item, name) in items.iter().zip(&names) {
            writeln!(
                out,
                "    {name:<width$}  {}",
                first_line(&item["description"])
            )?;
        }
    }
    Ok(())
}

/// `call --plugin FILE`: a tool directory that takes only that file.
pub(crate) fn plugin_dir(file: &std::path::Path) -> anyhow::Result<mcp_host::config::ToolDir> {
    let path = std::path::absolute(file).with_context(|| format!("--plugin {}", file.display()))?;
    if let Err(e) = std::fs::metadata(&path) {
        anyhow::bail!(
            "--plugin {}: cannot read the plugin file: {e}",
            file.display()
        );
    }
    let extension = mcp_host::plugins::discovery::LIBRARY_EXTENSION;
    let name = mcp_host::plugins::discovery::library_name(&path)
        .filter(|_| path.extension().is_some_and(|e| e == extension))
        .with_context(|| {
            format!(
                "--plugin {}: not a plugin library (expected {}NAME.{})",
                file.display(),
                std::env::consts::DLL_PREFIX,
                std::env::consts::DLL_EXTENSION
            )
        })?;
    let dir = path
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    Ok(mcp_host::config::ToolDir {
        files: vec![globset::escape(name)],
        path: dir,
        ..Default::default()
    })
}

/// Call `tool` in-process as `user` and print its result; progress and log events go to stderr.
pub(crate) fn call(
    config: Config,
    options: mcp_host::HostOptions,
    tool: &str,
    args: &str,
    user: Option<String>,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let args: Value = serde_json::from_str(args).context("--args is not valid JSON")?;
    if let Some(u) = user.as_deref()
        && !mcp_host::access::auth::valid_user_id(u)
    {
        anyhow::bail!("--user {u:?}: a user id is taken exactly as given; remove the whitespace");
    }
    let (runtime, host) = super::start_host(config, options)?;
    let opts = CallOptions {
        request: std::sync::Arc::new(RequestContext::for_caller(user.map(UserInfo::new))),
        events: Some(std::sync::Arc::new(|event| match event {
            CallEvent::Progress {
                progress,
                total,
                message,
            } => eprintln!(
                "progress: {progress}{} {}",
                total.map(|t| format!("/{t}")).unwrap_or_default(),
                message.unwrap_or_default()
            ),
            CallEvent::Log { level, message, .. } => {
                eprintln!("log [{}]: {message}", level.as_str())
            }
        })),
        ..CallOptions::default()
    };
    let result = runtime.block_on(host.call(tool, Some(args), opts));
    host.shutdown();
    match result {
        Ok(result) => {
            super::write_json(out, &result)?;
            let failed = result.get("isError").and_then(Value::as_bool) == Some(true);
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Err(e) => {
            eprintln!("mcp-host: {e}");
            if let Some(hint) = call_hint(&host, &e) {
                eprintln!("{hint}");
            }
            Ok(ExitCode::from(2))
        }
    }
}

/// What to try after a failed `call`: the tool meant, `--plugin` when nothing is served, `--user`
/// for a tool that needs a caller.
fn call_hint(host: &Host, error: &mcp_host::CallError) -> Option<String> {
    match error {
        mcp_host::CallError::UnknownTool(name) => {
            let registry = host.registry();
            if registry.is_empty() {
                let config = host.config();
                let dirs: Vec<String> = config
                    .tool_dirs
                    .iter()
                    .map(|d| d.path.display().to_string())
                    .collect();
                return Some(format!(
                    "No tools are served from {} (config: {}). In a plugin's crate, call its \
                     build directly: mcp-host call --plugin target/release/{}NAME.{} {name}",
                    if dirs.is_empty() {
                        "no tool directory".to_owned()
                    } else {
                        dirs.join(", ")
                    },
                    config
                        .source
                        .as_ref()
                        .map_or("none, the defaults".to_owned(), |p| p.display().to_string()),
                    std::env::consts::DLL_PREFIX,
                    std::env::consts::DLL_EXTENSION
                ));
            }
            let names: Vec<&str> = registry.tools().map(|t| t.name.as_str()).collect();
            mcp_host::config::did_you_mean(name, names.iter().copied())
                .map(|close| format!("Did you mean `{close}`? (`mcp-host list` shows every tool)"))
                .or_else(|| Some("`mcp-host list` shows every tool.".to_owned()))
        }
        mcp_host::CallError::CallerRequired(name) => Some(format!(
            "{name} acts for a user: call it as one, e.g. mcp-host call {name} --user NAME"
        )),
        _ => None,
    }
}
