#!/usr/bin/env bash
# Browser end-to-end tests of the web console, in headless Chromium:
#   scripts/console-e2e.sh
# Installs what is missing (Debian `chromium`, the npm packages of
# tests/console-e2e), builds the broker and the example worker, then runs
# tests/console-e2e/run.mjs: two brokers on fresh SQLite databases (auth off and
# on), tasks seeded with the CLI, the example worker on `emails`. Prints
# `N passed, M failed`; screenshots go to target/console-e2e/ (CONSOLE_SCREENSHOTS=docs/img refreshes the README's).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if [ ! -x /usr/bin/chromium ]; then
  echo "installing chromium (Debian package)"
  if [ "$(id -u)" -eq 0 ]; then apt_get=(apt-get); else apt_get=(sudo apt-get); fi
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" update -q
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -q chromium
fi
if ! command -v npm >/dev/null; then
  echo "npm is needed (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
(cd tests/console-e2e && npm ci --no-audit --no-fund --loglevel=error)

cargo build -q -p taskbroker-server --bin taskbroker
cargo build -q -p taskbroker-client --example worker --example long_task
target_dir="${CARGO_TARGET_DIR:-$root/target}"
TB_BIN="$target_dir/debug/taskbroker" TB_WORKER="$target_dir/debug/examples/worker" \
  TB_LONG_TASK="$target_dir/debug/examples/long_task" \
  node tests/console-e2e/run.mjs
