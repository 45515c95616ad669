//! Result filters (`#[filter]`): organisation-specific detectors the host runs over tool
//! results, beside its built-in ones, when its guardrails name them
//! (`detect: {"plugin:<plugin>/<filter>": redact}`). A filter gets the result's text strings
//! and answers what it found in them; the operator's configuration decides what a finding does
//! (`flag`, `redact`, `block`), as for any detector. A filter is called like a tool (in-process
//! or in the plugin's sandboxed worker, with the plugin's timeout) but never served as one.
//!
//! ```
//! use mcp_plugin_sdk::{FilterInput, FilterVerdict, filter};
//!
//! /// Flags our internal ticket ids (`TCK-` and digits).
//! #[filter]
//! fn ticket_ids(input: FilterInput) -> FilterVerdict {
//!     let mut verdict = FilterVerdict::default();
//!     for text in &input.texts {
//!         for word in text.split(|c: char| !c.is_ascii_alphanumeric() && c != '-') {
//!             let digits = word.strip_prefix("TCK-").unwrap_or_default();
//!             if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
//!                 verdict.found(word);
//!             }
//!         }
//!     }
//!     verdict
//! }
//!
//! let input = FilterInput {
//!     texts: vec!["see TCK-1234 and TCK-x".into()],
//!     ..FilterInput::default()
//! };
//! assert_eq!(ticket_ids(input).matches, vec!["TCK-1234".to_owned()]);
//! ```

use serde::{Deserialize, Serialize};

/// What a filter gets: the result's text strings (its text content, and every string of its
/// `structuredContent`), and which tool returned it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct FilterInput {
    /// The tool as clients call it.
    pub tool: String,
    /// The plugin or upstream that served it.
    pub source: String,
    /// The result's text strings, in order.
    pub texts: Vec<String>,
}

/// What a filter found: the substrings of the input's texts that match it (each occurrence of
/// each is counted, and replaced by `[REDACTED:plugin:<plugin>/<filter>]` when the operator
/// redacts). Nothing found: no finding. The host refuses (and blocks the result of) a verdict
/// with more than 1,000 matches, an empty one, or one over 4,096 bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct FilterVerdict {
    /// The matched substrings.
    pub matches: Vec<String>,
}

impl FilterVerdict {
    /// Record `matched` (once: a repeat is ignored).
    pub fn found(&mut self, matched: impl Into<String>) {
        let matched = matched.into();
        if !matched.is_empty() && !self.matches.contains(&matched) {
            self.matches.push(matched);
        }
    }
}
