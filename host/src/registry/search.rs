//! Tool search: BM25 ranking (the `bm25` crate, with its English tokenizer: Unicode words, stop
//! words, Snowball stemming) over each served tool's name, title, description, and argument names
//! and descriptions. Identifiers are split into words first (`current_time`, `hashText`,
//! `Asia/Tokyo`), and the name, title and argument names count more than running text (they are
//! indexed several times: a BM25F-style field weight). Built once per tool set, on first use.

use std::sync::Arc;

use bm25::{DefaultTokenizer, Embedder, EmbedderBuilder, Language, Scorer, Tokenizer};
use serde_json::Value;

use super::Tool;

/// How many times each field is indexed: matches in names and titles count most.
const NAME_WEIGHT: usize = 3;
const TITLE_WEIGHT: usize = 2;
const ARGUMENT_NAME_WEIGHT: usize = 2;

/// The English tokenizer, after splitting identifiers into words.
struct ToolTokenizer(DefaultTokenizer);

impl Tokenizer for ToolTokenizer {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        self.0.tokenize(&split_identifiers(input_text))
    }
}

/// `current_time` → `current time`, `hashText` → `hash Text`, `Asia/Tokyo` → `Asia Tokyo`.
fn split_identifiers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut previous: Option<char> = None;
    for c in text.chars() {
        match c {
            '_' | '-' | '/' | '.' | ':' | '$' | '`' => out.push(' '),
            c if c.is_uppercase() && previous.is_some_and(char::is_lowercase) => {
                out.push(' ');
                out.push(c);
            }
            c => out.push(c),
        }
        previous = Some(c);
    }
    out
}

/// The text a tool is found by, fields repeated by weight.
fn document(tool: &Tool) -> String {
    let d = tool.descriptor();
    let mut parts: Vec<&str> = Vec::new();
    parts.extend(std::iter::repeat_n(tool.name.as_str(), NAME_WEIGHT));
    if let Some(title) = &d.title {
        parts.extend(std::iter::repeat_n(title.as_str(), TITLE_WEIGHT));
    }
    parts.push(&d.description);
    if let Some(Value::Object(props)) = d.input_schema.get("properties") {
        for (name, schema) in props {
            parts.extend(std::iter::repeat_n(name.as_str(), ARGUMENT_NAME_WEIGHT));
            if let Some(text) = schema.get("description").and_then(Value::as_str) {
                parts.push(text);
            }
        }
    }
    parts.join("\n")
}

/// A BM25 index of a tool set.
pub struct ToolIndex {
    embedder: Embedder<u32, ToolTokenizer>,
    scorer: Scorer<usize, u32>,
    tools: Vec<Arc<Tool>>,
}

impl std::fmt::Debug for ToolIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolIndex")
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl ToolIndex {
    /// Index `tools`.
    pub fn build<'a>(tools: impl Iterator<Item = &'a Arc<Tool>>) -> ToolIndex {
        let tools: Vec<Arc<Tool>> = tools.cloned().collect();
        let documents: Vec<String> = tools.iter().map(|t| document(t)).collect();
        let corpus: Vec<&str> = documents.iter().map(String::as_str).collect();
        let tokenizer = ToolTokenizer(DefaultTokenizer::new(Language::English));
        let embedder: Embedder<u32, ToolTokenizer> =
            EmbedderBuilder::with_tokenizer_and_fit_to_corpus(tokenizer, &corpus).build();
        let mut scorer = Scorer::new();
        for (i, text) in documents.iter().enumerate() {
            scorer.upsert(&i, embedder.embed(text));
        }
        ToolIndex {
            embedder,
            scorer,
            tools,
        }
    }

    /// The tools matching `query` that `visible` accepts, best first (ties by name), at most
    /// `limit`, with their scores.
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        visible: impl Fn(&Tool) -> bool,
    ) -> Vec<(&Arc<Tool>, f32)> {
        let query = self.embedder.embed(query);
        let mut found: Vec<(&Arc<Tool>, f32)> = self
            .scorer
            .matches(&query)
            .into_iter()
            .filter_map(|m| self.tools.get(m.id).map(|t| (t, m.score)))
            .filter(|(t, _)| visible(t))
            .collect();
        found.sort_by(|(a, x), (b, y)| y.total_cmp(x).then_with(|| a.name.cmp(&b.name)));
        found.truncate(limit);
        found
    }

    /// How many tools are indexed.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_into_words() {
        assert_eq!(split_identifiers("current_time"), "current time");
        assert_eq!(split_identifiers("hashText"), "hash Text");
        assert_eq!(split_identifiers("Asia/Tokyo"), "Asia Tokyo");
        assert_eq!(split_identifiers("SHA256"), "SHA256");
        let t = ToolTokenizer(DefaultTokenizer::new(Language::English));
        assert_eq!(
            t.tokenize("What time is it in Tokyo?"),
            vec!["time".to_owned(), "tokyo".to_owned()]
        );
        assert_eq!(
            t.tokenize("hashing base64_encode"),
            vec!["hash", "base64", "encod"]
        );
    }
}
