#!/usr/bin/env bash
# MariaDB's CPU per task lifecycle for the task table as the broker has it and as
# the split would make it, with events as one row each or one row per statement,
# on one durable MariaDB (scripts/mysql.sh, MYSQL_DURABLE=1), the SQL of each
# shape fed by one client (gen.py says what it runs). No broker runs: the figure
# is the database's work for the rows a lifecycle writes, without the broker's
# other statements (worker rows, dependency checks, the reaper, long-polls).
#   bench/mysql_split/run.sh BIN     # BIN: a taskbroker binary, to migrate the wide schema
# Env: N (30000 lifecycles per run), REPS (2), SHAPES ("wide:rows narrow:rows narrow:batch wide:batch").
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: run.sh TASKBROKER_BIN}
n=${N:-30000}; reps=${REPS:-2}; shapes=${SHAPES:-"wide:rows narrow:rows narrow:batch wide:batch"}
work=$(mktemp -d /tmp/mysql-split.XXXXXX)
trap 'scripts/mysql.sh stop "$work/my" || true; rm -rf "$work"' EXIT
eval "$(MYSQL_DURABLE=1 scripts/mysql.sh start "$work/my")"
pid=$(cat "$work/my/pid")
client() { mariadb --socket="$work/my/sock" -uroot "$@"; }
cpu() { awk '{print $14+$15}' /proc/"$pid"/stat; }
for s in $shapes; do python3 bench/mysql_split/gen.py "${s%%:*}" "$n" "${s##*:}" > "$work/${s/:/_}.sql"; done
for rep in $(seq 1 "$reps"); do
  for s in $shapes; do
    shape=${s%%:*}; db=s_${shape}_${s##*:}_$rep
    client -e "CREATE DATABASE $db"
    if [ "$shape" = wide ]; then
      "$bin" migrate --database-url "${TASKBROKER_TEST_MYSQL_URL%/*}/$db" >/dev/null 2>&1
    else
      client "$db" < bench/mysql_split/narrow.sql
    fi
    client "$db" < bench/mysql_split/events.sql
    before=$(cpu)
    client "$db" < "$work/${s/:/_}.sql" > /dev/null
    after=$(cpu)
    echo "$shape events=${s##*:} rep=$rep mariadb_cpu_us_per_lifecycle=$(( (after - before) * 10000 / n ))"
  done
done
