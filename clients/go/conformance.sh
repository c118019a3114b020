#!/usr/bin/env bash
# Runs the Go client against the broker at $TASKBROKER_ADDR: first the worker package's
# tests, then the conformance scenario (clients/conformance/SCENARIO.md), whose
# "N passed, M failed" line is printed last. Fetches Go modules from the module proxy.
# Usually started by scripts/conformance.sh go.
set -uo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
: "${TASKBROKER_ADDR:?TASKBROKER_ADDR must be host:port of a running broker}"

go mod download || exit 2
# A package's files sit in one directory: each case folder's case.go is linked into
# cmd/conformance as case_NN_<name>.go (git ignores the links) before the build.
rm -f cmd/conformance/case_*.go
for f in ../conformance/cases/*/case.go; do
  d="$(basename "$(dirname "$f")")"
  ln -s "../../../conformance/cases/$d/case.go" "cmd/conformance/case_${d/-/_}.go"
done
go build -o .bin/conformance ./cmd/conformance || exit 2

echo "== go test ./... (worker helper, live broker)"
out="$(mktemp)"
go test -count=1 -timeout 180s -v ./... >"$out" 2>&1
tests=$?
grep -vE '^(=== (RUN|PAUSE|CONT)|    --- PASS)' "$out"
echo "go test: $(grep -c -- '--- PASS' "$out") passed, $(grep -c -- '--- FAIL' "$out") failed"
rm -f "$out"
[ "$tests" -eq 0 ] || echo "go test failed (exit $tests); the scenario runs anyway"

echo "== conformance scenario"
.bin/conformance
scenario=$?

if [ "$scenario" -ne 0 ]; then exit "$scenario"; fi
exit "$tests"
