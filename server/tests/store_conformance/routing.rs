//! Routing on both stores: targets by worker id and by labels,
//! sticky reservations (SOFT and HARD, and `prefer_same_worker`), and the
//! workers seen; fan-out copies and the per-worker cap are in fanout.rs.

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

// Fan-out copies and the per-worker cap, alone and with targets (fanout.rs beside this file).
#[path = "fanout.rs"]
mod fanout;
pub use fanout::*;

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
