#!/usr/bin/env bash
# A throwaway pg_auto_failover formation on loopback for the failover test
# (server/tests/failover_pg.rs): a monitor and two Postgres nodes, each run by its
# pg_autoctl keeper as the `postgres` user, with synchronous replication (the
# formation's default with two nodes) and the monitor's health checks shortened so a
# dead primary is replaced in seconds.
#   scripts/pgaf.sh up DIR       -> prints the two nodes' ports, node 1 first
#   scripts/pgaf.sh primary DIR  -> 1 or 2: the node the monitor holds as primary
#                                   (nothing while none is)
#   scripts/pgaf.sh kill DIR N   -> SIGKILL to node N's keeper and every Postgres process
#   scripts/pgaf.sh rejoin DIR N -> starts node N's keeper again; returns once it is the
#                                   secondary and the other node the primary
#   scripts/pgaf.sh down DIR
# Needs pg_autoctl (Debian: postgresql-NN-auto-failover); installs it when missing.
set -euo pipefail

usage="usage: pgaf.sh up|primary|down DIR | kill|rejoin DIR N"
cmd=${1:?$usage}
dir=${2:?$usage}

bindir=$(dirname "$(readlink -f "$(ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -1)")")
major=$(basename "$(dirname "$bindir")")
if ! command -v pg_autoctl >/dev/null 2>&1; then
  echo "installing postgresql-$major-auto-failover from Debian packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$major-auto-failover" >&2
fi

paf() {
  local env=(env -i "HOME=$dir" "PATH=$bindir:/usr/bin:/bin" "XDG_CONFIG_HOME=$dir/cfg"
    "XDG_DATA_HOME=$dir/data" "XDG_RUNTIME_DIR=$dir/run")
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "${env[@]}" pg_autoctl "$@"
  else
    "${env[@]}" pg_autoctl "$@"
  fi
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# A process and all its descendants.
tree() {
  local p=$1 c
  echo "$p"
  for c in $(pgrep -P "$p" || true); do tree "$c"; done
}
# The monitor's view: "node state state" lines.
states() {
  paf show state --pgdata "$dir/monitor" 2>/dev/null |
    awk -F'|' '/^ *node_/ {gsub(/ /, ""); print $1, $6, $7}'
}
start_node() {
  local n=$1
  (paf run --pgdata "$dir/node$n" >>"$dir/node$n.log" 2>&1 & echo $! >"$dir/node$n.pid")
}
# Waits until the monitor holds one node primary and the other secondary, both
# reported and assigned.
settled() {
  local deadline=$((SECONDS + 120)) s
  while [ $SECONDS -lt $deadline ]; do
    s=$(states)
    if [ "$(echo "$s" | grep -c ' primary primary$')" = 1 ] &&
      [ "$(echo "$s" | grep -c ' secondary secondary$')" = 1 ]; then
      return 0
    fi
    sleep 0.2
  done
  echo "pg_auto_failover did not settle: $s" >&2
  return 1
}

case "$cmd" in
  up)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
      chown postgres "$dir"
      p=$(dirname "$(readlink -f "$dir")")
      while [ "$p" != / ]; do chmod o+x "$p"; p=$(dirname "$p"); done
    fi
    mport=$(free_port)
    common=(--hostname 127.0.0.1 --listen 127.0.0.1 --auth trust --no-ssl)
    paf create monitor --pgdata "$dir/monitor" --pgport "$mport" "${common[@]}" >"$dir/monitor.log" 2>&1
    (paf run --pgdata "$dir/monitor" >>"$dir/monitor.log" 2>&1 & echo $! >"$dir/monitor.pid")
    monitor="postgres://autoctl_node@127.0.0.1:$mport/pg_auto_failover?sslmode=disable"
    for _ in $(seq 1 100); do
      "$bindir/pg_isready" -q -h 127.0.0.1 -p "$mport" && break
      sleep 0.1
    done
    # Seconds, not the defaults' tens of seconds, to call a node dead and promote.
    as_pg=(); [ "$(id -u)" = 0 ] && as_pg=(runuser -u postgres --)
    "${as_pg[@]}" "$bindir/psql" -h 127.0.0.1 -p "$mport" -U postgres -d pg_auto_failover -qAt \
      -c "ALTER SYSTEM SET pgautofailover.health_check_period = 1000" \
      -c "ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000" \
      -c "ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1" \
      -c "ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500" \
      -c "ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 2000" \
      -c "ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 2000" \
      -c "SELECT pg_reload_conf()" >/dev/null
    for n in 1 2; do
      port=$(free_port)
      echo "$port" >"$dir/node$n.port"
      paf create postgres --pgdata "$dir/node$n" --pgport "$port" --name "node_$n" \
        "${common[@]}" --monitor "$monitor" >"$dir/node$n.log" 2>&1
      start_node "$n"
      # The second node is created once the first is the primary.
      if [ "$n" = 1 ]; then
        for _ in $(seq 1 600); do
          states | grep -q '^node_1 single single$' && break
          sleep 0.2
        done
      fi
    done
    settled
    echo "$(cat "$dir/node1.port") $(cat "$dir/node2.port")"
    ;;
  primary)
    states | awk '$2 == "primary" && $3 == "primary" { sub("node_", "", $1); print $1 }
                  $2 == "wait_primary" && $3 ~ /primary/ { sub("node_", "", $1); print $1 }' | head -1
    ;;
  kill)
    n=${3:?$usage}
    pids=$(tree "$(cat "$dir/node$n.pid")")
    # Postgres may have been started by a keeper process that is gone: its postmaster too.
    if [ -f "$dir/node$n/postmaster.pid" ]; then
      pm=$(head -1 "$dir/node$n/postmaster.pid")
      pids="$pids $(tree "$pm")"
    fi
    kill -9 $pids 2>/dev/null || true
    ;;
  rejoin)
    n=${3:?$usage}
    start_node "$n"
    settled
    ;;
  down)
    for f in "$dir"/node1.pid "$dir"/node2.pid "$dir"/monitor.pid; do
      [ -f "$f" ] && kill -9 $(tree "$(cat "$f")") 2>/dev/null || true
    done
    for d in "$dir/node1" "$dir/node2" "$dir/monitor"; do
      if [ -f "$d/postmaster.pid" ]; then
        kill -9 $(tree "$(head -1 "$d/postmaster.pid")") 2>/dev/null || true
      fi
    done
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
