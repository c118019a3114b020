#!/usr/bin/env bash
# What one lifecycle (submit, lease, complete) writes on Postgres, counted exactly from
# the WAL: for each broker binary, one bench run on a fresh database of a throwaway
# cluster, then pg_waldump over the run's WAL range. Prints, per lifecycle, the WAL
# records and bytes (full-page images apart: they depend on where checkpoints fall) and
# the records per relation and kind (B-tree INSERT_LEAF = one index entry; heap INSERT,
# UPDATE, LOCK; a GIN index's pending list is moved into its tree before the end, so
# that deferred work is counted). docs/performance.md, "Writes per task".
#
#   bench/wal_writes.sh base=/tmp/bins/main head=target/release/taskbroker
#   bench/wal_writes.sh head=target/release/taskbroker graphile=peer:graphile-worker river=peer:river
#
# A `peer:SYSTEM` side runs that peer's bench (bench/peers/run.sh SYSTEM best, the same
# overlapping shape and worker count; bench/peers/install.sh first). Each side also prints
# the Postgres server's CPU per lifecycle (its backends' user + system time).
#
# Env: MODE (batched), TASKS (20000), WORKERS (64). Needs target/release/taskbroker-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${MODE:-batched}; n=${TASKS:-20000}; workers=${WORKERS:-64}
work=$(mktemp -d /tmp/walw.XXXXXX)
trap 'scripts/pg.sh stop "$work/pg" || true; rm -rf "$work"' EXIT
eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
bindir=$(dirname "$(readlink -f "$(command -v pg_ctl 2>/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl | tail -1)")")
waldump=$bindir/pg_waldump
[ -x "$waldump" ] || waldump=$(ls /usr/lib/postgresql/*/bin/pg_waldump | tail -1)
# Keep the run's WAL until it is read.
psql -q "$admin" -c "ALTER SYSTEM SET wal_keep_size = '4GB'" -c "SELECT pg_reload_conf()" >/dev/null
wal=$work/pg/data/pg_wal
dump() { "$waldump" "$@"; }
# CPU ticks of the postmaster's reaped children (backends exit when their client closes).
pgcpu() { awk '{print $16+$17}' "/proc/$(head -1 "$work/pg/data/postmaster.pid")/stat"; }

for arg in "$@"; do
  name=${arg%%=*}; bin=${arg#*=}
  db=walw_${name//[^a-zA-Z0-9]/_}_$RANDOM
  psql -q "$admin" -c "CREATE DATABASE $db" >/dev/null
  url="${admin%/*}/$db"
  case "$bin" in
    peer:*) system=${bin#peer:}
      # The peer creates its schema when it starts: a run of 100 jobs, then the measured one.
      bench/peers/run.sh "$system" best "$url" 100 2 >>"$work/log" 2>&1 ;;
    *) "$bin" migrate --database-url "$url" >/dev/null ;;
  esac
  psql -qAt -F ' ' "$url" -c "SELECT pg_relation_filenode(c.oid), c.relname FROM pg_class c \
    JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname NOT IN ('pg_catalog', \
    'information_schema', 'pg_toast') AND c.relkind IN ('r', 'i')" > "$work/rels"
  start=$(psql -qAt "$url" -c "SELECT pg_current_wal_insert_lsn()")
  cpu0=$(pgcpu)
  case "$bin" in
    peer:*) out=$(bench/peers/run.sh "${bin#peer:}" best "$url" "$n" "$workers" 2>>"$work/log" | tail -n 1) ;;
    *) out=$(target/release/taskbroker-bench --spawn-broker "$url" --broker-bin "$bin" --mode "$mode" \
      --workers "$workers" --tasks "$n" --latency-seconds 0 2>>"$work/log" | tail -n 1) ;;
  esac
  # Work a GIN index deferred (its pending list) belongs to the run: do it now.
  psql -qAt "$url" -c "SELECT count(gin_clean_pending_list(c.oid::regclass)) FROM pg_class c \
    JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'gin'" >/dev/null
  end=$(psql -qAt "$url" -c "SELECT pg_current_wal_insert_lsn()")
  sleep 1; cpu1=$(pgcpu)
  psql -qAt "$url" -c "SELECT pg_switch_wal()" >/dev/null
  echo "== $name: $mode, $n tasks, $(echo "$out" | python3 -c 'import json, sys; print(round(json.load(sys.stdin)["lifecycles_per_sec"]))') lifecycles/s, Postgres CPU $(( (cpu1 - cpu0) * 10000 / n )) us per lifecycle"
  dump -p "$wal" -s "$start" -e "$end" --stats 2>/dev/null | awk -v n="$n" '/^Total/ {
    gsub(/[][%(),]/, " ")
    printf "WAL per lifecycle: %.1f records, %.0f record bytes, %.0f full-page-image bytes\n", $2 / n, $3 / n, $5 / n }'
  dump -p "$wal" -s "$start" -e "$end" 2>/dev/null | awk -v n="$n" -v rels="$work/rels" '
    BEGIN { while ((getline l < rels) > 0) { split(l, a, " "); name[a[1]] = a[2] } }
    /rmgr: (Btree|Heap|Heap2|Gin) / {
      d = $0; sub(/.*desc: /, "", d); split(d, w, " ")
      if (!match($0, /rel [0-9]+\/[0-9]+\/[0-9]+/)) next
      r = substr($0, RSTART + 4, RLENGTH - 4); split(r, p, "/")
      if (!(p[3] in name)) next
      c[sprintf("%-28s %-6s %s", name[p[3]], $2, w[1])]++ }
    END { for (k in c) if (c[k] / n >= 0.005) printf "  %-52s %6.2f\n", k, c[k] / n }' | sort
done
