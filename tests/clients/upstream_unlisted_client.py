"""Drive mcp-host serving two Python SDK upstreams (`tests/fixtures/upstream/server.py` with
`FIXTURE_TAG=a`, prefix `a_`, then with `FIXTURE_TAG=b`, prefix `b_`) with the official Python SDK
client (`mcp` 2.x): follow a tool's `resource_link` to a resource the upstream does not list, and
read URIs nothing lists; prints one JSON object on stdout (each read's text, or its error code).

Usage: upstream_unlisted_client.py MODE COMMAND...
  MODE     legacy (a 2025-11-25 session) | 2026-07-28
  COMMAND  a command line that serves MCP on stdio
"""

import json
import sys
import time

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

READS = (
    "fixture://b/3",
    "fixture://unlisted/listed-by-b",
    "fixture://nobody/1",
)


async def wait_for_tools(client, names, seconds=60):
    """The host connects its upstream servers in the background: wait until it serves `names`."""
    deadline = time.monotonic() + seconds
    while True:
        tools = {t.name for t in (await client.list_tools()).tools}
        if all(n in tools for n in names) or time.monotonic() > deadline:
            return tools
        await anyio.sleep(0.1)


async def read(client, uri):
    try:
        result = await client.read_resource(uri)
    except MCPError as e:
        return {"code": e.error.code}
    return "".join(getattr(c, "text", "") for c in result.contents)


async def run(mode, command):
    server = StdioServerParameters(command=command[0], args=command[1:])
    report = {"mode": mode}
    async with Client(server, mode=mode, cache=None) as client:
        report["protocol_version"] = client.protocol_version
        await wait_for_tools(client, ("a_report", "b_report"))
        called = await client.call_tool("a_report", {"n": 7})
        links = [c for c in called.content if getattr(c, "type", None) == "resource_link"]
        report["link"] = str(links[0].uri) if links else None
        if links:
            report["linked"] = await read(client, str(links[0].uri))
        listed = await client.list_resources()
        report["listed"] = sorted(str(r.uri) for r in listed.resources)
        report["reads"] = {uri: await read(client, uri) for uri in READS}
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(run, sys.argv[1], sys.argv[2:])
