#!/usr/bin/env bash
# What a backlog of scheduled work costs the leases of due tasks: the same run
# with 0, 100,000 (and, with FUTURE="0 100000 1000000", a million) tasks waiting
# in each measured queue for a run_at a day away, at a priority above every
# measured task, on each store. Per-task mode (Lease max_tasks=1, one lease per
# task) so the lease statement's cost shows in lifecycles/s and dispatch latency.
#
#   bench/future_backlog.sh
#
# Env: STORES ("sqlite postgres"), FUTURE ("0 100000"), WORKERS (16), TASKS (20000).
set -euo pipefail
cd "$(dirname "$0")/.."
stores=${STORES:-"sqlite postgres"}
future=${FUTURE:-"0 100000"}
workers=${WORKERS:-16}
tasks=${TASKS:-20000}

work=$(mktemp -d /tmp/taskbroker-future.XXXXXX)
cleanup() {
  scripts/pg.sh stop "$work/pg" || true
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release -q -p taskbroker-server -p taskbroker-bench
eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
for store in $stores; do
  for n in $future; do
    if [ "$store" = sqlite ]; then
      url="sqlite://$work/fb-$n.db"
    else
      name=fb_$(date +%s%N)
      psql -q "$admin" -c "CREATE DATABASE $name" >/dev/null
      url="${admin%/*}/$name"
    fi
    echo "== $store, $n future tasks per queue"
    target/release/taskbroker-bench --spawn-broker "$url" --mode per-task \
      --workers "$workers" --tasks "$tasks" --latency-seconds 5 \
      --future-backlog "$n" --timeout-seconds 1800 |
      grep -E "taskbroker-bench|lifecycles|p50|p99" || true
  done
done
