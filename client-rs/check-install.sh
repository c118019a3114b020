#!/usr/bin/env bash
# Checks that the Rust client installs from its published artifact as docs/clients.md says: a
# clean copy of the committed tree (`git archive HEAD`, so nothing untracked or built locally
# leaks in), `cargo package` there (the .crate that `cargo publish` uploads; the build below
# stands for its verification), the .crate unpacked into a directory outside the copy, and a
# fresh Cargo project, outside the copy too, that depends on that directory alone and compiles
# and runs a five-line program using Client and Worker; then its worker
# (src/bin/install-check-worker.rs: `run_until_signal`) and producer
# (src/bin/install-check-producer.rs: submits a task, waits for it and prints the worker's
# result) run against a broker started from the debug build on loopback with a fresh SQLite
# database (scripts/broker.sh; built here when missing). The project reuses the
# repository's Cargo.lock (the versions it was tested with) and target directory, so only the
# client itself is compiled again. Ends with `install check: ok`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/taskbroker-rs-install.XXXXXX")"
. "$root/scripts/broker.sh"
trap 'stop_broker; rm -rf "$tmp"' EXIT
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

echo "== cargo package (a git archive HEAD copy)"
git -C "$root" archive HEAD | tar -x -C "$tmp" --one-top-level=src
(cd "$tmp/src" && cargo package -q -p taskbroker-client --no-verify --offline 2>/dev/null ||
  cargo package -q -p taskbroker-client --no-verify)
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$tmp/src/Cargo.toml" | head -n 1)"
crate="$CARGO_TARGET_DIR/package/taskbroker-client-$version.crate"
cp "$crate" "$tmp/"
rm -rf "$tmp/src"
files="$(tar -tzf "$tmp/$(basename "$crate")")"
echo "== packed $(basename "$crate"): $(wc -l <<<"$files") files"
for f in Cargo.toml build.rs src/lib.rs proto/taskbroker/v1/broker.proto \
  outbox-sql/postgres/0001_outbox.sql outbox-sql/mysql/0001_outbox.sql; do
  grep -qx "taskbroker-client-$version/$f" <<<"$files" || { echo "$f is not in the crate" >&2; exit 1; }
done
mkdir "$tmp/vendor"
tar -xzf "$tmp/$(basename "$crate")" -C "$tmp/vendor"

mkdir -p "$tmp/app/src"
cat >"$tmp/app/Cargo.toml" <<TOML
[package]
name = "install-check"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
taskbroker-client = { path = "$tmp/vendor/taskbroker-client-$version" }
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }

[workspace]
TOML
cat >"$tmp/app/src/main.rs" <<'RS'
use taskbroker_client::{Client, TaskContext, TaskError, Worker};
#[tokio::main]
async fn main() {
    let client = Client::builder("127.0.0.1:1").connect_lazy().expect("client");
    let w = Worker::builder(client).queue("q", |_c: TaskContext| async { Ok::<_, TaskError>(()) }).build();
    println!("worker {} built", w.worker_id().len() > 0);
}
RS
mkdir -p "$tmp/app/src/bin"
cat >"$tmp/app/src/bin/install-check-worker.rs" <<'RS'
use taskbroker_client::{Client, TaskContext, TaskError, Worker};
#[tokio::main]
async fn main() -> Result<(), taskbroker_client::Error> {
    let client = Client::connect(&format!("http://{}", std::env::var("TASKBROKER_ADDR").unwrap())).await?;
    let send = |ctx: TaskContext| async move { Ok::<_, TaskError>(format!("sent to {}", String::from_utf8_lossy(ctx.payload()))) };
    Worker::builder(client).queue("emails", send).build().run_until_signal().await // until SIGTERM, then drains
}
RS
cat >"$tmp/app/src/bin/install-check-producer.rs" <<'RS'
use std::time::Duration;
use taskbroker_client::{Client, TaskSpec};
#[tokio::main]
async fn main() -> Result<(), taskbroker_client::Error> {
    let client = Client::connect(&format!("http://{}", std::env::var("TASKBROKER_ADDR").unwrap())).await?;
    let task = client.submit(TaskSpec::new("emails", b"ada@example.com".to_vec())).await?;
    let result = client.wait(&task.task_id, Duration::from_secs(60)).await?;
    println!("result {}", String::from_utf8_lossy(&result));
    Ok(())
}
RS
cp "$root/Cargo.lock" "$tmp/app/Cargo.lock"
echo "== cargo run (a fresh project depending on the unpacked crate alone)"
out="$(cargo run -q --manifest-path "$tmp/app/Cargo.toml" --bin install-check)"
echo "$out"
[ "$out" = "worker true built" ] || { echo "install check: unexpected output" >&2; exit 1; }

echo "== a worker and a producer against a broker on loopback (target/debug/taskbroker, fresh SQLite)"
cargo build -q --manifest-path "$tmp/app/Cargo.toml" --bins
build_broker
: >"$tmp/stdout"
: >"$tmp/stderr"
start_broker 127.0.0.1:0 127.0.0.1:0
export TASKBROKER_ADDR="$addr"
"$CARGO_TARGET_DIR/debug/install-check-worker" &
worker=$!
out="$(timeout 120 "$CARGO_TARGET_DIR/debug/install-check-producer")" || { kill "$worker"; echo "install check: the producer failed" >&2; exit 1; }
kill -TERM "$worker"
wait "$worker" || { echo "install check: the worker did not stop cleanly on SIGTERM" >&2; exit 1; }
echo "$out"
[ "$out" = "result sent to ada@example.com" ] || { echo "install check: unexpected producer output" >&2; exit 1; }
echo "worker and producer ran against $TASKBROKER_ADDR"
echo "install check: ok"
