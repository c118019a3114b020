#!/usr/bin/env bash
# Installs the TypeScript client from a clean copy of the committed tree, as docs/clients.md
# says a user does, and checks that it works: `git archive HEAD` of clients/typescript into a
# temporary directory (nothing untracked or built here leaks in), `npm ci` and `npm pack` there
# (the prepack script builds dist/), then `npm install` of the tarball into two fresh projects,
# an ES module one (module nodenext, `lib` ES2022 alone: a Node project without the DOM lib) and
# a CommonJS one (module node16, the default `lib`), each compiling with tsc with
# `skipLibCheck` off (every declaration file of the package and its dependencies checked) and
# running a short program that imports the package, types a delayed and an absolute submit and
# builds a Client and a Worker. Ends with "install check: ok". Needs git, npm and the npm registry.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(git -C "$here" rev-parse --show-toplevel)"
prefix="$(git -C "$here" rev-parse --show-prefix)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-ts-install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$tmp/checkout"
git -C "$root" archive HEAD "$prefix" | tar -x -C "$tmp/checkout"
pkg="$tmp/checkout/$prefix"
echo "== clean copy of HEAD:$prefix"
(cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
(cd "$pkg" && npm pack --silent --pack-destination "$tmp" >"$tmp/pack.out")
tgz="$tmp/$(tail -n 1 "$tmp/pack.out")"
files="$(tar -tzf "$tgz")"
echo "== packed $(basename "$tgz"): $(wc -l <<<"$files") files"
grep -qx 'package/dist/src/index.js' <<<"$files" || { echo "dist/src/index.js is not in the package" >&2; exit 1; }
grep -qx 'package/dist/src/index.d.cts' <<<"$files" || { echo "dist/src/index.d.cts is not in the package" >&2; exit 1; }
tsver="$(node -p "require('$pkg/package.json').devDependencies.typescript")"

program='import { Client, Worker, durationFromMs, type SubmitOptions } from "@taskbroker/client";
const later: SubmitOptions[] = [{ delayMs: 60_000 }, { runAt: new Date(Date.now() + 60_000), retry: { initialBackoff: durationFromMs(500) } }];
void later;
const client = new Client("127.0.0.1:1");
const worker = new Worker(client, {}).handle<{ to: string }, number>("emails", async (email) => email.to.length);
console.log(typeof client.submit, worker.queues.join());
void client.close();'

# project NAME TYPE MODULE [LIB]: a fresh project of that package type, compiled with that module
# setting (and that `lib` when given) and skipLibCheck off.
project() {
  local dir="$tmp/$1" lib=""
  [ -z "${4:-}" ] || lib="\"lib\": [\"$4\"], "
  mkdir -p "$dir/src"
  printf '{ "name": "%s", "version": "0.0.0", "private": true, "type": "%s" }\n' "$1" "$2" >"$dir/package.json"
  printf '{ "compilerOptions": { "module": "%s", "moduleResolution": "%s", "target": "ES2022", %s"strict": true, "skipLibCheck": false, "outDir": "dist", "types": ["node"] }, "include": ["src"] }\n' "$3" "$3" "$lib" >"$dir/tsconfig.json"
  printf '%s\n' "$program" >"$dir/src/main.ts"
  (cd "$dir" && npm install --silent --no-audit --no-fund "$tgz" "typescript@$tsver" "@types/node@20" >/dev/null)
  (cd "$dir" && npx tsc -p tsconfig.json) || { echo "FAIL: $1 ($2, module $3) does not compile" >&2; return 1; }
  local out
  out="$(cd "$dir" && node dist/main.js)" || { echo "FAIL: $1 ($2, module $3) does not run" >&2; return 1; }
  [ "$out" = "function emails" ] || { echo "FAIL: $1 ($2, module $3) printed '$out', want 'function emails'" >&2; return 1; }
  echo "ok: $1 ($2, module $3, lib ${4:-default}) compiles and runs"
}

project esm-app module nodenext ES2022
project cjs-app commonjs node16
echo "install check: ok"
