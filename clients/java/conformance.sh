#!/usr/bin/env bash
# Runs the client conformance scenario (../conformance/SCENARIO.md) against the broker at
# $TASKBROKER_ADDR (host:port). Builds first: Maven fetches protoc, the grpc-java plugin and
# the libraries from Maven Central and generates the stubs from ../../proto.
# Usually started by scripts/conformance.sh java, which also starts the broker.
set -euo pipefail
cd "$(dirname "$0")"
: "${TASKBROKER_ADDR:?set TASKBROKER_ADDR to the broker host:port}"
# Maven's output goes to a log that is shown only when the build fails.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! mvn -B -q -ntp -Dstyle.color=never -DskipTests package >"$log" 2>&1; then
  sed 's/\x1b\[[0-9;]*m//g' "$log" >&2
  echo "maven build failed" >&2
  exit 1
fi
java -cp "target/classes:$(cat target/classpath.txt)" dev.taskbroker.conformance.Conformance
