//! Output budgets: every tool sizes its answer before (or while, within a fixed bound) building
//! it, so a small request can never make the plugin build a huge one. Here: the budget itself,
//! a writer that stops at it, JSON sizes computed without serializing, and regex replacement
//! templates expanded with their size known in advance.

use std::collections::HashMap;

use serde_json::Value;

/// The largest answer a tool builds, in bytes: of its main text, or of its structured result as
/// JSON with [`VALUE_COST`] added per JSON value (a parsed value takes far more memory than its
/// text: `1,` is two bytes of JSON and 32 bytes as a `serde_json::Value`).
pub const MAX_OUTPUT_BYTES: usize = 2 * 1024 * 1024;
/// What each JSON value of a structured answer counts against [`MAX_OUTPUT_BYTES`], besides its
/// text.
pub const VALUE_COST: usize = 32;

/// The error for an answer over its `limit`.
pub fn too_large(what: &str, size: impl std::fmt::Display, limit: usize) -> String {
    format!(
        "{what} would be {size} bytes, over the {limit}-byte limit of an answer \
         (max_answer_bytes); narrow the request"
    )
}

/// A buffer that refuses to grow past a limit (writes beyond it fail, nothing is allocated).
#[derive(Debug)]
pub struct BoundedWriter {
    /// What was written.
    pub buf: Vec<u8>,
    /// Whether a write was refused for want of room.
    pub exhausted: bool,
    limit: usize,
}

impl BoundedWriter {
    /// A writer of at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        BoundedWriter {
            buf: Vec::new(),
            exhausted: false,
            limit,
        }
    }
}

impl std::io::Write for BoundedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.exhausted = true;
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "output budget exhausted",
            ));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Counts bytes written to it (and, with `per_value`, that much more for each `,`, `:`, `[` or
/// `{`: an upper bound of the values written), giving up (with an error) past a limit.
struct Counter {
    n: usize,
    per_value: usize,
    limit: usize,
}

impl std::io::Write for Counter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.n += data.len();
        if self.per_value > 0 {
            let values = data
                .iter()
                .filter(|b| matches!(b, b',' | b':' | b'[' | b'{'))
                .count();
            self.n += values * self.per_value;
        }
        if self.n > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of `value` as compact JSON, or `None` once it is over `limit` (counting stops there).
pub fn json_size(value: &Value, limit: usize) -> Option<usize> {
    let mut counter = Counter {
        n: 0,
        per_value: 0,
        limit,
    };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.n)
}

/// What `value` counts against an answer's budget: its JSON size plus [`VALUE_COST`] per value
/// (over-counted: a `,` inside a string counts too), or `None` once over `limit`.
pub fn json_cost(value: &Value, limit: usize) -> Option<usize> {
    let mut counter = Counter {
        n: VALUE_COST,
        per_value: VALUE_COST,
        limit,
    };
    serde_json::to_writer(&mut counter, value).ok()?;
    Some(counter.n)
}

/// The size of `s` as a JSON string (quotes and escapes included).
pub fn json_str_size(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// An upper bound of the values in a JSON text, found without parsing it: every value but the
/// first follows a `,`, `:` or `[` outside strings.
pub fn json_values_bound(text: &str) -> usize {
    let (mut count, mut in_string, mut escaped) = (1usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b':' | b'[' => count += 1,
                _ => {}
            }
        }
    }
    count
}

/// One part of a replacement template.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Literal(String),
    Group(usize),
}

/// A regex replacement (`$1`, `${name}`, `$$`), parsed once with the exact rules of
/// `regex::Captures::expand`, so each match's expansion can be sized before it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Template(Vec<Piece>);

impl Template {
    /// `replacement` verbatim (no `$` references).
    pub fn literal(replacement: &str) -> Template {
        Template(vec![Piece::Literal(replacement.to_owned())])
    }

    /// Parse `replacement` for `re`: a reference to a group that does not exist expands to nothing,
    /// and a `$` that starts no reference is literal, as in `regex`.
    pub fn parse(replacement: &str, re: &regex::Regex) -> Template {
        let names: HashMap<&str, usize> = re
            .capture_names()
            .enumerate()
            .filter_map(|(i, n)| n.map(|n| (n, i)))
            .collect();
        let group = |name: &str| match name.parse::<usize>() {
            Ok(i) if i < re.captures_len() => Some(i),
            Ok(_) => None,
            Err(_) => names.get(name).copied(),
        };
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = replacement;
        while let Some(i) = rest.find('$') {
            literal.push_str(&rest[..i]);
            rest = &rest[i..];
            if rest.as_bytes().get(1) == Some(&b'$') {
                literal.push('$');
                rest = &rest[2..];
                continue;
            }
            let Some((name, len)) = reference(rest) else {
                literal.push('$');
                rest = &rest[1..];
                continue;
            };
            if let Some(g) = group(name) {
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Group(g));
            }
            rest = &rest[len..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Template(pieces)
    }

    /// The length of this template expanded for `caps`.
    pub fn len_for(&self, caps: &regex::Captures<'_>) -> usize {
        self.0
            .iter()
            .map(|p| match p {
                Piece::Literal(s) => s.len(),
                Piece::Group(g) => caps.get(*g).map_or(0, |m| m.len()),
            })
            .sum()
    }

    /// Append this template expanded for `caps` to `out`.
    pub fn expand_into(&self, caps: &regex::Captures<'_>, out: &mut String) {
        for p in &self.0 {
            match p {
                Piece::Literal(s) => out.push_str(s),
                Piece::Group(g) => out.push_str(caps.get(*g).map_or("", |m| m.as_str())),
            }
        }
    }
}

/// The reference at the start of `rest` (which starts with `$`): its name and its length.
fn reference(rest: &str) -> Option<(&str, usize)> {
    let bytes = rest.as_bytes();
    if bytes.get(1) == Some(&b'{') {
        let close = rest[2..].find('}')?;
        return Some((&rest[2..2 + close], close + 3));
    }
    let end = bytes[1..]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        .map_or(bytes.len(), |p| p + 1);
    (end > 1).then(|| (&rest[1..end], end))
}

/// Replace the first `limit` matches of `re` in `text` (all when 0) with `template`, sizing the
/// result before building it; `Err` names the size when it is over `budget`.
pub fn replace(
    re: &regex::Regex,
    text: &str,
    template: &Template,
    limit: usize,
    budget: usize,
) -> Result<(String, usize), String> {
    let matches = || {
        re.captures_iter(text)
            .take(if limit == 0 { usize::MAX } else { limit })
    };
    let (mut size, mut count) = (text.len(), 0usize);
    for caps in matches() {
        let Some(m) = caps.get(0) else { continue };
        // Matches do not overlap, so what they cover is never subtracted twice.
        size = size
            .saturating_sub(m.len())
            .saturating_add(template.len_for(&caps));
        count += 1;
    }
    if size > budget {
        return Err(too_large("the result", size, budget));
    }
    let mut out = String::with_capacity(size);
    let mut last = 0;
    for caps in matches() {
        let Some(m) = caps.get(0) else { continue };
        out.push_str(&text[last..m.start()]);
        template.expand_into(&caps, &mut out);
        last = m.end();
    }
    out.push_str(&text[last..]);
    Ok((out, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand_exactly_like_the_regex_crate() {
        let re = regex::Regex::new(r"(?<y>\d{4})-(\d{2})(x)?").unwrap();
        let text = "on 2026-01 and 1999-12x, $5 left";
        for rep in [
            "$1", "${y}/$2", "$y$2", "$$1", "$", "a$", "${nope}!", "$9", "${2}x", "$2x", "${",
            "${y", "$0$0$0", "$3<$3>", "$é", "",
        ] {
            let expected = re.replace_all(text, rep).into_owned();
            let (got, _) = replace(&re, text, &Template::parse(rep, &re), 0, usize::MAX).unwrap();
            assert_eq!(got, expected, "replacement {rep:?}");
        }
        let (once, n) = replace(&re, text, &Template::parse("<$0>", &re), 1, usize::MAX).unwrap();
        assert_eq!(
            (once.as_str(), n),
            (re.replacen(text, 1, "<$0>").as_ref(), 1)
        );
    }

    #[test]
    fn a_result_over_the_budget_is_refused_before_it_is_built() {
        let re = regex::Regex::new("").unwrap();
        let text = "x".repeat(45_000);
        let rep = Template::literal(&"y".repeat(45_000));
        let err = replace(&re, &text, &rep, 0, MAX_OUTPUT_BYTES).unwrap_err();
        assert!(err.contains("over the"), "{err}");
        // `$0` repeated, on a match of the whole text.
        let re = regex::Regex::new("(?s).+").unwrap();
        let rep = Template::parse(&"$0".repeat(10_000), &re);
        assert!(replace(&re, &text, &rep, 0, MAX_OUTPUT_BYTES).is_err());
    }

    #[test]
    fn the_writer_stops_at_its_limit_and_sizes_are_exact() {
        use std::io::Write as _;
        let mut w = BoundedWriter::new(4);
        assert!(w.write_all(b"abcd").is_ok());
        assert!(w.write_all(b"e").is_err());
        let v = serde_json::json!({"a": ["\n", "\u{1}", "é"]});
        assert_eq!(json_size(&v, usize::MAX), Some(v.to_string().len()));
        assert_eq!(json_size(&v, 3), None);
        let cost = json_cost(&v, usize::MAX).unwrap();
        assert!(cost >= v.to_string().len() + 5 * VALUE_COST, "{cost}");
        for s in ["plain", "q\"uote\\", "\u{0}\u{1f}\t", "é"] {
            assert_eq!(json_str_size(s), Value::from(s).to_string().len(), "{s:?}");
        }
        assert!(json_values_bound(r#"{"a,[:":[1,2,{"b":3}]}"#) >= 5);
    }
}
