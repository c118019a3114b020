//! Unit tests of the admission rules: rate-limit buckets, gates, admit, explain.

use super::*;

fn cand(seq: i64, key: Option<&str>) -> Candidate {
    Candidate {
        seq,
        key: key.map(str::to_string),
        order: (0, 1, i64::MAX, 0, seq),
        size: 10,
    }
}

#[test]
fn a_full_key_is_skipped_and_the_keys_behind_it_are_taken() {
    let mut usage = QueueUse {
        config: QueueConfig {
            max_concurrent_per_key: 1,
            ..QueueConfig::default()
        },
        ..QueueUse::default()
    };
    usage.leased_per_key.insert("a".into(), 1);
    let cands = [
        cand(1, Some("a")),
        cand(2, Some("b")),
        cand(3, Some("b")),
        cand(4, None),
    ];
    let (picks, closed) = admit(&cands, &usage, 10, &mut HashMap::new());
    assert_eq!(picks, vec![1, 3]);
    assert_eq!(closed, vec!["a".to_string(), "b".to_string()]);
}

#[test]
fn the_budget_counts_pause_concurrency_and_tokens() {
    let mut usage = QueueUse {
        config: QueueConfig {
            max_concurrent: 5,
            ..QueueConfig::default()
        },
        leased: 3,
        ..QueueUse::default()
    };
    assert_eq!(usage.budget(10), 2);
    usage.tokens = Some(1.7);
    assert_eq!(usage.budget(10), 1);
    usage.config.paused = true;
    assert_eq!(usage.budget(10), 0);
}

#[test]
fn a_bucket_refills_at_its_rate_up_to_its_burst() {
    let l = RateLimit {
        per_second: 10.0,
        burst: 0,
    };
    assert_eq!(l.capacity(), 10.0);
    assert_eq!(l.refill(0.0, 1_000, 1_000), 0.0);
    assert!((l.refill(0.0, 1_000, 1_250) - 2.5).abs() < 1e-9);
    assert_eq!(l.refill(0.0, 1_000, 60_000), 10.0);
    assert_eq!(l.refill(3.0, 0, 5), 10.0);
    assert_eq!(l.next_token_ms(0.5, 1_000), 1_050);
}

#[test]
fn aging_adds_one_per_step_waited() {
    assert_eq!(effective_priority(-10, 0, 10_000, Some(1_000)), 0);
    assert_eq!(effective_priority(-10, 0, 10_000, None), -10);
    assert_eq!(effective_priority(5, 20_000, 10_000, Some(1_000)), 5);
}

#[test]
fn concurrency_keys_allow_their_characters_only() {
    assert!(concurrency_key("k", "user@example.com/a:b-c_d.e").is_ok());
    assert!(concurrency_key("k", "a b").is_err());
    assert!(concurrency_key("k", &"x".repeat(257)).is_err());
}
