#!/usr/bin/env bash
# Runs one peer on the shared workload (enqueue N no-op jobs, then drain them with
# W workers) against an empty Postgres database; the last line is the JSON result.
#   bench/peers/run.sh graphile-worker|pg-boss|river defaults|best DATABASE_URL [TASKS [WORKERS [LABEL]]]
# Run bench/peers/install.sh first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
system=${1:?usage: run.sh SYSTEM defaults|best DATABASE_URL [TASKS [WORKERS [LABEL]]]}
config=${2:?config: defaults or best}
url=${3:?a Postgres URL}
tasks=${4:-20000}
workers=${5:-32}
label=${6:-}

case "$system" in
  graphile-worker|pg-boss)
    cd "$here/node"
    exec node bench.mjs --system "$system" --config "$config" --url "$url" \
      --tasks "$tasks" --workers "$workers" ${label:+--label "$label"} ;;
  river)
    exec "$here/river/river-bench" -config "$config" -url "$url" \
      -tasks "$tasks" -workers "$workers" ${label:+-label "$label"} ;;
  *) echo "unknown system $system (graphile-worker, pg-boss, river)" >&2; exit 2 ;;
esac
