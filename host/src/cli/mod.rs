//! The subcommands of the `mcp-host` binary, one module each; `main.rs` parses and dispatches.

pub(crate) mod config;
pub(crate) mod connect;
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
pub(crate) mod vault;

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

/// An error and its causes on one line, each said once: a cause whose text the line already holds
/// (an error whose message quotes its source, as `#[error("…: {0}")]` with `#[from]` does) is not
/// repeated, nor its multi-line detail (a CEL code frame).
pub(crate) fn error_text(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("invalid call policy: {0}")]
    struct Quoting(#[from] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("rule `x` does not compile:\n| a ==\n| ...^")]
    struct Inner;

    #[test]
    fn a_cause_the_message_already_quotes_is_said_once() {
        let error = anyhow::Error::new(Quoting(Inner));
        assert_eq!(format!("{error:#}").matches("does not compile").count(), 2);
        let text = error_text(&error);
        assert_eq!(text.matches("does not compile").count(), 1, "{text}");
        assert_eq!(text.matches("| a ==").count(), 1, "{text}");
        let io = std::io::Error::other("No such file or directory");
        let error = anyhow::Error::new(io).context("cannot read c.yaml");
        assert_eq!(
            error_text(&error),
            "cannot read c.yaml: No such file or directory"
        );
    }
}
