//! Scheduled tasks (migration 0017): a task written with a future run_at waits
//! outside the lease order and joins it when due, in its place by priority; the
//! lease does not read the tasks that are not due. Run on both databases by
//! `store_conformance.rs`.

use super::*;
use taskbroker_server::store::{FailResult, MatchTo, TaskUpdate};

fn at(secs: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(secs)
}

fn prio(queue: &str, n: usize, priority: i32, run_at: DateTime<Utc>) -> NewTask {
    NewTask {
        priority,
        run_at,
        ..task(queue, n)
    }
}

async fn lease_ids(s: &Arc<dyn Store>, queue: &str, max: u32, now: DateTime<Utc>) -> Vec<String> {
    s.task_lease_available(&lease_params(queue, max, now))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect()
}

async fn next_run(s: &Arc<dyn Store>, queue: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    s.task_next_run_at(&[queue.to_string()], now).await.unwrap()
}

pub async fn a_scheduled_task_leases_exactly_when_due_in_priority_order(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(
        &[
            prio("f", 1, 0, t0()),
            prio("f", 2, 9, at(60)),
            prio("f", 3, 0, t0()),
            prio("f", 4, 0, t0()),
            prio("f", 5, 5, at(30)),
        ],
        t0(),
    )
    .await
    .unwrap();
    assert_eq!(lease_ids(&s, "f", 1, t0()).await, [uuid_like(1)]);
    assert_eq!(next_run(&s, "f", t0()).await, Some(at(30)));
    let just_before = at(30) - chrono::Duration::milliseconds(1);
    assert_eq!(lease_ids(&s, "f", 1, just_before).await, [uuid_like(3)]);
    // Due at 30 s: priority 5 goes before the READY priority 0.
    assert_eq!(lease_ids(&s, "f", 1, at(30)).await, [uuid_like(5)]);
    assert_eq!(next_run(&s, "f", at(30)).await, Some(at(60)));
    // At 60 s one lease of two: the scheduled priority 9 first, then the rest.
    assert_eq!(
        lease_ids(&s, "f", 2, at(60)).await,
        [uuid_like(2), uuid_like(4)]
    );
    assert_eq!(next_run(&s, "f", at(60)).await, None);
    // A batch of requests and a lease over several queues see it as well.
    s.task_insert_many(&[prio("f", 6, 0, t0()), prio("f", 7, 3, at(90))], t0())
        .await
        .unwrap();
    let ps = [lease_params("f", 1, at(90)), lease_params("f", 1, at(90))];
    let leased: Vec<String> = s
        .task_lease_many(&ps)
        .await
        .unwrap()
        .into_iter()
        .flatten()
        .map(|t| t.id)
        .collect();
    assert_eq!(leased, [uuid_like(7), uuid_like(6)]);
}

pub async fn a_retry_backoff_waits_and_is_leased_when_due(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let backoff = NewTask {
        retry: taskbroker_server::domain::RetryPolicy {
            initial_backoff: Duration::from_secs(10),
            jitter: 0.0,
            ..taskbroker_server::domain::RetryPolicy::default()
        },
        ..task("r", 1)
    };
    s.task_insert_many(&[backoff, prio("r", 2, -1, t0())], t0())
        .await
        .unwrap();
    let t = s
        .task_lease_available(&lease_params("r", 1, t0()))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(t.id, uuid_like(1));
    let failed = s
        .task_fail(&FailParams {
            task_id: t.id.clone(),
            lease_token: t.lease_token.clone().unwrap(),
            error: "boom".into(),
            non_retryable: false,
            retry_after: None,
            now: at(1),
            jitter_unit: 0.5,
            prefer_same_worker: false,
        })
        .await
        .unwrap();
    let Settled::Applied(FailResult { next_run_at, .. }) = failed else {
        panic!("{failed:?}");
    };
    assert_eq!(next_run_at, Some(at(11)));
    assert_eq!(next_run(&s, "r", at(1)).await, Some(at(11)));
    // Before its retry is due only the lower priority task leases.
    assert_eq!(lease_ids(&s, "r", 5, at(10)).await, [uuid_like(2)]);
    assert_eq!(lease_ids(&s, "r", 5, at(11)).await, [uuid_like(1)]);
}

pub async fn an_update_moves_a_task_out_of_the_lease_order_and_back(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[prio("u", 1, 5, t0()), prio("u", 2, 0, t0())], t0())
        .await
        .unwrap();
    let later = TaskUpdate {
        run_at: Some(at(100)),
        priority: None,
        deadline: None,
        max_attempts: None,
        target: None,
    };
    assert!(matches!(
        s.task_update(&uuid_like(1), &later, at(1)).await.unwrap(),
        Changed::Done(_)
    ));
    assert_eq!(next_run(&s, "u", at(1)).await, Some(at(100)));
    assert_eq!(lease_ids(&s, "u", 1, at(2)).await, [uuid_like(2)]);
    assert_eq!(lease_ids(&s, "u", 1, at(3)).await, Vec::<String>::new());
    // Back to now: READY at once, before anything of lower priority.
    s.task_insert_many(&[prio("u", 3, 0, at(4))], at(4))
        .await
        .unwrap();
    let back = TaskUpdate {
        run_at: Some(at(4)),
        ..later.clone()
    };
    assert!(matches!(
        s.task_update(&uuid_like(1), &back, at(4)).await.unwrap(),
        Changed::Done(_)
    ));
    assert_eq!(next_run(&s, "u", at(4)).await, None);
    assert_eq!(
        lease_ids(&s, "u", 2, at(4)).await,
        [uuid_like(1), uuid_like(3)]
    );
}

pub async fn requeued_and_reclaimed_tasks_lease_when_due(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[prio("q", 1, 0, t0()), prio("q", 2, 0, at(50))], t0())
        .await
        .unwrap();
    // Cancelled while scheduled, then requeued for 20 s and for now.
    assert!(matches!(
        s.task_cancel(&uuid_like(2), at(1)).await.unwrap(),
        Changed::Done(_)
    ));
    assert_eq!(next_run(&s, "q", at(1)).await, None);
    assert_eq!(
        s.task_requeue_many(&[(uuid_like(2), at(20))], at(2))
            .await
            .unwrap(),
        1
    );
    assert_eq!(next_run(&s, "q", at(2)).await, Some(at(20)));
    assert_eq!(lease_ids(&s, "q", 5, at(3)).await, [uuid_like(1)]);
    assert_eq!(lease_ids(&s, "q", 5, at(20)).await, [uuid_like(2)]);
    // Task 1's lease (30 s from 3 s) expires: reclaimed, READY again at once.
    let reaped = s.lease_reclaim_expired(at(40), 10).await.unwrap();
    assert_eq!(reaped.reclaimed, 1);
    assert_eq!(lease_ids(&s, "q", 5, at(40)).await, [uuid_like(1)]);
    // A scheduled task cancelled and requeued by the admin call is READY now.
    s.task_insert_many(&[prio("q", 3, 0, at(500))], at(41))
        .await
        .unwrap();
    assert!(matches!(
        s.task_cancel(&uuid_like(3), at(42)).await.unwrap(),
        Changed::Done(_)
    ));
    assert!(matches!(
        s.task_requeue(&uuid_like(3), at(43)).await.unwrap(),
        Changed::Done(_)
    ));
    assert_eq!(next_run(&s, "q", at(43)).await, None);
    assert_eq!(lease_ids(&s, "q", 5, at(43)).await, [uuid_like(3)]);
}

pub async fn scheduled_tasks_of_higher_priority_do_not_hold_back_sync_match(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let to = Some(MatchTo {
        worker_id: "w1".into(),
        worker_address: String::new(),
        lease_duration: Duration::from_secs(30),
    });
    s.task_insert_many(&[prio("sm", 1, 9, at(60))], t0())
        .await
        .unwrap();
    // Scheduled for later, it does not lease before a new task now.
    let got = s
        .task_insert_matched(&[prio("sm", 2, 0, t0())], std::slice::from_ref(&to), t0())
        .await
        .unwrap();
    assert!(got[0].leased.is_some(), "{got:?}");
    // Due (and not leased or promoted by any lease yet), it does.
    let got = s
        .task_insert_matched(
            &[prio("sm", 3, 5, at(60))],
            std::slice::from_ref(&to),
            at(60),
        )
        .await
        .unwrap();
    assert!(got[0].leased.is_none(), "{got:?}");
    assert_eq!(
        lease_ids(&s, "sm", 5, at(60)).await,
        [uuid_like(1), uuid_like(3)]
    );
}

/// 10,000 tasks of higher priority scheduled for later ahead of one READY task:
/// the lease reads the READY one, not the scheduled ones.
async fn scheduled_backlog(s: &Arc<dyn Store>) {
    let later: Vec<NewTask> = (1..=10_000).map(|n| prio("big", n, 9, at(3600))).collect();
    for chunk in later.chunks(1_000) {
        s.task_insert_many(chunk, t0()).await.unwrap();
    }
    s.task_insert_many(&[prio("big", 20_000, 0, t0())], t0())
        .await
        .unwrap();
}

/// SQLite: the plain lease's candidate statement, run on the store's file, takes
/// a few VM steps (it reads one index entry), not one per scheduled task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_reads_no_scheduled_task_sqlite() {
    let Some((s, db)) = open(Backend::Sqlite).await else {
        return;
    };
    scheduled_backlog(&s).await;
    let path = db.url.trim_start_matches("sqlite://").to_string();
    let c = rusqlite::Connection::open(path).unwrap();
    let mut stmt = c
        .prepare(taskbroker_server::store::sqlite::lease_candidates_sql())
        .unwrap();
    let seqs: Vec<i64> = stmt
        .query_map(
            rusqlite::params!["w", "big", "{}", t0().timestamp_millis(), 10],
            |r| r.get(0),
        )
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(seqs.len(), 1, "only the READY task is a candidate");
    let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
    assert!(steps < 1_000, "{steps} VM steps for one candidate");
    drop(stmt);
    assert_eq!(lease_ids(&s, "big", 10, t0()).await, [uuid_like(20_000)]);
    assert_eq!(next_run(&s, "big", t0()).await, Some(at(3600)));
}

/// (index scans of `tasks`, buffer pages of the lease index touched, blocks of
/// `tasks` and of all its indexes touched) as reported so far. Pages, not
/// entries: the entries a scan passes over inside the index (a run_at not due)
/// are not counted as read, but their pages are.
async fn tasks_reads(c: &mut sqlx::PgConnection) -> (i64, i64, i64) {
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *c)
        .await
        .unwrap();
    sqlx::query_as::<_, (i64, i64, i64)>(
        "SELECT COALESCE(t.idx_scan, 0)::bigint, \
           (COALESCE(i.idx_blks_read, 0) + COALESCE(i.idx_blks_hit, 0))::bigint, \
           (COALESCE(a.heap_blks_read, 0) + COALESCE(a.heap_blks_hit, 0) \
             + COALESCE(a.idx_blks_read, 0) + COALESCE(a.idx_blks_hit, 0))::bigint \
         FROM pg_stat_user_tables t JOIN pg_statio_user_indexes i ON i.relid = t.relid \
         JOIN pg_statio_user_tables a ON a.relid = t.relid \
         WHERE t.relname = 'tasks' AND i.indexrelname = 'tasks_lease'",
    )
    .fetch_one(&mut *c)
    .await
    .unwrap()
}

/// Postgres: the pages of the lease index a lease touches, from the statistics
/// views (about 70 with the scheduled tasks in its way, a root and a leaf without).
/// A backend reports its figures when its connection ends (when idle, only
/// every so often), so the inserts and the lease each run on a store of their
/// own that is closed afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_reads_no_scheduled_task_postgres() {
    let Some((s, db)) = open(Backend::Postgres).await else {
        return;
    };
    scheduled_backlog(&s).await;
    s.close().await;
    drop(s);
    let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    let before = reported(&mut c, None).await;
    let s = store::connect(&db.url, 2).await.expect("connect");
    assert_eq!(lease_ids(&s, "big", 10, t0()).await, [uuid_like(20_000)]);
    s.close().await;
    drop(s);
    let after = reported(&mut c, Some(before.0)).await;
    let pages = after.1 - before.1;
    assert!(pages < 10, "the lease touched {pages} pages of tasks_lease");
}

/// The figures once they have stopped moving (and, given `moved_from`, once the
/// index scans have moved past it).
async fn reported(c: &mut sqlx::PgConnection, moved_from: Option<i64>) -> (i64, i64, i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = tasks_reads(c).await;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = tasks_reads(c).await;
        if now == last && moved_from.is_none_or(|m| now.0 > m) {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no statistics reported"
        );
        last = now;
    }
}

/// Postgres: a lease of 10 tasks from a queue of 5,000 READY ones (and 20,000
/// finished) reads the blocks of the rows it takes and of their index entries,
/// not the queue, with statistics that know the table and the hot pool's generic
/// plans (six leases: past the first runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_reads_the_rows_it_takes_not_the_queue_postgres() {
    let Some((s, db)) = open(Backend::Postgres).await else {
        return;
    };
    let tasks: Vec<NewTask> = (1..=25_000).map(|n| prio("wide", n, 0, t0())).collect();
    for chunk in tasks.chunks(1_000) {
        s.task_insert_many(chunk, t0()).await.unwrap();
    }
    s.close().await;
    drop(s);
    // Most of the table finished, as in a broker that has run a while (on a
    // connection of its own, closed: its reads are reported before the count).
    let mut setup = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE tasks SET state = 'succeeded', finished_at = run_at, result = '\\x' \
         WHERE seq % 5 <> 0",
    )
    .execute(&mut setup)
    .await
    .unwrap();
    sqlx::query("VACUUM ANALYZE tasks")
        .execute(&mut setup)
        .await
        .unwrap();
    // No autovacuum of its own reads counted with the leases'.
    sqlx::query("ALTER TABLE tasks SET (autovacuum_enabled = false)")
        .execute(&mut setup)
        .await
        .unwrap();
    sqlx::Connection::close(setup).await.unwrap();
    let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    let before = reported(&mut c, None).await;
    let s = store::connect(&db.url, 2).await.expect("connect");
    for _ in 0..6 {
        assert_eq!(lease_ids(&s, "wide", 10, t0()).await.len(), 10);
    }
    s.close().await;
    drop(s);
    let per_lease = (reported(&mut c, Some(before.0)).await.2 - before.2) / 6;
    assert!(
        per_lease < 600,
        "a lease of 10 tasks read {per_lease} blocks of tasks and its indexes"
    );
}
