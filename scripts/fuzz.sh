#!/usr/bin/env bash
# Runs one cargo-fuzz target (fuzz/fuzz_targets/) for a number of seconds:
#   scripts/fuzz.sh rpc_requests 600
#   scripts/fuzz.sh config_loader 600
#   scripts/fuzz.sh submit_expansion 600   # fan-out x dependencies x labels in one Submit
#   FUZZ_KEEP_GOING=1 scripts/fuzz.sh rpc_requests 600   # record crashes, keep fuzzing
# Needs the nightly toolchain and cargo-fuzz (both installed when missing).
# The corpus grows in fuzz/corpus/TARGET (not committed); a crashing input is
# written to fuzz/artifacts/TARGET/. Copy it to fuzz/regressions/TARGET/ and the
# normal test suite replays it (server/tests/fuzz_regressions.rs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target=${1:?usage: fuzz.sh TARGET SECONDS (targets: rpc_requests config_loader submit_expansion)}
secs=${2:-60}

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

cd "$root/fuzz"
mkdir -p "corpus/$target" "seeds/$target" "regressions/$target"
# Seeds (valid requests and configs) and saved regressions start the corpus;
# libFuzzer writes new inputs to the first directory.
more=()
if [ -n "${FUZZ_KEEP_GOING:-}" ]; then
  # A known crash would stop the run at once: fork mode records each and goes on.
  more=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
exec cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" "regressions/$target" -- \
  -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 "${more[@]}"
