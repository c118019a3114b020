#!/usr/bin/env bash
# Replica scaling: 1, 2 and 3 taskbroker replicas on one Postgres database, the
# load spread across them (taskbroker-bench --replicas N: each producer's and
# worker's connection goes to the next replica, round robin, so most dispatches
# cross replicas through Postgres NOTIFY). Per replica count: lifecycles/s
# (batched, submitting while draining), pick-up latency in a closed loop and an
# open loop at RATE jobs/s (from send to the Lease reply), and the brokers' peak
# RSS. Writes bench/results/<date>-replicas.md and the raw <date>-replicas.jsonl.
#
#   bench/replicas.sh            # ~5 min: 1/2/3 replicas, 3 alternating rounds, medians
#   bench/replicas.sh --quick    # ~1 min: one round, fewer tasks
#
# Every run starts fresh brokers on a fresh database of one throwaway cluster
# (scripts/pg.sh). Overrides: REPLICAS ("1 2 3"), TASKS, WORKERS (64),
# PRODUCERS (6: an equal share per replica for 1, 2 and 3), RATE (1000), REPS.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument $arg (try --quick)" >&2; exit 2 ;;
  esac
done
replicas=${REPLICAS:-"1 2 3"}
workers=${WORKERS:-64}
producers=${PRODUCERS:-6}
rate=${RATE:-1000}
if [ "$quick" = 1 ]; then
  reps=${REPS:-1} tasks=${TASKS:-10000} seconds=1
else
  reps=${REPS:-3} tasks=${TASKS:-50000} seconds=3
fi

stamp=$(date +%Y-%m-%d)
results=bench/results
mkdir -p "$results"
jsonl=$results/$stamp-replicas.jsonl
md=$results/$stamp-replicas.md
: > "$jsonl"
work=$(mktemp -d /tmp/taskbroker-replicas.XXXXXX)
cleanup() {
  scripts/pg.sh stop "$work/pg" || true
  rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)
say() { echo "[$(( $(date +%s) - started ))s] $*" >&2; }

say "building (release)"
cargo build --release -q -p taskbroker-server -p taskbroker-bench
eval "$(scripts/pg.sh start "$work/pg")"
pg_base=${TASKBROKER_TEST_POSTGRES_URL%/*}
psql_admin() { psql -qX "$pg_base/postgres" -v ON_ERROR_STOP=1 "$@" >/dev/null; }

seq_no=0
for rep in $(seq 1 "$reps"); do
  for n in $replicas; do
    seq_no=$((seq_no + 1))
    db="replicas_$seq_no"
    psql_admin -c "CREATE DATABASE $db"
    say "$n replica(s), run $rep"
    if out=$(target/release/taskbroker-bench --spawn-broker "$pg_base/$db" --replicas "$n" \
        --mode batched --workers "$workers" --producers "$producers" --tasks "$tasks" \
        --closed-loop --latency-rate "$rate" --latency-seconds "$seconds" \
        --label "replicas=$n" 2>>"$work/log" | tee -a "$work/log" | tail -n 1) && [ "${out:0:1}" = "{" ]; then
      python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["rep"]=int(sys.argv[2]); print(json.dumps(r))' \
        "$out" "$rep" >> "$jsonl"
    else
      say "  -> FAILED"
      tail -n 5 "$work/log" >&2 || true
    fi
    psql_admin -c "DROP DATABASE IF EXISTS $db"
  done
done

elapsed=$(( $(date +%s) - started ))
pg_version=$(psql -XtA "$pg_base/postgres" -c 'SHOW server_version')
commit=$(git rev-parse --short HEAD)
python3 - "$jsonl" "$md" <<PY
import json, statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    if line.strip():
        r = json.loads(line)
        runs[r["replicas"]].append(r)

def loop(r, kind):
    return next((l for l in r.get("latency") or [] if l["loop"] == kind), {})

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median_low(values) if values else None

def f(v, fmt):
    return "-" if v is None else format(v, fmt)

rows = [
    "| replicas | lifecycles/s | runs | closed loop p50 / p99 ms | open loop $rate/s p50 / p99 ms (achieved/s) | errors |",
    "|---:|---:|---|---|---|---:|",
]
base = None
for n in sorted(runs):
    rs = runs[n]
    lc = med([r["lifecycles_per_sec"] for r in rs])
    base = base or lc
    closed = [loop(r, "closed") for r in rs]
    opened = [loop(r, "open") for r in rs]
    rows.append(
        f"| {n} | **{f(lc, ',.0f')}** ({lc / base:.2f}x) | {', '.join(f(r['lifecycles_per_sec'], ',.0f') for r in rs)} "
        f"| {f(med([l.get('p50_ms') for l in closed]), '.2f')} / {f(med([l.get('p99_ms') for l in closed]), '.2f')} "
        f"| {f(med([l.get('p50_ms') for l in opened]), '.2f')} / **{f(med([l.get('p99_ms') for l in opened]), '.2f')}** "
        f"({f(med([l.get('achieved_rate') for l in opened]), ',.0f')}) | {sum(r.get('errors') or 0 for r in rs)} |"
    )
text = f"""# Replica scaling {sys.argv[2].split('/')[-1][:10]}

Run by \`bench/replicas.sh$([ "$quick" = 1 ] && echo " --quick")\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit,
$(nproc) cores: the replicas, Postgres $pg_version (one database, scripts/pg.sh defaults, fsync on) and the
load generator on the same machine. Batched mode, $workers workers and $producers producers spread round robin
over the replicas, $tasks tasks submitted while draining; then pick-up latency from send to the Lease reply,
a closed loop and an open loop at $rate/s, ${seconds}s each. $reps round(s) alternating the replica counts;
medians (lower median for an even count). Total time ${elapsed}s.

{chr(10).join(rows)}

Raw results: [{sys.argv[1].split('/')[-1]}]({sys.argv[1].split('/')[-1]}).
"""
open(sys.argv[2], "w").write(text)
print(text)
PY
say "done: $md"
