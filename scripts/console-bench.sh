#!/usr/bin/env bash
# Measures how long every console page takes to answer with N tasks stored
# (default 1,000,000), on SQLite or Postgres, and prints a Markdown table (median,
# p95 and max of 20 requests per page, after 2 warm-up requests):
#   scripts/console-bench.sh [N]                  # SQLite
#   STORE=postgres scripts/console-bench.sh [N]   # a throwaway Postgres cluster (scripts/pg.sh)
# The database is filled by scripts/console-seed.py (rows written directly; the
# mix is described there), plus 50 schedules (one triggered 30 times) made
# through the broker; the broker is a release build serving it with retention
# off. Then the overview is asked for after 35 s without viewers, 3 times. Needs
# python3, curl (and psql for Postgres). Figures: docs/performance.md.
# TB_BIN=path skips the release build (e.g. a debug build); TB_DB=path.db (or a
# postgres:// URL) uses an already seeded database instead of seeding a new one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
n="${1:-1000000}"
reps=20
store="${STORE:-sqlite}"

if [ -z "${TB_BIN:-}" ]; then
  cargo build -q --release -p taskbroker-server --bin taskbroker
fi
bin="${TB_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/taskbroker}"
dir="$(mktemp -d "${TMPDIR:-/tmp}/tb-console-bench.XXXXXX")"
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
    psql -q "$TASKBROKER_TEST_POSTGRES_URL" -c "CREATE DATABASE console_bench"
    db="${TASKBROKER_TEST_POSTGRES_URL%/*}/console_bench"
  fi
  sql() { psql -qAt -F ' ' "$db" -c "$1"; }
else
  file="${TB_DB:-$dir/tb.db}"
  db="sqlite://$file"
  sql() { python3 -c 'import sqlite3, sys; [print(*r) for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2])]' "$file" "$1"; }
fi
"$bin" migrate --database-url "$db" >/dev/null
if [ -z "${TB_DB:-}" ]; then
  python3 scripts/console-seed.py "${db#sqlite://}" "$n"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_port="$(free_port)"
grpc="127.0.0.1:$(free_port)"
"$bin" serve --database-url "$db" --listen "$grpc" \
  --metrics-listen "127.0.0.1:$http_port" --retention 0 2>"$dir/broker.log" &
pid=$!
base="http://127.0.0.1:$http_port"
for _ in $(seq 100); do curl -sf -o /dev/null "$base/metrics" && break; sleep 0.1; done
first_view="$(curl -s -o /dev/null -w '%{time_total}' "$base/")"

if [ "$(sql "SELECT COUNT(*) FROM schedules")" = 0 ]; then
  for i in $(seq -w 0 49); do
    "$bin" schedule create "nightly-$i" --cron "0 3 * * *" --tz Europe/Berlin --queue reports \
      --json '{"report":"nightly"}' --addr "http://$grpc" >/dev/null
  done
  for _ in $(seq 30); do "$bin" schedule trigger nightly-00 --addr "http://$grpc" >/dev/null; done
fi

enc() { python3 -c 'import sys; from urllib.parse import quote; print(quote(sys.argv[1], safe=""))' "$1"; }
read -r task_id < <(sql "SELECT id FROM tasks WHERE queue = 'q03' AND state = 'dead' ORDER BY seq DESC LIMIT 1")
# A READY task deep in its queue: its page asks Explain why it waits.
read -r ready_id < <(sql "SELECT id FROM tasks WHERE queue = 'q03' AND state = 'pending' AND run_at < $(date +%s)000 ORDER BY seq DESC LIMIT 1")
error="$(enc "$(sql "SELECT last_error FROM tasks WHERE id = '$task_id'")")"
newest="$(sql "SELECT MAX(created_at) FROM tasks")"
day=86400000
iso() { python3 -c 'import sys, datetime; print(datetime.datetime.fromtimestamp(int(sys.argv[1]) / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M"))' "$1"; }
dense_from="$(iso $((newest - 6 * day)))"
dense_to="$(iso $((newest - 5 * day)))"
deep="$(printf 'v1:%d' $((n / 2)) | base64 | tr '+/' '-_' | tr -d '=\n')"
pages=(
  "/"
  "/overview/live"
  "/tasks"
  "/tasks?queue=q03"
  "/tasks?state=dead"
  "/tasks?queue=q03&state=ready"
  "/tasks?state=scheduled"
  "/tasks?page=$deep"
  "/tasks?queue=q03&state=dead&error=$error"
  "/tasks?worker=worker-3&state=leased"
  "/tasks?queue=q03&key=none"
  "/tasks?from=2000-01-01T00:00&to=2000-01-02T00:00"
  "/tasks?from=$dense_from&to=$dense_to"
  "/tasks?schedule=nightly-00"
  "/tasks/$task_id"
  "/tasks/$ready_id"
  "/dead"
  "/dead/requeue?queue=q03&error=$error"
  "/dead/cancel?queue=q03&error=$error"
  "/workers"
  "/workers/worker-3"
  "/queues"
  "/queues/q03"
  "/schedules"
  "/schedules/nightly-00"
)
echo
echo "$n tasks, $store, $(basename "$(dirname "$bin")") build; $reps requests per page (ms):"
echo
echo "| page | median | p95 | max |"
echo "|---|---:|---:|---:|"
for p in "${pages[@]}"; do
  for _ in 1 2; do curl -s -o /dev/null "$base$p"; done
  times=()
  for _ in $(seq "$reps"); do
    code_time="$(curl -s -o /dev/null -w '%{http_code} %{time_total}' "$base$p")"
    code="${code_time%% *}"
    if [ "$code" != 200 ]; then echo "$p answered $code" >&2; exit 1; fi
    times+=("${code_time#* }")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v page="$p" '
    { t[NR] = $1 * 1000 }
    END { printf "| `%s` | %.1f | %.1f | %.1f |\n", page, t[int((NR + 1) / 2)], t[int(NR * 0.95 + 0.5)], t[NR] }'
done
after_idle=()
for _ in 1 2 3; do
  sleep 35
  after_idle+=("$(curl -s -o /dev/null -w '%{time_total}' "$base/" | awk '{ printf "%.1f", $1 * 1000 }')")
done
echo
echo "The overview: first view after start $(awk -v t="$first_view" 'BEGIN { printf "%.1f", t * 1000 }') ms;" \
  "after 35 s without viewers: ${after_idle[*]} ms."
