#!/usr/bin/env bash
# Usage: scripts/conformance.sh LANG [--secure]   (LANG = rust, python, go, typescript, java)
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
# The scenario must end with "N passed, 0 failed" where N is the number of cases in
# SCENARIO.md; anything else (fewer cases run, no summary) is a failure.
set -euo pipefail

lang="${1:-}"
secure=""
case "${2:-}" in
  "") ;;
  --secure) secure=1 ;;
  *)
    echo "usage: $0 rust|python|go|typescript|java [--secure]" >&2
    exit 2
    ;;
esac
case "$lang" in
  rust | python | go | typescript | java) ;;
  *)
    echo "usage: $0 rust|python|go|typescript|java [--secure]" >&2
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

# The number of cases: the rows of SCENARIO.md's table whose first cell is a `case`.
expected="$(grep -cE '^\| `[a-z_]+` \|' clients/conformance/SCENARIO.md)"

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

target/debug/taskbroker serve \
  --listen 127.0.0.1:0 \
  --database-url "sqlite://$tmp/tb.db" \
  --reclaim-interval 200ms \
  --metrics-listen 127.0.0.1:0 \
  "${security[@]}" \
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
mode="plaintext"
[ -n "$secure" ] && mode="TLS + mTLS + token"
echo "== broker listening on $TASKBROKER_ADDR ($mode, pid $broker_pid); running the $lang scenario ($expected cases)" >&2

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
