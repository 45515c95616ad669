"""Drive mcp-host with the official Python SDK client (`mcp` 2.x) and report what happened as JSON.

Usage: python_client.py MODE TARGET...
  MODE    2026-07-28 | legacy
  TARGET  an http(s) URL, or a command line to spawn for stdio (e.g. mcp-host --config c.yaml serve --stdio)

Lists the tools, calls every packaged tool with sample arguments (and `count` with a progress callback
when it is served), and prints one JSON object on stdout. Exits non-zero on any client-side failure.
"""

import json
import sys

import anyio
from mcp import Client, StdioServerParameters

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


async def run(mode, target):
    if target[0].startswith("http"):
        server = target[0]
    else:
        server = StdioServerParameters(command=target[0], args=target[1:])
    report = {"mode": mode, "calls": {}, "progress": []}
    async with Client(server, mode=mode) as client:
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
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(run, sys.argv[1], sys.argv[2:])
