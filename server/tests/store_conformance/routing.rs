//! Routing on both stores: targets by worker id and by labels,
//! sticky reservations (SOFT and HARD, and `prefer_same_worker`), fan-out copies
//! to distinct workers, the per-worker cap, each alone and combined, through one
//! lease and through a batch of lease requests served together.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use taskbroker_server::domain::routing::{Sticky, Target, TaskRouting};
use taskbroker_server::store::{
    self, CompleteParams, FailParams, LeaseParams, LeaseRouting, NewTask, Settled, Store,
    TaskRecord, WorkerFilter, WorkerSeen,
};

use super::{lease_params, open, t0, task, uuid_like};
use crate::common::Backend;

fn at(secs: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(secs)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn routed(queue: &str, n: usize, routing: TaskRouting) -> NewTask {
    NewTask {
        routing,
        ..task(queue, n)
    }
}

fn for_worker(id: &str) -> TaskRouting {
    TaskRouting {
        target: Target {
            worker_id: Some(id.into()),
            labels: BTreeMap::new(),
        },
        ..TaskRouting::default()
    }
}

fn for_labels(pairs: &[(&str, &str)]) -> TaskRouting {
    TaskRouting {
        target: Target {
            worker_id: None,
            labels: labels(pairs),
        },
        ..TaskRouting::default()
    }
}

/// A lease request of `worker` with `labels`, at `now`.
fn worker(
    queue: &str,
    id: &str,
    pairs: &[(&str, &str)],
    max: u32,
    now: DateTime<Utc>,
) -> LeaseParams {
    LeaseParams {
        worker_id: id.into(),
        routing: LeaseRouting {
            labels: labels(pairs),
            ..LeaseRouting::default()
        },
        ..lease_params(queue, max, now)
    }
}

fn ids(tasks: &[TaskRecord]) -> Vec<String> {
    tasks.iter().map(|t| t.id.clone()).collect()
}

async fn lease(s: &Arc<dyn Store>, p: LeaseParams) -> Vec<TaskRecord> {
    s.task_lease_available(&p).await.unwrap()
}

async fn complete(s: &Arc<dyn Store>, t: &TaskRecord, now: DateTime<Utc>) {
    let done = s
        .task_complete(&CompleteParams {
            task_id: t.id.clone(),
            lease_token: t.lease_token.clone().unwrap(),
            result: Vec::new(),
            now,
        })
        .await
        .unwrap();
    assert!(matches!(done, Settled::Applied(_)), "{done:?}");
}

async fn fail(s: &Arc<dyn Store>, t: &TaskRecord, prefer_same_worker: bool, now: DateTime<Utc>) {
    let failed = s
        .task_fail(&FailParams {
            task_id: t.id.clone(),
            lease_token: t.lease_token.clone().unwrap(),
            error: "boom".into(),
            non_retryable: false,
            retry_after: None,
            now,
            jitter_unit: 0.5,
            prefer_same_worker,
        })
        .await
        .unwrap();
    assert!(matches!(failed, Settled::Applied(_)), "{failed:?}");
}

pub async fn a_task_targeted_by_worker_id_goes_only_to_that_worker(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let mine = routed("r", 1, for_worker("w1"));
    s.task_insert_many(&[mine], t0()).await.unwrap();
    assert!(lease(&s, worker("r", "w2", &[], 5, t0())).await.is_empty());
    let got = lease(&s, worker("r", "w1", &[], 5, t0())).await;
    assert_eq!(ids(&got), [uuid_like(1)]);
    assert_eq!(got[0].routing.target.worker_id.as_deref(), Some("w1"));
}

pub async fn a_task_targeted_by_labels_goes_to_a_worker_with_all_of_them(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let gpu = routed("r", 1, for_labels(&[("gpu", "a100"), ("region", "eu")]));
    s.task_insert_many(&[gpu], t0()).await.unwrap();
    for other in [
        vec![],
        vec![("gpu", "a100")],
        vec![("gpu", "h100"), ("region", "eu")],
    ] {
        assert!(
            lease(&s, worker("r", "w", &other, 5, t0()))
                .await
                .is_empty(),
            "{other:?}"
        );
    }
    let got = lease(
        &s,
        worker(
            "r",
            "w",
            &[("gpu", "a100"), ("region", "eu"), ("rack", "7")],
            5,
            t0(),
        ),
    )
    .await;
    assert_eq!(ids(&got), [uuid_like(1)]);
    let read = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(
        read.routing.target.labels,
        labels(&[("gpu", "a100"), ("region", "eu")])
    );
}

pub async fn a_task_nobody_may_take_does_not_block_the_tasks_behind_it(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // Ahead in lease order: high priority, for a worker that is not there.
    let stuck: Vec<NewTask> = (1..=3)
        .map(|n| NewTask {
            priority: 9,
            ..routed("r", n, for_labels(&[("gpu", "a100")]))
        })
        .collect();
    let plain: Vec<NewTask> = (4..=6).map(|n| task("r", n)).collect();
    s.task_insert_many(&stuck, t0()).await.unwrap();
    s.task_insert_many(&plain, t0()).await.unwrap();
    let got = lease(&s, worker("r", "cpu", &[], 3, t0())).await;
    assert_eq!(ids(&got), [uuid_like(4), uuid_like(5), uuid_like(6)]);
    // And a GPU worker still gets them first, in priority order.
    let got = lease(&s, worker("r", "gpu", &[("gpu", "a100")], 5, t0())).await;
    assert_eq!(ids(&got), [uuid_like(1), uuid_like(2), uuid_like(3)]);
}

pub async fn a_soft_sticky_retry_waits_for_its_worker_until_the_timeout(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let soft = TaskRouting {
        sticky: Some(Sticky::Soft(Duration::from_secs(10))),
        ..TaskRouting::default()
    };
    s.task_insert_many(&[routed("r", 1, soft.clone()), routed("r", 2, soft)], t0())
        .await
        .unwrap();
    let got = lease(&s, worker("r", "w1", &[], 2, t0())).await;
    assert_eq!(got.len(), 2);
    for t in &got {
        fail(&s, t, false, at(1)).await;
    }
    // Reserved for w1 for 10 s after the failure.
    assert!(lease(&s, worker("r", "w2", &[], 5, at(2))).await.is_empty());
    let read = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(read.routing.reserved_for.as_deref(), Some("w1"));
    assert_eq!(read.routing.reserved_until, Some(at(11)));
    // w1 takes one back within the timeout; after it, anyone takes the other.
    assert_eq!(lease(&s, worker("r", "w1", &[], 1, at(3))).await.len(), 1);
    assert!(
        lease(&s, worker("r", "w2", &[], 5, at(10)))
            .await
            .is_empty()
    );
    assert_eq!(lease(&s, worker("r", "w2", &[], 5, at(11))).await.len(), 1);
}

pub async fn a_hard_sticky_retry_waits_for_its_worker_only(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let hard = TaskRouting {
        sticky: Some(Sticky::Hard),
        ..TaskRouting::default()
    };
    s.task_insert_many(&[routed("r", 1, hard)], t0())
        .await
        .unwrap();
    let got = lease(&s, worker("r", "w1", &[], 1, t0())).await;
    fail(&s, &got[0], false, at(1)).await;
    // A day later, still only w1.
    assert!(
        lease(&s, worker("r", "w2", &[], 5, at(86_400)))
            .await
            .is_empty()
    );
    let again = lease(&s, worker("r", "w1", &[], 5, at(86_400))).await;
    assert_eq!(ids(&again), [uuid_like(1)]);
    assert_eq!(again[0].attempt, 2);
    // Failed again: reserved again. An admin change (UpdateTask) frees it.
    fail(&s, &again[0], false, at(86_401)).await;
    assert!(
        lease(&s, worker("r", "w2", &[], 5, at(86_402)))
            .await
            .is_empty()
    );
    let update = store::TaskUpdate {
        priority: Some(1),
        ..Default::default()
    };
    s.task_update(&uuid_like(1), &update, at(86_403))
        .await
        .unwrap();
    let read = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(read.routing.reserved_for, None);
    assert_eq!(
        ids(&lease(&s, worker("r", "w2", &[], 5, at(86_404))).await),
        [uuid_like(1)]
    );
}

pub async fn prefer_same_worker_reserves_one_retry_softly(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[task("r", 1)], t0()).await.unwrap();
    let got = lease(&s, worker("r", "w1", &[], 1, t0())).await;
    fail(&s, &got[0], true, at(1)).await;
    // The default SOFT timeout is 30 s.
    assert!(lease(&s, worker("r", "w2", &[], 1, at(5))).await.is_empty());
    let back = lease(&s, worker("r", "w1", &[], 1, at(6))).await;
    assert_eq!(ids(&back), [uuid_like(1)]);
    // A failure without the wish clears the reservation: anyone may retry.
    fail(&s, &back[0], false, at(7)).await;
    let read = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(read.routing.reserved_for, None);
    assert_eq!(lease(&s, worker("r", "w2", &[], 1, at(8))).await.len(), 1);
}

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

pub async fn workers_are_recorded_and_listed_with_their_leases(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let seen = |id: &str, pairs: &[(&str, &str)], queues: &[&str], now| WorkerSeen {
        worker_id: id.into(),
        labels: labels(pairs),
        address: format!("10.0.0.1:{}", id.len()),
        queues: queues.iter().map(|q| q.to_string()).collect(),
        now,
    };
    s.worker_record_seen(&[
        seen("a", &[("gpu", "a100")], &["q1", "q2"], t0()),
        seen("b", &[], &["q2"], t0()),
        seen("old", &[], &["q1"], at(-600)),
    ])
    .await
    .unwrap();
    // A heartbeat keeps the labels and queues of the last lease.
    s.worker_record_seen(&[seen("a", &[], &[], at(5))])
        .await
        .unwrap();
    s.task_insert_many(&[task("q1", 1), task("q1", 2)], t0())
        .await
        .unwrap();
    let held = lease(&s, worker("q1", "a", &[], 2, at(6))).await;
    complete(&s, &held[0], at(7)).await;
    let list = |f: WorkerFilter| {
        let s = s.clone();
        async move { s.worker_list(&f).await.unwrap() }
    };
    let base = WorkerFilter {
        seen_since: at(-300),
        limit: 10,
        now: at(8),
        ..WorkerFilter::default()
    };
    let all = list(base.clone()).await;
    let names: Vec<&str> = all.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let a = &all[0];
    assert_eq!(a.labels, labels(&[("gpu", "a100")]));
    assert_eq!(a.queues, ["q1", "q2"]);
    assert_eq!((a.first_seen, a.last_seen), (t0(), at(5)));
    assert_eq!(a.leases_held, 1);
    assert_eq!(a.completed_last_minute, 1);
    assert_eq!(a.failed_last_minute, 0);
    let by_queue = list(WorkerFilter {
        queue: Some("q1".into()),
        ..base.clone()
    })
    .await;
    assert_eq!(by_queue.len(), 1);
    let by_label = list(WorkerFilter {
        labels: labels(&[("gpu", "a100")]),
        ..base.clone()
    })
    .await;
    assert_eq!(by_label.len(), 1);
    let page2 = list(WorkerFilter {
        after_id: Some("a".into()),
        ..base.clone()
    })
    .await;
    assert_eq!(page2.len(), 1);
    assert_eq!(page2[0].worker_id, "b");
    let (w, leases) = s.worker_get("a", at(8)).await.unwrap().unwrap();
    assert_eq!(w.worker_id, "a");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].task_id, held[1].id);
    assert!(s.worker_get("nobody", at(8)).await.unwrap().is_none());
}

pub async fn requests_with_the_same_labels_share_targeted_tasks(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // Ahead: tasks for other labels; then six for the labels every request carries.
    let mut tasks: Vec<NewTask> = (1..=2)
        .map(|n| NewTask {
            priority: 5,
            ..routed("s", n, for_labels(&[("gpu", "h100")]))
        })
        .collect();
    tasks.extend((3..=8).map(|n| routed("s", n, for_labels(&[("gpu", "a100")]))));
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let gpu = [("gpu", "a100"), ("region", "eu")];
    let ps = [
        worker("s", "w1", &gpu, 2, t0()),
        worker("s", "w2", &gpu, 2, t0()),
        worker("s", "w3", &gpu, 2, t0()),
    ];
    let leased = s.task_lease_many(&ps).await.unwrap();
    let counts: Vec<usize> = leased.iter().map(Vec::len).collect();
    assert_eq!(counts, [2, 2, 2]);
    let mut all: Vec<String> = leased.iter().flat_map(|g| ids(g)).collect();
    all.sort();
    assert_eq!(all, (3..=8).map(uuid_like).collect::<Vec<_>>());
}

/// Leases without labels or caps take a plain statement unless a READY
/// task of their queues carries a routing rule. Around such a task the order and
/// the targets hold: another worker passes it over, its own worker gets it first
/// (by priority), and plain tasks behind it still go out in order.
pub async fn plain_leases_keep_order_and_targets_around_a_routed_task(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let mut first = routed("o", 2, for_worker("w1"));
    first.priority = 5;
    let later = NewTask {
        run_at: at(60),
        ..routed("o", 4, for_worker("w2"))
    };
    s.task_insert_many(&[task("o", 1), first, task("o", 3), later], t0())
        .await
        .unwrap();
    let w2 = lease(&s, worker("o", "w2", &[], 1, t0())).await;
    assert_eq!(ids(&w2), [uuid_like(1)], "w2 passes over w1's task");
    let w1 = lease(&s, worker("o", "w1", &[], 1, t0())).await;
    assert_eq!(ids(&w1), [uuid_like(2)], "w1's own task comes first");
    let w3 = lease(&s, worker("o", "w3", &[], 5, t0())).await;
    assert_eq!(ids(&w3), [uuid_like(3)], "w2's task is not due yet");
    let w3 = lease(&s, worker("o", "w3", &[], 5, at(60))).await;
    assert!(w3.is_empty(), "{w3:?}");
    let w2 = lease(&s, worker("o", "w2", &[], 5, at(60))).await;
    assert_eq!(ids(&w2), [uuid_like(4)]);
}
