//! An upstream's lists as a plugin manifest: `tools/list`, `resources/list`,
//! `resources/templates/list` and `prompts/list` (each read only when the server advertises it,
//! every page) turned into the descriptors the registry serves. Upstream definitions never ask
//! for the caller: no caller identity is passed to an upstream.

use mcp_plugin_sdk::wire::{
    Annotations, CallerNeed, Manifest, PromptArgument, PromptDescriptor, ResourceDescriptor,
    TaskSupport, ToolDescriptor,
};
use rmcp::service::{Peer, RoleClient};
use serde_json::{Map, Value, json};

/// Read every list the upstream advertises, as the manifest of plugin `name`.
pub(crate) async fn read(peer: &Peer<RoleClient>, name: &str) -> Result<Manifest, String> {
    let info = peer.peer_info();
    let caps = info.as_ref().map(|i| &i.capabilities);
    let completions = caps.is_some_and(|c| c.completions.is_some());
    let fail = |what: &str, e: rmcp::service::ServiceError| format!("{what}: {e}");
    let mut manifest = Manifest {
        plugin: name.to_owned(),
        version: info
            .as_ref()
            .and_then(|i| i.server_info.as_ref())
            .map(|s| s.version.clone())
            .unwrap_or_default(),
        sdk_version: String::new(),
        services: Vec::new(),
        tools: Vec::new(),
        resources: Vec::new(),
        prompts: Vec::new(),
        load_on_first_call: false,
        permissions: Default::default(),
    };
    if caps.is_none_or(|c| c.tools.is_some()) {
        let tools = peer
            .list_all_tools()
            .await
            .map_err(|e| fail("tools/list", e))?;
        manifest.tools = tools
            .iter()
            .map(|t| tool(&serde_json::to_value(t).unwrap_or_default()))
            .collect();
    }
    if caps.is_some_and(|c| c.resources.is_some()) {
        let resources = peer
            .list_all_resources()
            .await
            .map_err(|e| fail("resources/list", e))?;
        manifest.resources.extend(
            resources
                .iter()
                .map(|r| resource(&serde_json::to_value(r).unwrap_or_default(), false, &[])),
        );
        let templates = peer
            .list_all_resource_templates()
            .await
            .map_err(|e| fail("resources/templates/list", e))?;
        manifest.resources.extend(templates.iter().map(|t| {
            let value = serde_json::to_value(t).unwrap_or_default();
            let variables = if completions {
                template_variables(str_of(&value, "uriTemplate"))
            } else {
                Vec::new()
            };
            resource(&value, true, &variables)
        }));
    }
    if caps.is_some_and(|c| c.prompts.is_some()) {
        let prompts = peer
            .list_all_prompts()
            .await
            .map_err(|e| fail("prompts/list", e))?;
        manifest.prompts = prompts
            .iter()
            .map(|p| prompt(&serde_json::to_value(p).unwrap_or_default(), completions))
            .collect();
    }
    Ok(manifest)
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

    #[test]
    fn template_variables_are_read_from_every_operator() {
        assert_eq!(
            template_variables("test://{id}/x{?a,b*}{+path:3}"),
            ["id", "a", "b", "path"]
        );
    }
}
