"""Call an upstream with `server.auth` through mcp-host with the official Python SDK client (`mcp`
2.x), as a user whose client opens URLs: the host asks it to open a consent link (URL-mode
elicitation), the "user" (the test, driving a headless browser) follows it, and the call goes on.

Usage: upstream_oauth_client.py URL TOKEN MODE TOOL
  MODE  legacy (a 2025-11-25 session: `elicitation/create` arrives as a request on the call's
        stream; the client accepts at once — "the user agreed to open it" — and the host waits for
        the consent, then sends `notifications/elicitation/complete` and answers the call)
        | 2026-07-28 (the question comes in the call's `input_required` result; the client answers
        once the user says the browser is done: a line on stdin — the SDK then retries the call)

Prints `URL <url>` for each consent link (flushed), `COMPLETE <elicitationId>` for each
completion notification, and finally `RESULT <json>` with the tool's structured content (or
`ERROR <text>`).
"""

import json
import sys

import anyio
import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def say(line):
    print(line, flush=True)


async def run(url, token, mode, tool):
    async def on_elicit(ctx, params):
        if getattr(params, "mode", None) != "url":
            return types.ElicitResult(action="decline")
        say(f"URL {params.url}")
        if mode != "legacy":
            # The user comes back from the browser.
            await anyio.to_thread.run_sync(sys.stdin.readline)
        return types.ElicitResult(action="accept")

    async def on_message(message):
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/elicitation/complete":
            say(f"COMPLETE {root.params.elicitation_id}")

    headers = {"Authorization": f"Bearer {token}"}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            cache=None,
            elicitation_callback=on_elicit,
            message_handler=on_message,
        ) as client:
            result = await client.call_tool(tool, {})
            if result.is_error:
                say("ERROR " + "".join(getattr(c, "text", "") for c in result.content))
                return
            content = result.structured_content
            if content is None:
                content = json.loads("".join(getattr(c, "text", "") for c in result.content))
            say("RESULT " + json.dumps(content))


if __name__ == "__main__":
    anyio.run(run, *sys.argv[1:5])
