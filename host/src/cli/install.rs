//! `mcp-host publish`, `add`, `remove`, `update` and `list --installed`: plugins as signed OCI
//! packages (docs/authors/publishing.md, docs/operators/installing-plugins.md). The work is in
//! `mcp_host::install`; this prints, asks and signs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use mcp_host::Config;
use mcp_host::config::lock::canonical_json;
use mcp_host::install::{self, Source, Staged, oci, package};
use serde_json::Value;

use super::keygen::Password;

/// `FILE` (this host's platform) or `PLATFORM=FILE`.
fn platform_file(arg: &str) -> (String, PathBuf) {
    match arg.split_once('=') {
        Some((platform, file)) if !platform.is_empty() && !platform.contains('/') => {
            (platform.to_owned(), PathBuf::from(file))
        }
        _ => (package::host_platform(), PathBuf::from(arg)),
    }
}

/// `mcp-host publish FILE... REF --key KEY`: package the builds with the plugin's manifest (from
/// the build for this platform, or `--manifest`), sign each, push to `REF`.
pub(crate) fn publish(
    config: &Config,
    args: &[String],
    key: &Path,
    password: Password,
    manifest_file: Option<&Path>,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let Some((reference_text, files)) = args.split_last().filter(|(_, f)| !f.is_empty()) else {
        anyhow::bail!("usage: mcp-host publish FILE... REF --key KEY");
    };
    let reference = oci::parse_reference(reference_text)?;
    let files: Vec<(String, PathBuf)> = files.iter().map(|f| platform_file(f)).collect();
    let (manifest, build) = match manifest_file {
        Some(path) => manifest_from_file(path)?,
        None => manifest_from_build(config, &files)?,
    };
    let plugin = manifest["plugin"]
        .as_str()
        .context("the manifest names no plugin")?
        .to_owned();
    let manifest_json = canonical_json(&manifest).into_bytes();
    let manifest_digest = package::sha256_digest(&manifest_json);
    let sk = super::sign::secret_key(key, password)?;
    let builds = signed_builds(&files, &sk, &plugin, &manifest_digest)?;
    let platforms: Vec<String> = builds.iter().map(|b| b.platform.clone()).collect();
    let pkg = package::Package {
        config: package::config_blob(&manifest, &build, &platforms),
        manifest_json,
        builds,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let digest = runtime.block_on(oci::push(&reference, &pkg))?;
    writeln!(
        out,
        "Published {plugin} {} ({}) to {reference_text}\ndigest: {digest}",
        manifest["version"].as_str().unwrap_or("?"),
        platforms.join(", ")
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `--manifest FILE`: the plugin manifest as given, and this host's build information.
fn manifest_from_file(path: &Path) -> anyhow::Result<(Value, Value)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --manifest {}", path.display()))?;
    let manifest: Value = serde_json::from_str(&text)
        .with_context(|| format!("--manifest {} is not JSON", path.display()))?;
    let build = serde_json::to_value(mcp_plugin_sdk::wire::BuildInfo::host())?;
    Ok((manifest, build))
}

/// The plugin manifest and build information of the one build among `files` for this host's
/// platform, as `check` reads them.
fn manifest_from_build(
    config: &Config,
    files: &[(String, PathBuf)],
) -> anyhow::Result<(Value, Value)> {
    let here = package::host_platform();
    let native: Vec<&PathBuf> = files
        .iter()
        .filter(|(p, _)| *p == here)
        .map(|(_, f)| f)
        .collect();
    let [file] = native.as_slice() else {
        anyhow::bail!(
            "publish reads the plugin's manifest from its build for this platform ({here}): \
             give exactly one (found {}), or pass --manifest FILE (`mcp-host check --json`'s \
             \"manifest\")",
            native.len()
        );
    };
    let report = mcp_host::host::check_file(config, file, &crate::host_options())
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    Ok((report["manifest"].clone(), report["build"].clone()))
}

/// Each of `files` (one per platform) read and signed for `plugin` with the manifest of digest
/// `manifest_digest`.
fn signed_builds(
    files: &[(String, PathBuf)],
    sk: &minisign::SecretKey,
    plugin: &str,
    manifest_digest: &str,
) -> anyhow::Result<Vec<package::PlatformBuild>> {
    let mut builds: Vec<package::PlatformBuild> = Vec::new();
    for (platform, file) in files {
        let file_name = file
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| oci::valid_file_name(n))
            .with_context(|| format!("{}: not a plugin library file name", file.display()))?
            .to_owned();
        if builds.iter().any(|b| b.platform == *platform) {
            anyhow::bail!("two builds for {platform}");
        }
        let library =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        let signature = package::sign(sk, &library, &file_name, plugin, platform, manifest_digest)?;
        builds.push(package::PlatformBuild {
            platform: platform.clone(),
            file_name,
            library,
            signature: Some(signature),
        });
    }
    Ok(builds)
}

/// Print what a staged plugin brings: its tools, resources, prompts and permissions.
fn describe(staged: &Staged, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let r = &staged.receipt;
    writeln!(
        out,
        "{} {} ({}), signed by {} ({}), from {}",
        staged.plugin, r.version, r.platform, r.signer, r.signer_key_id, r.source
    )?;
    if let Some(digest) = &r.digest {
        writeln!(out, "  digest: {digest}")?;
    }
    let list = |key: &str| staged.manifest[key].as_array().cloned().unwrap_or_default();
    for (key, name_key) in [("tools", "name"), ("resources", "uri"), ("prompts", "name")] {
        let items = list(key);
        if items.is_empty() {
            continue;
        }
        writeln!(out, "  {} {key}:", items.len())?;
        for item in items {
            let description = item["description"].as_str().unwrap_or("");
            let first = description.lines().next().unwrap_or("");
            writeln!(
                out,
                "    {}  {first}",
                item[name_key].as_str().unwrap_or("?")
            )?;
        }
    }
    let lines = install::permission_lines(&r.permissions);
    writeln!(
        out,
        "  runs sandboxed with the permissions it declares: {}",
        if lines.is_empty() {
            "none (only its own data directory)".to_owned()
        } else {
            String::new()
        }
    )?;
    for line in lines {
        writeln!(out, "    {line}")?;
    }
    for problem in &staged.permission_problems {
        writeln!(out, "    (not granted: {problem})")?;
    }
    Ok(())
}

/// Ask `question` on the terminal; `yes` answers it. Without a terminal to ask on (a script, a
/// pipe), the answer is no, and says so.
fn confirm(question: &str, yes: bool, out: &mut dyn std::io::Write) -> anyhow::Result<bool> {
    use std::io::IsTerminal as _;
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        writeln!(
            out,
            "{question} Not asked: standard input is not a terminal (pass --yes to accept what \
             is shown above)."
        )?;
        return Ok(false);
    }
    write!(out, "{question} [y/N] ")?;
    out.flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// `mcp-host add SOURCE`.
pub(crate) fn add(
    config: &Config,
    source: &str,
    yes: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let source = Source::parse(source);
    let staged = install::fetch(config, &source, &crate::host_options())?;
    if let Some(current) = install::installed(config)?.plugins.get(&staged.plugin) {
        anyhow::bail!(
            "{} is already installed (version {}, from {}): use `mcp-host update {}`",
            staged.plugin,
            current.version,
            current.source,
            staged.plugin
        );
    }
    describe(&staged, out)?;
    if !confirm(&format!("Install {}?", staged.plugin), yes, out)? {
        writeln!(out, "Not installed.")?;
        return Ok(ExitCode::FAILURE);
    }
    let plugin = staged.plugin.clone();
    let receipt = install::commit(config, staged, &install::Expect::Nothing)?;
    writeln!(
        out,
        "Installed {plugin} {} into {} (a running mcp-host picks it up)",
        receipt.version,
        config.installed_dir().display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `mcp-host remove NAME`.
pub(crate) fn remove(
    config: &Config,
    name: &str,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let receipt = install::remove(config, name)?;
    writeln!(out, "Removed {name} {} ({})", receipt.version, receipt.file)?;
    Ok(ExitCode::SUCCESS)
}

/// `mcp-host update [NAME]`: each (or one) installed plugin from where it came.
pub(crate) fn update(
    config: &Config,
    name: Option<&str>,
    yes: bool,
    allow_new_signer: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let receipts = install::installed(config)?;
    let names: Vec<String> = match name {
        Some(n) if receipts.plugins.contains_key(n) => vec![n.to_owned()],
        Some(n) => return Err(install::InstallError::NotInstalled(n.to_owned()).into()),
        None => receipts.plugins.keys().cloned().collect(),
    };
    let mut failed = false;
    for name in names {
        let source = Source::parse(&receipts.plugins[&name].source);
        failed |= !update_one(config, &name, &source, yes, allow_new_signer, out)?;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Update installed plugin `name` from `source`: whether it is up to date or updated (not refused
/// or declined).
fn update_one(
    config: &Config,
    name: &str,
    source: &Source,
    yes: bool,
    allow_new_signer: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<bool> {
    let staged = install::fetch(config, source, &crate::host_options())
        .with_context(|| format!("update {name}"))?;
    if staged.plugin != name {
        anyhow::bail!(
            "update {name}: {} now serves plugin {}, not {name}",
            source.describe(),
            staged.plugin
        );
    }
    let plan = install::plan_update(config, &staged)?;
    if plan.up_to_date {
        writeln!(out, "{name} {} is up to date", plan.current.version)?;
        return Ok(true);
    }
    writeln!(
        out,
        "Update {name} {} -> {}",
        plan.current.version, staged.receipt.version
    )?;
    if let Some((from, to)) = &plan.new_signer
        && !allow_new_signer
    {
        writeln!(
            out,
            "  refused: signed by {to}, not by {from} as installed (pass --allow-new-signer \
             if the publisher changed keys)"
        )?;
        return Ok(false);
    }
    show_plan(&plan, out)?;
    let question = if plan.permissions.iter().any(|p| p.starts_with('+')) {
        format!("Update {name} and grant it the added permissions?")
    } else {
        format!("Update {name}?")
    };
    if !confirm(&question, yes, out)? {
        writeln!(out, "Not updated.")?;
        return Ok(false);
    }
    let expect = install::Expect::Version(plan.current.library_digest.clone());
    let receipt = install::commit(config, staged, &expect)?;
    writeln!(out, "Updated {name} to {}", receipt.version)?;
    Ok(true)
}

/// Print an update's definition diff (against the pins) and permission diff.
fn show_plan(plan: &install::UpdatePlan, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    if plan.definitions.is_empty() {
        writeln!(out, "  definitions: unchanged")?;
    } else {
        writeln!(out, "  definitions (against the lock file's pins):")?;
        for line in plan
            .definitions
            .iter()
            .flat_map(mcp_host::registry::pins::Difference::report)
        {
            writeln!(out, "    {line}")?;
        }
    }
    if plan.permissions.is_empty() {
        writeln!(out, "  permissions: unchanged")?;
    } else {
        writeln!(
            out,
            "  permissions (+ granted from now on, - revoked from now on):"
        )?;
        for line in &plan.permissions {
            writeln!(out, "    {line}")?;
        }
    }
    Ok(())
}

/// `mcp-host list --installed`.
pub(crate) fn list_installed(
    config: &Config,
    json: bool,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<ExitCode> {
    let receipts = install::installed(config)?;
    if json {
        super::write_json(out, &receipts.plugins)?;
        return Ok(ExitCode::SUCCESS);
    }
    if receipts.plugins.is_empty() {
        writeln!(
            out,
            "(nothing installed in {})",
            config.installed_dir().display()
        )?;
    }
    for (name, r) in &receipts.plugins {
        writeln!(
            out,
            "{name} {}  signed by {} ({})  from {}{}",
            r.version,
            r.signer,
            r.signer_key_id,
            r.source,
            r.digest
                .as_deref()
                .map(|d| format!(" @{d}"))
                .unwrap_or_default()
        )?;
        let lines = install::permission_lines(&r.permissions);
        writeln!(
            out,
            "  permissions: {}",
            if lines.is_empty() {
                "none".to_owned()
            } else {
                lines.join(", ")
            }
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
