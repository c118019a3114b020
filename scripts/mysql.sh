#!/usr/bin/env bash
# Starts a throwaway MariaDB server for tests and prints `export` lines for it.
#   eval "$(scripts/mysql.sh start DIR)"   -> TASKBROKER_TEST_MYSQL_URL
#   scripts/mysql.sh stop DIR
#   scripts/mysql.sh resume DIR            -> starts a stopped server again, same port
#   scripts/mysql.sh kill9 DIR             -> SIGKILL to the server (a crash of the node)
#   scripts/mysql.sh sql DIR 'SQL'         -> runs SQL on DIR as root, prints the rows
# The data directory, socket, pid file and log live under DIR; the server listens on
# 127.0.0.1 on a free port. Installs Debian's mariadb-server when it is missing (the
# packaged service is not started: only the throwaway server runs). mariadbd refuses to
# run as root without --user, so as root it runs as the `mysql` user (created if needed).
# The log is written at each commit and flushed to disk once a second
# (innodb_flush_log_at_trx_commit=2): a killed server (kill9) loses nothing, a
# crash of the machine may lose the last second, which no test makes.
# MYSQL_DURABLE=1 (the benchmarks set it) flushes the log and the binary log to
# disk at every commit instead (innodb_flush_log_at_trx_commit=1, sync_binlog=1),
# as Postgres with fsync on does: a figure compared with Postgres is made so.
# Binary logging is on (row format), as MySQL 8.0 has it by default: what needs SUPER
# under binary logging (a trigger, a stored function) fails for a user without it.
# max_allowed_packet is 16 MiB (MariaDB's default; tests size statements against it).
# MYSQL_EXTRA_ARGS adds server options (e.g. "--innodb-buffer-pool-size=2G"), for
# measuring a server setting; the tests and benchmarks run without it.
set -euo pipefail

usage="usage: mysql.sh start|stop|resume|kill9 DIR | sql DIR SQL"
cmd=${1:?$usage}
dir=${2:?$usage}

find_bin() {
  local b
  for b in "$(command -v mariadbd 2>/dev/null || true)" /usr/sbin/mariadbd /usr/sbin/mysqld; do
    if [ -n "$b" ] && [ -x "$b" ]; then echo "$b"; return 0; fi
  done
  return 1
}

if ! server=$(find_bin) || ! command -v mariadb-install-db >/dev/null 2>&1; then
  echo "installing mariadb-server from Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # policy-rc.d (when present) keeps the packaged service from starting; without it
  # the service may start on the default port, which this script does not use.
  apt-get install -y -qq mariadb-server >&2
  server=$(find_bin)
fi
client=$(command -v mariadb || command -v mysql)

as_db() {
  if [ "$(id -u)" = 0 ]; then
    id mysql >/dev/null 2>&1 || useradd --system --no-create-home mysql
    runuser -u mysql -- "$@"
  else
    "$@"
  fi
}

start_server() {
  local port
  port=$(cat "$dir/port")
  local flush=2 sync_binlog=0
  if [ "${MYSQL_DURABLE:-0}" = 1 ]; then flush=1 sync_binlog=1; fi
  # Detached from this shell, so `eval "$(mysql.sh start DIR)"` returns.
  as_db setsid "$server" --no-defaults --datadir="$dir/data" --socket="$dir/sock" \
    --pid-file="$dir/pid" --port="$port" --bind-address=127.0.0.1 \
    --log-error="$dir/log.err" --max-connections=400 --skip-name-resolve \
    --innodb-buffer-pool-size=128M --innodb-log-file-size=64M \
    --innodb-flush-log-at-trx-commit="$flush" --sync-binlog="$sync_binlog" \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
    --transaction-isolation=READ-COMMITTED \
    --log-bin="$dir/binlog" --server-id=1 --binlog-format=ROW \
    --max-allowed-packet=16M ${MYSQL_EXTRA_ARGS:-} \
    </dev/null >/dev/null 2>&1 &
  for _ in $(seq 1 300); do
    if "$client" --no-defaults -u"$(id -un)" --socket="$dir/sock" -e 'SELECT 1' >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  echo "mariadbd did not start; its log:" >&2
  tail -20 "$dir/log.err" >&2 || true
  return 1
}

sql() {
  "$client" --no-defaults -u"$(id -un)" --socket="$dir/sock" -N -B -e "$1"
}

case "$cmd" in
  start)
    if [ -e "$dir/data" ]; then
      echo "mysql.sh: $dir/data exists; stop it and remove $dir first" >&2
      exit 1
    fi
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      as_db true # creates the mysql user when missing
      chown mysql "$dir"
      # The mysql user must be able to reach DIR (mktemp makes its parent 0700).
      p=$(dirname "$(readlink -f "$dir")")
      while [ "$p" != / ]; do chmod o+x "$p"; p=$(dirname "$p"); done
    fi
    chmod 700 "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    echo "$port" > "$dir/port"
    as_db mariadb-install-db --no-defaults --datadir="$dir/data" --auth-root-authentication-method=socket \
      --skip-test-db >/dev/null 2>&1 ||
      as_db mariadb-install-db --no-defaults --datadir="$dir/data" >/dev/null
    start_server
    # As root the server runs as `mysql`, and socket authentication maps the OS user to
    # the MariaDB user: root's client logs in as root only when the OS user is root too.
    sql "CREATE DATABASE tb; CREATE USER 'tb'@'127.0.0.1' IDENTIFIED BY 'tb';
         CREATE USER 'tb'@'localhost' IDENTIFIED BY 'tb';
         GRANT ALL ON *.* TO 'tb'@'127.0.0.1'; GRANT ALL ON *.* TO 'tb'@'localhost';
         FLUSH PRIVILEGES;"
    echo "export TASKBROKER_TEST_MYSQL_URL=mysql://tb:tb@127.0.0.1:$port/tb"
    ;;
  resume)
    start_server
    ;;
  stop)
    if [ -f "$dir/pid" ]; then
      pid=$(cat "$dir/pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    ;;
  kill9)
    if [ -f "$dir/pid" ]; then kill -9 "$(cat "$dir/pid")" 2>/dev/null || true; fi
    ;;
  sql)
    sql "${3:?$usage}"
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
