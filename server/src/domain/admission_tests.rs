//! Unit tests of the admission rules: rate-limit buckets, gates, admit, explain.

use super::*;

/// Leases of one rate-limited queue over simulated time (whole
/// milliseconds, as the stores keep it), as the stores and the long-poll run
/// them: each look refills the bucket to `now` (`refill`), takes a token
/// when `budget` allows, and writes the bucket back at `now`. Of `workers`,
/// one granted a task comes back after a random delay, one that found no
/// token looks again after `wait(tokens)`. Returns the grant times in
/// `span_ms`.
fn simulate(
    limit: RateLimit,
    workers: usize,
    seed: u64,
    span_ms: i64,
    wait: impl Fn(f64) -> i64,
) -> Vec<i64> {
    let mut rng = seed.max(1);
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let usage = |tokens| QueueUse {
        tokens: Some(tokens),
        ..QueueUse::default()
    };
    let (mut tokens, mut refilled_at) = (0.0, 0_i64);
    let mut looks: Vec<i64> = (0..workers).map(|_| 1 + next(20) as i64).collect();
    let mut granted = Vec::new();
    loop {
        let (w, now) = looks
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, at)| at)
            .unwrap();
        if now >= span_ms {
            return granted;
        }
        let t = limit.refill(tokens, refilled_at, now);
        if usage(t).budget(1) == 1 {
            (tokens, refilled_at) = (t - 1.0, now);
            granted.push(now);
            looks[w] = now + 1 + next(12) as i64;
        } else {
            (tokens, refilled_at) = (t, now);
            looks[w] = now + wait(t).max(1);
        }
    }
}

#[test]
fn waiting_for_the_next_token_keeps_the_rate_at_every_burst() {
    for seed in 1..48_u64 {
        let per_second = [3.0, 20.0, 33.3, 50.0][seed as usize % 4];
        let burst = [1, 2, 5, 0][(seed / 4) as usize % 4];
        let limit = RateLimit { per_second, burst };
        let span = 20_000;
        let workers = 1 + (seed as usize % 3) * 2;
        let times = simulate(limit, workers, seed, span, |t| {
            i64::try_from(limit.wait_for_token(t).as_millis()).unwrap()
        });
        // Never more than the rate allows from the start to any grant...
        for (i, at) in times.iter().enumerate() {
            let allowed = per_second * *at as f64 / 1000.0 + limit.capacity();
            assert!(
                (i + 1) as f64 <= allowed + 1e-6,
                "{limit:?} {workers} workers seed {seed}: {} grants by {at} ms",
                i + 1
            );
        }
        // ...and within 1% of it in all.
        let ideal = per_second * span as f64 / 1000.0;
        let n = times.len() as f64;
        assert!(
            n >= ideal * 0.99,
            "{limit:?} {workers} workers seed {seed}: {n} grants, the rate allows {ideal:.0}"
        );
    }
    // Looks that come late do not cost the rate at burst 1 either: a fixed
    // look-again period of one interval, or the token's time plus up to 15 ms
    // (a long-poll's statement and timer), keep the bucket's schedule.
    for per_second in [20.0, 50.0] {
        let limit = RateLimit {
            per_second,
            burst: 1,
        };
        let interval = (1000.0 / per_second) as i64;
        let n = simulate(limit, 1, 3, 20_000, |_| interval).len() as f64;
        assert!(
            n >= per_second * 20.0 * 0.99,
            "{n} grants with a fixed {interval} ms look"
        );
        let lateness = std::cell::Cell::new(0_i64);
        let n = simulate(limit, 8, 5, 20_000, |t| {
            lateness.set((lateness.get() + 7) % 16);
            i64::try_from(limit.wait_for_token(t).as_millis()).unwrap() + lateness.get()
        })
        .len() as f64;
        assert!(
            n >= per_second * 20.0 * 0.99,
            "{n} grants with late looks at {per_second}/s"
        );
    }
}

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

/// One look at a bucket at `now`: refilled, and a token taken when there is a
/// whole one (as the gated leases write it back).
fn look(limit: &RateLimit, bucket: &mut (f64, i64), now: i64) -> bool {
    let t = limit.refill(bucket.0, bucket.1, now);
    let granted = whole_tokens(t) >= 1.0;
    *bucket = (if granted { t - 1.0 } else { t }, now);
    granted
}

#[test]
fn a_late_look_takes_its_token_and_the_next_comes_on_schedule() {
    // 50 a second, burst 1: a token every 20 ms from 1,000.
    let limit = RateLimit {
        per_second: 50.0,
        burst: 1,
    };
    let mut bucket = (1.0, 1_000);
    // Each look comes late by 0 to 15 ms, the lateness going up and down.
    let late = [12, 3, 15, 0, 9, 1, 14, 2, 7, 7, 13, 0];
    for (k, d) in late.iter().enumerate() {
        let due = 1_000 + 20 * k as i64;
        assert!(
            look(&limit, &mut bucket, due + d),
            "the token due at {due} is there {d} ms late (grant {k})"
        );
        // Not a token before the next is due: burst 1 holds.
        assert!(!look(&limit, &mut bucket, due + 19));
        let t = limit.refill(bucket.0, bucket.1, due + 19);
        assert_eq!(limit.next_token_ms(t, due + 19), due + 20, "on schedule");
    }
    // 240 ms of grants on schedule: twelve in twelve intervals.
}

#[test]
fn a_bucket_full_for_a_whole_interval_starts_its_schedule_over() {
    let limit = RateLimit {
        per_second: 50.0,
        burst: 1,
    };
    // Full at 1,000; not looked at until 1,500: one token, not twenty-five,
    // and the next is due 20 ms after this grant.
    let mut bucket = (1.0, 1_000);
    assert!(look(&limit, &mut bucket, 1_500));
    assert!(!look(&limit, &mut bucket, 1_501));
    let t = limit.refill(bucket.0, bucket.1, 1_501);
    assert_eq!(limit.next_token_ms(t, 1_501), 1_520);
    // And never more than burst whole tokens, however the accrual falls.
    for burst in [1, 3] {
        let l = RateLimit {
            per_second: 33.3,
            burst,
        };
        for at in 1_000..1_200 {
            assert!(whole_tokens(l.refill(0.0, 1_000, at)) <= f64::from(burst));
        }
    }
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
