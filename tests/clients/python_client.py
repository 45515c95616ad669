"""Drive mcp-host with the official Python SDK client (`mcp` 2.x) and report what happened as JSON.

Usage: python_client.py MODE TARGET...
  MODE    2026-07-28 | legacy
  TARGET  an http(s) URL, or a command line to spawn for stdio (e.g. mcp-host --config c.yaml serve --stdio)

Lists the tools, calls every packaged tool with sample arguments (and `count` with a progress callback
when it is served); lists and reads resources and templates, gets and completes a prompt, and answers
a tool's elicitation and sampling requests (fixture-conformance's test_elicitation / test_sampling,
when served) through the SDK's callbacks; prints one JSON object on stdout. Exits non-zero on any
client-side failure.
"""

import json
import sys

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

# Sample arguments for every packaged tool (plugins/time, plugins/text).
SAMPLES = {
    "current_time": {"zone": "Europe/Paris"},
    "convert_time": {"time": "2026-11-29 14:00", "from_zone": "Europe/Paris", "to_zones": ["America/New_York"]},
    "list_time_zones": {"filter": "Paris"},
    "time_between": {"start": "2026-01-01T00:00:00Z", "end": "2026-03-01T12:00:00Z"},
    "add_duration": {"time": "2026-03-28T10:00:00+01:00[Europe/Paris]", "duration": "1 day 2 hours"},
    "world_clock": {},
    "text_stats": {"text": "héllo wörld\nsecond line"},
    "json_query": {"json": "{\"a\": [1, 2, 3]}", "path": "$.a[1]"},
    "json_format": {"json": "{\"b\":1,\"a\":2}", "indent": 2},
    "regex_match": {"pattern": "(\\w+)@(\\w+)", "text": "mail bob@example now"},
    "regex_replace": {"pattern": "(\\d+)", "text": "a1b22", "replacement": "<$1>"},
    "hash_text": {"text": "hello"},
    "base64_encode": {"text": "hello"},
    "base64_decode": {"data": "aGVsbG8="},
    "hmac_sign": {"message": "hello"},
    "hmac_verify": {"message": "hello", "signature": "00"},
}


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def on_sampling(ctx, params):
    asked = "".join(getattr(m.content, "text", "") for m in params.messages)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"sampled answer to: {asked}"),
        model="interop-model",
        stop_reason="endTurn",
    )


async def on_elicit(ctx, params):
    return types.ElicitResult(action="accept", content={"username": "py-user", "email": "py@example.com"})


async def surface(client, report):
    """Resources, templates, prompts and completions (whatever the server serves)."""
    resources = (await client.list_resources()).resources
    report["resources"] = sorted(str(r.uri) for r in resources)
    templates = (await client.list_resource_templates()).resource_templates
    report["templates"] = sorted(t.uri_template for t in templates)
    reads = {}
    for uri in ["time://zones", "time://zones/Asia/Tokyo", "test://static-text", "test://template/123/data"]:
        result = await client.read_resource(uri)
        item = result.contents[0]
        reads[uri] = {"uri": str(item.uri), "mime": item.mime_type, "text": (getattr(item, "text", "") or "")[:200]}
    report["reads"] = reads
    try:
        await client.read_resource("test://nonexistent")
        report["missing"] = None
    except MCPError as e:
        report["missing"] = {"code": e.code, "data": e.data}
    prompts = (await client.list_prompts()).prompts
    report["prompts"] = sorted(p.name for p in prompts)
    got = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
    report["prompt_text"] = "".join(getattr(m.content, "text", "") for m in got.messages)
    done = await client.complete(
        types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
        {"name": "arg1", "value": "test"},
    )
    report["completion"] = done.completion.values
    zones = await client.complete(
        types.ResourceTemplateReference(type="ref/resource", uri="time://zones/{+zone}"),
        {"name": "zone", "value": "Europe/Pa"},
    )
    report["zone_completion"] = zones.completion.values
    asked = await client.call_tool("test_elicitation", {"message": "Who are you?"})
    report["calls"]["test_elicitation"] = {"is_error": bool(asked.is_error), "text": text_of(asked)}
    sampled = await client.call_tool("test_sampling", {"prompt": "capital of France?"})
    report["calls"]["test_sampling"] = {"is_error": bool(sampled.is_error), "text": text_of(sampled)}


async def run(mode, target):
    if target[0].startswith("http"):
        server = target[0]
    else:
        server = StdioServerParameters(command=target[0], args=target[1:])
    report = {"mode": mode, "calls": {}, "progress": []}
    async with Client(
        server, mode=mode, cache=None, sampling_callback=on_sampling, elicitation_callback=on_elicit
    ) as client:
        report["protocol_version"] = client.protocol_version
        tools = (await client.list_tools()).tools
        report["tools"] = sorted(t.name for t in tools)
        for tool in tools:
            if tool.name in SAMPLES:
                result = await client.call_tool(tool.name, SAMPLES[tool.name])
                report["calls"][tool.name] = {
                    "is_error": bool(result.is_error),
                    "text": text_of(result)[:300],
                    "structured": result.structured_content is not None,
                }
        if any(t.name == "count" for t in tools):
            async def on_progress(progress, total, message):
                report["progress"].append([progress, total, message])

            result = await client.call_tool("count", {"steps": 3}, progress_callback=on_progress)
            report["calls"]["count"] = {"is_error": bool(result.is_error), "text": text_of(result)}
        if any(t.name == "echo" for t in tools):
            result = await client.call_tool("echo", {"text": "grüße ✓"})
            report["calls"]["echo"] = {"is_error": bool(result.is_error), "text": text_of(result)}
            bad = await client.call_tool("echo", {"text": 5})
            report["calls"]["echo_bad_args"] = {"is_error": bool(bad.is_error), "text": text_of(bad)}
        if any(t.name == "test_elicitation" for t in tools):
            await surface(client, report)
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(run, sys.argv[1], sys.argv[2:])
