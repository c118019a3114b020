# Sourced, not run: starts a broker from the debug build on loopback for a script that tests
# against a live one (scripts/conformance.sh, each client's check-install.sh).
#
# Needs `root` (the checkout) and `tmp` (a directory of the caller's) set. `security` (an array
# of extra `serve` flags, empty by default) and TASKBROKER_CONFORMANCE_DATABASE_URL (a database
# instead of a fresh SQLite file, $tmp/tb.db) are optional.
#
# build_broker: `cargo build` of the broker binary (a no-op when it is up to date).
# start_broker LISTEN METRICS: starts the broker on those addresses with the database in
# $tmp (appending to $tmp/stdout and $tmp/stderr), writes its pid to $tmp/broker.pid and waits
# until it prints "taskbroker listening on HOST:PORT"; sets addr and metrics_addr. Returns 1
# (the log printed) when it exits first or is not listening within 60 s.
# stop_broker: stops the broker $tmp/broker.pid names, if it runs.

build_broker() {
  (cd "$root" && cargo build -q -p taskbroker-server --bin taskbroker)
}

start_broker() {
  local pid lines
  lines="$(wc -l <"$tmp/stdout" 2>/dev/null || echo 0)"
  "${CARGO_TARGET_DIR:-$root/target}/debug/taskbroker" serve \
    --listen "$1" \
    --database-url "${TASKBROKER_CONFORMANCE_DATABASE_URL:-sqlite://$tmp/tb.db}" \
    --reclaim-interval 200ms \
    --metrics-listen "$2" \
    ${security[@]+"${security[@]}"} \
    >>"$tmp/stdout" 2>>"$tmp/stderr" &
  pid=$!
  echo "$pid" >"$tmp/broker.pid"
  addr=""
  for _ in $(seq 1 600); do # 600 x 0.1 s = 60 s
    addr="$(tail -n +"$((lines + 1))" "$tmp/stdout" | sed -n 's/^taskbroker listening on \([^ ]*\).*$/\1/p' | head -n 1)"
    if [ -n "$addr" ]; then
      metrics_addr="$(tail -n +"$((lines + 1))" "$tmp/stdout" | sed -n 's|^  metrics:  http://\([^/]*\)/metrics$|\1|p' | head -n 1)"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" && status=0 || status=$?
      echo "the broker exited (status $status) before it was listening; its log:" >&2
      cat "$tmp/stdout" "$tmp/stderr" >&2
      rm -f "$tmp/broker.pid"
      return 1
    fi
    sleep 0.1
  done
  echo "the broker did not print 'taskbroker listening on ...' within 60 s; its log:" >&2
  cat "$tmp/stdout" "$tmp/stderr" >&2
  return 1
}

stop_broker() {
  local pid
  [ -f "$tmp/broker.pid" ] || return 0
  pid="$(cat "$tmp/broker.pid")"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true # a paused broker handles SIGTERM once resumed
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$tmp/broker.pid"
}
