#!/usr/bin/env bash
# Installs the Go client the way clients/go/README.md and docs/clients.md say, from a clean copy
# of the committed tree (git archive HEAD: nothing untracked or built here leaks in), with no
# `go mod tidy` anywhere: what `go get` writes must be enough for `go build`.
#
# 1. The released module: the copy packed as the module zip that the Go module proxy serves for
#    a tag `clients/go/vX.Y.Z` (same layout: @v/list, .info, .mod, .zip), put in a directory
#    used as GOPROXY=file://... ahead of the usual proxy. A fresh module outside the copy runs
#    `go get github.com/taskbroker/taskbroker/clients/go/...@vX.Y.Z` and `go build`. GONOSUMDB
#    names the module because this zip was never in the checksum database (a real tag is).
# 2. From a checkout, before any tag: a second fresh module with a `replace` of the module path
#    to that copy, then the same `go get` and `go build`.
# Each builds and runs a small program that imports the client, a typed handler and the worker,
# and builds a Client; then a worker (cmd/worker: Run until SIGTERM) and a producer
# (cmd/producer: submits a task, waits for it and prints the worker's result) of the same
# module run against a broker started from the debug build on loopback with a fresh SQLite
# database (scripts/broker.sh; built here when missing). The other dependencies come from the Go
# module proxy. Ends with "install check: ok".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(git -C "$here" rev-parse --show-toplevel)"
. "$root/scripts/broker.sh"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
module=github.com/taskbroker/taskbroker/clients/go
# Any version works for the check; a release names it in its tag, clients/go/$version.
version=v0.1.0

tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-go-install.XXXXXX")"
trap 'stop_broker; chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

echo "== the committed tree of clients/go (git archive HEAD)"
git -C "$root" archive --format=tar HEAD clients/go | tar -x -C "$tmp"
test -f "$tmp/clients/go/go.mod"

echo "== the module zip of $module@$version (the proxy's layout)"
proxy="$tmp/proxy"
at="$proxy/$module/@v"
mkdir -p "$at"
# Every file under the prefix module@version/, no directory entries (as `go mod download` gets).
python3 - "$tmp/clients/go" "$module@$version" "$at/$version.zip" <<'PY'
import os, sys, zipfile
src, prefix, out = sys.argv[1:]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for d, _, files in sorted(os.walk(src)):
        for f in sorted(files):
            p = os.path.join(d, f)
            z.write(p, prefix + "/" + os.path.relpath(p, src))
PY
cp "$tmp/clients/go/go.mod" "$at/$version.mod"
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$at/$version.info"
echo "$version" >"$at/list"
echo "$(python3 -c 'import sys, zipfile; print(len(zipfile.ZipFile(sys.argv[1]).namelist()))' "$at/$version.zip") files in $version.zip"

cat >"$tmp/main.go" <<'GO'
package main

import (
	"context"
	"fmt"
	"log"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

type Email struct {
	To string `json:"to"`
}

func main() {
	conn, err := taskbroker.NewClient("127.0.0.1:50051", taskbroker.WithToken("t"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	mux := worker.NewMux()
	mux.Handle("emails", worker.HandleJSON(func(ctx context.Context, t *worker.Task, e Email) (string, error) {
		return "sent to " + e.To, nil
	}))
	w, err := mux.Worker(conn, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("client for", conn.Target(), "worker on", w.Config().Queues)
}
GO

mkdir -p "$tmp/cmd/worker" "$tmp/cmd/producer"
cat >"$tmp/cmd/worker/main.go" <<'GO'
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
	"github.com/taskbroker/taskbroker/clients/go/worker"
)

type Email struct {
	To string `json:"to"`
}

func main() {
	c, err := taskbroker.Connect(os.Getenv("TASKBROKER_ADDR"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	mux := worker.NewMux()
	mux.Handle("emails", worker.HandleJSON(func(ctx context.Context, t *worker.Task, e Email) (map[string]string, error) {
		return map[string]string{"sent_to": e.To}, nil
	}))
	w, err := mux.Worker(c, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil { // until SIGTERM, then drains
		log.Fatal(err)
	}
}
GO
cat >"$tmp/cmd/producer/main.go" <<'GO'
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	taskbroker "github.com/taskbroker/taskbroker/clients/go"
)

type Email struct {
	To string `json:"to"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := taskbroker.Connect(os.Getenv("TASKBROKER_ADDR"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	res, err := taskbroker.SubmitJSON(ctx, c.Broker, "emails", Email{To: "ada@example.com"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := c.Wait(ctx, res.GetTaskId())
	if err != nil {
		log.Fatal(err)
	}
	result, err := taskbroker.ResultJSON[map[string]string](task)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("result", result["sent_to"])
}
GO

# build DIR: the programs in DIR, `go build` with what `go get` wrote, run; then the worker in
# the background and the producer until it read the worker's result back.
build() {
  cp "$tmp/main.go" "$1/main.go"
  cp -r "$tmp/cmd" "$1/cmd"
  (cd "$1" && go build -o installcheck . && go build -o bin/ ./cmd/...) ||
    { echo "install check: go build failed in $1 after go get" >&2; return 1; }
  local out worker
  out="$(cd "$1" && ./installcheck)"
  echo "$out"
  [ "$out" = "client for 127.0.0.1:50051 worker on [emails]" ] || { echo "install check: unexpected output" >&2; return 1; }
  "$1/bin/worker" &
  worker=$!
  out="$(timeout 120 "$1/bin/producer")" || { kill "$worker"; echo "install check: the producer failed" >&2; return 1; }
  kill -TERM "$worker"
  wait "$worker" || { echo "install check: the worker did not stop cleanly on SIGTERM" >&2; return 1; }
  echo "$out"
  [ "$out" = "result ada@example.com" ] || { echo "install check: unexpected producer output" >&2; return 1; }
  echo "worker and producer ran against $TASKBROKER_ADDR"
}

echo "== a broker on loopback (target/debug/taskbroker, fresh SQLite)"
build_broker
: >"$tmp/stdout"
: >"$tmp/stderr"
start_broker 127.0.0.1:0 127.0.0.1:0
export TASKBROKER_ADDR="$addr"

echo "== a fresh module: go get $module/...@$version from the module zip"
mkdir "$tmp/app"
(cd "$tmp/app" && go mod init example.com/installcheck >/dev/null 2>&1 &&
  GOPROXY="file://$proxy,$(go env GOPROXY)" GONOSUMDB="$module" \
    go get "$module/...@$version") 2>"$tmp/get.log" || { cat "$tmp/get.log" >&2; exit 1; }
grep -q "^	$module $version" "$tmp/app/go.mod" || { echo "install check: $module $version not required" >&2; exit 1; }
build "$tmp/app"

echo "== a fresh module: go get $module/..., replaced by the copy"
mkdir "$tmp/app-replace"
(cd "$tmp/app-replace" && go mod init example.com/installcheck >/dev/null 2>&1 &&
  go mod edit -replace "$module=$tmp/clients/go" && go get "$module/...@v0.0.0") 2>"$tmp/get.log" || { cat "$tmp/get.log" >&2; exit 1; }
build "$tmp/app-replace"
echo "install check: ok"
