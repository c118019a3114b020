#!/usr/bin/env bash
# buf lint (STANDARD) on proto/, and buf breaking against the previous commit,
# so no change silently breaks generated clients. buf comes from npm.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
buf=(npx --yes @bufbuild/buf@1.75.0)
"${buf[@]}" lint proto
echo "buf lint: ok"
if git rev-parse -q --verify HEAD~1 >/dev/null && git cat-file -e HEAD~1:proto/buf.yaml 2>/dev/null; then
  "${buf[@]}" breaking proto --against ".git#ref=HEAD~1,subdir=proto"
  echo "buf breaking against HEAD~1: ok"
else
  echo "buf breaking: no earlier commit with proto/ to compare against"
fi
