#!/usr/bin/env python3
"""Regenerate packaging/startup-order/startup-order.txt: the functions of the mcp-host binary that run while it
starts and serves its first requests, which the linker places together at the front of `.text`.

Why: a start touches about 1.9 MB of code spread over the 14 MB `.text`; the kernel maps 64 kB around
every page it faults in, so the start left ~8 MB of the binary resident and paid a page fault per
scattered page. Packed together, the same code is ~2 MB. `packaging/dist-build` hands the file to the
linker (`--symbol-ordering-file`) for the exact rustc and target it was made with.

How: builds the deployment build (`cargo build --profile dist`), then runs the host under valgrind's callgrind
(which records every function executed, in every thread and child process) through the starts a
user's client makes: stdio and HTTP, probe cache cold and warm, plugins loaded at start and at their
first call, both protocol eras, a tool of each packaged plugin. Every function of the binary seen
executed is written out, mangled, one a line.

Run it again after changing the toolchain or the dependencies (symbol names carry a hash of each
crate's version, features and rustc): `packaging/dist-build` says so when fewer than 90 % of the
listed functions exist in the binary it builds.

Usage: python3 packaging/startup-order/update.py   (needs valgrind; takes a few minutes)
"""

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "packaging", "startup-order", "startup-order.txt")
EXE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "dist", "mcp-host")
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
# One call of a tool of each packaged plugin (each loads its plugin when it loads at its first call).
CALLS = [
    ("current_time", {"zone": "UTC"}),
    ("hash_text", {"text": "hello"}),
    ("query_health_indicators", {}),
]
DEADLINE = 120  # seconds; valgrind runs the host ~50x slower


def modern(i, method, params=None):
    params = dict(params or {})
    params["_meta"] = META
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


def legacy(i, method, params=None):
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params or {}}


def stdio_messages():
    msgs = [modern(1, "tools/list")]
    msgs += [modern(2 + n, "tools/call", {"name": t, "arguments": a}) for n, (t, a) in enumerate(CALLS)]
    msgs += [
        legacy(10, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "order", "version": "1"}}),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        legacy(11, "tools/list"),
        legacy(12, "tools/call", {"name": "hash_text", "arguments": {"text": "again"}}),
    ]
    return msgs


def callgrind(out_dir, args, env):
    return [
        "valgrind", "--tool=callgrind", "--demangle=no", "--trace-children=yes",
        "--callgrind-out-file=" + os.path.join(out_dir, "cg.%p"), EXE,
    ] + args


def run_stdio(out_dir, config, env, msgs, linger=0):
    """Serve `msgs` over stdio, each answered before the next is sent; `linger` seconds later
    (what a start does once it is up, such as the file watcher's catch-up rescan) close stdin (the
    host exits)."""
    p = subprocess.Popen(callgrind(out_dir, ["--config", config, "serve", "--stdio"], env),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env=env)
    for m in msgs:
        p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.flush()
        if "id" in m and not p.stdout.readline():
            sys.exit("the host closed stdout early")
    time.sleep(linger)
    p.stdin.close()
    p.wait(timeout=DEADLINE)


def run_http(out_dir, config, env):
    env = dict(env, RUST_LOG="info")  # the address is read from the log
    """Serve over HTTP: both eras, then SIGTERM (graceful shutdown)."""
    p = subprocess.Popen(callgrind(out_dir, ["--config", config, "serve", "--listen", "127.0.0.1:0"],
                                   env),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    port = None
    deadline = time.time() + DEADLINE
    for line in p.stderr:
        m = re.search(r"127\.0\.0\.1:(\d+)", line)
        if m and "listening" in line.lower():
            port = int(m.group(1))
            break
        if time.time() > deadline:
            break
    if port is None:
        p.kill()
        sys.exit("the HTTP host did not report its address")

    def post(body, session=None):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if "_meta" in body.get("params", {}):
            headers["MCP-Protocol-Version"] = "2026-07-28"
            headers["Mcp-Method"] = body["method"]
            if "name" in body["params"]:
                headers["Mcp-Name"] = body["params"]["name"]
        elif session:
            headers["Mcp-Session-Id"] = session
            headers["MCP-Protocol-Version"] = "2025-06-18"
        c.request("POST", "/mcp", json.dumps(body), headers)
        r = c.getresponse()
        r.read()
        return r

    post(modern(1, "tools/list"))
    for n, (t, a) in enumerate(CALLS):
        post(modern(2 + n, "tools/call", {"name": t, "arguments": a}))
    init = post(legacy(10, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                          "clientInfo": {"name": "order", "version": "1"}}))
    session = init.getheader("Mcp-Session-Id")
    post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    post(legacy(11, "tools/list"), session)
    post(legacy(12, "tools/call", {"name": "hash_text", "arguments": {"text": "again"}}), session)
    p.send_signal(signal.SIGTERM)
    for _ in p.stderr:
        pass
    p.wait(timeout=DEADLINE)


def executed_functions(out_dir):
    """Mangled names of the binary's functions in every callgrind profile of `out_dir`."""
    seen = set()
    for name in os.listdir(out_dir):
        obs, fns, ob = {}, {}, None
        for line in open(os.path.join(out_dir, name), errors="replace"):
            key, _, rest = line.rstrip("\n").partition("=")
            if key not in ("ob", "cob", "fn", "cfn"):
                continue
            m = re.match(r"\((\d+)\)(?: (.*))?$", rest)
            table = obs if key.endswith("ob") else fns
            if m:
                if m.group(2) is not None:
                    table[m.group(1)] = m.group(2)
                value = table.get(m.group(1))
            else:
                value = rest
            if key == "ob":
                ob = value
            elif key == "fn" and ob and os.path.basename(ob) == "mcp-host" and value:
                # Unnamed code ("0x..."), and callgrind's recursion levels ("name'2").
                if not value.startswith("0x") and value != "(below main)":
                    seen.add(re.sub(r"'\d+$", "", value))
    return seen


def main():
    if not shutil.which("valgrind"):
        sys.exit("valgrind is needed (Debian: apt-get install valgrind)")
    subprocess.run(["cargo", "build", "--profile", "dist", "-p", "mcp-host"], cwd=ROOT, check=True)
    # The default configuration serves the packaged plugins from target/release.
    subprocess.run(["cargo", "build", "--release", "-p", "mcp-time", "-p", "mcp-text", "-p", "mcp-series"],
                   cwd=ROOT, check=True)
    version = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    release = re.search(r"^release: (.*)$", version, re.M).group(1)
    commit = re.search(r"^commit-hash: (.*)$", version, re.M).group(1)
    host = re.search(r"^host: (.*)$", version, re.M).group(1)

    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.join(tmp, "home")
        os.mkdir(home)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("XDG_", "MCP_", "RUST_LOG"))}
        env["HOME"] = home
        config = os.path.join(ROOT, "config", "mcp-host.yaml")

        def phase(name, run):
            out = os.path.join(tmp, name)
            os.mkdir(out)
            run(out)
            return executed_functions(out)

        # The first start in a new home: probe cache cold, plugins probed and loaded at start.
        cold = phase("cold", lambda d: run_stdio(d, config, env, stdio_messages()))
        # Warm starts as a client makes them: `tools/list` answered and the process idle, with and
        # without a log filter; then the first calls and a legacy session; then HTTP.
        start = phase("start", lambda d: [run_stdio(d, config, e, [modern(1, "tools/list")], linger=5)
                                           for e in (env, dict(env, RUST_LOG="info"))])
        serve = phase("serve", lambda d: run_stdio(d, config, env, stdio_messages()))
        http = phase("http", lambda d: run_http(d, config, env))

    # Most needed first: what every start runs, then the first calls, HTTP, the first start.
    groups = [("warm start, tools/list answered", start),
              ("first calls, a legacy session", serve - start),
              ("HTTP", http - serve - start),
              ("first start (probe, load at start)", cold - http - serve - start)]
    with open(OUT, "w") as f:
        f.write("# Functions of mcp-host run at start and by its first requests, placed first in .text\n")
        f.write("# by the linker (see packaging/dist-build). Made by packaging/startup-order/update.py for:\n")
        f.write(f"# rustc {release} {commit} {host}\n")
        for title, functions in groups:
            f.write(f"# {title}\n")
            for name in sorted(functions):
                f.write(name + "\n")
    counts = ", ".join(f"{title}: {len(functions)}" for title, functions in groups)
    print(f"{os.path.relpath(OUT, ROOT)}: {counts}")


if __name__ == "__main__":
    main()
