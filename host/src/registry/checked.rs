//! Input schemas known to pass the meta-schema check, remembered across runs by content hash.
//!
//! Every tool's input schema is checked against the JSON Schema 2020-12 meta-schema before the
//! tool is served. The meta-schema's validator is generated at compile time (`jsonschema`'s
//! `macros` feature; building it at run time cost 3.1M instructions, about 1.3 ms, of every start
//! that met a new schema), so checking one schema costs about 12k instructions; the same plugins
//! start with the same schemas every time, and a host serving thousands of tools would still pay
//! that per tool. So a schema that passed once is remembered by the SHA-256 of its JSON text (which
//! the registry writes for the listing anyway), in a file beside the probe cache (`schemas`), and
//! later starts skip the check for known schemas. The file is keyed by the host's version and
//! target: another host build checks everything again. A schema that was never checked, or fails,
//! is checked (and logged) as before. Losing the file only costs the check again.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use mcp_plugin_sdk::validation::InputValidator;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The most digests the file keeps (the oldest go first): 65 bytes a line.
const MAX_ENTRIES: usize = 20_000;

type Digest = [u8; 32];

/// The schemas known to pass, and where they are kept.
#[derive(Debug)]
pub(crate) struct SchemaChecks {
    file: Option<PathBuf>,
    /// Digests in the order they were first seen (oldest first), for the file.
    order: Vec<Digest>,
    known: HashSet<Digest>,
    /// Whether a digest was learnt since the file was last read or written.
    added: bool,
}

/// Run `f` with the known schemas held in `slot` (a host's, kept across its registry builds, so
/// a rebuild after a reload checks only new schemas) for the cache file beside `probe_cache` (in
/// memory only without one), and save what it learnt.
pub(crate) fn with_checks<R>(
    slot: &Mutex<Option<SchemaChecks>>,
    probe_cache: Option<&Path>,
    f: impl FnOnce(&mut SchemaChecks) -> R,
) -> R {
    let file = probe_cache.map(|p| p.with_file_name("schemas"));
    let mut guard = slot.lock().unwrap_or_else(PoisonError::into_inner);
    let checks = match guard.take() {
        Some(checks) if checks.file == file => checks,
        _ => SchemaChecks::open(file),
    };
    let checks = guard.insert(checks);
    let out = f(checks);
    checks.save();
    out
}

/// The first line of the file: what produced the verdicts.
fn header() -> String {
    format!("mcp-host-schemas\t{}", crate::plugins::probe::host_build())
}

impl SchemaChecks {
    /// The digests in `file` (none when it is absent, unreadable or from another host build).
    fn open(file: Option<PathBuf>) -> SchemaChecks {
        let mut order = Vec::new();
        if let Some(text) = file
            .as_deref()
            .and_then(|f| std::fs::read_to_string(f).ok())
        {
            let mut lines = text.lines();
            if lines.next() == Some(header().as_str()) {
                order.extend(lines.filter_map(parse_digest));
            }
        }
        SchemaChecks {
            file,
            known: order.iter().copied().collect(),
            order,
            added: false,
        }
    }

    /// [`InputValidator::check_schema`], skipped for a schema known to pass; `text` is `schema`
    /// as JSON text (what the digest is of).
    pub(crate) fn check(&mut self, schema: &Value, text: &str) -> Result<(), String> {
        let digest: Digest = Sha256::digest(text.as_bytes()).into();
        if self.known.contains(&digest) {
            return Ok(());
        }
        InputValidator::check_schema(schema)?;
        self.known.insert(digest);
        self.order.push(digest);
        self.added = true;
        Ok(())
    }

    /// Write the file back when it learnt something (atomically; best effort).
    fn save(&mut self) {
        if !self.added {
            return;
        }
        self.added = false;
        let Some(file) = &self.file else { return };
        let Some(dir) = file.parent() else { return };
        if self.order.len() > MAX_ENTRIES {
            let drop = self.order.len() - MAX_ENTRIES;
            for d in self.order.drain(..drop) {
                self.known.remove(&d);
            }
        }
        let mut text = header();
        text.push('\n');
        for digest in &self.order {
            for byte in digest {
                text.push_str(&format!("{byte:02x}"));
            }
            text.push('\n');
        }
        let written = std::fs::create_dir_all(dir)
            .and_then(|()| crate::plugins::probe::write_atomically(file, &text));
        if let Err(e) = written {
            tracing::debug!("checked schemas not saved to {}: {e}", file.display());
        }
    }
}

fn parse_digest(line: &str) -> Option<Digest> {
    let line = line.trim();
    if line.len() != 64 || !line.is_ascii() {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&line[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(digest)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Check `schema` as the registry does, with its JSON text.
    fn check(checks: &mut SchemaChecks, schema: &Value) -> Result<(), String> {
        checks.check(schema, &schema.to_string())
    }

    #[test]
    fn each_holder_keeps_its_own_known_schemas_across_builds() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let digest: Digest = Sha256::digest(schema.to_string().as_bytes()).into();
        let (first_host, second_host) = (Mutex::new(None), Mutex::new(None));
        with_checks(&first_host, None, |checks| check(checks, &schema)).unwrap();
        // A later build of the same host knows it; another host in the process does not.
        assert!(with_checks(&first_host, None, |checks| checks
            .known
            .contains(&digest)));
        assert!(!with_checks(&second_host, None, |checks| checks
            .known
            .contains(&digest)));
    }

    fn digest_of(schema: &Value) -> Digest {
        Sha256::digest(schema.to_string().as_bytes()).into()
    }

    #[test]
    fn a_schema_that_passed_is_remembered_in_the_file_and_a_bad_one_never_is() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("schemas");
        let good = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let bad = json!({"type": "object", "minProperties": -1});
        let mut checks = SchemaChecks::open(Some(file.clone()));
        assert!(check(&mut checks, &good).is_ok());
        assert!(check(&mut checks, &bad).is_err());
        checks.save();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");

        let again = SchemaChecks::open(Some(file.clone()));
        assert!(again.known.contains(&digest_of(&good)));
        let mut again = again;
        assert!(
            check(&mut again, &bad).is_err(),
            "a failing schema is checked every time"
        );

        // Another host build's file is ignored.
        std::fs::write(&file, text.replacen("mcp-host-schemas", "other", 1)).unwrap();
        assert!(SchemaChecks::open(Some(file)).known.is_empty());
    }

    #[test]
    fn schemas_the_2020_12_meta_schema_refuses_are_refused_and_valid_ones_pass() {
        let mut checks = SchemaChecks::open(None);
        let refused = [
            json!({"type": "object", "properties": {"a": {"type": "strin"}}}),
            json!({"type": "object", "properties": []}),
            json!({"type": "object", "required": "a"}),
            json!({"type": "object", "properties": {"a": {"items": 3}}}),
            json!({"type": "object", "$defs": {"x": {"enum": "no"}}}),
            json!({"type": "object", "additionalProperties": {"maxLength": 1.5}}),
        ];
        for schema in &refused {
            assert!(check(&mut checks, schema).is_err(), "{schema} passed");
        }
        let passed = [
            json!({"type": "object"}),
            json!({"type": "object", "properties": {"a": {"type": ["string", "null"], "pattern": "^x"}},
                   "required": ["a"], "additionalProperties": false}),
            json!({"type": "object", "$defs": {"n": {"type": "integer", "minimum": 0}},
                   "properties": {"n": {"$ref": "#/$defs/n"}, "m": {"oneOf": [{"const": 1}, true]}}}),
        ];
        for schema in &passed {
            assert!(check(&mut checks, schema).is_ok(), "{schema} refused");
        }
    }

    #[test]
    fn the_file_keeps_the_newest_entries_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("schemas");
        let mut checks = SchemaChecks::open(Some(file.clone()));
        checks.order = (0..MAX_ENTRIES as u32 + 5)
            .map(|i| {
                let mut d = [0u8; 32];
                d[..4].copy_from_slice(&i.to_be_bytes());
                d
            })
            .collect();
        checks.known = checks.order.iter().copied().collect();
        checks.added = true;
        checks.save();
        let reread = SchemaChecks::open(Some(file));
        assert_eq!(reread.order.len(), MAX_ENTRIES);
        assert_eq!(reread.order[0][..4], 5u32.to_be_bytes());
    }
}
