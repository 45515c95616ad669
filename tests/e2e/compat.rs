//! Binary compatibility: plugins built against an earlier SDK release (committed under
//! `tests/compat/`, never rebuilt) load and work with the current host, whatever the SDK's source
//! has become since. The ABI is frozen; this is the test that says so.

#![allow(clippy::unwrap_used)]

use mcp_host::{CallOptions, RequestContext};
use mcp_host_tests::{Layout, runtime, text, workspace_root};
use mcp_plugin_sdk::UserInfo;
use serde_json::{Value, json};

/// The directory of artifacts built against SDK 0.1.0.
fn sdk_0_1_0() -> std::path::PathBuf {
    workspace_root().join("tests/compat/sdk-0.1.0")
}

/// A layout whose tool directory holds a copy of the old build of `file`.
fn layout_with(file: &str) -> (Layout, std::path::PathBuf) {
    let l = Layout::new();
    let dest = l.dir("d").join(file);
    std::fs::copy(sdk_0_1_0().join(file), &dest).unwrap();
    let cfg = l.config("tool_dirs: [d]\n");
    (l, cfg)
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn a_plugin_built_against_sdk_0_1_0_loads_and_its_tools_work() {
    let (l, cfg) = layout_with("libfixture_basic.so");
    let host = l.host(&cfg);
    let rt = runtime();
    let call = |name: &str, args: Value, caller: Option<UserInfo>| {
        rt.block_on(host.call(
            name,
            Some(args),
            CallOptions::for_request(std::sync::Arc::new(RequestContext::for_caller(caller))),
        ))
        .unwrap()
    };
    assert_eq!(text(&call("echo", json!({"text": "hi"}), None)), "hi");
    // A nested call back through the host API.
    assert_eq!(text(&call("shout", json!({"text": "hi"}), None)), "HI");
    // The caller crosses as JSON.
    let me = call("whoami", json!({}), Some(UserInfo::new("ana")));
    assert_eq!(me["structuredContent"]["user_id"], "ana", "{me}");
    // Async tools run on the old plugin's own runtime.
    assert_eq!(
        text(&call("async_sleep", json!({"millis": 1}), None)),
        "async slept 1 ms"
    );
    // Argument validation against the old manifest's schema.
    let bad = call("count", json!({"steps": 0}), None);
    assert_eq!(bad["isError"], true, "{bad}");
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn schemas_of_a_plugin_built_against_sdk_0_1_0_are_read_as_they_were() {
    let (l, cfg) = layout_with("libfixture_schema.so");
    let file = l.root.path().join("d/libfixture_schema.so");
    let report = l.check(&cfg, &file);
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(sdk_0_1_0().join("schema-tools.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["manifest"]["tools"], expected);
}
