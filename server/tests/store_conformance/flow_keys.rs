//! Dependencies by key (TaskSpec.depends_on_keys, migration 0020) and the
//! results a lease of a dependent reads: a key that no task has yet is a wait
//! that the insert of a task with that key binds, whichever insert path makes
//! it; a bound key is an ordinary dependency. Run on every database by
//! `store_conformance.rs`.

use super::*;
use taskbroker_server::store::{
    FlowInserted, FlowSpec, Inserted, PurgeScope, Reaped, Settled, TaskFlowInfo, TaskKey,
};

fn key(queue: &str, k: &str) -> TaskKey {
    TaskKey {
        queue: queue.into(),
        key: k.into(),
    }
}

fn keyed(queue: &str, n: usize, k: &str) -> NewTask {
    NewTask {
        key: Some(k.into()),
        ..task(queue, n)
    }
}

fn waits_for(keys: &[TaskKey]) -> FlowSpec {
    FlowSpec {
        depends_on_keys: keys.to_vec(),
        ..Default::default()
    }
}

async fn insert_flow(s: &Arc<dyn Store>, tasks: &[NewTask], flows: &[FlowSpec]) -> Vec<Inserted> {
    match s.task_insert_flow(tasks, flows, t0(), None).await.unwrap() {
        FlowInserted::Done(r) => r,
        other => panic!("insert refused: {other:?}"),
    }
}

async fn state(s: &Arc<dyn Store>, n: usize) -> StoredState {
    s.task_get(&uuid_like(n)).await.unwrap().unwrap().state
}

async fn info(s: &Arc<dyn Store>, n: usize) -> TaskFlowInfo {
    s.task_flow_info(&[uuid_like(n)])
        .await
        .unwrap()
        .remove(&uuid_like(n))
        .unwrap()
}

/// Leases task `n` (the only ready one of `queue`) and completes it with `result`.
async fn run(s: &Arc<dyn Store>, queue: &str, n: usize, result: &[u8]) {
    let leased = s
        .task_lease_available(&lease_params(queue, 1, t0()))
        .await
        .unwrap();
    assert_eq!(leased.len(), 1, "one ready task in {queue}");
    assert_eq!(leased[0].id, uuid_like(n));
    let r = s
        .task_complete(&CompleteParams {
            task_id: leased[0].id.clone(),
            lease_token: leased[0].lease_token.clone().unwrap(),
            result: result.to_vec(),
            now: t0(),
        })
        .await
        .unwrap();
    assert!(matches!(r, Settled::Applied(_)), "{r:?}");
}

/// Leases task `n` and fails it for good (DEAD).
async fn kill(s: &Arc<dyn Store>, queue: &str, n: usize) {
    let leased = s
        .task_lease_available(&lease_params(queue, 1, t0()))
        .await
        .unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].id, uuid_like(n));
    let r = s
        .task_fail(&FailParams {
            task_id: leased[0].id.clone(),
            lease_token: leased[0].lease_token.clone().unwrap(),
            error: "boom".into(),
            non_retryable: true,
            retry_after: None,
            now: t0(),
            jitter_unit: 0.5,
            prefer_same_worker: false,
        })
        .await
        .unwrap();
    assert!(matches!(r, Settled::Applied(_)), "{r:?}");
}

/// A dependent waits BLOCKED for a key no task has; a task with that key
/// inserted later (by the plain insert, in another queue) binds it; its
/// success unblocks the dependent, whose lease reads its result.
pub async fn a_key_dependency_waits_for_a_task_submitted_later(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let (q, other) = ("keys.later", "keys.later.up");
    insert_flow(&s, &[task(q, 1)], &[waits_for(&[key(other, "k1")])]).await;
    assert_eq!(state(&s, 1).await, StoredState::Blocked);
    assert_eq!(
        s.task_keys_missing(&uuid_like(1), 100).await.unwrap(),
        vec![key(other, "k1")]
    );
    let i = info(&s, 1).await;
    assert_eq!(i.depends_on_keys, vec![key(other, "k1")]);
    assert_eq!(i.deps_remaining, 1);
    assert!(i.depends_on.is_empty());
    // Nothing to lease in the dependent's queue.
    assert!(
        s.task_lease_available(&lease_params(q, 10, t0()))
            .await
            .unwrap()
            .is_empty()
    );

    // The plain insert (no flow) of a task with that key binds the wait.
    s.task_insert_many(&[keyed(other, 2, "k1")], t0())
        .await
        .unwrap();
    assert_eq!(state(&s, 1).await, StoredState::Blocked);
    assert!(
        s.task_keys_missing(&uuid_like(1), 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.task_deps_unfinished(&uuid_like(1), 100).await.unwrap(),
        vec![uuid_like(2)]
    );
    assert_eq!(info(&s, 1).await.depends_on, vec![uuid_like(2)]);

    run(&s, other, 2, b"two").await;
    assert_eq!(state(&s, 1).await, StoredState::Pending);
    let leased = s
        .task_lease_available(&lease_params(q, 1, t0()))
        .await
        .unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(
        s.task_dependency_results(&[uuid_like(1)]).await.unwrap(),
        vec![(uuid_like(1), uuid_like(2), b"two".to_vec())]
    );
    // Sizes first (ids and results), for the dependents that have any.
    assert_eq!(
        s.task_dependency_result_sizes(&[uuid_like(1), uuid_like(2)])
            .await
            .unwrap(),
        vec![(uuid_like(1), 1, (uuid_like(2).len() + 3) as u64)]
    );
}

/// A key that names an existing task is an ordinary dependency on it: done
/// already (SUCCEEDED) it does not hold the dependent; unfinished it does. A key
/// naming a task of the same insert, before or after the dependent, binds too.
pub async fn a_key_naming_an_existing_task_is_an_ordinary_dependency(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let q = "keys.existing";
    s.task_insert_many(&[keyed(q, 1, "done")], t0())
        .await
        .unwrap();
    run(&s, q, 1, b"one").await;
    s.task_insert_many(&[keyed(q, 2, "open")], t0())
        .await
        .unwrap();
    let flows = [
        waits_for(&[key(q, "done")]),
        waits_for(&[key(q, "open"), key(q, "done")]),
        // Tasks of the same insert: one before, one after.
        FlowSpec::default(),
        waits_for(&[key(q, "mid"), key(q, "last")]),
        FlowSpec::default(),
    ];
    let tasks = [
        task(q, 3),
        task(q, 4),
        keyed(q, 5, "mid"),
        task(q, 6),
        keyed(q, 7, "last"),
    ];
    insert_flow(&s, &tasks, &flows).await;
    assert_eq!(state(&s, 3).await, StoredState::Pending);
    assert_eq!(state(&s, 4).await, StoredState::Blocked);
    assert_eq!(
        s.task_deps_unfinished(&uuid_like(4), 100).await.unwrap(),
        vec![uuid_like(2)]
    );
    assert_eq!(info(&s, 4).await.deps_remaining, 1);
    assert_eq!(state(&s, 6).await, StoredState::Blocked);
    assert!(
        s.task_keys_missing(&uuid_like(6), 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(info(&s, 6).await.deps_remaining, 2);
    assert_eq!(
        info(&s, 6).await.depends_on,
        vec![uuid_like(5), uuid_like(7)]
    );
    // Task 3 leases with the result of its dependency.
    let leased = s
        .task_lease_available(&lease_params(q, 1, t0()))
        .await
        .unwrap();
    assert_eq!(
        leased[0].id,
        uuid_like(2),
        "lease order: the older task first"
    );
    assert_eq!(
        s.task_dependency_results(&[uuid_like(3), uuid_like(4)])
            .await
            .unwrap(),
        vec![
            (uuid_like(3), uuid_like(1), b"one".to_vec()),
            (uuid_like(4), uuid_like(1), b"one".to_vec()),
        ]
    );
}

/// A key whose task ends DEAD or CANCELLED cancels its waiting dependents
/// (DEPENDENCY_FAILED), except those that run anyway, which get only the
/// results of the dependencies that succeeded.
pub async fn a_key_whose_task_fails_follows_run_if_dependency_fails(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let q = "keys.fail";
    let anyway = |keys: &[TaskKey]| FlowSpec {
        run_if_dependency_fails: true,
        ..waits_for(keys)
    };
    insert_flow(
        &s,
        &[task(q, 1), task(q, 2), task(q, 3), task(q, 4)],
        &[
            waits_for(&[key(q, "dies")]),
            anyway(&[key(q, "dies"), key(q, "works")]),
            waits_for(&[key(q, "cancelled")]),
            anyway(&[key(q, "cancelled")]),
        ],
    )
    .await;
    s.task_insert_many(&[keyed(q, 10, "dies")], t0())
        .await
        .unwrap();
    kill(&s, q, 10).await;
    assert_eq!(state(&s, 1).await, StoredState::Cancelled);
    assert_eq!(
        info(&s, 1).await.cancel_reason.as_deref(),
        Some("dependency_failed")
    );
    assert_eq!(
        state(&s, 2).await,
        StoredState::Blocked,
        "still waits for works"
    );
    s.task_insert_many(&[keyed(q, 11, "works")], t0())
        .await
        .unwrap();
    run(&s, q, 11, b"ok").await;
    assert_eq!(state(&s, 2).await, StoredState::Pending);
    assert_eq!(
        s.task_dependency_results(&[uuid_like(2)]).await.unwrap(),
        vec![(uuid_like(2), uuid_like(11), b"ok".to_vec())],
        "only the dependency that succeeded has a result"
    );
    // A key whose task is cancelled before it runs.
    s.task_insert_many(&[keyed(q, 12, "cancelled")], t0())
        .await
        .unwrap();
    s.task_cancel(&uuid_like(12), t0()).await.unwrap();
    assert_eq!(state(&s, 3).await, StoredState::Cancelled);
    assert_eq!(state(&s, 4).await, StoredState::Pending);
}

/// A BLOCKED task whose deadline passes goes DEAD (DEADLINE_EXCEEDED) like a
/// pending one, whether it waits for a key or a task; a task with its key
/// inserted afterwards changes nothing for it.
pub async fn a_blocked_task_goes_dead_at_its_deadline(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let q = "keys.deadline";
    let deadline = t0() + chrono::Duration::seconds(10);
    s.task_insert_many(&[task(q, 1)], t0()).await.unwrap();
    let dependent = |n| NewTask {
        deadline: Some(deadline),
        ..task(q, n)
    };
    insert_flow(
        &s,
        &[dependent(2), dependent(3)],
        &[
            waits_for(&[key(q, "never")]),
            FlowSpec {
                depends_on: vec![uuid_like(1)],
                ..Default::default()
            },
        ],
    )
    .await;
    let before: Reaped = s
        .lease_reclaim_expired(deadline - chrono::Duration::seconds(1), 100)
        .await
        .unwrap();
    assert_eq!(before.deadline_exceeded, 0);
    assert_eq!(state(&s, 2).await, StoredState::Blocked);
    let r = s.lease_reclaim_expired(deadline, 100).await.unwrap();
    assert_eq!(r.deadline_exceeded, 2);
    for n in [2, 3] {
        let t = s.task_get(&uuid_like(n)).await.unwrap().unwrap();
        assert_eq!(t.state, StoredState::Dead);
        assert_eq!(t.last_error.as_deref(), Some("DEADLINE_EXCEEDED"));
    }
    s.task_insert_many(&[keyed(q, 4, "never")], t0())
        .await
        .unwrap();
    assert_eq!(state(&s, 2).await, StoredState::Dead);
    run(&s, q, 1, b"").await;
    assert_eq!(state(&s, 3).await, StoredState::Dead);
}

/// A dependent's key waits go with it when retention purges it, bound or not.
pub async fn key_waits_go_with_their_dependent_at_retention(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let q = "keys.retention";
    insert_flow(&s, &[task(q, 1)], &[waits_for(&[key(q, "gone")])]).await;
    s.task_cancel(&uuid_like(1), t0()).await.unwrap();
    assert_eq!(
        s.task_keys_missing(&uuid_like(1), 10).await.unwrap().len(),
        1
    );
    let purged = s
        .task_purge_finished(
            t0() + chrono::Duration::seconds(1),
            &PurgeScope::Only(q.into()),
            100,
        )
        .await
        .unwrap();
    assert_eq!(purged, 1);
    assert!(
        s.task_keys_missing(&uuid_like(1), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A task with the key later binds nothing and is a plain task.
    s.task_insert_many(&[keyed(q, 2, "gone")], t0())
        .await
        .unwrap();
    run(&s, q, 2, b"").await;
}

/// Dependents and keyed tasks submitted at once from many connections: every
/// wait ends bound (no interleaving of the lookup and the insert loses one).
pub async fn racing_waits_and_keyed_inserts_always_bind(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let q = "keys.race";
    let n = 40;
    let mut calls = Vec::new();
    for i in 0..n {
        let s1 = s.clone();
        calls.push(tokio::spawn(async move {
            s1.task_insert_flow(
                &[task(q, 1000 + i)],
                &[waits_for(&[key(q, &format!("k{i}"))])],
                t0(),
                None,
            )
            .await
            .map(|_| ())
        }));
        let s2 = s.clone();
        calls.push(tokio::spawn(async move {
            s2.task_insert_many(&[keyed(q, 2000 + i, &format!("k{i}"))], t0())
                .await
                .map(|_| ())
        }));
    }
    for c in calls {
        c.await.unwrap().unwrap();
    }
    for i in 0..n {
        assert!(
            s.task_keys_missing(&uuid_like(1000 + i), 10)
                .await
                .unwrap()
                .is_empty(),
            "wait {i} was not bound"
        );
        assert_eq!(
            s.task_deps_unfinished(&uuid_like(1000 + i), 10)
                .await
                .unwrap(),
            vec![uuid_like(2000 + i)]
        );
    }
}

/// A cycle through a key (A waits for key `b`; the task with key `b` waits for
/// A by id) holds both until a deadline: A goes DEAD at its own and its
/// dependent is cancelled (DEPENDENCY_FAILED).
pub async fn a_cycle_through_a_key_ends_at_a_deadline(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let q = "keys.cycle";
    let deadline = t0() + chrono::Duration::seconds(10);
    insert_flow(
        &s,
        &[NewTask {
            deadline: Some(deadline),
            ..task(q, 1)
        }],
        &[waits_for(&[key(q, "b")])],
    )
    .await;
    insert_flow(
        &s,
        &[keyed(q, 2, "b")],
        &[FlowSpec {
            depends_on: vec![uuid_like(1)],
            ..Default::default()
        }],
    )
    .await;
    assert_eq!(state(&s, 1).await, StoredState::Blocked);
    assert_eq!(state(&s, 2).await, StoredState::Blocked);
    assert_eq!(
        s.task_deps_unfinished(&uuid_like(1), 10).await.unwrap(),
        vec![uuid_like(2)]
    );
    s.lease_reclaim_expired(deadline, 100).await.unwrap();
    assert_eq!(state(&s, 1).await, StoredState::Dead);
    assert_eq!(state(&s, 2).await, StoredState::Cancelled);
    assert_eq!(
        info(&s, 2).await.cancel_reason.as_deref(),
        Some("dependency_failed")
    );
}
