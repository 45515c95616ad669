//! What `mcp-host connect` answers when the server asks the user something during a call (a form
//! elicitation): non-interactively, as `--answer` says — the form accepted with its defaults (and a
//! plausible value for a required field without one), or declined. Every other question (sampling,
//! a URL to open, roots) is refused. And the arguments `--call-all` makes up for a tool from its
//! input schema's required fields.

use std::sync::Arc;

use mcp_host::plugins::call::{CallInput, CallState};
use mcp_plugin_sdk::InputError;
use serde_json::{Map, Value, json};

/// How a form elicitation is answered (`--answer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Answer {
    /// Accept, with each field's default (a made-up value for a required field without one).
    AcceptDefaults,
    /// Decline.
    Decline,
}

/// How deep a schema is followed when a value is made up for it.
const MAX_DEPTH: usize = 8;

/// The calling client `connect` is, toward the server's questions.
pub(crate) struct Answers {
    answer: Answer,
    capabilities: Value,
}

impl Answers {
    pub(crate) fn new(answer: Answer) -> Arc<Answers> {
        Arc::new(Answers {
            answer,
            capabilities: json!({"elicitation": {"form": {}}}),
        })
    }

    /// The answer to one question (`{method, params}`).
    fn answer(&self, question: &Value) -> Result<Value, InputError> {
        let method = question.get("method").and_then(Value::as_str).unwrap_or("");
        let params = question.get("params").cloned().unwrap_or(Value::Null);
        if method != "elicitation/create" {
            return Err(InputError::Unsupported {
                method: method.to_owned(),
            });
        }
        let form = params.get("mode").and_then(Value::as_str).unwrap_or("form") == "form";
        Ok(match (self.answer, form) {
            (Answer::AcceptDefaults, true) => {
                let schema = params.get("requestedSchema").unwrap_or(&Value::Null);
                json!({"action": "accept", "content": form_content(schema)})
            }
            _ => json!({"action": "decline"}),
        })
    }
}

impl CallInput for Answers {
    fn capabilities(&self) -> &Value {
        &self.capabilities
    }

    fn start_task(&self) {}

    fn ask(&self, params: &str, _call: &CallState) -> Result<Value, InputError> {
        let questions: Value =
            serde_json::from_str(params).map_err(|e| InputError::Failed(e.to_string()))?;
        let mut responses = Map::new();
        if let Some(Value::Object(requests)) = questions.get("requests") {
            for (key, question) in requests {
                responses.insert(key.clone(), self.answer(question)?);
            }
        }
        Ok(json!({ "responses": responses }))
    }
}

/// A form's content: every field with a default, and every required field (made up when it has
/// none).
fn form_content(schema: &Value) -> Value {
    let required = required(schema);
    let mut content = Map::new();
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, property) in properties {
            if let Some(default) = property.get("default") {
                content.insert(name.clone(), default.clone());
            } else if required.contains(&name.as_str()) {
                content.insert(name.clone(), made_up(property, 0));
            }
        }
    }
    Value::Object(content)
}

/// The names a schema lists as `required`.
fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Arguments for a tool whose input schema is `schema`: its required fields, made up.
pub(crate) fn arguments(schema: &Value) -> Map<String, Value> {
    match made_up(schema, 0) {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// A value `schema` accepts, as plausible as can be told from it alone: its default, const or
/// first enum value or example, else one of its type (an object with its required fields). A
/// `$ref` is never followed (nor fetched).
fn made_up(schema: &Value, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::Null;
    }
    for key in ["default", "const"] {
        if let Some(v) = schema.get(key) {
            return v.clone();
        }
    }
    for key in ["enum", "examples"] {
        if let Some(v) = schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return v.clone();
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return made_up(first, depth + 1);
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types.first().and_then(Value::as_str).unwrap_or("string"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    of_type(kind, schema, depth)
}

/// A value of JSON Schema type `kind` for `schema`.
fn of_type(kind: &str, schema: &Value, depth: usize) -> Value {
    match kind {
        "object" => {
            let mut object = Map::new();
            for name in required(schema) {
                let property = schema.pointer(&format!("/properties/{}", escape(name)));
                let value = property.map_or(json!("test"), |p| made_up(p, depth + 1));
                object.insert(name.to_owned(), value);
            }
            Value::Object(object)
        }
        "array" => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = schema
                .get("items")
                .map_or(json!("test"), |i| made_up(i, depth + 1));
            Value::Array((0..min.min(4)).map(|_| item.clone()).collect())
        }
        "number" | "integer" => json!(1),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("test"),
    }
}

/// `name` as a JSON pointer token.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_made_up_from_the_required_fields_and_a_ref_is_not_followed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"type": "number"}, "b": {"type": "integer"}, "c": {"type": "string"},
                "mode": {"enum": ["fast", "slow"]}, "when": {"$ref": "https://x.test/s.json"},
                "inner": {"type": "object", "properties": {"k": {"type": "boolean"}}, "required": ["k"]},
                "optional": {"type": "string"}
            },
            "required": ["a", "b", "c", "mode", "when", "inner"]
        });
        assert_eq!(
            Value::Object(arguments(&schema)),
            json!({"a": 1, "b": 1, "c": "test", "mode": "fast", "when": "test", "inner": {"k": true}})
        );
        assert!(arguments(&json!({"type": "object"})).is_empty());
    }

    #[test]
    fn a_form_is_accepted_with_its_defaults_or_declined() {
        let question = json!({"method": "elicitation/create", "params": {
            "message": "m",
            "requestedSchema": {"type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive"], "default": "active"},
                "verified": {"type": "boolean", "default": true},
                "email": {"type": "string"},
                "nickname": {"type": "string"}
            }, "required": ["email"]}
        }});
        let accepted = Answers::new(Answer::AcceptDefaults)
            .answer(&question)
            .unwrap();
        assert_eq!(
            accepted,
            json!({"action": "accept", "content": {"name": "John Doe", "age": 30, "score": 95.5,
                "status": "active", "verified": true, "email": "test"}})
        );
        let declined = Answers::new(Answer::Decline).answer(&question).unwrap();
        assert_eq!(declined, json!({"action": "decline"}));
        let url =
            json!({"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}});
        let accepting = Answers::new(Answer::AcceptDefaults);
        assert_eq!(
            accepting.answer(&url).unwrap(),
            json!({"action": "decline"})
        );
        let sampling = json!({"method": "sampling/createMessage", "params": {}});
        assert!(matches!(
            accepting.answer(&sampling),
            Err(InputError::Unsupported { .. })
        ));
    }
}
