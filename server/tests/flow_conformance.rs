//! Flow store conformance, on SQLite and Postgres: dependencies (chains and
//! diamonds of 10,000 tasks, failure propagation, run_if_dependency_fails),
//! the event log of every transition, dead-letter notices, bulk operations.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use taskbroker_server::domain::event::EventKind;
use taskbroker_server::domain::{RetryPolicy, StoredState, TaskState};
use taskbroker_server::store::{
    self, BulkFilter, CompleteParams, FailParams, FlowInserted, FlowSpec, Inserted, LeaseParams,
    NewTask, Settled, Store, TaskFilter, TaskRecord,
};

async fn open(b: Backend) -> Option<(Arc<dyn Store>, TestDb)> {
    let db = test_db(b).await?;
    let s = store::connect(&db.url, 8).await.expect("connect");
    s.migrate().await.expect("migrate");
    Some((s, db))
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000).unwrap()
}

fn at(ms: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::milliseconds(ms)
}

fn id(n: usize) -> String {
    format!("00000000-0000-7000-8000-{n:012}")
}

fn task(queue: &str, n: usize) -> NewTask {
    NewTask {
        id: id(n),
        queue: queue.into(),
        key: None,
        payload: n.to_string().into_bytes(),
        priority: 0,
        run_at: t0(),
        deadline: None,
        retry: RetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::ZERO,
            jitter: 0.0,
            ..RetryPolicy::default()
        },
        metadata: BTreeMap::new(),
        routing: Default::default(),
        concurrency_key: None,
        checkpoint: None,
    }
}

fn after(deps: &[usize]) -> FlowSpec {
    FlowSpec {
        depends_on: deps.iter().map(|&n| id(n)).collect(),
        ..Default::default()
    }
}

fn lease(queue: &str, max: u32, now: DateTime<Utc>) -> LeaseParams {
    LeaseParams {
        queues: vec![queue.into()],
        max_tasks: max,
        max_reply_bytes: 64 << 20,
        worker_id: "w".into(),
        worker_address: "127.0.0.1:1".into(),
        lease_duration: Duration::from_secs(30),
        now,
        routing: Default::default(),
    }
}

async fn insert(s: &Arc<dyn Store>, tasks: &[NewTask], flows: &[FlowSpec]) -> Vec<Inserted> {
    match s.task_insert_flow(tasks, flows, t0(), None).await.unwrap() {
        FlowInserted::Done(r) => r,
        other => panic!("insert refused: {other:?}"),
    }
}

async fn get(s: &Arc<dyn Store>, n: usize) -> TaskRecord {
    s.task_get(&id(n)).await.unwrap().unwrap()
}

async fn complete_all(s: &Arc<dyn Store>, leased: &[TaskRecord], now: DateTime<Utc>) {
    let ps: Vec<CompleteParams> = leased
        .iter()
        .map(|t| CompleteParams {
            task_id: t.id.clone(),
            lease_token: t.lease_token.clone().unwrap(),
            result: Vec::new(),
            now,
        })
        .collect();
    for r in s.task_complete_many(&ps).await.unwrap() {
        assert!(matches!(r, Settled::Applied(_)), "{r:?}");
    }
}

async fn fail_for_good(s: &Arc<dyn Store>, t: &TaskRecord, now: DateTime<Utc>) {
    let r = s
        .task_fail(&FailParams {
            task_id: t.id.clone(),
            lease_token: t.lease_token.clone().unwrap(),
            error: "boom".into(),
            non_retryable: true,
            retry_after: None,
            now,
            jitter_unit: 0.5,
            prefer_same_worker: false,
        })
        .await
        .unwrap();
    assert!(matches!(r, Settled::Applied(_)), "{r:?}");
}

/// Reads events after `after` until `n` are final (on Postgres, transactions of
/// other tests on the same cluster hold the horizon until they end; bounded).
async fn read_final(s: &Arc<dyn Store>, after: i64, n: usize) -> Vec<store::EventRecord> {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = s.event_read(after, 1000).await.unwrap();
        if events.len() >= n || tokio::time::Instant::now() > give_up {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// 10,000 tasks in a chain: each becomes ready only when the one before it
/// succeeded; each completion touches only its one dependent.
async fn a_chain_of_ten_thousand_runs_in_order(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    const N: usize = 10_000;
    for start in (0..N).step_by(1000) {
        let tasks: Vec<NewTask> = (start..start + 1000).map(|n| task("chain", n)).collect();
        let flows: Vec<FlowSpec> = (start..start + 1000)
            .map(|n| match n {
                0 => FlowSpec::default(),
                n if n == start => after(&[n - 1]),
                n => FlowSpec {
                    depends_on_index: vec![n - start - 1],
                    ..Default::default()
                },
            })
            .collect();
        insert(&s, &tasks, &flows).await;
    }
    assert_eq!(get(&s, 1).await.state, StoredState::Blocked);
    let info = s.task_flow_info(&[id(1001)]).await.unwrap();
    assert_eq!(info[&id(1001)].depends_on, [id(1000)]);
    assert_eq!(info[&id(1001)].deps_remaining, 1);
    for n in 0..N {
        let now = at(n as i64);
        let leased = s
            .task_lease_available(&lease("chain", 10, now))
            .await
            .unwrap();
        assert_eq!(leased.len(), 1, "exactly one ready at step {n}");
        assert_eq!(leased[0].id, id(n));
        complete_all(&s, &leased, now).await;
    }
    assert_eq!(get(&s, N - 1).await.state, StoredState::Succeeded);
}

/// A root, 9,998 tasks that wait for it, and a sink that waits for all of them.
async fn a_diamond_of_ten_thousand_joins_once(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    const MIDDLE: usize = 9_998;
    insert(&s, &[task("d", 0)], &[FlowSpec::default()]).await;
    for start in (1..=MIDDLE).step_by(1000) {
        let end = (start + 1000).min(MIDDLE + 1);
        let tasks: Vec<NewTask> = (start..end).map(|n| task("d", n)).collect();
        let flows: Vec<FlowSpec> = (start..end).map(|_| after(&[0])).collect();
        insert(&s, &tasks, &flows).await;
    }
    let sink = MIDDLE + 1;
    let all: Vec<usize> = (1..=MIDDLE).collect();
    insert(&s, &[task("sink", sink)], &[after(&all)]).await;
    assert_eq!(get(&s, sink).await.state, StoredState::Blocked);
    let root = s.task_lease_available(&lease("d", 1, t0())).await.unwrap();
    complete_all(&s, &root, t0()).await;
    let mut done = 0;
    loop {
        let leased = s
            .task_lease_available(&lease("d", 256, at(1)))
            .await
            .unwrap();
        if leased.is_empty() {
            break;
        }
        done += leased.len();
        if done == MIDDLE {
            let info = s.task_flow_info(&[id(sink)]).await.unwrap();
            assert_eq!(info[&id(sink)].deps_remaining, leased.len() as u32);
            assert_eq!(get(&s, sink).await.state, StoredState::Blocked);
        }
        complete_all(&s, &leased, at(1)).await;
    }
    assert_eq!(done, MIDDLE);
    let t = get(&s, sink).await;
    assert_eq!(t.state, StoredState::Pending, "the sink unblocked");
    let leased = s
        .task_lease_available(&lease("sink", 1, at(2)))
        .await
        .unwrap();
    assert_eq!(leased[0].id, id(sink));
}

/// A failed head cancels a chain of 10,000 (DEPENDENCY_FAILED), except a task that
/// runs anyway; that one's own dependents then wait for it as usual.
async fn a_failed_dependency_cancels_its_dependents_transitively(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    const N: usize = 10_000;
    for start in (0..N).step_by(1000) {
        let tasks: Vec<NewTask> = (start..start + 1000).map(|n| task("f", n)).collect();
        let flows: Vec<FlowSpec> = (start..start + 1000)
            .map(|n| {
                if n == 0 {
                    FlowSpec::default()
                } else {
                    after(&[n - 1])
                }
            })
            .collect();
        insert(&s, &tasks, &flows).await;
    }
    // Beside the chain: one that runs anyway, and one that waits for it.
    let anyway = FlowSpec {
        run_if_dependency_fails: true,
        ..after(&[5])
    };
    insert(
        &s,
        &[task("g", N), task("g", N + 1)],
        &[anyway, after(&[N])],
    )
    .await;
    let head = s.task_lease_available(&lease("f", 1, t0())).await.unwrap();
    fail_for_good(&s, &head[0], at(1)).await;
    assert_eq!(get(&s, 0).await.state, StoredState::Dead);
    for n in [1, 2, 5, 5000, N - 1] {
        let t = get(&s, n).await;
        assert_eq!(t.state, StoredState::Cancelled, "task {n}");
        assert_eq!(t.last_error.as_deref(), Some("DEPENDENCY_FAILED"));
        assert_eq!(t.finished_at, Some(at(1)));
    }
    let info = s.task_flow_info(&[id(7)]).await.unwrap();
    assert_eq!(
        info[&id(7)].cancel_reason.as_deref(),
        Some("dependency_failed")
    );
    let cancelled = s
        .task_select(&BulkFilter {
            queue: "f".into(),
            states: vec![TaskState::Cancelled],
            limit: 100_000,
            now: at(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(cancelled.len(), N - 1);
    assert_eq!(get(&s, N).await.state, StoredState::Pending, "runs anyway");
    assert_eq!(get(&s, N + 1).await.state, StoredState::Blocked);
    let g = s.task_lease_available(&lease("g", 5, at(2))).await.unwrap();
    assert_eq!(g.len(), 1);
    complete_all(&s, &g, at(3)).await;
    assert_eq!(get(&s, N + 1).await.state, StoredState::Pending);
}

/// A dependency that finished before the dependent was submitted counts at once.
async fn finished_dependencies_count_at_submit(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    insert(
        &s,
        &[task("q", 1), task("q", 2)],
        &[FlowSpec::default(), FlowSpec::default()],
    )
    .await;
    let l = s.task_lease_available(&lease("q", 2, t0())).await.unwrap();
    let (ok, bad) = if l[0].id == id(1) {
        (&l[0], &l[1])
    } else {
        (&l[1], &l[0])
    };
    complete_all(&s, std::slice::from_ref(ok), at(1)).await;
    fail_for_good(&s, bad, at(1)).await;
    insert(
        &s,
        &[task("r", 3), task("r", 4), task("r", 5)],
        &[
            after(&[1]),
            after(&[1, 2]),
            FlowSpec {
                run_if_dependency_fails: true,
                ..after(&[2])
            },
        ],
    )
    .await;
    assert_eq!(get(&s, 3).await.state, StoredState::Pending);
    let four = get(&s, 4).await;
    assert_eq!(four.state, StoredState::Cancelled);
    assert_eq!(four.last_error.as_deref(), Some("DEPENDENCY_FAILED"));
    assert_eq!(get(&s, 5).await.state, StoredState::Pending);
    // An unknown id inserts nothing of the batch.
    let r = s
        .task_insert_flow(
            &[task("r", 6), task("r", 7)],
            &[FlowSpec::default(), after(&[1, 999])],
            t0(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(r, FlowInserted::UnknownDependency { task: 1, dep: 1 });
    assert!(s.task_get(&id(6)).await.unwrap().is_none());
}

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

all_backends!(
    a_retry_schedule_reads_back,
    a_retry_schedule_sets_each_delay,
    a_chain_of_ten_thousand_runs_in_order,
    a_diamond_of_ten_thousand_joins_once,
    a_failed_dependency_cancels_its_dependents_transitively,
    finished_dependencies_count_at_submit,
    every_transition_is_an_event_in_order,
    a_dead_task_leaves_a_dead_letter_notice,
    bulk_operations_follow_the_filter,
);

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
