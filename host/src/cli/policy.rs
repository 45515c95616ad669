//! `mcp-host policy test`: which call policy rule matches a call, and what it decides, without
//! calling the tool (budgets are not drawn on, no human is asked).

use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::{Config, HostOptions};
use serde_json::Value;

/// The call `policy test` asks about.
#[derive(Debug)]
pub(crate) struct Probe<'a> {
    /// The caller's user id.
    pub user: &'a str,
    /// The agent the call comes through.
    pub agent: Option<&'a str>,
    /// The caller's JWT claims, as JSON text (an object).
    pub claims: Option<&'a str>,
    /// The tool.
    pub tool: &'a str,
    /// Its arguments, as JSON text.
    pub args: &'a str,
    /// Print JSON instead of text.
    pub json: bool,
}

/// Load the configured plugins, then print the decision for the call `probe` describes.
pub(crate) fn test(
    config: Config,
    options: HostOptions,
    probe: &Probe<'_>,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let Probe {
        user,
        agent,
        claims,
        tool,
        args,
        json,
    } = *probe;
    let args: Value = serde_json::from_str(args).context("ARGS is not valid JSON")?;
    if !args.is_object() {
        anyhow::bail!("ARGS must be a JSON object, e.g. '{{\"text\": \"hi\"}}'");
    }
    let claims = match claims {
        Some(text) => match serde_json::from_str(text).context("--claims is not valid JSON")? {
            Value::Object(claims) => Some(claims),
            _ => anyhow::bail!("--claims must be a JSON object, e.g. '{{\"roles\": [\"admin\"]}}'"),
        },
        None => None,
    };
    let (_runtime, host) = super::start_host(config, options)?;
    let explained = host.explain_policy(tool, &args, Some(user), agent, claims.as_ref());
    host.shutdown();
    let explained = explained?;
    if json {
        super::write_json(out, &explained)?;
    } else {
        writeln!(
            out,
            "rule: {}",
            explained
                .rule
                .as_deref()
                .unwrap_or("(none: no rule matched)")
        )?;
        writeln!(out, "outcome: {}", explained.outcome)?;
        if let Some(Value::Object(detail)) = &explained.detail {
            for (key, value) in detail {
                match value {
                    Value::String(s) => writeln!(out, "{key}: {s}")?,
                    other => writeln!(out, "{key}: {other}")?,
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
