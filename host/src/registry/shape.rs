//! A tool as served under its overrides: the definition clients are shown (name, title,
//! description, annotations, and the input schema rewritten — arguments re-described, hidden,
//! defaulted), what the host puts in each call (fixed values and defaults, `${caller.user}` filled
//! from the verified caller) and which arguments a client may not send, and the override's
//! pinned form (its fixed values and defaults as digests: they may be secrets). The source keeps
//! its own names and schema: a call reaches it by its index, with the arguments the host
//! completed.

use std::collections::BTreeMap;

use mcp_plugin_sdk::UserInfo;
use mcp_plugin_sdk::wire::ToolDescriptor;
use serde_json::{Map, Value, json};

use crate::config::definitions::{references, refers_to_caller};
use crate::config::{ArgumentOverride, HintOverrides, ToolOverride};

/// What the host does with a call's arguments for an overridden tool.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Injection {
    /// Arguments a client may not send (hidden, or fixed by the host), in name order.
    withheld: Vec<String>,
    /// Set in every call.
    fixed: Vec<(String, Value)>,
    /// Set when the call leaves them out.
    defaults: Vec<(String, Value)>,
}

/// Why the host does not complete a call's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The client sent an argument the host hides or fixes.
    Withheld(String),
    /// A value refers to the caller (`${caller.user}`, `${caller.agent}`) and the call has none.
    NoCaller(String),
}

impl Injection {
    /// Whether the host neither refuses nor adds any argument.
    pub fn is_empty(&self) -> bool {
        self.withheld.is_empty() && self.fixed.is_empty() && self.defaults.is_empty()
    }

    /// Whether some value is filled from the caller.
    pub fn needs_caller(&self) -> bool {
        self.fixed
            .iter()
            .chain(&self.defaults)
            .any(|(_, v)| refers_to_caller(v))
    }

    /// The first argument of `args` a client may not send, if any.
    pub fn withheld_in(&self, args: &Value) -> Option<&str> {
        let args = args.as_object()?;
        self.withheld
            .iter()
            .find(|name| args.contains_key(name.as_str()))
            .map(String::as_str)
    }

    /// `args` (an object, checked against the served schema) completed: every fixed value set,
    /// every default the call left out filled, `${caller.…}` from `caller` and `agent`.
    pub fn complete(
        &self,
        args: &Value,
        caller: Option<&UserInfo>,
        agent: Option<&str>,
    ) -> Result<Value, Refusal> {
        if let Some(name) = self.withheld_in(args) {
            return Err(Refusal::Withheld(name.to_owned()));
        }
        let mut out = args.as_object().cloned().unwrap_or_default();
        for (name, value) in &self.fixed {
            out.insert(name.clone(), fill(value, caller, agent)?);
        }
        for (name, value) in &self.defaults {
            if !out.contains_key(name) {
                out.insert(name.clone(), fill(value, caller, agent)?);
            }
        }
        Ok(Value::Object(out))
    }
}

/// `value` with every `${caller.user}` / `${caller.agent}` in its strings replaced.
fn fill(value: &Value, caller: Option<&UserInfo>, agent: Option<&str>) -> Result<Value, Refusal> {
    Ok(match value {
        Value::String(s) if references(s).next().is_some() => {
            let mut text = s.clone();
            for reference in references(s) {
                let filled = match reference {
                    "caller.user" => caller.map(|c| c.user_id.as_str()),
                    "caller.agent" => agent,
                    _ => None,
                };
                let filled = filled.ok_or_else(|| Refusal::NoCaller(reference.to_owned()))?;
                text = text.replace(&format!("${{{reference}}}"), filled);
            }
            Value::String(text)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| fill(v, caller, agent))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), fill(v, caller, agent)?)))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// `source` as `o` shows it, and what the host does with its calls; or why the override cannot
/// apply to it (an argument it does not have, a required one hidden without a value).
pub fn shape(
    source: &ToolDescriptor,
    o: &ToolOverride,
) -> Result<(ToolDescriptor, Injection), String> {
    let mut served = source.clone();
    if let Some(title) = &o.title {
        served.title = Some(title.clone());
    }
    if let Some(description) = &o.description {
        served.description = description.clone();
    }
    apply_hints(&mut served.annotations, &o.annotations);
    let mut injection = Injection::default();
    let schema = &mut served.input_schema;
    for (name, a) in &o.arguments {
        rewrite_argument(schema, name, a)?;
        if a.hidden() {
            injection.withheld.push(name.clone());
        }
        if let Some(value) = &a.value {
            injection.fixed.push((name.clone(), value.clone()));
        } else if let Some(default) = &a.default {
            injection.defaults.push((name.clone(), default.clone()));
        }
    }
    if let Some(Value::Array(required)) = schema.get("required")
        && required.is_empty()
        && let Some(map) = schema.as_object_mut()
    {
        map.remove("required");
    }
    Ok((served, injection))
}

/// The hints `o` sets, over `annotations`.
fn apply_hints(annotations: &mut mcp_plugin_sdk::wire::Annotations, o: &HintOverrides) {
    if let Some(title) = &o.title {
        annotations.title = Some(title.clone());
    }
    let hints = [
        (&mut annotations.read_only_hint, o.read_only_hint),
        (&mut annotations.destructive_hint, o.destructive_hint),
        (&mut annotations.idempotent_hint, o.idempotent_hint),
        (&mut annotations.open_world_hint, o.open_world_hint),
    ];
    for (hint, set) in hints {
        if set.is_some() {
            *hint = set;
        }
    }
}

/// Argument `name` of the input schema `schema` as `a` shows it: described, hidden, or given a
/// default (and no longer required once the host hides it or fills it).
fn rewrite_argument(schema: &mut Value, name: &str, a: &ArgumentOverride) -> Result<(), String> {
    let open = schema.get("additionalProperties") != Some(&Value::Bool(false));
    let declared = schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.contains_key(name));
    let fills = a.value.is_some() || a.default.is_some();
    if !(declared || (fills && open)) {
        return Err(format!(
            "argument {name} is not in the tool's input schema{}",
            if fills {
                " (which takes no other arguments)"
            } else {
                ""
            }
        ));
    }
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|n| n == name));
    if a.hidden() && required && !fills {
        return Err(format!(
            "argument {name} is required by the tool: to hide it, give it a `value` or a `default`"
        ));
    }
    if (a.hidden() || fills)
        && let Some(Value::Array(required)) = schema.get_mut("required")
    {
        required.retain(|n| n != name);
    }
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if a.hidden() {
        properties.remove(name);
        return Ok(());
    }
    let Some(Value::Object(property)) = properties.get_mut(name) else {
        return Ok(());
    };
    if let Some(description) = &a.description {
        property.insert("description".into(), json!(description));
    }
    // A default filled from the caller is not shown (it is no value a client could send).
    if let Some(default) = a.default.as_ref().filter(|d| !refers_to_caller(d)) {
        property.insert("default".into(), default.clone());
    }
    Ok(())
}

/// The pinned form of the overrides of one tool: the merged one clients without an agent's own
/// see (`tool`) and each agent's own (`agents`), with every fixed value and default as the
/// SHA-256 of its JSON (`sha256:…`), never the value (it may be a secret); a `${caller.…}`
/// reference is kept as written.
pub fn pinned(tool: &ToolOverride, agents: &BTreeMap<String, ToolOverride>) -> Value {
    let one = |o: &ToolOverride| {
        let mut o = o.clone();
        for a in o.arguments.values_mut() {
            for v in [&mut a.value, &mut a.default].into_iter().flatten() {
                if !matches!(v, Value::String(s) if is_reference(s)) {
                    *v = json!(format!("sha256:{}", crate::config::lock::digest(v)));
                }
            }
        }
        serde_json::to_value(o).unwrap_or_default()
    };
    let mut out = Map::new();
    if !tool.is_empty() {
        out.insert("tool".into(), one(tool));
    }
    if !agents.is_empty() {
        let agents: Map<String, Value> = agents.iter().map(|(k, o)| (k.clone(), one(o))).collect();
        out.insert("agents".into(), Value::Object(agents));
    }
    Value::Object(out)
}

/// Whether `s` is exactly one `${caller.…}` reference.
fn is_reference(s: &str) -> bool {
    s.starts_with("${caller.") && s.ends_with('}') && references(s).count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor() -> ToolDescriptor {
        serde_json::from_value(json!({
            "name": "create_issue", "description": "Create an issue.",
            "annotations": {"readOnlyHint": false},
            "inputSchema": {"type": "object", "properties": {
                "owner": {"type": "string"}, "repo": {"type": "string"},
                "title": {"type": "string", "description": "The title."},
                "force": {"type": "boolean"}},
                "required": ["owner", "repo", "title"]}
        }))
        .expect("descriptor")
    }

    fn o(v: Value) -> ToolOverride {
        serde_json::from_value(v).expect("override")
    }

    #[test]
    fn the_schema_is_rewritten_and_the_source_left_alone() {
        let source = descriptor();
        let (served, injection) = shape(
            &source,
            &o(json!({
                "title": "Issue", "description": "File a bug in acme's repositories.",
                "annotations": {"destructiveHint": false},
                "arguments": {
                    "owner": {"value": "acme"},
                    "repo": {"default": "widgets", "description": "Which repository."},
                    "title": {"description": "One line."},
                    "force": {"hide": true}}
            })),
        )
        .expect("shape");
        assert_eq!(served.name, "create_issue");
        assert_eq!(served.title.as_deref(), Some("Issue"));
        assert_eq!(served.description, "File a bug in acme's repositories.");
        assert_eq!(served.annotations.read_only_hint, Some(false));
        assert_eq!(served.annotations.destructive_hint, Some(false));
        assert_eq!(
            served.input_schema,
            json!({"type": "object", "properties": {
                "repo": {"type": "string", "default": "widgets", "description": "Which repository."},
                "title": {"type": "string", "description": "One line."}},
                "required": ["title"]})
        );
        assert_eq!(source, descriptor());
        assert_eq!(injection.withheld, vec!["force", "owner"]);
        assert!(!injection.needs_caller());
    }

    #[test]
    fn a_required_argument_is_hidden_only_with_a_value_or_default_and_unknown_ones_are_refused() {
        let why = shape(
            &descriptor(),
            &o(json!({"arguments": {"owner": {"hide": true}}})),
        )
        .expect_err("required");
        assert!(why.contains("argument owner is required"), "{why}");
        let why = shape(
            &descriptor(),
            &o(json!({"arguments": {"ownr": {"hide": true}}})),
        )
        .expect_err("unknown");
        assert!(
            why.contains("argument ownr is not in the tool's input schema"),
            "{why}"
        );
        // A value for an argument the schema does not declare goes in, unless it takes no others.
        assert!(
            shape(
                &descriptor(),
                &o(json!({"arguments": {"tenant": {"value": "t1"}}}))
            )
            .is_ok()
        );
        let mut closed = descriptor();
        closed.input_schema["additionalProperties"] = json!(false);
        let why = shape(
            &closed,
            &o(json!({"arguments": {"tenant": {"value": "t1"}}})),
        )
        .expect_err("closed");
        assert!(why.contains("takes no other arguments"), "{why}");
        let (served, _) = shape(
            &descriptor(),
            &o(json!({"arguments": {"owner": {"hide": true, "default": "acme"}, "repo": {"value": "w"}, "title": {"value": "t"}}})),
        )
        .expect("all filled");
        assert!(served.input_schema.get("required").is_none());
    }

    #[test]
    fn calls_are_completed_and_withheld_arguments_refused() {
        let (_, injection) = shape(
            &descriptor(),
            &o(json!({"arguments": {
                "owner": {"value": "${caller.user}"},
                "repo": {"default": "${caller.agent}-repo"},
                "force": {"hide": true}}})),
        )
        .expect("shape");
        assert!(injection.needs_caller());
        let caller = UserInfo::new("ana");
        let args = json!({"title": "t"});
        assert_eq!(
            injection.complete(&args, Some(&caller), Some("triage")),
            Ok(json!({"title": "t", "owner": "ana", "repo": "triage-repo"}))
        );
        assert_eq!(
            injection.complete(
                &json!({"title": "t", "repo": "mine"}),
                Some(&caller),
                Some("a")
            ),
            Ok(json!({"title": "t", "owner": "ana", "repo": "mine"}))
        );
        assert_eq!(
            injection.complete(&json!({"owner": "eve"}), Some(&caller), None),
            Err(Refusal::Withheld("owner".into()))
        );
        assert_eq!(
            injection.complete(&json!({"force": true}), Some(&caller), None),
            Err(Refusal::Withheld("force".into()))
        );
        assert_eq!(
            injection.complete(&args, None, Some("a")),
            Err(Refusal::NoCaller("caller.user".into()))
        );
    }

    #[test]
    fn the_pinned_form_hides_values_but_keeps_references() {
        let tool = o(json!({"description": "d", "arguments": {
            "token": {"value": "s3cret"}, "owner": {"value": "${caller.user}"}}}));
        let agent = o(json!({"name": "bug"}));
        let pinned = pinned(&tool, &BTreeMap::from([("triage".to_owned(), agent)]));
        let text = pinned.to_string();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            text.contains("sha256:") && text.contains("${caller.user}"),
            "{text}"
        );
        assert_eq!(pinned["agents"]["triage"]["name"], "bug");
        assert_eq!(
            super::pinned(&ToolOverride::default(), &BTreeMap::new()),
            json!({})
        );
    }
}
