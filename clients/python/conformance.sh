#!/usr/bin/env bash
# Runs the Python client against the broker at $TASKBROKER_ADDR: first the Worker helper's
# tests (pytest), then the conformance scenario (clients/conformance/SCENARIO.md), whose
# "N passed, M failed" line is printed last. Creates .venv/ and installs from PyPI.
# Usually started by scripts/conformance.sh python.
set -uo pipefail
cd "$(dirname "$0")"
: "${TASKBROKER_ADDR:?TASKBROKER_ADDR must be host:port of a running broker}"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv || exit 2
fi
.venv/bin/pip install -q -e '.[test]' || exit 2

echo "== pytest tests/ (Worker helper, live broker)"
.venv/bin/python -m pytest -q tests
tests=$?
[ "$tests" -eq 0 ] || echo "pytest failed (exit $tests); the scenario runs anyway"

echo "== conformance scenario"
.venv/bin/python conformance.py
scenario=$?

if [ "$scenario" -ne 0 ]; then exit "$scenario"; fi
exit "$tests"
