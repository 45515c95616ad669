//! What plugin authors and operators run to look at the host without serving: `list` (every
//! discovered tool, prompt and resource, its status, isolation and signer), `check` (one file's signer and
//! manifest, or the exact load error) and `call` (one tool, in-process).

use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::exec::CallEvent;
use mcp_host::host::CallOptions;
use mcp_host::registry::{Kind, Status};
use mcp_host::{Config, Host};
use mcp_plugin_sdk::UserInfo;
use serde_json::Value;

/// Print every discovered tool, prompt and resource (a table, or JSON rows). Long: one row
/// builder and the table's layout, nothing else.
pub(crate) fn print_list(
    host: &Host,
    json: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let registry = host.registry();
    // A running server may have quarantined a plugin this process loaded fine: say so.
    let mut entries = registry.entries.clone();
    for e in entries.iter_mut().filter(|e| e.status == Status::Active) {
        if let Some(r) = mcp_host::plugins::worker::quarantine::recorded(&e.file) {
            e.status = Status::Quarantined(format!("{} (mcp-host pid {})", r.reason, r.pid));
        }
    }
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&entries)?)?;
        return Ok(());
    }
    let rows: Vec<[String; 7]> = entries
        .iter()
        .map(|e| {
            let status = match &e.status {
                Status::Active => "active".to_owned(),
                Status::OverriddenBy(p) => format!("overridden by {}", p.display()),
                Status::DisabledService(why) => format!("disabled service ({why})"),
                Status::InvalidName(why) => format!("invalid name ({why})"),
                Status::InvalidSchema(why) => format!("invalid schema ({why})"),
                Status::LoadError(why) => format!("load error: {why}"),
                Status::Quarantined(why) => format!("quarantined ({why})"),
                Status::Held(why) => format!("held by pinning ({why})"),
            };
            let name = match e.kind {
                Kind::Tool => e.tool.clone(),
                Kind::Resource => format!("resource {}", e.tool),
                Kind::ResourceTemplate => format!("template {}", e.tool),
                Kind::Prompt => format!("prompt {}", e.tool),
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
        })
        .collect();
    let header = [
        "NAME",
        "STATUS",
        "SERVICE",
        "PLUGIN",
        "ISOLATION",
        "SIGNER",
        "FILE",
    ]
    .map(str::to_owned);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
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

/// A plugin's isolation as the table shows it, with a summary of a sandbox's grant.
fn isolation(e: &mcp_host::registry::Entry) -> String {
    let Some(grant) = &e.permissions else {
        return e.isolation.as_str().to_owned();
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

/// Test-load one file and print its manifest, or with `permissions` how it runs and what it is
/// granted (exit 1 with the reason when it does not load).
pub(crate) fn check(
    config: &Config,
    file: &std::path::Path,
    permissions: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let report = mcp_host::host::check_file(config, file, &crate::host_options());
    match report {
        Ok(mut report) => {
            if permissions {
                report = serde_json::json!({
                    "file": report["file"],
                    "plugin": report["manifest"]["plugin"],
                    "run": report["run"],
                });
            }
            writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            Ok(ExitCode::FAILURE)
        }
    }
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let host = {
        let _runtime = runtime.enter();
        Host::start(config, options)?
    };
    let opts = CallOptions {
        caller: user.map(UserInfo::new),
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
            writeln!(out, "{}", serde_json::to_string_pretty(&result)?)?;
            let failed = result.get("isError").and_then(Value::as_bool) == Some(true);
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Err(e) => {
            eprintln!("mcp-host: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
