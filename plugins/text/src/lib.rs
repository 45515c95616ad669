//! `mcp-text`: text and JSON utilities for mcp-host.
//!
//! Services and tools:
//!
//! | service | tool | what it does |
//! |---|---|---|
//! | `Json` | `json_query` | run an RFC 9535 JSONPath query, returning each match with its location |
//! | `Json` | `json_format` | validate and pretty-print (or minify) JSON, optionally sorting keys |
//! | `Regex` | `regex_match` | find regex matches with byte offsets and capture groups |
//! | `Regex` | `regex_replace` | replace regex matches, with `$1` / `${name}` references |
//! | `Hashing` | `hash_text` | SHA-256, SHA-512, SHA-1, MD5 or BLAKE3 digest, hex or base64 |
//! | `Encoding` | `base64_encode` | encode text as base64 (standard or URL-safe) |
//! | `Encoding` | `base64_decode` | decode base64 (either alphabet, padding optional) |
//! | (none) | `text_stats` | count characters, bytes, words and lines |
//! | `Hmac` | `hmac_sign` | HMAC-SHA256 of a message with the configured key (only when configured) |
//! | `Hmac` | `hmac_verify` | check an HMAC-SHA256 signature in constant time (only when configured) |
//!
//! Inputs are capped (10 MiB of text, 10,000-character regex patterns and JSONPath queries, 500,000
//! JSON values to parse) and every answer is sized before it is built ([`budget`]: at most 2 MiB;
//! a JSONPath query is bounded from its structure before it runs, [`query_bound`]), so a small call
//! can never make the plugin build a huge answer; every failure is an error result, never a panic.
//!
//! # Configuration
//!
//! ```yaml
//! plugins:
//!   mcp-text:
//!     config:
//!       # Optional. Enables the `Hmac` service. The UTF-8 bytes of the string are the key, or
//!       # prefix it with `base64:` to give raw key bytes. It is never returned by any tool.
//!       hmac_key: "s3cret"
//!       # Optional bounds (defaults shown): the largest answer a tool builds, the most values of a
//!       # JSON document parsed whole, and what a JSONPath query may select and do by its bound.
//!       max_answer_bytes: 2097152
//!       max_json_values: 500000
//!       max_query_nodes: 1000000
//!       max_query_steps: 50000000
//! ```

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::Mac as _;
use mcp_plugin_sdk::{HostApi, export_plugin, service, tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest as _;

pub mod budget;
pub mod query_bound;

use budget::{BoundedWriter, MAX_OUTPUT_BYTES, VALUE_COST, json_cost, json_str_size, too_large};

/// Largest text (or JSON document) accepted, in bytes.
pub const MAX_INPUT_BYTES: usize = 10 * 1024 * 1024;
/// Longest regex pattern accepted, in characters.
pub const MAX_PATTERN_CHARS: usize = 10_000;
/// Memory cap for a compiled regex.
const REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;
/// Most values a JSON document parsed whole (`json_query`, sorted `json_format`) may have: a
/// parsed value takes 32 bytes or more, several times its text.
pub const MAX_JSON_VALUES: usize = 500_000;
/// Most nodes a JSONPath query may select (duplicates counted) by its bound, before it runs.
pub const MAX_SELECTED_NODES: u128 = 1_000_000;
/// Most nodes a JSONPath query may visit, filter sub-queries included, by its bound.
pub const MAX_QUERY_WORK: u128 = 50_000_000;

/// The bounds of the JSON and regex tools; each can be set in the plugin's config section
/// (`max_answer_bytes`, `max_json_values`, `max_query_nodes`, `max_query_steps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest answer built ([`MAX_OUTPUT_BYTES`] by default).
    pub max_answer_bytes: usize,
    /// Most values of a JSON document parsed whole ([`MAX_JSON_VALUES`]).
    pub max_json_values: usize,
    /// Most nodes a JSONPath query may select by its bound ([`MAX_SELECTED_NODES`]).
    pub max_query_nodes: u128,
    /// Most steps a JSONPath query may take by its bound ([`MAX_QUERY_WORK`]).
    pub max_query_steps: u128,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_answer_bytes: MAX_OUTPUT_BYTES,
            max_json_values: MAX_JSON_VALUES,
            max_query_nodes: MAX_SELECTED_NODES,
            max_query_steps: MAX_QUERY_WORK,
        }
    }
}

impl Limits {
    /// The limits in the plugin's config section (defaults for the keys it does not set).
    pub fn from_config(host: &HostApi) -> Result<Limits, String> {
        let key = |name: &str| -> Result<Option<u64>, String> {
            match host.config_value(name) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .filter(|n| *n > 0)
                    .map(Some)
                    .ok_or_else(|| format!("config key `{name}` must be a positive integer")),
            }
        };
        let d = Limits::default();
        Ok(Limits {
            max_answer_bytes: key("max_answer_bytes")?.map_or(d.max_answer_bytes, |n| n as usize),
            max_json_values: key("max_json_values")?.map_or(d.max_json_values, |n| n as usize),
            max_query_nodes: key("max_query_nodes")?.map_or(d.max_query_nodes, u128::from),
            max_query_steps: key("max_query_steps")?.map_or(d.max_query_steps, u128::from),
        })
    }
}

fn check_size(what: &str, s: &str) -> Result<(), String> {
    if s.len() > MAX_INPUT_BYTES {
        Err(format!(
            "{what} is too large: {} bytes, the limit is {MAX_INPUT_BYTES} bytes",
            s.len()
        ))
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

/// One node selected by a JSONPath query.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JsonMatch {
    /// The normalized JSONPath of the node, e.g. `$['store']['book'][0]['title']`.
    pub path: String,
    /// The same location as an RFC 6901 JSON Pointer, e.g. `/store/book/0/title`.
    pub pointer: String,
    /// The selected value.
    pub value: Value,
}

/// The result of a JSONPath query.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JsonQueryResult {
    /// How many nodes the query selected in total.
    pub count: usize,
    /// Whether `results` holds fewer than `count` nodes (cut at `max_results` or at the 2 MiB
    /// answer budget).
    pub truncated: bool,
    /// The selected nodes, in the query's order; cut at `max_results` or where the answer would
    /// pass 2 MiB.
    pub results: Vec<JsonMatch>,
}

fn parse_json(json: &str, max_values: usize) -> Result<Value, String> {
    check_size("the JSON document", json)?;
    let values = budget::json_values_bound(json);
    if values > max_values {
        return Err(format!(
            "the JSON document has up to {values} values, over the limit of {max_values} \
             (max_json_values); pass the part you need"
        ));
    }
    serde_json::from_str(json).map_err(|e| format!("invalid JSON: {e}"))
}

/// Where each node of `wanted` (by address) is in `doc`: its normalized path and JSON pointer.
/// One walk of the document, holding only the current path.
fn locate(
    doc: &Value,
    wanted: &std::collections::HashSet<*const Value>,
) -> std::collections::HashMap<*const Value, (String, String)> {
    enum Step<'a> {
        Name(&'a str),
        Index(usize),
    }
    fn walk<'a>(
        v: &'a Value,
        path: &mut Vec<Step<'a>>,
        wanted: &std::collections::HashSet<*const Value>,
        found: &mut std::collections::HashMap<*const Value, (String, String)>,
    ) {
        if wanted.contains(&(v as *const Value)) {
            let (mut normalized, mut pointer) = (String::from("$"), String::new());
            for step in path.iter() {
                match step {
                    Step::Name(n) => {
                        normalized.push_str("['");
                        for ch in n.chars() {
                            match ch {
                                '\'' | '\\' => {
                                    normalized.push('\\');
                                    normalized.push(ch);
                                }
                                _ => normalized.push(ch),
                            }
                        }
                        normalized.push_str("']");
                        pointer.push('/');
                        pointer.push_str(&n.replace('~', "~0").replace('/', "~1"));
                    }
                    Step::Index(i) => {
                        normalized.push_str(&format!("[{i}]"));
                        pointer.push_str(&format!("/{i}"));
                    }
                }
            }
            found.insert(v as *const Value, (normalized, pointer));
        }
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(Step::Index(i));
                    walk(item, path, wanted, found);
                    path.pop();
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    path.push(Step::Name(k));
                    walk(item, path, wanted, found);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut found = std::collections::HashMap::new();
    walk(doc, &mut Vec::new(), wanted, &mut found);
    found
}

/// The size of a location's two strings in JSON, without building them (an upper bound).
fn location_sizes(doc: &Value) -> std::collections::HashMap<*const Value, usize> {
    fn walk(v: &Value, size: usize, out: &mut std::collections::HashMap<*const Value, usize>) {
        out.insert(v as *const Value, size);
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    // `[i]` and `/i`.
                    let digits = i.checked_ilog10().unwrap_or(0) as usize + 1;
                    walk(item, size + 2 * digits + 3, out);
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    // `['k']` and `/k`, escapes at their worst.
                    walk(item, size + 3 * json_str_size(k) + 5, out);
                }
            }
            _ => {}
        }
    }
    let mut out = std::collections::HashMap::new();
    walk(doc, 4, &mut out);
    out
}

/// JSON querying and formatting.
#[derive(Debug, Default)]
pub struct Json {
    limits: Limits,
}

#[service]
impl Json {
    fn new(host: &HostApi) -> Result<Self, String> {
        Ok(Json {
            limits: Limits::from_config(host)?,
        })
    }

    /// Query a JSON document with an RFC 9535 JSONPath expression and get every matching value with
    /// its location. Use it to pull fields out of large API responses or configs instead of reading
    /// them whole. Supports wildcards (`*`), recursive descent (`..`), slices (`[0:3]`) and filters
    /// (`[?@.price < 10]`, `[?length(@.tags) > 1]`, `[?match(@.name, 'a.*')]`).
    ///
    /// # Arguments
    /// * `json` - The JSON document, as text, e.g. `{"store":{"book":[{"title":"A","price":8}]}}`.
    /// * `path` - The JSONPath query, starting with `$`, e.g. `$.store.book[*].title`,
    ///   `$..price`, `$.store.book[?@.price < 10]`.
    /// * `max_results` - The most matches returned (default 1000); `count` still gives the total.
    #[tool(read_only, idempotent, title = "JSONPath query")]
    pub fn json_query(
        &self,
        json: String,
        path: String,
        #[arg(default = 1000, min = 1, max = 100000)] max_results: u32,
    ) -> Result<JsonQueryResult, String> {
        let query = serde_json_path::JsonPath::parse(&path).map_err(|e| {
            format!(
                "invalid JSONPath {path:?}: {e} (expected RFC 9535 syntax, e.g. \"$.items[*].name\" or \"$..id\")"
            )
        })?;
        if path.len() > MAX_PATTERN_CHARS {
            return Err(format!(
                "the JSONPath is too long: {} bytes, the limit is {MAX_PATTERN_CHARS}",
                path.len()
            ));
        }
        let limits = self.limits;
        let doc = parse_json(&json, limits.max_json_values)?;
        // Bound what the query can build before running it (its evaluation is eager).
        let bound = query_bound::bound(&path, query_bound::DocShape::of(&doc));
        if bound.selected > limits.max_query_nodes || bound.work > limits.max_query_steps {
            return Err(format!(
                "the JSONPath {path:?} could select up to {} nodes of this document (doing up to \
                 {} steps), over the limits of {} and {} (max_query_nodes, max_query_steps); use \
                 fewer `..` segments, unions or filter sub-queries",
                bound.selected, bound.work, limits.max_query_nodes, limits.max_query_steps
            ));
        }
        let nodes = query.query(&doc);
        let count = nodes.len();
        // Keep matches while the answer stays within its budget, sizing each before copying it.
        let sizes = location_sizes(&doc);
        let mut kept = Vec::new();
        let mut total = 64usize;
        for node in nodes.iter().take(max_results as usize) {
            let room = limits.max_answer_bytes.saturating_sub(total);
            let location = sizes.get(&(*node as *const Value)).copied().unwrap_or(0);
            match json_cost(node, room.saturating_sub(location)) {
                Some(size)
                    if total + size + location + 4 * VALUE_COST <= limits.max_answer_bytes =>
                {
                    total += size + location + 4 * VALUE_COST;
                    kept.push(*node);
                }
                _ if kept.is_empty() => {
                    return Err(too_large(
                        "the first match",
                        format!("more than {room}"),
                        limits.max_answer_bytes,
                    ));
                }
                _ => break,
            }
        }
        drop(sizes);
        let wanted = kept.iter().map(|n| *n as *const Value).collect();
        let locations = locate(&doc, &wanted);
        let results = kept
            .iter()
            .map(|n| {
                let (path, pointer) = locations
                    .get(&(*n as *const Value))
                    .cloned()
                    .unwrap_or_default();
                JsonMatch {
                    path,
                    pointer,
                    value: (*n).clone(),
                }
            })
            .collect::<Vec<_>>();
        Ok(JsonQueryResult {
            count,
            truncated: count > results.len(),
            results,
        })
    }

    /// Validate JSON and reformat it: pretty-print with an indent, or minify (indent 0). Keys keep
    /// their original order unless `sort_keys` is set. Invalid JSON gives an error with the line and
    /// column of the problem, so it doubles as a JSON validator.
    ///
    /// # Arguments
    /// * `json` - The JSON document, as text, e.g. `{"b":1,"a":[1,2]}`.
    /// * `indent` - Spaces per indentation level, 0 to 8 (default 2); 0 minifies to one line.
    /// * `sort_keys` - Sort object keys alphabetically, recursively (default false).
    #[tool(read_only, idempotent, title = "Format / validate JSON")]
    pub fn json_format(
        &self,
        json: String,
        #[arg(default = 2, min = 0, max = 8)] indent: u32,
        #[arg(default = false)] sort_keys: bool,
    ) -> Result<String, String> {
        check_size("the JSON document", &json)?;
        let indent = " ".repeat(indent.min(8) as usize);
        // Indentation grows with depth: the output stops at its budget instead of growing with it.
        let max = self.limits.max_answer_bytes;
        let mut out = BoundedWriter::new(max);
        let mut de = serde_json::Deserializer::from_str(&json);
        let result = if sort_keys {
            let value = parse_json(&json, self.limits.max_json_values)?;
            write_json(&mut out, &sort_value(value), &indent)
        } else {
            // Stream through so key order is kept exactly.
            transcode_json(&mut de, &mut out, &indent)
        };
        match result {
            // (Through the transcoder, the writer's error comes back as a data error.)
            Err(_) if out.exhausted => {
                return Err(too_large(
                    "the formatted JSON",
                    format!("more than {max}"),
                    max,
                ));
            }
            other => other.map_err(|e| format!("invalid JSON: {e}"))?,
        }
        if !sort_keys {
            de.end().map_err(|e| format!("invalid JSON: {e}"))?;
        }
        String::from_utf8(out.buf).map_err(|e| format!("internal error: non-UTF-8 output: {e}"))
    }
}

fn transcode_json<'de>(
    de: &mut serde_json::Deserializer<serde_json::de::StrRead<'de>>,
    out: &mut BoundedWriter,
    indent: &str,
) -> Result<(), serde_json::Error> {
    if indent.is_empty() {
        let mut ser = serde_json::Serializer::new(out);
        serde_transcode::transcode(de, &mut ser)
    } else {
        let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(out, fmt);
        serde_transcode::transcode(de, &mut ser)
    }
}

fn write_json(
    out: &mut BoundedWriter,
    value: &Value,
    indent: &str,
) -> Result<(), serde_json::Error> {
    if indent.is_empty() {
        serde_json::to_writer(out, value)
    } else {
        let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(out, fmt);
        value.serialize(&mut ser)
    }
}

fn sort_value(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sort_value(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sort_value).collect()),
        other => other,
    }
}

// ---------------------------------------------------------------------------------------------
// Regex
// ---------------------------------------------------------------------------------------------

/// One capture group of a match.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CaptureGroup {
    /// The group number (1 is the first parenthesized group).
    pub index: usize,
    /// The group name, for `(?<name>...)` / `(?P<name>...)` groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Byte offset where the group starts.
    pub start: usize,
    /// Byte offset just past the group's end.
    pub end: usize,
    /// The captured text.
    pub text: String,
}

/// One regex match.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RegexMatch {
    /// Byte offset where the match starts in the text.
    pub start: usize,
    /// Byte offset just past the match's end.
    pub end: usize,
    /// The matched text.
    pub text: String,
    /// The capture groups in order (group 1 first); `null` for a group that did not take part in
    /// this match.
    pub groups: Vec<Option<CaptureGroup>>,
}

/// The matches of a regex in a text.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RegexMatches {
    /// Whether the pattern matched at all.
    pub is_match: bool,
    /// How many matches are returned.
    pub count: usize,
    /// Whether the search stopped at `max_matches` or at the 2 MiB answer budget (more matches
    /// may exist).
    pub truncated: bool,
    /// The matches, left to right, non-overlapping.
    pub matches: Vec<RegexMatch>,
}

/// The result of a regex replacement.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RegexReplaced {
    /// The text after replacement.
    pub text: String,
    /// How many matches were replaced.
    pub replacements: usize,
}

fn build_regex(
    pattern: &str,
    case_insensitive: bool,
    multi_line: bool,
) -> Result<regex::Regex, String> {
    let chars = pattern.chars().count();
    if chars > MAX_PATTERN_CHARS {
        return Err(format!(
            "pattern is too long: {chars} characters, the limit is {MAX_PATTERN_CHARS}"
        ));
    }
    regex::RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .multi_line(multi_line)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(limit) => format!(
                "pattern compiles to more than {limit} bytes; simplify it (e.g. smaller repetition counts)"
            ),
            other => format!("invalid regex: {other}"),
        })
}

/// Regular expressions (Rust `regex` syntax: linear time, no look-around or backreferences).
#[derive(Debug, Default)]
pub struct Regex {
    limits: Limits,
}

#[service]
impl Regex {
    fn new(host: &HostApi) -> Result<Self, String> {
        Ok(Regex {
            limits: Limits::from_config(host)?,
        })
    }

    /// Find all matches of a regular expression in a text, with byte offsets and capture groups.
    /// Use it to extract structured bits (IDs, dates, emails, log fields) or to test whether a
    /// pattern matches. Syntax is Rust `regex` (like PCRE without look-around or backreferences);
    /// inline flags such as `(?s)` (dot matches newline) and `(?x)` (verbose) work.
    ///
    /// # Arguments
    /// * `pattern` - The regular expression, e.g. `(\d{4})-(\d{2})-(\d{2})` or
    ///   `(?<user>\w+)@(?<domain>[\w.]+)`. At most 10,000 characters.
    /// * `text` - The text to search (at most 10 MiB).
    /// * `case_insensitive` - Match letters regardless of case (default false).
    /// * `multi_line` - Make `^` and `$` match at line starts and ends, not just the whole text
    ///   (default false).
    /// * `max_matches` - Stop after this many matches (default 100).
    #[tool(read_only, idempotent, title = "Regex match")]
    pub fn regex_match(
        &self,
        pattern: String,
        text: String,
        #[arg(default = false)] case_insensitive: bool,
        #[arg(default = false)] multi_line: bool,
        #[arg(default = 100, min = 1, max = 10000)] max_matches: u32,
    ) -> Result<RegexMatches, String> {
        check_size("text", &text)?;
        let re = build_regex(&pattern, case_insensitive, multi_line)?;
        let names: Vec<Option<&str>> = re.capture_names().collect();
        let limit = max_matches.clamp(1, 10_000) as usize;
        let mut matches = Vec::new();
        let mut truncated = false;
        let mut total = 64usize;
        for caps in re.captures_iter(&text) {
            if matches.len() == limit {
                truncated = true;
                break;
            }
            let Some(whole) = caps.get(0) else { continue };
            // Size the match (its text and every group's, which nested groups repeat) first.
            let size = 64
                + 5 * VALUE_COST
                + json_str_size(whole.as_str())
                + (1..caps.len())
                    .map(|i| {
                        caps.get(i).map_or(5 + VALUE_COST, |g| {
                            80 + 6 * VALUE_COST
                                + json_str_size(g.as_str())
                                + names.get(i).copied().flatten().map_or(0, str::len)
                        })
                    })
                    .sum::<usize>();
            if total + size > self.limits.max_answer_bytes {
                if matches.is_empty() {
                    return Err(too_large(
                        "the first match with its groups",
                        size,
                        self.limits.max_answer_bytes,
                    ));
                }
                truncated = true;
                break;
            }
            total += size;
            let groups = (1..caps.len())
                .map(|i| {
                    caps.get(i).map(|g| CaptureGroup {
                        index: i,
                        name: names.get(i).copied().flatten().map(str::to_owned),
                        start: g.start(),
                        end: g.end(),
                        text: g.as_str().to_owned(),
                    })
                })
                .collect();
            matches.push(RegexMatch {
                start: whole.start(),
                end: whole.end(),
                text: whole.as_str().to_owned(),
                groups,
            });
        }
        Ok(RegexMatches {
            is_match: !matches.is_empty(),
            count: matches.len(),
            truncated,
            matches,
        })
    }

    /// Replace matches of a regular expression in a text. The replacement can refer to capture
    /// groups: `$1`, `${2}`, `${name}` (use `$$` for a literal `$`, and `${1}x` rather than `$1x`).
    /// Same syntax as `regex_match`.
    ///
    /// # Arguments
    /// * `pattern` - The regular expression, e.g. `(\d{4})-(\d{2})-(\d{2})`. At most 10,000
    ///   characters.
    /// * `text` - The text to transform (at most 10 MiB).
    /// * `replacement` - The replacement, e.g. `$3/$2/$1` or `${user} at ${domain}`.
    /// * `max_replacements` - Replace only the first N matches; 0 (default) replaces all.
    /// * `literal` - Insert `replacement` verbatim, without expanding `$` references (default false).
    /// * `case_insensitive` - Match letters regardless of case (default false).
    /// * `multi_line` - Make `^` and `$` match at line starts and ends (default false).
    #[tool(read_only, idempotent, title = "Regex replace")]
    #[allow(clippy::too_many_arguments)]
    pub fn regex_replace(
        &self,
        pattern: String,
        text: String,
        replacement: String,
        #[arg(default = 0, min = 0)] max_replacements: u32,
        #[arg(default = false)] literal: bool,
        #[arg(default = false)] case_insensitive: bool,
        #[arg(default = false)] multi_line: bool,
    ) -> Result<RegexReplaced, String> {
        check_size("text", &text)?;
        check_size("replacement", &replacement)?;
        let re = build_regex(&pattern, case_insensitive, multi_line)?;
        let template = if literal {
            budget::Template::literal(&replacement)
        } else {
            budget::Template::parse(&replacement, &re)
        };
        // The result's size is computed from the matches first; only a result within the budget
        // is built.
        let (text, replacements) = budget::replace(
            &re,
            &text,
            &template,
            max_replacements as usize,
            self.limits.max_answer_bytes,
        )?;
        Ok(RegexReplaced { text, replacements })
    }
}

// ---------------------------------------------------------------------------------------------
// Hashing
// ---------------------------------------------------------------------------------------------

/// A hash algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HashAlgorithm {
    /// SHA-256, 32 bytes
    Sha256,
    /// SHA-512, 64 bytes
    Sha512,
    /// SHA-1, 20 bytes (broken for security, fine for legacy checksums)
    Sha1,
    /// MD5, 16 bytes (broken for security, fine for legacy checksums)
    Md5,
    /// BLAKE3, 32 bytes (fast and secure)
    Blake3,
}

/// How binary output is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OutputEncoding {
    /// lowercase hexadecimal
    Hex,
    /// standard base64 with padding
    Base64,
}

/// How the input string is turned into bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InputFormat {
    /// the UTF-8 bytes of the text
    Text,
    /// decode the text as base64 (standard or URL-safe)
    Base64,
    /// decode the text as hexadecimal
    Hex,
}

/// A digest.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct HashResult {
    /// The algorithm used.
    pub algorithm: HashAlgorithm,
    /// The encoding of `digest`.
    pub encoding: OutputEncoding,
    /// The digest.
    pub digest: String,
    /// How many bytes were hashed.
    pub input_bytes: usize,
}

fn encode_output(bytes: &[u8], encoding: OutputEncoding) -> String {
    match encoding {
        OutputEncoding::Hex => hex::encode(bytes),
        OutputEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
    }
}

fn input_bytes(input: &str, format: InputFormat) -> Result<Vec<u8>, String> {
    check_size("input", input)?;
    match format {
        InputFormat::Text => Ok(input.as_bytes().to_vec()),
        InputFormat::Base64 => decode_base64(input),
        InputFormat::Hex => {
            let cleaned: String = input.chars().filter(|c| !c.is_whitespace()).collect();
            hex::decode(&cleaned).map_err(|e| format!("invalid hex input: {e}"))
        }
    }
}

/// Compute a digest.
pub fn digest(algorithm: HashAlgorithm, bytes: &[u8]) -> Vec<u8> {
    match algorithm {
        HashAlgorithm::Sha256 => sha2::Sha256::digest(bytes).to_vec(),
        HashAlgorithm::Sha512 => sha2::Sha512::digest(bytes).to_vec(),
        HashAlgorithm::Sha1 => sha1::Sha1::digest(bytes).to_vec(),
        HashAlgorithm::Md5 => md5::Md5::digest(bytes).to_vec(),
        HashAlgorithm::Blake3 => blake3::hash(bytes).as_bytes().to_vec(),
    }
}

/// Cryptographic hashes and checksums.
#[derive(Debug, Default)]
pub struct Hashing;

#[service]
impl Hashing {
    /// Compute a hash (digest) of a text or of binary data given as base64/hex: SHA-256 (default),
    /// SHA-512, SHA-1, MD5 or BLAKE3. Use it to fingerprint content, compare files' checksums, or
    /// build cache keys. Example: sha256 of "hello" is
    /// 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824.
    ///
    /// # Arguments
    /// * `text` - The data to hash, e.g. "hello" (at most 10 MiB).
    /// * `algorithm` - The hash algorithm (default "sha256").
    /// * `encoding` - The digest's encoding (default "hex").
    /// * `input_format` - How to turn `text` into bytes (default "text"); use "base64" or "hex" to
    ///   hash binary data.
    #[tool(read_only, idempotent, title = "Hash text")]
    pub fn hash_text(
        &self,
        text: String,
        #[arg(default = HashAlgorithm::Sha256)] algorithm: HashAlgorithm,
        #[arg(default = OutputEncoding::Hex)] encoding: OutputEncoding,
        #[arg(default = InputFormat::Text)] input_format: InputFormat,
    ) -> Result<HashResult, String> {
        let bytes = input_bytes(&text, input_format)?;
        Ok(HashResult {
            algorithm,
            encoding,
            digest: encode_output(&digest(algorithm, &bytes), encoding),
            input_bytes: bytes.len(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/// Base64 output.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Base64Encoded {
    /// The base64 text.
    pub base64: String,
    /// How many bytes were encoded.
    pub input_bytes: usize,
}

/// Decoded base64.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Base64Decoded {
    /// How many bytes the data decoded to.
    pub bytes: usize,
    /// Whether the bytes are valid UTF-8 text.
    pub is_utf8: bool,
    /// The decoded text, when it is valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The decoded bytes as lowercase hex, when they are not valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
}

fn lenient(alphabet: &base64::alphabet::Alphabet) -> GeneralPurpose {
    GeneralPurpose::new(
        alphabet,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    )
}

/// Decode base64 in either alphabet, with or without padding, ignoring whitespace.
pub fn decode_base64(data: &str) -> Result<Vec<u8>, String> {
    let cleaned: String = data.chars().filter(|c| !c.is_whitespace()).collect();
    let url_safe = cleaned.contains(['-', '_']);
    let engine = if url_safe {
        lenient(&base64::alphabet::URL_SAFE)
    } else {
        lenient(&base64::alphabet::STANDARD)
    };
    engine.decode(cleaned.as_bytes()).map_err(|e| {
        format!(
            "invalid base64: {e} (expected standard \"aGVsbG8=\" or URL-safe \"aGVsbG8\" base64)"
        )
    })
}

/// Base64 encoding and decoding.
#[derive(Debug, Default)]
pub struct Encoding;

#[service]
impl Encoding {
    /// Encode text as base64, e.g. "hello" -> "aGVsbG8=". Use for data URLs, HTTP Basic auth,
    /// embedding text in JSON/YAML safely, etc.
    ///
    /// # Arguments
    /// * `text` - The text to encode (its UTF-8 bytes), at most 10 MiB.
    /// * `url_safe` - Use the URL-safe alphabet (`-` and `_` instead of `+` and `/`), as in JWTs
    ///   (default false).
    /// * `padding` - End with `=` padding (default true; JWTs use false).
    #[tool(read_only, idempotent, title = "Base64 encode")]
    pub fn base64_encode(
        &self,
        text: String,
        #[arg(default = false)] url_safe: bool,
        #[arg(default = true)] padding: bool,
    ) -> Result<Base64Encoded, String> {
        check_size("text", &text)?;
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        let engine = match (url_safe, padding) {
            (false, true) => &STANDARD,
            (false, false) => &STANDARD_NO_PAD,
            (true, true) => &URL_SAFE,
            (true, false) => &URL_SAFE_NO_PAD,
        };
        Ok(Base64Encoded {
            base64: engine.encode(text.as_bytes()),
            input_bytes: text.len(),
        })
    }

    /// Decode base64 (standard or URL-safe alphabet, padding optional, whitespace ignored), e.g.
    /// "aGVsbG8=" -> "hello". Returns the text when the bytes are UTF-8, else their hex. Handy for
    /// reading JWT segments, data URLs, or encoded config values.
    ///
    /// # Arguments
    /// * `data` - The base64 text, e.g. "aGVsbG8=" or "eyJhbGciOiJIUzI1NiJ9".
    #[tool(read_only, idempotent, title = "Base64 decode")]
    pub fn base64_decode(&self, data: String) -> Result<Base64Decoded, String> {
        check_size("data", &data)?;
        let bytes = decode_base64(&data)?;
        let len = bytes.len();
        Ok(match String::from_utf8(bytes) {
            Ok(text) => Base64Decoded {
                bytes: len,
                is_utf8: true,
                text: Some(text),
                hex: None,
            },
            Err(e) => Base64Decoded {
                bytes: len,
                is_utf8: false,
                text: None,
                hex: Some(hex::encode(e.as_bytes())),
            },
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Text statistics
// ---------------------------------------------------------------------------------------------

/// Counts over a text.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct TextStats {
    /// Unicode scalar values (what most languages call characters).
    pub chars: usize,
    /// UTF-8 bytes.
    pub bytes: usize,
    /// Whitespace-separated words.
    pub words: usize,
    /// Lines (a final line without a newline counts; an empty text has 0).
    pub lines: usize,
    /// Lines with something other than whitespace.
    pub non_blank_lines: usize,
    /// Whitespace characters.
    pub whitespace_chars: usize,
    /// The length of the longest line, in characters.
    pub longest_line_chars: usize,
}

/// Count the characters, bytes, words and lines of a text (like `wc`, but Unicode-aware). Use it to
/// check length limits (tweets, SMS, database columns) or to size a document before processing.
///
/// # Arguments
/// * `text` - The text to measure, e.g. "Hello, world!\nSecond line." (at most 10 MiB).
#[tool(read_only, idempotent, title = "Text statistics")]
pub fn text_stats(text: String) -> Result<TextStats, String> {
    check_size("text", &text)?;
    let mut lines = 0;
    let mut non_blank_lines = 0;
    let mut longest_line_chars = 0;
    for line in text.lines() {
        lines += 1;
        if !line.trim().is_empty() {
            non_blank_lines += 1;
        }
        longest_line_chars = longest_line_chars.max(line.chars().count());
    }
    Ok(TextStats {
        chars: text.chars().count(),
        bytes: text.len(),
        words: text.split_whitespace().count(),
        lines,
        non_blank_lines,
        whitespace_chars: text.chars().filter(|c| c.is_whitespace()).count(),
        longest_line_chars,
    })
}

// ---------------------------------------------------------------------------------------------
// HMAC (gated on config `hmac_key`)
// ---------------------------------------------------------------------------------------------

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// An HMAC signature.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct HmacSignature {
    /// Always `HMAC-SHA256`.
    pub algorithm: String,
    /// The encoding of `signature`.
    pub encoding: OutputEncoding,
    /// The signature.
    pub signature: String,
    /// How many bytes were signed.
    pub message_bytes: usize,
}

/// The outcome of an HMAC check.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct HmacVerification {
    /// Whether the signature matches the message under the configured key.
    pub valid: bool,
}

/// HMAC-SHA256 with a key from the operator's config (`hmac_key`), which no tool ever reveals.
pub struct Hmac {
    key: Vec<u8>,
}

impl std::fmt::Debug for Hmac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hmac").field("key", &"<redacted>").finish()
    }
}

#[service]
impl Hmac {
    /// Only offered when the config has `hmac_key`.
    fn enabled(host: &HostApi) -> bool {
        host.config_value("hmac_key").is_some()
    }

    fn new(host: &HostApi) -> Result<Self, String> {
        Hmac::from_config(host.config_value("hmac_key"))
    }

    /// Read the key: a string's UTF-8 bytes, or `base64:...` for raw bytes.
    fn from_config(value: Option<&Value>) -> Result<Self, String> {
        let Some(Value::String(s)) = value else {
            return Err("config key `hmac_key` must be a string (quote it in YAML, e.g. hmac_key: \"12345\")".to_owned());
        };
        let key = match s.strip_prefix("base64:") {
            Some(b64) => decode_base64(b64)
                .map_err(|_| "config key `hmac_key`: invalid base64 after `base64:`".to_owned())?,
            None => s.as_bytes().to_vec(),
        };
        if key.is_empty() {
            return Err("config key `hmac_key` is empty".to_owned());
        }
        Ok(Hmac { key })
    }

    fn mac(&self, message: &[u8]) -> Result<HmacSha256, String> {
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .map_err(|_| "the configured HMAC key is unusable".to_owned())?;
        mac.update(message);
        Ok(mac)
    }

    /// Sign a message with HMAC-SHA256 using the server's configured secret key (the key itself is
    /// never shown). Use it to produce webhook signatures or tamper-evident tokens the server side
    /// can check.
    ///
    /// # Arguments
    /// * `message` - The message to sign, e.g. `{"order":42}` (its UTF-8 bytes; at most 10 MiB).
    /// * `encoding` - The signature's encoding (default "hex").
    #[tool(read_only, idempotent, title = "HMAC-SHA256 sign")]
    pub fn hmac_sign(
        &self,
        message: String,
        #[arg(default = OutputEncoding::Hex)] encoding: OutputEncoding,
    ) -> Result<HmacSignature, String> {
        check_size("message", &message)?;
        let tag = self.mac(message.as_bytes())?.finalize().into_bytes();
        Ok(HmacSignature {
            algorithm: "HMAC-SHA256".to_owned(),
            encoding,
            signature: encode_output(&tag, encoding),
            message_bytes: message.len(),
        })
    }

    /// Check an HMAC-SHA256 signature of a message against the server's configured secret key
    /// (constant-time comparison). Use it to verify a webhook payload or token.
    ///
    /// # Arguments
    /// * `message` - The message that was signed (its UTF-8 bytes).
    /// * `signature` - The signature to check, hex (64 characters) or base64, e.g. as returned by
    ///   `hmac_sign`.
    #[tool(read_only, idempotent, title = "HMAC-SHA256 verify")]
    pub fn hmac_verify(
        &self,
        message: String,
        signature: String,
    ) -> Result<HmacVerification, String> {
        check_size("message", &message)?;
        let sig = signature.trim();
        let sig = sig.strip_prefix("sha256=").unwrap_or(sig);
        let bytes = if sig.len().is_multiple_of(2) && sig.chars().all(|c| c.is_ascii_hexdigit()) {
            hex::decode(sig).map_err(|e| format!("invalid hex signature: {e}"))?
        } else {
            decode_base64(sig).map_err(|_| "signature is neither hex nor base64".to_owned())?
        };
        let valid = self.mac(message.as_bytes())?.verify_slice(&bytes).is_ok();
        Ok(HmacVerification { valid })
    }
}

export_plugin!(
    load: on_first_call,
    tools: [text_stats],
    services: [Json, Regex, Hashing, Encoding, Hmac],
);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const DOC: &str = r#"{"store":{"book":[{"title":"A","price":8,"tags":["x"]},{"title":"B","price":12}],"open":true}}"#;

    #[test]
    fn the_plugin_serves_hmac_only_with_a_key_and_checks_arguments_like_the_host() {
        use mcp_plugin_sdk::testing::{TestHost, TestPlugin};
        let plain = TestPlugin::new();
        assert!(plain.tool("hash_text").is_some());
        assert!(plain.tool("hmac_sign").is_none());
        assert_eq!(
            plain.problems()["hmac_sign"],
            "service Hmac is disabled: enabled() returned false"
        );
        let digest = plain
            .call("hash_text", json!({"text": "abc", "algorithm": "md5"}))
            .unwrap();
        assert_eq!(
            digest.structured_content.unwrap()["digest"],
            "900150983cd24fb0d6963f7d28e17f72"
        );
        let bad = plain
            .call("hash_text", json!({"text": "abc", "algorithm": "crc32"}))
            .unwrap();
        assert!(bad.is_error);
        assert!(
            bad.text()
                .starts_with("Invalid arguments for tool hash_text: argument `algorithm`"),
            "{}",
            bad.text()
        );

        let keyed = TestPlugin::with_host(TestHost::new().with_config(json!({"hmac_key": "key"})));
        let signed = keyed
            .call(
                "hmac_sign",
                json!({"message": "The quick brown fox jumps over the lazy dog"}),
            )
            .unwrap();
        // RFC 4231-style known answer (HMAC-SHA256, key "key").
        assert_eq!(
            signed.structured_content.unwrap()["signature"],
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
    }

    #[test]
    fn json_query_selects_with_locations() {
        let r = Json::default()
            .json_query(DOC.into(), "$.store.book[*].title".into(), 1000)
            .unwrap();
        assert_eq!(r.count, 2);
        assert_eq!(r.results[0].value, json!("A"));
        assert_eq!(r.results[0].path, "$['store']['book'][0]['title']");
        assert_eq!(r.results[1].pointer, "/store/book/1/title");
        let r = Json::default()
            .json_query(DOC.into(), "$.store.book[?@.price < 10].title".into(), 1000)
            .unwrap();
        assert_eq!(r.results.len(), 1);
        let r = Json::default()
            .json_query(DOC.into(), "$..price".into(), 1)
            .unwrap();
        assert_eq!(r.count, 2);
        assert!(r.truncated);
        assert_eq!(r.results.len(), 1);
    }

    #[test]
    fn json_query_errors() {
        let e = Json::default()
            .json_query(DOC.into(), "store.book".into(), 10)
            .unwrap_err();
        assert!(e.contains("invalid JSONPath"), "{e}");
        let e = Json::default()
            .json_query("{nope".into(), "$".into(), 10)
            .unwrap_err();
        assert!(e.contains("invalid JSON") && e.contains("line 1"), "{e}");
        let deep = "[".repeat(10_000);
        assert!(Json::default().json_query(deep, "$".into(), 10).is_err());
    }

    #[test]
    fn amplifying_json_queries_are_bounded_before_they_run() {
        // `$..*` on a deep document: every node's value repeats its subtree.
        let deep = format!(
            "{}{}{}",
            "[".repeat(100),
            "1,".repeat(50_000) + "1",
            "]".repeat(100)
        );
        let r = Json::default()
            .json_query(deep.clone(), "$..*".into(), 100_000)
            .unwrap();
        assert!(r.truncated && r.count > r.results.len());
        let size = serde_json::to_string(&r.results).unwrap().len();
        assert!(size <= MAX_OUTPUT_BYTES, "{size} bytes");
        // Unions that multiply the node list are refused before they run.
        let unions = format!(
            "$[{}][{}][{}]",
            ["0"; 200].join(","),
            ["0"; 200].join(","),
            ["0"; 200].join(",")
        );
        let e = Json::default()
            .json_query("[[[1]]]".into(), unions, 10)
            .unwrap_err();
        assert!(e.contains("could select up to"), "{e}");
        let e = Json::default()
            .json_query(deep, "$..*..*..*".into(), 10)
            .unwrap_err();
        assert!(e.contains("could select up to"), "{e}");
        // Too many values to parse.
        let wide = format!("[{}0]", "0,".repeat(MAX_JSON_VALUES));
        let e = Json::default()
            .json_query(wide, "$[0]".into(), 10)
            .unwrap_err();
        assert!(e.contains("values"), "{e}");
        // Long keys make long locations: they count too.
        let key = "k".repeat(10_000);
        let nested = format!(
            "{}1{}",
            format!("{{\"{key}\":").repeat(100),
            "}".repeat(100)
        );
        let r = Json::default()
            .json_query(nested, "$..*".into(), 1000)
            .unwrap();
        let size = serde_json::to_string(&r.results).unwrap().len();
        assert!(size <= MAX_OUTPUT_BYTES && r.truncated, "{size} bytes");
    }

    #[test]
    fn the_bounds_come_from_the_plugins_config_section() {
        let host =
            HostApi::for_test(serde_json::json!({"max_answer_bytes": 100, "max_json_values": 3}));
        let limits = Limits::from_config(&host).unwrap();
        assert_eq!((limits.max_answer_bytes, limits.max_json_values), (100, 3));
        assert_eq!(limits.max_query_nodes, MAX_SELECTED_NODES);
        let json = Json { limits };
        let e = json
            .json_format(format!("\"{}\"", "x".repeat(200)), 0, false)
            .unwrap_err();
        assert!(e.contains("100-byte limit"), "{e}");
        let e = json
            .json_query("[1,2,3,4]".into(), "$".into(), 10)
            .unwrap_err();
        assert!(e.contains("max_json_values"), "{e}");
        let bad = HostApi::for_test(serde_json::json!({"max_answer_bytes": "big"}));
        assert!(
            Limits::from_config(&bad)
                .unwrap_err()
                .contains("max_answer_bytes")
        );
    }

    #[test]
    fn regex_answers_are_sized_before_they_are_built() {
        // The reported attack: 45,000-char text and replacement, empty pattern, literal.
        let e = Regex::default()
            .regex_replace(
                String::new(),
                "a".repeat(45_000),
                "b".repeat(45_000),
                0,
                true,
                false,
                false,
            )
            .unwrap_err();
        assert!(e.contains("2025090000 bytes"), "{e}");
        // Many nested groups repeat each match: the answer stops at its budget.
        let pattern = format!("{}a{}", "(".repeat(200), ")".repeat(200));
        let r = Regex::default()
            .regex_match(pattern, "a".repeat(100_000), false, false, 10_000)
            .unwrap();
        assert!(r.truncated);
        assert!(serde_json::to_string(&r).unwrap().len() <= MAX_OUTPUT_BYTES);
        let e = Regex::default()
            .regex_match(
                format!("{}(?s).+{}", "(".repeat(20), ")".repeat(20)),
                "a".repeat(500_000),
                false,
                false,
                1,
            )
            .unwrap_err();
        assert!(e.contains("first match"), "{e}");
        // Deep pretty-printing grows with depth; the output stops at its budget.
        let deep = format!(
            "{}{}{}",
            "[".repeat(120),
            "0,".repeat(100_000) + "0",
            "]".repeat(120)
        );
        let e = Json::default().json_format(deep, 8, false).unwrap_err();
        assert!(e.contains("over the"), "{e}");
    }

    #[test]
    fn json_format_keeps_order_or_sorts() {
        let src = r#"{"b":1,"a":{"d":[1,2],"c":null}}"#;
        assert_eq!(
            Json::default().json_format(src.into(), 0, false).unwrap(),
            r#"{"b":1,"a":{"d":[1,2],"c":null}}"#
        );
        assert_eq!(
            Json::default().json_format(src.into(), 0, true).unwrap(),
            r#"{"a":{"c":null,"d":[1,2]},"b":1}"#
        );
        let pretty = Json::default()
            .json_format(r#"{"a":[1]}"#.into(), 4, false)
            .unwrap();
        assert_eq!(pretty, "{\n    \"a\": [\n        1\n    ]\n}");
        let e = Json::default()
            .json_format(r#"{"a":1} x"#.into(), 2, false)
            .unwrap_err();
        assert!(e.contains("trailing"), "{e}");
        assert!(Json::default().json_format("".into(), 2, true).is_err());
        assert!(
            Json::default()
                .json_format("[".repeat(100_000), 2, false)
                .is_err()
        );
    }

    #[test]
    fn regex_match_offsets_and_groups() {
        let r = Regex::default()
            .regex_match(
                r"(?<user>\w+)@(?<domain>[\w.]+)(!)?".into(),
                "mail bob@example.com or amy@x.org".into(),
                false,
                false,
                100,
            )
            .unwrap();
        assert!(r.is_match);
        assert_eq!(r.count, 2);
        let m = &r.matches[0];
        assert_eq!((m.start, m.end), (5, 20));
        assert_eq!(m.text, "bob@example.com");
        let g = m.groups[0].as_ref().unwrap();
        assert_eq!(
            (g.index, g.name.as_deref(), g.text.as_str()),
            (1, Some("user"), "bob")
        );
        assert_eq!(m.groups[1].as_ref().unwrap().start, 9);
        assert!(m.groups[2].is_none());
        let r = Regex::default()
            .regex_match("a".into(), "aaaa".into(), false, false, 2)
            .unwrap();
        assert_eq!(r.count, 2);
        assert!(r.truncated);
        let r = Regex::default()
            .regex_match("^B".into(), "a\nb".into(), true, true, 10)
            .unwrap();
        assert_eq!(r.matches[0].start, 2);
        let r = Regex::default()
            .regex_match("z".into(), "abc".into(), false, false, 10)
            .unwrap();
        assert!(!r.is_match && !r.truncated);
    }

    #[test]
    fn regex_rejects_bad_and_huge_patterns() {
        let e = Regex::default()
            .regex_match("(".into(), "x".into(), false, false, 10)
            .unwrap_err();
        assert!(e.contains("invalid regex"), "{e}");
        let e = Regex::default()
            .regex_match("a".repeat(10_001), "x".into(), false, false, 10)
            .unwrap_err();
        assert!(e.contains("too long"), "{e}");
        let e = Regex::default()
            .regex_match(r"\w{1000}{1000}".into(), "x".into(), false, false, 10)
            .unwrap_err();
        assert!(e.contains("simplify") || e.contains("invalid"), "{e}");
    }

    #[test]
    fn regex_replace_with_references() {
        let r = Regex::default()
            .regex_replace(
                r"(\d{4})-(\d{2})-(\d{2})".into(),
                "on 2026-11-29 and 2027-01-02".into(),
                "$3/$2/$1".into(),
                0,
                false,
                false,
                false,
            )
            .unwrap();
        assert_eq!(r.text, "on 29/11/2026 and 02/01/2027");
        assert_eq!(r.replacements, 2);
        let r = Regex::default()
            .regex_replace("a".into(), "aaa".into(), "$1".into(), 2, true, false, false)
            .unwrap();
        assert_eq!(r.text, "$1$1a");
        assert_eq!(r.replacements, 2);
        let r = Regex::default()
            .regex_replace(
                r"(?<w>\w+)".into(),
                "hi".into(),
                "<${w}>".into(),
                0,
                false,
                false,
                false,
            )
            .unwrap();
        assert_eq!(r.text, "<hi>");
    }

    #[test]
    fn hashes() {
        let h = |t: &str, a| {
            Hashing
                .hash_text(t.into(), a, OutputEncoding::Hex, InputFormat::Text)
                .unwrap()
                .digest
        };
        assert_eq!(
            h("hello", HashAlgorithm::Sha256),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(
            h("hello", HashAlgorithm::Md5),
            "5d41402abc4b2a76b9719d911017c592"
        );
        assert_eq!(
            h("hello", HashAlgorithm::Sha1),
            "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"
        );
        assert_eq!(h("", HashAlgorithm::Sha512).len(), 128);
        assert_eq!(
            h("", HashAlgorithm::Blake3),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
        let b = Hashing
            .hash_text(
                "aGVsbG8=".into(),
                HashAlgorithm::Md5,
                OutputEncoding::Base64,
                InputFormat::Base64,
            )
            .unwrap();
        assert_eq!(b.digest, "XUFAKrxLKna5cZ2REBfFkg==");
        assert_eq!(b.input_bytes, 5);
        let x = Hashing
            .hash_text(
                "68656c6c6f".into(),
                HashAlgorithm::Md5,
                OutputEncoding::Hex,
                InputFormat::Hex,
            )
            .unwrap();
        assert_eq!(x.digest, "5d41402abc4b2a76b9719d911017c592");
        assert!(
            Hashing
                .hash_text(
                    "zz".into(),
                    HashAlgorithm::Md5,
                    OutputEncoding::Hex,
                    InputFormat::Hex
                )
                .is_err()
        );
    }

    #[test]
    fn base64_round_trips() {
        assert_eq!(
            Encoding
                .base64_encode("hello".into(), false, true)
                .unwrap()
                .base64,
            "aGVsbG8="
        );
        assert_eq!(
            Encoding
                .base64_encode("hello".into(), true, false)
                .unwrap()
                .base64,
            "aGVsbG8"
        );
        assert_eq!(
            Encoding
                .base64_encode("\u{fb}\u{ff}".into(), true, true)
                .unwrap()
                .base64,
            "w7vDvw=="
        );
        let d = Encoding.base64_decode("aGVs\nbG8".into()).unwrap();
        assert_eq!(d.text.as_deref(), Some("hello"));
        let d = Encoding.base64_decode("w7vDvw".into()).unwrap();
        assert_eq!(d.text.as_deref(), Some("\u{fb}\u{ff}"));
        let d = Encoding.base64_decode("_w".into()).unwrap();
        assert!(!d.is_utf8);
        assert_eq!(d.hex.as_deref(), Some("ff"));
        let e = Encoding.base64_decode("a!b".into()).unwrap_err();
        assert!(e.contains("invalid base64"), "{e}");
    }

    #[test]
    fn stats() {
        let s = text_stats("Héllo, world!\n\n  second line  ".into()).unwrap();
        assert_eq!(s.chars, 30);
        assert_eq!(s.bytes, 31);
        assert_eq!(s.words, 4);
        assert_eq!(s.lines, 3);
        assert_eq!(s.non_blank_lines, 2);
        assert_eq!(s.longest_line_chars, 15);
        let e = text_stats(String::new()).unwrap();
        assert_eq!((e.chars, e.lines, e.words), (0, 0, 0));
    }

    #[test]
    fn hmac_sign_and_verify() {
        assert!(Hmac::from_config(None).is_err());
        assert!(Hmac::from_config(Some(&json!(""))).is_err());
        assert!(Hmac::from_config(Some(&json!(42))).is_err());
        let h = Hmac::from_config(Some(&json!("key"))).unwrap();
        assert!(!format!("{h:?}").contains("key\""));
        let s = h
            .hmac_sign(
                "The quick brown fox jumps over the lazy dog".into(),
                OutputEncoding::Hex,
            )
            .unwrap();
        assert_eq!(
            s.signature,
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
        let msg = "The quick brown fox jumps over the lazy dog".to_owned();
        assert!(
            h.hmac_verify(msg.clone(), s.signature.clone())
                .unwrap()
                .valid
        );
        assert!(
            h.hmac_verify(msg.clone(), format!("sha256={}", s.signature))
                .unwrap()
                .valid
        );
        let b64 = h
            .hmac_sign(msg.clone(), OutputEncoding::Base64)
            .unwrap()
            .signature;
        assert!(h.hmac_verify(msg.clone(), b64).unwrap().valid);
        assert!(!h.hmac_verify("other".into(), s.signature).unwrap().valid);
        assert!(h.hmac_verify(msg, "not a sig!".into()).is_err());
        let raw = Hmac::from_config(Some(&json!("base64:a2V5"))).unwrap();
        assert_eq!(raw.key, b"key");
    }
}
