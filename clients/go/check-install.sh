#!/usr/bin/env bash
# Installs the Go client the way clients/go/README.md says, from a clean copy of the
# committed tree (git archive HEAD: nothing untracked or built here leaks in), into a fresh
# module: `go get` of the module path, pointed at that copy with a `replace` (as a fork or a
# vendored checkout would be), then builds and runs a small program that imports the client,
# a typed handler and the worker, and builds a Client. Dependencies come from the Go module
# proxy. Ends with "install check: ok".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(git -C "$here" rev-parse --show-toplevel)"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
module=github.com/taskbroker/taskbroker/clients/go

tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-go-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "== the committed tree of clients/go (git archive HEAD)"
git -C "$root" archive --format=tar HEAD clients/go | tar -x -C "$tmp"
test -f "$tmp/clients/go/go.mod"

echo "== a fresh module: go get $module, replaced by that copy"
mkdir "$tmp/app"
cd "$tmp/app"
go mod init example.com/installcheck >/dev/null 2>&1
go mod edit -replace "$module=$tmp/clients/go"
go get "$module@v0.0.0"

cat >main.go <<'EOF'
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
EOF
go mod tidy
go build -o installcheck .
out="$(./installcheck)"
echo "$out"
[ "$out" = "client for 127.0.0.1:50051 worker on [emails]" ]
echo "install check: ok"
