#!/usr/bin/env bash
# Regenerates src/gen/ from ../../proto (the taskbroker.v1 contract) and proto-extra/
# (google.rpc.ErrorInfo). Needs only `npm ci`: buf and protoc-gen-es come from node_modules.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x node_modules/.bin/buf ]; then
  npm ci --no-audit --no-fund
fi
node_modules/.bin/buf generate
echo "generated into src/gen/"
