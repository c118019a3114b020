//! Routing on both stores: fan-out copies to distinct workers and the per-worker
//! cap, each alone and combined with targets and sticky retries, through one lease
//! and through a batch of lease requests served together.

use super::*;

fn copies(queue: &str, first: usize, n: usize, distinct: bool) -> Vec<NewTask> {
    (first..first + n)
        .map(|i| {
            routed(
                queue,
                i,
                TaskRouting {
                    fanout_group: Some(uuid_like(first)),
                    fanout_distinct: distinct,
                    ..TaskRouting::default()
                },
            )
        })
        .collect()
}

pub async fn six_copies_to_twenty_workers_are_each_done_once_by_six_workers(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&copies("f", 1, 6, true), t0())
        .await
        .unwrap();
    let workers: Vec<String> = (0..20).map(|w| format!("w{w:02}")).collect();
    // Every worker asks for as many as there are, all served together by one
    // store call, twice (the second time after completing).
    let ask = |now| -> Vec<LeaseParams> {
        workers
            .iter()
            .map(|w| worker("f", w, &[], 6, now))
            .collect()
    };
    let mut done_by: HashMap<String, String> = HashMap::new();
    for round in 0..3 {
        let now = at(round);
        let leased = s.task_lease_many(&ask(now)).await.unwrap();
        for (w, got) in workers.iter().zip(&leased) {
            assert!(got.len() <= 1, "{w} got {} copies at once", got.len());
            for t in got {
                assert!(done_by.insert(t.id.clone(), w.clone()).is_none());
                complete(&s, t, now).await;
            }
        }
    }
    assert_eq!(done_by.len(), 6, "{done_by:?}");
    let distinct: HashSet<&String> = done_by.values().collect();
    assert_eq!(distinct.len(), 6, "{done_by:?}");
    let group = s
        .task_list(&store::TaskFilter {
            fanout_group: Some(uuid_like(1)),
            limit: 100,
            now: at(3),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(group.len(), 6);
    assert!(
        group
            .iter()
            .all(|t| t.state == taskbroker_server::domain::StoredState::Succeeded)
    );
}

pub async fn a_worker_that_completed_a_copy_never_gets_another(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&copies("f", 1, 3, true), t0())
        .await
        .unwrap();
    // Not distinct: copies of another group go to anyone.
    s.task_insert_many(&copies("f", 11, 2, false), t0())
        .await
        .unwrap();
    let first = lease(&s, worker("f", "a", &[], 10, t0())).await;
    // One copy of the distinct group, both of the other.
    assert_eq!(ids(&first), [uuid_like(1), uuid_like(11), uuid_like(12)]);
    // While holding it, and after completing it: nothing more of the group.
    assert!(lease(&s, worker("f", "a", &[], 10, at(1))).await.is_empty());
    complete(&s, &first[0], at(2)).await;
    assert!(lease(&s, worker("f", "a", &[], 10, at(3))).await.is_empty());
    let b1 = lease(&s, worker("f", "b", &[], 10, at(4))).await;
    assert_eq!(ids(&b1), [uuid_like(2)]);
    let c1 = lease(&s, worker("f", "c", &[], 10, at(4))).await;
    assert_eq!(ids(&c1), [uuid_like(3)]);
    // A failed copy may come back to the worker that failed it, though.
    fail(&s, &b1[0], false, at(5)).await;
    assert!(lease(&s, worker("f", "a", &[], 10, at(6))).await.is_empty());
    assert!(lease(&s, worker("f", "c", &[], 10, at(6))).await.is_empty());
    assert_eq!(
        ids(&lease(&s, worker("f", "b", &[], 10, at(6))).await),
        [uuid_like(2)]
    );
}

fn capped(queue: &str, id: &str, max: u32, cap: u32, now: DateTime<Utc>) -> LeaseParams {
    LeaseParams {
        routing: LeaseRouting {
            max_leases_per_worker: BTreeMap::from([(queue.to_string(), cap)]),
            ..LeaseRouting::default()
        },
        ..worker(queue, id, &[], max, now)
    }
}

pub async fn a_worker_never_holds_more_leases_of_a_queue_than_its_cap(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let tasks: Vec<NewTask> = (1..=8).map(|n| task("c", n)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let a = lease(&s, capped("c", "a", 5, 2, t0())).await;
    assert_eq!(a.len(), 2);
    assert!(lease(&s, capped("c", "a", 5, 2, at(1))).await.is_empty());
    complete(&s, &a[0], at(2)).await;
    assert_eq!(lease(&s, capped("c", "a", 5, 2, at(3))).await.len(), 1);
    // Served together: each request within its own cap.
    let batch = s
        .task_lease_many(&[
            capped("c", "a", 5, 2, at(4)),
            capped("c", "b", 5, 2, at(4)),
            capped("c", "d", 5, 2, at(4)),
        ])
        .await
        .unwrap();
    let counts: Vec<usize> = batch.iter().map(Vec::len).collect();
    assert_eq!(counts, [0, 2, 2]);
    // Another queue without a cap is not limited by it.
    s.task_insert_many(
        &[task("other", 20), task("other", 21), task("other", 22)],
        at(5),
    )
    .await
    .unwrap();
    let mut both = capped("c", "a", 5, 2, at(5));
    both.queues = vec!["c".into(), "other".into()];
    assert_eq!(lease(&s, both).await.len(), 3);
}

pub async fn requests_served_together_get_only_tasks_they_may_take(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // In lease order: two GPU tasks, one for w3 only, then plain ones.
    let mut tasks = vec![
        NewTask {
            priority: 3,
            ..routed("m", 1, for_labels(&[("gpu", "a100")]))
        },
        NewTask {
            priority: 3,
            ..routed("m", 2, for_labels(&[("gpu", "a100")]))
        },
        NewTask {
            priority: 2,
            ..routed("m", 3, for_worker("w3"))
        },
    ];
    tasks.extend((4..=7).map(|n| task("m", n)));
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let ps = [
        worker("m", "w1", &[], 2, t0()),
        worker("m", "w2", &[("gpu", "a100")], 1, t0()),
        worker("m", "w3", &[], 1, t0()),
    ];
    let leased = s.task_lease_many(&ps).await.unwrap();
    for (p, got) in ps.iter().zip(&leased) {
        for t in got {
            assert!(
                t.routing.target.admits(&p.worker_id, &p.routing.labels),
                "{} got {} ({:?})",
                p.worker_id,
                t.id,
                t.routing.target
            );
            assert_eq!(t.leased_by.as_deref(), Some(p.worker_id.as_str()));
            // Within max_tasks.
            assert!(got.len() <= p.max_tasks as usize);
        }
    }
    let all: Vec<String> = leased.iter().flat_map(|g| ids(g)).collect();
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "a task leased twice: {all:?}");
    // The GPU worker got a GPU task; w3 its own.
    assert_eq!(leased[1].len(), 1);
    assert!(leased[1][0].id == uuid_like(1) || leased[1][0].id == uuid_like(2));
    assert_eq!(ids(&leased[2]), [uuid_like(3)]);
}

pub async fn targets_sticky_fanout_and_caps_combine(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // Four copies for GPU workers in the EU, each worker once, sticky HARD.
    let rule = |n| {
        routed(
            "x",
            n,
            TaskRouting {
                target: Target {
                    worker_id: None,
                    labels: labels(&[("gpu", "a100"), ("region", "eu")]),
                },
                sticky: Some(Sticky::Hard),
                fanout_group: Some(uuid_like(1)),
                fanout_distinct: true,
                ..TaskRouting::default()
            },
        )
    };
    s.task_insert_many(&(1..=4).map(rule).collect::<Vec<_>>(), t0())
        .await
        .unwrap();
    s.task_insert_many(&[task("x", 9)], t0()).await.unwrap();
    let gpu = [("gpu", "a100"), ("region", "eu")];
    let w = |id: &str, now| LeaseParams {
        routing: LeaseRouting {
            labels: labels(&gpu),
            max_leases_per_worker: BTreeMap::from([("x".to_string(), 1)]),
        },
        ..worker("x", id, &gpu, 5, now)
    };
    // Cap 1: g1 gets one copy, not the plain task too.
    let g1 = lease(&s, w("g1", t0())).await;
    assert_eq!(ids(&g1), [uuid_like(1)]);
    // A US GPU worker gets only the plain task.
    let us = lease(
        &s,
        worker("x", "us", &[("gpu", "a100"), ("region", "us")], 5, t0()),
    )
    .await;
    assert_eq!(ids(&us), [uuid_like(9)]);
    // g1 fails its copy: HARD-reserved for g1. The other copies go one to
    // each other worker; the failed one waits for g1.
    fail(&s, &g1[0], false, at(1)).await;
    assert_eq!(ids(&lease(&s, w("g2", at(2))).await), [uuid_like(2)]);
    assert_eq!(ids(&lease(&s, w("g3", at(3))).await), [uuid_like(3)]);
    assert_eq!(ids(&lease(&s, w("g4", at(4))).await), [uuid_like(4)]);
    assert!(lease(&s, w("g5", at(5))).await.is_empty());
    assert_eq!(ids(&lease(&s, w("g1", at(6))).await), [uuid_like(1)]);
}
