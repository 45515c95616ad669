//! The subcommands of the `mcp-host` binary, one module each; `main.rs` parses and dispatches.

pub(crate) mod config;
pub(crate) mod import;
pub(crate) mod inspect;
pub(crate) mod install;
pub(crate) mod keygen;
pub(crate) mod new;
pub(crate) mod pin;
pub(crate) mod policy;
pub(crate) mod secret;
pub(crate) mod serve;
pub(crate) mod sign;

/// A multi-threaded runtime and a host started inside it, for the subcommands that load the
/// configured plugins without serving (`call`, `policy test`). Keep the runtime while the host runs.
pub(crate) fn start_host(
    config: mcp_host::Config,
    options: mcp_host::HostOptions,
) -> anyhow::Result<(tokio::runtime::Runtime, mcp_host::Host)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let host = {
        let _runtime = runtime.enter();
        mcp_host::Host::start(config, options)?
    };
    Ok((runtime, host))
}

/// `value` as pretty JSON on a line of its own: what `--json` prints.
pub(crate) fn write_json(
    out: &mut dyn std::io::Write,
    value: &impl serde::Serialize,
) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}
