#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned per spec revision)
# against a running Streamable HTTP server, with this directory's baseline of expected failures.
#
#   tests/conformance/run.sh URL REVISION [extra suite args, e.g. --scenario tools-list --verbose]
#
#   URL       the MCP endpoint, e.g. http://127.0.0.1:18080/mcp (must be localhost/127.0.0.1/[::1])
#   REVISION  2025-11-25 (suite 0.1.16), 2026-07-28 (suite 0.2.0-alpha.12), or tasks (the
#             0.2.0-alpha.12 suite's tasks extension scenarios, one by one, no --spec-version)
#
# The suite comes from .ci/install-clients.sh (Node 22 and both suite versions under .ci/.tools/).
# Results go to a fresh temporary directory (printed; override with CONFORMANCE_OUT=DIR).
# Exit code: the suite's (0 = every failure is listed in the baseline and no listed entry passes).
set -euo pipefail

if [[ $# -lt 2 ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
url="$1"
revision="$2"
shift 2

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/.ci/.tools/bin"
node="$bin/node"

# The tasks extension (SEP-2663) is not on the spec timeline: --spec-version drops its scenarios,
# so they run by name, without it (the suite then infers 2026-07-28).
tasks_scenarios=(tasks-lifecycle tasks-capability-negotiation tasks-wire-fields
    tasks-request-state-removal tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope
    tasks-status-notifications tasks-required-task-error tasks-mrtr-composition)
suite_revision="$revision"
case "$revision" in
    2025-11-25) args=(--expected-failures "$here/expected-2025-11-25.yml") ;;
    2026-07-28) args=(--spec-version 2026-07-28 --expected-failures "$here/expected-2026-07-28.yml") ;;
    tasks) args=(--expected-failures "$here/expected-tasks.yml"); suite_revision=2026-07-28 ;;
    *) echo "error: REVISION must be 2025-11-25, 2026-07-28 or tasks, not '$revision'" >&2; exit 2 ;;
esac
suite="$bin/conformance-$suite_revision"
if [[ ! -x "$suite" || ! -x "$node" ]]; then
    echo "error: $suite not installed: run .ci/install-clients.sh first" >&2
    exit 2
fi

has_scenario=0
for a in "$@"; do [[ "$a" == --scenario ]] && has_scenario=1; done

out="${CONFORMANCE_OUT:-$(mktemp -d -t "mcp-conformance-$revision.XXXXXX")}"
mkdir -p "$out"
echo "conformance $("$suite" --version) at $revision against $url; results in $out"

status=0
if [[ "$revision" == tasks && $has_scenario == 0 ]]; then
    for scenario in "${tasks_scenarios[@]}"; do
        "$suite" server --url "$url" "${args[@]}" --scenario "$scenario" -o "$out" "$@" || status=$?
    done
else
    # `--suite all`: the default "active" suite leaves out pending scenarios and every scenario new
    # in 2026-07-28 (server-stateless, caching, ...), which are the ones that matter here. At
    # 2026-07-28 the --spec-version filter drops the extensions (tasks, skills).
    [[ "$revision" == tasks ]] || [[ $has_scenario == 1 ]] || args+=(--suite all)
    "$suite" server --url "$url" "${args[@]}" -o "$out" "$@" || status=$?
fi

# One line per check that did not pass (the suite counts WARNING as a failure against a baseline).
echo
echo "== checks with status FAILURE or WARNING (from $out/*/checks.json)"
"$node" - "$out" <<'JS' || true
const fs = require('fs'), path = require('path');
const dir = process.argv[2];
for (const d of fs.readdirSync(dir).sort()) {
  const f = path.join(dir, d, 'checks.json');
  if (!fs.existsSync(f)) continue;
  const scenario = d.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T.*$/, '');
  for (const c of JSON.parse(fs.readFileSync(f, 'utf8'))) {
    if (c.status === 'FAILURE' || c.status === 'WARNING')
      console.log(`${c.status} ${scenario}:${c.id}: ${c.errorMessage ?? c.description ?? ''}`);
  }
}
JS
exit "$status"
