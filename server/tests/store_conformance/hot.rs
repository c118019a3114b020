//! Fewer index writes per task (migration 0013) store cases: the reads
//! whose indexes now leave some states out still see every task. On Postgres a
//! creation-time range reads LEASED tasks apart from the others, and retention
//! walks finished tasks queue by queue and state by state; per-queue counts come
//! from three indexes. Run on both databases by `store_conformance.rs`.

use super::*;
use taskbroker_server::store::PurgeScope;

/// Stores `n` in `queue` at `at` and leases it (30 s lease); returns the token.
async fn insert_leased(s: &Arc<dyn Store>, queue: &str, n: usize, at: DateTime<Utc>) -> String {
    s.task_insert_many(&[task(queue, n)], at).await.unwrap();
    let t = s
        .task_lease_available(&lease_params(queue, 1, at))
        .await
        .unwrap();
    assert_eq!(t.len(), 1, "{queue} {n} leased");
    t[0].lease_token.clone().unwrap()
}

/// Stores `n` in `queue` at `at` and completes it at `at`.
async fn insert_done(s: &Arc<dyn Store>, queue: &str, n: usize, at: DateTime<Utc>) {
    let token = insert_leased(s, queue, n, at).await;
    let t = s.task_get(&uuid_like(n)).await.unwrap().unwrap();
    assert!(matches!(
        s.task_complete(&completion(&t, &token, at)).await.unwrap(),
        Settled::Applied(_)
    ));
}

pub async fn a_creation_time_range_lists_leased_tasks_in_their_place(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // Created at 2, 3, 4, 5 and 6 s: 1 and 4 leased, 2 completed, 3 and 5 pending
    // (each in its own queue, so each lease takes the task meant).
    insert_leased(&s, "r1", 1, secs_after(2)).await;
    insert_done(&s, "r2", 2, secs_after(3)).await;
    s.task_insert_many(&[task("r3", 3)], secs_after(4))
        .await
        .unwrap();
    insert_leased(&s, "r4", 4, secs_after(5)).await;
    s.task_insert_many(&[task("r5", 5)], secs_after(6))
        .await
        .unwrap();
    let page = |before: Option<&store::TaskRecord>, limit| TaskFilter {
        created_after: Some(secs_after(1)),
        created_before: Some(secs_after(10)),
        before_seq: before.map(|t| t.seq),
        before_created: before.map(|t| t.created_at),
        limit,
        now: secs_after(30),
        ..TaskFilter::default()
    };
    let ids = |ts: &[store::TaskRecord]| ts.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    let all = s.task_list(&page(None, 10)).await.unwrap();
    assert_eq!(
        ids(&all),
        [5, 4, 3, 2, 1].map(uuid_like),
        "leased tasks listed in creation order among the others"
    );
    // Pages of two: the keyset runs across leased and other tasks alike.
    let first = s.task_list(&page(None, 2)).await.unwrap();
    assert_eq!(ids(&first), [5, 4].map(uuid_like));
    let second = s.task_list(&page(first.last(), 2)).await.unwrap();
    assert_eq!(ids(&second), [3, 2].map(uuid_like));
    let third = s.task_list(&page(second.last(), 2)).await.unwrap();
    assert_eq!(ids(&third), [uuid_like(1)]);
    // A state filter with the range: only the leased ones, or only the others.
    let leased = s
        .task_list(&TaskFilter {
            states: vec![TaskState::Leased],
            ..page(None, 10)
        })
        .await
        .unwrap();
    assert_eq!(ids(&leased), [4, 1].map(uuid_like));
    let ready = s
        .task_list(&TaskFilter {
            states: vec![TaskState::Ready, TaskState::Succeeded],
            ..page(None, 10)
        })
        .await
        .unwrap();
    assert_eq!(ids(&ready), [5, 3, 2].map(uuid_like));
}

pub async fn retention_purges_old_finished_tasks_of_every_queue_and_state(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let old = secs_after(10);
    // Old finished tasks: a succeeded one in "a", a dead one in "b", a cancelled
    // one in "c" and in "d". Kept: a recent one, a pending and a leased old one.
    insert_done(&s, "a", 1, old).await;
    let token = insert_leased(&s, "b", 2, old).await;
    let failed = s
        .task_fail(&FailParams {
            task_id: uuid_like(2),
            lease_token: token,
            error: "boom".into(),
            non_retryable: true,
            retry_after: None,
            now: old,
            jitter_unit: 0.0,
            prefer_same_worker: false,
        })
        .await
        .unwrap();
    assert!(matches!(failed, Settled::Applied(_)));
    for (q, n) in [("c", 3), ("d", 4)] {
        s.task_insert_many(&[task(q, n)], old).await.unwrap();
        assert!(matches!(
            s.task_cancel(&uuid_like(n), old).await.unwrap(),
            Changed::Done(_)
        ));
    }
    insert_done(&s, "a", 5, secs_after(100)).await;
    s.task_insert_many(&[task("a", 6)], old).await.unwrap();
    insert_leased(&s, "b", 7, old).await;
    let states = |s: Arc<dyn Store>| async move {
        let mut v = Vec::new();
        for n in 1..=7 {
            v.push(s.task_get(&uuid_like(n)).await.unwrap().map(|t| t.state));
        }
        v
    };
    let before = secs_after(50);
    // Everything but "c" and "d", one task per call: "a" and "b" lose their old
    // finished task, one each.
    let except = PurgeScope::AllExcept(vec!["c".into(), "d".into()]);
    assert_eq!(s.task_purge_finished(before, &except, 1).await.unwrap(), 1);
    assert_eq!(s.task_purge_finished(before, &except, 1).await.unwrap(), 1);
    assert_eq!(s.task_purge_finished(before, &except, 1).await.unwrap(), 0);
    // One queue.
    let only_c = PurgeScope::Only("c".into());
    assert_eq!(s.task_purge_finished(before, &only_c, 10).await.unwrap(), 1);
    use StoredState as S;
    assert_eq!(
        states(s.clone()).await,
        [
            None,
            None,
            None,
            Some(S::Cancelled),
            Some(S::Succeeded),
            Some(S::Pending),
            Some(S::Leased)
        ]
    );
    let all = PurgeScope::AllExcept(Vec::new());
    assert_eq!(s.task_purge_finished(before, &all, 10).await.unwrap(), 1);
    assert!(s.task_get(&uuid_like(4)).await.unwrap().is_none());
}

pub async fn queue_counts_see_leased_finished_and_pending_tasks(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    insert_leased(&s, "q", 1, secs_after(1)).await;
    insert_leased(&s, "q", 2, secs_after(1)).await;
    insert_done(&s, "q", 3, secs_after(1)).await;
    s.task_insert_many(&[task("q", 4)], secs_after(1))
        .await
        .unwrap();
    insert_leased(&s, "other", 5, secs_after(1)).await;
    for queues in [vec![], vec!["q".to_string()]] {
        let stats = s.queue_stats(&queues, secs_after(2)).await.unwrap();
        let q = stats.iter().find(|r| r.queue == "q").expect("q counted");
        assert_eq!((q.leased, q.succeeded, q.ready), (2, 1, 1), "{queues:?}");
    }
}

pub async fn a_bulk_selection_by_creation_time_keeps_leased_tasks(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // One queue, created at 2, 3 and 4 s; the first is leased, the second completed.
    insert_leased(&s, "bq", 1, secs_after(2)).await;
    insert_done(&s, "bq", 2, secs_after(3)).await;
    s.task_insert_many(&[task("bq", 3)], secs_after(4))
        .await
        .unwrap();
    let f = store::BulkFilter {
        queue: "bq".into(),
        created_after: Some(secs_after(1)),
        created_before: Some(secs_after(10)),
        limit: 10,
        now: secs_after(30),
        ..Default::default()
    };
    let ids = |ts: Vec<store::TaskRecord>| ts.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.task_select(&f).await.unwrap()),
        [1, 2, 3].map(uuid_like),
        "every task of the range, in stored order"
    );
    let narrow = store::BulkFilter {
        created_after: Some(secs_after(2)),
        created_before: Some(secs_after(3)),
        limit: 1,
        ..f.clone()
    };
    assert_eq!(ids(s.task_select(&narrow).await.unwrap()), [uuid_like(1)]);
}
