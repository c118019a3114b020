#!/usr/bin/env bash
# Starts a throwaway Postgres cluster for tests and prints `export` lines for it.
#   eval "$(scripts/pg.sh start DIR)"   -> TASKBROKER_TEST_POSTGRES_URL
#   scripts/pg.sh stop DIR
#   scripts/pg.sh resume DIR            -> starts a stopped cluster again, same port
# Installs Postgres from Debian packages when it is missing. Postgres refuses to
# run as root, so the cluster runs as the `postgres` user (created if needed).
set -euo pipefail

cmd=${1:?usage: pg.sh start|stop|resume DIR}
dir=${2:?usage: pg.sh start|stop|resume DIR}

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

as_pg() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case "$cmd" in
  start)
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
    echo "$port" > "$dir/port"
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=on" start >/dev/null
    echo "export TASKBROKER_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$port/postgres"
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
  *) echo "usage: pg.sh start|stop|resume DIR" >&2; exit 2 ;;
esac
