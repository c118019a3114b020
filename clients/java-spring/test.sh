#!/usr/bin/env bash
# Builds the Java client and installs it into the local Maven repository, builds the broker,
# starts it on a free port with a fresh SQLite database, then builds and tests the Spring Boot
# starter and the sample application against it (TASKBROKER_ADDR). Ends with
# "N passed, 0 failed", N the tests Maven Surefire ran; exits non-zero on any failure.
#
# MAVEN_ARGS is passed to every mvn (e.g. -o, -Dmaven.repo.local=...).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mvn=(mvn -B -ntp -Dstyle.color=never ${MAVEN_ARGS:-})
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-java-spring.XXXXXX")"
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

echo "== installing the Java client (clients/java) into the local repository" >&2
if ! (cd "$root/clients/java" && "${mvn[@]}" -q install -DskipTests) >"$tmp/client.log" 2>&1; then
  cat "$tmp/client.log" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

echo "== building the broker (client installed in ${SECONDS}s)" >&2
(cd "$root" && cargo build -q -p taskbroker-server --bin taskbroker)

: >"$tmp/stdout"
"$root/target/debug/taskbroker" serve \
  --listen 127.0.0.1:0 \
  --database-url "sqlite://$tmp/tb.db" \
  --reclaim-interval 200ms \
  --metrics-listen 127.0.0.1:0 \
  >"$tmp/stdout" 2>"$tmp/stderr" &
broker_pid=$!
addr=""
for _ in $(seq 1 600); do # 600 x 0.1 s = 60 s
  addr="$(sed -n 's/^taskbroker listening on \([^ ]*\).*$/\1/p' "$tmp/stdout" | head -n 1)"
  [ -n "$addr" ] && break
  if ! kill -0 "$broker_pid" 2>/dev/null; then
    cat "$tmp/stdout" "$tmp/stderr" >&2
    echo "the broker exited before it was listening" >&2
    echo "0 passed, 1 failed"
    exit 1
  fi
  sleep 0.1
done
if [ -z "$addr" ]; then
  cat "$tmp/stdout" "$tmp/stderr" >&2
  echo "the broker did not listen within 60 s" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
export TASKBROKER_ADDR="$addr"
unset TASKBROKER_TOKEN TASKBROKER_CA TASKBROKER_CLIENT_CERT TASKBROKER_CLIENT_KEY
echo "== broker on $addr (at ${SECONDS}s); building and testing the starter and the sample" >&2

status=0
rm -rf "$here"/starter/target/surefire-reports "$here"/sample/target/surefire-reports
(cd "$here" && "${mvn[@]}" install) >"$tmp/mvn.log" 2>&1 || status=$?

# The Surefire reports of both modules: tests, failures, errors, skipped.
read -r tests failed skipped < <(
  cat "$here"/starter/target/surefire-reports/TEST-*.xml "$here"/sample/target/surefire-reports/TEST-*.xml 2>/dev/null |
    sed -n 's/^<testsuite [^>]*>$/&/p' |
    awk '{
      t += match($0, / tests="[0-9]+"/) ? substr($0, RSTART + 8, RLENGTH - 9) : 0
      f += match($0, / failures="[0-9]+"/) ? substr($0, RSTART + 11, RLENGTH - 12) : 0
      f += match($0, / errors="[0-9]+"/) ? substr($0, RSTART + 9, RLENGTH - 10) : 0
      s += match($0, / skipped="[0-9]+"/) ? substr($0, RSTART + 10, RLENGTH - 11) : 0
    } END { print t + 0, f + 0, s + 0 }'
)
if [ "$status" -ne 0 ]; then
  grep -E '^\[(ERROR|WARNING)\]|Tests run:|FAIL' "$tmp/mvn.log" | head -n 80 >&2 || true
  echo "== the broker's log:" >&2
  tail -n 40 "$tmp/stderr" >&2 || true
  [ "$failed" -eq 0 ] && failed=1
fi
grep -E 'Tests run:.*in dev\.' "$tmp/mvn.log" >&2 || true
echo "== done in ${SECONDS}s" >&2
# A skipped test ran nothing: it counts as a failure here.
failed=$((failed + skipped))
passed=$((tests - failed))
echo "$passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
