//! Insert, lease, settle and list, by the clock each call is given.

use super::*;

async fn insert_deduplicates_by_queue_and_key(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let keyed = |n, q: &str| NewTask {
        key: Some("k".into()),
        ..task(q, n)
    };
    let r = s
        .task_insert_many(&[keyed(1, "a"), keyed(2, "a"), keyed(3, "b")], t0())
        .await
        .unwrap();
    assert_eq!(r[0].task_id, uuid_like(1));
    assert_eq!(r[1].task_id, uuid_like(1));
    assert!(r[1].deduplicated);
    assert_eq!(r[2].task_id, uuid_like(3));
    let stored = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(stored.metadata["traceparent"], "tp-1");
    assert_eq!(stored.state, StoredState::Pending);
    assert!(s.task_get(&uuid_like(2)).await.unwrap().is_none());
    let queues = s
        .task_queues(&[uuid_like(1), uuid_like(2), uuid_like(3)])
        .await
        .unwrap();
    assert_eq!(queues.len(), 2);
    assert_eq!(queues[&uuid_like(1)], "a");
    assert_eq!(queues[&uuid_like(3)], "b");
    let holders = s
        .task_find_keys(&[
            ("a".into(), "k".into()),
            ("b".into(), "k".into()),
            ("b".into(), "other".into()),
        ])
        .await
        .unwrap();
    let mut ids: Vec<_> = holders.into_iter().map(|t| t.id).collect();
    ids.sort();
    assert_eq!(ids, [uuid_like(1), uuid_like(3)]);
}

async fn concurrent_leases_never_share_a_task(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let tasks: Vec<_> = (0..200).map(|n| task("c", n)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = s
                    .task_lease_available(&lease_params("c", 7, t0()))
                    .await
                    .unwrap();
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
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 200);
    assert_eq!(unique.len(), 200);
}

async fn one_lease_call_shares_tasks_among_waiting_requests(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let tasks: Vec<_> = (0..5).map(|n| task("m", n)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let request = |worker: &str, max: u32| LeaseParams {
        max_reply_bytes: 4 << 20,
        worker_id: worker.into(),
        worker_address: format!("10.0.0.1:{max}"),
        ..lease_params("m", max, t0())
    };
    let ps = [request("a", 2), request("b", 4), request("c", 1)];
    // Slots a, b, c, a, b, b, b: five tasks give a two, b two, c one.
    assert_eq!(store::lease_shares(&[2, 4, 1], 5), [2, 2, 1]);
    let leased = s.task_lease_many(&ps).await.unwrap();
    let counts: Vec<usize> = leased.iter().map(Vec::len).collect();
    assert_eq!(counts, [2, 2, 1]);
    let mut ids = HashSet::new();
    for (p, got) in ps.iter().zip(&leased) {
        for t in got {
            assert!(ids.insert(t.id.clone()), "{} leased twice", t.id);
            assert_eq!(t.leased_by.as_deref(), Some(p.worker_id.as_str()));
            let attempts = s.attempt_list(&t.id).await.unwrap().unwrap();
            assert_eq!(attempts.len(), 1);
            assert_eq!(attempts[0].worker_id, p.worker_id);
            assert_eq!(attempts[0].worker_address, p.worker_address);
        }
        // Each request's tasks in lease order (here: the order of submission).
        let seqs: Vec<i64> = got.iter().map(|t| t.seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    }
    assert_eq!(ids.len(), 5);
    let again = s.task_lease_many(&ps).await.unwrap();
    assert!(again.iter().all(Vec::is_empty));
}

async fn leases_extend_settle_and_reclaim_by_the_given_clock(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[task("r", 1), task("r", 2)], t0())
        .await
        .unwrap();
    let leased = s
        .task_lease_available(&lease_params("r", 2, t0()))
        .await
        .unwrap();
    assert_eq!(leased.len(), 2);
    let (a, b2) = (&leased[0], &leased[1]);
    assert_eq!(a.attempt, 1);
    assert_eq!(
        a.lease_expires_at,
        Some(t0() + chrono::Duration::seconds(30))
    );

    // Extend one lease by 60 s at t0+20s; the other stays as it was.
    let at20 = t0() + chrono::Duration::seconds(20);
    let st = s
        .lease_extend(
            &[LeaseRef {
                task_id: a.id.clone(),
                lease_token: a.lease_token.clone().unwrap(),
            }],
            Some(Duration::from_secs(60)),
            at20,
        )
        .await
        .unwrap();
    assert_eq!(
        st[0],
        LeaseState::Live {
            lease_expires_at: at20 + chrono::Duration::seconds(60),
            cancel_requested: false
        }
    );
    // At t0+31s only the other lease has expired.
    let at31 = t0() + chrono::Duration::seconds(31);
    let reaped = s.lease_reclaim_expired(at31, 100).await.unwrap();
    assert_eq!(reaped.reclaimed, 1);
    assert_eq!(reaped.queues, vec!["r".to_string()]);
    let back = s.task_get(&b2.id).await.unwrap().unwrap();
    assert_eq!(
        TaskState::of(back.state, back.run_at, at31),
        TaskState::Ready
    );
    assert_eq!(back.last_error.as_deref(), Some("lease expired"));

    let done = CompleteParams {
        task_id: a.id.clone(),
        lease_token: a.lease_token.clone().unwrap(),
        result: b"ok".to_vec(),
        now: at31,
    };
    assert!(matches!(
        s.task_complete(&done).await.unwrap(),
        Settled::Applied(_)
    ));
    assert!(matches!(
        s.task_complete(&done).await.unwrap(),
        Settled::AlreadySettled(_)
    ));
    let stale = FailParams {
        prefer_same_worker: false,
        task_id: b2.id.clone(),
        lease_token: b2.lease_token.clone().unwrap(),
        error: "late".into(),
        non_retryable: false,
        retry_after: None,
        now: at31,
        jitter_unit: 0.5,
    };
    assert_eq!(s.task_fail(&stale).await.unwrap(), Settled::LeaseLost);
    let missing = FailParams {
        task_id: "nope".into(),
        ..stale
    };
    assert_eq!(s.task_fail(&missing).await.unwrap(), Settled::NotFound);
}

async fn list_filters_by_visible_state_at_now(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let later = NewTask {
        run_at: t0() + chrono::Duration::seconds(10),
        ..task("l", 2)
    };
    s.task_insert_many(&[task("l", 1), later], t0())
        .await
        .unwrap();
    let list = |states: Vec<TaskState>, now| {
        let s = s.clone();
        async move {
            s.task_list(&TaskFilter {
                states,
                limit: 10,
                now,
                ..TaskFilter::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(list(vec![TaskState::Scheduled], t0()).await, [uuid_like(2)]);
    assert_eq!(list(vec![TaskState::Ready], t0()).await, [uuid_like(1)]);
    let at10 = t0() + chrono::Duration::seconds(10);
    assert_eq!(
        list(vec![TaskState::Ready], at10).await,
        [uuid_like(2), uuid_like(1)]
    );
    assert_eq!(
        s.task_next_run_at(&["l".into()], t0()).await.unwrap(),
        Some(at10)
    );
    assert_eq!(s.task_next_run_at(&["l".into()], at10).await.unwrap(), None);
}

async fn a_creation_time_range_lists_newest_created_first_by_keyset(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // Stored in this order (seq 1..4), created at 5 s, 3 s, 3 s and 20 s.
    for (n, at) in [(1, 5), (2, 3), (3, 3), (4, 20)] {
        s.task_insert_many(&[task("r", n)], secs_after(at))
            .await
            .unwrap();
    }
    let page = |before: Option<&store::TaskRecord>| TaskFilter {
        created_after: Some(secs_after(1)),
        created_before: Some(secs_after(10)),
        before_seq: before.map(|t| t.seq),
        before_created: before.map(|t| t.created_at),
        limit: 2,
        now: secs_after(30),
        ..TaskFilter::default()
    };
    let first = s.task_list(&page(None)).await.unwrap();
    let ids: Vec<_> = first.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids, [uuid_like(1), uuid_like(3)], "newest created first");
    let second = s.task_list(&page(first.last())).await.unwrap();
    let ids: Vec<_> = second.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids, [uuid_like(2)], "the rest of the range, nothing twice");
    let empty = TaskFilter {
        created_after: Some(secs_after(100)),
        ..page(None)
    };
    assert!(s.task_list(&empty).await.unwrap().is_empty());
    let all = s
        .task_list(&TaskFilter {
            limit: 10,
            now: secs_after(30),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    let ids: Vec<_> = all.iter().map(|t| t.id.clone()).collect();
    assert_eq!(
        ids,
        [uuid_like(4), uuid_like(1), uuid_like(3), uuid_like(2)],
        "without a time range: newest created first too"
    );
    let rest = s
        .task_list(&TaskFilter {
            before_seq: all.get(1).map(|t| t.seq),
            before_created: all.get(1).map(|t| t.created_at),
            limit: 10,
            now: secs_after(30),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    let ids: Vec<_> = rest.iter().map(|t| t.id.clone()).collect();
    assert_eq!(
        ids,
        [uuid_like(3), uuid_like(2)],
        "a page without a time range follows the same keyset"
    );
}

all_backends!(
    insert_deduplicates_by_queue_and_key,
    concurrent_leases_never_share_a_task,
    one_lease_call_shares_tasks_among_waiting_requests,
    leases_extend_settle_and_reclaim_by_the_given_clock,
    list_filters_by_visible_state_at_now,
    a_creation_time_range_lists_newest_created_first_by_keyset
);
