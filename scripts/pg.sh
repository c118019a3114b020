#!/usr/bin/env bash
# Starts a throwaway Postgres cluster for tests and prints `export` lines for it.
#   eval "$(scripts/pg.sh start DIR)"   -> TASKBROKER_TEST_POSTGRES_URL
#   eval "$(scripts/pg.sh start-tls DIR)"
#       -> TASKBROKER_TEST_POSTGRES_TLS_URL (sslmode=require), TASKBROKER_TEST_POSTGRES_TLS_CA
#          a cluster with ssl=on and a certificate for localhost signed by a throwaway CA
#          (both made here with openssl), that refuses connections without TLS
#   scripts/pg.sh stop DIR
#   scripts/pg.sh resume DIR            -> starts a stopped cluster again, same port
# Replication (the failover test, server/tests/failover_pg.rs):
#   scripts/pg.sh standby PRIMARY DIR   -> a streaming standby of PRIMARY (pg_basebackup -R),
#                                          on DIR's earlier port when DIR had one
#   scripts/pg.sh sync DIR on|off       -> synchronous_standby_names '*' or '' on DIR
#   scripts/pg.sh kill9 DIR             -> SIGKILL to the postmaster and all its processes
#   scripts/pg.sh promote DIR           -> pg_ctl promote (waits until it takes writes)
#   scripts/pg.sh sql DIR 'SQL'         -> runs SQL on DIR (psql -Atc), prints the rows
# Installs Postgres from Debian packages when it is missing. Postgres refuses to
# run as root, so the cluster runs as the `postgres` user (created if needed).
set -euo pipefail

usage="usage: pg.sh start|start-tls|stop|resume|kill9|promote DIR | standby PRIMARY DIR | sync DIR on|off | sql DIR SQL"
cmd=${1:?$usage}
dir=${2:?$usage}

find_bin() {
  local b
  for b in "$(command -v pg_ctl 2>/dev/null || true)" /usr/lib/postgresql/*/bin/pg_ctl; do
    if [ -n "$b" ] && [ -x "$b" ]; then dirname "$(readlink -f "$b")"; return 0; fi
  done
  return 1
}

if ! bindir=$(find_bin); then
  echo "installing postgresql from Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  bindir=$(find_bin)
fi

if [ "$cmd" = start-tls ] && ! command -v openssl >/dev/null 2>&1; then
  echo "installing openssl from Debian packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >&2
fi

as_pg() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

server_opts() {
  echo "-p $1 -k $2 -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=on"
}

case "$cmd" in
  start | start-tls)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      as_pg true # creates the postgres user when missing
      chown postgres "$dir"
      # The postgres user must be able to reach DIR (mktemp makes its parent 0700).
      p=$(dirname "$(readlink -f "$dir")")
      while [ "$p" != / ]; do chmod o+x "$p"; p=$(dirname "$p"); done
    fi
    chmod 700 "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_pg "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >/dev/null
    opts="-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=on"
    if [ "$cmd" = start-tls ]; then
      # A CA and a server certificate for localhost/127.0.0.1, in the data directory
      # (owned by the cluster's user, key 0600 as Postgres demands).
      tls="$dir/tls"
      mkdir -p "$tls"
      openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=taskbroker test CA" \
        -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
      openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
        -keyout "$dir/data/server.key" -out "$tls/server.csr" 2>/dev/null
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$tls/ext"
      openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
        -CAcreateserial -days 2 -extfile "$tls/ext" -out "$dir/data/server.crt" 2>/dev/null
      chmod 600 "$dir/data/server.key"
      chmod 644 "$tls/ca.crt"
      if [ "$(id -u)" = 0 ]; then chown postgres "$dir/data/server.key" "$dir/data/server.crt"; fi
      # TCP connections must use TLS; the Unix socket (pg_ctl's own checks) stays open.
      printf 'local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n' \
        >"$dir/data/pg_hba.conf"
      if [ "$(id -u)" = 0 ]; then chown postgres "$dir/data/pg_hba.conf"; fi
      opts="$opts -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key"
    fi
    echo "$port" > "$dir/port"
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "$opts" start >/dev/null
    if [ "$cmd" = start-tls ]; then
      echo "export TASKBROKER_TEST_POSTGRES_TLS_URL='postgres://postgres@localhost:$port/postgres?sslmode=require'"
      echo "export TASKBROKER_TEST_POSTGRES_TLS_CA=$tls/ca.crt"
    else
      echo "export TASKBROKER_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$port/postgres"
    fi
    ;;
  resume)
    # Starts a stopped cluster again on the same port (fault tests restart Postgres).
    port=$(cat "$dir/port")
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=on" start >/dev/null
    ;;
  stop)
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
    ;;
  standby)
    # pg.sh standby PRIMARY DIR: DIR's old data (a crashed node) is thrown away.
    primary=$dir
    dir=${3:?$usage}
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
    chmod 700 "$dir"
    if [ -f "$dir/data/postmaster.pid" ]; then
      as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir/data"
    [ -f "$dir/port" ] ||
      python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' >"$dir/port"
    port=$(cat "$dir/port")
    as_pg "$bindir/pg_basebackup" -h 127.0.0.1 -p "$(cat "$primary/port")" -U postgres \
      -D "$dir/data" -R -X stream -c fast >/dev/null
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "$(server_opts "$port" "$dir")" start >/dev/null
    echo "127.0.0.1:$port"
    ;;
  sync)
    names=''
    if [ "${3:?$usage}" = on ]; then names='*'; fi
    as_pg "$bindir/psql" -h "$dir" -p "$(cat "$dir/port")" -U postgres -d postgres -qAt \
      -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" -c "SELECT pg_reload_conf()" >/dev/null
    ;;
  kill9)
    # A crash of the node: the postmaster and every backend die at once.
    pid=$(head -1 "$dir/data/postmaster.pid")
    children=$(pgrep -P "$pid" || true)
    kill -9 "$pid" $children 2>/dev/null || true
    ;;
  promote)
    as_pg "$bindir/pg_ctl" -D "$dir/data" -w promote >/dev/null
    ;;
  sql)
    as_pg "$bindir/psql" -h "$dir" -p "$(cat "$dir/port")" -U postgres -d postgres -qAt \
      -c "${3:?$usage}"
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
