#!/usr/bin/env bash
# Usage: scripts/conformance.sh LANG [--secure | --faults]   (LANG = rust, python, go, typescript, java)
#
# Builds the broker, starts it on a free port with a fresh SQLite database, runs the
# language's conformance scenario (clients/conformance/SCENARIO.md) against it through
# TASKBROKER_ADDR, stops the broker and exits with the scenario's status. The broker's
# log (stderr) is printed when the scenario fails.
#
# --secure: the broker serves TLS, requires a client certificate (mTLS, `tls.client_ca`) and
# a bearer token (`auth.tokens_file`). The certificates are made here with openssl; the
# scenario gets TASKBROKER_CA, TASKBROKER_CLIENT_CERT, TASKBROKER_CLIENT_KEY and
# TASKBROKER_TOKEN (docs/client-spec.md, point 8), and TASKBROKER_WORKER_TOKEN, a worker
# token bound to the worker ids conf-LANG-bound and conf-LANG-bound-*.
#
# --faults: runs the language's fault scenario (clients/conformance/FAULTS.md) instead, with a
# control channel through which it asks this script to kill -9, restart, pause (SIGSTOP) and
# resume (SIGCONT) the broker: TASKBROKER_FAULT_CTL (a FIFO the scenario writes one command
# line to) and TASKBROKER_FAULT_ACK (a FIFO it then reads the one-line answer from). The
# restarted broker listens on the same address with the same database. The scenario also gets
# TASKBROKER_HTTP_ADDR, the broker's HTTP (metrics) port, which is not a gRPC port.
# A language without a fault scenario yet exits 3 with a line saying so.
#
# TASKBROKER_CONFORMANCE_DATABASE_URL runs the broker on that database instead of a fresh
# SQLite file (e.g. a MariaDB from scripts/mysql.sh; the cases' queues are unique per run).
#
# Before running, the case folders (clients/conformance/cases/NN-<name>/) are checked against
# clients/conformance/cases.txt; the run fails naming every case whose file for LANG is
# missing. The scenario must end with "N passed, 0 failed" where N is the number of lines of
# cases.txt (of FAULTS.md's cases with --faults); anything else (fewer cases run, no summary) is a
# failure.
set -euo pipefail

lang="${1:-}"
secure=""
faults=""
case "${2:-}" in
  "") ;;
  --secure) secure=1 ;;
  --faults) faults=1 ;;
  *)
    echo "usage: $0 rust|python|go|typescript|java [--secure | --faults]" >&2
    exit 2
    ;;
esac
case "$lang" in
  rust | python | go | typescript | java) ;;
  *)
    echo "usage: $0 rust|python|go|typescript|java [--secure | --faults]" >&2
    exit 2
    ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

# The fault scenario of each language: Rust's is an example of client-rs, the others a
# faults.sh next to conformance.sh. A language without one is skipped (exit 3).
if [ -n "$faults" ] && [ "$lang" != rust ] && [ ! -x "clients/$lang/faults.sh" ]; then
  echo "== $lang has no fault scenario yet (clients/$lang/faults.sh); skipped" >&2
  exit 3
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-conformance.XXXXXX")"
broker_pid=""
ctl_pid=""
cleanup() {
  if [ -n "$ctl_pid" ]; then
    kill "$ctl_pid" 2>/dev/null || true
    wait "$ctl_pid" 2>/dev/null || true
  fi
  # In fault mode the control loop may have restarted the broker: its pid is in the file.
  if [ -f "$tmp/broker.pid" ]; then
    broker_pid="$(cat "$tmp/broker.pid")"
  fi
  if [ -n "$broker_pid" ] && kill -0 "$broker_pid" 2>/dev/null; then
    kill "$broker_pid" 2>/dev/null || true
    kill -CONT "$broker_pid" 2>/dev/null || true # a paused broker handles SIGTERM once resumed
    wait "$broker_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# make_certs DIR: a CA, a server certificate for 127.0.0.1/localhost and a client
# certificate, all signed by the CA (PEM; keys unencrypted PKCS#8, P-256).
make_certs() {
  local d="$1"
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -subj "/CN=taskbroker conformance CA" -keyout ca.key -out ca.pem \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=localhost" -keyout server.key -out server.csr
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile server.ext -out server.pem
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=conf-worker" -keyout client.key -out client.csr
    printf 'extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile client.ext -out client.pem
  ) >"$d/openssl.log" 2>&1 || {
    cat "$d/openssl.log" >&2
    echo "openssl could not make the test certificates" >&2
    exit 1
  }
}

# The name of LANG's file in each case folder, clients/conformance/cases/NN-<name>/.
case_file() {
  case "$1" in
    rust) echo case.rs ;;
    python) echo case.py ;;
    typescript) echo case.ts ;;
    go) echo case.go ;;
    java) echo Case.java ;;
  esac
}

# check_cases LANG: clients/conformance/cases.txt (one case a line, in run order) against the
# case folders: line N is the folder NN-<name> with a README.md, every folder is a line, and
# every folder holds LANG's file. Fails naming every mismatch.
check_cases() {
  local lang="$1" file n=0 name dir bad=0
  file="$(case_file "$lang")"
  local cases_dir=clients/conformance/cases
  while IFS= read -r name; do
    n=$((n + 1))
    dir="$(printf '%s/%02d-%s' "$cases_dir" "$n" "$name")"
    if [ ! -f "$dir/README.md" ]; then
      echo "== case $name (line $n of cases.txt): $dir/README.md is missing" >&2
      bad=1
    elif [ ! -f "$dir/$file" ]; then
      echo "== case $name: $lang has no $dir/$file" >&2
      bad=1
    fi
  done <clients/conformance/cases.txt
  for dir in "$cases_dir"/*/; do
    dir="${dir%/}"
    name="${dir##*/}"
    # TypeScript's link to its packages (clients/typescript/conformance.sh) is no case.
    [ "$name" = node_modules ] && continue
    if ! grep -qxF "${name#[0-9][0-9]-}" clients/conformance/cases.txt ||
      [ "$(grep -nxF "${name#[0-9][0-9]-}" clients/conformance/cases.txt | head -n 1 | cut -d: -f1)" != "$((10#${name%%-*}))" ]; then
      echo "== $dir is not line ${name%%-*} of clients/conformance/cases.txt" >&2
      bad=1
    fi
  done
  # Rust lists its cases by hand in main.rs: a `#[path]` module per case folder (rustfmt
  # sorts those) and the run list of `cases()`, which must be cases.txt in order.
  if [ "$lang" = rust ]; then
    local main=client-rs/examples/conformance/main.rs modules listed
    modules="$(grep -oE 'cases/[0-9]{2}-[a-z_]+/case\.rs' "$main" | sed -E 's|cases/[0-9]{2}-||; s|/case\.rs||' | sort)"
    listed="$(grep -oE '^ *\("[a-z_]+", \|c, q\|' "$main" | sed -E 's/^ *\("([a-z_]+)".*/\1/')"
    if [ "$modules" != "$(sort clients/conformance/cases.txt)" ] ||
      [ "$listed" != "$(cat clients/conformance/cases.txt)" ]; then
      echo "== $main does not load (#[path] modules) and run (cases()) the cases of cases.txt in order:" >&2
      diff <(echo "$listed") clients/conformance/cases.txt >&2 || true
      bad=1
    fi
  fi
  return "$bad"
}

# The number of cases: the lines of clients/conformance/cases.txt (with --faults: the rows of
# FAULTS.md's table under "## The cases").
if [ -n "$faults" ]; then
  expected="$(sed -n '/^## The cases/,$p' clients/conformance/FAULTS.md | grep -cE '^\| `[a-z_]+` \|')"
else
  check_cases "$lang" || {
    echo "== the cases of $lang do not match clients/conformance/cases.txt" >&2
    exit 1
  }
  expected="$(grep -c . clients/conformance/cases.txt)"
fi

echo "== building the broker" >&2
. scripts/broker.sh
build_broker

security=()
if [ -n "$secure" ]; then
  make_certs "$tmp/pki"
  token="conformance-admin-$(openssl rand -hex 12)"
  # A worker token bound to the worker ids `conf-<lang>-bound` and `conf-<lang>-bound-*`
  # (the `worker_id_binding` case).
  worker_token="conformance-worker-$(openssl rand -hex 12)"
  {
    printf 'admin %s conformance\n' "$token"
    printf 'worker %s conformance-bound workers=conf-%s-bound,conf-%s-bound-*\n' \
      "$worker_token" "$lang" "$lang"
  } >"$tmp/pki/tokens"
  security=(
    --tls-cert "$tmp/pki/server.pem" --tls-key "$tmp/pki/server.key"
    --tls-client-ca "$tmp/pki/ca.pem" --auth-tokens-file "$tmp/pki/tokens"
  )
  export TASKBROKER_TOKEN="$token"
  export TASKBROKER_WORKER_TOKEN="$worker_token"
  export TASKBROKER_CA="$tmp/pki/ca.pem"
  export TASKBROKER_CLIENT_CERT="$tmp/pki/client.pem"
  export TASKBROKER_CLIENT_KEY="$tmp/pki/client.key"
else
  unset TASKBROKER_TOKEN TASKBROKER_WORKER_TOKEN TASKBROKER_CA TASKBROKER_CLIENT_CERT \
    TASKBROKER_CLIENT_KEY
fi

: >"$tmp/stdout"
: >"$tmp/stderr"
metrics_addr=""
start_broker 127.0.0.1:0 127.0.0.1:0 || exit 1
broker_pid="$(cat "$tmp/broker.pid")"
export TASKBROKER_ADDR="$addr"
mode="plaintext"
[ -n "$secure" ] && mode="TLS + mTLS + token"
[ -n "$faults" ] && mode="plaintext, faults"
echo "== broker listening on $TASKBROKER_ADDR ($mode, pid $broker_pid); running the $lang scenario ($expected cases)" >&2

# control_loop: serves the fault scenario's commands (clients/conformance/FAULTS.md), one
# line each from $ctl, one answer line each to $ack: kill (SIGKILL, waits for the exit),
# start (same address and database; answers once listening), restart (kill, then start),
# pause (SIGSTOP), resume (SIGCONT). The broker's pid is kept in $tmp/broker.pid.
control_loop() {
  local cmd pid reply
  while true; do
    cmd=""
    IFS= read -r cmd <"$ctl" || true
    [ -n "$cmd" ] || continue
    pid="$(cat "$tmp/broker.pid" 2>/dev/null || true)"
    reply=ok
    case "$cmd" in
      kill | restart)
        if [ -n "$pid" ]; then
          kill -KILL "$pid" 2>/dev/null || true
          # Not a child of this subshell when it is the first broker: poll for its exit.
          while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
          rm -f "$tmp/broker.pid"
        fi
        echo "== fault: broker $pid killed (SIGKILL)" >&2
        if [ "$cmd" = restart ]; then
          if start_broker "$TASKBROKER_ADDR" "$TASKBROKER_HTTP_ADDR"; then
            echo "== fault: broker restarted on $addr (pid $(cat "$tmp/broker.pid"))" >&2
          else
            reply="error: the broker did not restart"
          fi
        fi
        ;;
      start)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
          reply="error: the broker is running (pid $pid)"
        elif start_broker "$TASKBROKER_ADDR" "$TASKBROKER_HTTP_ADDR"; then
          echo "== fault: broker started on $addr (pid $(cat "$tmp/broker.pid"))" >&2
        else
          reply="error: the broker did not start"
        fi
        ;;
      pause)
        kill -STOP "$pid" 2>/dev/null || reply="error: no broker to pause"
        echo "== fault: broker $pid paused (SIGSTOP)" >&2
        ;;
      resume)
        kill -CONT "$pid" 2>/dev/null || reply="error: no broker to resume"
        echo "== fault: broker $pid resumed (SIGCONT)" >&2
        ;;
      *) reply="error: unknown command '$cmd' (kill, start, restart, pause, resume)" ;;
    esac
    echo "$reply" >"$ack"
  done
}

# The scenario's output is kept so its summary line can be repeated after the broker log.
status=0
if [ -n "$faults" ]; then
  ctl="$tmp/fault-ctl"
  ack="$tmp/fault-ack"
  mkfifo "$ctl" "$ack"
  export TASKBROKER_FAULT_CTL="$ctl" TASKBROKER_FAULT_ACK="$ack" TASKBROKER_HTTP_ADDR="$metrics_addr"
  control_loop &
  ctl_pid=$!
  if [ "$lang" = rust ]; then
    cargo run -q -p taskbroker-client --example conformance_faults | tee "$tmp/scenario.out" || status=${PIPESTATUS[0]}
  else
    "clients/$lang/faults.sh" | tee "$tmp/scenario.out" || status=${PIPESTATUS[0]}
  fi
elif [ "$lang" = rust ]; then
  cargo run -q -p taskbroker-client --example conformance | tee "$tmp/scenario.out" || status=${PIPESTATUS[0]}
else
  "clients/$lang/conformance.sh" | tee "$tmp/scenario.out" || status=${PIPESTATUS[0]}
fi

if [ "$status" -ne 0 ]; then
  echo "== the $lang scenario failed (status $status); broker log (last 400 lines of stderr):" >&2
  tail -n 400 "$tmp/stderr" >&2
  # Keep "N passed, M failed" the last line, as SCENARIO.md asks.
  grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/scenario.out" | tail -n 1 || true
  exit "$status"
fi
# A scenario that exits 0 must also have run every case: its last summary line is exactly
# "$expected passed, 0 failed" (the language's unit tests print their own summaries earlier).
summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/scenario.out" | tail -n 1 || true)"
if [ "$summary" != "$expected passed, 0 failed" ]; then
  echo "== the $lang scenario exited 0 but its summary is '${summary:-missing}', not '$expected passed, 0 failed'" >&2
  exit 1
fi
echo "== $lang scenario ($mode): $summary" >&2
