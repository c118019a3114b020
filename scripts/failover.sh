#!/usr/bin/env bash
# The long run of the Postgres failover tests (server/tests/failover_pg.rs): a primary
# and a synchronous standby on loopback, two brokers on the multi-host URL, a producer
# and workers running, then the primary killed with SIGKILL and the standby promoted,
# round after round; once with `pg_ctl promote`, once with pg_auto_failover (when
# `pg_autoctl` can be installed; PGAF=required makes its absence a failure). Prints each
# failover's unavailability window and a summary per method.
#
#   scripts/failover.sh                    10 failovers per method in one run
#   ROUNDS=20 scripts/failover.sh
#   RUNS=3 scripts/failover.sh             three runs of ROUNDS failovers each
#
# Starts its own clusters (scripts/pg.sh, scripts/pgaf.sh, as the `postgres` user).
# CI runs the same tests with 2 and 1 failovers in scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

runs="${RUNS:-1}"
export TASKBROKER_FAILOVER_ROUNDS="${ROUNDS:-10}"
export TASKBROKER_REQUIRE_POSTGRES=1
if [ "${PGAF:-}" = required ]; then export TASKBROKER_REQUIRE_PG_AUTO_FAILOVER=1; fi
# The test builds its own clusters; this variable only says Postgres is here.
export TASKBROKER_TEST_POSTGRES_URL="${TASKBROKER_TEST_POSTGRES_URL:-postgres://unused}"

cargo test -q -p taskbroker-server --test failover_pg --no-run
passed=0
failed=0
for run in $(seq 1 "$runs"); do
  echo "== run $run of $runs ($TASKBROKER_FAILOVER_ROUNDS failovers)"
  set +e
  cargo test -q -p taskbroker-server --test failover_pg -- --nocapture --test-threads 1 2>&1 |
    grep -E '^failover|^skipped|panicked|acknowledged but|completed under|two succeeded|test result'
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "failover runs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
