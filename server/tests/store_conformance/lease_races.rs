//! Leases racing on both stores: several leasers at once, plain and gated,
//! over a queue that mixes plain tasks, tasks targeted at one worker, distinct
//! fan-out copies and tasks scheduled for later at a higher priority.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use taskbroker_server::domain::admission::QueueConfig;
use taskbroker_server::domain::routing::{Target, TaskRouting};
use taskbroker_server::store::{LeaseParams, NewTask, Store};

use super::{lease_params, open, t0, task, uuid_like};
use crate::common::Backend;

const GROUPS: usize = 10;
const WORKERS: usize = 4;

fn with(n: usize, routing: TaskRouting) -> NewTask {
    NewTask {
        routing,
        ..task("race", n)
    }
}

/// 10 groups of 4 distinct copies (ids 1..=40), 40 plain tasks (101..=140),
/// 20 tasks for worker w1 (201..=220), 100 tasks of priority 9 an hour later
/// (301..=400).
fn tasks() -> Vec<NewTask> {
    let mut out = Vec::new();
    for g in 0..GROUPS {
        for c in 0..WORKERS {
            out.push(with(
                1 + g * WORKERS + c,
                TaskRouting {
                    fanout_group: Some(uuid_like(1 + g * WORKERS)),
                    fanout_distinct: true,
                    ..TaskRouting::default()
                },
            ));
        }
    }
    out.extend((101..=140).map(|n| task("race", n)));
    out.extend((201..=220).map(|n| {
        with(
            n,
            TaskRouting {
                target: Target {
                    worker_id: Some("w1".into()),
                    labels: Default::default(),
                },
                ..TaskRouting::default()
            },
        )
    }));
    out.extend((301..=400).map(|n| NewTask {
        priority: 9,
        run_at: t0() + chrono::Duration::hours(1),
        ..task("race", n)
    }));
    out
}

/// Eight leasers, two per worker id (one gated, one plain), each leasing up to
/// three tasks at a time and holding them, then each worker in turn taking
/// what is left: no task is leased twice, no worker gets two copies of a group,
/// the targeted tasks go to w1 only, the scheduled ones to nobody, and
/// everything else is leased.
pub async fn racing_leasers_keep_fanout_copies_distinct_and_every_task_single(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // A gate that admits everything: the gated leasers take the gated lease.
    let config = QueueConfig {
        max_concurrent: 10_000,
        ..QueueConfig::default()
    };
    s.queue_put("race", &config, None, t0()).await.unwrap();
    for chunk in tasks().chunks(50) {
        s.task_insert_many(chunk, t0()).await.unwrap();
    }
    let mut handles = Vec::new();
    for i in 0..WORKERS * 2 {
        let s: Arc<dyn Store> = s.clone();
        handles.push(tokio::spawn(async move {
            let worker = format!("w{}", i % WORKERS);
            let mut got = Vec::new();
            let mut empty = 0;
            while empty < 3 {
                let p = [LeaseParams {
                    worker_id: worker.clone(),
                    ..lease_params("race", 3, t0())
                }];
                let batch = if i < WORKERS {
                    s.task_lease_gated(&p).await.unwrap().remove(0)
                } else {
                    s.task_lease_many(&p).await.unwrap().remove(0)
                };
                if batch.is_empty() {
                    empty += 1;
                    tokio::task::yield_now().await;
                }
                got.extend(batch.into_iter().map(|t| (worker.clone(), t)));
            }
            got
        }));
    }
    let mut leased = Vec::new();
    for h in handles {
        leased.extend(h.await.unwrap());
    }
    // A leaser may stop while tasks are left for its worker: a lease that found
    // its candidates taken by another one comes back empty (the gated lease of
    // MySQL reads its candidates without locking them, then finds them gone).
    // One worker at a time then takes what is left, so a task the race leased
    // and never returned (or left stuck) still shows as missing below.
    for w in 0..WORKERS {
        let worker = format!("w{w}");
        loop {
            let p = [LeaseParams {
                worker_id: worker.clone(),
                ..lease_params("race", 3, t0())
            }];
            let batch = s.task_lease_many(&p).await.unwrap().remove(0);
            if batch.is_empty() {
                break;
            }
            leased.extend(batch.into_iter().map(|t| (worker.clone(), t)));
        }
    }
    let mut once = HashSet::new();
    let mut copies: HashMap<(String, String), usize> = HashMap::new();
    for (worker, t) in &leased {
        assert!(once.insert(t.id.clone()), "{} leased twice", t.id);
        assert_eq!(t.leased_by.as_deref(), Some(worker.as_str()));
        if let Some(g) = &t.routing.fanout_group {
            let n = copies.entry((worker.clone(), g.clone())).or_default();
            *n += 1;
            assert_eq!(*n, 1, "{worker} got two copies of {g}");
        }
        if t.routing.target.worker_id.is_some() {
            assert_eq!(worker, "w1", "{} went to {worker}", t.id);
        }
        assert_ne!(t.priority, 9, "a scheduled task was leased early: {}", t.id);
    }
    // 40 copies (each worker one of each group), 40 plain, 20 for w1.
    assert_eq!(leased.len(), 100, "{} leased", leased.len());
    assert_eq!(copies.len(), GROUPS * WORKERS);
}
