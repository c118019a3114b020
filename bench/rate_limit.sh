#!/usr/bin/env bash
# The lease rate a queue's rate limit grants: for each store, a fresh broker on a
# fresh database, and per rate a queue with `rate_limit { per_second, burst }`
# and 8 long-polling workers leasing one task at a time. Prints granted/s
# against the limit (a rate limit should grant within a few percent of it).
#
#   bench/rate_limit.sh
#
# Env: STORES ("sqlite postgres"), RATES (20,50,100), BURST (1), LESSEES (8),
# DURATION (20 s per rate), PROFILE (release; "debug" measures a debug build, which is
# slower per call but paces the same). Postgres: TASKBROKER_TEST_POSTGRES_URL
# names a server to create the database on; without it one is started with
# scripts/pg.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
stores=${STORES:-"sqlite postgres"}
profile=${PROFILE:-release}
work=$(mktemp -d /tmp/taskbroker-rate.XXXXXX)
started_pg=
cleanup() {
  [ -z "$started_pg" ] || scripts/pg.sh stop "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

flag=--release
[ "$profile" = release ] || flag=
cargo build $flag -q -p taskbroker-server -p taskbroker-bench --bin taskbroker --bin taskbroker-bench-rate
if [[ " $stores " == *" postgres "* ]] && [ -z "${TASKBROKER_TEST_POSTGRES_URL:-}" ]; then
  eval "$(scripts/pg.sh start "$work/pg")"
  started_pg=1
fi
for store in $stores; do
  if [ "$store" = sqlite ]; then
    url="sqlite://$work/rate.db"
  else
    name=rate_$(date +%s%N)
    psql -q "$TASKBROKER_TEST_POSTGRES_URL" -c "CREATE DATABASE $name" >/dev/null
    url="${TASKBROKER_TEST_POSTGRES_URL%/*}/$name"
  fi
  echo "## $store ($profile build)"
  "target/$profile/taskbroker-bench-rate" --spawn-broker "$url" --broker-bin "target/$profile/taskbroker" \
    --rates "${RATES:-20,50,100}" --burst "${BURST:-1}" --lessees "${LESSEES:-8}" \
    --seconds "${DURATION:-20}" 2>>"$work/log"
done
