//! An upstream's lists as a plugin manifest: `tools/list`, `resources/list`,
//! `resources/templates/list` and `prompts/list` (each read only when the server advertises it,
//! every page) turned into the descriptors the registry serves. Upstream definitions never ask
//! for the caller: no caller identity is passed to an upstream.
//!
//! A reading is bounded ([`Bounds`]): in time (every page waits at most until the reading's
//! deadline), in pages per list, and in definitions (count and JSON size) in all; a cursor a
//! list sent before is refused (the list would never end). Each bound's refusal names its key.

use std::collections::HashSet;
use std::hash::BuildHasher as _;
use std::time::{Duration, Instant};

use mcp_plugin_sdk::wire::{
    Annotations, CallerNeed, Manifest, PromptArgument, PromptDescriptor, ResourceDescriptor,
    TaskSupport, ToolDescriptor,
};
use rmcp::model::PaginatedRequestParams;
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::{Map, Value, json};

/// What one reading of an upstream's lists may take: time (every page of every list), pages per
/// list, and definitions (count and JSON bytes) in all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bounds {
    /// The whole reading (`limits.upstream_list_timeout_secs`).
    pub(crate) timeout: Duration,
    /// Pages of one list (`limits.upstream_max_list_pages`).
    pub(crate) max_pages: usize,
    /// Tools, resources, templates and prompts together (`limits.upstream_max_definitions`).
    pub(crate) max_definitions: usize,
    /// Their JSON, in bytes (`limits.upstream_max_list_bytes`).
    pub(crate) max_bytes: usize,
}

/// Why an upstream's lists could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ListError {
    /// A list request failed (the upstream's error, or the connection's).
    #[error("{what}: {error}")]
    Request {
        /// The list.
        what: &'static str,
        /// Why.
        error: String,
    },
    /// The reading ran out of time.
    #[error("{what} did not answer within {secs} s (limits.upstream_list_timeout_secs)")]
    Timeout {
        /// The list being read.
        what: &'static str,
        /// The bound.
        secs: u64,
    },
    /// One list had more pages than allowed.
    #[error("{what} has more than {max} pages (limits.upstream_max_list_pages)")]
    TooManyPages {
        /// The list.
        what: &'static str,
        /// The bound.
        max: usize,
    },
    /// A page named a cursor an earlier page of the same list named.
    #[error(
        "{what} sent a cursor it had sent before (after page {page}): the list would never end"
    )]
    RepeatedCursor {
        /// The list.
        what: &'static str,
        /// The page that repeated it.
        page: usize,
    },
    /// More definitions than allowed, by count or by size.
    #[error("the upstream lists more than {max} {unit} of definitions ({key})")]
    TooMuch {
        /// The bound.
        max: usize,
        /// `definitions` or `bytes`.
        unit: &'static str,
        /// Its configuration key.
        key: &'static str,
    },
}

impl ListError {
    /// Whether the upstream went past a bound (time, pages, cursors, definitions): its fault,
    /// counted like a crash, rather than a request it refused.
    pub(crate) fn is_bound(&self) -> bool {
        !matches!(self, ListError::Request { .. })
    }
}

/// One reading's budget: what is left of each bound.
struct Budget {
    bounds: Bounds,
    deadline: Instant,
    definitions: usize,
    bytes: usize,
}

impl Budget {
    /// Count `items` of one page against the definitions' bounds.
    fn take(&mut self, items: &[Value]) -> Result<(), ListError> {
        self.definitions += items.len();
        if self.definitions > self.bounds.max_definitions {
            return Err(ListError::TooMuch {
                max: self.bounds.max_definitions,
                unit: "definitions",
                key: "limits.upstream_max_definitions",
            });
        }
        for item in items {
            self.bytes += crate::telemetry::json_len(item);
        }
        if self.bytes > self.bounds.max_bytes {
            return Err(ListError::TooMuch {
                max: self.bounds.max_bytes,
                unit: "bytes",
                key: "limits.upstream_max_list_bytes",
            });
        }
        Ok(())
    }
}

/// Every page of list `what`: `page` reads the one at a cursor (its items as JSON, and the next
/// cursor). Each page waits at most until the reading's deadline; pages, cursors and items are
/// counted against `budget`.
async fn pages<F, Fut>(
    what: &'static str,
    budget: &mut Budget,
    mut page: F,
) -> Result<Vec<Value>, ListError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<Value>, Option<String>), ServiceError>>,
{
    // Digests of the cursors seen: a server that sends one again would list forever.
    let hasher = std::collections::hash_map::RandomState::new();
    let mut seen = HashSet::new();
    let (mut items, mut cursor) = (Vec::new(), None);
    for n in 1.. {
        if n > budget.bounds.max_pages {
            let max = budget.bounds.max_pages;
            return Err(ListError::TooManyPages { what, max });
        }
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let timeout = ListError::Timeout {
            what,
            secs: budget.bounds.timeout.as_secs(),
        };
        let (page_items, next) = tokio::time::timeout_at(budget.deadline.into(), page(params))
            .await
            .map_err(|_| timeout)?
            .map_err(|e| ListError::Request {
                what,
                error: e.to_string(),
            })?;
        budget.take(&page_items)?;
        items.extend(page_items);
        let Some(next) = next else { break };
        if !seen.insert(hasher.hash_one(&next)) {
            return Err(ListError::RepeatedCursor { what, page: n });
        }
        cursor = Some(next);
    }
    Ok(items)
}

/// Items of a list page as JSON.
fn values<T: serde::Serialize>(items: Vec<T>) -> Vec<Value> {
    items
        .iter()
        .map(|i| serde_json::to_value(i).unwrap_or_default())
        .collect()
}

/// Read every list the upstream advertises, as the manifest of plugin `name`, within `bounds`.
pub(crate) async fn read(
    peer: &Peer<RoleClient>,
    name: &str,
    bounds: Bounds,
) -> Result<Manifest, ListError> {
    let info = peer.peer_info();
    let caps = info.as_ref().map(|i| &i.capabilities);
    let completions = caps.is_some_and(|c| c.completions.is_some());
    let mut budget = Budget {
        bounds,
        deadline: Instant::now() + bounds.timeout,
        definitions: 0,
        bytes: 0,
    };
    let mut manifest = Manifest {
        version: info
            .as_ref()
            .and_then(|i| i.server_info.as_ref())
            .map(|s| s.version.clone())
            .unwrap_or_default(),
        ..empty(name)
    };
    if caps.is_none_or(|c| c.tools.is_some()) {
        let tools = pages("tools/list", &mut budget, |p| async move {
            let page = peer.list_tools(p).await?;
            Ok((values(page.tools), page.next_cursor))
        })
        .await?;
        manifest.tools = tools.iter().map(tool).collect();
    }
    if caps.is_some_and(|c| c.resources.is_some()) {
        read_resources(peer, completions, &mut budget, &mut manifest).await?;
    }
    if caps.is_some_and(|c| c.prompts.is_some()) {
        let prompts = pages("prompts/list", &mut budget, |p| async move {
            let page = peer.list_prompts(p).await?;
            Ok((values(page.prompts), page.next_cursor))
        })
        .await?;
        manifest.prompts = prompts.iter().map(|p| prompt(p, completions)).collect();
    }
    Ok(manifest)
}

/// The resources and resource templates, into `manifest`.
async fn read_resources(
    peer: &Peer<RoleClient>,
    completions: bool,
    budget: &mut Budget,
    manifest: &mut Manifest,
) -> Result<(), ListError> {
    let resources = pages("resources/list", budget, |p| async move {
        let page = peer.list_resources(p).await?;
        Ok((values(page.resources), page.next_cursor))
    })
    .await?;
    manifest
        .resources
        .extend(resources.iter().map(|r| resource(r, false, &[])));
    let templates = pages("resources/templates/list", budget, |p| async move {
        let page = peer.list_resource_templates(p).await?;
        Ok((values(page.resource_templates), page.next_cursor))
    })
    .await?;
    manifest.resources.extend(templates.iter().map(|value| {
        let variables = if completions {
            template_variables(str_of(value, "uriTemplate"))
        } else {
            Vec::new()
        };
        resource(value, true, &variables)
    }));
    Ok(())
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn opt_str(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// A `Tool` of `tools/list` as a descriptor: everything a client is shown is kept.
pub(crate) fn tool(v: &Value) -> ToolDescriptor {
    let schema = match v.get("inputSchema") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => json!({"type": "object"}),
    };
    ToolDescriptor {
        name: str_of(v, "name").to_owned(),
        service: None,
        title: opt_str(v, "title"),
        description: str_of(v, "description").to_owned(),
        input_schema: schema,
        output_schema: v.get("outputSchema").filter(|s| s.is_object()).cloned(),
        annotations: v
            .get("annotations")
            .and_then(|a| serde_json::from_value::<Annotations>(a.clone()).ok())
            .unwrap_or_default(),
        meta: v.get("_meta").filter(|m| m.is_object()).cloned(),
        caller: CallerNeed::None,
        inline: false,
        required_client_capabilities: None,
        task_support: TaskSupport::Forbidden,
        ask_first: false,
        filter: false,
    }
}

/// A `Resource` (or a `ResourceTemplate` when `template`) as a descriptor.
fn resource(v: &Value, template: bool, completions: &[String]) -> ResourceDescriptor {
    ResourceDescriptor {
        uri: str_of(v, if template { "uriTemplate" } else { "uri" }).to_owned(),
        template,
        name: str_of(v, "name").to_owned(),
        title: opt_str(v, "title"),
        description: opt_str(v, "description"),
        mime_type: opt_str(v, "mimeType"),
        service: None,
        caller: CallerNeed::None,
        meta: v.get("_meta").filter(|m| m.is_object()).cloned(),
        completions: completions.to_vec(),
    }
}

/// A `Prompt` as a descriptor; with `completions`, every argument may be completed upstream.
fn prompt(v: &Value, completions: bool) -> PromptDescriptor {
    let arguments: Vec<PromptArgument> = v
        .get("arguments")
        .and_then(Value::as_array)
        .map(|args| {
            args.iter()
                .map(|a| PromptArgument {
                    name: str_of(a, "name").to_owned(),
                    description: opt_str(a, "description"),
                    required: a.get("required").and_then(Value::as_bool).unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default();
    PromptDescriptor {
        name: str_of(v, "name").to_owned(),
        title: opt_str(v, "title"),
        description: str_of(v, "description").to_owned(),
        completions: if completions {
            arguments.iter().map(|a| a.name.clone()).collect()
        } else {
            Vec::new()
        },
        arguments,
        service: None,
        caller: CallerNeed::None,
        meta: v.get("_meta").filter(|m| m.is_object()).cloned(),
    }
}

/// The variable names of an RFC 6570 URI template (`{a}`, `{+b}`, `{?c,d}`).
fn template_variables(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let inner =
            rest[start + 1..start + len].trim_start_matches(['+', '#', '.', '/', ';', '?', '&']);
        for name in inner.split(',') {
            let name = name.trim_end_matches('*');
            let name = name.split(':').next().unwrap_or(name);
            if !name.is_empty() && !out.iter().any(|n: &String| n == name) {
                out.push(name.to_owned());
            }
        }
        rest = &rest[start + len + 1..];
    }
    out
}

/// The arguments of a call as an object (the upstream's tools take an object).
pub(crate) fn arguments(args: &str) -> Result<Map<String, Value>, String> {
    if args.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("the arguments are not a JSON object".into()),
        Err(e) => Err(format!("the arguments are not JSON: {e}")),
    }
}

/// An upstream's manifest with nothing listed (yet), under its name.
pub(super) fn empty(name: &str) -> Manifest {
    Manifest {
        plugin: name.to_owned(),
        version: String::new(),
        sdk_version: String::new(),
        services: Vec::new(),
        tools: Vec::new(),
        resources: Vec::new(),
        prompts: Vec::new(),
        load_on_first_call: false,
        permissions: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_keeps_what_clients_are_shown_and_never_asks_for_the_caller() {
        let d = tool(&json!({
            "name": "read_file", "title": "Read", "description": "Reads.",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}, "_meta": {"x": 1},
        }));
        assert_eq!(d.name, "read_file");
        assert_eq!(d.title.as_deref(), Some("Read"));
        assert_eq!(d.annotations.read_only_hint, Some(true));
        assert_eq!(d.meta, Some(json!({"x": 1})));
        assert_eq!(d.caller, CallerNeed::None);
        // A tool without a schema gets the empty object schema.
        assert_eq!(
            tool(&json!({"name": "x"})).input_schema,
            json!({"type": "object"})
        );
    }

    fn bounds() -> Bounds {
        Bounds {
            timeout: Duration::from_secs(60),
            max_pages: 5,
            max_definitions: 8,
            max_bytes: 10_000,
        }
    }

    /// Read list pages from `page` (a cursor to the items and the next cursor) within `bounds`.
    fn read_pages(
        bounds: Bounds,
        page: impl Fn(Option<String>) -> (Vec<Value>, Option<String>),
    ) -> Result<Vec<Value>, ListError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut budget = Budget {
            bounds,
            deadline: Instant::now() + bounds.timeout,
            definitions: 0,
            bytes: 0,
        };
        runtime.block_on(pages("tools/list", &mut budget, |p| {
            let answer = page(p.and_then(|p| p.cursor));
            async move { Ok(answer) }
        }))
    }

    #[test]
    fn pages_are_followed_to_the_end_within_their_bounds() {
        let page = |cursor: Option<String>| {
            let n: usize = cursor.map_or(0, |c| c.parse().unwrap());
            let next = (n < 2).then(|| (n + 1).to_string());
            (vec![json!({"name": format!("t{n}")})], next)
        };
        assert_eq!(read_pages(bounds(), page).unwrap().len(), 3);
        // Endless pages stop at the page bound, naming its key.
        let endless = |cursor: Option<String>| {
            let n: usize = cursor.map_or(0, |c| c.parse().unwrap());
            (vec![], Some((n + 1).to_string()))
        };
        let e = read_pages(bounds(), endless).unwrap_err();
        assert_eq!(
            e,
            ListError::TooManyPages {
                what: "tools/list",
                max: 5
            }
        );
        assert!(
            e.to_string().contains("limits.upstream_max_list_pages"),
            "{e}"
        );
        // A cursor sent again is refused at once.
        let repeated = |_: Option<String>| (vec![json!({"name": "t"})], Some("same".into()));
        let e = read_pages(bounds(), repeated).unwrap_err();
        assert_eq!(
            e,
            ListError::RepeatedCursor {
                what: "tools/list",
                page: 2
            }
        );
        assert!(e.is_bound());
    }

    #[test]
    fn definitions_are_bounded_by_count_and_size() {
        let many = |cursor: Option<String>| {
            let n: usize = cursor.map_or(0, |c| c.parse().unwrap());
            (vec![json!({"name": "t"}); 3], Some((n + 1).to_string()))
        };
        let e = read_pages(bounds(), many).unwrap_err();
        assert!(e.to_string().contains("more than 8 definitions"), "{e}");
        let big = |_: Option<String>| (vec![json!({"description": "x".repeat(20_000)})], None);
        let e = read_pages(bounds(), big).unwrap_err();
        assert!(
            e.to_string().contains("limits.upstream_max_list_bytes"),
            "{e}"
        );
    }

    #[test]
    fn template_variables_are_read_from_every_operator() {
        assert_eq!(
            template_variables("test://{id}/x{?a,b*}{+path:3}"),
            ["id", "a", "b", "path"]
        );
    }
}
