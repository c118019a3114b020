#!/usr/bin/env bash
# Runs the client conformance scenario (../conformance/SCENARIO.md) against the broker at
# $TASKBROKER_ADDR (host:port). Installs the locked dependencies and builds first.
# Usually started by scripts/conformance.sh typescript, which also starts the broker.
set -euo pipefail
cd "$(dirname "$0")"
: "${TASKBROKER_ADDR:?set TASKBROKER_ADDR to the broker host:port}"
npm ci --no-audit --no-fund --loglevel=error >/dev/null
node_modules/.bin/tsc -p tsconfig.json
# The scenario: the harness and the case files of ../conformance/cases/ (tsconfig.conformance.json).
# The case files find their packages through a link to node_modules/ (git ignores it).
ln -sfn ../../typescript/node_modules ../conformance/cases/node_modules
node_modules/.bin/tsc -p tsconfig.conformance.json
# The unit tests (worker runtime against an in-process fake broker), then the scenario.
echo "== npm test (worker runtime, fake broker)"
tests=0
out="$(mktemp)"
node --test --test-timeout=30000 --test-reporter=spec dist/test/*.test.js >"$out" 2>&1 || tests=$?
cat "$out"
echo "npm test: $(sed -n 's/^ℹ pass //p' "$out") passed, $(sed -n 's/^ℹ fail //p' "$out") failed"
rm -f "$out"
[ "$tests" -eq 0 ] || echo "npm test failed (exit $tests); the scenario runs anyway"
echo "== conformance scenario"
scenario=0
node dist-conformance/typescript/conformance/main.js || scenario=$?
if [ "$scenario" -ne 0 ]; then exit "$scenario"; fi
exit "$tests"
