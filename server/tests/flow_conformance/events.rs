//! Events and dead-letter notices, bulk operations and retry schedules.

use super::*;

/// Every transition is recorded, in order, with its state, attempt and worker.
async fn every_transition_is_an_event_in_order(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let start = s.event_head().await.unwrap();
    insert(
        &s,
        &[task("e", 1), task("e", 2)],
        &[FlowSpec::default(), after(&[1])],
    )
    .await;
    let l = s.task_lease_available(&lease("e", 1, at(1))).await.unwrap();
    let r = s
        .task_fail(&FailParams {
            task_id: id(1),
            lease_token: l[0].lease_token.clone().unwrap(),
            error: "try again".into(),
            non_retryable: false,
            retry_after: Some(Duration::from_secs(5)),
            now: at(2),
            jitter_unit: 0.5,
            prefer_same_worker: false,
        })
        .await
        .unwrap();
    assert!(matches!(r, Settled::Applied(_)));
    let l = s
        .task_lease_available(&lease("e", 1, at(6000)))
        .await
        .unwrap();
    assert_eq!(l[0].id, id(1));
    let r = s
        .task_checkpoint(&store::CheckpointParams {
            task_id: id(1),
            lease_token: l[0].lease_token.clone().unwrap(),
            checkpoint: b"half".to_vec(),
            extend_by: None,
            now: at(6001),
        })
        .await
        .unwrap();
    assert!(matches!(r, Settled::Applied(_)));
    complete_all(&s, &l, at(6002)).await;
    let kinds = |evs: &[store::EventRecord]| -> Vec<(EventKind, TaskState, u32)> {
        evs.iter().map(|e| (e.kind, e.state, e.attempt)).collect()
    };
    let one = s.event_list(&id(1), 0, 100).await.unwrap();
    assert_eq!(
        kinds(&one),
        [
            (EventKind::Submitted, TaskState::Ready, 0),
            (EventKind::Leased, TaskState::Leased, 1),
            (EventKind::Failed, TaskState::Scheduled, 1),
            (EventKind::RetryScheduled, TaskState::Scheduled, 1),
            (EventKind::Leased, TaskState::Leased, 2),
            (EventKind::Checkpointed, TaskState::Leased, 2),
            (EventKind::Succeeded, TaskState::Succeeded, 2),
        ]
    );
    assert_eq!(one[2].detail.as_deref(), Some("try again"));
    assert_eq!(one[1].worker_id.as_deref(), Some("w"));
    assert_eq!(one[1].time, at(1));
    let two = s.event_list(&id(2), 0, 100).await.unwrap();
    assert_eq!(
        kinds(&two),
        [
            (EventKind::Submitted, TaskState::Blocked, 0),
            (EventKind::Unblocked, TaskState::Ready, 0),
        ]
    );
    // The unblocking is in the completing transaction, right after it.
    let all = read_final(&s, start, 9).await;
    assert_eq!(all.len(), 9);
    assert!(all.windows(2).all(|w| w[0].event_id < w[1].event_id));
    assert_eq!(all[7].kind, EventKind::Succeeded);
    assert_eq!(all[8].kind, EventKind::Unblocked);
    // Paging by cursor, and the head is past everything recorded.
    let rest = read_final(&s, all[3].event_id, 5).await;
    assert_eq!(rest, all[4..]);
    assert!(s.event_head().await.unwrap() >= all[8].event_id);
    // Cancel, requeue, update and a lost lease are events too.
    let l = s
        .task_lease_available(&lease("e", 1, at(7000)))
        .await
        .unwrap();
    assert_eq!(l[0].id, id(2));
    let reaped = s.lease_reclaim_expired(at(60_000), 100).await.unwrap();
    assert_eq!(reaped.reclaimed, 1);
    s.task_cancel(&id(2), at(60_001)).await.unwrap();
    s.task_requeue(&id(2), at(60_002)).await.unwrap();
    s.task_update(
        &id(2),
        &store::TaskUpdate {
            priority: Some(9),
            ..Default::default()
        },
        at(60_003),
    )
    .await
    .unwrap();
    let two = s.event_list(&id(2), 0, 100).await.unwrap();
    let tail: Vec<EventKind> = two[2..].iter().map(|e| e.kind).collect();
    assert_eq!(
        tail,
        [
            EventKind::Leased,
            EventKind::HeartbeatLost,
            EventKind::RetryScheduled,
            EventKind::Cancelled,
            EventKind::Requeued,
            EventKind::Updated,
        ]
    );
    let updated = two.last().unwrap();
    assert_eq!(updated.detail.as_deref(), Some("priority 0 -> 9"));
    // Retention deletes old events only.
    let purged = s.event_purge(at(6002), 1000).await.unwrap();
    assert!(purged >= 7, "purged {purged}");
    let left = s.event_list(&id(2), 0, 100).await.unwrap();
    assert_eq!(left.first().map(|e| e.kind), Some(EventKind::Unblocked));
}

/// A task that goes DEAD in a queue with a dead-letter queue leaves a notice
/// task there, in the same transaction.
async fn a_dead_task_leaves_a_dead_letter_notice(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.queue_dead_letters_set(&[("work".into(), "alerts".into())])
        .await
        .unwrap();
    let keyed = NewTask {
        key: Some("order-7".into()),
        ..task("work", 1)
    };
    s.task_insert_many(&[keyed, task("other", 2)], t0())
        .await
        .unwrap();
    let l = s
        .task_lease_available(&lease("work", 1, t0()))
        .await
        .unwrap();
    fail_for_good(&s, &l[0], at(1)).await;
    let l = s
        .task_lease_available(&lease("other", 1, t0()))
        .await
        .unwrap();
    fail_for_good(&s, &l[0], at(1)).await;
    let notices = s
        .task_lease_available(&lease("alerts", 10, at(2)))
        .await
        .unwrap();
    assert_eq!(notices.len(), 1, "one notice, for the queue that has one");
    let v: serde_json::Value = serde_json::from_slice(&notices[0].payload).unwrap();
    assert_eq!(v["task_id"], id(1));
    assert_eq!(v["queue"], "work");
    assert_eq!(v["key"], "order-7");
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["last_error"], "boom");
}

/// Bulk cancel and requeue act on what the filter selects, up to the limit.
async fn bulk_operations_follow_the_filter(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let mk = |n: usize, key: &str| NewTask {
        key: Some(key.into()),
        ..task("bulk", n)
    };
    s.task_insert_many(
        &[mk(1, "eu-1"), mk(2, "eu-2"), mk(3, "us-1"), mk(4, "eu-3")],
        t0(),
    )
    .await
    .unwrap();
    let eu = BulkFilter {
        queue: "bulk".into(),
        key_prefix: Some("eu-".into()),
        limit: 2,
        now: at(1),
        ..Default::default()
    };
    let picked = s.task_select(&eu).await.unwrap();
    let ids: Vec<String> = picked.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids, [id(1), id(2)], "oldest first, up to the limit");
    let l = s
        .task_lease_available(&lease("bulk", 1, at(1)))
        .await
        .unwrap();
    assert_eq!(l[0].id, id(1));
    let done = s.task_cancel_many(&ids, at(2)).await.unwrap();
    assert_eq!((done.cancelled, done.cancel_requested), (1, 1));
    assert_eq!(get(&s, 2).await.state, StoredState::Cancelled);
    assert!(get(&s, 1).await.cancel_requested);
    let errs = BulkFilter {
        queue: "bulk".into(),
        states: vec![TaskState::Cancelled],
        error_contains: None,
        limit: 10,
        now: at(3),
        ..Default::default()
    };
    let cancelled = s.task_select(&errs).await.unwrap();
    assert_eq!(cancelled.len(), 1);
    let n = s
        .task_requeue_many(&[(id(2), at(5000)), (id(3), at(5000))], at(3))
        .await
        .unwrap();
    assert_eq!(n, 1, "only dead or cancelled tasks are requeued");
    let t = get(&s, 2).await;
    assert_eq!(t.state, StoredState::Pending);
    assert_eq!(t.run_at, at(5000));
}

/// RetryPolicy.schedule reads back with the task, as it was inserted.
async fn a_retry_schedule_reads_back(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let schedule = vec![Duration::from_secs(1), Duration::from_millis(2500)];
    let flow = FlowSpec {
        retry_schedule: schedule.clone(),
        ..Default::default()
    };
    insert(
        &s,
        &[task("rs", 1), task("rs", 2)],
        &[flow, FlowSpec::default()],
    )
    .await;
    assert_eq!(get(&s, 1).await.retry_schedule, schedule);
    assert!(get(&s, 2).await.retry_schedule.is_empty());
    // And in a list, and after a lease.
    let listed = s
        .task_list(&TaskFilter {
            queue: Some("rs".into()),
            limit: 10,
            now: t0(),
            ..Default::default()
        })
        .await
        .unwrap();
    let first = listed.iter().find(|t| t.id == id(1)).unwrap();
    assert_eq!(first.retry_schedule, schedule);
    let leased = s.task_lease_available(&lease("rs", 2, t0())).await.unwrap();
    let first = leased.iter().find(|t| t.id == id(1)).unwrap();
    assert_eq!(first.retry_schedule, schedule);
}

/// RetryPolicy.schedule: each retry waits its entry, the last one repeating.
async fn a_retry_schedule_sets_each_delay(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let t = NewTask {
        retry: RetryPolicy {
            max_attempts: 4,
            ..task("rs", 1).retry
        },
        ..task("rs", 1)
    };
    let flow = FlowSpec {
        retry_schedule: vec![Duration::from_secs(5), Duration::from_secs(60)],
        ..Default::default()
    };
    insert(&s, &[t], &[flow]).await;
    let mut now = t0();
    for want in [5, 60, 60] {
        let l = s.task_lease_available(&lease("rs", 1, now)).await.unwrap();
        assert_eq!(l.len(), 1);
        let r = s
            .task_fail(&FailParams {
                task_id: id(1),
                lease_token: l[0].lease_token.clone().unwrap(),
                error: "again".into(),
                non_retryable: false,
                retry_after: None,
                now,
                jitter_unit: 0.9,
                prefer_same_worker: false,
            })
            .await
            .unwrap();
        let Settled::Applied(r) = r else {
            panic!("{r:?}")
        };
        let next = r.next_run_at.unwrap();
        assert_eq!(next, now + chrono::Duration::seconds(want));
        now = next;
    }
}

/// Postgres: an event whose transaction commits late is never skipped. Event ids
/// come from transaction ids, and reads stop below the oldest running writer, so
/// a later transaction's events wait until the earlier one ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_is_never_skipped_by_a_reader() {
    let Some((s, db)) = open(Backend::Postgres).await else {
        return;
    };
    s.task_insert_many(&[task("l", 1), task("l", 2)], t0())
        .await
        .unwrap();
    let start = read_final(&s, 0, 2).await.last().unwrap().event_id;
    // The early writer: its transaction starts (and takes its id) first.
    let mut early = sqlx::postgres::PgConnection::connect(&db.url)
        .await
        .unwrap();
    use sqlx::Connection;
    sqlx::query("BEGIN").execute(&mut early).await.unwrap();
    // A change and its event, as a store statement writes them.
    sqlx::query("UPDATE tasks SET priority = 5, updated_at = updated_at + 1 WHERE id = $1")
        .bind(id(1))
        .execute(&mut early)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO task_event_batches (first_id, last_id, task_ids, queues, kinds, states, \
           attempts, workers, times, details) \
         SELECT b, b, ARRAY[$1], ARRAY['l'], ARRAY['updated'], ARRAY['ready'], ARRAY[0::bigint], \
           ARRAY[NULL::text], ARRAY[1::bigint], ARRAY[NULL::text] FROM taskbroker_event_base() b",
    )
    .bind(id(1))
    .execute(&mut early)
    .await
    .unwrap();
    // The late writer commits first.
    s.task_update(
        &id(2),
        &store::TaskUpdate {
            priority: Some(7),
            ..Default::default()
        },
        at(5),
    )
    .await
    .unwrap();
    assert!(
        s.event_read(start, 100).await.unwrap().is_empty(),
        "nothing is final while the early writer runs"
    );
    assert!(s.event_head().await.unwrap() < s.event_list(&id(2), 0, 10).await.unwrap()[1].event_id);
    sqlx::query("COMMIT").execute(&mut early).await.unwrap();
    // The horizon moves on at the next read after the commit; read until both
    // events are final.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    let events = loop {
        let events = s.event_read(start, 100).await.unwrap();
        if events.len() >= 2 || tokio::time::Instant::now() > give_up {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let order: Vec<&str> = events.iter().map(|e| e.task_id.as_str()).collect();
    assert_eq!(order, [id(1), id(2)], "the early writer's event first");
    assert!(events.iter().all(|e| e.kind == EventKind::Updated));
}

all_backends!(
    a_retry_schedule_reads_back,
    a_retry_schedule_sets_each_delay,
    every_transition_is_an_event_in_order,
    a_dead_task_leaves_a_dead_letter_notice,
    bulk_operations_follow_the_filter
);
