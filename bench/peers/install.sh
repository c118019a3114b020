#!/usr/bin/env bash
# Installs the peer job queues that bench/compare.sh measures against taskbroker:
#   graphile-worker 0.18 and pg-boss 12.35 from npm (exact versions, package-lock.json),
#   River v0.43 with its pgx driver from the Go module proxy (go.mod/go.sum),
# and builds bench/peers/river/river-bench. Idempotent; needs node/npm and go.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

(cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error)
# The toolchain on the machine, never a downloaded one.
(cd "$here/river" && GOTOOLCHAIN=local go build -o river-bench .)
echo "peers installed: $(cd "$here/node" && node -p "['graphile-worker','pg-boss'].map(p => p + ' ' + require('./node_modules/' + p + '/package.json').version).join(', ')"), river $(cd "$here/river" && GOTOOLCHAIN=local go list -m -f '{{.Version}}' github.com/riverqueue/river)"
