#!/usr/bin/env bash
# Checks that the Rust client builds as a user gets it: the committed tree only (`git archive
# HEAD`, so nothing untracked or built locally leaks in), a fresh Cargo project that depends on
# client-rs by path as docs/clients.md says, a five-line program using Client and Worker,
# compiled and run. The project reuses the repository's Cargo.lock (the versions it was tested
# with) and target directory, so only the client itself is compiled again.
# Ends with `install check: ok`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive HEAD | tar -x -C "$tmp" --one-top-level=src
mkdir -p "$tmp/app/src"
cat >"$tmp/app/Cargo.toml" <<TOML
[package]
name = "install-check"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
taskbroker-client = { path = "$tmp/src/client-rs" }
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
cp "$root/Cargo.lock" "$tmp/app/Cargo.lock"
echo "== cargo run (fresh project, client-rs from the committed tree)"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}" cargo run -q --manifest-path "$tmp/app/Cargo.toml"
echo "install check: ok"
