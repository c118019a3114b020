//! An operator's update changing a waiting task's target: the next lease follows
//! the new target, an empty target lets anyone lease the task, and a task that is
//! leased or finished keeps its target. A list filtered by target and by a
//! metadata entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use taskbroker_server::domain::event::EventKind;
use taskbroker_server::domain::routing::{Target, TaskRouting};
use taskbroker_server::store::{
    Changed, CompleteParams, LeaseParams, LeaseRouting, NewTask, Settled, Store, TaskFilter,
    TaskRecord, TaskUpdate,
};

use super::{lease_params, open, t0, task, uuid_like};
use crate::common::Backend;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn for_worker(queue: &str, n: usize, id: &str) -> NewTask {
    NewTask {
        routing: TaskRouting {
            target: Target {
                worker_id: Some(id.into()),
                labels: BTreeMap::new(),
            },
            ..TaskRouting::default()
        },
        ..task(queue, n)
    }
}

/// What worker `id` with `pairs` leases of `queue`, by id.
async fn lease_as(
    s: &Arc<dyn Store>,
    queue: &str,
    id: &str,
    pairs: &[(&str, &str)],
) -> Vec<TaskRecord> {
    let p = LeaseParams {
        worker_id: id.into(),
        routing: LeaseRouting {
            labels: labels(pairs),
            ..LeaseRouting::default()
        },
        ..lease_params(queue, 5, t0())
    };
    s.task_lease_available(&p).await.unwrap()
}

fn ids(tasks: &[TaskRecord]) -> Vec<String> {
    tasks.iter().map(|t| t.id.clone()).collect()
}

fn retarget(worker_id: Option<&str>, pairs: &[(&str, &str)]) -> TaskUpdate {
    TaskUpdate {
        target: Some(Target {
            worker_id: worker_id.map(String::from),
            labels: labels(pairs),
        }),
        ..TaskUpdate::default()
    }
}

pub async fn a_changed_target_holds_for_the_next_lease(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[for_worker("rt", 1, "w1")], t0())
        .await
        .unwrap();
    let done = s
        .task_update(&uuid_like(1), &retarget(Some("w2"), &[]), t0())
        .await
        .unwrap();
    let Changed::Done(read) = done else {
        panic!("{done:?}");
    };
    assert_eq!(read.routing.target.worker_id.as_deref(), Some("w2"));
    assert!(lease_as(&s, "rt", "w1", &[]).await.is_empty());
    let got = lease_as(&s, "rt", "w2", &[]).await;
    assert_eq!(ids(&got), [uuid_like(1)]);
    assert_eq!(got[0].routing.target.worker_id.as_deref(), Some("w2"));
    // The updated event says what changed, old and new.
    let events = s.event_list(&uuid_like(1), 0, 100).await.unwrap();
    let updated = events
        .iter()
        .find(|e| e.kind == EventKind::Updated)
        .expect("an updated event");
    assert_eq!(
        updated.detail.as_deref(),
        Some("target worker w1 -> worker w2")
    );
}

pub async fn a_target_changes_to_labels_and_clears_to_anyone(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // An untargeted task becomes one for a GPU worker, then anyone's again.
    s.task_insert_many(&[task("rl", 1), task("rl", 2)], t0())
        .await
        .unwrap();
    let gpu = retarget(None, &[("gpu", "a100")]);
    assert!(matches!(
        s.task_update(&uuid_like(1), &gpu, t0()).await.unwrap(),
        Changed::Done(_)
    ));
    let read = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(read.routing.target.labels, labels(&[("gpu", "a100")]));
    let plain = lease_as(&s, "rl", "cpu", &[]).await;
    assert_eq!(ids(&plain), [uuid_like(2)]);
    assert!(
        s.task_update(&uuid_like(1), &retarget(None, &[]), t0())
            .await
            .map(|c| matches!(c, Changed::Done(_)))
            .unwrap()
    );
    let read = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(read.routing.target, Target::default());
    let events = s.event_list(&uuid_like(1), 0, 100).await.unwrap();
    let details: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Updated)
        .map(|e| e.detail.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        details,
        [
            r#"target any -> labels {"gpu":"a100"}"#,
            r#"target labels {"gpu":"a100"} -> any"#
        ]
    );
    assert_eq!(read.routing.target.labels, BTreeMap::new());
    let got = lease_as(&s, "rl", "cpu", &[]).await;
    assert_eq!(ids(&got), [uuid_like(1)]);
}

pub async fn a_leased_or_finished_task_keeps_its_target(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[for_worker("rk", 1, "w1")], t0())
        .await
        .unwrap();
    let got = lease_as(&s, "rk", "w1", &[]).await;
    assert_eq!(ids(&got), [uuid_like(1)]);
    let moved = retarget(Some("w2"), &[]);
    let leased = s.task_update(&uuid_like(1), &moved, t0()).await.unwrap();
    assert!(matches!(leased, Changed::WrongState(_)), "{leased:?}");
    let settled = s
        .task_complete(&CompleteParams {
            task_id: got[0].id.clone(),
            lease_token: got[0].lease_token.clone().unwrap(),
            result: Vec::new(),
            now: t0(),
        })
        .await
        .unwrap();
    assert!(matches!(settled, Settled::Applied(_)), "{settled:?}");
    let done = s.task_update(&uuid_like(1), &moved, t0()).await.unwrap();
    assert!(matches!(done, Changed::WrongState(_)), "{done:?}");
    let read = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(read.routing.target.worker_id.as_deref(), Some("w1"));
}

pub async fn a_list_filters_by_target_and_by_a_metadata_entry(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let with = |n: usize, worker: Option<&str>, pairs: &[(&str, &str)], meta: &[(&str, &str)]| {
        let mut t = task("lf", n);
        t.routing.target = Target {
            worker_id: worker.map(String::from),
            labels: labels(pairs),
        };
        t.metadata = meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        t
    };
    s.task_insert_many(
        &[
            with(1, Some("w1"), &[], &[("tenant", "acme")]),
            with(2, Some("w2"), &[("gpu", "a100")], &[("tenant", "globex")]),
            with(
                3,
                None,
                &[("gpu", "a100"), ("region", "eu")],
                &[("tenant.id", "acme")],
            ),
            with(4, None, &[], &[]),
        ],
        t0(),
    )
    .await
    .unwrap();
    let list = async |f: TaskFilter| {
        let mut got = ids(&s
            .task_list(&TaskFilter {
                queue: Some("lf".into()),
                limit: 10,
                now: t0(),
                ..f
            })
            .await
            .unwrap());
        got.sort();
        got
    };
    let pairs = |p: &[(&str, &str)]| TaskFilter {
        target_labels: labels(p),
        ..TaskFilter::default()
    };
    let meta = |k: &str, v: Option<&str>| TaskFilter {
        metadata: Some((k.into(), v.map(String::from))),
        ..TaskFilter::default()
    };
    let worker = TaskFilter {
        target_worker: Some("w2".into()),
        ..TaskFilter::default()
    };
    assert_eq!(list(worker).await, [uuid_like(2)]);
    assert_eq!(
        list(pairs(&[("gpu", "a100")])).await,
        [uuid_like(2), uuid_like(3)]
    );
    assert_eq!(
        list(pairs(&[("gpu", "a100"), ("region", "eu")])).await,
        [uuid_like(3)]
    );
    assert!(list(pairs(&[("gpu", "h100")])).await.is_empty());
    assert_eq!(list(meta("tenant", Some("acme"))).await, [uuid_like(1)]);
    assert_eq!(
        list(meta("tenant", None)).await,
        [uuid_like(1), uuid_like(2)]
    );
    // A dot in a key is part of the key, not a path.
    assert_eq!(list(meta("tenant.id", Some("acme"))).await, [uuid_like(3)]);
    assert!(list(meta("tenant", Some("initech"))).await.is_empty());
    assert!(list(meta("nobody", None)).await.is_empty());
}
