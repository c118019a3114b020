#!/usr/bin/env bash
# How long a Prometheus scrape of /metrics takes with N tasks stored (default
# 1,000,000), on SQLite or Postgres; prints a Markdown row:
#   scripts/metrics-bench.sh [N]                  # SQLite
#   STORE=postgres scripts/metrics-bench.sh [N]   # a throwaway Postgres cluster
# The database is filled by scripts/console-seed.py (its mix: 90% succeeded, 5% dead,
# 3% ready, 1% scheduled, 0.5% leased, 0.5% cancelled, ten queues). The first scrape
# counts the task table (there is no count yet); later ones answer from the last
# count and start a new one in the background when it is older than the broker's
# depth max age (10 s). 40 scrapes, 0.5 s apart, so about every 20th starts a count.
# TB_BIN=path skips the release build; TB_DB=path.db or a postgres:// URL reuses a
# seeded database. Figures: docs/performance.md ("/metrics with a million tasks").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
n="${1:-1000000}"
reps="${REPS:-40}"
store="${STORE:-sqlite}"
if [ -z "${TB_BIN:-}" ]; then
  cargo build -q --release -p taskbroker-server --bin taskbroker
fi
bin="${TB_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/taskbroker}"
dir="$(mktemp -d "${TMPDIR:-/tmp}/tb-metrics-bench.XXXXXX")"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  [ -d "$dir/pg" ] && scripts/pg.sh stop "$dir/pg" >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
if [ "$store" = postgres ]; then
  if [ -n "${TB_DB:-}" ]; then
    db="$TB_DB"
  else
    eval "$(scripts/pg.sh start "$dir/pg")"
    psql -q "$TASKBROKER_TEST_POSTGRES_URL" -c "CREATE DATABASE metrics_bench"
    db="${TASKBROKER_TEST_POSTGRES_URL%/*}/metrics_bench"
  fi
else
  db="sqlite://${TB_DB:-$dir/tb.db}"
fi
"$bin" migrate --database-url "$db" >/dev/null
[ -n "${TB_DB:-}" ] || python3 scripts/console-seed.py "${db#sqlite://}" "$n"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http="127.0.0.1:$(free_port)"
"$bin" serve --database-url "$db" --listen "127.0.0.1:$(free_port)" --metrics-listen "$http" \
  --retention 0 2>"$dir/broker.log" &
pid=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://$http/healthz" && break; sleep 0.1; done
first="$(curl -s -o /dev/null -w '%{time_total}' "http://$http/metrics")"
for _ in $(seq "$reps"); do
  sleep 0.5
  curl -s -o /dev/null -w '%{time_total}\n' "http://$http/metrics"
done | sort -n | awk -v store="$store" -v n="$n" -v first="$first" '
  { t[NR] = $1 * 1000 }
  END { printf "| %s | %d | %.1f | %.1f | %.1f | %.1f |\n", store, n, first * 1000, t[int((NR + 1) / 2)], t[int(NR * 0.95 + 0.5)], t[NR] }'
