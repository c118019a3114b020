#!/usr/bin/env bash
# The long run of the outbox's exactly-once kill test (server/tests/faults_outbox.rs):
# producers commit and roll back transactions that write outbox rows while two relays
# and the broker are killed at random points; every committed row must become exactly
# one task and no rolled-back row any, with the broker on SQLite and on Postgres.
#
#   scripts/outbox-kill.sh                 3 rounds x 1000 orders per producer (4 producers)
#   ROUNDS=10 ORDERS=2000 scripts/outbox-kill.sh
#   TASKBROKER_OUTBOX_KILL_SEED=123 ROUNDS=1 scripts/outbox-kill.sh   replays one run
#
# Uses $TASKBROKER_TEST_POSTGRES_URL, or starts a throwaway cluster (scripts/pg.sh). With
# $TASKBROKER_TEST_MYSQL_URL set (scripts/mysql.sh) the outbox in MariaDB is killed too.
# CI runs the same test, short, in `cargo test`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

rounds="${ROUNDS:-3}"
export TASKBROKER_OUTBOX_KILL_ORDERS="${ORDERS:-1000}"
export TASKBROKER_REQUIRE_POSTGRES=1

if [ -z "${TASKBROKER_TEST_POSTGRES_URL:-}" ]; then
  pgdir="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-outbox-kill.XXXXXX")"
  trap 'scripts/pg.sh stop "$pgdir/cluster"; rm -rf "$pgdir"' EXIT
  eval "$(scripts/pg.sh start "$pgdir/cluster")"
  export TASKBROKER_TEST_POSTGRES_URL
fi

cargo test -q -p taskbroker-server --test faults_outbox --no-run
passed=0
failed=0
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds ($TASKBROKER_OUTBOX_KILL_ORDERS orders per producer)"
  set +e
  cargo test -q -p taskbroker-server --test faults_outbox -- --nocapture --test-threads 1 2>&1 |
    grep -E '^outbox kill test|panicked|rows that|committed rows|tasks of no|rolled-back|test result'
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "outbox kill rounds: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
