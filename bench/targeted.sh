#!/usr/bin/env bash
# Routing: what label targets cost, in one run. The same broker binary
# is benchmarked with every task targeted by labels (and every worker carrying
# them: `taskbroker-bench --targeted`) and untargeted, alternating (A B B A ...),
# each on a fresh database, and the median lifecycles/s of each side is printed.
#
#   bench/targeted.sh [REPS]        # default 3
#
# Env: STORES ("sqlite postgres"), MODE (batched), WORKERS (64), TASKS (30000).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
stores=${STORES:-"sqlite postgres"}
mode=${MODE:-batched}
workers=${WORKERS:-64}
tasks=${TASKS:-30000}

work=$(mktemp -d /tmp/taskbroker-targeted.XXXXXX)
cleanup() {
  scripts/pg.sh stop "$work/pg" || true
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --release -q -p taskbroker-server -p taskbroker-bench
eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
fresh_db() {
  local name
  name=tg_$(date +%s%N)_$RANDOM
  psql -q "$admin" -c "CREATE DATABASE $name" >/dev/null
  echo "${admin%/*}/$name"
}

sides=("untargeted" "targeted")
flags=("" "--targeted")
results=$work/results
for rep in $(seq 1 "$reps"); do
  for store in $stores; do
    # Alternate which side goes first, so drift does not favour one.
    order="0 1"; [ $((rep % 2)) = 0 ] && order="1 0"
    for i in $order; do
      if [ "$store" = sqlite ]; then url="sqlite://$work/tg-$rep-$i.db"; else url=$(fresh_db); fi
      # shellcheck disable=SC2086
      line=$(target/release/taskbroker-bench --spawn-broker "$url" --mode "$mode" \
        --workers "$workers" --tasks "$tasks" --latency-seconds 0 ${flags[$i]} \
        --label "${sides[$i]}" 2>>"$work/log" | tail -n 1)
      echo "${sides[$i]} $store $line" >> "$results"
      echo "${sides[$i]} $store $line" >&2
    done
  done
done
python3 - "$results" "$mode" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, store, js = line.split(" ", 2)
    rows.setdefault(store, {}).setdefault(side, []).append(json.loads(js)["lifecycles_per_sec"])
print(f"| store | mode | untargeted lifecycles/s | targeted lifecycles/s | targeted/untargeted |")
print("|---|---|---:|---:|---:|")
for store, sides in sorted(rows.items()):
    u, t = statistics.median(sides["untargeted"]), statistics.median(sides["targeted"])
    print(f"| {store} | {sys.argv[2]} | {u:,.0f} | {t:,.0f} | {t/u:.2f} |")
PY
