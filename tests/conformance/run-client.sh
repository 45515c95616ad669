#!/usr/bin/env bash
# Runs the official MCP conformance suite's CLIENT mode with `mcp-host connect` as the client under
# test (through client-adapter.py), one scenario at a time, scored against this directory's baseline.
#
#   tests/conformance/run-client.sh REVISION [SCENARIO...]
#
#   REVISION  2025-11-25 (suite 0.1.16) or 2026-07-28 (suite 0.2.0-alpha.12)
#   SCENARIO  run only these (default: every client scenario the revision's frozen requirement set
#             requires, then the extension and added-after-release ones it runs unscored)
#
# The scenario lists come from `conformance-2026-07-28 list --client --requirements REVISION` (the
# frozen sets). The reported (unscored) scenarios run on the 0.2.0-alpha.12 suite with --force.
# The client is $MCP_HOST_BIN (default target/debug/mcp-host: build it first). Results go to a fresh
# temporary directory (printed; override with CONFORMANCE_OUT=DIR). CONFORMANCE_SUITE=PATH runs the
# required scenarios on another suite (e.g. 2025-11-25 on .ci/.tools/bin/conformance-2026-07-28).
# A scenario fails on a FAILURE or WARNING check or on the suite's verdict. Exit code: 0 when every
# failing scenario is listed in expected-client-REVISION.yml and no listed scenario passes.
set -euo pipefail

if [[ $# -lt 1 ]]; then
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
revision="$1"
shift

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/.ci/.tools/bin"
node="$bin/node"
latest="$bin/conformance-2026-07-28"
case "$revision" in
    2025-11-25|2026-07-28) suite="${CONFORMANCE_SUITE:-$bin/conformance-$revision}" ;;
    *) echo "error: REVISION must be 2025-11-25 or 2026-07-28, not '$revision'" >&2; exit 2 ;;
esac
for tool in "$suite" "$latest" "$node"; do
    if [[ ! -x "$tool" ]]; then
        echo "error: $tool not installed: run .ci/install-clients.sh first" >&2
        exit 2
    fi
done
export MCP_HOST_BIN="${MCP_HOST_BIN:-$root/target/debug/mcp-host}"
if [[ ! -x "$MCP_HOST_BIN" ]]; then
    echo "error: $MCP_HOST_BIN not built (cargo build -p mcp-host, or set MCP_HOST_BIN)" >&2
    exit 2
fi
baseline="$here/expected-client-$revision.yml"

# The scenarios of a section of the frozen requirement listing: `required`, or `reported` (the
# client ones among extension and added-after-release).
listed() {
    "$latest" list --client --requirements "$revision" | awk -v want="$1" '
        /^Client scenarios/ { section = "required"; next }
        /^Run and reported/ { section = "reported"; next }
        /^[^ ]/ { section = "" }
        section == "required" && want == "required" && /^  - / { print $2 }
        section == "reported" && want == "reported" && /^    - .*\[client\]/ { print $2 }'
}

# The scenarios a baseline lists under `client:`.
expected() {
    [[ -f "$baseline" ]] || return 0
    awk '/^client:/ { on = 1; next } /^[^ -]/ { on = 0 } on && /^ *- / { sub(/^ *- */, ""); sub(/ *#.*/, ""); print }' "$baseline"
}

out="${CONFORMANCE_OUT:-$(mktemp -d -t "mcp-conformance-client-$revision.XXXXXX")}"
mkdir -p "$out"
mapfile -t required < <(listed required)
mapfile -t reported < <(listed reported)
if [[ $# -gt 0 ]]; then
    # Only these, each in its group.
    chosen=" $* "
    keep() { local s; for s in "$@"; do [[ "$chosen" == *" $s "* ]] && echo "$s"; done; return 0; }
    mapfile -t required < <(keep "${required[@]}")
    mapfile -t reported < <(keep "${reported[@]}")
    for s in "$@"; do
        [[ " ${required[*]} ${reported[*]} " == *" $s "* ]] || { echo "error: $s is not a client scenario of $revision" >&2; exit 2; }
    done
fi
mapfile -t baselined < <(expected)
echo "conformance client $("$suite" --version) at $revision: ${#required[@]} required, ${#reported[@]} reported scenarios; client $MCP_HOST_BIN; results in $out"

command="python3 $here/client-adapter.py"
# What the suite's authorization servers hand out: tokens, codes, client secrets.
secrets='test-token-|test-auth-code|test-secret-|test-client-secret|as[12]-client-secret|pre-registered-secret|conformance-test-secret|conformance-test-xaa-secret'
status=0
# Run one scenario with suite $1 (extra suite arguments after the scenario); print its line.
run_one() {
    local with="$1" scenario="$2"
    shift 2
    local dir="$out/$(echo "$scenario" | tr '/' '_')"
    mkdir -p "$dir"
    local started=$SECONDS verdict=0
    "$with" client --command "$command" --scenario "$scenario" --spec-version "$revision" \
        -o "$dir" "$@" >"$dir/suite.log" 2>&1 || verdict=$?
    local counts
    counts=$("$node" - "$dir" <<'JS'
const fs = require('fs'), path = require('path');
const n = { SUCCESS: 0, FAILURE: 0, WARNING: 0 };
const walk = d => fs.readdirSync(d, { withFileTypes: true }).forEach(e => {
  const p = path.join(d, e.name);
  if (e.isDirectory()) walk(p);
  else if (e.name === 'checks.json')
    for (const c of JSON.parse(fs.readFileSync(p, 'utf8'))) if (c.status in n) n[c.status]++;
});
walk(process.argv[2]);
console.log(`${n.SUCCESS} ${n.FAILURE} ${n.WARNING}`);
JS
)
    read -r ok failures warnings <<<"$counts"
    local passed=yes
    if [[ $verdict -ne 0 || $failures -ne 0 || $warnings -ne 0 || $ok -eq 0 ]]; then passed=no; fi
    # The client never shows a token, an authorization code or a client secret (the suite's are
    # recognisable) on its stdout or stderr, which the suite saved.
    local leaked
    leaked=$(grep -rlE "$secrets" "$dir" --include=stdout.txt --include=stderr.txt || true)
    if [[ -n "$leaked" ]]; then
        passed=no
        echo "    LEAK: a token, code or client secret in the client's output: $leaked"
    fi
    local listed=no
    for b in "${baselined[@]}"; do [[ "$b" == "$scenario" ]] && listed=yes; done
    local result
    case "$passed/$listed" in
        yes/no) result=PASS ;;
        no/yes) result=EXPECTED-FAIL ;;
        yes/yes) result="STALE (listed in $(basename "$baseline") but passes)"; status=1 ;;
        no/no) result=FAIL; status=1 ;;
    esac
    printf '%-45s %-14s checks: %s ok, %s failed, %s warnings (%ss)\n' "$scenario" "$result" \
        "$ok" "$failures" "$warnings" "$((SECONDS - started))"
    if [[ $passed == no && $listed == no ]]; then
        "$node" - "$dir" <<'JS' || true
const fs = require('fs'), path = require('path');
const walk = d => fs.readdirSync(d, { withFileTypes: true }).forEach(e => {
  const p = path.join(d, e.name);
  if (e.isDirectory()) walk(p);
  else if (e.name === 'checks.json')
    for (const c of JSON.parse(fs.readFileSync(p, 'utf8')))
      if (c.status === 'FAILURE' || c.status === 'WARNING')
        console.log(`    ${c.status} ${c.id}: ${c.errorMessage ?? c.description ?? ''}`);
});
walk(process.argv[2]);
JS
        sed -n '1,40p' "$dir/suite.log" | sed 's/^/    | /'
    fi
}

started=$SECONDS
echo "== required"
for scenario in "${required[@]}"; do run_one "$suite" "$scenario"; done
if [[ ${#reported[@]} -gt 0 && -n "${reported[0]}" ]]; then
    echo "== reported (extensions, added after the release; run with $("$latest" --version) --force)"
    for scenario in "${reported[@]}"; do run_one "$latest" "$scenario" --force; done
fi
echo "== $((SECONDS - started)) s; results in $out"
exit "$status"
