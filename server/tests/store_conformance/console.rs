//! The console (migration 0011) store cases: dead letters stay grouped
//! by their current last error whichever way a task died (Fail, the reaper's
//! lease expiry and deadline), and after a requeue and a second death
//! with another error. Run on both databases by `store_conformance.rs`.

use super::*;

/// Every dead task of `queue`, grouped by its last error as `task_get` reads it.
async fn groups_from_tasks(s: &Arc<dyn Store>, ids: &[String]) -> Vec<(String, u64)> {
    let mut by_error: BTreeMap<String, u64> = BTreeMap::new();
    for id in ids {
        let t = s.task_get(id).await.unwrap().unwrap();
        if t.state == StoredState::Dead {
            *by_error
                .entry(t.last_error.unwrap_or_default())
                .or_default() += 1;
        }
    }
    by_error.into_iter().collect()
}

async fn groups_from_store(s: &Arc<dyn Store>, queue: &str) -> Vec<(String, u64)> {
    let mut got: Vec<(String, u64)> = s
        .task_dead_groups(&store::DeadGroupParams {
            queue: Some(queue.into()),
            error: None,
            limit: 100,
        })
        .await
        .unwrap()
        .into_iter()
        .map(|g| (g.error, g.count))
        .collect();
    got.sort();
    got
}

async fn fail_one(s: &Arc<dyn Store>, queue: &str, at: DateTime<Utc>, error: &str) -> String {
    let t = s
        .task_lease_available(&lease_params(queue, 1, at))
        .await
        .unwrap()
        .remove(0);
    let p = FailParams {
        prefer_same_worker: false,
        task_id: t.id.clone(),
        lease_token: t.lease_token.unwrap(),
        error: error.into(),
        non_retryable: true,
        retry_after: None,
        now: at,
        jitter_unit: 0.5,
    };
    assert!(matches!(
        s.task_fail(&p).await.unwrap(),
        Settled::Applied(_)
    ));
    t.id
}

pub async fn dead_letters_group_by_the_current_error_however_a_task_died(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let once = |n| NewTask {
        retry: RetryPolicy {
            max_attempts: 1,
            ..task("z", n).retry
        },
        ..task("z", n)
    };
    // Not due before its deadline passes: the reaper's deadline pass kills it.
    let late = NewTask {
        run_at: secs_after(100),
        deadline: Some(secs_after(5)),
        ..task("z", 1)
    };
    // Inserted one by one, so that they lease in this order.
    for t in [once(2), once(3), once(4), once(5), once(6)] {
        s.task_insert_many(&[t], t0()).await.unwrap();
    }
    s.task_insert_many(&[late], t0()).await.unwrap();
    let ids: Vec<String> = (1..=6).map(uuid_like).collect();
    fail_one(&s, "z", t0(), "").await;
    fail_one(&s, "z", t0(), "smtp down").await;
    fail_one(&s, "z", t0(), "smtp down").await;
    let again = fail_one(&s, "z", t0(), "first").await;
    // Leased and never settled: the reaper kills it when its lease expires.
    let expired = s
        .task_lease_available(&lease_params("z", 1, t0()))
        .await
        .unwrap();
    assert_eq!(expired.len(), 1);
    // Past the deadline of task 1 and the 30 s lease.
    s.lease_reclaim_expired(secs_after(40), 100).await.unwrap();
    s.lease_reclaim_expired(secs_after(40), 100).await.unwrap();
    let want = groups_from_tasks(&s, &ids).await;
    assert_eq!(
        want.iter().map(|g| g.1).sum::<u64>(),
        6,
        "all six died: {want:?}"
    );
    assert_eq!(groups_from_store(&s, "z").await, want);

    // Requeued, it dies again with another error: it moves to that group.
    assert!(matches!(
        s.task_requeue(&again, secs_after(50)).await.unwrap(),
        Changed::Done(_)
    ));
    assert_eq!(fail_one(&s, "z", secs_after(50), "second").await, again);
    let want = groups_from_tasks(&s, &ids).await;
    assert!(want.contains(&("second".into(), 1)) && !want.iter().any(|g| g.0 == "first"));
    assert_eq!(groups_from_store(&s, "z").await, want);
    let second = s
        .task_dead_groups(&store::DeadGroupParams {
            queue: Some("z".into()),
            error: Some("second".into()),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(second.len(), 1, "found by its new error");
    assert_eq!(second[0].count, 1);

    // The empty error is a group of its own, found, requeued and cancelled by "".
    let empty = s
        .task_dead_groups(&store::DeadGroupParams {
            queue: Some("z".into()),
            error: Some(String::new()),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(
        empty
            .iter()
            .map(|g| (g.error.as_str(), g.count))
            .collect::<Vec<_>>(),
        [("", 1)]
    );
    let requeue = store::RequeueDeadParams {
        queue: "z".into(),
        error: "smtp down".into(),
        limit: 10,
        now: secs_after(60),
    };
    assert_eq!(s.task_requeue_dead(&requeue).await.unwrap(), 2);
    let cancel = store::CancelDeadParams {
        queue: "z".into(),
        error: Some(String::new()),
        task_id: None,
        limit: 10,
        now: secs_after(60),
    };
    assert_eq!(s.task_cancel_dead(&cancel).await.unwrap(), 1);
    let left = groups_from_store(&s, "z").await;
    assert!(
        left.iter().all(|g| g.0 != "smtp down" && !g.0.is_empty()),
        "{left:?}"
    );
    assert_eq!(left, groups_from_tasks(&s, &ids).await);
}
