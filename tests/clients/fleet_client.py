"""Drive a fleet of mcp-host replicas behind one load balancer with the official Python SDK client
(`mcp` 2.x), in 2026-07-28 mode and in legacy mode, and report what happened as JSON.

Usage: fleet_client.py URL GATE_DIR

Every HTTP response is recorded with the replica that served it (the `Mcp-Replica` header), the
HTTP method and the JSON-RPC method, so the test can check where each request landed. Two pauses
let the test act on the fleet; the script prints a line and waits for a file in GATE_DIR:

  INSTALL            three listen streams (one per replica) are open: the test drops a plugin into
                     the shared tool directory, then creates GATE_DIR/installed
  KILL <replica>     a long task runs on <replica>: the test stops it, then creates GATE_DIR/killed

After the second pause both clients go on through the remaining replicas; a request that fails
because its replica died is retried once (and counted). The last stdout line is the JSON report.
Exits non-zero on any client-side failure.

The Python SDK has no tasks client: `Tasks` below plugs one into its extension hooks (a result
claim for `resultType: "task"` that polls `tasks/get`). Its `listen()` cannot ask for task ids, so
task notifications are read from a raw `subscriptions/listen` stream.
"""

import json
import os
import sys
import time
from contextlib import AsyncExitStack
from typing import Any, Literal

import anyio
import mcp.types as types
from mcp import Client
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

TASKS = "io.modelcontextprotocol/tasks"
WAIT = 20  # seconds: generous deadlines, every wait ends as soon as its event happens
RECORDS = []


# ------------------------------------------------------------------------------------------------
# The tasks extension, client side


class CreateTaskResult(types.Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class DetailedTask(types.Result):
    result_type: str = "complete"
    task_id: str
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class GetTask(types.Request[dict[str, Any], Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTask(types.Request[dict[str, Any], Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTask(types.Request[dict[str, Any], Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


async def get_task(session, task_id):
    return await session.send_request(GetTask(params={"taskId": task_id}), DetailedTask)


async def wait_for(session, task_id, statuses):
    with anyio.fail_after(WAIT):
        while True:
            task = await get_task(session, task_id)
            if task.status in statuses:
                return task
            await anyio.sleep((task.poll_interval_ms or 200) / 1000)


async def resolve(created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
    task = await wait_for(ctx.session, created.task_id, ("completed", "failed", "cancelled"))
    if task.status == "completed":
        return types.CallToolResult.model_validate(task.result)
    if task.status == "failed":
        raise MCPError(task.error["code"], task.error["message"], task.error.get("data"))
    raise RuntimeError(f"task {created.task_id} was cancelled")


class Tasks(ClientExtension):
    identifier = TASKS

    def claims(self):
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=resolve)]


# ------------------------------------------------------------------------------------------------
# Helpers


async def on_response(response):
    request = response.request
    method = None
    if request.method == "POST":
        try:
            method = json.loads(request.content).get("method")
        except (ValueError, AttributeError):
            method = None
    RECORDS.append(
        {
            "http": request.method,
            "method": method,
            "replica": response.headers.get("mcp-replica"),
            "status": response.status_code,
        }
    )


def http_client():
    client = create_mcp_http_client()
    client.event_hooks["response"].append(on_response)
    return client


async def on_elicit(ctx, params):
    props = (getattr(params, "requested_schema", None) or {}).get("properties", {})
    content = {}
    for name in props:
        content[name] = {"name": "Ada", "color": "teal", "confirm": True, "username": "ada"}.get(name, "x")
        if name == "email":
            content[name] = "ada@example.com"
    return types.ElicitResult(action="accept", content=content)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def gate(directory, name, line):
    print(line, flush=True)
    path = os.path.join(directory, name)
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test never opened {path}")
        await anyio.sleep(0.05)


async def retry_once(report, what, call):
    """A request whose replica died may fail once; the client retries it through the others."""
    try:
        return await call()
    except Exception as e:  # noqa: BLE001 - any transport or server error counts as the one retry
        report["retries"].append({"what": what, "error": repr(e)[:300]})
        return await call()


async def next_event(sub):
    with anyio.fail_after(WAIT):
        async for event in sub:
            return event


# ------------------------------------------------------------------------------------------------
# Phases


async def modern_phase(client, report):
    report["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
    report["greet"] = text_of(await client.call_tool("greet", {"name": "fleet"}))
    # Two input-required rounds (each retry may reach another replica: the state is sealed with
    # the shared key).
    report["multi_round"] = text_of(await client.call_tool("test_input_required_result_multi_round", {}))
    # A task polled to its end by the client's extension.
    report["task_result"] = text_of(await client.call_tool("slow_compute", {"seconds": 0.5, "label": "fleet"}))
    # A task started, polled, cancelled.
    started = await client.session.call_tool("slow_compute", {"seconds": 60, "label": "long"}, allow_claimed=True)
    polled = await get_task(client.session, started.task_id)
    await client.session.send_request(CancelTask(params={"taskId": started.task_id}), types.Result)
    cancelled = await wait_for(client.session, started.task_id, ("cancelled", "completed", "failed"))
    report["cancel"] = {"created": started.status, "polled": polled.status, "end": cancelled.status}
    # A task that asks a question: input_required, answered with tasks/update; its notifications
    # arrive on a listen stream opened on one replica while the answer goes through another.
    asking = await client.session.call_tool("confirm_delete", {"filename": "a.txt"}, allow_claimed=True)
    waiting = await wait_for(client.session, asking.task_id, ("input_required",))
    keys = sorted((waiting.input_requests or {}).keys())
    notes = await task_notifications(client, asking.task_id, keys)
    done = await wait_for(client.session, asking.task_id, ("completed", "failed", "cancelled"))
    report["input_task"] = {
        "keys": keys,
        "end": done.status,
        "text": "".join(c.get("text", "") for c in (done.result or {}).get("content", [])),
        "notified": notes,
    }
    # A plugin's announcement on one replica reaches a listen stream on another.
    async with client.listen(tools_list_changed=True) as sub:
        await client.call_tool("test_trigger_tool_change", {})
        event = await next_event(sub)
        report["listen"] = type(event).__name__


async def task_notifications(client, task_id, keys):
    """Open a raw listen stream for the task, answer its questions (tasks/update through the SDK,
    so through another replica), and collect the task's statuses from the stream until it ends."""
    body = {
        "jsonrpc": "2.0",
        "id": "listen-task",
        "method": "subscriptions/listen",
        "params": {
            "notifications": {"taskIds": [task_id]},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    statuses = []
    async with http_client() as http:
        async with http.stream("POST", URL, json=body, headers=headers) as stream:
            lines = stream.aiter_lines()
            with anyio.fail_after(WAIT):
                async for line in lines:
                    if line.startswith("data:") and "subscriptions/acknowledged" in line:
                        break
            answers = {k: {"action": "accept", "content": {"confirm": True}} for k in keys}
            await client.session.send_request(
                UpdateTask(params={"taskId": task_id, "inputResponses": answers}), types.Result
            )
            with anyio.fail_after(WAIT):
                async for line in lines:
                    if not line.startswith("data:"):
                        continue
                    message = json.loads(line[5:])
                    if message.get("method") == "notifications/tasks":
                        statuses.append(message["params"]["status"])
                        if message["params"]["status"] in ("completed", "failed", "cancelled"):
                            break
    return statuses


async def watch_phase(client, report, gates):
    """Three listen streams, one per replica (round robin); a plugin dropped into the shared tool
    directory reaches each through its own replica's watcher."""
    async with AsyncExitStack() as stack:
        subs = [await stack.enter_async_context(client.listen(tools_list_changed=True)) for _ in range(3)]
        await gate(gates, "installed", "INSTALL")
        report["watch"] = [type(await next_event(sub)).__name__ for sub in subs]
    with anyio.fail_after(WAIT):
        while True:
            tools = {t.name for t in (await client.list_tools()).tools}
            if "echo" in tools:
                break
            await anyio.sleep(0.1)
    report["echo"] = text_of(await client.call_tool("echo", {"text": "from the new plugin"}))


async def legacy_phase(client, report, notes):
    report["legacy_version"] = client.protocol_version
    report["legacy_tools"] = len((await client.list_tools()).tools)
    report["legacy_greet"] = text_of(await client.call_tool("greet", {"name": "legacy"}))
    # A server-to-client request on the call's stream; the client's answer is a new POST that
    # lands on another replica, which hands it to the one waiting.
    report["legacy_elicitation"] = text_of(await client.call_tool("test_elicitation", {"message": "Who?"}))
    # The session's log level lives in the store: set through one replica, applied by another.
    await client.set_logging_level("error")
    await client.call_tool("test_logging_tool", {})
    quiet = len(notes["logs"])
    await client.set_logging_level("debug")
    await client.call_tool("test_logging_tool", {})
    report["legacy_logs"] = {"at_error": quiet, "at_debug": len(notes["logs"])}
    # A subscription made through one replica; the update comes from a call on another, and the
    # notification on the GET stream wherever it is open.
    await client.subscribe_resource("test://watched-resource")
    await client.call_tool("test_update_watched_resource", {})
    with anyio.fail_after(WAIT):
        while not notes["updated"]:
            await anyio.sleep(0.05)
    report["legacy_updated"] = notes["updated"][0]


async def after_kill(modern, legacy, report, long_task):
    report["after_kill"] = {}
    after = report["after_kill"]
    # The task ran on the stopped replica: its lease runs out and any replica reports it failed.
    ended = await retry_once(report, "tasks/get", lambda: wait_for(modern.session, long_task, ("failed", "completed", "cancelled")))
    after["orphan"] = {"status": ended.status, "message": ended.status_message}
    tools = await retry_once(report, "tools/list", modern.list_tools)
    after["tools"] = len(tools.tools)
    greet = await retry_once(report, "tools/call greet", lambda: modern.call_tool("greet", {"name": "survivor"}))
    after["greet"] = text_of(greet)
    task = await retry_once(report, "task", lambda: modern.call_tool("slow_compute", {"seconds": 0.2, "label": "after"}))
    after["task"] = text_of(task)
    legacy_greet = await retry_once(report, "legacy greet", lambda: legacy.call_tool("greet", {"name": "legacy survivor"}))
    after["legacy_greet"] = text_of(legacy_greet)
    asked = await retry_once(report, "legacy elicitation", lambda: legacy.call_tool("test_elicitation", {"message": "Still there?"}))
    after["legacy_elicitation"] = text_of(asked)


async def run(url, gates):
    global URL
    URL = url
    report = {"retries": []}
    notes = {"logs": [], "updated": []}

    async def on_log(params):
        notes["logs"].append(params.level)

    async def on_message(message):
        if isinstance(message, types.ServerNotification):
            root = getattr(message, "root", message)
            if getattr(root, "method", None) == "notifications/resources/updated":
                notes["updated"].append(str(root.params.uri))

    async with AsyncExitStack() as stack:
        modern = await stack.enter_async_context(
            Client(
                streamable_http_client(url, http_client=await stack.enter_async_context(http_client())),
                mode="2026-07-28",
                cache=None,
                elicitation_callback=on_elicit,
                extensions=[Tasks()],
            )
        )
        await modern_phase(modern, report)
        report["modern_records"] = len(RECORDS)
        await watch_phase(modern, report, gates)
        legacy_start = len(RECORDS)
        legacy = await stack.enter_async_context(
            Client(
                streamable_http_client(url, http_client=await stack.enter_async_context(http_client())),
                mode="legacy",
                cache=None,
                elicitation_callback=on_elicit,
                logging_callback=on_log,
                message_handler=on_message,
            )
        )
        await legacy_phase(legacy, report, notes)
        report["legacy_records"] = [legacy_start, len(RECORDS)]
        # A long task; the test stops the replica that runs it.
        long_task = await modern.session.call_tool("slow_compute", {"seconds": 60, "label": "orphan"}, allow_claimed=True)
        runner = RECORDS[-1]["replica"]
        report["kill_at"] = len(RECORDS)
        report["killed"] = runner
        await gate(gates, "killed", f"KILL {runner}")
        await after_kill(modern, legacy, report, long_task.task_id)
    report["records"] = RECORDS
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    anyio.run(run, sys.argv[1], sys.argv[2])
