//! `mcp-host sign`: a detached minisign signature beside each plugin file (`<file>.minisig`), made
//! with a secret key from `mcp-host keygen` (or minisign's own), for tool directories that
//! require signed plugins.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::plugins::signature::{format_key_id, signature_path};

use super::keygen::Password;

/// Read the secret key at `key`: unencrypted, or decrypted with `password`.
pub(crate) fn secret_key(key: &Path, password: Password) -> anyhow::Result<minisign::SecretKey> {
    let text = std::fs::read_to_string(key)
        .with_context(|| format!("cannot read the secret key {}", key.display()))?;
    let boxed = minisign::SecretKeyBox::from_string(&text).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Ok(sk) = minisign::SecretKey::from_unencrypted_box(boxed.clone()) {
        return Ok(sk);
    }
    let password = match password {
        Password::Given(p) => Some(p),
        // minisign asks on the terminal, without echo.
        Password::Prompt => None,
        Password::None => anyhow::bail!(
            "{} is password-protected (or not a minisign secret key): pass --password-env VAR",
            key.display()
        ),
    };
    minisign::SecretKey::from_box(boxed, password)
        .map_err(|e| anyhow::anyhow!("{}: {e}", key.display()))
}

/// Sign each of `files` with the secret key at `key`.
pub(crate) fn sign(
    key: &Path,
    password: Password,
    files: &[std::path::PathBuf],
) -> anyhow::Result<ExitCode> {
    let sk = secret_key(key, password)?;
    let pk = minisign::PublicKey::from_secret_key(&sk).map_err(|e| anyhow::anyhow!("{e}"))?;
    let key_id = format_key_id(pk.keynum());
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut out = crate::protected_stdout();
    for file in files {
        let data =
            std::fs::File::open(file).with_context(|| format!("cannot read {}", file.display()))?;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The trusted comment is signed too; minisign's own tool writes the same form.
        let trusted = format!("timestamp:{timestamp}\tfile:{name}");
        let signature = minisign::sign(
            Some(&pk),
            &sk,
            data,
            Some(&trusted),
            Some(&format!("signature from mcp-host secret key {key_id}")),
        )
        .map_err(|e| anyhow::anyhow!("cannot sign {}: {e}", file.display()))?;
        let dest = signature_path(file);
        let tmp = dest.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, signature.into_string())
            .and_then(|()| std::fs::rename(&tmp, &dest))
            .with_context(|| format!("cannot write {}", dest.display()))?;
        writeln!(
            out,
            "Signed {} -> {} (key ID {key_id})",
            file.display(),
            dest.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
