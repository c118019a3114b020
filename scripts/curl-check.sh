#!/usr/bin/env bash
# Usage: scripts/curl-check.sh
#
# Runs the curl commands of README.md ("HTTP and JSON: curl, scripts, browsers") against a
# fresh broker (target/debug/taskbroker, SQLite in a temporary directory) and asserts on each
# reply: Submit, Lease, Complete and GetTask with JSON alone, first without tokens, then with
# a producer, a worker and an admin token (and a call without one: HTTP 401
# unauthenticated). Prints "curl-check: N passed, 0 failed" and exits 0, or names the first
# failed check, prints the broker's log and exits 1.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# curl sends the calls and jq reads the replies: installed from Debian's packages when missing.
if ! command -v curl >/dev/null || ! command -v jq >/dev/null; then
  echo "installing curl and jq (Debian packages)" >&2
  if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" update -q >&2
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -q curl jq >&2
fi

echo "== building the broker" >&2
cargo build -q -p taskbroker-server --bin taskbroker

tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-curl.XXXXXX")"
broker_pid=""
stop_broker() {
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill "$broker_pid" 2>/dev/null || true
    wait "$broker_pid" 2>/dev/null || true
  fi
  broker_pid=""
}
trap 'stop_broker; rm -rf "$tmp"' EXIT

# start_broker [FLAGS...]: a broker on a free port with a fresh database; sets TB.
start_broker() {
  : >"$tmp/stdout"
  : >"$tmp/stderr"
  rm -f "$tmp/tb.db"
  target/debug/taskbroker serve --listen 127.0.0.1:0 --database-url "sqlite://$tmp/tb.db" \
    "$@" >>"$tmp/stdout" 2>>"$tmp/stderr" &
  broker_pid=$!
  local addr=""
  for _ in $(seq 1 600); do # 600 x 0.1 s = 60 s
    addr="$(sed -n 's/^taskbroker listening on \([^ ]*\).*$/\1/p' "$tmp/stdout" | head -n 1)"
    [ -n "$addr" ] && break
    kill -0 "$broker_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    echo "curl-check: the broker did not start; its log:" >&2
    cat "$tmp/stdout" "$tmp/stderr" >&2
    exit 1
  fi
  TB="http://$addr"
}

passed=0
# check NAME JQ-EXPR: the last reply ($out) makes the jq expression true.
check() {
  if jq -e "$2" >/dev/null 2>&1 <<<"$out"; then
    passed=$((passed + 1))
  else
    echo "curl-check: FAILED: $1; the reply was: $out" >&2
    cat "$tmp/stderr" >&2
    echo "curl-check: $passed passed, 1 failed"
    exit 1
  fi
}

# --- without tokens: the README's first block, command for command.
start_broker
out="$(curl -sS -X POST "$TB/taskbroker.v1.BrokerService/Submit" -H 'content-type: application/json' \
  -d '{"tasks": [{"queue": "emails", "payload": "aGVsbG8="}]}')"
check "Submit answers a task id" '.results[0].taskId | length > 0'
ID="$(jq -r '.results[0].taskId' <<<"$out")"

out="$(curl -sS -X POST "$TB/taskbroker.v1.BrokerService/Lease" -H 'content-type: application/json' \
  -d '{"workerId": "sh-1", "queues": ["emails"], "maxTasks": 1}')"
check "Lease answers the task with its payload" ".tasks[0].taskId == \"$ID\" and .tasks[0].payload == \"aGVsbG8=\""
LEASE="$(jq -r '.tasks[0].leaseToken' <<<"$out")"

out="$(curl -sS -X POST "$TB/taskbroker.v1.BrokerService/Complete" -H 'content-type: application/json' \
  -d "{\"taskId\": \"$ID\", \"leaseToken\": \"$LEASE\", \"result\": \"ZG9uZQ==\"}")"
check "Complete answers a message" 'type == "object" and (has("code") | not)'

out="$(curl -sS -X POST "$TB/taskbroker.v1.AdminService/GetTask" -H 'content-type: application/json' \
  -d "{\"taskId\": \"$ID\"}")"
check "GetTask reads it succeeded with its result" '.task.state == "TASK_STATE_SUCCEEDED" and .task.result == "ZG9uZQ=="'
stop_broker

# --- with tokens: the README's second block.
PRODUCER="curl-producer-$RANDOM$RANDOM$RANDOM"
WORKER="curl-worker-$RANDOM$RANDOM$RANDOM"
ADMIN="curl-admin-$RANDOM$RANDOM$RANDOM"
printf 'producer %s shop\nworker %s fleet\nadmin %s ops\n' "$PRODUCER" "$WORKER" "$ADMIN" >"$tmp/tokens"
start_broker --auth-tokens-file "$tmp/tokens"

out="$(curl -sS -X POST "$TB/taskbroker.v1.BrokerService/Submit" -H 'content-type: application/json' \
  -H "authorization: Bearer $PRODUCER" \
  -d '{"tasks": [{"queue": "emails", "payload": "aGVsbG8="}]}')"
check "Submit with the producer token" '.results[0].taskId | length > 0'
ID="$(jq -r '.results[0].taskId' <<<"$out")"
out="$(curl -sS -X POST "$TB/taskbroker.v1.BrokerService/Lease" -H 'content-type: application/json' \
  -H "authorization: Bearer $WORKER" \
  -d '{"workerId": "sh-1", "queues": ["emails"], "maxTasks": 1}')"
check "Lease with the worker token" ".tasks[0].taskId == \"$ID\""
LEASE="$(jq -r '.tasks[0].leaseToken' <<<"$out")"
out="$(curl -sS -X POST "$TB/taskbroker.v1.BrokerService/Complete" -H 'content-type: application/json' \
  -H "authorization: Bearer $WORKER" \
  -d "{\"taskId\": \"$ID\", \"leaseToken\": \"$LEASE\", \"result\": \"ZG9uZQ==\"}")"
check "Complete with the worker token" 'type == "object" and (has("code") | not)'
out="$(curl -sS -X POST "$TB/taskbroker.v1.AdminService/GetTask" -H 'content-type: application/json' \
  -H "authorization: Bearer $ADMIN" \
  -d "{\"taskId\": \"$ID\"}")"
check "GetTask with the admin token" '.task.state == "TASK_STATE_SUCCEEDED"'
out="$(curl -sS -w '\n%{http_code}' -X POST "$TB/taskbroker.v1.AdminService/GetTask" -H 'content-type: application/json' \
  -d "{\"taskId\": \"$ID\"}")"
status="${out##*$'\n'}"
out="${out%$'\n'*}"
check "no token: unauthenticated" '.code == "unauthenticated" and .message == "missing bearer token"'
if [ "$status" != 401 ]; then
  echo "curl-check: FAILED: no token: HTTP $status, not 401" >&2
  echo "curl-check: $passed passed, 1 failed"
  exit 1
fi
passed=$((passed + 1))
stop_broker

echo "curl-check: $passed passed, 0 failed"
