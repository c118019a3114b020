#!/usr/bin/env bash
# Pick-up latency before/after, in one run: the closed loop (one task at a time,
# from send to the worker's Lease reply) and an open loop at 1,000/s, against a
# base and a head broker binary in turn (A B, B A, ...), each on a fresh
# database, on both stores. Prints the median p50/p99 of each side.
#
#   bench/latency_ab.sh BASE_BIN HEAD_BIN [REPS]
#   e.g. after bench/ab.sh main 3:
#   bench/latency_ab.sh target/ab-base/release/taskbroker target/release/taskbroker 3
#
# Env: STORES ("sqlite postgres"), WORKERS (16), SECONDS_PER_LOOP (10), RATES (1000).
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("${1:?usage: bench/latency_ab.sh BASE_BIN HEAD_BIN [REPS]}" "${2:?head binary}")
reps=${3:-3}
stores=${STORES:-"sqlite postgres"}
workers=${WORKERS:-16}
seconds=${SECONDS_PER_LOOP:-10}
rates=${RATES:-1000}
names=("base" "head")

work=$(mktemp -d /tmp/taskbroker-latab.XXXXXX)
cleanup() {
  scripts/pg.sh stop "$work/pg" || true
  rm -rf "$work"
}
trap cleanup EXIT
eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
fresh_db() {
  local name
  name=lat_$(date +%s%N)_$RANDOM
  psql -q "$admin" -c "CREATE DATABASE $name" >/dev/null
  echo "${admin%/*}/$name"
}

results=$work/results
for rep in $(seq 1 "$reps"); do
  for store in $stores; do
    order="0 1"; [ $((rep % 2)) = 0 ] && order="1 0"
    for i in $order; do
      if [ "$store" = sqlite ]; then url="sqlite://$work/lat-$rep-$i.db"; else url=$(fresh_db); fi
      line=$(target/release/taskbroker-bench --spawn-broker "$url" --broker-bin "${bins[$i]}" \
        --mode batched --workers "$workers" --tasks 2000 --closed-loop \
        --latency-rate "$rates" --latency-seconds "$seconds" 2>>"$work/log" | tail -n 1)
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
    for l in json.loads(js).get("latency") or []:
        key = (store, "closed" if l["loop"] == "closed" else f"open {l['offered_rate']:.0f}/s")
        rows.setdefault(key, {}).setdefault(side, []).append(l)
def med(ls, k):
    v = [l[k] for l in ls if l.get(k) is not None]
    return statistics.median(v) if v else float("nan")
print("| store | loop | base p50 ms | head p50 ms | base p99 ms | head p99 ms |")
print("|---|---|---:|---:|---:|---:|")
for (store, loop), sides in sorted(rows.items()):
    b, h = sides.get("base", []), sides.get("head", [])
    print(f"| {store} | {loop} | {med(b,'p50_ms'):.2f} | {med(h,'p50_ms'):.2f} | {med(b,'p99_ms'):.2f} | {med(h,'p99_ms'):.2f} |")
PY
