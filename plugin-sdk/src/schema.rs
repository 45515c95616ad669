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
/// struct's title are dropped (MCP's default dialect is 2020-12).
///
/// ```
/// #[derive(schemars::JsonSchema)]
/// struct Args { count: u8, name: Option<String> }
/// let schema = mcp_plugin_sdk::schema::input_schema::<Args>(&[]);
/// assert_eq!(schema["type"], "object");
/// assert_eq!(schema["properties"]["count"]["maximum"], 255);
/// assert_eq!(schema["required"], serde_json::json!(["count"]));
/// ```
pub fn input_schema<T: JsonSchema>(defaults: &[(&str, Option<Value>)]) -> Value {
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
        }
    }
    add_numeric_bounds(&mut value);
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
    add_numeric_bounds(&mut value);
    Some(value)
}

/// The schema used for a `serde_json::Value` parameter: any object.
pub fn object_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

/// Give every integer (and `f32`) schema its type's bounds where schemars leaves them out.
fn add_numeric_bounds(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let bounds: Option<(Value, Value)> =
                match map.get("format").and_then(Value::as_str) {
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
            for child in map.values_mut() {
                add_numeric_bounds(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(add_numeric_bounds),
        _ => {}
    }
}
