#!/usr/bin/env bash
# Installs the TypeScript client from a clean copy of the committed tree, as docs/clients.md
# says a user does, and checks that it works: `git archive HEAD` of clients/typescript into a
# temporary directory (nothing untracked or built here leaks in), `npm ci` and `npm pack` there
# (the prepack script builds dist/), then `npm install` of the tarball into two fresh projects,
# an ES module one (module nodenext, `lib` ES2022 alone: a Node project without the DOM lib) and
# a CommonJS one (module node16, the default `lib`), each compiling with tsc with
# `skipLibCheck` off (every declaration file of the package and its dependencies checked) and
# running a short program that imports the package, types a delayed and an absolute submit and
# builds a Client and a Worker; then, in each project, a worker (worker.ts: `run()` until
# SIGTERM) and a producer (producer.ts: submits a task, waits for it and prints the worker's
# result and the task's state) against a broker started from the debug build on loopback with a
# fresh SQLite database (scripts/broker.sh; built here when missing). Ends with
# "install check: ok". Needs git, npm and the npm registry.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(git -C "$here" rev-parse --show-toplevel)"
prefix="$(git -C "$here" rev-parse --show-prefix)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-ts-install.XXXXXX")"
. "$root/scripts/broker.sh"
trap 'stop_broker; rm -rf "$tmp"' EXIT

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
worker='import { Client, Worker } from "@taskbroker/client";
const client = new Client(process.env["TASKBROKER_ADDR"]!);
const worker = new Worker(client, {}).handle<{ to: string }, { sentTo: string }>("emails", async (email) => ({ sentTo: email.to }));
worker.run().then(() => client.close()); // until SIGTERM, then drains'
producer='import { Client, wait } from "@taskbroker/client";
async function main(): Promise<void> {
  const client = new Client(process.env["TASKBROKER_ADDR"]!);
  const { taskId } = await client.submit<{ to: string }>("emails", { to: "ada@example.com" });
  await wait(client, taskId, { timeoutMs: 60_000 });
  const result = await client.getResult<{ sentTo: string }>(taskId);
  console.log("result", result.sentTo, (await client.getTask(taskId)).state);
  await client.close();
}
main().catch((err: unknown) => { console.error(err); process.exit(1); });'

# project NAME TYPE MODULE [LIB]: a fresh project of that package type, compiled with that module
# setting (and that `lib` when given) and skipLibCheck off.
project() {
  local dir="$tmp/$1" lib=""
  [ -z "${4:-}" ] || lib="\"lib\": [\"$4\"], "
  mkdir -p "$dir/src"
  printf '{ "name": "%s", "version": "0.0.0", "private": true, "type": "%s" }\n' "$1" "$2" >"$dir/package.json"
  printf '{ "compilerOptions": { "module": "%s", "moduleResolution": "%s", "target": "ES2022", %s"strict": true, "skipLibCheck": false, "outDir": "dist", "types": ["node"] }, "include": ["src"] }\n' "$3" "$3" "$lib" >"$dir/tsconfig.json"
  printf '%s\n' "$program" >"$dir/src/main.ts"
  printf '%s\n' "$worker" >"$dir/src/worker.ts"
  printf '%s\n' "$producer" >"$dir/src/producer.ts"
  (cd "$dir" && npm install --silent --no-audit --no-fund "$tgz" "typescript@$tsver" "@types/node@20" >/dev/null)
  (cd "$dir" && npx tsc -p tsconfig.json) || { echo "FAIL: $1 ($2, module $3) does not compile" >&2; return 1; }
  local out
  out="$(cd "$dir" && node dist/main.js)" || { echo "FAIL: $1 ($2, module $3) does not run" >&2; return 1; }
  [ "$out" = "function emails" ] || { echo "FAIL: $1 ($2, module $3) printed '$out', want 'function emails'" >&2; return 1; }
  echo "ok: $1 ($2, module $3, lib ${4:-default}) compiles and runs"
  (cd "$dir" && exec node dist/worker.js) &
  local w=$!
  out="$(cd "$dir" && timeout 120 node dist/producer.js)" || { kill "$w"; echo "FAIL: $1: the producer failed" >&2; return 1; }
  kill -TERM "$w"
  wait "$w" || { echo "FAIL: $1: the worker did not stop cleanly on SIGTERM" >&2; return 1; }
  [ "$out" = "result ada@example.com SUCCEEDED" ] || { echo "FAIL: $1: the producer printed '$out'" >&2; return 1; }
  echo "ok: $1: a worker and a producer ran against $TASKBROKER_ADDR ($out)"
}

echo "== a broker on loopback (target/debug/taskbroker, fresh SQLite)"
build_broker
: >"$tmp/stdout"
: >"$tmp/stderr"
start_broker 127.0.0.1:0 127.0.0.1:0
export TASKBROKER_ADDR="$addr"

project esm-app module nodenext ES2022
project cjs-app commonjs node16
echo "install check: ok"
