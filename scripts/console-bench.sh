#!/usr/bin/env bash
# Measures how long every console page takes to answer with N tasks stored
# (default 1,000,000) on SQLite, and prints a Markdown table (median, p95 and
# max of 20 requests per page, after 2 warm-up requests):
#   scripts/console-bench.sh [N]
# The database is filled by scripts/console-seed.py (rows written directly; the
# mix is described there); the broker is a release build serving it with
# retention off. Needs python3 and curl. Figures: docs/performance.md.
# TB_BIN=path skips the release build (e.g. a debug build); TB_DB=path.db uses an
# already seeded database instead of seeding a new one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
n="${1:-1000000}"
reps=20

if [ -z "${TB_BIN:-}" ]; then
  cargo build -q --release -p taskbroker-server --bin taskbroker
fi
bin="${TB_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/taskbroker}"
dir="$(mktemp -d "${TMPDIR:-/tmp}/tb-console-bench.XXXXXX")"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
file="${TB_DB:-$dir/tb.db}"
db="sqlite://$file"
if [ -z "${TB_DB:-}" ]; then
  "$bin" migrate --database-url "$db" >/dev/null
  python3 scripts/console-seed.py "$file" "$n"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_port="$(free_port)"
"$bin" serve --database-url "$db" --listen "127.0.0.1:$(free_port)" \
  --metrics-listen "127.0.0.1:$http_port" --retention 0 2>"$dir/broker.log" &
pid=$!
base="http://127.0.0.1:$http_port"
for _ in $(seq 100); do curl -sf -o /dev/null "$base/metrics" && break; sleep 0.1; done

read -r task_id error < <(python3 - "$file" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
from urllib.parse import quote
tid, err = db.execute(
    "SELECT id, last_error FROM tasks WHERE queue = 'q03' AND state = 'dead' ORDER BY seq DESC LIMIT 1"
).fetchone()
print(tid, quote(err, safe=""))
PY
)
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
  "/tasks/$task_id"
  "/dead"
  "/dead/requeue?queue=q03&error=$error"
  "/workers"
  "/queues"
)
echo
echo "$n tasks, SQLite, $(basename "$(dirname "$bin")") build; $reps requests per page (ms):"
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
