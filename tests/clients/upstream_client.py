"""Drive mcp-host serving upstream servers with the official Python SDK client (`mcp` 2.x).

Usage: upstream_client.py COMMAND...   (a command line that serves MCP on stdio)

Calls `py_add` and `http_echo`, reads `greeting://hello`; prints one JSON object on stdout.
"""

import json
import sys
import time

import anyio
from mcp import Client, StdioServerParameters


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def wait_for_tools(client, names, seconds=60):
    """The host connects its upstream servers in the background: wait until it serves `names`."""
    deadline = time.monotonic() + seconds
    while True:
        tools = {t.name for t in (await client.list_tools()).tools}
        if all(n in tools for n in names) or time.monotonic() > deadline:
            return tools
        await anyio.sleep(0.1)


async def run(command):
    server = StdioServerParameters(command=command[0], args=command[1:])
    report = {}
    async with Client(server, cache=None) as client:
        tools = await wait_for_tools(client, ("py_add", "http_echo"))
        report["tools"] = sorted(tools)
        report["py_add"] = text_of(await client.call_tool("py_add", {"a": 2, "b": 3}))
        report["http_echo"] = text_of(await client.call_tool("http_echo", {"text": "over http"}))
        read = await client.read_resource("greeting://hello")
        report["greeting"] = read.contents[0].text
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(run, sys.argv[1:])
