//! `mcp-host import claude-desktop [FILE]` and `mcp-host import server-json FILE`: the
//! `tool_dirs` entries made from another host's MCP servers (see `mcp_host::config::import`),
//! printed as YAML with what was skipped and the variables to set; `--write CONFIG` appends them
//! to a configuration file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::config::import;

/// What to import.
pub(crate) enum Source {
    /// A Claude Desktop or Cursor configuration (default: Claude Desktop's on this platform).
    ClaudeDesktop(Option<PathBuf>),
    /// An MCP registry `server.json`.
    ServerJson(PathBuf),
}

/// Import `source`, print the entries, and with `write` append them to that configuration file.
/// Exit 1 when nothing could be imported.
pub(crate) fn import(
    source: Source,
    write: Option<&Path>,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let (path, made) = match source {
        Source::ClaudeDesktop(file) => {
            let path = file
                .or_else(import::claude_desktop_default_path)
                .context("no Claude Desktop configuration path on this platform: give FILE")?;
            let made = import::claude_desktop(&path);
            (path, made)
        }
        Source::ServerJson(path) => {
            let made = import::server_json(&path);
            (path, made)
        }
    };
    let made = made?;
    writeln!(out, "# Imported from {}", path.display())?;
    write!(out, "{}", made.to_yaml())?;
    if made.entries.is_empty() {
        eprintln!(
            "mcp-host: no server of {} could be imported",
            path.display()
        );
        return Ok(ExitCode::from(1));
    }
    if let Some(config) = write {
        let appended = import::append_to_config(config, &made)?;
        if !appended.written.is_empty() {
            writeln!(
                out,
                "# Wrote to {}: {}",
                config.display(),
                appended.written.join(", ")
            )?;
        }
        if !appended.present.is_empty() {
            writeln!(
                out,
                "# Already in {} (not written again): {}",
                config.display(),
                appended.present.join(", ")
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
