//! Replays every input the fuzzers kept (`fuzz/regressions/<target>/`), and the
//! seeds they start from (`fuzz/seeds/<target>/`), through the fuzz targets' own
//! harness (`fuzz/src/harness.rs`), so an input that once crashed the broker stays
//! fixed without nightly or cargo-fuzz.

#[path = "../../fuzz/src/harness.rs"]
mod harness;

use std::path::PathBuf;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    saved(&["seeds", "regressions"], target)
}

fn saved(kinds: &[&str], target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out: Vec<PathBuf> = kinds
        .iter()
        .flat_map(|kind| {
            std::fs::read_dir(fuzz.join(kind).join(target))
                .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
                .unwrap_or_else(|_| Vec::new())
        })
        .collect();
    out.sort();
    out.into_iter()
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read a saved input");
            (p, bytes)
        })
        .collect()
}

#[test]
fn saved_rpc_inputs_are_answered_with_clear_statuses() {
    let saved = inputs("rpc_requests");
    for (path, bytes) in &saved {
        eprintln!("replaying {}", path.display());
        harness::rpc_request(bytes);
    }
    eprintln!("{} rpc inputs replayed", saved.len());
}

#[test]
fn saved_config_inputs_load_or_fail_in_one_line() {
    let saved = inputs("config_loader");
    for (path, bytes) in &saved {
        eprintln!("replaying {}", path.display());
        harness::config_file(bytes);
    }
    eprintln!("{} config inputs replayed", saved.len());
}

#[test]
fn saved_submit_expansion_inputs_stay_within_the_limits() {
    let saved = inputs("submit_expansion");
    for (path, bytes) in &saved {
        eprintln!("replaying {}", path.display());
        harness::submit_expansion(bytes);
    }
    assert!(!saved.is_empty(), "seeds of submit_expansion");
    eprintln!("{} submit_expansion inputs replayed", saved.len());
}
