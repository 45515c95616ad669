//! The documentation holds together: every relative link in `README.md`, `CHANGELOG.md` and the
//! manual under `docs/` points at a file of this repository that exists, and a `#fragment` into a
//! Markdown file names one of its headings (as GitHub makes anchors of them). The README keeps its
//! shape: the two set-up commands first (the `first_run` test runs the first one as a new user
//! would), and short enough to be a front door. Every page of the manual is in its table of contents.
//!
//! Links inside fenced code blocks and code spans are text, not links, and are not checked; links
//! with a scheme (`https:`, `mailto:`) are not followed.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use mcp_host_tests::workspace_root;

/// The commands at the top of the README, as `first_run` runs the first one.
const SET_UP_COMMANDS: [&str; 2] = [
    "cargo build --release && ./target/release/mcp-host serve",
    "cargo test --workspace --no-fail-fast",
];

/// The README is a front door, not a manual.
const README_MAX_LINES: usize = 300;

/// One Markdown file, read into what the checks need.
#[derive(Debug, Default)]
struct Page {
    /// The anchors of its headings, as GitHub makes them.
    anchors: BTreeSet<String>,
    /// Link destinations outside code, with the line each is on.
    links: Vec<(usize, String)>,
    /// The fenced code blocks: info string and lines.
    fences: Vec<(String, Vec<String>)>,
    /// Line number of the first heading of level 2 or deeper, if any.
    first_section: Option<usize>,
}

/// An open fenced code block: its fence character, the fence's length, its info string and lines.
struct Fence {
    marker: char,
    len: usize,
    info: String,
    lines: Vec<String>,
}

/// The fence a line opens or closes: its character, length and info string.
fn fence_of(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let marker = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = rest.chars().take_while(|c| *c == marker).count();
    if len < 3 {
        return None;
    }
    let info = rest[len..].trim();
    // A backtick fence's info string may not contain a backtick.
    if marker == '`' && info.contains('`') {
        return None;
    }
    Some((marker, len, info))
}

/// GitHub's anchor for a heading's text: lower case; letters, digits, `_`, `-` and spaces kept,
/// everything else dropped; spaces become `-`. (Inline code keeps its text, a link its label.)
fn slug(heading: &str) -> String {
    let text = strip_links(&heading.replace('`', ""));
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `[label](dest)` → `label`.
fn strip_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|i| open + i) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|i| close + i) else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The text with its code spans (a run of n backticks up to the next run of exactly n) blanked
/// out, keeping line breaks so line numbers stay right. Unmatched backticks are literal.
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let run_at = |i: usize| chars[i..].iter().take_while(|c| **c == '`').count();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = run_at(i);
        let mut j = i + n;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = run_at(j);
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for c in &mut out[i..j + n] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = j + n;
            }
            None => i += n,
        }
    }
    out.into_iter().collect()
}

/// The destinations of inline links and images (`[text](dest "title")`) and of reference
/// definitions (`[label]: dest`) in `text`, with their line numbers (`first_line` is the line of
/// the text's first line).
fn link_destinations(text: &str, first_line: usize) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some(end) = trimmed.find("]:")
            && !trimmed[..end].contains("](")
        {
            let dest = trimmed[end + 2..].split_whitespace().next().unwrap_or("");
            found.push((first_line + n, dest.trim_matches(['<', '>']).to_owned()));
        }
    }
    let mut line = first_line;
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        line += rest[..at].matches('\n').count();
        let after = &rest[at + 2..];
        let dest = if let Some(inner) = after.strip_prefix('<') {
            inner.split('>').next().unwrap_or("")
        } else {
            // Up to the closing parenthesis (balanced) or the first space (a title follows).
            let mut depth = 0usize;
            let mut end = after.len();
            for (k, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = k;
                        break;
                    }
                    ')' => depth -= 1,
                    c if c.is_whitespace() => {
                        end = k;
                        break;
                    }
                    _ => {}
                }
            }
            &after[..end]
        };
        found.push((line, dest.to_owned()));
        rest = after;
    }
    found
}

/// Read one Markdown text: headings outside code blocks, links outside code, fenced blocks.
fn parse(text: &str) -> Page {
    let mut page = Page::default();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence: Option<Fence> = None;
    // Prose paragraphs (between blank lines and fences), each with its first line number.
    let mut paragraph = String::new();
    let mut paragraph_line = 1;
    let flush = |paragraph: &mut String, first: usize, page: &mut Page| {
        if !paragraph.is_empty() {
            let prose = without_code_spans(paragraph);
            page.links.extend(link_destinations(&prose, first));
            paragraph.clear();
        }
    };
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if let Some(open) = &mut fence {
            match fence_of(line) {
                Some((marker, len, info))
                    if marker == open.marker && len >= open.len && info.is_empty() =>
                {
                    let done = fence.take().unwrap();
                    page.fences.push((done.info, done.lines));
                }
                _ => open.lines.push(line.to_owned()),
            }
            continue;
        }
        if let Some((marker, len, info)) = fence_of(line) {
            flush(&mut paragraph, paragraph_line, &mut page);
            fence = Some(Fence {
                marker,
                len,
                info: info.to_owned(),
                lines: Vec::new(),
            });
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&level) && line[level..].starts_with(' ') {
            flush(&mut paragraph, paragraph_line, &mut page);
            if level >= 2 && page.first_section.is_none() {
                page.first_section = Some(number);
            }
            let title = line[level..].trim().trim_end_matches('#').trim();
            let base = slug(title);
            let seen = counts.entry(base.clone()).or_insert(0);
            let anchor = if *seen == 0 {
                base.clone()
            } else {
                format!("{base}-{seen}")
            };
            *seen += 1;
            page.anchors.insert(anchor);
            // A heading's own links count too.
            page.links
                .extend(link_destinations(&without_code_spans(line), number));
            continue;
        }
        if line.trim().is_empty() {
            flush(&mut paragraph, paragraph_line, &mut page);
            continue;
        }
        if paragraph.is_empty() {
            paragraph_line = number;
        }
        paragraph.push_str(line);
        paragraph.push('\n');
    }
    flush(&mut paragraph, paragraph_line, &mut page);
    if let Some(open) = fence {
        page.fences.push((open.info, open.lines));
    }
    page
}

/// `path` with `.` and `..` taken out, without touching the file system; `None` when it climbs
/// above where it starts (out of the repository).
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// The page at `path` (relative to `root`), read and parsed once.
fn load<'a>(pages: &'a mut BTreeMap<PathBuf, Page>, root: &Path, path: &Path) -> Option<&'a Page> {
    if !pages.contains_key(path) {
        let text = std::fs::read_to_string(root.join(path)).ok()?;
        pages.insert(path.to_owned(), parse(&text));
    }
    pages.get(path)
}

/// Every broken relative link of the Markdown files `files` (paths relative to `root`), as
/// `file:line: link: why`.
fn broken_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut pages: BTreeMap<PathBuf, Page> = BTreeMap::new();
    let mut broken = Vec::new();
    for file in files {
        let links = load(&mut pages, root, file)
            .map(|p| p.links.clone())
            .unwrap_or_default();
        for (line, link) in links {
            let at = format!("{}:{line}: ({link})", file.display());
            if link.is_empty() {
                broken.push(format!("{at}: empty link"));
                continue;
            }
            // A scheme (`https:`, `mailto:`): not ours to check.
            if link
                .split_once(':')
                .is_some_and(|(scheme, _)| !scheme.is_empty() && !scheme.contains(['/', '#']))
            {
                continue;
            }
            let (target, fragment) = match link.split_once('#') {
                Some((t, f)) => (t, Some(f)),
                None => (link.as_str(), None),
            };
            if target.starts_with('/') {
                broken.push(format!("{at}: an absolute path; link relative to the file"));
                continue;
            }
            let resolved = if target.is_empty() {
                Some(file.clone())
            } else {
                normalise(&file.parent().unwrap_or(Path::new("")).join(target))
            };
            let Some(resolved) = resolved else {
                broken.push(format!("{at}: points outside the repository"));
                continue;
            };
            if !root.join(&resolved).exists() {
                broken.push(format!("{at}: {} does not exist", resolved.display()));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            if resolved.extension().is_none_or(|e| e != "md") {
                continue; // `#L10` into source: GitHub's, not a heading.
            }
            let Some(target_page) = load(&mut pages, root, &resolved) else {
                broken.push(format!("{at}: {} cannot be read", resolved.display()));
                continue;
            };
            if !target_page.anchors.contains(fragment) {
                broken.push(format!(
                    "{at}: {} has no heading with the anchor #{fragment}",
                    resolved.display()
                ));
            }
        }
    }
    broken
}

/// `README.md`, `CHANGELOG.md` and every Markdown file under `docs/`, relative to `root`.
fn documentation(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("CHANGELOG.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(&dir))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        entries.sort();
        for name in entries {
            let path = dir.join(&name);
            if root.join(&path).is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn every_relative_link_in_the_readme_and_the_manual_resolves() {
    let root = workspace_root();
    let files = documentation(&root);
    assert!(
        files.len() > 10,
        "the manual under docs/ is missing: {files:?}"
    );
    let broken = broken_links(&root, &files);
    assert!(
        broken.is_empty(),
        "broken links in the documentation:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_readme_opens_with_the_two_set_up_commands_first_run_runs() {
    let text = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let page = parse(&text);
    let (info, lines) = page.fences.first().expect("a code block in the README");
    assert_eq!(
        info, "sh",
        "the README's first code block is the set-up commands"
    );
    let commands: Vec<&str> = lines
        .iter()
        .map(|l| l.split("  #").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(commands, SET_UP_COMMANDS, "the README's set-up commands");
    let block_line = text.lines().position(|l| l.starts_with("```")).unwrap() + 1;
    assert!(
        page.first_section.is_none_or(|s| block_line < s),
        "the set-up commands come before the README's first section"
    );
}

#[test]
fn the_readme_stays_a_front_door() {
    let text = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines (at most {README_MAX_LINES}): reference material belongs in docs/"
    );
}

#[test]
fn every_page_of_the_manual_is_in_its_summary() {
    let root = workspace_root();
    let summary = std::fs::read_to_string(root.join("docs/SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = parse(&summary)
        .links
        .into_iter()
        .filter_map(|(_, link)| normalise(&Path::new("docs").join(link)))
        .collect();
    let missing: Vec<PathBuf> = documentation(&root)
        .into_iter()
        .filter(|f| f.starts_with("docs") && *f != Path::new("docs/SUMMARY.md"))
        .filter(|f| !listed.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "pages missing from docs/SUMMARY.md: {missing:?}"
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug("Long-running tools: tasks"),
        "long-running-tools-tasks"
    );
    assert_eq!(slug("`tool_dirs`"), "tool_dirs");
    assert_eq!(
        slug("Trust: signed plugins and pinned definitions"),
        "trust-signed-plugins-and-pinned-definitions"
    );
    assert_eq!(
        slug("What 0.85× over HTTP needs"),
        "what-085-over-http-needs"
    );
    assert_eq!(slug("See [Tasks](serving.md#tasks)"), "see-tasks");
    let page = parse("# A\n## Same\n## Same\n```sh\n# not a heading\n```\n");
    let anchors: Vec<&str> = page.anchors.iter().map(String::as_str).collect();
    assert_eq!(anchors, ["a", "same", "same-1"]);
}

#[test]
fn the_check_finds_a_missing_file_and_a_missing_anchor_and_ignores_code() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs/sub")).unwrap();
    std::fs::write(
        root.join("README.md"),
        "# Title\n\nSee [the page](docs/sub/page.md#real-heading), [gone](docs/gone.md),\n\
         [a wrong anchor](docs/sub/page.md#no-such-heading), [here](#title),\n\
         [the web](https://example.com/x.md) and `[code](nowhere.md)`.\n\n\
         ```md\n[fenced](nowhere.md)\n```\n\n[ref]: docs/missing-ref.md\n",
    )
    .unwrap();
    std::fs::write(
        root.join("docs/sub/page.md"),
        "# Page\n\n## Real heading\n\nBack [up](../../README.md#title), [out](../../../x.md).\n",
    )
    .unwrap();
    let broken = broken_links(
        root,
        &[
            PathBuf::from("README.md"),
            PathBuf::from("docs/sub/page.md"),
        ],
    );
    let expected = [
        "README.md:3: (docs/gone.md): docs/gone.md does not exist",
        "README.md:4: (docs/sub/page.md#no-such-heading): docs/sub/page.md has no heading with the anchor #no-such-heading",
        "README.md:11: (docs/missing-ref.md): docs/missing-ref.md does not exist",
        "docs/sub/page.md:5: (../../../x.md): points outside the repository",
    ];
    let found: BTreeSet<&str> = broken.iter().map(String::as_str).collect();
    assert_eq!(found, BTreeSet::from(expected), "{broken:#?}");
}

/// The configuration reference in docs/ is what the code generates: a key added, removed or
/// documented differently in `host/src/config/` must be written there too.
#[test]
fn the_configuration_reference_is_what_the_code_generates() {
    let out = std::process::Command::new(&mcp_host_tests::artifacts().host)
        .args(["config", "--reference"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    let page = workspace_root().join("docs/operators/config-reference.md");
    let written = std::fs::read_to_string(&page).unwrap();
    assert!(
        generated == written,
        "{} is not what the code generates: run `cargo run -p mcp-host -- config --reference > \
         docs/operators/config-reference.md`",
        page.display()
    );
}
