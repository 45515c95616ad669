//! What plugin authors and operators run to look at the host without serving: `list` (every
//! discovered tool, prompt and resource, its status and signer), `check` (one file's signer and
//! manifest, or the exact load error) and `call` (one tool, in-process).

use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::exec::CallEvent;
use mcp_host::host::CallOptions;
use mcp_host::registry::{Kind, Status};
use mcp_host::{Config, Host};
use mcp_plugin_sdk::UserInfo;
use serde_json::Value;

/// Print every discovered tool, prompt and resource (a table, or JSON rows).
pub(crate) fn print_list(
    host: &Host,
    json: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let registry = host.registry();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&registry.entries)?)?;
        return Ok(());
    }
    let rows: Vec<[String; 6]> = registry
        .entries
        .iter()
        .map(|e| {
            let status = match &e.status {
                Status::Active => "active".to_owned(),
                Status::OverriddenBy(p) => format!("overridden by {}", p.display()),
                Status::DisabledService(why) => format!("disabled service ({why})"),
                Status::InvalidName(why) => format!("invalid name ({why})"),
                Status::InvalidSchema(why) => format!("invalid schema ({why})"),
                Status::LoadError(why) => format!("load error: {why}"),
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
                e.signer.clone().unwrap_or_else(|| "-".into()),
                e.file.display().to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "STATUS", "SERVICE", "PLUGIN", "SIGNER", "FILE"].map(str::to_owned);
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

/// Test-load one file and print its manifest (exit 1 with the reason when it does not load).
pub(crate) fn check(
    config: &Config,
    file: &std::path::Path,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let report = mcp_host::host::check_file(config, file, &crate::host_options());
    match report {
        Ok(manifest) => {
            writeln!(out, "{}", serde_json::to_string_pretty(&manifest)?)?;
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
    let host = Host::start(config, crate::host_options())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
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
