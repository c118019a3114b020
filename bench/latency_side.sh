#!/usr/bin/env bash
# Pick-up latency side by side: taskbroker (one or more broker binaries) and the
# Postgres peers at one offered rate and worker count, in alternating order
# (A B C, C B A, ...), each on a fresh database of one throwaway Postgres
# cluster. Latency runs from the enqueue call being sent to the handler
# starting (taskbroker: the Lease reply reaching a waiting worker). Prints each
# run, then the median p50/p99 of each side.
#
#   bench/latency_side.sh RATE WORKERS SIDE...
#   SIDE: NAME=BROKER_BIN (taskbroker on Postgres), graphile-worker, river, pg-boss
#   e.g. bench/latency_side.sh 200 8 head=target/release/taskbroker graphile-worker
#        bench/latency_side.sh 1000 16 head=target/release/taskbroker river graphile-worker pg-boss
#
# Env: REPS (3), SECONDS_PER_LOOP (10), WARMUP (2000 tasks before the loop),
# OUT (a file that keeps the raw JSON lines). Run bench/peers/install.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/latency_side.sh RATE WORKERS SIDE..."
rate=${1:?$usage}
workers=${2:?$usage}
shift 2
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
sides=("$@")
reps=${REPS:-3}
seconds=${SECONDS_PER_LOOP:-10}
warmup=${WARMUP:-2000}

work=$(mktemp -d /tmp/taskbroker-latside.XXXXXX)
cleanup() {
  scripts/pg.sh stop "$work/pg" || true
  rm -rf "$work"
}
trap cleanup EXIT
eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
fresh_db() {
  local name
  name=side_$(date +%s%N)_$RANDOM
  psql -q "$admin" -c "CREATE DATABASE $name" >/dev/null
  echo "${admin%/*}/$name"
}

results=${OUT:-$work/results}
for rep in $(seq 1 "$reps"); do
  order=("${sides[@]}")
  if [ $((rep % 2)) = 0 ]; then
    order=()
    for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[$i]}"); done
  fi
  for side in "${order[@]}"; do
    url=$(fresh_db)
    case "$side" in
      graphile-worker|river|pg-boss)
        name=$side
        line=$(bench/peers/run.sh "$side" best "$url" "$warmup" "$workers" -- \
          --latency "$rate" --latency-seconds "$seconds" 2>>"$work/log" | tail -n 1) ;;
      *=*)
        name=${side%%=*}
        line=$(target/release/taskbroker-bench --spawn-broker "$url" --broker-bin "${side#*=}" \
          --mode batched --workers "$workers" --tasks "$warmup" \
          --latency-rate "$rate" --latency-seconds "$seconds" 2>>"$work/log" | tail -n 1) ;;
      *) echo "unknown side $side (NAME=BROKER_BIN, graphile-worker, river, pg-boss)" >&2; exit 2 ;;
    esac
    echo "$name $line" >>"$results"
    echo "$name $line" >&2
  done
done
python3 - "$results" "$rate" "$workers" <<'PY'
import json, statistics, sys
path, rate, workers = sys.argv[1], sys.argv[2], sys.argv[3]
sides = {}
for line in open(path):
    name, js = line.split(" ", 1)
    for l in json.loads(js).get("latency") or []:
        sides.setdefault(name, []).append(l)
print(f"open loop {rate}/s, {workers} workers, median of each side's runs (ms from send):")
for name, ls in sides.items():
    p50 = statistics.median(l["p50_ms"] for l in ls)
    p99 = statistics.median(l["p99_ms"] for l in ls)
    runs = ", ".join(f"{l['p50_ms']:.2f}/{l['p99_ms']:.2f}" for l in ls)
    print(f"  {name:16} p50 {p50:.2f}  p99 {p99:.2f}   ({len(ls)} runs: {runs})")
PY
