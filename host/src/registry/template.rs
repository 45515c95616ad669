//! RFC 6570 URI templates in reverse: which template a read URI belongs to, and its variables.
//!
//! Crates for URI templates expand them; a resource server needs the opposite (match a URI and
//! extract the values), so the template is translated into an anchored regular expression, compiled
//! at its first match (building a regex engine costs tens of µs, paid at start-up for every template
//! of every plugin otherwise; most are never read).
//! Supported expressions: `{var}` (a value without `/ ? #`), `{+var}` (reserved: may contain `/`),
//! `{#var}`, `{/var}`, `{.var}`, `{;var}`, `{?a,b}` / `{&a}` (query parameters in any order), and
//! lists `{a,b}`. Values are percent-decoded.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

/// Why a URI template is not one this host can match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{` without its `}`.
    #[error("unclosed `{{` in {0:?}")]
    Unclosed(String),
    /// An expression whose variable names are empty or not made of the allowed characters.
    #[error("invalid expression {{{expression}}} in {template:?}")]
    InvalidExpression {
        /// The expression, without its braces.
        expression: String,
        /// The template.
        template: String,
    },
}

/// A parsed URI template.
#[derive(Debug, Clone)]
pub struct UriTemplate {
    template: String,
    /// The anchored pattern a matching URI follows (literal parts escaped).
    pattern: String,
    /// `pattern`, compiled at the first match (`None` if it does not compile: logged once).
    regex: OnceLock<Option<Regex>>,
    /// Per capture group: the variable names it holds, and whether they come as a query string.
    groups: Vec<(Vec<String>, Op)>,
    variables: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Simple,
    Reserved,
    Query,
}

impl UriTemplate {
    /// Parse `template`; `Err` says what is wrong with its syntax. The regular expression behind it
    /// is compiled at the first match (only a pattern over the regex crate's size limit could fail
    /// there: logged once, and the template then matches nothing).
    ///
    /// ```
    /// use mcp_host::registry::template::UriTemplate;
    /// let t = UriTemplate::parse("series://readings/{indicator}{?days}").unwrap();
    /// let vars = t.matches("series://readings/heart_rate?days=7").unwrap();
    /// assert_eq!(vars["indicator"], "heart_rate");
    /// assert_eq!(vars["days"], "7");
    /// assert!(t.matches("series://readings/a/b").is_none());
    /// ```
    pub fn parse(template: &str) -> Result<UriTemplate, TemplateError> {
        let mut pattern = String::from("^");
        let mut groups = Vec::new();
        let mut variables = Vec::new();
        let mut rest = template;
        while let Some(start) = rest.find('{') {
            pattern.push_str(&regex::escape(&rest[..start]));
            let len = rest[start..]
                .find('}')
                .ok_or_else(|| TemplateError::Unclosed(template.to_owned()))?;
            let expr = &rest[start + 1..start + len];
            let (op, body) = match expr.chars().next() {
                Some(c @ ('+' | '#' | '/' | '.' | ';' | '?' | '&')) => (Some(c), &expr[1..]),
                _ => (None, expr),
            };
            let names: Vec<String> = body
                .split(',')
                .map(|v| v.trim_end_matches('*'))
                .map(|v| v.split(':').next().unwrap_or(v).to_owned())
                .collect();
            if names.iter().any(|n| {
                n.is_empty()
                    || !n
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '%')
            }) {
                return Err(TemplateError::InvalidExpression {
                    expression: expr.to_owned(),
                    template: template.to_owned(),
                });
            }
            variables.extend(names.iter().cloned());
            let value = |reserved: bool| if reserved { "([^?#]*?)" } else { "([^/?#,&]*)" };
            match op {
                Some('?' | '&') => {
                    let lead = if op == Some('?') { r"\?" } else { "&" };
                    pattern.push_str(&format!("(?:{lead}([^#]*))?"));
                    groups.push((names, Op::Query));
                }
                _ => {
                    let (prefix, sep, reserved) = match op {
                        Some('+') => ("", ",", true),
                        Some('#') => ("#", ",", true),
                        Some('/') => ("/", "/", false),
                        Some('.') => (r"\.", r"\.", false),
                        Some(';') => (";", ";", false),
                        _ => ("", ",", false),
                    };
                    pattern.push_str(prefix);
                    for (i, name) in names.iter().enumerate() {
                        if i > 0 {
                            pattern.push_str(sep);
                        }
                        if op == Some(';') {
                            pattern.push_str(&regex::escape(name));
                            pattern.push('=');
                        }
                        pattern.push_str(value(reserved));
                        groups.push((
                            vec![name.clone()],
                            if reserved { Op::Reserved } else { Op::Simple },
                        ));
                    }
                }
            }
            rest = &rest[start + len + 1..];
        }
        pattern.push_str(&regex::escape(rest));
        pattern.push('$');
        Ok(UriTemplate {
            template: template.to_owned(),
            pattern,
            regex: OnceLock::new(),
            groups,
            variables,
        })
    }

    /// The variable names, in template order.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// The variables of `uri` when it matches (string values, percent-decoded).
    pub fn matches(&self, uri: &str) -> Option<Map<String, Value>> {
        let regex = self.regex.get_or_init(|| {
            // Literal parts are escaped and the rest is fixed, so only a size limit can refuse it.
            Regex::new(&self.pattern)
                .inspect_err(|e| {
                    tracing::error!(template = %self.template, "URI template does not compile: {e}");
                })
                .ok()
        });
        let captures = regex.as_ref()?.captures(uri)?;
        let mut vars = Map::new();
        for (i, (names, op)) in self.groups.iter().enumerate() {
            let Some(text) = captures.get(i + 1).map(|m| m.as_str()) else {
                continue;
            };
            match op {
                Op::Simple | Op::Reserved => {
                    vars.insert(names[0].clone(), Value::String(decode(text)?));
                }
                Op::Query => {
                    for pair in text.split('&').filter(|p| !p.is_empty()) {
                        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                        let k = decode(k)?;
                        if names.contains(&k) {
                            vars.insert(k, Value::String(decode(v)?));
                        }
                    }
                }
            }
        }
        Some(vars)
    }
}

/// Percent-decode `text` (`None` when the result is not UTF-8 or an escape is broken).
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(t: &str, uri: &str) -> Option<Value> {
        UriTemplate::parse(t)
            .unwrap()
            .matches(uri)
            .map(Value::Object)
    }

    #[test]
    fn simple_variables_stop_at_path_separators_and_are_decoded() {
        assert_eq!(
            vars("test://template/{id}/data", "test://template/123/data"),
            Some(serde_json::json!({"id": "123"}))
        );
        assert_eq!(
            vars("test://template/{id}/data", "test://template/1/2/data"),
            None
        );
        assert_eq!(
            vars("x://{a}", "x://caf%C3%A9"),
            Some(serde_json::json!({"a": "café"}))
        );
        assert_eq!(vars("x://{a}", "x://bad%zz"), None);
    }

    #[test]
    fn reserved_path_and_query_expressions() {
        assert_eq!(
            vars("file:///{+path}", "file:///src/main.rs"),
            Some(serde_json::json!({"path": "src/main.rs"}))
        );
        assert_eq!(
            vars(
                "x://items{/id}{?sort,limit}",
                "x://items/7?limit=3&sort=asc"
            ),
            Some(serde_json::json!({"id": "7", "sort": "asc", "limit": "3"}))
        );
        assert_eq!(
            vars("x://items{/id}{?sort,limit}", "x://items/7"),
            Some(serde_json::json!({"id": "7"}))
        );
        assert_eq!(
            UriTemplate::parse("x://{a").unwrap_err().to_string(),
            r#"unclosed `{` in "x://{a""#
        );
        assert_eq!(
            UriTemplate::parse("x://{a b}").unwrap_err().to_string(),
            r#"invalid expression {a b} in "x://{a b}""#
        );
    }
}
