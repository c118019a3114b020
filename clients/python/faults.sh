#!/usr/bin/env bash
# Runs the Python client's fault scenario (clients/conformance/FAULTS.md) against the broker
# at $TASKBROKER_ADDR, which scripts/conformance.sh python --faults kills, restarts and pauses
# on request; its "N passed, M failed" line is printed last. Creates .venv/ and installs from
# PyPI, as conformance.sh does.
set -uo pipefail
cd "$(dirname "$0")"
: "${TASKBROKER_ADDR:?TASKBROKER_ADDR must be host:port of a running broker}"
: "${TASKBROKER_FAULT_CTL:?run it through scripts/conformance.sh python --faults}"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv || exit 2
fi
.venv/bin/pip install -q -e '.[test,typing]' || exit 2

echo "== fault scenario (sync Worker and asyncio AsyncWorker)"
exec .venv/bin/python faults.py
