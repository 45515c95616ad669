//! `mcp-host vault list|rotate|revoke`: the upstream token vault, seen and kept by the operator —
//! who is connected where (never a token), re-sealing every row under the first key of
//! `upstream_auth.vault.keys`, and deleting a user's credentials.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use mcp_host::Config;
use mcp_host::access::upstream::sealing::VaultKeys;
use mcp_host::access::upstream::vault::{
    AtServer, Connection, DeleteOnly, RowFilter, Vault, VaultBounds,
};
use mcp_host::config::StoreSetting;
use mcp_host::store::Store;

/// What `mcp-host vault` does.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum VaultCommand {
    /// Who is connected where: principal, upstream, issuer, scopes, expiry and the key each row is
    /// sealed under (never a token).
    List {
        /// This user's connections only.
        #[arg(long)]
        user: Option<String>,
        /// This upstream's connections only.
        #[arg(long)]
        upstream: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Re-seal every credential and client secret under the first key of
    /// `upstream_auth.vault.keys` (then the older keys can be removed).
    Rotate,
    /// Delete a user's upstream credentials (at one upstream, or all): the next call asks the
    /// user to connect again.
    Revoke {
        /// The user (principal).
        #[arg(long)]
        user: String,
        /// Only the credential at this upstream.
        #[arg(long)]
        upstream: Option<String>,
    },
}

/// Run `command` against the configured store.
pub(crate) fn run(
    config: Config,
    command: VaultCommand,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    if let Some(absent) = store_absent(&config.store) {
        writeln!(out, "{absent}")?;
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let vault = open(&config).await?;
        match command {
            VaultCommand::List {
                user,
                upstream,
                json,
            } => {
                let filter = RowFilter {
                    principal: user.as_deref(),
                    upstream: upstream.as_deref(),
                };
                list(&vault, filter, json, out).await
            }
            VaultCommand::Rotate => rotate(&vault, out).await,
            VaultCommand::Revoke { user, upstream } => {
                revoke(&vault, &user, upstream.as_deref(), out).await
            }
        }
    })
}

/// Why there is nothing to look at: the store is memory (the vault lives in one serving
/// process), or its SQLite file does not exist yet.
fn store_absent(store: &StoreSetting) -> Option<String> {
    let path = match store {
        StoreSetting::Memory => {
            return Some(
                "The store is `memory`: the vault lives inside a serving process and nothing of it \
                 outlives the process."
                    .into(),
            );
        }
        StoreSetting::Sqlite(path) => path.clone().or_else(mcp_host::store::default_sqlite_path),
        StoreSetting::Redis(_) => return None,
    };
    match path {
        Some(path) if !path.exists() => Some(format!(
            "No connections: the store {} does not exist yet.",
            path.display()
        )),
        _ => None,
    }
}

/// The vault over the configured store, with the configured keys and bounds.
async fn open(config: &Config) -> anyhow::Result<Vault> {
    let settings = &config.upstream_auth.vault;
    let keys = VaultKeys::from_config(&settings.keys)?;
    let replica = format!("cli-{}", std::process::id());
    let store = Store::open(&config.store, &replica, &config.request_state.keys)
        .await
        .with_context(|| format!("cannot open the store {}", describe(&config.store)))?;
    Ok(Vault::new(
        store.vault_backend(),
        keys,
        VaultBounds::from(settings),
        &replica,
    ))
}

fn describe(store: &StoreSetting) -> String {
    match store {
        StoreSetting::Memory => "memory".into(),
        StoreSetting::Sqlite(Some(path)) => format!("sqlite:{}", path.display()),
        StoreSetting::Sqlite(None) => "sqlite".into(),
        StoreSetting::Redis(url) => mcp_host::store::redact_url(url),
    }
}

/// A Unix time in milliseconds as an RFC 3339 UTC time.
fn time(ms: Option<u64>) -> String {
    ms.and_then(|ms| i64::try_from(ms).ok())
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || "-".into(),
            |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
}

/// Which key a row is sealed under, as the operator needs to know it.
fn key_state(connection: &Connection, key_ids: &[String]) -> String {
    match &connection.key_id {
        None => "(not sealed)".into(),
        Some(id) if key_ids.first() == Some(id) => id.clone(),
        Some(id) if key_ids.contains(id) => {
            format!("{id} (older key: run `mcp-host vault rotate`)")
        }
        Some(id) => format!("{id} (no configured key opens it)"),
    }
}

async fn list(
    vault: &Vault,
    filter: RowFilter<'_>,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let connections = vault.connections(filter).await?;
    if json {
        super::write_json(out, &connections)?;
        return Ok(ExitCode::SUCCESS);
    }
    if connections.is_empty() {
        writeln!(out, "No connections.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let key_ids = vault.key_ids();
    let header = [
        "PRINCIPAL",
        "UPSTREAM",
        "ISSUER",
        "SCOPES",
        "EXPIRES",
        "LAST USED",
        "KEY",
    ];
    let rows: Vec<[String; 7]> = connections
        .iter()
        .map(|c| {
            [
                c.principal.clone(),
                c.upstream.clone(),
                c.issuer.clone(),
                c.scopes.join(" "),
                time(c.expires_ms),
                time(Some(c.last_used_ms)),
                key_state(c, &key_ids),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for row in &rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn rotate(vault: &Vault, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    if vault.key_ids().is_empty() {
        bail!("no key to seal with: set upstream_auth.vault.keys (the new key first)");
    }
    let report = vault.rotate().await?;
    writeln!(
        out,
        "Re-sealed {} row{} under key {}; {} already sealed under it.",
        report.resealed,
        if report.resealed == 1 { "" } else { "s" },
        report.key_id,
        report.current
    )?;
    if report.unreadable.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{} row{} left as they are (no configured key opens them; they read as absent, so the \
         users connect again):",
        report.unreadable.len(),
        if report.unreadable.len() == 1 {
            " is"
        } else {
            "s are"
        },
    )?;
    for row in &report.unreadable {
        writeln!(out, "  {row}")?;
    }
    Ok(ExitCode::FAILURE)
}

async fn revoke(
    vault: &Vault,
    user: &str,
    upstream: Option<&str>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    // Revocation at the authorization server (RFC 7009) is the OAuth engine's: it implements
    // `Revocation`, and this command will pass it once the engine is configured here.
    let revoked = vault.revoke(user, upstream, &DeleteOnly).await?;
    if revoked.is_empty() {
        let at = upstream.map(|u| format!(" at {u}")).unwrap_or_default();
        writeln!(out, "No credential of {user}{at}: nothing to revoke.")?;
        return Ok(ExitCode::SUCCESS);
    }
    for r in &revoked {
        let c = &r.connection;
        let at_server = match &r.at_authorization_server {
            AtServer::Revoked => "revoked at the authorization server".to_owned(),
            AtServer::NotOffered => "the authorization server offers no revocation".to_owned(),
            AtServer::Failed(why) => {
                format!("revocation at the authorization server failed: {why}")
            }
            AtServer::Skipped(why) => format!("not revoked at the authorization server: {why}"),
        };
        writeln!(
            out,
            "Deleted the credential of {} at {} (issuer {}); {at_server}.",
            c.principal, c.upstream, c.issuer
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
