#!/usr/bin/env bash
# Admission: what the gated lease costs, in one run. Runs taskbroker-bench
# against the working tree's broker with and without gates, alternating (A B A B
# ..., which side goes first alternates too), each on a fresh database, and
# prints the median lifecycles/s and dispatch p99 of each side.
#
#   bench/admission_ab.sh [REPS]
#
# "gated": every task has one of 1,000 concurrency keys, the queue has
# max_concurrent_per_key 5 and a rate limit above the offered load (RATE,
# default 100000/s). "plain": the same load without keys or gates.
# Env: STORES ("sqlite postgres"), MODE (batched), WORKERS (64), TASKS (30000), RATE,
# NO_BUILD (use target/release as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
stores=${STORES:-"sqlite postgres"}
mode=${MODE:-batched}
workers=${WORKERS:-64}
tasks=${TASKS:-30000}
rate=${RATE:-100000}

work=$(mktemp -d /tmp/taskbroker-admission-ab.XXXXXX)
cleanup() {
  scripts/pg.sh stop "$work/pg" || true
  rm -rf "$work"
}
trap cleanup EXIT

[ -n "${NO_BUILD:-}" ] || cargo build --release -q -p taskbroker-server -p taskbroker-bench
eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
fresh_db() {
  local name
  name=adm_$(date +%s%N)_$RANDOM
  psql -q "$admin" -c "CREATE DATABASE $name" >/dev/null
  echo "${admin%/*}/$name"
}
names=("plain" "gated")
extra=("" "--concurrency-keys 1000 --max-per-key 5 --rate-limit $rate")

results=$work/results
for rep in $(seq 1 "$reps"); do
  for store in $stores; do
    order="0 1"; [ $((rep % 2)) = 0 ] && order="1 0"
    for i in $order; do
      if [ "$store" = sqlite ]; then url="sqlite://$work/adm-$rep-$i.db"; else url=$(fresh_db); fi
      # shellcheck disable=SC2086
      line=$(target/release/taskbroker-bench --spawn-broker "$url" \
        --mode "$mode" --workers "$workers" --tasks "$tasks" --latency-seconds 2 ${extra[$i]} \
        2>>"$work/log" | tail -n 1)
      echo "${names[$i]} $store $line" >> "$results"
      echo "${names[$i]} $store $line" >&2
    done
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, store, js = line.split(" ", 2)
    rows.setdefault(store, {}).setdefault(side, []).append(json.loads(js))
def med(rs, k):
    v = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(v) if v else float("nan")
print("| store | plain lifecycles/s | gated lifecycles/s | gated/plain | plain p99 ms | gated p99 ms |")
print("|---|---:|---:|---:|---:|---:|")
for store, sides in sorted(rows.items()):
    p, g = med(sides.get("plain", []), "lifecycles_per_sec"), med(sides.get("gated", []), "lifecycles_per_sec")
    pp, gp = med(sides.get("plain", []), "dispatch_p99_ms"), med(sides.get("gated", []), "dispatch_p99_ms")
    print(f"| {store} | {p:,.0f} | {g:,.0f} | {g/p:.2f} | {pp:.1f} | {gp:.1f} |")
PY
