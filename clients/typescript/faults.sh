#!/usr/bin/env bash
# Runs the TypeScript client's fault scenario (clients/conformance/FAULTS.md) against the broker
# at $TASKBROKER_ADDR, which scripts/conformance.sh typescript --faults kills, restarts and
# pauses on request; its "N passed, M failed" line is printed last. Installs from the npm
# registry, as conformance.sh does.
set -uo pipefail
cd "$(dirname "$0")"
: "${TASKBROKER_ADDR:?TASKBROKER_ADDR must be host:port of a running broker}"
: "${TASKBROKER_FAULT_CTL:?run it through scripts/conformance.sh typescript --faults}"

[ -d node_modules ] || npm ci --no-audit --no-fund >/dev/null || exit 2
node_modules/.bin/tsc -p tsconfig.json || exit 2
echo "== fault scenario"
exec node dist/conformance/faults.js
