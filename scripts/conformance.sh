#!/usr/bin/env bash
# Usage: scripts/conformance.sh LANG   (LANG = rust, python, go, typescript, java)
#
# Builds the broker, starts it on a free port with a fresh SQLite database, runs the
# language's conformance scenario (clients/conformance/SCENARIO.md) against it through
# TASKBROKER_ADDR, stops the broker and exits with the scenario's status. The broker's
# log (stderr) is printed when the scenario fails.
set -euo pipefail

lang="${1:-}"
case "$lang" in
  rust | python | go | typescript | java) ;;
  *)
    echo "usage: $0 rust|python|go|typescript|java" >&2
    exit 2
    ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

echo "== building the broker" >&2
cargo build -q -p taskbroker-server --bin taskbroker

tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-conformance.XXXXXX")"
broker_pid=""
cleanup() {
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill "$broker_pid" 2>/dev/null || true
    wait "$broker_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

target/debug/taskbroker serve \
  --listen 127.0.0.1:0 \
  --database-url "sqlite://$tmp/tb.db" \
  --reclaim-interval 200ms \
  --metrics-listen 127.0.0.1:0 \
  >"$tmp/stdout" 2>"$tmp/stderr" &
broker_pid=$!

# Wait for "taskbroker listening on 127.0.0.1:PORT" on stdout.
addr=""
for _ in $(seq 1 600); do # 600 x 0.1 s = 60 s
  addr="$(sed -n 's/^taskbroker listening on \([^ ]*\).*$/\1/p' "$tmp/stdout" | head -n 1)"
  [ -n "$addr" ] && break
  if ! kill -0 "$broker_pid" 2>/dev/null; then
    wait "$broker_pid" && status=0 || status=$?
    echo "the broker exited (status $status) before it was listening; its log:" >&2
    cat "$tmp/stdout" "$tmp/stderr" >&2
    broker_pid=""
    exit 1
  fi
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "the broker did not print 'taskbroker listening on ...' within 60 s; its log:" >&2
  cat "$tmp/stdout" "$tmp/stderr" >&2
  exit 1
fi
export TASKBROKER_ADDR="$addr"
echo "== broker listening on $TASKBROKER_ADDR (pid $broker_pid); running the $lang scenario" >&2

# The scenario's output is kept so its summary line can be repeated after the broker log.
status=0
if [ "$lang" = rust ]; then
  cargo run -q -p taskbroker-client --example conformance | tee "$tmp/scenario.out" || status=${PIPESTATUS[0]}
else
  "clients/$lang/conformance.sh" | tee "$tmp/scenario.out" || status=${PIPESTATUS[0]}
fi

if [ "$status" -ne 0 ]; then
  echo "== the $lang scenario failed (status $status); broker log (last 400 lines of stderr):" >&2
  tail -n 400 "$tmp/stderr" >&2
  # Keep "N passed, M failed" the last line, as SCENARIO.md asks.
  grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/scenario.out" | tail -n 1 || true
fi
exit "$status"
