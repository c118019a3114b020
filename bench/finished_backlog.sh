#!/usr/bin/env bash
# What a table of finished tasks costs the hot path, and what deleting them costs:
# for each store, a database the broker migrated (a short first run) then filled
# with BACKLOG (1,000,000) succeeded tasks by SQL, with the rows the store keeps for
# a finished task (its task row; the three events submitted, leased, succeeded;
# on SQLite and MySQL its attempt row; Postgres keeps a succeeded attempt on the
# task row), copied from a task the first run finished, in the queue
# `bench-history`, created and finished over one day that ended a day ago. The
# bench's queues are its own (`bench-<ms>`), as another queue's history would be;
# the history sits in the same indexes (tasks_queue_state, tasks_created, the id
# key, the event log) as the measured tasks. The finished counts hold the million
# (the watermark is past them, as the fold would have left them). Postgres:
# VACUUM (ANALYZE) and a CHECKPOINT; MariaDB: ANALYZE TABLE and its dirty pages
# flushed; SQLite as the broker leaves it (it runs no ANALYZE).
#
# 1. Throughput: the bench's batched (30,000 tasks) and per-task (10,000) phases,
#    64 workers, on a fresh empty database and on the backlog one (reused by every
#    repetition: each adds its 30,000 or 10,000 finished tasks), alternating,
#    REPS times; the CPU per lifecycle of the phase (broker + database, --db-pid)
#    as bench/abn.sh reads it.
# 2. Retention: the broker started alone on the backlog database with
#    `--retention 1h --events-retention 1h`, so every history task and event is due
#    (the bench's own tasks are not); the first passes run at start. Polled until
#    no history task, attempt or event is left; then, on Postgres, until autovacuum
#    has vacuumed tasks and task_event_batches, on MariaDB until InnoDB's purge has
#    caught up (history list length). CPU: the broker's process, and the database
#    server with its live and reaped children (Postgres' backends, autovacuum
#    workers, checkpointer, WAL writer), from before the broker starts to the end.
#    Compared with BACKLOG x the batched phase's CPU per lifecycle.
#
#   BIN=target/release/taskbroker bench/finished_backlog.sh
#
# Env: STORES ("sqlite postgres mysql"; mysql starts a MariaDB, MYSQL_DURABLE=1),
# MODES ("batched per-task"), REPS (2), BACKLOG (1000000), BIN (the broker,
# target/release/taskbroker), BENCH (taskbroker-bench beside BIN), OUT (the raw
# results, /tmp/finished-backlog.results), RETENTION (1: measure retention),
# RETENTION_BIN (the broker of the retention pass, BIN),
# VACUUM_WAIT (600 s: longest wait for autovacuum or InnoDB's purge), PURGE_WAIT
# (3600 s: longest wait for retention).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-2}; stores=${STORES:-"sqlite postgres mysql"}; modes=${MODES:-"batched per-task"}
n=${BACKLOG:-1000000}; bin=${BIN:-target/release/taskbroker}
bench=${BENCH:-$(dirname "$bin")/taskbroker-bench}; retention_bin=${RETENTION_BIN:-$bin}; vacuum_wait=${VACUUM_WAIT:-600}
purge_wait=${PURGE_WAIT:-3600}
res=${OUT:-/tmp/finished-backlog.results}; : > "$res"
work=$(mktemp -d /tmp/finished-backlog.XXXXXX)
bpid=""
trap '[ -n "$bpid" ] && kill -TERM "$bpid" 2>/dev/null; scripts/pg.sh stop "$work/pg" || true; scripts/mysql.sh stop "$work/mysql" || true; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
eval "$(scripts/pg.sh start "$work/pg")"
admin=$TASKBROKER_TEST_POSTGRES_URL
# MariaDB flushes its log at every commit, as Postgres does (fsync on).
case " $stores " in *" mysql "*) eval "$(MYSQL_DURABLE=1 scripts/mysql.sh start "$work/mysql")" ;; esac
log() { echo "$(date -u +%H:%M:%S) $*" >&2; }

# A database of its own for one run: its URL.
fresh_db() {
  local name=fb_$(date +%s%N)_$RANDOM
  case $1 in
    sqlite) echo "sqlite://$work/$name.db" ;;
    mysql) scripts/mysql.sh sql "$work/mysql" "CREATE DATABASE $name" >/dev/null
      echo "${TASKBROKER_TEST_MYSQL_URL%/*}/$name" ;;
    *) psql -q "$admin" -c "CREATE DATABASE $name" >/dev/null; echo "${admin%/*}/$name" ;;
  esac
}
dbpid() { if [ "$1" = mysql ]; then cat "$work/mysql/pid"; else head -1 "$work/pg/data/postmaster.pid"; fi; }
# The server's CPU so far, in ticks: its own, its reaped children's and its live
# children's (Postgres' checkpointer, WAL writer, autovacuum launcher).
dbcpu() {
  [ "$1" = sqlite ] && { echo 0; return; }
  local p; p=$(dbpid "$1")
  { awk '{print $14+$15+$16+$17}' "/proc/$p/stat"
    for c in $(ps -o pid= --ppid "$p"); do
      awk '{print $14+$15}' "/proc/$c/stat" 2>/dev/null || true
    done; } | awk '{s+=$1} END {print s}'
}
# SQL on a store's database (its URL): the argument, or stdin (not MySQL).
q() {
  local store=$1 url=$2; shift 2
  case $store in
    sqlite) sqlite3 -bail "${url#sqlite://}" "$@" ;;
    mysql) scripts/mysql.sh sql "$work/mysql" "USE ${url##*/}; $1" ;;
    *) psql -X -q -At -v ON_ERROR_STOP=1 "$url" ${1:+-c "$1"} ;;
  esac
}

# The INSERT ... SELECT of the history's task rows from h (i, c, id) and the
# template row tpl: every column the store has, the template's values but for the
# id, queue and times.
task_insert() {
  local store=$1 url=$2 cols qc names="" exprs="" col e
  case $store in
    sqlite) qc='"'; cols=$(q sqlite "$url" "SELECT name FROM pragma_table_info('tasks') WHERE name <> 'seq'") ;;
    mysql) qc='`'; cols=$(q mysql "$url" "SELECT column_name FROM information_schema.columns
      WHERE table_schema = DATABASE() AND table_name = 'tasks' AND column_name <> 'seq'
        AND extra NOT LIKE '%GENERATED%' ORDER BY ordinal_position") ;;
    *) qc='"'; cols=$(q postgres "$url" "SELECT column_name FROM information_schema.columns
      WHERE table_schema = 'public' AND table_name = 'tasks' AND is_generated = 'NEVER'
        AND is_identity = 'NO' ORDER BY ordinal_position") ;;
  esac
  for col in $cols; do
    case $col in
      id) e="h.id" ;; queue) e="'bench-history'" ;; run_at|created_at) e="h.c" ;;
      leased_at) e="h.c + 5" ;; updated_at|finished_at) e="h.c + 10" ;;
      *) e="tpl.$qc$col$qc" ;;
    esac
    names+="${names:+, }$qc$col$qc"; exprs+="${exprs:+, }$e"
  done
  echo "INSERT INTO tasks ($names) SELECT $exprs FROM h CROSS JOIN tpl"
}

# Events: ids 3i+1..3i+3 in time order (SQLite, MySQL: one row per event).
kinds="(SELECT 1 AS k, 'submitted' AS kind, 'ready' AS st, 0 AS att, 0 AS dt
  UNION ALL SELECT 2, 'leased', 'leased', 1, 5 UNION ALL SELECT 3, 'succeeded', 'succeeded', 1, 10)"
event_insert="INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, time, detail)
  SELECT 3 * h.i + k.k, h.id, 'bench-history', k.kind, k.st, k.att,
    CASE WHEN k.k > 1 THEN tpl.leased_by END, h.c + k.dt, NULL FROM h CROSS JOIN $kinds k CROSS JOIN tpl"
attempt_insert="INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at,
    finished_at, outcome, error, fencing_token)
  SELECT h.id, 1, tpa.worker_id, tpa.worker_address, h.c + 5, h.c + 10, 'succeeded', NULL, 1
  FROM h CROSS JOIN tpa"
# One day of history that ended a day ago: task i created at c, leased at c + 5,
# finished at c + 10 (ms); its id a UUIDv7 of c.
t0=$(( $(date +%s) * 1000 - 2 * 86400000 )); step=$(( 86400000 / n ))

load_sqlite() {
  local url=$1 ins; ins=$(task_insert sqlite "$url")
  q sqlite "$url" >/dev/null <<SQL
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TEMP TABLE tpl AS SELECT * FROM tasks WHERE state = 'succeeded' ORDER BY finished_at LIMIT 1;
CREATE TEMP TABLE tpa AS SELECT * FROM task_attempts WHERE task_id = (SELECT id FROM tpl);
DELETE FROM task_events; DELETE FROM task_attempts; DELETE FROM tasks;
CREATE TEMP TABLE h AS WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < $n - 1)
  SELECT i, $t0 + i * $step AS c,
    printf('%08x-%04x-7000-8000-%012x', ($t0 + i * $step) >> 16, ($t0 + i * $step) & 65535, i) AS id FROM s;
$ins ORDER BY h.i;
$event_insert ORDER BY 1;
$attempt_insert ORDER BY h.id;
INSERT INTO finished_counts (queue, state, n) VALUES ('bench-history', 'succeeded', $n)
  ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
SQL
  true
}

load_postgres() {
  local url=$1 ins; ins=$(task_insert postgres "$url")
  # Rows of events as the broker writes them: a Submit's 512 in one row, each
  # lease's and each settle's 64 in one row; ids below every id the broker takes
  # (a transaction id << 20).
  q postgres "$url" <<SQL
BEGIN;
CREATE TEMP TABLE tpl AS SELECT * FROM tasks WHERE state = 'succeeded' ORDER BY finished_at LIMIT 1;
DELETE FROM task_event_batches; DELETE FROM task_attempts; DELETE FROM tasks;
CREATE TEMP TABLE h AS SELECT i, $t0 + i * $step AS c,
  lpad(to_hex(($t0 + i * $step) >> 16), 8, '0') || '-' || lpad(to_hex(($t0 + i * $step) & 65535), 4, '0')
    || '-7000-8000-' || lpad(to_hex(i), 12, '0') AS id
  FROM generate_series(0, $n - 1) i;
$ins;
INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds, states, attempts, workers, times, details)
SELECT b * 1536 + 1, b * 1536 + count(*), array_agg(id ORDER BY i), array_agg('bench-history'::text),
  array_agg('submitted'::text), array_agg('ready'::text), array_agg(0::bigint), array_agg(NULL::text),
  array_agg(c ORDER BY i), array_agg(NULL::text)
FROM (SELECT i, c, id, i / 512 AS b FROM h) s GROUP BY b
UNION ALL
SELECT b * 1536 + 512 + 128 * k + o + 1, b * 1536 + 512 + 128 * k + o + count(*), array_agg(id ORDER BY i),
  array_agg('bench-history'::text), array_agg(kind), array_agg(kind), array_agg(1::bigint),
  array_agg(w), array_agg(c + dt ORDER BY i), array_agg(NULL::text)
FROM (SELECT i, c, id, i / 512 AS b, (i % 512) / 64 AS k, (SELECT leased_by FROM tpl) AS w FROM h) s
CROSS JOIN (VALUES (0, 'leased', 5), (64, 'succeeded', 10)) AS e(o, kind, dt)
GROUP BY b, k, o, kind;
INSERT INTO finished_counts (queue, state, n) VALUES ('bench-history', 'succeeded', $n);
COMMIT;
VACUUM (ANALYZE) tasks, task_event_batches, task_attempts, finished_counts;
CHECKPOINT;
SQL
}

load_mysql() {
  local url=$1 ins from to chunk=100000 sql
  ins=$(task_insert mysql "$url")
  local digits="(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
    UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
  sql="CREATE TEMPORARY TABLE tpl AS SELECT * FROM tasks WHERE state = 'succeeded' ORDER BY finished_at LIMIT 1;
CREATE TEMPORARY TABLE tpa AS SELECT a.* FROM task_attempts a JOIN tpl ON a.task_id = tpl.id;
DELETE FROM task_events; DELETE FROM task_attempts; DELETE FROM tasks;
CREATE TEMPORARY TABLE h (i BIGINT PRIMARY KEY, c BIGINT NOT NULL, id VARCHAR(64) NOT NULL);
INSERT INTO h SELECT i, $t0 + i * $step, LOWER(CONCAT(LPAD(HEX(($t0 + i * $step) >> 16), 8, '0'), '-',
    LPAD(HEX(($t0 + i * $step) & 65535), 4, '0'), '-7000-8000-', LPAD(HEX(i), 12, '0')))
  FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d AS i
    FROM $digits a, $digits b, $digits c, $digits e, $digits f, $digits g) s WHERE i < $n;"
  for ((from = 0; from < n; from += chunk)); do
    to=$((from + chunk))
    sql+="
$ins WHERE h.i >= $from AND h.i < $to ORDER BY h.i;
$event_insert WHERE h.i >= $from AND h.i < $to ORDER BY 1;
$attempt_insert WHERE h.i >= $from AND h.i < $to ORDER BY h.id;"
  done
  sql+="
UPDATE event_seq SET n = GREATEST(n, 3 * $n + 3) WHERE id = 1;
INSERT INTO finished_counts (queue, state, n) VALUES ('bench-history', 'succeeded', $n);
ANALYZE TABLE tasks, task_events, task_attempts;"
  q mysql "$url" "$sql" >/dev/null
  # Its dirty pages written out, as a checkpoint would.
  local pct; pct=$(scripts/mysql.sh sql "$work/mysql" "SELECT @@GLOBAL.innodb_max_dirty_pages_pct")
  scripts/mysql.sh sql "$work/mysql" "SET GLOBAL innodb_max_dirty_pages_pct = 0"
  for _ in $(seq 1 300); do
    [ "$(scripts/mysql.sh sql "$work/mysql" "SELECT variable_value FROM information_schema.global_status
      WHERE variable_name = 'INNODB_BUFFER_POOL_PAGES_DIRTY'")" -lt 100 ] && break
    sleep 1
  done
  scripts/mysql.sh sql "$work/mysql" "SET GLOBAL innodb_max_dirty_pages_pct = $pct"
}

# One throughput run: appends "LABEL STORE MODE JSON" to the results.
run_bench() {
  local label=$1 store=$2 mode=$3 url=$4 tasks=30000 dbflag="" line
  [ "$mode" = per-task ] && tasks=10000
  [ "$store" != sqlite ] && dbflag="--db-pid $(dbpid "$store")"
  # shellcheck disable=SC2086 # the flag and its value
  line=$("$bench" $dbflag --spawn-broker "$url" --broker-bin "$bin" --mode "$mode" --workers 64 \
    --tasks "$tasks" --latency-seconds 2 --label "$label" 2>>"$work/log" | tail -n 1) ||
    { log "FAILED $label $store $mode"; tail -3 "$work/log" >&2; return 0; }
  line=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); d['load1']=float(open('/proc/loadavg').read().split()[0]); print(json.dumps(d))" "$line")
  echo "$label $store $mode $line" >> "$res"
  log "$label $store $mode $(echo "$line" | python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['lifecycles_per_sec']), d['broker_cpu_us_per_lifecycle'], d.get('db_cpu_us_per_lifecycle'))")"
}

# Whether any history is left: tasks, attempts, events (each an index probe).
left() {
  local store=$1 url=$2 ev
  case $store in
    postgres) ev="SELECT 1 FROM task_event_batches WHERE last_id <= $((1536 * (n / 512 + 1)))" ;;
    # SQLite keeps the newest event (its id is where the next starts).
    *) ev="SELECT 1 FROM task_events WHERE event_id < $((3 * n))" ;;
  esac
  q "$store" "$url" "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE queue = 'bench-history' LIMIT 1) a)
    + (SELECT COUNT(*) FROM (SELECT 1 FROM task_attempts WHERE finished_at < $((t0 + 86400000 + 1000)) LIMIT 1) b)
    + (SELECT COUNT(*) FROM ($ev LIMIT 1) c)"
}

# Postgres: has autovacuum vacuumed the dead rows of tasks and task_event_batches
# away, with no vacuum running now?
vacuumed() {
  q postgres "$1" "SELECT (SELECT COUNT(*) FROM pg_stat_user_tables
      WHERE relname IN ('tasks', 'task_event_batches') AND n_dead_tup < 10000) = 2
    AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_vacuum)"
}

retention() {
  local store=$1 url=$2 db0 t0r t1 t2 b_ticks dbp db1 hist waited=0
  db0=$(dbcpu "$store")
  t0r=$(date +%s.%N)
  RUST_LOG=info "$retention_bin" serve --database-url "$url" --listen 127.0.0.1:0 --metrics-listen "" \
    --retention 1h --events-retention 1h >>"$work/retention.log" 2>&1 &
  bpid=$!
  # Polled: the passes at start delete every due task and event.
  until [ "$(left "$store" "$url")" = 0 ]; do
    sleep 1; waited=$((waited + 1))
    [ "$waited" -lt "$purge_wait" ] || { log "retention $store: history left after $purge_wait s"; break; }
  done
  t1=$(date +%s.%N)
  b_ticks=$(awk '{print $14+$15}' "/proc/$bpid/stat")
  kill -TERM "$bpid"; wait "$bpid" || true; bpid=""
  sleep 1; dbp=$(dbcpu "$store")
  if [ "$store" = postgres ]; then
    for _ in $(seq 1 "$vacuum_wait"); do [ "$(vacuumed "$url")" = t ] && break; sleep 1; done
  elif [ "$store" = mysql ]; then
    for _ in $(seq 1 "$vacuum_wait"); do
      hist=$(scripts/mysql.sh sql "$work/mysql" "SHOW ENGINE INNODB STATUS" | grep -o 'History list length [0-9]*' | grep -o '[0-9]*$')
      [ "${hist:-0}" -lt 1000 ] && break; sleep 1
    done
  fi
  t2=$(date +%s.%N); sleep 1; db1=$(dbcpu "$store")
  local batched; batched=$(python3 - "$res" "$store" <<'PY'
import json, statistics, sys
v = [json.loads(l.split(" ", 3)[3]) for l in open(sys.argv[1])
     if l.split(" ", 3)[:3] == ["backlog", sys.argv[2], "batched"]]
print(statistics.median(d["broker_cpu_us_per_lifecycle"] + (d.get("db_cpu_us_per_lifecycle") or 0) for d in v) if v else "null")
PY
)
  local line
  line=$(python3 -c "import json,sys; a=sys.argv; print(json.dumps({'tasks':int(a[1]),'purge_s':round(float(a[3])-float(a[2]),1),'settle_s':round(float(a[4])-float(a[3]),1),'broker_cpu_s':int(a[5])/100,'db_cpu_s':(int(a[7])-int(a[6]))/100,'db_cpu_purge_s':(int(a[9])-int(a[6]))/100,'work_cpu_s':None if a[8]=='null' else round(float(a[8])*int(a[1])/1e6,1),'load1':float(open('/proc/loadavg').read().split()[0])}))" \
    "$n" "$t0r" "$t1" "$t2" "$b_ticks" "$db0" "$db1" "$batched" "$dbp")
  echo "retention $store - $line" >> "$res"; log "retention $store $line"
  grep -E "retention pass|WARN|ERROR" "$work/retention.log" | tail -n 6 >&2 || true
  : > "$work/retention.log"
}

for store in $stores; do
  url=$(fresh_db "$store")
  log "$store: first run (migrations, a template of a finished task)"
  "$bench" --spawn-broker "$url" --broker-bin "$bin" --mode batched --workers 4 --tasks 200 \
    --latency-seconds 0 >>"$work/log" 2>&1
  log "$store: loading $n finished tasks"
  "load_$store" "$url"
  log "$store: loaded"
  for rep in $(seq 1 "$reps"); do for mode in $modes; do
    order="empty backlog"; [ $((rep % 2)) = 0 ] && order="backlog empty"
    for side in $order; do
      if [ "$side" = empty ]; then run_bench empty "$store" "$mode" "$(fresh_db "$store")"
      else run_bench backlog "$store" "$mode" "$url"; fi
    done
  done; done
  [ "${RETENTION:-1}" = 1 ] && retention "$store" "$url"
  # The backlog database's disk back.
  case $store in
    sqlite) rm -f "${url#sqlite://}"* ;;
    mysql) scripts/mysql.sh sql "$work/mysql" "DROP DATABASE ${url##*/}" ;;
    *) psql -q "$admin" -c "DROP DATABASE ${url##*/}" ;;
  esac
done

python3 - "$res" <<'PY'
import json, statistics, sys
rows, ret = {}, {}
for line in open(sys.argv[1]):
    side, store, mode, js = line.split(" ", 3)
    if side == "retention":
        ret[store] = json.loads(js); continue
    rows.setdefault((store, mode), {}).setdefault(side, []).append(json.loads(js))
M = lambda v, k: statistics.median([r[k] or 0 for r in v])
print("| store | mode | empty: lifecycles/s, CPU b+db us | 1M finished: lifecycles/s, CPU b+db us | ratio |")
print("|---|---|---:|---:|---:|")
for (s, m), d in sorted(rows.items()):
    e, b = d.get("empty", []), d.get("backlog", [])
    f = lambda v: f"{M(v,'lifecycles_per_sec'):,.0f}, {M(v,'broker_cpu_us_per_lifecycle'):.0f}+{M(v,'db_cpu_us_per_lifecycle'):.0f}" if v else "-"
    r = f"{M(b,'lifecycles_per_sec')/M(e,'lifecycles_per_sec'):.2f}" if e and b else "-"
    print(f"| {s} | {m} | {f(e)} | {f(b)} | {r} |")
for s, r in ret.items():
    print(f"retention {s}: {r['tasks']:,} tasks purged in {r['purge_s']} s (+{r['settle_s']} s vacuum/purge), "
          f"CPU broker {r['broker_cpu_s']} s + db {r['db_cpu_s']} s ({r['db_cpu_purge_s']} s until the broker stopped); "
          f"the work that made them: {r['work_cpu_s']} s")
PY
