//! `mcp-host import --write CONFIG`: imported entries appended to a configuration file as text,
//! so that its comments, order and layout stay as they are — after the last item of its
//! top-level `tool_dirs` list, or in a new `tool_dirs` at its end. An entry whose name the file
//! already has is left out; the result is read back before it replaces the file.

use std::path::Path;

use serde_json::Value;

use super::{Import, ImportError};

/// What `--write` did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The names of the entries written.
    pub written: Vec<String>,
    /// The names the file already had: not written again.
    pub present: Vec<String>,
}

/// Append `import`'s entries to the configuration file at `path` (made when missing).
pub fn append_to_config(path: &Path, import: &Import) -> Result<Appended, ImportError> {
    let io = |reason| ImportError::Io {
        path: path.to_owned(),
        reason,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(io(e)),
    };
    let config = |message: String| ImportError::Config {
        path: path.to_owned(),
        message,
    };
    let before = tool_dirs(&text).map_err(&config)?;
    let names: Vec<&str> = before
        .iter()
        .filter_map(|e| e.get("name").and_then(Value::as_str))
        .collect();
    let (present, fresh): (Vec<_>, Vec<_>) = import
        .entries
        .iter()
        .cloned()
        .partition(|e| names.contains(&e.name.as_str()));
    let appended = Appended {
        written: fresh.iter().map(|e| e.name.clone()).collect(),
        present: present.into_iter().map(|e| e.name).collect(),
    };
    if fresh.is_empty() {
        return Ok(appended);
    }
    let fresh = Import {
        entries: fresh,
        ..Import::default()
    };
    let updated = insert(&text, &fresh).map_err(&config)?;
    let after = tool_dirs(&updated).map_err(&config)?;
    if after.len() != before.len() + fresh.entries.len() {
        return Err(config(
            "the entries could not be added to its `tool_dirs` as it is written: add them by \
             hand (printed above)"
                .into(),
        ));
    }
    replace(path, &updated).map_err(io)?;
    Ok(appended)
}

/// The items of the top-level `tool_dirs` of the YAML `text` (none when it has none).
fn tool_dirs(text: &str) -> Result<Vec<Value>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let value: Value = serde_saphyr::from_str(text).map_err(|e| format!("not valid YAML: {e}"))?;
    match value.get("tool_dirs") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(_) => Err("`tool_dirs` is not a list".into()),
    }
}

/// `text` with `import`'s entries after the last item of its top-level `tool_dirs` block, or in
/// a new `tool_dirs` at its end.
fn insert(text: &str, import: &Import) -> Result<String, String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let Some(key) = lines.iter().position(|l| l.starts_with("tool_dirs:")) else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("tool_dirs:\n");
        out.push_str(&import.entries_yaml("  "));
        return Ok(out);
    };
    let inline = lines[key]["tool_dirs:".len()..].trim();
    if !inline.is_empty() && !inline.starts_with('#') {
        return Err(
            "`tool_dirs` is written on one line (flow style): add the entries to it by hand \
             (printed above)"
                .into(),
        );
    }
    // The block: indented lines and `-` items, with blank lines and comments between them.
    let (mut last, mut indent) = (key, None);
    for (i, line) in lines.iter().enumerate().skip(key + 1) {
        let trimmed = line.trim_start();
        if trimmed.trim().is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if !(line.starts_with([' ', '\t']) || line.starts_with('-')) {
            break;
        }
        last = i;
        if indent.is_none() && trimmed.starts_with('-') {
            indent = Some(line.len() - trimmed.len());
        }
    }
    let mut out: String = lines[..=last].concat();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&import.entries_yaml(&" ".repeat(indent.unwrap_or(2))));
    out.push_str(&lines[last + 1..].concat());
    Ok(out)
}

/// Write `text` to `path` through a file beside it renamed over it.
fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = file.as_file().set_permissions(meta.permissions());
    }
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamServer;
    use crate::config::import::Entry;

    fn one(name: &str) -> Import {
        Import {
            entries: vec![Entry {
                name: name.into(),
                server: UpstreamServer {
                    command: vec!["npx".into(), "-y".into(), "pkg".into()],
                    ..UpstreamServer::default()
                },
            }],
            ..Import::default()
        }
    }

    #[test]
    fn entries_go_after_the_last_item_and_keep_the_rest() {
        let text = "# mine\ntool_dirs:\n  - tools   # the plugins\n\n  - path: more\n    prefix: m_\n\n# later\nlisten: 8080\n";
        let out = insert(text, &one("x")).unwrap();
        assert!(out.starts_with("# mine\ntool_dirs:\n  - tools   # the plugins\n"));
        assert!(out.ends_with("\n# later\nlisten: 8080\n"), "{out}");
        assert_eq!(tool_dirs(&out).unwrap().len(), 3, "{out}");
        assert_eq!(tool_dirs(&out).unwrap()[2]["name"], "x");
        let flush = insert("tool_dirs:\n- a\n", &one("x")).unwrap();
        assert_eq!(tool_dirs(&flush).unwrap().len(), 2, "{flush}");
        let none = insert("listen: 8080", &one("x")).unwrap();
        assert_eq!(tool_dirs(&none).unwrap().len(), 1, "{none}");
        assert!(insert("tool_dirs: [a]\n", &one("x")).is_err());
    }
}
