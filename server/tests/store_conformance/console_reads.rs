//! Attempt counts per bucket, dead-letter groups and lease holders, as the console reads them.

use super::*;

/// Leases every ready task of `queue` at `at` and settles each: `ok` completes it
/// `ran` seconds later, otherwise it fails for good with `error`.
async fn settle_all(s: &Arc<dyn Store>, queue: &str, at: i64, ran: i64, ok: bool, error: &str) {
    let leased = s
        .task_lease_available(&lease_params(queue, 100, secs_after(at)))
        .await
        .unwrap();
    for t in leased {
        let token = t.lease_token.clone().unwrap();
        if ok {
            let p = CompleteParams {
                task_id: t.id,
                lease_token: token,
                result: Vec::new(),
                now: secs_after(at + ran),
            };
            assert!(matches!(
                s.task_complete(&p).await.unwrap(),
                Settled::Applied(_)
            ));
        } else {
            let p = FailParams {
                prefer_same_worker: false,
                task_id: t.id,
                lease_token: token,
                error: error.into(),
                non_retryable: true,
                retry_after: None,
                now: secs_after(at + ran),
                jitter_unit: 0.5,
            };
            assert!(matches!(
                s.task_fail(&p).await.unwrap(),
                Settled::Applied(_)
            ));
        }
    }
}

async fn attempts_are_counted_per_bucket_with_their_run_times(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[task("h", 1), task("h", 2)], t0())
        .await
        .unwrap();
    settle_all(&s, "h", 0, 2, true, "").await;
    s.task_insert_many(&[task("h", 3)], t0()).await.unwrap();
    settle_all(&s, "h", 61, 4, false, "x").await;
    s.task_insert_many(&[task("g", 4)], t0()).await.unwrap();
    settle_all(&s, "g", 130, 1, true, "").await;
    let buckets = s
        .attempt_histogram(&store::AttemptHistogramParams {
            since: t0(),
            until: secs_after(3600),
            bucket: Duration::from_secs(60),
            queue: None,
        })
        .await
        .unwrap();
    let got: Vec<_> = buckets
        .iter()
        .map(|b| (b.queue.as_str(), b.bucket, b.succeeded, b.failed))
        .collect();
    assert_eq!(got, [("g", 2, 1, 0), ("h", 0, 2, 0), ("h", 1, 0, 1)]);
    let one_queue = s
        .attempt_histogram(&store::AttemptHistogramParams {
            since: t0(),
            until: secs_after(86_400),
            bucket: Duration::from_secs(3600),
            queue: Some("h".into()),
        })
        .await
        .unwrap();
    let got: Vec<_> = one_queue
        .iter()
        .map(|b| (b.queue.as_str(), b.bucket, b.succeeded, b.failed))
        .collect();
    assert_eq!(got, [("h", 0, 2, 1)], "one queue, hourly");
    let later = s
        .attempt_histogram(&store::AttemptHistogramParams {
            since: secs_after(60),
            until: secs_after(120),
            bucket: Duration::from_secs(60),
            queue: None,
        })
        .await
        .unwrap();
    assert_eq!(later.len(), 1, "only [since, until): {later:?}");

    let d = s
        .attempt_durations(&store::AttemptDurationParams {
            since: t0(),
            limit: 2,
        })
        .await
        .unwrap();
    // Successful attempts only, the most recent first, at most `limit`.
    assert_eq!(d.len(), 2);
    assert_eq!(
        (d[0].queue.as_str(), d[0].run_time),
        ("g", Duration::from_secs(1))
    );
    assert_eq!(
        (d[1].queue.as_str(), d[1].run_time),
        ("h", Duration::from_secs(2))
    );
}

async fn dead_tasks_group_by_error_and_requeue_together(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&(1..=3).map(|n| task("d", n)).collect::<Vec<_>>(), t0())
        .await
        .unwrap();
    settle_all(&s, "d", 0, 1, false, "smtp down").await;
    s.task_insert_many(&[task("d", 4), task("e", 5)], t0())
        .await
        .unwrap();
    settle_all(&s, "d", 5, 1, false, "bad address").await;
    settle_all(&s, "e", 5, 1, false, "smtp down").await;
    let groups = s
        .task_dead_groups(&store::DeadGroupParams {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let got: Vec<_> = groups
        .iter()
        .map(|g| (g.queue.as_str(), g.error.as_str(), g.count))
        .collect();
    assert_eq!(
        got,
        [
            ("d", "smtp down", 3),
            ("d", "bad address", 1),
            ("e", "smtp down", 1)
        ]
    );
    assert_eq!(groups[0].last_finished_at, Some(secs_after(1)));
    let one = s
        .task_dead_groups(&store::DeadGroupParams {
            queue: Some("d".into()),
            error: Some("bad address".into()),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].count, 1);
    let filtered = s
        .task_list(&TaskFilter {
            states: vec![TaskState::Dead],
            last_error: Some("smtp down".into()),
            limit: 10,
            now: secs_after(10),
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(filtered.len(), 4);

    let requeue = |limit| store::RequeueDeadParams {
        queue: "d".into(),
        error: "smtp down".into(),
        limit,
        now: secs_after(10),
    };
    assert_eq!(s.task_requeue_dead(&requeue(2)).await.unwrap(), 2);
    assert_eq!(s.task_requeue_dead(&requeue(10)).await.unwrap(), 1);
    assert_eq!(s.task_requeue_dead(&requeue(10)).await.unwrap(), 0);
    let back = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(back.state, StoredState::Pending);
    assert_eq!(back.run_at, secs_after(10));
    assert_eq!(back.attempts_allowed, back.attempt + back.max_attempts);
    assert_eq!(back.finished_at, None);
    let other = s.task_get(&uuid_like(5)).await.unwrap().unwrap();
    assert_eq!(
        other.state,
        StoredState::Dead,
        "other queues are left alone"
    );
    let leased = s
        .task_lease_available(&lease_params("d", 10, secs_after(10)))
        .await
        .unwrap();
    assert_eq!(leased.len(), 3, "requeued tasks lease again");
}

async fn dead_tasks_are_cancelled_by_group_or_one_at_a_time(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&(1..=3).map(|n| task("c", n)).collect::<Vec<_>>(), t0())
        .await
        .unwrap();
    settle_all(&s, "c", 0, 1, false, "boom").await;
    s.task_insert_many(&[task("c", 4), task("k", 5)], t0())
        .await
        .unwrap();
    settle_all(&s, "c", 5, 1, false, "other").await;
    settle_all(&s, "k", 5, 1, false, "boom").await;
    s.task_insert_many(&[task("c", 6)], t0()).await.unwrap();
    let died_at = s
        .task_get(&uuid_like(1))
        .await
        .unwrap()
        .unwrap()
        .finished_at;
    let cancel = |error: Option<&str>, task_id: Option<usize>, limit| store::CancelDeadParams {
        queue: "c".into(),
        error: error.map(str::to_string),
        task_id: task_id.map(uuid_like),
        limit,
        now: secs_after(20),
    };
    assert_eq!(
        s.task_cancel_dead(&cancel(Some("boom"), None, 2))
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        s.task_cancel_dead(&cancel(Some("boom"), None, 10))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.task_cancel_dead(&cancel(Some("boom"), None, 10))
            .await
            .unwrap(),
        0
    );
    let t = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(t.state, StoredState::Cancelled);
    assert_eq!(t.last_error.as_deref(), Some("boom"), "the reason is kept");
    assert_eq!(t.finished_at, died_at, "when it died is kept");
    assert_eq!(t.updated_at, secs_after(20));
    assert_eq!(
        s.attempt_list(&uuid_like(1)).await.unwrap().unwrap().len(),
        1
    );
    for (n, want) in [
        (4, StoredState::Dead),
        (5, StoredState::Dead),
        (6, StoredState::Pending),
    ] {
        let t = s.task_get(&uuid_like(n)).await.unwrap().unwrap();
        assert_eq!(
            t.state, want,
            "task {n}: other errors, queues and states are left alone"
        );
    }
    assert_eq!(
        s.task_cancel_dead(&cancel(None, Some(6), 10))
            .await
            .unwrap(),
        0,
        "a pending task is not a dead letter"
    );
    assert_eq!(
        s.task_cancel_dead(&cancel(None, Some(4), 10))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.task_get(&uuid_like(4)).await.unwrap().unwrap().state,
        StoredState::Cancelled
    );
    let groups = s
        .task_dead_groups(&store::DeadGroupParams {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let got: Vec<_> = groups.iter().map(|g| (g.queue.as_str(), g.count)).collect();
    assert_eq!(got, [("k", 1)]);
    assert!(
        matches!(
            s.task_requeue(&uuid_like(1), secs_after(30)).await.unwrap(),
            Changed::Done(_)
        ),
        "a cancelled dead letter can be requeued"
    );
}

async fn lease_holders_are_grouped_by_worker_and_queue(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[task("x", 1), task("x", 2), task("y", 3)], t0())
        .await
        .unwrap();
    s.task_lease_available(&lease_params("x", 2, t0()))
        .await
        .unwrap();
    let mut p = lease_params("y", 1, secs_after(5));
    p.worker_id = "w2".into();
    p.worker_address = "10.0.0.2:7".into();
    s.task_lease_available(&p).await.unwrap();
    let holders = s
        .lease_holders(&store::LeaseHolderParams { limit: 10 })
        .await
        .unwrap();
    let got: Vec<_> = holders
        .iter()
        .map(|h| {
            (
                h.worker_id.as_str(),
                h.worker_address.as_str(),
                h.queue.as_str(),
                h.tasks,
            )
        })
        .collect();
    assert_eq!(
        got,
        [("w", "127.0.0.1:1", "x", 2), ("w2", "10.0.0.2:7", "y", 1)]
    );
    assert_eq!(holders[0].first_leased_at, Some(t0()));
    assert_eq!(holders[1].last_seen_at, secs_after(5));
}

all_backends!(
    attempts_are_counted_per_bucket_with_their_run_times,
    dead_tasks_group_by_error_and_requeue_together,
    dead_tasks_are_cancelled_by_group_or_one_at_a_time,
    lease_holders_are_grouped_by_worker_and_queue
);
