#!/usr/bin/env bash
# Installs the MCP clients the protocol tests drive, into the project-local, gitignored .ci/.tools/:
#   - Node 22 (the conformance suite needs >= 22; Debian has 18, the machine has 20), from the npm
#     registry's prebuilt `node-linux-<arch>` package (the binary the `node` package's installer fetches);
#   - the official conformance suite, two pinned versions (0.1.16 for 2025-11-25, 0.2.0-alpha.12 for
#     2026-07-28);
#   - the TypeScript SDK v1 client (`@modelcontextprotocol/sdk`, latest 1.x);
#   - a Python venv with the Python SDK `mcp` 2.x, and for the operator tests the OpenTelemetry
#     protobuf definitions (`opentelemetry-proto`: the OTLP/HTTP receiver in tests/otlp decodes the
#     host's exported spans with them) and `prometheus-client` (its OpenMetrics parser reads
#     `/metrics`), and `selenium` (the console tests drive headless Chromium through Debian's
#     chromium-driver, which .ci/install-services.sh installs);
#   - the MCP Inspector (its CLI mode drives the server in the interop tests);
#   - the upstream servers `@modelcontextprotocol/server-everything` and `server-filesystem`;
#   - `oidc-provider` (a real OpenID provider / OAuth 2.1 authorization server, run by
#     tests/fixtures/oidc/provider.mjs as the authorization server of the OAuth e2e tests).
# Only package registries are used (npm, PyPI). Idempotent: what is already there at the right version
# is kept. Prints the versions at the end; exits non-zero on any failure.
#
# Afterwards:  .ci/.tools/bin/node                     Node 22
#              .ci/.tools/bin/conformance-2025-11-25    the 0.1.16 suite CLI (run with Node 22)
#              .ci/.tools/bin/conformance-2026-07-28    the 0.2.0-alpha.12 suite CLI
#              .ci/.tools/venv/bin/python              Python with `mcp`
#              .ci/.tools/tssdk/node_modules/@modelcontextprotocol/sdk
#              .ci/.tools/upstreams/node_modules/@modelcontextprotocol/server-{everything,filesystem}
#              .ci/.tools/oidc/node_modules/oidc-provider
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_VERSION=22.23.5
CONFORMANCE_LEGACY=0.1.16
CONFORMANCE_MODERN=0.2.0-alpha.12
TS_SDK_MAJOR=1
PY_MCP_VERSION=2.3.0
PY_OTEL_PROTO_VERSION=1.45.2
PY_PROMETHEUS_CLIENT_VERSION=0.26.0
PY_SELENIUM_VERSION=4.51.0
INSPECTOR_VERSION=2.12.0
UPSTREAM_EVERYTHING_VERSION=2026.8.31
UPSTREAM_FILESYSTEM_VERSION=2026.8.31
OIDC_PROVIDER_VERSION=9.13.3

TOOLS="$PWD/.ci/.tools"
mkdir -p "$TOOLS/bin"
# The physical path: a worktree whose .ci/.tools is a symlink to another checkout's must not write
# wrappers that reach the tools through itself (they would break for everyone when it is removed).
TOOLS="$(cd "$TOOLS" && pwd -P)"
BIN="$TOOLS/bin"

NPM_FLAGS=(--no-audit --no-fund --no-update-notifier --loglevel=error)

# The version of npm package $2 installed under prefix $1, or nothing.
installed_version() {
    local pj="$1/node_modules/$2/package.json"
    [[ -f "$pj" ]] || return 0
    sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pj" | head -n1
}

# npm_pin PREFIX PACKAGE SPEC WANT: install PACKAGE@SPEC into PREFIX unless the installed version
# matches the regex WANT.
npm_pin() {
    local prefix="$1" pkg="$2" spec="$3" want="$4" have
    have="$(installed_version "$prefix" "$pkg")"
    if [[ -n "$have" && "$have" =~ $want ]]; then
        echo "   $pkg $have already in ${prefix#"$PWD"/}"
        return 0
    fi
    echo "   installing $pkg@$spec into ${prefix#"$PWD"/}"
    mkdir -p "$prefix"
    npm install --prefix "$prefix" "${NPM_FLAGS[@]}" "$pkg@$spec"
    have="$(installed_version "$prefix" "$pkg")"
    if [[ ! "$have" =~ $want ]]; then
        echo "error: $pkg installed as '$have', wanted $spec" >&2
        return 1
    fi
}

command -v npm >/dev/null || { echo "error: npm is required (it installs Node 22 and the clients)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 is required" >&2; exit 1; }

echo "== Node $NODE_VERSION (npm package node-linux-<arch>)"
case "$(uname -m)" in
    x86_64 | amd64) node_arch=x64 ;;
    aarch64 | arm64) node_arch=arm64 ;;
    *) echo "error: no Node package for architecture $(uname -m)" >&2; exit 1 ;;
esac
node_pkg="node-linux-$node_arch"
npm_pin "$TOOLS/node" "$node_pkg" "$NODE_VERSION" "^${NODE_VERSION//./\\.}\$"
ln -sfn "$TOOLS/node/node_modules/$node_pkg/bin/node" "$BIN/node"
NODE="$BIN/node"
node_version="$("$NODE" --version)"
if [[ "$node_version" != v22.* ]]; then
    echo "error: $NODE reports '$node_version', wanted v22.x" >&2
    exit 1
fi

echo "== conformance suite $CONFORMANCE_LEGACY and $CONFORMANCE_MODERN"
conformance_pkg=@modelcontextprotocol/conformance
for rev_ver in "2025-11-25:$CONFORMANCE_LEGACY" "2026-07-28:$CONFORMANCE_MODERN"; do
    rev="${rev_ver%%:*}"
    ver="${rev_ver#*:}"
    dir="$TOOLS/conformance-$ver"
    npm_pin "$dir" "$conformance_pkg" "$ver" "^${ver//./\\.}\$"
    # A wrapper that runs the CLI with Node 22 (its shebang would pick the system's Node 20, on
    # which it crashes: it imports fs.globSync).
    cat > "$BIN/conformance-$rev.tmp" <<EOF
#!/bin/sh
exec "$NODE" "$dir/node_modules/$conformance_pkg/dist/index.js" "\$@"
EOF
    chmod +x "$BIN/conformance-$rev.tmp"
    mv "$BIN/conformance-$rev.tmp" "$BIN/conformance-$rev"
done

echo "== TypeScript SDK @modelcontextprotocol/sdk@$TS_SDK_MAJOR.x"
npm_pin "$TOOLS/tssdk" @modelcontextprotocol/sdk "^$TS_SDK_MAJOR.0.0" "^$TS_SDK_MAJOR\\."

echo "== MCP Inspector $INSPECTOR_VERSION (its CLI mode)"
npm_pin "$TOOLS/inspector" @modelcontextprotocol/inspector "$INSPECTOR_VERSION" "^${INSPECTOR_VERSION//./\\.}\$"
cat > "$BIN/mcp-inspector.tmp" <<EOF
#!/bin/sh
exec "$NODE" "$TOOLS/inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js" "\$@"
EOF
chmod +x "$BIN/mcp-inspector.tmp"
mv "$BIN/mcp-inspector.tmp" "$BIN/mcp-inspector"

echo "== Upstream MCP servers (npm): server-everything $UPSTREAM_EVERYTHING_VERSION, server-filesystem $UPSTREAM_FILESYSTEM_VERSION"
# The real servers the upstream tests (tests/e2e/upstream.rs) serve through the host, run with
# the machine's node; the Python upstream is the venv's `mcp` below.
npm_pin "$TOOLS/upstreams" "@modelcontextprotocol/server-everything" "$UPSTREAM_EVERYTHING_VERSION" "^${UPSTREAM_EVERYTHING_VERSION//./\\.}\$"
npm_pin "$TOOLS/upstreams" "@modelcontextprotocol/server-filesystem" "$UPSTREAM_FILESYSTEM_VERSION" "^${UPSTREAM_FILESYSTEM_VERSION//./\\.}\$"

echo "== oidc-provider $OIDC_PROVIDER_VERSION (the OAuth tests' authorization server)"
# tests/fixtures/oidc/provider.mjs (run with Node 22) imports it from this prefix's node_modules.
npm_pin "$TOOLS/oidc" oidc-provider "$OIDC_PROVIDER_VERSION" "^${OIDC_PROVIDER_VERSION//./\\.}\$"

echo "== Python venv with mcp==$PY_MCP_VERSION, opentelemetry-proto, prometheus-client"
VENV="$TOOLS/venv"
# The installed version of Python package $1, or nothing.
py_version() {
    "$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true
}
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
if [[ "$(py_version mcp)" == "$PY_MCP_VERSION" ]]; then
    echo "   mcp $PY_MCP_VERSION already in ${VENV#"$PWD"/}"
else
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$PY_MCP_VERSION"
fi
"$VENV/bin/python" -c 'from mcp import Client, StdioServerParameters' # the 2.x client API imports
if [[ "$(py_version opentelemetry-proto)" == "$PY_OTEL_PROTO_VERSION" \
    && "$(py_version prometheus-client)" == "$PY_PROMETHEUS_CLIENT_VERSION" ]]; then
    echo "   opentelemetry-proto $PY_OTEL_PROTO_VERSION and prometheus-client $PY_PROMETHEUS_CLIENT_VERSION already there"
else
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "opentelemetry-proto==$PY_OTEL_PROTO_VERSION" "prometheus-client==$PY_PROMETHEUS_CLIENT_VERSION"
fi
"$VENV/bin/python" -c 'from opentelemetry.proto.collector.trace.v1 import trace_service_pb2; from prometheus_client.openmetrics import parser'
if [[ "$(py_version selenium)" == "$PY_SELENIUM_VERSION" ]]; then
    echo "   selenium $PY_SELENIUM_VERSION already there"
else
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "selenium==$PY_SELENIUM_VERSION"
fi
"$VENV/bin/python" -c 'from selenium.webdriver.chrome.service import Service'

echo "== versions"
echo "node:                 $node_version ($NODE)"
echo "conformance (legacy): $("$BIN/conformance-2025-11-25" --version) ($BIN/conformance-2025-11-25)"
echo "conformance (2026):   $("$BIN/conformance-2026-07-28" --version) ($BIN/conformance-2026-07-28)"
echo "TypeScript SDK:       $(installed_version "$TOOLS/tssdk" @modelcontextprotocol/sdk) ($TOOLS/tssdk)"
echo "Python SDK mcp:       $(py_version mcp) ($VENV/bin/python)"
echo "MCP Inspector:        $(installed_version "$TOOLS/inspector" @modelcontextprotocol/inspector) ($BIN/mcp-inspector)"
echo "opentelemetry-proto:  $(py_version opentelemetry-proto), prometheus-client: $(py_version prometheus-client) ($VENV/bin/python)"
echo "oidc-provider:        $(installed_version "$TOOLS/oidc" oidc-provider) ($TOOLS/oidc)"
echo "selenium:             $(py_version selenium) ($VENV/bin/python; drives Debian's chromium-driver)"
