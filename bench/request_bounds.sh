#!/usr/bin/env bash
# What the largest Submit the limits allow costs, on each store: for every
# request field that multiplies work (fan-out, dependencies by index and by id,
# labels, metadata, payload) one request at the limit, and the hostile 1 KB
# fan-out/dependency request the limits refuse. Each request goes to a fresh
# release broker on a fresh database; the table shows its answer, time and the
# broker's peak RSS (VmHWM) before and after (docs/performance.md, "Work one
# Submit may cause").
#
#   bench/request_bounds.sh
#
# Env: STORES ("sqlite postgres"), CASES (all).
set -euo pipefail
cd "$(dirname "$0")/.."
stores=${STORES:-"sqlite postgres"}
cases=${CASES:-"hostile_fanout_deps edges join ids fanout_bytes labels metadata metadata_over"}

work=$(mktemp -d /tmp/taskbroker-bounds.XXXXXX)
cleanup() {
  scripts/pg.sh stop "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release -q -p taskbroker-server -p taskbroker-bench --bin taskbroker --bin taskbroker-bench-bounds
if [[ " $stores " == *" postgres "* ]]; then
  eval "$(scripts/pg.sh start "$work/pg")"
fi
n=0
echo "| store | case | request bytes | answer | tasks | ms | peak RSS before MB | peak RSS after MB |"
echo "|---|---|---:|---|---:|---:|---:|---:|"
for store in $stores; do
  for case in $cases; do
    n=$((n + 1))
    if [ "$store" = sqlite ]; then
      url="sqlite://$work/b$n.db"
    else
      psql -q "$TASKBROKER_TEST_POSTGRES_URL" -c "CREATE DATABASE b$n" >/dev/null
      url="${TASKBROKER_TEST_POSTGRES_URL%/*}/b$n"
    fi
    target/release/taskbroker-bench-bounds --spawn-broker "$url" --case "$case" 2>>"$work/log" |
      python3 -c '
import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
print("| {} | {case} | {request_bytes:,} | {code} | {tasks:,} | {ms:,} | {peak_rss_mb_before} | {peak_rss_mb} |".format(sys.argv[1], **r))
' "$store"
  done
done
