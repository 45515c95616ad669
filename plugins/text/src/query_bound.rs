//! How much a JSONPath query can select before it runs.
//!
//! `serde_json_path` evaluates a query eagerly: every segment builds the full list of nodes it
//! selects. Unions and descendant segments multiply that list (`$[0,0,0][0,0,0]…`, `$..*..*`), and a
//! filter's own queries run once per candidate, so a short query on a small document can
//! build millions of nodes. This module reads the query's structure (already validated by the
//! parser) and bounds, from the document's size, depth and widest container, how many nodes each
//! segment can select and how much work the filters can do; the tool refuses a query whose bound is
//! over its budget instead of running it.

use serde_json::Value;

/// The shape of a document that bounds what a query can select from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocShape {
    /// Values in the document (the root included).
    pub nodes: u128,
    /// Nesting depth (the root alone is 0).
    pub depth: u128,
    /// Members of the largest array or object.
    pub widest: u128,
}

impl DocShape {
    /// Measure `doc`.
    pub fn of(doc: &Value) -> DocShape {
        let mut shape = DocShape {
            nodes: 0,
            depth: 0,
            widest: 0,
        };
        let mut stack = vec![(doc, 0u128)];
        while let Some((v, depth)) = stack.pop() {
            shape.nodes += 1;
            shape.depth = shape.depth.max(depth);
            match v {
                Value::Array(items) => {
                    shape.widest = shape.widest.max(items.len() as u128);
                    stack.extend(items.iter().map(|i| (i, depth + 1)));
                }
                Value::Object(map) => {
                    shape.widest = shape.widest.max(map.len() as u128);
                    stack.extend(map.values().map(|i| (i, depth + 1)));
                }
                _ => {}
            }
        }
        shape
    }
}

/// Upper bounds for one query run from one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// Nodes it can select (duplicates counted).
    pub selected: u128,
    /// Nodes visited and filter sub-queries run, all told.
    pub work: u128,
}

const CAP: u128 = 1 << 100;

fn mul(a: u128, b: u128) -> u128 {
    a.saturating_mul(b).min(CAP)
}

fn add(a: u128, b: u128) -> u128 {
    a.saturating_add(b).min(CAP)
}

/// Bound the query `path` (starting with `$`, already accepted by `JsonPath::parse`) on a
/// document of `shape`.
pub fn bound(path: &str, shape: DocShape) -> Bound {
    let mut scan = Scanner {
        src: path.as_bytes(),
        pos: 0,
        shape,
    };
    scan.skip_ws();
    scan.pos += 1; // `$`
    scan.segments()
}

/// One selector of a bracketed (or shorthand) selection: how many nodes it picks from one
/// node's children, and the work a filter does per candidate.
struct Selector {
    picks_one: bool,
    filter_work: Option<u128>,
}

struct Scanner<'a> {
    src: &'a [u8],
    pos: usize,
    shape: DocShape,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// The segments of a query whose `$` or `@` was just consumed, run from one node.
    fn segments(&mut self) -> Bound {
        let DocShape {
            nodes: n,
            depth: d,
            widest: c,
        } = self.shape;
        // `count`: the list's length; `mult`: how often one node can appear in it.
        let (mut count, mut mult, mut work) = (1u128, 1u128, 0u128);
        loop {
            let save = self.pos;
            self.skip_ws();
            let descendant = match (self.peek(), self.src.get(self.pos + 1)) {
                (Some(b'.'), Some(b'.')) => {
                    self.pos += 2;
                    true
                }
                (Some(b'.'), _) => {
                    self.pos += 1;
                    false
                }
                (Some(b'['), _) => false,
                _ => {
                    self.pos = save;
                    break;
                }
            };
            let selectors = self.selection();
            let k = selectors.len() as u128;
            let per_node: u128 = selectors
                .iter()
                .map(|s| if s.picks_one { 1 } else { c })
                .sum();
            let filter_work: u128 = selectors.iter().filter_map(|s| s.filter_work).fold(0, add);
            if descendant {
                // Every node below each input is visited; each selector picks at most one node per
                // visited node (a wildcard's picks are all below the input, so at most `n`).
                let visited = mul(count, n);
                let new_mult = mul(mul(mult, k), count.min(d + 1));
                work = add(work, add(visited, mul(visited, filter_work)));
                count = mul(visited, k).min(mul(n, new_mult));
                mult = new_mult;
            } else {
                let candidates = mul(count, c).min(mul(n, mult));
                work = add(work, add(count, mul(candidates, filter_work)));
                mult = mul(mult, k);
                count = mul(count, per_node).min(mul(n, mult));
            }
        }
        Bound {
            selected: count,
            work: add(work, count),
        }
    }

    /// The selection after `.` or `..`, or at `[`.
    fn selection(&mut self) -> Vec<Selector> {
        match self.peek() {
            Some(b'[') => {
                self.pos += 1;
                let mut selectors = Vec::new();
                loop {
                    self.skip_ws();
                    selectors.push(self.selector());
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            break;
                        }
                        // Not reached for a query the parser accepted; stop rather than loop.
                        _ => break,
                    }
                }
                selectors
            }
            Some(b'*') => {
                self.pos += 1;
                vec![Selector {
                    picks_one: false,
                    filter_work: None,
                }]
            }
            _ => {
                // A member name shorthand (`.name`, `..name`).
                while self
                    .peek()
                    .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80)
                {
                    self.pos += 1;
                }
                vec![Selector {
                    picks_one: true,
                    filter_work: None,
                }]
            }
        }
    }

    /// One selector inside brackets.
    fn selector(&mut self) -> Selector {
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => {
                self.string(q);
                Selector {
                    picks_one: true,
                    filter_work: None,
                }
            }
            Some(b'*') => {
                self.pos += 1;
                Selector {
                    picks_one: false,
                    filter_work: None,
                }
            }
            Some(b'?') => {
                self.pos += 1;
                Selector {
                    picks_one: false,
                    filter_work: Some(self.filter()),
                }
            }
            _ => {
                // An index or a slice: digits, `-`, `:` and spaces.
                let mut slice = false;
                while let Some(b) = self.peek() {
                    match b {
                        b':' => slice = true,
                        b'0'..=b'9' | b'-' | b' ' | b'\t' | b'\n' | b'\r' => {}
                        _ => break,
                    }
                    self.pos += 1;
                }
                Selector {
                    picks_one: !slice,
                    filter_work: None,
                }
            }
        }
    }

    /// Skip a string literal opened by `quote`.
    fn string(&mut self, quote: u8) {
        self.pos += 1;
        while let Some(b) = self.peek() {
            self.pos += 1;
            match b {
                b'\\' => self.pos += 1,
                _ if b == quote => return,
                _ => {}
            }
        }
    }

    /// A filter expression up to its selector's end: the work of running its queries once.
    fn filter(&mut self) -> u128 {
        let mut depth = 0usize;
        let mut work = 1u128;
        while let Some(b) = self.peek() {
            match b {
                b'\'' | b'"' => {
                    self.string(b);
                    continue;
                }
                b'(' => depth += 1,
                b')' => depth = depth.saturating_sub(1),
                b',' | b']' if depth == 0 => break,
                b'@' | b'$' => {
                    self.pos += 1;
                    let q = self.segments();
                    work = add(work, add(q.selected, q.work));
                    continue;
                }
                _ => {}
            }
            self.pos += 1;
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shape(nodes: u128, depth: u128, widest: u128) -> DocShape {
        DocShape {
            nodes,
            depth,
            widest,
        }
    }

    #[test]
    fn shapes_are_measured() {
        let doc = json!({"a": [1, 2, {"b": [3]}], "c": null});
        assert_eq!(DocShape::of(&doc), shape(8, 4, 3));
    }

    #[test]
    fn ordinary_queries_stay_small_and_amplifying_ones_grow() {
        let big = shape(100_000, 6, 10_000);
        let sel = |p: &str| bound(p, big).selected;
        assert_eq!(sel("$.store.book[0].title"), 1);
        assert_eq!(sel("$['a', \"b\"]"), 2);
        assert_eq!(sel("$.store.book[*].author"), 10_000);
        assert!(sel("$..price") <= 100_000);
        assert!(sel("$..*") <= 100_000);
        assert!(sel("$..book[?@.price < 10]") <= 100_000);
        assert!(sel("$..*..*") >= 700_000);
        let unions = format!(
            "$[{}][{}][{}]",
            ["0"; 100].join(","),
            ["0"; 100].join(","),
            ["0"; 100].join(",")
        );
        assert!(bound(&unions, shape(10, 2, 5)).selected >= 1_000_000);
        // A filter whose own query walks the document runs once per candidate.
        assert!(bound("$..[?@..x]", big).work >= 1_000_000_000);
        assert!(bound("$.a[?@.b == 'x,]' && length(@.c) > 1]", big).work <= 1_000_000);
    }

    #[test]
    fn bounds_hold_on_real_queries() {
        let doc = json!({"a": [[1, 2], [3, [4, 5]]], "b": {"c": [6, {"d": 7}]}});
        let shape = DocShape::of(&doc);
        for p in [
            "$..*",
            "$..*..*",
            "$.a[*][*]",
            "$[*,*][*,*]",
            "$..[0,1,0]",
            "$.a[0:2][::-1]",
            "$..[?@ > 2]",
            "$..[?@..d]",
            "$['a','b','a']..*",
            "$ .a [0]",
        ] {
            let real = serde_json_path::JsonPath::parse(p)
                .unwrap()
                .query(&doc)
                .len() as u128;
            assert!(bound(p, shape).selected >= real, "{p}: bound below {real}");
        }
    }
}
