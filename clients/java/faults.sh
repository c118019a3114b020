#!/usr/bin/env bash
# Runs the Java client's fault scenario (clients/conformance/FAULTS.md) against the broker at
# $TASKBROKER_ADDR, which scripts/conformance.sh java --faults kills, restarts and pauses on
# request; its "N passed, M failed" line is printed last. Builds with Maven as conformance.sh does.
set -uo pipefail
cd "$(dirname "$0")"
: "${TASKBROKER_ADDR:?TASKBROKER_ADDR must be host:port of a running broker}"
: "${TASKBROKER_FAULT_CTL:?run it through scripts/conformance.sh java --faults}"

mvn -B -ntp -q -Dstyle.color=never -DskipTests package >/dev/null || exit 2
echo "== fault scenario"
exec java -cp "target/test-classes:target/classes:$(cat target/classpath.txt)" dev.taskbroker.conformance.Faults
