//! JSON Schemas for tool arguments and results, generated from Rust types with schemars (2020-12).

use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::{Map, Value, json};

fn generator() -> schemars::SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            // Models cope far better with inline schemas than with `$ref`; recursive types keep `$defs`.
            s.inline_subschemas = true;
        })
        .into_generator()
}

/// The input schema of a tool whose arguments deserialize into `T`, with `defaults` advertised.
///
/// The root is always an object; integer types carry their bounds; `$schema` and the generated
/// struct's title are dropped (MCP's default dialect is 2020-12). `headers` are `x-mcp-header`
/// annotations: `(parameter, header name)` pairs whose values a 2026 HTTP client mirrors into
/// `Mcp-Param-{Name}` headers (so proxies can route on them), and which the host checks against the
/// body.
pub fn input_schema_with_headers<T: JsonSchema>(
    defaults: &[(&str, Option<Value>)],
    headers: &[(&str, &str)],
) -> Value {
    let mut value = generator().into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        map.remove("title");
        map.insert("type".into(), json!("object"));
        let props = map
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(props) = props {
            for (name, default) in defaults {
                if let (Some(Value::Object(prop)), Some(default)) = (props.get_mut(*name), default)
                {
                    prop.insert("default".into(), default.clone());
                }
            }
            for (name, header) in headers {
                if let Some(Value::Object(prop)) = props.get_mut(*name) {
                    prop.insert("x-mcp-header".into(), json!(header));
                }
            }
        }
    }
    normalize(&mut value);
    value
}

/// The `requestedSchema` of a form elicitation answered as `T`: an object of primitive properties,
/// without `$schema` or a title.
pub fn elicitation_schema<T: JsonSchema>() -> Value {
    let mut value = generator().into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        map.remove("title");
        map.insert("type".into(), json!("object"));
    }
    normalize(&mut value);
    value
}

/// The output schema for a tool returning `T`, when `T` serializes to an object.
pub fn output_schema<T: JsonSchema>() -> Option<Value> {
    let mut value = generator().into_root_schema_for::<T>().to_value();
    if value.get("type") != Some(&json!("object")) {
        return None;
    }
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
    }
    normalize(&mut value);
    Some(value)
}

/// The schema used for a `serde_json::Value` parameter: any object.
pub fn object_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

/// Make schemas model-friendly, recursively: integer (and `f32`) schemas get their type's bounds
/// where schemars leaves them out, and a `oneOf` of string constants (a documented unit enum)
/// becomes a plain `enum`, the variants' docs folded into the description.
fn normalize(value: &mut Value) {
    match value {
        Value::Object(map) => {
            collapse_const_one_of(map);
            let bounds: Option<(Value, Value)> = match map.get("format").and_then(Value::as_str) {
                Some("int32") => Some((json!(i32::MIN), json!(i32::MAX))),
                Some("uint32") => Some((json!(0), json!(u32::MAX))),
                Some("int64") | Some("int") => Some((json!(i64::MIN), json!(i64::MAX))),
                Some("uint64") | Some("uint") => Some((json!(0), json!(u64::MAX))),
                Some("float") => Some((json!(f32::MIN), json!(f32::MAX))),
                _ => None,
            };
            if let Some((min, max)) = bounds {
                map.entry("minimum").or_insert(min);
                map.entry("maximum").or_insert(max);
            }
            // schemars' Rust-type formats (`uint8`, `int64`, `double`, ...) are not JSON Schema
            // formats: validators warn about them. The bounds above already say what they meant.
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| RUST_NUMBER_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            for child in map.values_mut() {
                normalize(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

const RUST_NUMBER_FORMATS: &[&str] = &[
    "int8", "int16", "int32", "int64", "int128", "int", "uint8", "uint16", "uint32", "uint64",
    "uint128", "uint", "float", "double",
];

fn collapse_const_one_of(map: &mut Map<String, Value>) {
    let Some(Value::Array(variants)) = map.get("oneOf") else {
        return;
    };
    let mut values = Vec::new();
    let mut docs = Vec::new();
    for variant in variants {
        let (Some(constant), Some("string")) = (
            variant.get("const").and_then(Value::as_str),
            variant.get("type").and_then(Value::as_str),
        ) else {
            return;
        };
        values.push(json!(constant));
        if let Some(doc) = variant.get("description").and_then(Value::as_str) {
            docs.push(format!("`{constant}`: {doc}"));
        }
    }
    map.remove("oneOf");
    map.insert("type".into(), json!("string"));
    map.insert("enum".into(), Value::Array(values));
    if !docs.is_empty() {
        let joined = docs.join("; ");
        let description = match map.get("description").and_then(Value::as_str) {
            Some(d) => format!("{d} {joined}"),
            None => joined,
        };
        map.insert("description".into(), json!(description));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        count: u8,
        name: Option<String>,
    }

    #[test]
    fn input_schemas_are_objects_with_integer_bounds() {
        let schema = input_schema_with_headers::<Args>(&[], &[("name", "Name")]);
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["count"]["maximum"], 255);
        assert_eq!(schema["required"], json!(["count"]));
        assert_eq!(schema["properties"]["name"]["x-mcp-header"], "Name");
        assert!(schema.get("title").is_none() && schema.get("$schema").is_none());
    }
}
