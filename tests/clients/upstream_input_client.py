"""Drive mcp-host serving `@modelcontextprotocol/server-everything` (prefix `ev_`, a 2025 server:
its questions are requests) and the Python SDK upstream (prefix `py_`, a 2026-07-28 server: its
questions are `input_required` results, to a tool call, a prompt and a resource read) with the
official Python SDK client (`mcp` 2.x), answering the upstreams' elicitation and sampling through
the SDK's callbacks; prints one JSON object on stdout.

Usage: upstream_input_client.py MODE COMMAND...
  MODE     legacy (2025 session: the questions arrive as requests) | 2026-07-28 (input_required rounds)
  COMMAND  a command line that serves MCP on stdio
"""

import json
import sys
import time

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters

WANTED = ("ev_trigger-elicitation-request", "ev_trigger-sampling-request", "py_greet_asked")


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
    schema = getattr(params, "requested_schema", None) or {}
    if "nickname" in (schema.get("properties") or {}):
        return types.ElicitResult(action="accept", content={"nickname": "Ada"})
    return types.ElicitResult(
        action="accept",
        content={"name": "Ada Lovelace", "check": True, "email": "ada@example.com"},
    )


async def run(mode, command):
    server = StdioServerParameters(command=command[0], args=command[1:])
    report = {"mode": mode}
    async with Client(
        server, mode=mode, cache=None, sampling_callback=on_sampling, elicitation_callback=on_elicit
    ) as client:
        report["protocol_version"] = client.protocol_version
        # The host connects its upstreams in the background, and server-everything registers these
        # tools once it knows the host can answer them (after its handshake), and says its list
        # changed: wait for the host to serve them.
        deadline = time.monotonic() + 60
        while True:
            tools = {t.name for t in (await client.list_tools()).tools}
            if all(t in tools for t in WANTED) or time.monotonic() > deadline:
                break
            await anyio.sleep(0.2)
        report["tools"] = sorted(tools)
        elicited = await client.call_tool("ev_trigger-elicitation-request", {})
        report["elicitation"] = {"is_error": bool(elicited.is_error), "text": text_of(elicited)}
        sampled = await client.call_tool("ev_trigger-sampling-request", {"prompt": "capital of France?"})
        report["sampling"] = {"is_error": bool(sampled.is_error), "text": text_of(sampled)}
        greeted = await client.call_tool("py_greet_asked", {})
        report["greet"] = {"is_error": bool(greeted.is_error), "text": text_of(greeted)}
        # The same question from a prompt and from a resource template of the 2026 upstream.
        welcomed = await client.get_prompt("py_welcome_asked", {})
        report["prompt"] = "".join(getattr(m.content, "text", "") for m in welcomed.messages)
        read = await client.read_resource("greeting://asked/Paris")
        report["resource"] = "".join(getattr(c, "text", "") for c in read.contents)
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(run, sys.argv[1], sys.argv[2:])
