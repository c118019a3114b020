#!/usr/bin/env bash
# A soak run: taskbroker-bench --soak at half the peak rate on one store, then
# a plot of the samples.
#   bench/soak.sh sqlite 30m
#   bench/soak.sh postgres 30m
# Writes bench/results/soak-STORE-DATE.csv and .png. Builds the release binaries,
# starts a throwaway Postgres cluster (scripts/pg.sh) for the postgres store, and
# installs matplotlib into bench/.venv (PyPI). The broker keeps finished tasks for
# TASKBROKER_RETENTION (default here 2m, so the table reaches its steady size
# within a short soak; the broker's own default keeps them).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
store=${1:?usage: soak.sh sqlite|postgres DURATION}
duration=${2:-30m}
export TASKBROKER_RETENTION="${TASKBROKER_RETENTION:-2m}"

cargo build --release -q -p taskbroker-server -p taskbroker-bench
work="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-soak.XXXXXX")"
cleanup() {
  if [ "$store" = postgres ]; then scripts/pg.sh stop "$work/cluster"; fi
  rm -rf "$work"
}
trap cleanup EXIT
case "$store" in
  sqlite) url="sqlite://$work/soak.db" ;;
  postgres)
    eval "$(scripts/pg.sh start "$work/cluster")"
    url="$TASKBROKER_TEST_POSTGRES_URL"
    ;;
  *) echo "usage: soak.sh sqlite|postgres DURATION" >&2; exit 2 ;;
esac

stamp="$(date -u +%Y-%m-%d)"
csv="bench/results/soak-$store-$stamp.csv"
target/release/taskbroker-bench --spawn-broker "$url" --broker-bin target/release/taskbroker \
  --soak "$duration" --soak-csv "$csv" --label "soak-$store"

if [ ! -x bench/.venv/bin/python ]; then python3 -m venv bench/.venv; fi
bench/.venv/bin/pip install -q matplotlib
bench/.venv/bin/python bench/soak_plot.py "$csv" "${csv%.csv}.png" \
  "taskbroker soak, $store, $duration at half the peak rate (retention $TASKBROKER_RETENTION)"
echo "wrote $csv and ${csv%.csv}.png"
