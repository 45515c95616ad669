#!/usr/bin/env python3
"""The conformance suite's client under test: `mcp-host connect`.

The suite (`conformance client --command "python3 client-adapter.py" --scenario S`) runs this
with the scenario's server URL as the last argument and says what the scenario is in its
environment: MCP_CONFORMANCE_SCENARIO, MCP_CONFORMANCE_PROTOCOL_VERSION (0.2.0 suites only;
2025-11-25 when absent) and MCP_CONFORMANCE_CONTEXT (JSON: credentials, the tool calls to make).
This maps them to `mcp-host connect` flags and runs it in its place: the product never reads
these variables. The mcp-host executable is $MCP_HOST_BIN (default: target/debug/mcp-host of
this checkout).
"""

import json
import os
import subprocess
import tempfile
import sys
from pathlib import Path

# The CIMD client id the suite's authorization servers expect (they never fetch it).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def flags(scenario, context):
    """The `connect` flags for a scenario and its context."""
    if scenario == "http-custom-headers":
        return [
            "--call=%s=%s" % (c["name"], json.dumps(c.get("arguments", {})))
            for c in context.get("toolCalls", [])
        ]
    if scenario in ("initialize", "request-metadata", "json-schema-ref-no-deref"):
        return []
    if scenario == "http-standard-headers":
        return ["--call-all", "--read-all"]
    if scenario == "auth/pre-registration":
        out = ["--call-all", "--client-id", context["client_id"]]
        if context.get("issuer"):
            out += ["--issuer", context["issuer"]]
        return out
    if scenario.startswith("auth/client-credentials"):
        return ["--call-all", "--client-credentials", "--client-id", context["client_id"]]
    return ["--call-all"]


def echo_schema(base, tool):
    """`--call json_schema_echo={"schema": <tool's inputSchema as listed>}`: the schema as this
    client read it from tools/list (a first `connect --json` run lists the tools)."""
    listing = subprocess.run(base + ["--json"], stdout=subprocess.PIPE, check=False)
    tools = json.loads(listing.stdout or b"{}").get("tools", [])
    schema = next((t["inputSchema"] for t in tools if t["name"] == tool), {})
    return ["--call=json_schema_echo=%s" % json.dumps({"schema": schema})]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: client-adapter.py [ARGS...] URL (run by the conformance suite)")
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    protocol = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    root = Path(__file__).resolve().parents[2]
    exe = os.environ.get("MCP_HOST_BIN") or str(root / "target" / "debug" / "mcp-host")
    argv = [
        exe,
        "connect",
        url,
        "--protocol",
        protocol,
        "--browser",
        "fetch",
        "--client-metadata-url",
        CLIENT_METADATA_URL,
        "--answer",
        "accept-defaults",
        "--timeout",
        "25",
    ]
    if scenario == "json-schema-2020-12-preservation":
        argv += echo_schema(argv, "json_schema_2020_12_tool")
    else:
        argv += flags(scenario, context)
    env = dict(os.environ)
    # A client secret goes in the environment, not on the command line (`ps` shows that).
    if "--client-id" in argv and context.get("client_secret"):
        env["MCP_HOST_CLIENT_SECRET"] = context["client_secret"]
    sys.stderr.write("client-adapter: %s\n" % " ".join(argv[1:]))
    sys.stderr.flush()
    if context.get("private_key_pem"):
        sys.exit(with_private_key(argv, env, context))
    os.execve(exe, argv, env)


def with_private_key(argv, env, context):
    """Run `argv` with `--private-key FILE` (the context's PEM, in an owner-only temporary file
    removed afterwards) and `--signing-algorithm`: its exit code."""
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(context["private_key_pem"])
        alg = context.get("signing_algorithm") or "ES256"
        argv = argv + ["--private-key", path, "--signing-algorithm", alg]
        return subprocess.run(argv, env=env, check=False).returncode
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
