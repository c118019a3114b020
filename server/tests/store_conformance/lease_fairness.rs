//! Round-robin fairness across lease calls, run on both databases by
//! `store_conformance.rs`: turns persist from one lease to the next (whatever
//! `max_tasks` is), a multi-task lease comes back in turn order, and the tasks
//! counted ahead of a task (Explain) are those the next leases would take first.

use std::collections::HashMap;

use super::*;
use taskbroker_server::domain::admission::{Fairness, QueueConfig};

fn fair() -> QueueConfig {
    QueueConfig {
        fairness: Fairness::RoundRobinKeys,
        ..QueueConfig::default()
    }
}

fn keyed(n: usize, key: &str) -> NewTask {
    NewTask {
        concurrency_key: Some(key.into()),
        ..task("g", n)
    }
}

async fn lease_keys(s: &Arc<dyn Store>, max: u32) -> Vec<String> {
    s.task_lease_gated(&[lease_params("g", max, t0())])
        .await
        .unwrap()
        .remove(0)
        .into_iter()
        .map(|t| t.concurrency_key.unwrap_or_default())
        .collect()
}

pub async fn round_robin_turns_persist_across_single_task_leases(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    assert!(s.queue_put("g", &fair(), None, t0()).await.unwrap());
    let mut tasks: Vec<NewTask> = (1..=10).map(|n| keyed(n, "big")).collect();
    tasks.extend((11..=12).map(|n| keyed(n, "small")));
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let small = s.task_get(&uuid_like(11)).await.unwrap().unwrap();
    // Before any lease: the first big task (submitted first) leads the round.
    assert_eq!(s.task_ahead(&small, None, t0()).await.unwrap(), 1);
    let mut served = Vec::new();
    for _ in 0..3 {
        served.extend(lease_keys(&s, 1).await);
    }
    assert_eq!(served, ["big", "small", "big"]);
    // "small" was served longest ago: its last task leads now.
    let last_small = s.task_get(&uuid_like(12)).await.unwrap().unwrap();
    assert_eq!(s.task_ahead(&last_small, None, t0()).await.unwrap(), 0);
    let next_big = s.task_get(&uuid_like(3)).await.unwrap().unwrap();
    assert_eq!(s.task_ahead(&next_big, None, t0()).await.unwrap(), 1);
    let second_big = s.task_get(&uuid_like(4)).await.unwrap().unwrap();
    assert_eq!(s.task_ahead(&second_big, None, t0()).await.unwrap(), 2);
    for _ in 0..2 {
        served.extend(lease_keys(&s, 1).await);
    }
    assert_eq!(served, ["big", "small", "big", "small", "big"]);
}

pub async fn a_multi_task_round_robin_lease_comes_in_turn_order(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    assert!(s.queue_put("g", &fair(), None, t0()).await.unwrap());
    let mut tasks: Vec<NewTask> = (1..=4).map(|n| keyed(n, "big")).collect();
    tasks.extend((5..=6).map(|n| keyed(n, "small")));
    s.task_insert_many(&tasks, t0()).await.unwrap();
    assert_eq!(lease_keys(&s, 3).await, ["big", "small", "big"]);
    // The turns carry over: "small" was served before "big"'s second task.
    assert_eq!(lease_keys(&s, 1).await, ["small"]);
    assert_eq!(lease_keys(&s, 2).await, ["big", "big"]);
}

/// A small deterministic generator (xorshift), so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// With random key populations drained by leases of random sizes, the
/// sequence served is round robin by key: at every point, two keys that still
/// had READY tasks were served a number of times differing by at most one, and
/// within a key the tasks go in submission order.
pub async fn random_key_populations_are_served_round_robin_across_leases(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    assert!(s.queue_put("g", &fair(), None, t0()).await.unwrap());
    let mut n = 0;
    for seed in [7_u64, 4242, 90_001] {
        let mut rng = Rng(seed);
        let keys = 2 + rng.below(4) as usize;
        let mut left: HashMap<String, usize> = HashMap::new();
        let mut tasks = Vec::new();
        for k in 0..keys {
            let key = format!("k{seed}-{k}");
            let count = 1 + rng.below(12) as usize;
            left.insert(key.clone(), count);
            for _ in 0..count {
                n += 1;
                tasks.push(keyed(n, &key));
            }
        }
        // Interleave the submissions of the keys at random.
        for i in (1..tasks.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            tasks.swap(i, j);
        }
        for (i, t) in tasks.iter_mut().enumerate() {
            t.id = uuid_like(n * 1000 + i);
        }
        s.task_insert_many(&tasks, t0()).await.unwrap();
        let total: usize = left.values().sum();
        let mut served: HashMap<String, usize> = HashMap::new();
        let mut last_seq: HashMap<String, i64> = HashMap::new();
        let mut got = 0;
        while got < total {
            let max = 1 + rng.below(4) as u32;
            let leased = s
                .task_lease_gated(&[lease_params("g", max, t0())])
                .await
                .unwrap()
                .remove(0);
            assert!(!leased.is_empty(), "seed {seed}: READY tasks left");
            for t in leased {
                got += 1;
                let key = t.concurrency_key.clone().unwrap();
                // Keys with READY tasks before this one was taken.
                let open: Vec<&String> = left
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(k, _)| k)
                    .collect();
                let mine = served.get(&key).copied().unwrap_or(0);
                for k in open {
                    let theirs = served.get(k).copied().unwrap_or(0);
                    assert!(
                        mine <= theirs,
                        "seed {seed}: {key} served {mine}+1 times while {k} had {theirs}"
                    );
                }
                assert!(
                    last_seq.get(&key).is_none_or(|&s| s < t.seq),
                    "seed {seed}: {key}'s tasks out of submission order"
                );
                last_seq.insert(key.clone(), t.seq);
                *served.entry(key.clone()).or_default() += 1;
                *left.get_mut(&key).unwrap() -= 1;
            }
        }
    }
}
