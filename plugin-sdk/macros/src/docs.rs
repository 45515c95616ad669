//! Reading rustdoc comments: the description before the first `# ` heading, and the `# Arguments` list.

use std::collections::BTreeMap;

use syn::{Attribute, Expr, ExprLit, Lit, Meta};

/// The lines of an item's `///` comments.
pub fn doc_lines(attrs: &[Attribute]) -> Vec<String> {
    let mut lines = Vec::new();
    for attr in attrs {
        if let Meta::NameValue(nv) = &attr.meta
            && nv.path.is_ident("doc")
            && let Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) = &nv.value
        {
            for line in s.value().lines() {
                lines.push(line.strip_prefix(' ').unwrap_or(line).to_owned());
            }
        }
    }
    lines
}

/// A parsed doc comment.
#[derive(Default)]
pub struct Docs {
    /// Paragraphs before the first heading, lines joined by spaces, paragraphs by a blank line.
    pub description: String,
    /// Parameter name -> description, from the `# Arguments` section.
    pub args: BTreeMap<String, String>,
}

fn is_heading(line: &str) -> Option<&str> {
    let t = line.trim_start();
    t.strip_prefix("# ").map(str::trim)
}

/// Parse doc lines.
pub fn parse(lines: &[String]) -> Docs {
    let mut docs = Docs::default();
    let mut paragraphs: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut i = 0;
    while i < lines.len() && is_heading(&lines[i]).is_none() {
        let t = lines[i].trim();
        if t.is_empty() {
            if !current.is_empty() {
                paragraphs.push(std::mem::take(&mut current));
            }
        } else {
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(t);
        }
        i += 1;
    }
    if !current.is_empty() {
        paragraphs.push(current);
    }
    docs.description = paragraphs.join("\n\n");

    let mut in_args = false;
    let mut last: Option<String> = None;
    for line in &lines[i..] {
        if let Some(h) = is_heading(line) {
            let h = h.to_ascii_lowercase();
            in_args = matches!(
                h.as_str(),
                "arguments" | "args" | "parameters" | "params" | "argument" | "parameter"
            );
            last = None;
            continue;
        }
        if !in_args {
            continue;
        }
        let t = line.trim();
        if t.is_empty() {
            last = None;
            continue;
        }
        if let Some(rest) = t.strip_prefix("* ").or_else(|| t.strip_prefix("- "))
            && let Some((name, text)) = split_bullet(rest)
        {
            docs.args.insert(name.clone(), text);
            last = Some(name);
            continue;
        }
        if let Some(name) = &last
            && let Some(text) = docs.args.get_mut(name)
        {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(t);
        }
    }
    docs
}

/// `` `name` - text `` or `name: text` -> (name, text).
fn split_bullet(rest: &str) -> Option<(String, String)> {
    let rest = rest.trim();
    let (name, tail) = if let Some(r) = rest.strip_prefix('`') {
        let end = r.find('`')?;
        (r[..end].to_owned(), r[end + 1..].trim_start())
    } else {
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
        (rest[..end].to_owned(), rest[end..].trim_start())
    };
    let text = tail
        .strip_prefix("- ")
        .or_else(|| tail.strip_prefix("-"))
        .or_else(|| tail.strip_prefix(": "))
        .or_else(|| tail.strip_prefix(':'))
        .or_else(|| tail.strip_prefix("– "))?;
    Some((name, text.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_owned).collect()
    }

    #[test]
    fn description_stops_at_first_heading_and_joins_lines() {
        let d = parse(&lines(
            "Count readings\nabove a goal.\n\nSecond paragraph.\n# Arguments\n* `goal` - The target.\n  Continued here.\n* `days`: How far back.\n# Returns\n* `x` - ignored",
        ));
        assert_eq!(
            d.description,
            "Count readings above a goal.\n\nSecond paragraph."
        );
        assert_eq!(d.args["goal"], "The target. Continued here.");
        assert_eq!(d.args["days"], "How far back.");
        assert!(!d.args.contains_key("x"));
    }
}
