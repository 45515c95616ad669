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
/// The root is always an object; every object schema with `properties`, nested ones included, is
/// strict (see [`close_objects`]); integer types carry their bounds; `$schema` and the generated
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
    close_objects(&mut value, false);
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

/// Keywords whose value is one subschema.
const ONE_SUBSCHEMA: &[&str] = &[
    "items",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
];
/// Keywords whose value is a map of names to subschemas.
const SUBSCHEMA_MAPS: &[&str] = &["properties", "patternProperties", "$defs", "definitions"];
/// Keywords that combine subschemas which each see only part of an object.
const COMBINATORS: &[&str] = &["allOf", "anyOf", "oneOf"];

/// Make every object schema of an input schema strict: a schema with `properties` and neither
/// `additionalProperties` nor `unevaluatedProperties` gets `"additionalProperties": false`, so a
/// misspelled field of a nested struct is refused (by the host, which validates arguments against
/// the schema before the plugin runs) instead of being dropped while the tool runs on a default.
///
/// What an author or schemars set is kept: a map (`additionalProperties: {schema}`), a struct with
/// `#[schemars(extend("additionalProperties" = true))]` (the opt-out), `serde_json::Value`
/// (`{"type": "object"}`, no `properties`).
///
/// Composition (`#[serde(flatten)]` of an enum, which schemars writes as `allOf` / `oneOf` next to
/// `properties`): a branch sees only its own properties, so closing it would refuse the others'.
/// There the combining schema gets `"unevaluatedProperties": false` (which counts what every branch
/// evaluated) and its branches stay open. `open` is true for such a branch.
pub(crate) fn close_objects(value: &mut Value, open: bool) {
    let Value::Object(map) = value else { return };
    let combines = COMBINATORS.iter().any(|k| map.contains_key(*k));
    let has_properties = map.contains_key("properties");
    let decided =
        map.contains_key("additionalProperties") || map.contains_key("unevaluatedProperties");
    // The branches of `allOf` always describe parts of one object; those of `oneOf` / `anyOf` are
    // whole alternatives unless they sit next to `properties` (or inside an open branch).
    let parts = open || has_properties;
    if !open && !decided && !map.contains_key("$ref") {
        if combines && (has_properties || map.contains_key("allOf")) {
            map.insert("unevaluatedProperties".into(), Value::Bool(false));
        } else if has_properties && !combines {
            map.insert("additionalProperties".into(), Value::Bool(false));
        }
    }
    for (key, child) in map.iter_mut() {
        let key = key.as_str();
        if ONE_SUBSCHEMA.contains(&key) {
            close_objects(child, false);
        } else if SUBSCHEMA_MAPS.contains(&key) {
            if let Value::Object(children) = child {
                children.values_mut().for_each(|c| close_objects(c, false));
            }
        } else if key == "prefixItems" {
            if let Value::Array(children) = child {
                children.iter_mut().for_each(|c| close_objects(c, false));
            }
        } else if COMBINATORS.contains(&key)
            && let Value::Array(branches) = child
        {
            let open = parts || key == "allOf";
            branches.iter_mut().for_each(|b| close_objects(b, open));
        }
    }
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

    /// A nested struct, with schemars' bounds on its fields.
    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Window {
        #[schemars(range(min = 1, max = 24))]
        hours: u8,
        #[schemars(length(min = 1, max = 8))]
        label: String,
    }

    /// The opt-out: a nested struct that takes any other field.
    #[derive(JsonSchema)]
    #[schemars(extend("additionalProperties" = true))]
    #[allow(dead_code)]
    struct Loose {
        known: bool,
    }

    #[derive(JsonSchema)]
    #[serde(tag = "kind")]
    #[allow(dead_code)]
    enum Shape {
        Circle { radius: f64 },
        Square { side: f64 },
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    enum Unit {
        Celsius { offset: f64 },
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct WithFlatten {
        name: String,
        #[serde(flatten)]
        shape: Shape,
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Nested {
        window: Window,
        maybe: Option<Window>,
        windows: Vec<Window>,
        loose: Loose,
        shape: Shape,
        unit: Unit,
        flat: WithFlatten,
        map: std::collections::BTreeMap<String, Window>,
        any: Value,
    }

    #[test]
    fn nested_objects_are_strict_unless_the_author_opts_out() {
        let s = input_schema_with_headers::<Nested>(&[], &[]);
        let p = &s["properties"];
        assert_eq!(p["window"]["additionalProperties"], false, "{s:#}");
        // Bounds of a nested struct's fields come from schemars' own attributes.
        let hours = &p["window"]["properties"]["hours"];
        assert_eq!(
            (&hours["minimum"], &hours["maximum"]),
            (&json!(1), &json!(24))
        );
        let label = &p["window"]["properties"]["label"];
        assert_eq!(
            (&label["minLength"], &label["maxLength"]),
            (&json!(1), &json!(8))
        );
        let maybe = p["maybe"].to_string();
        assert!(maybe.contains(r#""additionalProperties":false"#), "{maybe}");
        assert_eq!(p["windows"]["items"]["additionalProperties"], false);
        assert_eq!(
            p["map"]["additionalProperties"]["additionalProperties"],
            false
        );
        assert_eq!(p["loose"]["additionalProperties"], true);
        assert!(p["any"].get("additionalProperties").is_none(), "{s:#}");
        for branch in p["shape"]["oneOf"].as_array().unwrap() {
            assert_eq!(branch["additionalProperties"], false, "{branch}");
        }
        for branch in p["unit"]["oneOf"].as_array().unwrap() {
            let inner = &branch["properties"]["Celsius"];
            assert_eq!(inner["additionalProperties"], false, "{branch}");
        }
        // A flattened enum: the whole object is closed, its branches (which see only their own
        // fields) are not.
        let flat = &p["flat"];
        assert_eq!(flat["unevaluatedProperties"], false, "{flat:#}");
        assert!(flat.get("additionalProperties").is_none(), "{flat:#}");
        for branch in flat["oneOf"].as_array().unwrap() {
            assert!(branch.get("additionalProperties").is_none(), "{branch}");
        }
    }

    #[cfg(feature = "validation")]
    #[test]
    fn a_misspelled_nested_field_is_refused_and_the_opt_out_is_not() {
        let schema = input_schema_with_headers::<Nested>(&[], &[]);
        let v = crate::validation::InputValidator::compile(&schema).unwrap();
        let window = json!({"hours": 2, "label": "a"});
        let good = json!({
            "window": window, "windows": [window], "loose": {"known": true, "extra": 1},
            "shape": {"kind": "Circle", "radius": 1.0}, "unit": {"Celsius": {"offset": 0.5}},
            "flat": {"name": "n", "kind": "Square", "side": 2.0}, "map": {"k": window}, "any": {"x": 1},
        });
        assert_eq!(v.check("t", &good), Ok(()));
        let typo = |pointer: &str, bad: Value| {
            let mut args = good.clone();
            *args.pointer_mut(pointer).unwrap() = bad;
            v.check("t", &args).unwrap_err()
        };
        let e = typo("/window", json!({"hours": 2, "lable": "a"}));
        assert!(
            e.contains("argument `window`") && e.contains("'lable' was unexpected"),
            "{e}"
        );
        let e = typo("/windows/0", json!({"hours": 2, "label": "a", "x": 1}));
        assert!(e.contains("argument `windows.0`"), "{e}");
        let e = typo("/window/hours", json!(25));
        assert!(
            e.contains("argument `window.hours`") && e.contains("maximum"),
            "{e}"
        );
        let e = typo(
            "/shape",
            json!({"kind": "Circle", "radius": 1.0, "side": 2.0}),
        );
        assert!(e.contains("argument `shape`"), "{e}");
        let e = typo(
            "/flat",
            json!({"name": "n", "kind": "Square", "side": 2.0, "nmae": "x"}),
        );
        assert!(e.contains("argument `flat`"), "{e}");
    }
}
