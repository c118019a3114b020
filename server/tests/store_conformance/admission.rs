//! Admission (migration 0009) store cases: stored queue settings and the
//! gated lease, run on both databases by `store_conformance.rs`.

use super::*;
use taskbroker_server::domain::admission::{QueueConfig, RateLimit};

fn keyed_task(n: usize, key: &str) -> NewTask {
    NewTask {
        concurrency_key: Some(key.into()),
        ..task("g", n)
    }
}

pub async fn queue_settings_are_seeded_put_by_version_and_listed(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let paused = QueueConfig {
        paused: true,
        ..QueueConfig::default()
    };
    s.queue_seed(&[
        ("a".into(), paused.clone()),
        ("b".into(), QueueConfig::default()),
    ])
    .await
    .unwrap();
    let listed = s.queue_list().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed[0].config.paused && listed[0].updated_at.is_none());
    // A put over a stale version changes nothing.
    let v = listed[0].version;
    assert!(
        !s.queue_put("a", &QueueConfig::default(), Some(v + 7), t0())
            .await
            .unwrap()
    );
    assert!(
        s.queue_put("a", &QueueConfig::default(), Some(v), t0())
            .await
            .unwrap()
    );
    assert!(!s.queue_put("c", &paused, Some(0), t0()).await.unwrap());
    assert!(s.queue_put("c", &paused, None, t0()).await.unwrap());
    assert!(!s.queue_put("c", &paused, None, t0()).await.unwrap());
    // A new seed replaces earlier seeds but not an operator's change.
    s.queue_seed(&[("a".into(), paused.clone())]).await.unwrap();
    let listed = s.queue_list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    assert!(!listed[0].config.paused);
    assert_eq!(listed[0].updated_at, Some(t0()));
}

pub async fn a_gated_lease_holds_key_limits_and_spends_tokens(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let config = QueueConfig {
        max_concurrent_per_key: 1,
        rate_limit: Some(RateLimit {
            per_second: 1.0,
            burst: 3,
        }),
        ..QueueConfig::default()
    };
    assert!(s.queue_put("g", &config, None, t0()).await.unwrap());
    let tasks: Vec<NewTask> = (1..=10)
        .map(|n| keyed_task(n, if n <= 6 { "x" } else { "y" }))
        .collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let got = s
        .task_lease_gated(&[lease_params("g", 10, t0())])
        .await
        .unwrap()
        .remove(0);
    let keys: Vec<&str> = got
        .iter()
        .filter_map(|t| t.concurrency_key.as_deref())
        .collect();
    // One per key (x's five others never block y), within the burst of 3.
    assert_eq!(keys, ["x", "y"]);
    // The bucket has one token left: one lease, of neither held key.
    let more = s
        .task_lease_gated(&[lease_params("g", 10, t0())])
        .await
        .unwrap()
        .remove(0);
    assert!(more.is_empty());
    let done = CompleteParams {
        task_id: got[0].id.clone(),
        lease_token: got[0].lease_token.clone().unwrap(),
        result: Vec::new(),
        now: t0(),
    };
    assert!(matches!(
        s.task_complete(&done).await.unwrap(),
        Settled::Applied(_)
    ));
    let next = s
        .task_lease_gated(&[lease_params("g", 10, t0())])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(next.len(), 1);
    // Out of tokens now; two seconds bring two.
    let done = CompleteParams {
        task_id: next[0].id.clone(),
        lease_token: next[0].lease_token.clone().unwrap(),
        result: Vec::new(),
        now: t0(),
    };
    s.task_complete(&done).await.unwrap();
    let none = s
        .task_lease_gated(&[lease_params("g", 10, t0())])
        .await
        .unwrap()
        .remove(0);
    assert!(none.is_empty());
    let later = s
        .task_lease_gated(&[lease_params("g", 10, secs_after(2))])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(later.len(), 1, "x is free, y is held: one lease");
}

pub async fn a_gated_lease_never_takes_a_task_twice(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let config = QueueConfig {
        max_concurrent: 1000,
        ..QueueConfig::default()
    };
    s.queue_put("g", &config, None, t0()).await.unwrap();
    let tasks: Vec<NewTask> = (1..=200).map(|n| task("g", n)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    // Gated and plain leases racing over the same rows.
    let mut handles = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let p = [lease_params("g", 7, t0())];
                let batch = if i % 2 == 0 {
                    s.task_lease_gated(&p).await.unwrap().remove(0)
                } else {
                    s.task_lease_many(&p).await.unwrap().remove(0)
                };
                if batch.is_empty() {
                    return got;
                }
                got.extend(batch.into_iter().map(|t| t.id));
            }
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 200);
    assert_eq!(unique.len(), 200);
}

/// Requests served together by one gated lease (admission with
/// routing): each worker gets the first tasks in lease order that it may take and
/// the gates admit. A task meant for one worker is not passed over for plain
/// tasks ranked after it (the defect of an earlier batching), a task no worker
/// of the batch may take blocks nobody, and a full key is skipped.
pub async fn routed_and_plain_tasks_served_together_keep_lease_order_per_worker(b: Backend) {
    use std::collections::BTreeMap;
    use taskbroker_server::domain::routing::{Target, TaskRouting};
    use taskbroker_server::store::LeaseRouting;

    let Some((s, _db)) = open(b).await else {
        return;
    };
    let config = QueueConfig {
        max_concurrent_per_key: 1,
        rate_limit: Some(RateLimit {
            per_second: 1000.0,
            burst: 1000,
        }),
        ..QueueConfig::default()
    };
    s.queue_put("g", &config, None, t0()).await.unwrap();
    let target = |worker: Option<&str>, labels: &[(&str, &str)]| TaskRouting {
        target: Target {
            worker_id: worker.map(str::to_string),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
        ..TaskRouting::default()
    };
    let with = |n: usize, priority: i32, routing: TaskRouting, key: Option<&str>| NewTask {
        priority,
        routing,
        concurrency_key: key.map(str::to_string),
        ..task("g", n)
    };
    let tasks = vec![
        with(1, 9, target(Some("c"), &[]), None),
        with(2, 5, target(Some("a"), &[]), None),
        with(3, 4, TaskRouting::default(), Some("k")),
        with(4, 3, target(None, &[("gpu", "a100")]), None),
        with(5, 2, TaskRouting::default(), Some("k")),
        with(6, 0, TaskRouting::default(), None),
        with(7, 0, TaskRouting::default(), None),
        with(8, 0, TaskRouting::default(), None),
        with(9, 0, TaskRouting::default(), None),
    ];
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let ask = |worker: &str, labels: &[(&str, &str)], max: u32| LeaseParams {
        worker_id: worker.into(),
        routing: LeaseRouting {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            ..LeaseRouting::default()
        },
        ..lease_params("g", max, t0())
    };
    let got = s
        .task_lease_gated(&[
            ask("b", &[("gpu", "a100")], 2),
            ask("a", &[], 2),
            ask("d", &[], 1),
        ])
        .await
        .unwrap();
    let n = |t: &taskbroker_server::store::TaskRecord| {
        t.id.rsplit('-').next().unwrap().parse::<usize>().unwrap()
    };
    let nums: Vec<Vec<usize>> = got.iter().map(|g| g.iter().map(n).collect()).collect();
    // Who may take what: 1 only c (not asking), 2 only a, 4 only b (gpu).
    let may = |t: usize, worker: &str| match t {
        1 => worker == "c",
        2 => worker == "a",
        4 => worker == "b",
        _ => true,
    };
    // Lease order: priority, then submission.
    let rank = |t: usize| (-tasks[t - 1].priority, t);
    let mut all: Vec<usize> = nums.concat();
    all.sort_unstable();
    assert_eq!(all, [2, 3, 4, 6, 7], "{nums:?}");
    let pending: Vec<usize> = (1..=9).filter(|t| !all.contains(t)).collect();
    for ((g, worker), max) in nums.iter().zip(["b", "a", "d"]).zip([2, 2, 1]) {
        assert!(g.iter().all(|&t| may(t, worker)), "{worker}: {nums:?}");
        // A worker's tasks come first in lease order among all it may take: no
        // task left pending (but 5, whose key 3 holds) ranks before one it got,
        // and a worker that got less than it asked for left none behind.
        let last = g.iter().map(|&t| rank(t)).max();
        for &t in pending.iter().filter(|&&t| t != 5 && may(t, worker)) {
            assert!(g.len() == max, "{worker} got {g:?}, {t} waits");
            assert!(Some(rank(t)) > last, "{worker} got {g:?} before {t}");
        }
    }
    // Every lease was written for the worker that asked.
    for (g, worker) in got.iter().zip(["b", "a", "d"]) {
        assert!(g.iter().all(|t| t.leased_by.as_deref() == Some(worker)));
    }
    // Two requests of one worker share its cap: together they get one more.
    let capped = |max: u32| LeaseParams {
        routing: LeaseRouting {
            max_leases_per_worker: BTreeMap::from([("g".to_string(), 3)]),
            ..LeaseRouting::default()
        },
        ..ask("a", &[], max)
    };
    let held = nums[1].len();
    let more = s.task_lease_gated(&[capped(5), capped(5)]).await.unwrap();
    let nums: Vec<usize> = more.iter().flatten().map(n).collect();
    assert_eq!(held + nums.len(), 3, "a's cap is 3: {nums:?}");
    assert_eq!(nums, [8, 9][..3 - held], "in lease order");
}

/// Requests of one worker served in one gated batch share its
/// `max_leases_per_worker`: together they get `cap - held`, handed out in turn
/// with the batch's other requests (not the first request filled first).
pub async fn requests_of_one_worker_in_a_gated_batch_share_its_cap_in_turn(b: Backend) {
    use taskbroker_server::store::LeaseRouting;
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let config = QueueConfig {
        rate_limit: Some(RateLimit {
            per_second: 1000.0,
            burst: 1000,
        }),
        ..QueueConfig::default()
    };
    s.queue_put("g", &config, None, t0()).await.unwrap();
    let tasks: Vec<NewTask> = (1..=8).map(|n| task("g", n)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let ask = |worker: &str, cap: Option<u32>, max: u32| LeaseParams {
        worker_id: worker.into(),
        routing: LeaseRouting {
            max_leases_per_worker: cap
                .map(|c| BTreeMap::from([("g".to_string(), c)]))
                .unwrap_or_default(),
            ..LeaseRouting::default()
        },
        ..lease_params("g", max, t0())
    };
    let n = |t: &taskbroker_server::store::TaskRecord| {
        t.id.rsplit('-').next().unwrap().parse::<usize>().unwrap()
    };
    // a holds one lease of its cap of 4.
    let first = s.task_lease_gated(&[ask("a", Some(4), 1)]).await.unwrap();
    assert_eq!(first[0].iter().map(n).collect::<Vec<_>>(), [1]);
    let got = s
        .task_lease_gated(&[
            ask("a", Some(4), 3),
            ask("b", None, 2),
            ask("a", Some(4), 3),
        ])
        .await
        .unwrap();
    let nums: Vec<Vec<usize>> = got.iter().map(|g| g.iter().map(n).collect()).collect();
    // In turn: 2 a, 3 b, 4 a, 5 a (a's room of 3 is used up), 6 b; 7 and 8 wait.
    assert_eq!(nums, [vec![2, 5], vec![3, 6], vec![4]]);
    for (g, worker) in got.iter().zip(["a", "b", "a"]) {
        assert!(g.iter().all(|t| t.leased_by.as_deref() == Some(worker)));
    }
}

/// Retention deletes a per-key bucket once it is full again (absent is full),
/// and keeps one that still counts.
pub async fn key_buckets_full_again_are_purged(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let config = QueueConfig {
        per_key_rate_limit: Some(RateLimit {
            per_second: 1.0,
            burst: 2,
        }),
        ..QueueConfig::default()
    };
    s.queue_put("g", &config, None, t0()).await.unwrap();
    let tasks: Vec<NewTask> = (1..=4)
        .map(|n| keyed_task(n, if n <= 2 { "x" } else { "y" }))
        .collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    // x spends both tokens, y one.
    let got = s
        .task_lease_gated(&[lease_params("g", 3, t0())])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(got.len(), 3);
    assert_eq!(s.queue_key_tokens_purge(t0()).await.unwrap(), 0);
    // After a second y is full again (1 + 1), x is not (0 + 1).
    assert_eq!(s.queue_key_tokens_purge(secs_after(1)).await.unwrap(), 1);
    let usage = s.queue_usage("g", Some("x"), secs_after(1)).await.unwrap();
    assert_eq!(usage.key_tokens, Some(1.0));
    let usage = s.queue_usage("g", Some("y"), secs_after(1)).await.unwrap();
    assert_eq!(usage.key_tokens, Some(2.0));
    // Without a per-key rate limit no bucket is kept.
    s.queue_put("g", &QueueConfig::default(), Some(1), secs_after(1))
        .await
        .unwrap();
    assert_eq!(s.queue_key_tokens_purge(secs_after(1)).await.unwrap(), 1);
}
