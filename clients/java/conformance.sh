#!/usr/bin/env bash
# Runs the client conformance scenario (../conformance/SCENARIO.md) against the broker at
# $TASKBROKER_ADDR (host:port). Builds first: Maven fetches protoc, the grpc-java plugin and
# the libraries from Maven Central, generates the stubs from ../../proto and runs the unit
# tests (the Worker against an in-process fake broker). The scenario and the examples are
# test classes, outside the library jar.
# Usually started by scripts/conformance.sh java, which also starts the broker.
set -euo pipefail
cd "$(dirname "$0")"
: "${TASKBROKER_ADDR:?set TASKBROKER_ADDR to the broker host:port}"
# Maven's output goes to a log that is shown only when the build or a test fails.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
echo "== mvn package (unit tests: Worker runtime, in-process fake broker)"
status=0
mvn -B -ntp -Dstyle.color=never package >"$log" 2>&1 || status=$?
# Surefire's total, e.g. "Tests run: 9, Failures: 0, Errors: 0, Skipped: 0" (the last one).
totals="$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^\[[A-Z]+\] Tests run: [0-9]+, Failures' | tail -n 1 || true)"
if [ -n "$totals" ]; then
  run="$(sed -E 's/.*Tests run: ([0-9]+).*/\1/' <<<"$totals")"
  bad="$(sed -E 's/.*Failures: ([0-9]+), Errors: ([0-9]+).*/\1+\2/' <<<"$totals")"
  echo "mvn test: $((run - bad)) passed, $((bad)) failed"
fi
if [ "$status" -ne 0 ]; then
  sed 's/\x1b\[[0-9;]*m//g' "$log" >&2
  echo "maven build or unit tests failed" >&2
  exit 1
fi
echo "== conformance scenario"
java -cp "target/test-classes:target/classes:$(cat target/classpath.txt)" dev.taskbroker.conformance.Conformance
