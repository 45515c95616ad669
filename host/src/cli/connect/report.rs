//! What `mcp-host connect` prints: the server, its lists and each request's outcome — as text
//! for a person (on stdout; progress and authorization steps go to stderr), or as one JSON
//! object (`--json`).

use mcp_host::plugins::upstream::client::Client;
use mcp_plugin_sdk::wire::{Manifest, PromptDescriptor, ResourceDescriptor, ToolDescriptor};
use serde_json::{Map, Value, json};

use super::Outcome;

/// The report, built as `connect` goes, written at the end.
pub(crate) struct Report {
    json: bool,
    doc: Map<String, Value>,
    text: String,
}

impl Report {
    pub(crate) fn new(json: bool) -> Report {
        Report {
            json,
            doc: Map::new(),
            text: String::new(),
        }
    }

    /// Append a line of text.
    fn line(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
    }

    /// Push `value` onto the JSON array `key`.
    fn push(&mut self, key: &str, value: Value) {
        if let Value::Array(items) = self.doc.entry(key).or_insert_with(|| json!([])) {
            items.push(value);
        }
    }

    /// Nothing could be done: `what`, and why.
    pub(crate) fn failed(&mut self, what: &str, why: &str) {
        self.doc
            .insert("error".into(), json!(format!("{what}: {why}")));
        self.line(&format!("{what}: {why}"));
    }

    /// Connected to `url`: the server and its tools.
    pub(crate) fn connected(&mut self, url: &str, client: &Client) {
        let server = client.server();
        let info = &server["serverInfo"];
        let (name, version) = (
            info["name"].as_str().unwrap_or("(unnamed)"),
            info["version"].as_str().unwrap_or(""),
        );
        let protocol = server["protocolVersion"].as_str().unwrap_or("?");
        self.line(&format!(
            "Connected to {name} {version} (protocol {protocol}) at {url}"
        ));
        self.doc.insert("url".into(), json!(url));
        self.doc.insert("server".into(), server);
        let tools = &client.manifest().tools;
        self.line(&format!("Tools ({}):", tools.len()));
        for tool in tools {
            self.line(&format!(
                "  {}  {}",
                tool.name,
                first_line(&tool.description)
            ));
        }
        let listed = tools.iter().map(tool_json).collect();
        self.doc.insert("tools".into(), Value::Array(listed));
    }

    /// The resources and templates listed.
    pub(crate) fn resources(&mut self, manifest: &Manifest) {
        self.line(&format!("Resources ({}):", manifest.resources.len()));
        for r in &manifest.resources {
            let kind = if r.template { " (template)" } else { "" };
            self.line(&format!("  {}{kind}  {}", r.uri, r.name));
        }
        let listed = manifest.resources.iter().map(resource_json).collect();
        self.doc.insert("resources".into(), Value::Array(listed));
    }

    /// The prompts listed.
    pub(crate) fn prompts(&mut self, manifest: &Manifest) {
        self.line(&format!("Prompts ({}):", manifest.prompts.len()));
        for p in &manifest.prompts {
            self.line(&format!("  {}  {}", p.name, first_line(&p.description)));
        }
        let listed = manifest.prompts.iter().map(prompt_json).collect();
        self.doc.insert("prompts".into(), Value::Array(listed));
    }

    /// A tool call's outcome; whether it failed (a request error, or a tool error result).
    pub(crate) fn call(
        &mut self,
        name: &str,
        arguments: &Map<String, Value>,
        outcome: &Outcome,
    ) -> bool {
        let args = Value::Object(arguments.clone());
        self.line(&format!("Call {name} {args}:"));
        let failed = self.outcome(outcome);
        let mut entry = json!({"tool": name, "arguments": args});
        record(&mut entry, outcome);
        self.push("calls", entry);
        failed
    }

    /// A resource read's outcome; whether it failed.
    pub(crate) fn read(&mut self, uri: &str, outcome: &Outcome) -> bool {
        self.line(&format!("Read {uri}:"));
        let failed = self.outcome(outcome);
        let mut entry = json!({"uri": uri});
        record(&mut entry, outcome);
        self.push("reads", entry);
        failed
    }

    /// A prompt's outcome; whether it failed.
    pub(crate) fn prompt(&mut self, name: &str, outcome: &Outcome) -> bool {
        self.line(&format!("Prompt {name}:"));
        let failed = self.outcome(outcome);
        let mut entry = json!({"prompt": name});
        record(&mut entry, outcome);
        self.push("prompts_got", entry);
        failed
    }

    /// An outcome as text; whether it failed.
    fn outcome(&mut self, outcome: &Outcome) -> bool {
        match outcome {
            Ok(result) => {
                let error = result.get("isError") == Some(&Value::Bool(true));
                for text in texts(result) {
                    self.line(&format!("  {text}"));
                }
                if error {
                    self.line("  (the tool reported an error)");
                }
                error
            }
            Err(e) => {
                self.line(&format!("  failed: {e}"));
                true
            }
        }
    }

    /// Write the report: the text, or the JSON document.
    pub(crate) fn write(&self, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
        if self.json {
            crate::cli::write_json(out, &self.doc)
        } else {
            out.write_all(self.text.as_bytes())?;
            Ok(())
        }
    }
}

/// `outcome` into a JSON entry: its `result` or its `error`.
fn record(entry: &mut Value, outcome: &Outcome) {
    match outcome {
        Ok(result) => entry["result"] = result.clone(),
        Err(e) => entry["error"] = json!(e.to_string()),
    }
}

/// A result's content as lines of text: text content as it is, anything else as JSON.
fn texts(result: &Value) -> Vec<String> {
    let content = result
        .get("content")
        .or_else(|| result.get("contents"))
        .or_else(|| result.get("messages"))
        .and_then(Value::as_array);
    match content {
        Some(items) => items
            .iter()
            .map(|item| match item.get("text").and_then(Value::as_str) {
                Some(text) => text.to_owned(),
                None => item.to_string(),
            })
            .collect(),
        None => vec![result.to_string()],
    }
}

/// The first line of a description.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// The fields of `object` that are set: `(name, value)` pairs, `None`s left out.
fn set(pairs: Vec<(&str, Option<Value>)>) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_owned(), v?)))
            .collect(),
    )
}

/// A tool as the server listed it (MCP's `Tool`).
fn tool_json(tool: &ToolDescriptor) -> Value {
    let annotations = serde_json::to_value(&tool.annotations)
        .ok()
        .filter(|a| a.as_object().is_some_and(|o| !o.is_empty()));
    set(vec![
        ("name", Some(json!(tool.name))),
        ("title", tool.title.as_ref().map(|t| json!(t))),
        ("description", Some(json!(tool.description))),
        ("inputSchema", Some(tool.input_schema.clone())),
        ("outputSchema", tool.output_schema.clone()),
        ("annotations", annotations),
        ("_meta", tool.meta.clone()),
    ])
}

/// A resource or resource template as the server listed it.
fn resource_json(r: &ResourceDescriptor) -> Value {
    let uri = if r.template { "uriTemplate" } else { "uri" };
    set(vec![
        (uri, Some(json!(r.uri))),
        ("name", Some(json!(r.name))),
        ("title", r.title.as_ref().map(|t| json!(t))),
        ("description", r.description.as_ref().map(|d| json!(d))),
        ("mimeType", r.mime_type.as_ref().map(|m| json!(m))),
        ("_meta", r.meta.clone()),
    ])
}

/// A prompt as the server listed it.
fn prompt_json(p: &PromptDescriptor) -> Value {
    set(vec![
        ("name", Some(json!(p.name))),
        ("title", p.title.as_ref().map(|t| json!(t))),
        ("description", Some(json!(p.description))),
        ("arguments", serde_json::to_value(&p.arguments).ok()),
        ("_meta", p.meta.clone()),
    ])
}
