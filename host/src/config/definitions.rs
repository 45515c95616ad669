//! Definition overrides (`overrides`, `plugins.<name>.overrides`, `agents.<name>.overrides`): what
//! clients are shown of a tool, prompt or resource in place of what its plugin or upstream server
//! says — the name, title, description and annotations of a tool and, per argument, its
//! description, whether it is hidden, a value the host fixes and a default it fills — and how the
//! levels merge (an agent's over its source's over the global one, field by field). The checks
//! that need no served definition are made here, when the configuration is read; those that need
//! the tool's input schema when the registry is built.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The references to the verified caller a fixed value or a default may hold (`${caller.user}`),
/// filled at each call from the caller, never from the arguments.
pub const CALLER_REFERENCES: &[&str] = &["caller.user", "caller.agent"];

/// Overrides of served definitions, by the name (or URI) they apply to.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DefinitionOverrides {
    /// Tools: under `plugins.<name>.overrides`, by the source's own name for the tool (before
    /// prefixes); at the top level and under `agents.<name>.overrides`, by the name it is served
    /// under without overrides (prefixes applied).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolOverride>,
    /// Prompts, named as tools are.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub prompts: BTreeMap<String, EntryOverride>,
    /// Resources and resource templates, by their URI (or URI template) as the source lists it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, EntryOverride>,
}

/// What clients are shown of one tool, and what the host fixes or fills in its calls.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ToolOverride {
    /// The name clients see and call it by (the source still gets its own name). It follows the
    /// rules of every tool name (`^[a-zA-Z0-9_-]{1,64}$`) and takes part in precedence as any
    /// other name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The title clients show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The description the model reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Annotation hints, each over the source's (`readOnlyHint`, `destructiveHint`,
    /// `idempotentHint`, `openWorldHint`, `title`).
    #[serde(skip_serializing_if = "HintOverrides::is_empty")]
    pub annotations: HintOverrides,
    /// Per argument (by its name in the input schema).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub arguments: BTreeMap<String, ArgumentOverride>,
}

/// Annotation hints set by the operator (unset: the source's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct HintOverrides {
    /// A human-readable title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it twice with the same arguments has no additional effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl HintOverrides {
    /// Whether no hint is set.
    pub fn is_empty(&self) -> bool {
        self == &HintOverrides::default()
    }

    /// `self` over `lower`, hint by hint.
    fn over(&self, lower: &HintOverrides) -> HintOverrides {
        HintOverrides {
            title: self.title.clone().or_else(|| lower.title.clone()),
            read_only_hint: self.read_only_hint.or(lower.read_only_hint),
            destructive_hint: self.destructive_hint.or(lower.destructive_hint),
            idempotent_hint: self.idempotent_hint.or(lower.idempotent_hint),
            open_world_hint: self.open_world_hint.or(lower.open_world_hint),
        }
    }
}

/// What clients are shown of one argument, and what the host puts in it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ArgumentOverride {
    /// Its description in the served input schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Removed from the served input schema: clients do not see it, and a call that sends it is
    /// refused. An argument the source requires needs a `value` or a `default` to be hidden.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hide: Option<bool>,
    /// Fixed by the host: put in every call, never the client's (the argument is hidden, and a
    /// call that sends it is refused). Strings may hold `${caller.user}` and `${caller.agent}`,
    /// filled from the verified caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Filled when a call leaves the argument out (shown as the schema's `default`); may hold
    /// `${caller.user}` and `${caller.agent}` like `value`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

impl ArgumentOverride {
    /// Whether clients do not see it (hidden, or fixed by the host).
    pub fn hidden(&self) -> bool {
        self.hide == Some(true) || self.value.is_some()
    }

    /// `self` over `lower`: field by field, except that the level setting `value` or `default`
    /// decides both.
    fn over(&self, lower: &ArgumentOverride) -> ArgumentOverride {
        let sets_content = self.value.is_some() || self.default.is_some();
        let content = if sets_content { self } else { lower };
        ArgumentOverride {
            description: self
                .description
                .clone()
                .or_else(|| lower.description.clone()),
            hide: self.hide.or(lower.hide),
            value: content.value.clone(),
            default: content.default.clone(),
        }
    }
}

/// What clients are shown of one prompt or resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EntryOverride {
    /// A prompt's name clients see and get it by (the source still gets its own); a resource's
    /// programmatic name (its URI does not change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The title clients show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl EntryOverride {
    /// `self` over `lower`, field by field.
    pub fn over(&self, lower: &EntryOverride) -> EntryOverride {
        EntryOverride {
            name: self.name.clone().or_else(|| lower.name.clone()),
            title: self.title.clone().or_else(|| lower.title.clone()),
            description: self
                .description
                .clone()
                .or_else(|| lower.description.clone()),
        }
    }
}

impl ToolOverride {
    /// `self` over `lower`: field by field, arguments argument by argument.
    pub fn over(&self, lower: &ToolOverride) -> ToolOverride {
        let mut arguments = lower.arguments.clone();
        for (name, higher) in &self.arguments {
            let merged = match arguments.get(name) {
                Some(low) => higher.over(low),
                None => higher.clone(),
            };
            arguments.insert(name.clone(), merged);
        }
        ToolOverride {
            name: self.name.clone().or_else(|| lower.name.clone()),
            title: self.title.clone().or_else(|| lower.title.clone()),
            description: self
                .description
                .clone()
                .or_else(|| lower.description.clone()),
            annotations: self.annotations.over(&lower.annotations),
            arguments,
        }
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self == &ToolOverride::default()
    }
}

/// A problem with an override found when the configuration is read: the key below the overrides
/// (`tools.x.arguments.y.value`) and what is wrong.
pub type OverrideProblem = (String, String);

impl DefinitionOverrides {
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.prompts.is_empty() && self.resources.is_empty()
    }

    /// [`DefinitionOverrides::check`] for an agent's overrides, which apply to tools only (every
    /// agent is shown the same prompts and resources).
    pub fn check_agent(&self) -> Result<(), OverrideProblem> {
        let other = (self.prompts.keys().map(|k| format!("prompts.{k}")))
            .chain(self.resources.keys().map(|k| format!("resources.{k}")))
            .next();
        if let Some(key) = other {
            return Err((
                key,
                "an agent's overrides apply to tools only: override prompts and resources at the \
                 top level or under plugins.<name>.overrides"
                    .into(),
            ));
        }
        self.check()
    }

    /// The first problem found, if any: a name that breaks the name rules, an argument both fixed
    /// and defaulted, or fixed and explicitly shown, a `${caller.…}` reference that does not
    /// exist.
    pub fn check(&self) -> Result<(), OverrideProblem> {
        for (tool, o) in &self.tools {
            check_name(o.name.as_deref(), &format!("tools.{tool}.name"))?;
            for (arg, a) in &o.arguments {
                let key = |field: &str| format!("tools.{tool}.arguments.{arg}.{field}");
                if a.value.is_some() && a.default.is_some() {
                    return Err((
                        key("default"),
                        "an argument takes a `value` (fixed by the host) or a `default` (filled \
                         when absent), not both"
                            .into(),
                    ));
                }
                if a.value.is_some() && a.hide == Some(false) {
                    return Err((
                        key("hide"),
                        "an argument with a fixed `value` is never shown to clients".into(),
                    ));
                }
                for (field, v) in [("value", &a.value), ("default", &a.default)] {
                    if let Some(v) = v {
                        check_references(v).map_err(|why| (key(field), why))?;
                    }
                }
            }
        }
        for (prompt, o) in &self.prompts {
            check_name(o.name.as_deref(), &format!("prompts.{prompt}.name"))?;
        }
        Ok(())
    }
}

/// A renamed tool's or prompt's new name must be one every client accepts.
fn check_name(name: Option<&str>, key: &str) -> Result<(), OverrideProblem> {
    match name {
        Some(n) if !mcp_plugin_sdk::wire::is_valid_tool_name(n) => Err((
            key.to_owned(),
            format!("{n:?} is not a valid name: names must match ^[a-zA-Z0-9_-]{{1,64}}$"),
        )),
        _ => Ok(()),
    }
}

/// Every `${…}` left in the strings of `value` (the configuration expanded the environment's)
/// must be one of [`CALLER_REFERENCES`].
fn check_references(value: &Value) -> Result<(), String> {
    match value {
        Value::String(s) => {
            for reference in references(s) {
                if !CALLER_REFERENCES.contains(&reference) {
                    return Err(format!(
                        "${{{reference}}} is not a reference the host can fill: use one of {}",
                        CALLER_REFERENCES
                            .iter()
                            .map(|r| format!("${{{r}}}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(check_references),
        Value::Object(map) => map.values().try_for_each(check_references),
        _ => Ok(()),
    }
}

/// The `${…}` references in `text`, in order.
pub fn references(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let start = rest.find("${")?;
        let after = &rest[start + 2..];
        let end = after.find('}')?;
        rest = &after[end + 1..];
        Some(&after[..end])
    })
}

/// Whether `value` holds a `${caller.…}` reference anywhere.
pub fn refers_to_caller(value: &Value) -> bool {
    match value {
        Value::String(s) => references(s).next().is_some(),
        Value::Array(items) => items.iter().any(refers_to_caller),
        Value::Object(map) => map.values().any(refers_to_caller),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn overrides(v: Value) -> DefinitionOverrides {
        serde_json::from_value(v).expect("overrides")
    }

    #[test]
    fn levels_merge_field_by_field_and_value_or_default_together() {
        let source: ToolOverride = serde_json::from_value(json!({
            "name": "issue", "description": "Open an issue.",
            "annotations": {"readOnlyHint": false},
            "arguments": {"owner": {"value": "acme", "description": "The owner."},
                          "repo": {"default": "widgets"}}
        }))
        .expect("source");
        let agent: ToolOverride = serde_json::from_value(json!({
            "description": "File a bug.",
            "annotations": {"idempotentHint": true},
            "arguments": {"owner": {"default": "${caller.user}"}, "labels": {"hide": true}}
        }))
        .expect("agent");
        let merged = agent.over(&source);
        assert_eq!(merged.name.as_deref(), Some("issue"));
        assert_eq!(merged.description.as_deref(), Some("File a bug."));
        assert_eq!(merged.annotations.read_only_hint, Some(false));
        assert_eq!(merged.annotations.idempotent_hint, Some(true));
        let owner = &merged.arguments["owner"];
        // The agent's default replaces the source's value (one level decides both).
        assert_eq!(owner.value, None);
        assert_eq!(owner.default, Some(json!("${caller.user}")));
        assert_eq!(owner.description.as_deref(), Some("The owner."));
        assert_eq!(merged.arguments["repo"].default, Some(json!("widgets")));
        assert!(merged.arguments["labels"].hidden());
        assert!(source.arguments["owner"].hidden());
    }

    #[test]
    fn the_checks_refuse_bad_names_both_value_and_default_and_unknown_references() {
        let ok = overrides(json!({"tools": {"create_issue": {
            "name": "gh_issue",
            "arguments": {"owner": {"value": "${caller.user}"}, "n": {"default": 3}}}},
            "prompts": {"p": {"name": "q"}}}));
        assert_eq!(ok.check(), Ok(()));
        let cases = [
            (
                json!({"tools": {"t": {"name": "a.b"}}}),
                "tools.t.name",
                "not a valid name",
            ),
            (
                json!({"prompts": {"p": {"name": "has space"}}}),
                "prompts.p.name",
                "not a valid name",
            ),
            (
                json!({"tools": {"t": {"arguments": {"a": {"value": 1, "default": 2}}}}}),
                "tools.t.arguments.a.default",
                "not both",
            ),
            (
                json!({"tools": {"t": {"arguments": {"a": {"value": 1, "hide": false}}}}}),
                "tools.t.arguments.a.hide",
                "never shown",
            ),
            (
                json!({"tools": {"t": {"arguments": {"a": {"value": {"x": ["${caller.password}"]}}}}}}),
                "tools.t.arguments.a.value",
                "${caller.password} is not a reference",
            ),
        ];
        for (v, key, message) in cases {
            let (k, why) = overrides(v).check().expect_err(key);
            assert_eq!(k, key);
            assert!(why.contains(message), "{why}");
        }
    }

    #[test]
    fn an_agents_overrides_take_tools_only() {
        let tools = overrides(json!({"tools": {"t": {"name": "u"}}}));
        assert_eq!(tools.check_agent(), Ok(()));
        let prompts = overrides(json!({"prompts": {"p": {"title": "P"}}}));
        let (key, why) = prompts.check_agent().expect_err("prompts");
        assert_eq!(key, "prompts.p");
        assert!(why.contains("tools only"), "{why}");
        assert_eq!(prompts.check(), Ok(()));
    }

    #[test]
    fn references_are_found_in_order() {
        let found: Vec<&str> = references("${caller.user}/x/${caller.agent}${open").collect();
        assert_eq!(found, vec!["caller.user", "caller.agent"]);
        assert!(refers_to_caller(&json!({"a": ["${caller.user}"]})));
        assert!(!refers_to_caller(&json!("plain")));
    }
}
