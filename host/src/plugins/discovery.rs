//! Discovery: which files in the tool directories are plugin candidates, in precedence order.
//!
//! Rules (the seed's, kept deterministic): directories in listed order; inside one, files in sorted
//! name order; only the platform's shared-library extension; no recursion; a leading `_` skips a file;
//! a directory entry with `files` takes only the libraries whose names match one of its globs. An
//! upstream server entry (`server:`) is one candidate of its own, in its place in the list.

use std::path::{Path, PathBuf};

use crate::config::{Isolation, ToolDir, UpstreamServer};

/// The shared-library extension of this platform.
pub const LIBRARY_EXTENSION: &str = std::env::consts::DLL_EXTENSION;

/// A plugin file found in a tool directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Position of its directory in `tool_dirs` (lower wins).
    pub dir_index: usize,
    /// The directory.
    pub dir: PathBuf,
    /// The directory's tool-name prefix.
    pub prefix: String,
    /// The directory's isolation, if it sets one.
    pub isolation: Option<Isolation>,
    /// The file (for an upstream server: its identity, `upstream:<name>`, as `dir` too).
    pub path: PathBuf,
    /// The upstream server this candidate is, when it is one (not a file).
    pub upstream: Option<UpstreamEntry>,
}

/// An upstream server entry of `tool_dirs`: its name and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamEntry {
    /// Its name (its plugin name everywhere else).
    pub name: String,
    /// How to reach it.
    pub server: UpstreamServer,
}

/// Whether `path` is a file discovery would take (extension and `_` rule; not whether it exists).
pub fn is_plugin_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('_')
        && !name.starts_with('.')
        && path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case(LIBRARY_EXTENSION))
}

/// A library's name: its file name without the platform's library prefix (`lib` on Unix) and
/// extension, as `files` globs of a tool directory match it (`mcp_time` for `libmcp_time.so`).
pub fn library_name(path: &Path) -> Option<&str> {
    let stem = path.file_stem()?.to_str()?;
    Some(
        stem.strip_prefix(std::env::consts::DLL_PREFIX)
            .filter(|s| !s.is_empty())
            .unwrap_or(stem),
    )
}

/// Scan the tool directories. A missing directory is skipped with a debug line (the default list
/// names a `tools` directory a deployment may not have created).
pub fn scan(dirs: &[ToolDir]) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (dir_index, dir) in dirs.iter().enumerate() {
        if let (Some(server), Some(name)) = (&dir.server, &dir.name) {
            out.push(Candidate {
                dir_index,
                dir: dir.path.clone(),
                prefix: dir.prefix.clone(),
                isolation: dir.isolation,
                path: dir.path.clone(),
                upstream: Some(UpstreamEntry {
                    name: name.clone(),
                    server: server.clone(),
                }),
            });
            continue;
        }
        let entries = match std::fs::read_dir(&dir.path) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::debug!(dir = %dir.path.display(), "tool directory not scanned: {e}");
                continue;
            }
        };
        // The globs were checked when the configuration loaded.
        let selection = dir.file_selection().ok().flatten();
        let selected = |p: &Path| {
            selection
                .as_ref()
                .is_none_or(|set| library_name(p).is_some_and(|name| set.is_match(name)))
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
            .map(|e| e.path())
            .filter(|p| is_plugin_file(p) && selected(p) && p.is_file())
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|path| Candidate {
            dir_index,
            dir: dir.path.clone(),
            prefix: dir.prefix.clone(),
            isolation: dir.isolation,
            path,
            upstream: None,
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_takes_sorted_libraries_only_skips_underscore_and_does_not_recurse() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        let lib = |n: &str| format!("{n}.{LIBRARY_EXTENSION}");
        for name in [lib("b"), lib("a"), lib("_hidden"), "notes.txt".into()] {
            std::fs::write(d.join(name), b"x").expect("write");
        }
        std::fs::create_dir(d.join("sub")).expect("mkdir");
        std::fs::write(d.join("sub").join(lib("deep")), b"x").expect("write");
        let found = scan(&[ToolDir {
            path: d.to_path_buf(),
            ..ToolDir::default()
        }]);
        let names: Vec<_> = found
            .iter()
            .map(|c| c.path.file_name().and_then(|n| n.to_str()).unwrap_or(""))
            .collect();
        assert_eq!(names, vec![lib("a"), lib("b")]);
    }

    #[test]
    fn files_globs_select_libraries_by_name_without_prefix_or_extension() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let d = tmp.path();
        let file = |n: &str| format!("{}{n}.{LIBRARY_EXTENSION}", std::env::consts::DLL_PREFIX);
        for name in [
            "mcp_time",
            "mcp_text",
            "mcp_plugin_sdk_macros",
            "fixture_basic",
        ] {
            std::fs::write(d.join(file(name)), b"x").expect("write");
        }
        let found = scan(&[ToolDir {
            path: d.to_path_buf(),
            files: vec!["mcp_t*".into(), "fixture_basic".into()],
            ..ToolDir::default()
        }]);
        let names: Vec<_> = found.iter().filter_map(|c| library_name(&c.path)).collect();
        assert_eq!(names, ["fixture_basic", "mcp_text", "mcp_time"]);
    }
}
