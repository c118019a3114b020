#!/usr/bin/env bash
# The full run of the model-based state-machine test (server/tests/model.rs):
# 10,000 random cases per store (SQLite and Postgres), each on a fresh database.
#   scripts/model.sh            # 10,000 cases per store
#   scripts/model.sh 500        # another count
#   scripts/model.sh 10000 postgres_store_follows_the_model   # one store (a test-name filter)
# CI runs the same test with 64 cases per store (cargo test, scripts/test.sh).
# Starts its own throwaway Postgres cluster; synchronous_commit is off there
# (the model checks the rules, not durability) so the run takes less time.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cases=${1:-10000}
shift || true

pgdir="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-model.XXXXXX")"
trap 'scripts/pg.sh stop "$pgdir/cluster"; rm -rf "$pgdir"' EXIT
eval "$(scripts/pg.sh start "$pgdir/cluster")"
psql_bin=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql | tail -1)
"$psql_bin" -q "$TASKBROKER_TEST_POSTGRES_URL" \
  -c "ALTER SYSTEM SET synchronous_commit = off" -c "SELECT pg_reload_conf()" >/dev/null
export TASKBROKER_TEST_POSTGRES_URL TASKBROKER_REQUIRE_POSTGRES=1
export TASKBROKER_MODEL_CASES="$cases"
cargo test -p taskbroker-server --test model -- --nocapture "$@"
