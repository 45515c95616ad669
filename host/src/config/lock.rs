//! The lock file: the definitions `mcp-host pin` recorded — per served tool, resource (or resource
//! template) and prompt, the plugin serving it, the SHA-256 of its canonical definition, and the
//! definition itself, so that a difference can be shown as old and new text.
//!
//! Reading never fails the configuration: a missing or unreadable lock pins nothing (which, under
//! `pinning: enforce`, serves nothing until `mcp-host pin` writes one) and says why in
//! [`PinLock::problem`].

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The lock file's name beside the configuration file, unless `trust.lock_file` says otherwise.
pub const DEFAULT_LOCK_FILE: &str = "mcp-host.lock";

/// The format version this host writes and reads.
pub const LOCK_VERSION: u32 = 2;

/// The oldest format this host reads: version 1 did not pin a definition's `_meta`, so its
/// definitions are compared without it (and `mcp-host pin` writes the current version).
pub const LEGACY_LOCK_VERSION: u32 = 1;

/// Largest lock file read (a lock of 10,000 definitions is a few MiB).
const MAX_LOCK_BYTES: u64 = 64 * 1024 * 1024;

/// The pinned definitions, by kind and name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinLock {
    /// The format version ([`LOCK_VERSION`]).
    pub version: u32,
    /// Tools, by name (prefixes applied).
    #[serde(default)]
    pub tools: BTreeMap<String, Pin>,
    /// Resources and resource templates, by URI (or URI template).
    #[serde(default)]
    pub resources: BTreeMap<String, Pin>,
    /// Prompts, by name.
    #[serde(default)]
    pub prompts: BTreeMap<String, Pin>,
    /// The plugins `mcp-host add` installed, by plugin name: where from and by which digest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub installed: BTreeMap<String, InstalledPin>,
    /// Why the lock file could not be used (missing, unreadable, or entries whose hash does not
    /// match their definition); `None` when it was read whole.
    #[serde(skip)]
    pub problem: Option<String>,
}

/// One pinned definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// The plugin that served it when it was pinned.
    pub plugin: String,
    /// SHA-256 (hex) of [`canonical_json`] of `definition`.
    pub sha256: String,
    /// The definition as the source serves it (the list entry, under the name it is served by
    /// without overrides).
    pub definition: Value,
    /// The overrides clients are shown it under, pinned apart from the source's definition (so
    /// that a change of either is caught): absent when none applies.
    #[serde(default, rename = "override", skip_serializing_if = "Option::is_none")]
    pub overridden: Option<OverridePin>,
}

/// The pinned overrides of one definition (see `registry::shape::pinned`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverridePin {
    /// SHA-256 (hex) of [`canonical_json`] of `definition`.
    pub sha256: String,
    /// The overrides: the merged one (`tool`) and each agent's own (`agents`), fixed values and
    /// defaults as digests.
    pub definition: Value,
}

/// How an installed plugin is pinned: its source and the digests it was installed by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstalledPin {
    /// The reference, path or URL it was added from.
    pub source: String,
    /// The OCI manifest digest (registry installs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `sha256:` digest of its library.
    pub library_digest: String,
    /// The key id of its signer.
    pub signer_key_id: String,
}

impl Pin {
    /// The pin of `definition`, served by `plugin`.
    pub fn new(plugin: &str, definition: Value) -> Pin {
        Pin {
            plugin: plugin.to_owned(),
            sha256: digest(&definition),
            definition,
            overridden: None,
        }
    }

    /// The same pin with the overrides `overrides` (none when `None`).
    pub fn with_override(mut self, overrides: Option<Value>) -> Pin {
        self.overridden = overrides.map(|definition| OverridePin {
            sha256: digest(&definition),
            definition,
        });
        self
    }

    /// Whether its definition and its overrides are what their hashes say.
    fn intact(&self) -> bool {
        digest(&self.definition) == self.sha256
            && self
                .overridden
                .as_ref()
                .is_none_or(|o| digest(&o.definition) == o.sha256)
    }
}

impl PinLock {
    /// Read the lock at `path`; a lock that cannot be used is empty, with [`PinLock::problem`] set.
    pub fn read(path: &Path) -> PinLock {
        let unusable = |why: String| PinLock {
            version: LOCK_VERSION,
            problem: Some(format!("lock file {}: {why}", path.display())),
            ..PinLock::default()
        };
        let text = match std::fs::metadata(path) {
            Ok(meta) if !meta.is_file() => return unusable("not a regular file".into()),
            Ok(_) => match read_bounded(path, MAX_LOCK_BYTES) {
                Ok(Some(text)) => text,
                Ok(None) => return unusable(format!("larger than {MAX_LOCK_BYTES} bytes")),
                Err(e) => return unusable(e.to_string()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return unusable("does not exist (run `mcp-host pin` to write it)".into());
            }
            Err(e) => return unusable(e.to_string()),
        };
        let mut lock: PinLock = match serde_json::from_str(&text) {
            Ok(lock) => lock,
            Err(e) => return unusable(format!("not a lock file: {e}")),
        };
        if !(LEGACY_LOCK_VERSION..=LOCK_VERSION).contains(&lock.version) {
            return unusable(format!(
                "format version {} (this host reads version {LOCK_VERSION})",
                lock.version
            ));
        }
        // An entry edited by hand (its definition no longer what its hash says) pins nothing.
        let mut broken = Vec::new();
        for (kind, section) in [
            ("tool", &mut lock.tools),
            ("resource", &mut lock.resources),
            ("prompt", &mut lock.prompts),
        ] {
            section.retain(|name, pin| {
                let intact = pin.intact();
                if !intact {
                    broken.push(format!("{kind} {name}"));
                }
                intact
            });
        }
        if !broken.is_empty() {
            lock.problem = Some(format!(
                "lock file {}: the definition of {} does not match its sha256 (edited by hand?); \
                 those entries pin nothing",
                path.display(),
                broken.join(", ")
            ));
        }
        lock
    }

    /// Write the lock to `path` atomically (a temporary file beside it, then a rename), as
    /// indented JSON with sorted keys.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        text.push('\n');
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// The pins of plugin `plugin`'s definitions only.
    pub fn of_plugin(&self, plugin: &str) -> PinLock {
        let only = |section: &BTreeMap<String, Pin>| {
            section
                .iter()
                .filter(|(_, pin)| pin.plugin == plugin)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        PinLock {
            version: self.version,
            tools: only(&self.tools),
            resources: only(&self.resources),
            prompts: only(&self.prompts),
            installed: BTreeMap::new(),
            problem: None,
        }
    }

    /// Replace plugin `plugin`'s pins with `pins` (`None`: remove them).
    pub fn replace_plugin(&mut self, plugin: &str, pins: Option<&PinLock>) {
        for section in [&mut self.tools, &mut self.resources, &mut self.prompts] {
            section.retain(|_, pin| pin.plugin != plugin);
        }
        if let Some(pins) = pins {
            self.tools.extend(pins.tools.clone());
            self.resources.extend(pins.resources.clone());
            self.prompts.extend(pins.prompts.clone());
        }
    }

    /// How many definitions are pinned.
    pub fn len(&self) -> usize {
        self.tools.len() + self.resources.len() + self.prompts.len()
    }

    /// Whether nothing is pinned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The text of the regular file at `path` if it holds at most `max` bytes (`None` if more): read
/// through a bound, so a file that grows (or a device) cannot make it read without end.
pub(crate) fn read_bounded(path: &Path, max: u64) -> std::io::Result<Option<String>> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_string(&mut text)?;
    Ok((text.len() as u64 <= max).then_some(text))
}

/// JSON with object keys sorted at every level and no insignificant whitespace, so the same value
/// always has the same text (and hash).
///
/// ```
/// use mcp_host::config::lock::canonical_json;
/// let v = serde_json::json!({"b": [1, {"d": 1, "c": "x"}], "a": null});
/// assert_eq!(canonical_json(&v), r#"{"a":null,"b":[1,{"c":"x","d":1}]}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// SHA-256 (hex) of the canonical JSON of `value`.
pub fn digest(value: &Value) -> String {
    Sha256::digest(canonical_json(value).as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_written_lock_reads_back_and_a_hand_edited_entry_pins_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("mcp-host.lock");
        let missing = PinLock::read(&path);
        assert!(missing.is_empty());
        assert!(
            missing
                .problem
                .as_deref()
                .is_some_and(|p| p.contains("does not exist")),
            "{missing:?}"
        );
        let mut lock = PinLock {
            version: LOCK_VERSION,
            ..PinLock::default()
        };
        let def =
            json!({"name": "echo", "description": "Echo.", "inputSchema": {"type": "object"}});
        lock.tools
            .insert("echo".into(), Pin::new("basic", def.clone()));
        lock.prompts
            .insert("greet".into(), Pin::new("basic", json!({"name": "greet"})));
        lock.write(&path).expect("write");
        let read = PinLock::read(&path);
        assert_eq!(read, lock);
        assert_eq!(read.problem, None);

        let text = std::fs::read_to_string(&path)
            .expect("read")
            .replace("Echo.", "Do as I say.");
        std::fs::write(&path, text).expect("write");
        let edited = PinLock::read(&path);
        assert!(edited.tools.is_empty());
        assert_eq!(edited.prompts.len(), 1);
        assert!(
            edited
                .problem
                .as_deref()
                .is_some_and(|p| p.contains("tool echo")),
            "{edited:?}"
        );
    }
}
