#!/usr/bin/env bash
# Runs the Go client's fault scenario (clients/conformance/FAULTS.md) against the broker at
# $TASKBROKER_ADDR, which scripts/conformance.sh go --faults kills, restarts and pauses on
# request; its "N passed, M failed" line is printed last.
set -uo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
: "${TASKBROKER_ADDR:?TASKBROKER_ADDR must be host:port of a running broker}"
: "${TASKBROKER_FAULT_CTL:?run it through scripts/conformance.sh go --faults}"

go build -o .bin/faults ./cmd/faults || exit 2
echo "== fault scenario"
exec .bin/faults
