//! The finished counts (migrations: sqlite 0024 and 0025, postgres 0024 to 0026, mysql 0008 and 0009): GetQueueStats
//! reads the tasks folded into `finished_counts` plus those finished after the
//! watermark, and answers what a full count of the table answers, whatever moves
//! tasks out of a finished state or deletes them, before, at and after the
//! watermark, with folds in small steps and two replicas folding at once.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use taskbroker_server::domain::RetryPolicy;
use taskbroker_server::store::{
    self, CancelDeadParams, Changed, CompleteParams, FailParams, LeaseParams, NewTask, PurgeScope,
    RequeueDeadParams, Settled, Store,
};

type Counts = BTreeMap<(String, String), u64>;

async fn open(url: &str) -> Arc<dyn Store> {
    let s = store::connect(url, 8).await.expect("connect");
    s.migrate().await.expect("migrate");
    s
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
        payload: vec![],
        priority: 0,
        run_at: t0(),
        deadline: None,
        retry: RetryPolicy {
            max_attempts: 1,
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

#[derive(Clone, Copy)]
enum End {
    Succeed,
    Die,
    Cancel,
}

/// Submits task `n` to `queue` and ends it at `now` (the queue has no other
/// pending task, so the lease takes this one).
async fn finish(s: &Arc<dyn Store>, queue: &str, n: usize, end: End, now: DateTime<Utc>) {
    s.task_insert_many(&[task(queue, n)], t0()).await.unwrap();
    if let End::Cancel = end {
        let r = s.task_cancel(&id(n), now).await.unwrap();
        assert!(matches!(r, Changed::Done(_)), "{r:?}");
        return;
    }
    let l = s
        .task_lease_available(&LeaseParams {
            queues: vec![queue.into()],
            max_tasks: 1,
            max_reply_bytes: 64 << 20,
            worker_id: "w".into(),
            worker_address: "w.local:1".into(),
            lease_duration: Duration::from_secs(30),
            now,
            routing: Default::default(),
        })
        .await
        .unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].id, id(n));
    let token = l[0].lease_token.clone().unwrap();
    if let End::Succeed = end {
        let done = CompleteParams {
            task_id: id(n),
            lease_token: token,
            result: vec![],
            now,
        };
        let r = s.task_complete(&done).await.unwrap();
        assert!(matches!(r, Settled::Applied(_)), "{r:?}");
        return;
    }
    let r = s
        .task_fail(&FailParams {
            task_id: id(n),
            lease_token: token,
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

/// The finished counts GetQueueStats answers, per (queue, state), zeros left out.
async fn stats(s: &Arc<dyn Store>, queues: &[String]) -> Counts {
    let mut out = Counts::new();
    for r in s.queue_stats(queues, at(100_000)).await.unwrap() {
        for (state, n) in [
            ("succeeded", r.succeeded),
            ("dead", r.dead),
            ("cancelled", r.cancelled),
        ] {
            if n > 0 {
                out.insert((r.queue.clone(), state.into()), n);
            }
        }
    }
    out
}

const RECOUNT: &str = "SELECT queue, state, COUNT(*) FROM tasks \
     WHERE state IN ('succeeded', 'dead', 'cancelled') GROUP BY queue, state";

/// A full count of the task table, as the counts were read before the fold.
async fn recount(b: Backend, url: &str) -> Counts {
    let rows: Vec<(String, String, i64)> = match b {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(url).await.unwrap();
            sqlx::query_as(RECOUNT).fetch_all(&pool).await.unwrap()
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            sqlx::query_as(RECOUNT).fetch_all(&pool).await.unwrap()
        }
        Backend::Mysql => {
            let pool = sqlx::MySqlPool::connect(url).await.unwrap();
            sqlx::query_as(RECOUNT).fetch_all(&pool).await.unwrap()
        }
    };
    rows.into_iter()
        .map(|(q, st, n)| ((q, st), n as u64))
        .collect()
}

/// Folds up to `up_to` in steps of `step` tasks; the steps taken.
async fn fold(s: &Arc<dyn Store>, up_to: DateTime<Utc>, step: u32) -> u32 {
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 10_000, "the fold ends");
        if s.finished_fold(up_to, step).await.unwrap() {
            return steps;
        }
    }
}

async fn check(b: Backend, url: &str, s: &Arc<dyn Store>, when: &str) {
    let full = recount(b, url).await;
    assert_eq!(stats(s, &[]).await, full, "{when}");
    let only_a: Counts = full.into_iter().filter(|((q, _), _)| q == "a").collect();
    assert_eq!(
        stats(s, &["a".into(), "a".into()]).await,
        only_a,
        "{when}: queue a"
    );
}

/// A mixed workload with folds between its steps: every path out of a finished
/// state, on tasks folded (at or before the watermark) and not.
async fn counts_equal_a_full_recount(b: Backend) {
    let Some(db) = test_db(b).await else {
        return;
    };
    let s = open(&db.url).await;
    let mut n = 0;
    let mut next = || {
        n += 1;
        n
    };
    // Finished at 1000..=1011 in a, 1000..=1002 in b.
    for k in 0..5 {
        finish(&s, "a", next(), End::Succeed, at(1000 + k)).await;
    }
    finish(&s, "a", next(), End::Die, at(1010)).await; // 6: at the watermark
    finish(&s, "a", next(), End::Die, at(1011)).await; // 7: just after it
    finish(&s, "a", next(), End::Cancel, at(1009)).await; // 8
    finish(&s, "a", next(), End::Cancel, at(1011)).await; // 9
    for k in 0..3 {
        finish(&s, "b", next(), End::Succeed, at(1000 + k)).await;
    }
    check(b, &db.url, &s, "before any fold").await;
    // In steps of two tasks per range: several steps.
    assert!(fold(&s, at(1010), 2).await > 1);
    check(b, &db.url, &s, "folded to 1010").await;
    assert_eq!(fold(&s, at(1010), 2).await, 1, "nothing more to fold");

    // Requeued: a dead task after the watermark (7), one at it (6).
    for t in [7, 6] {
        let r = s.task_requeue(&id(t), at(1100)).await.unwrap();
        assert!(matches!(r, Changed::Done(_)), "{r:?}");
        check(b, &db.url, &s, &format!("task {t} requeued")).await;
    }
    // Both die again after the watermark; a folded cancelled task is requeued in bulk.
    for t in [6, 7] {
        let l = s
            .task_lease_available(&LeaseParams {
                queues: vec!["a".into()],
                max_tasks: 1,
                max_reply_bytes: 64 << 20,
                worker_id: "w".into(),
                worker_address: "w.local:1".into(),
                lease_duration: Duration::from_secs(30),
                now: at(1200),
                routing: Default::default(),
            })
            .await
            .unwrap();
        assert_eq!(l.len(), 1);
        s.task_fail(&FailParams {
            task_id: l[0].id.clone(),
            lease_token: l[0].lease_token.clone().unwrap(),
            error: "boom".into(),
            non_retryable: true,
            retry_after: None,
            now: at(1200 + t as i64),
            jitter_unit: 0.5,
            prefer_same_worker: false,
        })
        .await
        .unwrap();
    }
    assert_eq!(
        s.task_requeue_many(&[(id(8), at(5000)), (id(9), at(5000))], at(1300))
            .await
            .unwrap(),
        2
    );
    check(b, &db.url, &s, "cancelled tasks requeued in bulk").await;
    finish(&s, "a", next(), End::Die, at(1400)).await; // 13
    finish(&s, "a", next(), End::Die, at(1401)).await; // 14
    fold(&s, at(1400), 1).await;
    check(b, &db.url, &s, "folded to 1400").await;

    // Dead -> cancelled: one folded (13), one not (14); then the dead ones left
    // (6, 7 folded) requeued by their error.
    for t in [13, 14] {
        let p = CancelDeadParams {
            queue: "a".into(),
            error: None,
            task_id: Some(id(t)),
            limit: 10,
            now: at(1500),
        };
        assert_eq!(s.task_cancel_dead(&p).await.unwrap(), 1);
        check(b, &db.url, &s, &format!("dead task {t} cancelled")).await;
    }
    let p = RequeueDeadParams {
        queue: "a".into(),
        error: "boom".into(),
        limit: 10,
        now: at(1600),
    };
    assert_eq!(s.task_requeue_dead(&p).await.unwrap(), 2);
    check(b, &db.url, &s, "dead tasks requeued by error").await;

    // Retention: a purge across the watermark (folded tasks and newer ones).
    for k in 0..3 {
        finish(&s, "b", next(), End::Succeed, at(2000 + k)).await;
    }
    fold(&s, at(2000), 3).await;
    let purged = s
        .task_purge_finished(at(2002), &PurgeScope::AllExcept(vec![]), 2)
        .await
        .unwrap();
    assert_eq!(purged, 2);
    check(b, &db.url, &s, "purged in part").await;
    let rest = s
        .task_purge_finished(at(2002), &PurgeScope::Only("b".into()), 100)
        .await
        .unwrap();
    assert!(rest > 0);
    check(b, &db.url, &s, "b purged").await;
    fold(&s, at(100_000), 4).await;
    check(b, &db.url, &s, "folded to the end").await;
    s.close().await;
}

/// One purge statement deletes tasks of two queues in all three finished
/// states, some folded and some finished after the watermark: each (queue,
/// state) count loses exactly its folded tasks, and the tasks of the same
/// (queue, state) left behind are still counted; a purge with nothing due
/// changes no count.
async fn one_purge_across_queues_and_states(b: Backend) {
    let Some(db) = test_db(b).await else {
        return;
    };
    let s = open(&db.url).await;
    let ends = [
        ("a", End::Succeed, 3000),
        ("a", End::Succeed, 3001),
        ("a", End::Die, 3002),
        ("a", End::Cancel, 3003),
        ("a", End::Succeed, 3010),
        ("a", End::Die, 3011),
        ("c", End::Die, 3000),
        ("c", End::Cancel, 3001),
        ("c", End::Succeed, 3004),
        ("c", End::Cancel, 3012),
        ("a", End::Succeed, 3020),
        ("a", End::Die, 3021),
    ];
    for (n, (queue, end, ms)) in ends.iter().enumerate() {
        finish(&s, queue, n + 1, *end, at(*ms)).await;
    }
    // The live task of a third queue, which no purge takes.
    s.task_insert_many(&[task("d", 99)], t0()).await.unwrap();
    fold(&s, at(3005), 100).await;
    check(b, &db.url, &s, "folded to 3005").await;
    let everywhere = PurgeScope::AllExcept(vec![]);
    let none = s
        .task_purge_finished(at(2000), &everywhere, 100)
        .await
        .unwrap();
    assert_eq!(none, 0);
    check(b, &db.url, &s, "nothing due").await;
    let purged = s
        .task_purge_finished(at(3012), &everywhere, 100)
        .await
        .unwrap();
    assert_eq!(purged, 9, "all but those finished at the cutoff or after");
    check(b, &db.url, &s, "purged across queues and states").await;
    let full = recount(b, &db.url).await;
    assert_eq!(
        full,
        Counts::from([
            (("a".into(), "dead".into()), 1),
            (("a".into(), "succeeded".into()), 1),
            (("c".into(), "cancelled".into()), 1),
        ]),
        "what is left"
    );
    fold(&s, at(100_000), 100).await;
    check(b, &db.url, &s, "folded to the end").await;
    s.close().await;
}

/// Two replicas (two store handles on one database) fold at once, in small
/// steps: every task is folded once.
async fn two_replicas_fold_once(b: Backend) {
    let Some(db) = test_db(b).await else {
        return;
    };
    let (s1, s2) = (open(&db.url).await, open(&db.url).await);
    for k in 0..60 {
        let end = [End::Succeed, End::Die, End::Cancel][k % 3];
        let queue = ["a", "b"][k % 2];
        finish(&s1, queue, k + 1, end, at(1000 + k as i64)).await;
    }
    for round in 0..3 {
        let up_to = at(1000 + 20 * (round + 1));
        let (x, y) = tokio::join!(fold(&s1, up_to, 3), fold(&s2, up_to, 3));
        assert!(x >= 1 && y >= 1);
        check(b, &db.url, &s1, &format!("round {round}")).await;
        check(
            b,
            &db.url,
            &s2,
            &format!("round {round}, the other replica"),
        )
        .await;
    }
    // Retention and a bulk requeue on one replica while both fold newer tasks:
    // each change waits for a fold or a fold for it, none counted twice or missed.
    for k in 60..90 {
        finish(&s2, "c", k + 1, End::Die, at(1100 + k as i64)).await;
    }
    let requeue: Vec<(String, DateTime<Utc>)> = (40..60)
        .filter(|k| k % 3 != 0)
        .map(|k| (id(k + 1), at(9000)))
        .collect();
    let everywhere = PurgeScope::AllExcept(vec![]);
    let (_, _, purged, requeued) = tokio::join!(
        fold(&s1, at(1300), 2),
        fold(&s2, at(1300), 2),
        s1.task_purge_finished(at(1030), &everywhere, 100),
        s2.task_requeue_many(&requeue, at(1100)),
    );
    assert_eq!(purged.unwrap(), 30);
    assert_eq!(requeued.unwrap(), requeue.len() as u64);
    check(b, &db.url, &s1, "purged and requeued while folding").await;
    s1.close().await;
    s2.close().await;
}

/// A retention pass and a bulk requeue at once, over tasks of two queues that
/// both take out of their counts, in opposite queue orders: neither waits for
/// the other's counts, so neither fails (a deadlock would end one of them).
async fn a_purge_and_a_requeue_at_once_both_apply(b: Backend) {
    let Some(db) = test_db(b).await else {
        return;
    };
    let (s1, s2) = (open(&db.url).await, open(&db.url).await);
    let mut n = 0;
    for round in 0..10i64 {
        let base = 10_000 * (round + 1);
        let (mut old, mut new) = (Vec::new(), Vec::new());
        for queue in ["a", "b"] {
            let tasks: Vec<NewTask> = (0..80)
                .map(|_| {
                    n += 1;
                    task(queue, n)
                })
                .collect();
            s1.task_insert_many(&tasks, t0()).await.unwrap();
            let ids: Vec<String> = tasks.iter().map(|t| t.id.clone()).collect();
            let (o, w) = ids.split_at(40);
            s1.task_cancel_many(o, at(base)).await.unwrap();
            s1.task_cancel_many(w, at(base + 10)).await.unwrap();
            old.extend_from_slice(o);
            new.extend(w.iter().map(|id| (id.clone(), at(base + 20))));
        }
        fold(&s1, at(base + 15), 1000).await;
        new.reverse();
        let everywhere = PurgeScope::AllExcept(vec![]);
        let (purged, requeued) = tokio::join!(
            s1.task_purge_finished(at(base + 5), &everywhere, 1000),
            s2.task_requeue_many(&new, at(base + 20)),
        );
        assert_eq!(purged.unwrap(), old.len() as u64, "round {round}");
        assert_eq!(requeued.unwrap(), new.len() as u64, "round {round}");
        check(b, &db.url, &s1, &format!("round {round}")).await;
    }
    s1.close().await;
    s2.close().await;
}

all_backends!(
    counts_equal_a_full_recount,
    one_purge_across_queues_and_states,
    two_replicas_fold_once,
    a_purge_and_a_requeue_at_once_both_apply
);
