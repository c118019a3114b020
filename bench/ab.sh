#!/usr/bin/env bash
# Before/after on the lease, submit and settle path, in one run: builds the broker
# at BASE (a git revision) beside the working tree's, then runs taskbroker-bench
# against each in turn (A B A B ...), each on a fresh database, and prints the
# median lifecycles/s and dispatch p99 of each side.
#
#   bench/ab.sh BASE [REPS]        # e.g. bench/ab.sh 65cc5a4 3
#
# Env: STORES ("sqlite postgres"), MODES ("batched per-task"), WORKERS (64),
# TASKS_BATCHED (30000), TASKS_PER_TASK (10000), BASE_BIN (a release binary of
# BASE built already: skips building it), NO_BUILD (use target/release as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: bench/ab.sh BASE [REPS]}
reps=${2:-3}
stores=${STORES:-"sqlite postgres"}
modes=${MODES:-"batched per-task"}
workers=${WORKERS:-64}

work=$(mktemp -d /tmp/taskbroker-ab.XXXXXX)
cleanup() {
  scripts/pg.sh stop "$work/pg" || true
  git worktree remove --force "$work/base" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building HEAD (working tree) and $base" >&2
[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p taskbroker-server -p taskbroker-bench
bins=("target/ab-base/release/taskbroker" "target/release/taskbroker")
if [ -n "${BASE_BIN:-}" ]; then
  # A base binary built already (release build of BASE), e.g. a copy kept aside.
  bins[0]=$BASE_BIN
else
git worktree add -q --detach "$work/base" "$base"
# The base builds in a target dir of its own that outlives the run (a rerun is quick).
top=$PWD
(cd "$work/base" && cargo build --release -q -p taskbroker-server --bin taskbroker \
  --target-dir "$top/target/ab-base")
fi
names=("base" "head")

eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
fresh_db() { # called in $(...): the name must not depend on a counter
  local name
  name=ab_$(date +%s%N)_$RANDOM
  psql -q "$admin" -c "CREATE DATABASE $name" >/dev/null
  echo "${admin%/*}/$name"
}

results=$work/results
for rep in $(seq 1 "$reps"); do
  for store in $stores; do
    for mode in $modes; do
      tasks=${TASKS_BATCHED:-30000}
      [ "$mode" = per-task ] && tasks=${TASKS_PER_TASK:-10000}
      # Alternate which side goes first, so drift does not favour one.
      order="0 1"; [ $((rep % 2)) = 0 ] && order="1 0"
      for i in $order; do
        if [ "$store" = sqlite ]; then url="sqlite://$work/ab-$rep-$i.db"; else url=$(fresh_db); fi
        line=$(target/release/taskbroker-bench --spawn-broker "$url" --broker-bin "${bins[$i]}" \
          --mode "$mode" --workers "$workers" --tasks "$tasks" --latency-seconds 2 \
          2>>"$work/log" | tail -n 1)
        echo "${names[$i]} $store $mode $line" >> "$results"
        echo "${names[$i]} $store $mode $line" >&2
      done
    done
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, store, mode, js = line.split(" ", 3)
    r = json.loads(js)
    rows.setdefault((store, mode), {}).setdefault(side, []).append(r)
def med(rs, k):
    v = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(v) if v else float("nan")
print("| store | mode | base lifecycles/s | head lifecycles/s | head/base | base p99 ms | head p99 ms |")
print("|---|---|---:|---:|---:|---:|---:|")
for (store, mode), sides in sorted(rows.items()):
    b, h = med(sides.get("base", []), "lifecycles_per_sec"), med(sides.get("head", []), "lifecycles_per_sec")
    bp, hp = med(sides.get("base", []), "dispatch_p99_ms"), med(sides.get("head", []), "dispatch_p99_ms")
    print(f"| {store} | {mode} | {b:,.0f} | {h:,.0f} | {h/b:.2f} | {bp:.1f} | {hp:.1f} |")
PY
