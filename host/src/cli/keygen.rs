//! `mcp-host keygen`: a minisign key pair for signing plugins — the secret key (mode 0600,
//! password-protected unless `--no-password`) and the public key, with the `trust.keys` line to add.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

/// Where a secret key's password comes from.
#[derive(Debug)]
pub(crate) enum Password {
    /// The key is (to be) stored unencrypted.
    None,
    /// This password (from the environment variable `--password-env` names).
    Given(String),
    /// Asked on the terminal (hidden input) by minisign.
    Prompt,
}

impl Password {
    /// The password `--password-env VAR` / `--no-password` ask for; the terminal when neither is
    /// given and there is one.
    pub(crate) fn from_args(env: Option<&str>, no_password: bool) -> anyhow::Result<Password> {
        if no_password {
            return Ok(Password::None);
        }
        match env {
            Some(var) => std::env::var(var)
                .map(Password::Given)
                .with_context(|| format!("--password-env {var}: the variable is not set")),
            None if std::io::IsTerminal::is_terminal(&std::io::stdin()) => Ok(Password::Prompt),
            None => anyhow::bail!(
                "no terminal to ask for a password: pass --password-env VAR (the password is \
                 that variable's value) or --no-password"
            ),
        }
    }
}

/// Write `contents` to a new file at `path` (never over an existing one unless `force`), readable
/// by its owner only when `private`.
fn create(path: &Path, contents: &[u8], private: bool, force: bool) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    #[cfg(unix)]
    if private {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(path).with_context(|| {
        if path.exists() && !force {
            format!("{} exists (use --force to replace it)", path.display())
        } else {
            format!("cannot create {}", path.display())
        }
    })?;
    file.write_all(contents)?;
    file.sync_all()?;
    Ok(())
}

/// Write `<out>.key` and `<out>.pub` and print the configuration line for the public key.
pub(crate) fn keygen(
    out: &Path,
    name: Option<&str>,
    password: Password,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let with = |ext: &str| {
        let mut p = out.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    let (secret_path, public_path) = (with(".key"), with(".pub"));
    for path in [&secret_path, &public_path] {
        if path.exists() && !force {
            anyhow::bail!("{} exists (use --force to replace it)", path.display());
        }
    }
    let encrypted = !matches!(password, Password::None);
    let pair = match password {
        Password::Given(p) => minisign::KeyPair::generate_encrypted_keypair(Some(p)),
        // minisign asks twice on the terminal, without echo.
        Password::Prompt => minisign::KeyPair::generate_encrypted_keypair(None),
        Password::None => minisign::KeyPair::generate_unencrypted_keypair(),
    }
    .map_err(|e| anyhow::anyhow!("cannot generate a key pair: {e}"))?;
    let secret = pair
        .sk
        .to_box(Some("mcp-host plugin signing key"))
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_string();
    let public = pair
        .pk
        .to_box()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_string();
    create(&secret_path, secret.as_bytes(), true, force)?;
    create(&public_path, public.as_bytes(), false, force)?;
    let name = name.map(str::to_owned).unwrap_or_else(|| {
        out.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "release".into())
    });
    let mut stdout = crate::protected_stdout();
    writeln!(
        stdout,
        "Secret key: {} ({}; keep it private: it signs plugins)\nPublic key: {}\n",
        secret_path.display(),
        if encrypted {
            "password-protected"
        } else {
            "not password-protected"
        },
        public_path.display()
    )?;
    writeln!(
        stdout,
        "Add to your config file:\n\ntrust:\n  keys:\n    {}: \"{}\"",
        serde_json::to_string(&name)?.trim_matches('"'),
        pair.pk.to_base64()
    )?;
    writeln!(
        stdout,
        "\nSign a plugin with `mcp-host sign --key {} FILE`.",
        secret_path.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
