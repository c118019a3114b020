#!/usr/bin/env bash
# Checks that the package installs from a clean checkout as a user gets it: `npm pack` (which
# builds dist/ through the prepack script), then installs the tarball into two throwaway
# projects and compiles each with tsc: an ES module project (module nodenext) and a CommonJS
# one (module node16), each importing the package and using its Worker and connect(). The ES
# module project also runs (imports the package at run time). Needs npm and network access to
# the registry for the dependencies. Exit 0 when both compile.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

npm pack --silent --pack-destination "$tmp" >"$tmp/pack.out"
tgz="$tmp/$(tail -n 1 "$tmp/pack.out")"
files="$(tar -tzf "$tgz")"
echo "== packed $(basename "$tgz"): $(wc -l <<<"$files") files"
grep -qx 'package/dist/src/index.js' <<<"$files" || { echo "dist/src/index.js is not in the package" >&2; exit 1; }
tsver="$(node -p 'require("./package.json").devDependencies.typescript')"

source_ts='import { connect, Worker, type TaskContext } from "@taskbroker/client";
const tb = connect("127.0.0.1:1");
const w = new Worker(tb.broker, async (ctx: TaskContext) => ctx.payload, { queues: ["q"] });
console.log(typeof w.run, typeof tb.broker.submit);'

# project NAME TYPE MODULE: a project of that package type compiled with that module setting.
project() {
  local dir="$tmp/$1"
  mkdir -p "$dir/src"
  printf '{ "name": "%s", "version": "0.0.0", "private": true, "type": "%s" }\n' "$1" "$2" >"$dir/package.json"
  printf '{ "compilerOptions": { "module": "%s", "moduleResolution": "%s", "target": "ES2022", "strict": true, "outDir": "dist", "types": ["node"] }, "include": ["src"] }\n' "$3" "$3" >"$dir/tsconfig.json"
  printf '%s\n' "$source_ts" >"$dir/src/main.ts"
  (cd "$dir" && npm install --silent --no-audit --no-fund "$tgz" "typescript@$tsver" "@types/node@20" >/dev/null)
  (cd "$dir" && npx tsc -p tsconfig.json) || { echo "FAIL: $1 ($2, module $3) does not compile" >&2; return 1; }
  (cd "$dir" && node dist/main.js >/dev/null) || { echo "FAIL: $1 ($2, module $3) does not run" >&2; return 1; }
  echo "ok: $1 ($2, module $3) compiles and runs"
}

project esm-app module nodenext
project cjs-app commonjs node16
