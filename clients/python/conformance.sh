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
.venv/bin/pip install -q -e '.[test,typing]' || exit 2

echo "== mypy (the package is typed: py.typed)"
.venv/bin/python -m mypy src/taskbroker --exclude 'src/taskbroker/v1' || exit 1

echo "== pytest tests/ (Worker and AsyncWorker, live broker)"
out="$(mktemp)"
.venv/bin/python -m pytest -q -rf tests 2>&1 | tee "$out"
tests=${PIPESTATUS[0]}
passed="$(grep -oE '[0-9]+ passed' "$out" | tail -n 1 | cut -d' ' -f1)"
echo "pytest: ${passed:-0} passed, $(grep -oE '[0-9]+ (failed|errors?)' "$out" | awk '{n+=$1} END {print n+0}') failed"
rm -f "$out"
[ "$tests" -eq 0 ] || echo "pytest failed (exit $tests); the scenario runs anyway"

echo "== conformance scenario"
.venv/bin/python conformance.py
scenario=$?

if [ "$scenario" -ne 0 ]; then exit "$scenario"; fi
exit "$tests"
