"""Drive mcp-host's call policy on resource reads and prompts with the official Python SDK client
(`mcp` 2.x) and report each request's outcome as JSON.

Usage: policy_client.py MODE TARGET...
  MODE    2026-07-28 (approvals are input_required rounds) | legacy (elicitation requests)
  TARGET  an http(s) URL, or a command line that serves MCP on stdio

Reads the resources and gets the prompts named in the steps below, in order; each step's report is
`{"ok": true, "text": ...}` or `{"ok": false, "code": ..., "message": ..., "data": ...}`. The
elicitation callback approves a question only when it shows a field whose value ends in `yes`
(`id: "ask-yes"`, `arg2: "yes"`), and records every question it was asked.
"""

import json
import sys
import time

import anyio
import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

STEPS = [
    ("read", "test://static-text"),
    ("read", "test://template/1/data"),
    ("read", "test://template/2/data"),
    ("read", "test://template/3/data"),
    ("read", "test://template/ask-yes/data"),
    ("read", "test://template/ask-no/data"),
    ("prompt", {"arg1": "deny", "arg2": "x"}),
    ("prompt", {"arg1": "ask", "arg2": "yes"}),
    ("prompt", {"arg1": "ask", "arg2": "no"}),
    ("prompt", {"arg1": "a", "arg2": "b"}),
    ("prompt", {"arg1": "a", "arg2": "b"}),
    ("prompt", {"arg1": "a", "arg2": "b"}),
    ("read", "greeting://person/Ada"),
    ("read", "greeting://person/Eve"),
    ("upstream_prompt", {"code": "fn main() {}"}),
    ("upstream_prompt", {"code": "rm -rf /"}),
    ("tool", "test_simple_text"),
]

QUESTIONS = []


async def on_elicit(ctx, params):
    message = getattr(params, "message", "")
    QUESTIONS.append(message)
    return types.ElicitResult(action="accept", content={"approve": 'yes"' in message})


def text_of_read(result):
    return "".join(getattr(c, "text", "") or "" for c in result.contents)


def text_of_prompt(result):
    return "".join(getattr(m.content, "text", "") or "" for m in result.messages)


async def step(client, kind, what):
    try:
        if kind == "read":
            text = text_of_read(await client.read_resource(what))
        elif kind == "prompt":
            text = text_of_prompt(await client.get_prompt("test_prompt_with_arguments", what))
        elif kind == "upstream_prompt":
            text = text_of_prompt(await client.get_prompt("py_review", what))
        else:
            result = await client.call_tool(what, {})
            return {"ok": not result.is_error, "text": "".join(getattr(c, "text", "") for c in result.content)}
        return {"ok": True, "text": text[:200]}
    except MCPError as e:
        return {"ok": False, "code": e.code, "message": e.message, "data": e.data}


async def wait_for_prompt(client, name, seconds=60):
    """The host connects its upstream servers in the background: wait until it serves `name`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if name in {p.name for p in (await client.list_prompts()).prompts}:
            return
        await anyio.sleep(0.1)


async def run(mode, target):
    if target[0].startswith("http"):
        server = target[0]
    else:
        server = StdioServerParameters(command=target[0], args=target[1:])
    report = {"mode": mode, "steps": []}
    async with Client(server, mode=mode, cache=None, elicitation_callback=on_elicit) as client:
        report["protocol_version"] = client.protocol_version
        await wait_for_prompt(client, "py_review")
        for kind, what in STEPS:
            report["steps"].append(await step(client, kind, what))
    report["questions"] = QUESTIONS
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(run, sys.argv[1], sys.argv[2:])
