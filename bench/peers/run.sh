#!/usr/bin/env bash
# Runs one peer on the shared workload against an empty Postgres database; the
# last line is the JSON result (see node/bench.mjs and river/main.go for the shapes).
#   bench/peers/run.sh graphile-worker|pg-boss|river defaults|best DATABASE_URL [TASKS [WORKERS [LABEL]]] [-- EXTRA...]
# EXTRA goes to the peer's bench as is, the same flags for all three:
#   --shape overlap|phased (default overlap: enqueue while the workers drain)
#   --latency closed,500,1000,3000 --latency-seconds 3 (pick-up latency loops)
#   --producers P --batch B
# Run bench/peers/install.sh first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: run.sh SYSTEM defaults|best DATABASE_URL [TASKS [WORKERS [LABEL]]] [-- EXTRA...]"
system=${1:?$usage}
config=${2:?config: defaults or best}
url=${3:?a Postgres URL}
shift 3
positional=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do positional+=("$1"); shift; done
[ $# -gt 0 ] && shift
tasks=${positional[0]:-20000}
workers=${positional[1]:-32}
label=${positional[2]:-}

case "$system" in
  graphile-worker|pg-boss)
    cd "$here/node"
    exec node bench.mjs --system "$system" --config "$config" --url "$url" \
      --tasks "$tasks" --workers "$workers" ${label:+--label "$label"} "$@" ;;
  river)
    # Go's flag package takes --name as well as -name.
    exec "$here/river/river-bench" -config "$config" -url "$url" \
      -tasks "$tasks" -workers "$workers" ${label:+-label "$label"} "$@" ;;
  *) echo "unknown system $system (graphile-worker, pg-boss, river)" >&2; exit 2 ;;
esac
