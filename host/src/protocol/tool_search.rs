//! Tool search, for agents with `tools: search`: their `tools/list` is a small fixed set — a search
//! tool, a call tool, and the agent's `always_list` tools — instead of every tool, so a thousand
//! tools cost the model's context a handful. The search tool ranks the tools the agent may see for a
//! query ([`crate::registry::search`]) and returns the best with their descriptions and input
//! schemas; the call tool runs one by name through the same path as a direct `tools/call` (agent
//! view, capability checks, schema validation, limits). A direct `tools/call` of any tool the agent
//! may see keeps working.

use std::sync::LazyLock;

use serde_json::{Value, json};

use super::jsonrpc::RpcError;
use super::{Answer, Request, pages};
use crate::registry::{Listing, Registry};

/// The search tool's name.
pub(crate) const SEARCH_TOOL: &str = "search_tools";
/// The call tool's name.
pub(crate) const CALL_TOOL: &str = "call_tool";
/// Matches returned when the query does not say.
const DEFAULT_LIMIT: u64 = 5;
/// Matches returned at most.
const MAX_LIMIT: u64 = 20;

/// The two tools' names and list entries (written once).
static LISTINGS: LazyLock<[(&str, Listing); 2]> = LazyLock::new(|| {
    [
        (
            CALL_TOOL,
            Listing::of(&json!({
                "name": CALL_TOOL,
                "title": "Call a tool",
                "description": "Call a tool found with search_tools: give its exact name and arguments \
                                that match its input schema. Returns the tool's own result.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "The tool's name, as search_tools returned it."},
                        "arguments": {"type": "object", "description": "The tool's arguments, per its input schema."}
                    },
                    "required": ["name"],
                    "additionalProperties": false
                }
            })),
        ),
        (
            SEARCH_TOOL,
            Listing::of(&json!({
                "name": SEARCH_TOOL,
                "title": "Search tools",
                "description": "Find the right tool for a task. Only a few tools are listed; many more \
                                are available. Describe what you want to do in plain words (e.g. \
                                \"current time in Tokyo\", \"hash text with sha256\"); the best-matching \
                                tools come back, best first, with their descriptions and input schemas. \
                                Then run one with call_tool (or call it directly by name).",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What you want to do, in plain words."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
                                  "description": "How many tools to return at most."}
                    },
                    "required": ["query"],
                    "additionalProperties": false
                },
                "outputSchema": {
                    "type": "object",
                    "properties": {
                        "tools": {"type": "array", "items": {"type": "object"}, "description": "The matching tools, best first."}
                    },
                    "required": ["tools"]
                },
                "annotations": {"readOnlyHint": true, "idempotentHint": true}
            })),
        ),
    ]
});

/// `tools/list` in search mode: the search and call tools and the agent's `always_list` tools, in
/// name order (so cursors work as for the full list).
pub(crate) fn list(
    req: &Request<'_>,
    agent: &crate::access::Agent,
    registry: &Registry,
) -> Result<Answer, RpcError> {
    let mut items: Vec<(&str, &Listing)> = LISTINGS
        .iter()
        .map(|(name, listing)| (*name, listing))
        .collect();
    items.extend(
        registry
            .view(Some(&agent.name))
            .tools()
            .filter(|t| agent.always_lists(&t.name) && !is_builtin(&t.name))
            .map(|t| (t.name.as_str(), &t.listing)),
    );
    items.sort_by(|a, b| a.0.cmp(b.0));
    pages::page(req, "tools", |_| items.into_iter())
}

/// Whether `name` is one of the tools search mode adds.
pub(crate) fn is_builtin(name: &str) -> bool {
    name == SEARCH_TOOL || name == CALL_TOOL
}

/// A tool result the model reads: an error text (`isError`).
fn error_result(text: String) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": true })
}

/// The search tool: the tools the agent may see that best match `query`, best first.
pub(crate) fn search(req: &Request<'_>, registry: &Registry, args: Option<&Value>) -> Answer {
    let args = args.and_then(Value::as_object).cloned().unwrap_or_default();
    let Some(query) = args.get("query").and_then(Value::as_str) else {
        return Answer::plain(error_result(
            "search_tools needs a string \"query\": what you want to do, in plain words".into(),
        ));
    };
    let limit = match args.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(v) => match v.as_u64().filter(|n| (1..=MAX_LIMIT).contains(n)) {
            Some(n) => n,
            None => {
                return Answer::plain(error_result(format!(
                    "limit must be an integer from 1 to {MAX_LIMIT}"
                )));
            }
        },
    };
    if let Some(unknown) = args.keys().find(|k| *k != "query" && *k != "limit") {
        return Answer::plain(error_result(format!(
            "unknown argument {unknown:?}: search_tools takes query and limit"
        )));
    }
    let agent = req.ex.request.agent();
    let view = registry.view(agent.map(|a| a.name.as_str()));
    let found = view.search_index().search(query, limit as usize, |t| {
        agent.is_none_or(|a| a.permits(&t.name))
    });
    let tools: Vec<Value> = found
        .into_iter()
        .map(|(tool, _)| {
            let Value::Object(mut listing) = tool.listing.value() else {
                return Value::Null;
            };
            listing.retain(|key, _| {
                ["name", "title", "description", "inputSchema", "annotations"]
                    .contains(&key.as_str())
            });
            Value::Object(listing)
        })
        .collect();
    let structured = json!({ "tools": tools });
    Answer::plain(json!({
        "content": [{ "type": "text", "text": structured.to_string() }],
        "structuredContent": structured,
    }))
}

/// The call tool's target: the tool name and its arguments, or the error result to answer.
pub(crate) fn target(args: Option<&Value>) -> Result<(String, Option<Value>), Value> {
    let Some(args) = args.and_then(Value::as_object) else {
        return Err(error_result(
            "call_tool needs {\"name\": <tool name>, \"arguments\": {...}}".into(),
        ));
    };
    let Some(name) = args.get("name").and_then(Value::as_str) else {
        return Err(error_result(
            "call_tool needs a string \"name\": the tool to call".into(),
        ));
    };
    if let Some(unknown) = args.keys().find(|k| *k != "name" && *k != "arguments") {
        return Err(error_result(format!(
            "unknown argument {unknown:?}: call_tool takes name and arguments"
        )));
    }
    let arguments = args.get("arguments").filter(|a| !a.is_null()).cloned();
    if arguments.as_ref().is_some_and(|a| !a.is_object()) {
        return Err(error_result(
            "call_tool's \"arguments\" must be an object".into(),
        ));
    }
    Ok((name.to_owned(), arguments))
}

/// What the call tool answers for a tool the agent cannot see (or that does not exist).
pub(crate) fn unknown_target(name: &str) -> Value {
    error_result(format!(
        "Unknown tool: {name} (search_tools finds the tools you can call)"
    ))
}
