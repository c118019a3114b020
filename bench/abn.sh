#!/usr/bin/env bash
# N-way before/after in one run: each broker binary in turn (order reversed every
# repetition), each on a fresh database, with the CPU each lifecycle cost. Two
# readings of it:
# - the throughput phase alone ("phase", the figure to compare): the broker's
#   process and the database server's (Postgres' postmaster with its backends,
#   mysqld), read by the bench at the phase's start and end (--db-pid). The bench's
#   short latency phase, whose one-task Submits cost more per task, is not in it.
# - the whole run ("run"): the broker plus the bench process (/usr/bin/time) and
#   the database server from before the broker starts to after it stops.
# A peer's run is its throughput phase (it has no latency phase), so its "run"
# figures compare with taskbroker's "phase" figures.
# CPU per lifecycle stays steady on a loaded machine when lifecycles/s does not.
# A "binary" may be a script that execs one with settings in its env.
#
#   bench/abn.sh base=/tmp/bins/6002044 head=target/release/taskbroker
#
# Env: REPS (3), STORES ("sqlite postgres"; "mysql" starts a MariaDB, scripts/mysql.sh), MODES ("batched per-task"),
# OUT (the raw results file, /tmp/abn.results), BENCH_ARGS_<name> (more bench flags
# for one side, e.g. BENCH_ARGS_off=--no-lease-next). Needs target/release/taskbroker-bench.
#
# A side `name=peer:SYSTEM` runs a peer instead (bench/peers/run.sh SYSTEM best: the same
# overlapping shape, tasks and workers; bench/peers/install.sh first), on Postgres in the
# batched rows only; its "broker" CPU is the peer's process (its producers and workers).
#
#   STORES=postgres MODES=batched bench/abn.sh head=target/release/taskbroker graphile=peer:graphile-worker
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-3}; stores=${STORES:-"sqlite postgres"}; modes=${MODES:-"batched per-task"}
work=$(mktemp -d /tmp/abn.XXXXXX)
trap 'scripts/pg.sh stop "$work/pg" || true; scripts/mysql.sh stop "$work/mysql" || true; rm -rf "$work"' EXIT
eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
# MariaDB flushes its log at every commit, as Postgres does (fsync on).
case " $stores " in *" mysql "*) eval "$(MYSQL_DURABLE=1 scripts/mysql.sh start "$work/mysql")" ;; esac
fresh_db() {
  local name=ab_$(date +%s%N)_$RANDOM
  if [ "$1" = mysql ]; then
    scripts/mysql.sh sql "$work/mysql" "CREATE DATABASE $name" >/dev/null
    echo "${TASKBROKER_TEST_MYSQL_URL%/*}/$name"
  else
    psql -q "$admin" -c "CREATE DATABASE $name" >/dev/null; echo "${admin%/*}/$name"
  fi
}
dbpid() { if [ "$1" = mysql ]; then cat "$work/mysql/pid"; else head -1 "$work/pg/data/postmaster.pid"; fi; }
# The server's CPU so far, in ticks: its own and its reaped children's (Postgres'
# backends exit when the broker's pool closes, before the second reading).
dbcpu() { [ "$1" = sqlite ] && { echo 0; return; }; awk '{print $14+$15+$16+$17}' /proc/"$(dbpid "$1")"/stat; }
names=(); bins=()
for a in "$@"; do names+=("${a%%=*}"); bins+=("${a#*=}"); done
n=${#names[@]}
res=${OUT:-/tmp/abn.results}; : > "$res"
for rep in $(seq 1 "$reps"); do
 for store in $stores; do for mode in $modes; do
  tasks=30000; [ "$mode" = per-task ] && tasks=10000
  idx=$(seq 0 $((n-1))); [ $((rep % 2)) = 0 ] && idx=$(seq $((n-1)) -1 0)
  for i in $idx; do
    peer=""; case "${bins[$i]}" in peer:*) peer=${bins[$i]#peer:} ;; esac
    if [ -n "$peer" ] && { [ "$store" != postgres ] || [ "$mode" != batched ]; }; then continue; fi
    if [ "$store" = sqlite ]; then url="sqlite://$work/ab-$rep-$i.db"; else url=$(fresh_db "$store"); fi
    dbflag=""; [ "$store" != sqlite ] && dbflag="--db-pid $(dbpid "$store")"
    # A peer creates its schema when it starts: a run of 100 jobs first.
    [ -n "$peer" ] && bench/peers/run.sh "$peer" best "$url" 100 2 >>"$work/log" 2>&1
    pgb=$(dbcpu "$store"); extra_var="BENCH_ARGS_${names[$i]}"
    if [ -n "$peer" ]; then
      line=$(/usr/bin/time -f "%U %S" -o $work/time bench/peers/run.sh "$peer" best "$url" "$tasks" 64 2>>"$work/log" | tail -n 1) || { echo "FAILED ${names[$i]} $store $mode" >&2; tail -3 "$work/log" >&2; continue; }
    else
    # shellcheck disable=SC2086 # the side's flags, split on spaces
    line=$(/usr/bin/time -f "%U %S" -o $work/time target/release/taskbroker-bench ${!extra_var:-} $dbflag --spawn-broker "$url" --broker-bin "${bins[$i]}" --mode "$mode" --workers 64 --tasks "$tasks" --latency-seconds 2 2>>"$work/log" | tail -n 1) || { echo "FAILED ${names[$i]} $store $mode" >&2; tail -3 "$work/log" >&2; continue; }
    fi
    sleep 1; pga=$(dbcpu "$store"); read u sy < $work/time
    line=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); d['cpu_broker_us']=round(($u+$sy)*1e6/$tasks,1); d['cpu_pg_us']=round(($pga-$pgb)*1e4/$tasks,1); print(json.dumps(d))" "$line")
    echo "${names[$i]} $store $mode $line" >> "$res"; echo "${names[$i]} $store $mode $line" | cut -c1-150 >&2
  done
 done; done
done
python3 - "$res" "${names[@]}" <<'PY'
import json, statistics, sys
rows={}
for line in open(sys.argv[1]):
    side, store, mode, js = line.split(" ",3); rows.setdefault((store,mode),{}).setdefault(side,[]).append(json.loads(js))
names=sys.argv[2:]
print("| store | mode | "+" | ".join(names)+" |")
for (s,m),d in sorted(rows.items()):
    M=lambda x,k: statistics.median([r[k] for r in d[x]])
    here=[x for x in names if x in d]
    base=M(here[0],"lifecycles_per_sec")
    has=lambda x,k: all(r.get(k) is not None for r in d[x])
    # The throughput phase alone: the broker's process and the database's.
    def phase(x):
        if not has(x,'broker_cpu_us_per_lifecycle'):
            return ""
        db=f"+db{M(x,'db_cpu_us_per_lifecycle'):.0f}" if has(x,'db_cpu_us_per_lifecycle') else ""
        return f" phase b{M(x,'broker_cpu_us_per_lifecycle'):.0f}{db}us"
    print(f"| {s} | {m} | "+" | ".join(f"{M(x,'lifecycles_per_sec'):,.0f} ({M(x,'lifecycles_per_sec')/base:.2f}){phase(x)} run b{M(x,'cpu_broker_us'):.0f}+db{M(x,'cpu_pg_us'):.0f}us" if x in d else "-" for x in names)+" |")
PY
