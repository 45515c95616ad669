//! The authoring API end to end: schemas generated from Rust types and docs (golden JSON), injected
//! parameters, defaults and ranges, and every result shape — through a real host and real plugins.

#![allow(clippy::unwrap_used)]

use mcp_host::{CallOptions, RequestContext};
use mcp_host_tests::{Layout, runtime, text, workspace_root};
use mcp_plugin_sdk::UserInfo;
use serde_json::{Value, json};

fn manifest_tools() -> Value {
    let l = Layout::new();
    let file = l.install("d", "fixture-schema", None);
    let cfg = l.config("tool_dirs: []\n");
    l.check(&cfg, &file)["manifest"]["tools"].clone()
}

fn tool<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

#[test]
fn schemas_for_every_supported_type_match_the_golden_file() {
    let tools = manifest_tools();
    let golden_path = workspace_root().join("tests/golden/schema-fixture-tools.json");
    let actual = serde_json::to_string_pretty(&tools).unwrap() + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden_path, &actual).unwrap();
    }
    let golden = std::fs::read_to_string(&golden_path)
        .expect("golden file missing: run with UPDATE_GOLDEN=1 once and review it");
    assert_eq!(
        actual, golden,
        "schemas changed: review, then UPDATE_GOLDEN=1"
    );
}

#[test]
fn types_map_to_the_json_schema_a_model_needs() {
    let tools = manifest_tools();
    let all = &tool(&tools, "all_types")["inputSchema"];
    let p = &all["properties"];
    assert_eq!(all["type"], "object");
    assert_eq!(all["additionalProperties"], false);
    assert_eq!(p["text"]["type"], "string");
    assert_eq!(p["flag"]["type"], "boolean");
    assert_eq!(
        (p["i8v"]["minimum"].clone(), p["i8v"]["maximum"].clone()),
        (json!(-128), json!(127))
    );
    assert_eq!(p["u16v"]["maximum"], 65535);
    assert_eq!(p["i32v"]["minimum"], i32::MIN);
    assert_eq!(p["u32v"]["maximum"], u32::MAX);
    assert_eq!(p["i64v"]["maximum"], i64::MAX);
    assert_eq!(p["u64v"]["maximum"], u64::MAX);
    assert_eq!(p["f64v"]["type"], "number");
    assert_eq!(p["list"]["type"], "array");
    assert_eq!(p["list"]["items"]["type"], "integer");
    // The seed's bug: an optional list fell back to "string". Here it is an optional array of strings.
    assert_eq!(p["tags"]["type"], json!(["array", "null"]));
    assert_eq!(p["tags"]["items"]["type"], "string");
    assert_eq!(p["map"]["type"], "object");
    assert_eq!(p["map"]["additionalProperties"]["type"], "integer");
    assert_eq!(p["any"]["type"], "object");
    assert_eq!(p["volume"]["enum"], json!(["low", "high"]));
    assert_eq!(p["point"]["type"], "object");
    assert_eq!(p["point"]["properties"]["x"]["type"], "number");
    assert_eq!(p["points"]["items"]["properties"]["y"]["type"], "number");
    assert_eq!(p["days"]["default"], 30);
    assert_eq!(
        (p["days"]["minimum"].clone(), p["days"]["maximum"].clone()),
        (json!(1), json!(365))
    );
    assert_eq!(p["zone"]["default"], "UTC");
    assert_eq!(
        (
            p["percent"]["minimum"].clone(),
            p["percent"]["maximum"].clone()
        ),
        (json!(0), json!(100))
    );
    // Descriptions come from the `# Arguments` section, continuation lines appended.
    assert_eq!(
        p["days"]["description"],
        "Defaults to 30, limited to 1..=365."
    );
    let required: Vec<&str> = all["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for r in [
        "text", "flag", "list", "map", "any", "volume", "point", "percent",
    ] {
        assert!(required.contains(&r), "{r} must be required: {required:?}");
    }
    for o in ["tags", "note", "days", "zone"] {
        assert!(!required.contains(&o), "{o} must be optional: {required:?}");
    }
}

#[test]
fn the_caller_and_context_never_appear_in_the_schema() {
    let tools = manifest_tools();
    let greet = tool(&tools, "greet_caller");
    let props = greet["inputSchema"]["properties"].as_object().unwrap();
    assert_eq!(props.keys().collect::<Vec<_>>(), vec!["greeting"]);
    assert_eq!(greet["caller"], "required");
    assert_eq!(tool(&tools, "maybe_caller")["caller"], "optional");
    assert_eq!(tool(&tools, "summarize")["caller"], "none");
}

#[test]
fn descriptions_annotations_meta_and_output_schemas_are_exported() {
    let tools = manifest_tools();
    let s = tool(&tools, "summarize");
    assert_eq!(
        s["description"],
        "Return a struct: structured content, JSON text and an output schema."
    );
    assert_eq!(s["title"], "Summarize");
    assert_eq!(s["annotations"]["idempotentHint"], true);
    assert_eq!(s["outputSchema"]["properties"]["count"]["type"], "integer");
    assert!(tool(&tools, "maybe_fail")["outputSchema"].is_null());
    assert_eq!(
        tool(&tools, "maybe_fail")["annotations"]["destructiveHint"],
        true
    );
    assert_eq!(
        tool(&tools, "all_types")["annotations"]["readOnlyHint"],
        true
    );
    let custom = tool(&tools, "custom_schema");
    assert_eq!(custom["inputSchema"]["required"], json!(["sections"]));
    assert_eq!(custom["_meta"]["example.com/ui"], "sections");
    let add = tool(&tools, "add_to_start");
    assert_eq!(add["service"], "Counter");
    assert_eq!(tool(&tools, "static_tool")["service"], "Counter");
    // A private method and a `#[tool(skip)]` public one are helpers, not tools.
    for helper in ["helper", "start"] {
        assert!(
            tools
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t["name"] != helper),
            "{helper} must not be a tool"
        );
    }
}

fn schema_host(l: &Layout) -> mcp_host::Host {
    l.install("d", "fixture-schema", None);
    let cfg = l.config("tool_dirs: [d]\nplugins:\n  fixture-schema:\n    config: {start: 40}\n");
    l.host(&cfg)
}

#[test]
fn defaults_are_applied_and_ranges_enforced_before_the_plugin_runs() {
    let l = Layout::new();
    let host = schema_host(&l);
    let rt = runtime();
    let args = json!({
        "text": "t", "flag": true, "i8v": 1, "i16v": 2, "i32v": 3, "i64v": 4, "u8v": 5, "u16v": 6,
        "u32v": 7, "u64v": 8, "f32v": 1.5, "f64v": 2.5, "list": [1], "map": {"a": 1},
        "ordered": {"k": "v"}, "any": {"x": [1]}, "volume": "high",
        "point": {"x": 1.0, "y": 2.0}, "points": [], "percent": 50
    });
    let r = rt
        .block_on(host.call("all_types", Some(args.clone()), CallOptions::default()))
        .unwrap();
    assert_ne!(r["isError"], true, "{r}");
    let out: Value = serde_json::from_str(text(&r)).unwrap();
    assert_eq!(out["days"], 30);
    assert_eq!(out["zone"], "UTC");
    assert_eq!(out["tags"], Value::Null);
    assert_eq!(out["volume"], "high");

    let mut bad = args.clone();
    bad["percent"] = json!(101);
    let r = rt
        .block_on(host.call("all_types", Some(bad), CallOptions::default()))
        .unwrap();
    assert_eq!(r["isError"], true);
    assert!(
        text(&r).contains("argument `percent`") && text(&r).contains("maximum"),
        "{r}"
    );

    let mut bad = args;
    bad["u8v"] = json!(256);
    bad["user_info"] = json!({"user_id": "mallory"});
    let r = rt
        .block_on(host.call("all_types", Some(bad), CallOptions::default()))
        .unwrap();
    assert!(text(&r).contains("argument `u8v`"), "{r}");
    assert!(text(&r).contains("'user_info' was unexpected"), "{r}");
}

#[test]
fn results_map_to_text_structured_content_errors_and_rich_content() {
    let l = Layout::new();
    let host = schema_host(&l);
    let rt = runtime();
    let call = |name: &str, args: Value| {
        rt.block_on(host.call(name, Some(args), CallOptions::default()))
            .unwrap()
    };
    let s = call("summarize", json!({"text": "hi"}));
    assert_eq!(s["structuredContent"], json!({"count": 1, "text": "hi"}));
    assert_eq!(
        serde_json::from_str::<Value>(text(&s)).unwrap(),
        s["structuredContent"]
    );
    let ok = call("maybe_fail", json!({"fail": false}));
    assert_eq!(ok, json!({"content": [{"type": "text", "text": "fine"}]}));
    let err = call("maybe_fail", json!({"fail": true}));
    assert_eq!(err["isError"], true);
    assert_eq!(text(&err), "it failed as asked");
    let rich = call("rich", json!({}));
    let kinds: Vec<&str> = rich["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(
        kinds,
        vec!["text", "image", "audio", "resource", "resource_link"]
    );
    assert_eq!(rich["content"][1]["data"], "iVBORw==");
    assert_eq!(rich["content"][1]["mimeType"], "image/png");
    assert_eq!(rich["content"][3]["resource"]["text"], "hello");
    let custom = call(
        "custom_schema",
        json!({"sections": [{"title": "a"}, {"title": "b"}]}),
    );
    assert_eq!(text(&custom), "2 sections");
    let svc = call("add_to_start", json!({"n": 2}));
    assert_eq!(
        svc["structuredContent"]["value"], 42,
        "the service was built from its config"
    );
    assert_eq!(text(&call("static_tool", json!({}))), "static");
}

#[test]
fn the_caller_is_injected_from_the_host_never_from_arguments() {
    let l = Layout::new();
    let host = schema_host(&l);
    let rt = runtime();
    let as_alice = CallOptions::for_request(std::sync::Arc::new(RequestContext::for_caller(Some(
        UserInfo::new("alice"),
    ))));
    let r = rt
        .block_on(host.call(
            "greet_caller",
            Some(json!({"greeting": "hello"})),
            as_alice.clone(),
        ))
        .unwrap();
    assert_eq!(text(&r), "hello, alice");
    let anon = rt
        .block_on(host.call("maybe_caller", None, CallOptions::default()))
        .unwrap();
    assert_eq!(text(&anon), "anonymous");
    let named = rt
        .block_on(host.call("maybe_caller", None, as_alice))
        .unwrap();
    assert_eq!(text(&named), "alice");
    // Even a hand-written schema that allows extra properties cannot smuggle a caller in.
    let smuggled = rt
        .block_on(host.call(
            "custom_schema",
            Some(json!({"sections": [], "user_info": {"user_id": "mallory"}})),
            CallOptions::default(),
        ))
        .unwrap();
    assert_eq!(smuggled["isError"], true, "{smuggled}");
    assert!(
        text(&smuggled).contains("`user_info` is not allowed"),
        "{smuggled}"
    );
    let refused = rt.block_on(host.call(
        "greet_caller",
        Some(json!({"greeting": "hi"})),
        CallOptions::default(),
    ));
    assert!(
        matches!(refused, Err(mcp_host::CallError::CallerRequired(_))),
        "{refused:?}"
    );
}

#[test]
fn async_tools_run_on_the_plugins_own_runtime() {
    let l = Layout::new();
    l.install("d", "fixture-basic", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let host = l.host(&cfg);
    let rt = runtime();
    let r = rt
        .block_on(host.call(
            "async_sleep",
            Some(json!({"millis": 10})),
            CallOptions::default(),
        ))
        .unwrap();
    assert_eq!(text(&r), "async slept 10 ms");
}

#[test]
fn every_tool_and_service_of_the_crate_is_exported_once_listed_or_not() {
    let l = Layout::new();
    let file = l.install("d", "fixture-exports", None);
    let cfg = l.config("tool_dirs: [d]\n");
    let report = l.check(&cfg, &file);
    let names: Vec<&str> = report["manifest"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    // The listed tool first and once (it is named three times), then the unlisted ones: free tools,
    // then services, each by name. The `#[tool(skip)]` helper is not among them.
    assert_eq!(
        names,
        [
            "listed",
            "unlisted",
            "unlisted_in_module",
            "unlisted_service_tool"
        ]
    );
    assert_eq!(report["manifest"]["services"][0]["name"], "Unlisted");
    assert_eq!(report["manifest"]["services"][0]["enabled"], true);

    // Loaded in-process (dlopen), the unlisted ones are served like the listed one.
    let host = l.host(&cfg);
    let rt = runtime();
    let call = |name: &str, args: Value| {
        rt.block_on(host.call(name, Some(args), CallOptions::default()))
            .unwrap()
    };
    assert_eq!(text(&call("listed", json!({}))), "listed");
    assert_eq!(text(&call("unlisted", json!({}))), "unlisted");
    assert_eq!(
        text(&call("unlisted_in_module", json!({"text": "hi"}))),
        "inner: hi"
    );
    assert_eq!(
        text(&call("unlisted_service_tool", json!({"text": "héllo"}))),
        "5 chars"
    );
}

#[test]
fn a_misspelled_field_of_a_nested_struct_is_refused_before_the_plugin_runs() {
    let tools = manifest_tools();
    let point = &tool(&tools, "all_types")["inputSchema"]["properties"]["point"];
    assert_eq!(point["additionalProperties"], false, "{point}");
    let l = Layout::new();
    let host = schema_host(&l);
    let rt = runtime();
    let args = json!({
        "text": "t", "flag": true, "i8v": 1, "i16v": 2, "i32v": 3, "i64v": 4, "u8v": 5, "u16v": 6,
        "u32v": 7, "u64v": 8, "f32v": 1.5, "f64v": 2.5, "list": [1], "map": {"a": 1},
        "ordered": {"k": "v"}, "any": {"x": [1]}, "volume": "high",
        "point": {"x": 1.0, "y": 2.0, "lable": "typo"}, "points": [{"x": 0, "y": 0, "z": 1}],
        "percent": 50
    });
    let r = rt
        .block_on(host.call("all_types", Some(args), CallOptions::default()))
        .unwrap();
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        text(&r).contains("argument `point`") && text(&r).contains("'lable' was unexpected"),
        "{r}"
    );
    assert!(text(&r).contains("argument `points.0`"), "{r}");
}

#[test]
fn a_struct_can_be_the_root_argument_schema_with_bounds_on_nested_fields() {
    let tools = manifest_tools();
    let schema = &tool(&tools, "search_window")["inputSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false, "{schema}");
    assert_eq!(schema["required"], json!(["query", "area"]), "{schema}");
    let p = &schema["properties"];
    assert_eq!(p["query"]["description"], "What to look for.");
    assert_eq!(
        (&p["query"]["minLength"], &p["query"]["maxLength"]),
        (&json!(1), &json!(100))
    );
    assert_eq!(
        (&p["hours"]["minimum"], &p["hours"]["maximum"]),
        (&json!(1), &json!(48))
    );
    assert_eq!(p["hours"]["default"], 24);
    assert_eq!(p["area"]["additionalProperties"], false, "{schema}");
    let lat = &p["area"]["properties"]["lat"];
    assert_eq!(
        (&lat["minimum"], &lat["maximum"]),
        (&json!(-90), &json!(90))
    );
    assert!(
        p["labels"]
            .to_string()
            .contains(r#""additionalProperties":true"#),
        "{schema}"
    );

    let l = Layout::new();
    let host = schema_host(&l);
    let rt = runtime();
    let call = |args: Value| {
        rt.block_on(host.call("search_window", Some(args), CallOptions::default()))
            .unwrap()
    };
    let ok = call(
        json!({"query": "rain", "area": {"lat": 1.5, "lon": 2}, "labels": {"colour": "red", "size": 3}}),
    );
    assert_eq!(text(&ok), "rain within 24 h of 1.5,2 red", "{ok}");
    let typo = call(json!({"query": "rain", "area": {"lat": 1, "lon": 2}, "hour": 3}));
    assert_eq!(typo["isError"], true, "{typo}");
    assert!(text(&typo).contains("'hour' was unexpected"), "{typo}");
    let nested = call(json!({"query": "rain", "area": {"lat": 91, "lon": 2, "alt": 0}}));
    assert_eq!(nested["isError"], true, "{nested}");
    assert!(
        text(&nested).contains("argument `area.lat`") && text(&nested).contains("maximum"),
        "{nested}"
    );
    assert!(text(&nested).contains("'alt' was unexpected"), "{nested}");
}
