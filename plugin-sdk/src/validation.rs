//! Tool arguments checked against the tool's input schema, exactly as mcp-host checks them before a
//! plugin runs: the host uses this module, and so does the author test kit
//! ([`TestPlugin`](crate::testing::TestPlugin)), so a test sees the host's own messages. Behind the
//! `validation` feature (which `testing` turns on): it brings in the `jsonschema` crate, which a
//! plugin's own build does not need.

use serde_json::Value;

/// A tool's input schema, compiled once.
///
/// ```
/// use mcp_plugin_sdk::json;
/// use mcp_plugin_sdk::validation::InputValidator;
/// let schema = json!({
///     "type": "object",
///     "properties": {"days": {"type": "integer", "minimum": 1}},
///     "required": ["days"],
///     "additionalProperties": false,
/// });
/// let v = InputValidator::compile(&schema).unwrap();
/// assert!(v.check("count", &json!({"days": 3})).is_ok());
/// assert_eq!(
///     v.check("count", &json!({"days": 0})).unwrap_err(),
///     "Invalid arguments for tool count: argument `days`: 0 is less than the minimum of 1 (rule: minimum)"
/// );
/// assert!(InputValidator::compile(&json!({"type": "array"})).is_err());
/// ```
pub struct InputValidator(jsonschema::Validator);

impl std::fmt::Debug for InputValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputValidator").finish_non_exhaustive()
    }
}

impl InputValidator {
    /// Check an input schema without compiling it — cheap, and nothing is kept: its root must be
    /// `"type": "object"` and it must be valid against the JSON Schema 2020-12 meta-schema. A
    /// schema that passes can still fail [`InputValidator::compile`] (a `$ref` that resolves
    /// nowhere, a `pattern` that is not a regular expression).
    ///
    /// ```
    /// use mcp_plugin_sdk::validation::InputValidator;
    /// use serde_json::json;
    ///
    /// assert!(InputValidator::check_schema(&json!({"type": "object"})).is_ok());
    /// assert!(InputValidator::check_schema(&json!({"type": "object", "minProperties": -1})).is_err());
    /// ```
    pub fn check_schema(schema: &Value) -> Result<(), String> {
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err("the root must be `\"type\": \"object\"`".into());
        }
        jsonschema::draft202012::meta::validate(schema).map_err(|e| e.to_string())
    }

    /// Compile an input schema: its root must be `"type": "object"`; JSON Schema 2020-12 unless it
    /// names another dialect. Remote `$ref`s are never fetched (the crate is built without its
    /// HTTP resolver).
    pub fn compile(schema: &Value) -> Result<Self, String> {
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err("the root must be `\"type\": \"object\"`".into());
        }
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(schema)
            .map(InputValidator)
            .map_err(|e| e.to_string())
    }

    /// Check the arguments of a call of tool `tool`: `Err` names each argument and rule (the first
    /// five problems), in the message the host sends back as an `isError` result (SEP-1303).
    /// An argument `user_info` is always refused: the caller comes from verified credentials.
    pub fn check(&self, tool: &str, args: &Value) -> Result<(), String> {
        if !args.is_object() {
            return Err(format!(
                "Invalid arguments for tool {tool}: arguments must be a JSON object"
            ));
        }
        // The everyday case first: `is_valid` stops at the first failure and builds no errors.
        if args.get("user_info").is_none() && self.0.is_valid(args) {
            return Ok(());
        }
        // The caller is injected by the host from verified credentials; it can never be an
        // argument, whatever a hand-written schema allows.
        let mut problems = Vec::new();
        if args.get("user_info").is_some() {
            problems.push(
                "argument `user_info` is not allowed: the caller comes from verified credentials, \
                 never from arguments"
                    .to_owned(),
            );
        }
        for error in self.0.iter_errors(args).take(5) {
            let path = error.instance_path().to_string();
            let rule = error
                .schema_path()
                .to_string()
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_owned();
            let arg = path.trim_start_matches('/').replace('/', ".");
            if arg.is_empty() {
                problems.push(format!("{error} (rule: {rule})"));
            } else {
                problems.push(format!("argument `{arg}`: {error} (rule: {rule})"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "Invalid arguments for tool {tool}: {}",
                problems.join("; ")
            ))
        }
    }
}
