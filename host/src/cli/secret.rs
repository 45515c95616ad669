//! `mcp-host secret new`: a personal MCP secret, shown once, and the config entry with its hash.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

/// Print a fresh secret for `user` (optionally bound to `agent`, expiring after `expires`).
pub(crate) fn new_secret(
    user: &str,
    agent: Option<&str>,
    expires: Option<&str>,
) -> anyhow::Result<ExitCode> {
    use mcp_host::access::auth;
    let secret = auth::new_secret().map_err(|e| anyhow::anyhow!("no OS randomness: {e}"))?;
    let expires_at = match expires {
        Some(lifetime) => {
            let secs = auth::parse_lifetime(lifetime)
                .with_context(|| format!("--expires {lifetime:?}: use e.g. 30d, 12h, 2w"))?;
            let at = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(i64::try_from(secs)?))?;
            Some(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        }
        None => None,
    };
    let mut entry = format!(
        "    - {{ sha256: \"{}\", user: {}",
        auth::hash_secret(&secret),
        serde_json::to_string(user)?
    );
    if let Some(agent) = agent {
        entry.push_str(&format!(", agent: {}", serde_json::to_string(agent)?));
    }
    if let Some(at) = &expires_at {
        entry.push_str(&format!(", expires: \"{at}\""));
    }
    entry.push_str(" }");
    let mut out = crate::protected_stdout();
    writeln!(
        out,
        "Secret (shown once; the config keeps only its hash):\n\n    {secret}\n"
    )?;
    writeln!(
        out,
        "Add to your config file (`require_auth: true` refuses anonymous calls; without it \
         tools that do not take the caller answer anyone):\n\nauth:\n  require_auth: true\n  \
         secrets:\n{entry}"
    )?;
    writeln!(
        out,
        "\nClients send it as `Authorization: Bearer {}…`.",
        &secret[..8]
    )?;
    Ok(ExitCode::SUCCESS)
}
