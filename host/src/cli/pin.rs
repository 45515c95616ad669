//! `mcp-host pin`: record every served tool, resource and prompt definition in the lock file (the
//! plugin serving it, the SHA-256 of its canonical definition, the definition itself); `--diff`:
//! show what differs from the lock, field by field, as old and new text (exit 1 when anything does).
//! Both say what the definition scan finds in what they pin or show (`!` lines).

use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::config::PinMode;
use mcp_host::config::lock::PinLock;
use mcp_host::registry::pins;
use mcp_host::{Config, Host};

/// Pin what `config` serves (or, with `diff`, print how it differs from the lock file).
pub(crate) fn pin(
    mut config: Config,
    diff: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let lock_path = config.lock_path();
    let managed = config.installed_dir();
    let pinned = PinLock::read(&lock_path);
    // What would be served without pinning: every definition, held or not.
    config.trust.pinning = PinMode::Off;
    for dir in &mut config.tool_dirs {
        dir.pinning = None;
    }
    let host = Host::start(config, crate::host_options())?;
    let mut current = host.registry().pins();
    host.shutdown();
    let differences = pins::compare(&current, &pinned);
    if diff {
        if let Some(problem) = &pinned.problem {
            eprintln!("mcp-host: {problem}");
        }
        for line in differences.iter().flat_map(pins::Difference::report) {
            writeln!(out, "{line}")?;
        }
        if differences.is_empty() {
            writeln!(
                out,
                "{} matches what is served ({} definitions)",
                lock_path.display(),
                current.len()
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        return Ok(ExitCode::FAILURE);
    }
    // An `add`, `update` or `remove` running meanwhile records there too: write under the
    // managed directory's lock (when there is one), with what the installs recorded by then.
    let _held = managed
        .is_dir()
        .then(|| mcp_host::install::lock_dir(&managed))
        .transpose()?;
    current.installed = PinLock::read(&lock_path).installed;
    current
        .write(&lock_path)
        .with_context(|| format!("cannot write the lock file {}", lock_path.display()))?;
    for difference in &differences {
        if let Some(head) = difference.report().first() {
            writeln!(out, "{head}")?;
        }
    }
    // Pinned as they are, but a reviewer should know: the definition scan's findings in anything
    // pinned (under `definition_scan: hold` such a definition is not served until changed).
    for section in [
        pins::Section::Tools,
        pins::Section::Resources,
        pins::Section::Prompts,
    ] {
        for (name, pin) in section.of(&current) {
            for finding in pins::findings(pin) {
                writeln!(
                    out,
                    "{} {name}: the definition scan found {finding}",
                    section.singular()
                )?;
            }
        }
    }
    writeln!(
        out,
        "Pinned {} tools, {} resources and {} prompts in {} ({} changed since the last pin)",
        current.tools.len(),
        current.resources.len(),
        current.prompts.len(),
        lock_path.display(),
        differences.len()
    )?;
    Ok(ExitCode::SUCCESS)
}
