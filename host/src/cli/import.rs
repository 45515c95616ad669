//! `mcp-host import claude-desktop [FILE]` and `mcp-host import server-json FILE`: the
//! `tool_dirs` entries made from another host's MCP servers (see `mcp_host::config::import`),
//! printed as YAML with what was skipped and the variables to set; `--write CONFIG` appends them
//! to a configuration file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::config::import;

/// What to import (the subcommands of `mcp-host import`).
#[derive(clap::Subcommand, Debug)]
pub(crate) enum Source {
    /// A Claude Desktop or Cursor configuration: its `mcpServers` map.
    ClaudeDesktop {
        /// The file (default: Claude Desktop's configuration on this platform).
        file: Option<PathBuf>,
        /// Append the entries to this configuration file, keeping what it holds.
        #[arg(long, value_name = "CONFIG")]
        write: Option<PathBuf>,
    },
    /// An MCP registry `server.json`: its first npm, PyPI or OCI package as a command, else its
    /// first Streamable HTTP remote.
    ServerJson {
        /// The file.
        file: PathBuf,
        /// Append the entry to this configuration file, keeping what it holds.
        #[arg(long, value_name = "CONFIG")]
        write: Option<PathBuf>,
    },
}

/// Import `source`, print the entries, and with its `--write` append them to that configuration
/// file. Exit 1 when nothing could be imported.
pub(crate) fn import(source: Source, out: &mut dyn std::io::Write) -> anyhow::Result<ExitCode> {
    let (path, made, write) = match source {
        Source::ClaudeDesktop { file, write } => {
            let path = file
                .or_else(import::claude_desktop_default_path)
                .context("no Claude Desktop configuration path on this platform: give FILE")?;
            let made = import::claude_desktop(&path);
            (path, made, write)
        }
        Source::ServerJson { file, write } => {
            let made = import::server_json(&file);
            (file, made, write)
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
    if let Some(config) = write.as_deref() {
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
