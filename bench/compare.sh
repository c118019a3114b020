#!/usr/bin/env bash
# Benchmarks taskbroker (SQLite and Postgres, per-task and batched mode, several
# worker counts, one big backlog) and its Postgres peers (graphile-worker, River,
# pg-boss) on this machine, and writes bench/results/<date>.md with the tables,
# bench/results/<date>.png (throughput vs workers and vs backlog),
# bench/results/<date>-latency.png (p99 pick-up latency vs offered rate) and the
# raw bench/results/<date>.jsonl.
#
#   bench/compare.sh            # ~20-25 min: workers 8/32/64, median of 3, 1M backlog
#   bench/compare.sh --quick    # ~4-6 min: workers 8/64, one run each, 100k backlog
#
# Every system runs the same throughput shape: workers first, then producers
# enqueue while they drain (peers: bench/peers --shape overlap); each peer's best
# configuration also runs phased (enqueue all, then drain), shown beside it. Then
# pick-up latency, every system in its best configuration with LAT_WORKERS (16)
# workers: a closed loop (one job at a time) and open loops at LAT_RATES
# (500,1000,3000 jobs/s), from send to handler start. Replica scaling is its own
# script: bench/replicas.sh.
#
# Every number comes from a fresh broker process on a fresh database: a new SQLite
# file, or a new database on one throwaway Postgres cluster (scripts/pg.sh) that
# the peers share. Task counts can be overridden with TB_TASKS_PER_TASK,
# TB_TASKS_BATCHED, PEER_TASKS_BEST, BACKLOGS ("100000 1000000"); REPS overrides the repetitions.
#
#   bench/compare.sh --mysql    # taskbroker on MySQL too (a throwaway MariaDB, scripts/mysql.sh):
#                               # per-task and batched at every worker count, and its pick-up latency
#   TB_ONLY=1 bench/compare.sh --quick --mysql   # taskbroker's stores only, no peers
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
mysql=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --mysql) mysql=1 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "unknown argument $arg (try --quick or --mysql)" >&2; exit 2 ;;
  esac
done
stores="sqlite postgres"
if [ "$mysql" = 1 ]; then stores="$stores mysql"; fi
tb_only=${TB_ONLY:-0}

if [ "$quick" = 1 ]; then
  reps=${REPS:-1}
  worker_counts="8 64"
  backlogs=${BACKLOGS:-100000}
  backlog_workers=64
  tb_per_task=${TB_TASKS_PER_TASK:-10000}
  tb_batched=${TB_TASKS_BATCHED:-30000}
  latency_seconds=2
  loop_seconds=1
  peer_best=${PEER_TASKS_BEST:-20000}
  # Per-job peer configurations are slow by design (polling): fewer jobs.
  peer_graphile_defaults=2000 peer_river_defaults=2000 peer_pgboss_defaults=300
else
  reps=${REPS:-3}
  worker_counts="8 32 64"
  backlogs=${BACKLOGS:-"100000 1000000"}
  backlog_workers=32
  tb_per_task=${TB_TASKS_PER_TASK:-15000}
  tb_batched=${TB_TASKS_BATCHED:-50000}
  latency_seconds=3
  loop_seconds=3
  peer_best=${PEER_TASKS_BEST:-20000}
  peer_graphile_defaults=5000 peer_river_defaults=3000 peer_pgboss_defaults=500
fi

stamp=$(date +%Y-%m-%d)
results=bench/results
mkdir -p "$results"
jsonl=$results/$stamp.jsonl
: > "$jsonl"
work=$(mktemp -d /tmp/taskbroker-compare.XXXXXX)
log=$work/log
cleanup() {
  scripts/pg.sh stop "$work/pg" || true
  if [ "$mysql" = 1 ]; then scripts/mysql.sh stop "$work/mysql" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)
say() { echo "[$(( $(date +%s) - started ))s] $*" >&2; }

say "building (release)"
cargo build --release -q -p taskbroker-server -p taskbroker-bench
if [ "$tb_only" != 1 ]; then
  say "installing peers (npm, Go module proxy) and matplotlib (PyPI)"
  bench/peers/install.sh >&2
fi
if [ ! -x bench/.venv/bin/python ]; then python3 -m venv bench/.venv; fi
bench/.venv/bin/pip install -q matplotlib

eval "$(scripts/pg.sh start "$work/pg")"
pg_base=${TASKBROKER_TEST_POSTGRES_URL%/*}
say "postgres at $pg_base"
psql_admin() { psql -qX "$pg_base/postgres" -v ON_ERROR_STOP=1 "$@" >/dev/null; }
db_seq=0
fresh_db() { # prints the URL of a new, empty database
  db_seq=$((db_seq + 1))
  local name="bench_$db_seq"
  psql_admin -c "CREATE DATABASE $name"
  echo "$pg_base/$name"
}
drop_db() { psql_admin -c "DROP DATABASE IF EXISTS ${1##*/}"; }
if [ "$mysql" = 1 ]; then
  eval "$(MYSQL_DURABLE=1 scripts/mysql.sh start "$work/mysql")"
  my_base=${TASKBROKER_TEST_MYSQL_URL%/*}
  say "mysql at $my_base"
fi
fresh_mysql() { # prints the URL of a new, empty MySQL database
  db_seq=$((db_seq + 1))
  scripts/mysql.sh sql "$work/mysql" "CREATE DATABASE bench_$db_seq"
  echo "$my_base/bench_$db_seq"
}
drop_mysql() { scripts/mysql.sh sql "$work/mysql" "DROP DATABASE IF EXISTS ${1##*/}"; }
# store_url STORE NAME: a fresh database of the store; store_drop STORE URL.
store_url() {
  case "$1" in
    sqlite) echo "sqlite://$work/$2.db" ;;
    mysql) fresh_mysql ;;
    *) fresh_db ;;
  esac
}
store_drop() {
  case "$1" in
    sqlite) rm -f "${2#sqlite://}"* ;;
    mysql) drop_mysql "$2" ;;
    *) drop_db "$2" ;;
  esac
}

summary() { # JSON LABEL: one line for the progress log
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
if sys.argv[2].startswith("latency"):
    print(", ".join(f"{l['offered_rate'] or 'closed'}: p50 {l['p50_ms']} p99 {l['p99_ms']} ms" for l in r.get("latency") or []))
else:
    print(format(r["lifecycles_per_sec"], ",.0f") + " lifecycles/s")
PY
}

# record LABEL REP COMMAND...: runs one benchmark, appends its JSON line (with
# "rep") to $jsonl, or a failure line when it fails. Output goes to the log.
record() {
  local label=$1 rep=$2
  shift 2
  say "$label (run $rep)"
  local out
  if out=$("$@" 2>>"$log" | tee -a "$log" | tail -n 1) && [ "${out:0:1}" = "{" ]; then
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["rep"]=int(sys.argv[2]); r["label"]=sys.argv[3]; print(json.dumps(r))' \
      "$out" "$rep" "$label" >> "$jsonl"
    say "  -> $(summary "$out" "$label")"
  else
    say "  -> FAILED (see the log below)"
    tail -n 5 "$log" >&2 || true
    python3 -c 'import json,sys; print(json.dumps({"failed": True, "label": sys.argv[1], "rep": int(sys.argv[2])}))' \
      "$label" "$rep" >> "$jsonl"
  fi
}

tb_run() { # STORE MODE WORKERS TASKS BACKLOG REP
  local store=$1 mode=$2 workers=$3 tasks=$4 backlog=$5 rep=$6 url
  url=$(store_url "$store" "bench-$rep")
  record "taskbroker $store $mode w=$workers backlog=$backlog" "$rep" \
    target/release/taskbroker-bench --spawn-broker "$url" --mode "$mode" --workers "$workers" \
    --tasks "$tasks" --backlog "$backlog" --latency-seconds "$latency_seconds"
  store_drop "$store" "$url"
}

peer_run() { # SYSTEM CONFIG WORKERS TASKS REP [EXTRA ARGS FOR THE PEER...]
  local url system=$1 config=$2 workers=$3 tasks=$4 rep=$5
  shift 5
  url=$(fresh_db)
  record "$system $config w=$workers${*:+ $*}" "$rep" \
    bench/peers/run.sh "$system" "$config" "$url" "$tasks" "$workers" -- "$@"
  drop_db "$url"
}

# Pick-up latency: a short warm-up throughput phase, then the closed loop and the
# open loops, on LAT_WORKERS waiting workers of each system's best configuration.
lat_workers=${LAT_WORKERS:-16}
lat_rates=${LAT_RATES:-500,1000,3000}
lat_warmup=2000
tb_latency() { # STORE REP
  local store=$1 rep=$2 url
  url=$(store_url "$store" "lat-$rep")
  record "latency taskbroker $store" "$rep" \
    target/release/taskbroker-bench --spawn-broker "$url" --mode batched --workers "$lat_workers" \
    --tasks "$lat_warmup" --closed-loop --latency-rate "$lat_rates" --latency-seconds "$loop_seconds"
  store_drop "$store" "$url"
}
peer_latency() { # SYSTEM REP
  local url
  url=$(fresh_db)
  record "latency $1" "$2" bench/peers/run.sh "$1" best "$url" "$lat_warmup" "$lat_workers" -- \
    --latency "closed,$lat_rates" --latency-seconds "$loop_seconds"
  drop_db "$url"
}

for rep in $(seq 1 "$reps"); do
  for store in $stores; do
    for workers in $worker_counts; do
      tb_run "$store" per-task "$workers" "$tb_per_task" 0 "$rep"
      tb_run "$store" batched "$workers" "$tb_batched" 0 "$rep"
    done
  done
  if [ "$mysql" = 1 ]; then tb_latency mysql "$rep"; fi
  if [ "$tb_only" = 1 ]; then
    tb_latency postgres "$rep"
    tb_latency sqlite "$rep"
    continue
  fi
  for workers in $worker_counts; do
    for peer in graphile-worker river pg-boss; do
      peer_run "$peer" best "$workers" "$peer_best" "$rep"
      peer_run "$peer" best "$workers" "$peer_best" "$rep" --shape phased
    done
  done
  peer_run graphile-worker defaults 64 "$peer_graphile_defaults" "$rep"
  peer_run river defaults 64 "$peer_river_defaults" "$rep"
  peer_run pg-boss defaults 64 "$peer_pgboss_defaults" "$rep"
  # Alternating systems within a repetition, so a noisy minute hits them all alike.
  tb_latency postgres "$rep"
  peer_latency graphile-worker "$rep"
  tb_latency sqlite "$rep"
  peer_latency river "$rep"
  peer_latency pg-boss "$rep"
done
# Backlog runs are long (loading 1M tasks); one run each.
for backlog in $backlogs; do
  for store in sqlite postgres; do
    tb_run "$store" batched "$backlog_workers" "$tb_batched" "$backlog" 1
  done
done

elapsed=$(( $(date +%s) - started ))
pg_version=$(psql -XtA "$pg_base/postgres" -c 'SHOW server_version')
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- server client-rs migrations || echo "+uncommitted")
description="Run by \`bench/compare.sh$([ "$quick" = 1 ] && echo " --quick")\` on $(date -u '+%Y-%m-%d %H:%M UTC'), \
commit $commit, $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB; broker, database and load generator \
on the same machine. Postgres $pg_version (scripts/pg.sh: default settings, fsync on); SQLite WAL with \
synchronous=FULL.$( [ "$mysql" = 1 ] && echo " MySQL store on MariaDB $(scripts/mysql.sh sql "$work/mysql" 'SELECT VERSION()') (scripts/mysql.sh with MYSQL_DURABLE=1: log and binary log flushed at every commit)." ) $reps run(s) per point ($( [ "$reps" -ge 3 ] && echo "median of $reps" || echo "single run")); \
backlog points one run each. Tasks per run: taskbroker per-task $tb_per_task, batched $tb_batched; \
peers' best configurations $peer_best, their per-job defaults $peer_graphile_defaults (graphile-worker), \
$peer_river_defaults (River), $peer_pgboss_defaults (pg-boss). Pick-up latency: $lat_workers workers, \
closed loop and open loops at $lat_rates jobs/s, ${loop_seconds}s each. Payload 64 B; node $(node --version), \
$(GOTOOLCHAIN=local go version | awk '{print $3}'). Total time ${elapsed}s."
bench/.venv/bin/python bench/report.py "$jsonl" "$results/$stamp.md" "$results/$stamp.png" "$description"
# The like-for-like tables on the terminal too (the full report is in the file).
sed -n '/^## Pick-up latency/,/^## Targets: throughput/p' "$results/$stamp.md" | sed '$d'
say "done: $results/$stamp.md"
