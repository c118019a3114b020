//! The history a store keeps, on SQLite, Postgres and MySQL: the events of
//! tasks submitted, leased and settled together read back per task and from
//! any cursor, and the attempts of a task that failed before it succeeded. On
//! Postgres a statement's events are one row and a succeeded attempt stays on
//! its task row (migration 0018), as it does on MySQL (migration 0011); a
//! database upgraded with rows of the earlier form reads the same.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use taskbroker_server::domain::event::EventKind;
use taskbroker_server::domain::{AttemptOutcome, RetryPolicy, TaskState};
use taskbroker_server::store::{
    self, AttemptHistogramParams, CompleteParams, EventRecord, FailParams, LeaseParams, NewTask,
    Settled, Store,
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

fn task(queue: &str, n: usize, max_attempts: u32) -> NewTask {
    NewTask {
        id: id(n),
        queue: queue.into(),
        key: None,
        payload: n.to_string().into_bytes(),
        priority: 0,
        run_at: t0(),
        deadline: None,
        retry: RetryPolicy {
            max_attempts,
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

fn lease(queue: &str, max: u32, worker: &str, now: DateTime<Utc>) -> LeaseParams {
    LeaseParams {
        queues: vec![queue.into()],
        max_tasks: max,
        max_reply_bytes: 64 << 20,
        worker_id: worker.into(),
        worker_address: format!("{worker}.local:1"),
        lease_duration: Duration::from_secs(30),
        now,
        routing: Default::default(),
    }
}

/// The upgraded task of queue `old` (failed by w1, then succeeded by w2): its
/// history lists each attempt once, and the histogram counts each once.
async fn assert_old_attempts_once(s: &Arc<dyn Store>) {
    let attempts = s.attempt_list(&id(1)).await.unwrap().unwrap();
    let outcomes: Vec<_> = attempts
        .iter()
        .map(|a| (a.attempt, a.worker_id.as_str(), a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            (1, "w1", AttemptOutcome::Failed),
            (2, "w2", AttemptOutcome::Succeeded)
        ]
    );
    let buckets = s
        .attempt_histogram(&AttemptHistogramParams {
            since: DateTime::from_timestamp_millis(0).unwrap(),
            until: DateTime::from_timestamp_millis(1000).unwrap(),
            bucket: Duration::from_secs(3600),
            queue: None,
        })
        .await
        .unwrap();
    assert_eq!(
        buckets
            .iter()
            .map(|b| (b.queue.as_str(), b.succeeded, b.failed))
            .collect::<Vec<_>>(),
        [("old", 1, 1)]
    );
}

/// Reads events after `after` until `n` are final (on Postgres, transactions of
/// other tests on the same cluster hold the horizon until they end; bounded).
async fn read_final(s: &Arc<dyn Store>, after: i64, n: usize) -> Vec<EventRecord> {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = s.event_read(after, 1000).await.unwrap();
        if events.len() >= n || tokio::time::Instant::now() > give_up {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn kinds(evs: &[EventRecord]) -> Vec<(EventKind, TaskState, u32)> {
    evs.iter().map(|e| (e.kind, e.state, e.attempt)).collect()
}

/// Three tasks submitted in one call, leased in one, completed in one: each
/// task's history is its three events in order, and the log holds all nine in
/// id order, a batch's events together.
async fn a_batch_reads_back_per_task_in_order(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let start = s.event_head().await.unwrap();
    let tasks: Vec<NewTask> = (1..=3).map(|n| task("b", n, 3)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let leased = s
        .task_lease_available(&lease("b", 3, "w1", at(1)))
        .await
        .unwrap();
    assert_eq!(leased.len(), 3);
    let ps: Vec<CompleteParams> = leased
        .iter()
        .map(|t| CompleteParams {
            task_id: t.id.clone(),
            lease_token: t.lease_token.clone().unwrap(),
            result: Vec::new(),
            now: at(2),
        })
        .collect();
    for r in s.task_complete_many(&ps).await.unwrap() {
        assert!(matches!(r, Settled::Applied(_)), "{r:?}");
    }
    let all = read_final(&s, start, 9).await;
    assert_eq!(all.len(), 9, "{all:?}");
    assert!(all.windows(2).all(|w| w[0].event_id < w[1].event_id));
    let firsts: Vec<EventKind> = all.iter().map(|e| e.kind).collect();
    assert_eq!(
        firsts,
        [
            [EventKind::Submitted; 3],
            [EventKind::Leased; 3],
            [EventKind::Succeeded; 3]
        ]
        .concat()
    );
    for n in 1..=3 {
        let mine = s.event_list(&id(n), 0, 100).await.unwrap();
        assert_eq!(
            kinds(&mine),
            [
                (EventKind::Submitted, TaskState::Ready, 0),
                (EventKind::Leased, TaskState::Leased, 1),
                (EventKind::Succeeded, TaskState::Succeeded, 1),
            ],
            "task {n}"
        );
        assert!(mine.iter().all(|e| e.task_id == id(n) && e.queue == "b"));
        assert_eq!(mine[1].worker_id.as_deref(), Some("w1"));
        assert_eq!(mine[2].time, at(2));
        // The same events as the log holds, ids and all.
        let logged: Vec<&EventRecord> = all.iter().filter(|e| e.task_id == id(n)).collect();
        assert_eq!(mine.iter().collect::<Vec<_>>(), logged);
        // One at a time from each cursor: the next one, never a neighbour's.
        let mut after = 0;
        let mut paged = Vec::new();
        loop {
            let page = s.event_list(&id(n), after, 1).await.unwrap();
            let Some(e) = page.first() else { break };
            after = e.event_id;
            paged.push(e.clone());
        }
        assert_eq!(paged, mine);
    }
}

/// A cursor that names an event inside a batch (the way a WatchTasks resume
/// token does) resumes with the next event of that batch, and pages of two
/// cross batch boundaries without a gap or a repeat.
async fn a_cursor_inside_a_batch_resumes_after_it(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let start = s.event_head().await.unwrap();
    let tasks: Vec<NewTask> = (1..=5).map(|n| task("c", n, 3)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    s.task_insert_many(&[task("c", 6, 3), task("c", 7, 3)], t0())
        .await
        .unwrap();
    let all = read_final(&s, start, 7).await;
    assert_eq!(all.len(), 7);
    for k in 0..all.len() {
        let rest = s.event_read(all[k].event_id, 1000).await.unwrap();
        assert_eq!(rest, all[k + 1..], "resumed after event {k}");
        let one = s.event_read(all[k].event_id, 1).await.unwrap();
        assert_eq!(
            one,
            all[k + 1..(k + 2).min(all.len())],
            "one after event {k}"
        );
    }
    let mut after = start;
    let mut paged = Vec::new();
    loop {
        let page = s.event_read(after, 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = last.event_id;
        paged.extend(page);
    }
    assert_eq!(paged, all);
}

/// A task that failed twice and then succeeded has three attempts: each with
/// its worker, address, lease and finish times, outcome and error. The
/// successful one counts in the queue's and worker's figures like the others,
/// and a repeated Complete of it is answered as already settled.
async fn two_failures_then_a_success_keep_three_attempts(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[task("a", 1, 3)], t0()).await.unwrap();
    for (k, worker) in ["w1", "w2"].into_iter().enumerate() {
        let now = at(1000 * k as i64 + 10);
        let l = s
            .task_lease_available(&lease("a", 1, worker, now))
            .await
            .unwrap();
        assert_eq!(l.len(), 1, "attempt {}", k + 1);
        let r = s
            .task_fail(&FailParams {
                task_id: id(1),
                lease_token: l[0].lease_token.clone().unwrap(),
                error: format!("error {}", k + 1),
                non_retryable: false,
                retry_after: Some(Duration::ZERO),
                now: now + chrono::Duration::milliseconds(5),
                jitter_unit: 0.5,
                prefer_same_worker: false,
            })
            .await
            .unwrap();
        assert!(matches!(r, Settled::Applied(_)), "{r:?}");
    }
    let l = s
        .task_lease_available(&lease("a", 1, "w3", at(2010)))
        .await
        .unwrap();
    assert_eq!(l.len(), 1);
    let done = CompleteParams {
        task_id: id(1),
        lease_token: l[0].lease_token.clone().unwrap(),
        result: b"ok".to_vec(),
        now: at(2017),
    };
    let r = s.task_complete(&done).await.unwrap();
    assert!(matches!(r, Settled::Applied(_)), "{r:?}");
    let again = s.task_complete(&done).await.unwrap();
    assert!(matches!(again, Settled::AlreadySettled(_)), "{again:?}");
    let many = s
        .task_complete_many(std::slice::from_ref(&done))
        .await
        .unwrap();
    assert!(matches!(many[0], Settled::AlreadySettled(_)), "{many:?}");

    let attempts = s.attempt_list(&id(1)).await.unwrap().unwrap();
    let seen: Vec<_> = attempts
        .iter()
        .map(|a| {
            (
                a.attempt,
                a.worker_id.as_str(),
                a.worker_address.as_str(),
                a.leased_at,
                a.finished_at,
                a.outcome,
                a.error.as_deref(),
                a.fencing_token,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                1,
                "w1",
                "w1.local:1",
                at(10),
                Some(at(15)),
                AttemptOutcome::Failed,
                Some("error 1"),
                1
            ),
            (
                2,
                "w2",
                "w2.local:1",
                at(1010),
                Some(at(1015)),
                AttemptOutcome::Failed,
                Some("error 2"),
                2
            ),
            (
                3,
                "w3",
                "w3.local:1",
                at(2010),
                Some(at(2017)),
                AttemptOutcome::Succeeded,
                None,
                3
            ),
        ]
    );
    // The figures over the attempts count the success once and the failures.
    let buckets = s
        .attempt_histogram(&AttemptHistogramParams {
            since: t0(),
            until: at(60_000),
            bucket: Duration::from_secs(3600),
            queue: None,
        })
        .await
        .unwrap();
    let a: Vec<_> = buckets.iter().filter(|b| b.queue == "a").collect();
    assert_eq!(a.len(), 1, "{buckets:?}");
    assert_eq!((a[0].succeeded, a[0].failed), (1, 2));
    let stats = s.queue_stats(&["a".into()], at(3000)).await.unwrap();
    assert_eq!(
        (stats[0].completed_last_minute, stats[0].failed_last_minute),
        (1, 2),
        "{stats:?}"
    );
    let durations = s
        .attempt_durations(&store::AttemptDurationParams {
            since: t0(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(durations.len(), 1);
    assert_eq!(durations[0].run_time, Duration::from_millis(7));
    // And in the workers' figures: w3 completed one, w1 failed one.
    let seen = |w: &str| store::WorkerSeen {
        worker_id: w.into(),
        labels: BTreeMap::new(),
        address: format!("{w}.local:1"),
        queues: vec!["a".into()],
        now: at(2500),
    };
    s.worker_record_seen(&[seen("w1"), seen("w3")])
        .await
        .unwrap();
    for (w, figures) in [("w1", (0, 1)), ("w3", (1, 0))] {
        let (got, _) = s.worker_get(w, at(3000)).await.unwrap().unwrap();
        assert_eq!(
            (got.completed_last_minute, got.failed_last_minute),
            figures,
            "{w}: {got:?}"
        );
    }
}

all_backends!(
    a_batch_reads_back_per_task_in_order,
    a_cursor_inside_a_batch_resumes_after_it,
    two_failures_then_a_success_keep_three_attempts,
);

/// Postgres: a database migrated before events became one row per statement
/// and before a succeeded attempt stayed on its task row keeps its history
/// through the upgrade: the old events read back with their ids, before the
/// new ones; the old succeeded attempt is listed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_database_reads_its_old_rows() {
    let Some(db) = test_db(Backend::Postgres).await else {
        return;
    };
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/postgres");
    let mut before = sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap();
    before.migrations = std::borrow::Cow::Owned(
        before
            .migrations
            .iter()
            .filter(|m| m.version < 18)
            .cloned()
            .collect(),
    );
    before.run(&mut conn).await.unwrap();
    // One task as the earlier schema left it: failed once, then succeeded, with
    // both attempts and its four events in rows of their own.
    let base: i64 = 5 << 20;
    sqlx::query(
        "INSERT INTO tasks (id, queue, payload, run_at, state, attempt, max_attempts, \
           attempts_allowed, initial_backoff_ms, backoff_multiplier, max_backoff_ms, jitter, \
           created_at, updated_at, finished_at, leased_by, leased_address, leased_at, \
           fencing_token, lease_token) \
         VALUES ($1, 'old', '', 0, 'succeeded', 2, 3, 3, 0, 2.0, 0, 0, 0, 30, 30, 'w2', \
           'w2.local:1', 20, 2, 'tok')",
    )
    .bind(id(1))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at, \
           finished_at, outcome, error, fencing_token) VALUES \
         ($1, 1, 'w1', 'w1.local:1', 10, 15, 'failed', 'boom', 1), \
         ($1, 2, 'w2', 'w2.local:1', 20, 30, 'succeeded', NULL, 2)",
    )
    .bind(id(1))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO task_events (event_id, task_id, queue, kind, state, attempt, worker_id, \
           time, detail) VALUES \
         ($2, $1, 'old', 'submitted', 'ready', 0, NULL, 0, NULL), \
         ($2 + 1, $1, 'old', 'leased', 'leased', 1, 'w1', 10, NULL), \
         ($2 + 2, $1, 'old', 'failed', 'ready', 1, 'w1', 15, 'boom'), \
         ($2 + 3, $1, 'old', 'leased', 'leased', 2, 'w2', 20, NULL), \
         ($2 + 4, $1, 'old', 'succeeded', 'succeeded', 2, 'w2', 30, NULL)",
    )
    .bind(id(1))
    .bind(base)
    .execute(&mut conn)
    .await
    .unwrap();

    let s = store::connect(&db.url, 4).await.expect("connect");
    s.migrate().await.expect("migrate");
    let old = s.event_list(&id(1), 0, 100).await.unwrap();
    let ids: Vec<i64> = old.iter().map(|e| e.event_id).collect();
    assert_eq!(ids, (base..base + 5).collect::<Vec<_>>());
    assert_eq!(
        kinds(&old),
        [
            (EventKind::Submitted, TaskState::Ready, 0),
            (EventKind::Leased, TaskState::Leased, 1),
            (EventKind::Failed, TaskState::Ready, 1),
            (EventKind::Leased, TaskState::Leased, 2),
            (EventKind::Succeeded, TaskState::Succeeded, 2),
        ]
    );
    assert_eq!(old[2].detail.as_deref(), Some("boom"));
    assert_eq!(s.event_read(base + 2, 2).await.unwrap(), old[3..5]);
    assert_old_attempts_once(&s).await;
    // New events come after the old ones.
    s.task_insert_many(&[task("new", 2, 3)], t0())
        .await
        .unwrap();
    let next = read_final(&s, base + 4, 1).await;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].task_id, id(2));
}

/// MySQL: a database migrated before a succeeded attempt stayed on its task
/// row (migration 0011) keeps the attempt row of a success recorded then; the
/// history lists it once, and the figures over attempts count it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_mysql_database_lists_its_old_success_once() {
    let Some(db) = test_db(Backend::Mysql).await else {
        return;
    };
    let pool = sqlx::MySqlPool::connect(&db.url).await.unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/mysql");
    let mut before = sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap();
    let earlier = before.migrations.iter().filter(|m| m.version < 11);
    before.migrations = std::borrow::Cow::Owned(earlier.cloned().collect());
    before.run(&pool).await.unwrap();
    // One task as the earlier broker left it: failed once, then succeeded,
    // both attempts in task_attempts.
    sqlx::query(
        "INSERT INTO tasks (id, queue, payload, run_at, state, attempt, max_attempts, \
           attempts_allowed, initial_backoff_ms, backoff_multiplier, max_backoff_ms, jitter, \
           metadata, created_at, updated_at, finished_at, leased_by, leased_address, leased_at, \
           fencing_token, lease_token) \
         VALUES (?, 'old', '', 0, 'succeeded', 2, 3, 3, 0, 2.0, 0, 0, '{}', 0, 30, 30, 'w2', \
           'w2.local:1', 20, 2, 'tok')",
    )
    .bind(id(1))
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO task_attempts (task_id, attempt, worker_id, worker_address, leased_at, \
           finished_at, outcome, error, fencing_token) VALUES \
         (?, 1, 'w1', 'w1.local:1', 10, 15, 'failed', 'boom', 1), \
         (?, 2, 'w2', 'w2.local:1', 20, 30, 'succeeded', NULL, 2)",
    )
    .bind(id(1))
    .bind(id(1))
    .execute(&pool)
    .await
    .unwrap();

    let s = store::connect(&db.url, 4).await.expect("connect");
    s.migrate().await.expect("migrate");
    assert_old_attempts_once(&s).await;
    let ms = |n| DateTime::from_timestamp_millis(n).unwrap();
    let stats = s.queue_stats(&["old".into()], ms(1000)).await.unwrap();
    assert_eq!(
        (stats[0].completed_last_minute, stats[0].failed_last_minute),
        (1, 1),
        "{stats:?}"
    );
    let durations = s
        .attempt_durations(&store::AttemptDurationParams {
            since: ms(0),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(durations.len(), 1, "{durations:?}");
    // The view readers outside the broker query: the two attempts, once each.
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT attempt, outcome FROM task_attempts_all WHERE task_id = ? ORDER BY attempt",
    )
    .bind(id(1))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows, [(1, "failed".into()), (2, "succeeded".into())]);
}
