//! Discovery: which files in the tool directories are plugin candidates, in precedence order.
//!
//! Rules (the seed's, kept deterministic): directories in listed order; inside one, files in sorted
//! name order; only the platform's shared-library extension; no recursion; a leading `_` skips a file.

use std::path::{Path, PathBuf};

use crate::config::ToolDir;

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
    /// The file.
    pub path: PathBuf,
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

/// Scan the tool directories. A missing directory is skipped with a debug line (the default list
/// names a `tools` directory a deployment may not have created).
pub fn scan(dirs: &[ToolDir]) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (dir_index, dir) in dirs.iter().enumerate() {
        let entries = match std::fs::read_dir(&dir.path) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::debug!(dir = %dir.path.display(), "tool directory not scanned: {e}");
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
            .map(|e| e.path())
            .filter(|p| is_plugin_file(p) && p.is_file())
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|path| Candidate {
            dir_index,
            dir: dir.path.clone(),
            prefix: dir.prefix.clone(),
            path,
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
}
