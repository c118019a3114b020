#!/usr/bin/env bash
# Runs the client conformance scenario (../conformance/SCENARIO.md) against the broker at
# $TASKBROKER_ADDR (host:port). Installs the locked dependencies and builds first.
# Usually started by scripts/conformance.sh typescript, which also starts the broker.
set -euo pipefail
cd "$(dirname "$0")"
: "${TASKBROKER_ADDR:?set TASKBROKER_ADDR to the broker host:port}"
npm ci --no-audit --no-fund --loglevel=error >/dev/null
node_modules/.bin/tsc -p tsconfig.json
exec node dist/conformance/main.js
