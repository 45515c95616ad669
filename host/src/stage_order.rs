//! The guard of the stage map: data flows one way through the library's stages, and a lower stage
//! never names a higher one. This test reads every `crate::…` path in `host/src` (in `use`
//! declarations, grouped or not, and inline) and fails on any that points up the order below.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The stages from the bottom up: each may name only the stages before it (and itself).
const ORDER: &[&str] = &[
    "config",
    "telemetry",
    "access",
    "policy",
    "plugins",
    "registry",
    "exec",
    "store",
    "host",
    "install",
    "protocol",
    "transport",
];

/// Every stage a piece of source names through `crate::` paths.
fn named_stages(source: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let mut rest = source;
    while let Some(at) = rest.find("crate::") {
        // `$crate::` (macros) is the crate's own path too, but never spans stages here.
        let after = &rest[at + "crate::".len()..];
        rest = after;
        if !after.starts_with('{') {
            named.insert(ident(after));
            continue;
        }
        // A group: `crate::{a::x, b::{y, z}}` names `a` and `b`.
        let mut depth = 0;
        let mut item_start = true;
        for (i, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        rest = &after[i..];
                        break;
                    }
                }
                ',' if depth == 1 => item_start = true,
                c if depth == 1 && item_start && (c.is_alphanumeric() || c == '_') => {
                    named.insert(ident(&after[i..]));
                    item_start = false;
                }
                _ => {}
            }
        }
    }
    named
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The stage a file of `src` belongs to: its first path component (a folder, or a file's stem).
fn stage_of(src: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let name = first.as_os_str().to_string_lossy();
    Some(name.trim_end_matches(".rs").to_owned())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `file: stage -> stage` import against [`ORDER`].
fn violations(src: &Path) -> Vec<String> {
    let rank = |stage: &str| ORDER.iter().position(|s| *s == stage);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let Some(stage) = stage_of(src, &file) else {
            continue;
        };
        let Some(own) = rank(&stage) else {
            continue; // lib.rs, main.rs and the binary's own modules sit above every stage
        };
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for named in named_stages(&text) {
            if rank(&named).is_some_and(|other| other > own) {
                found.push(format!(
                    "{}: {stage} -> {named}",
                    file.strip_prefix(src).unwrap_or(&file).display()
                ));
            }
        }
    }
    found
}

#[test]
fn no_stage_imports_a_higher_one() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "imports against the stage order {ORDER:?} (move what a lower stage needs down to it):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_guard_sees_plain_grouped_and_inline_paths() {
    let source = "use crate::config::Config;\nuse crate::{exec::CallState, registry::{Tool, Kind}};\n\
                  fn f() { crate::protocol::session::new_session_id(); }\n";
    let named: Vec<String> = named_stages(source).into_iter().collect();
    assert_eq!(named, ["config", "exec", "protocol", "registry"]);
    // And a lower stage naming a higher one is caught.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("plugins")).expect("mkdir");
    std::fs::write(dir.path().join("plugins/x.rs"), source).expect("write");
    let found = violations(dir.path());
    assert_eq!(
        found,
        [
            "plugins/x.rs: plugins -> exec",
            "plugins/x.rs: plugins -> protocol",
            "plugins/x.rs: plugins -> registry"
        ]
    );
}
