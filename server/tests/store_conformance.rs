//! The store conformance suite: the `Store` contract, written once and run against
//! SQLite, Postgres and MySQL. Time is passed in, so every case controls `now`.

mod common;
// The schedule methods (written as their own file, run here on both databases).
#[path = "store_conformance/schedules.rs"]
mod schedules;
use schedules::*;
// Routing.
#[path = "store_conformance/routing.rs"]
mod routing;
use routing::*;
// An operator's update changing a waiting task's target.
#[path = "store_conformance/retarget.rs"]
mod retarget;
use retarget::*;
// Admission: stored queue settings and the gated lease.
#[path = "store_conformance/admission.rs"]
mod admission;
use admission::*;
// The console: dead-letter groups (migration 0011).
#[path = "store_conformance/console.rs"]
mod console;
use console::*;
// Sync match.
#[path = "store_conformance/sync_match.rs"]
mod sync_match;
use sync_match::*;
// Fewer index writes per task (migration 0013).
#[path = "store_conformance/hot.rs"]
mod hot;
use hot::*;
// The plain lease over several queues .
#[path = "store_conformance/lease_order.rs"]
mod lease_order;
use lease_order::*;
// Leasers racing over plain, targeted, fan-out and scheduled tasks.
#[path = "store_conformance/lease_races.rs"]
mod lease_races;
use lease_races::*;
// Scheduled tasks wait outside the lease order (migration 0017).
#[path = "store_conformance/scheduled.rs"]
mod scheduled;
use scheduled::*;
// REPLACE_WAITING: a submission rewriting the waiting task that holds its key.
#[path = "store_conformance/replace.rs"]
mod replace;
use replace::*;
// Round-robin fairness across lease calls.
#[path = "store_conformance/lease_fairness.rs"]
mod lease_fairness;
use lease_fairness::*;
// Dependencies by key and the results a dependent's lease reads (migration 0020).
#[path = "store_conformance/flow_keys.rs"]
mod flow_keys;
use flow_keys::*;
// Dependencies across producers, and the waits one key may hold.
#[path = "store_conformance/key_owners.rs"]
mod key_owners;
use key_owners::*;
// A submitted checkpoint, stored by every insert.
#[path = "store_conformance/checkpoint.rs"]
mod checkpoint;
use checkpoint::*;
// Keys, ids, tokens and worker ids compare byte for byte.
#[path = "store_conformance/exact_text.rs"]
mod exact_text;
use exact_text::*;
// A lease's reply and a batch of completions, as written.
#[path = "store_conformance/settle_batch.rs"]
mod settle_batch;
use settle_batch::*;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use taskbroker_server::domain::{RetryPolicy, StoredState, TaskState};
use taskbroker_server::store::{
    self, Changed, CompleteParams, FailParams, LeaseParams, LeaseRef, LeaseState, NewTask, Settled,
    Store, TaskFilter,
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

fn task(queue: &str, n: usize) -> NewTask {
    NewTask {
        routing: Default::default(),
        id: uuid_like(n),
        queue: queue.into(),
        key: None,
        payload: n.to_string().into_bytes(),
        priority: 0,
        run_at: t0(),
        deadline: None,
        retry: RetryPolicy {
            initial_backoff: Duration::ZERO,
            jitter: 0.0,
            ..RetryPolicy::default()
        },
        metadata: BTreeMap::from([("traceparent".to_string(), format!("tp-{n}"))]),
        concurrency_key: None,
        checkpoint: None,
    }
}

fn uuid_like(n: usize) -> String {
    format!("00000000-0000-7000-8000-{n:012}")
}

fn lease_params(queue: &str, max: u32, now: DateTime<Utc>) -> LeaseParams {
    LeaseParams {
        routing: Default::default(),
        queues: vec![queue.into()],
        max_tasks: max,
        max_reply_bytes: 4 << 20,
        worker_id: "w".into(),
        worker_address: "127.0.0.1:1".into(),
        lease_duration: Duration::from_secs(30),
        now,
    }
}

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

fn secs(n: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(n)
}

fn completion(t: &store::TaskRecord, token: &str, now: DateTime<Utc>) -> CompleteParams {
    CompleteParams {
        task_id: t.id.clone(),
        lease_token: token.into(),
        result: b"ok".to_vec(),
        now,
    }
}

/// Leases `id` of queue `q` at `at` (30 s lease); lets it expire and reclaims it;
/// leases it again. Returns (holder A's stale token, holder B's live task).
async fn lease_twice(s: &Arc<dyn Store>, q: &str, at: i64) -> (String, store::TaskRecord) {
    let a = s
        .task_lease_available(&lease_params(q, 1, secs(at)))
        .await
        .unwrap()
        .pop()
        .expect("first lease");
    let reaped = s.lease_reclaim_expired(secs(at + 31), 100).await.unwrap();
    assert_eq!(reaped.reclaimed, 1);
    let b = s
        .task_lease_available(&lease_params(q, 1, secs(at + 31)))
        .await
        .unwrap()
        .pop()
        .expect("second lease");
    assert_eq!(a.id, b.id);
    assert!(b.fencing_token > a.fencing_token);
    (a.lease_token.unwrap(), b)
}

async fn a_stale_holder_is_refused_even_beside_the_live_one(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[task("f", 1), task("g", 2)], t0())
        .await
        .unwrap();
    let (stale, live) = lease_twice(&s, "f", 0).await;
    let now = secs(32);
    let b_token = live.lease_token.clone().unwrap();

    // Holder A's lease calls after the task went to B: every one is refused.
    let beat = s
        .lease_extend(
            &[LeaseRef {
                task_id: live.id.clone(),
                lease_token: stale.clone(),
            }],
            None,
            now,
        )
        .await
        .unwrap();
    assert_eq!(beat, [LeaseState::Lost]);
    let cp = store::CheckpointParams {
        task_id: live.id.clone(),
        lease_token: stale.clone(),
        checkpoint: b"a".to_vec(),
        extend_by: None,
        now,
    };
    assert_eq!(s.task_checkpoint(&cp).await.unwrap(), Settled::LeaseLost);
    let fail = FailParams {
        prefer_same_worker: false,
        task_id: live.id.clone(),
        lease_token: stale.clone(),
        error: "late".into(),
        non_retryable: false,
        retry_after: None,
        now,
        jitter_unit: 0.5,
    };
    assert_eq!(s.task_fail(&fail).await.unwrap(), Settled::LeaseLost);
    assert_eq!(
        s.task_complete(&completion(&live, &stale, now))
            .await
            .unwrap(),
        Settled::LeaseLost
    );

    // A and B complete in one call, in both orders: only B's settles.
    let both = s
        .task_complete_many(&[
            completion(&live, &stale, now),
            completion(&live, &b_token, now),
        ])
        .await
        .unwrap();
    assert_eq!(both[0], Settled::LeaseLost);
    assert!(matches!(both[1], Settled::Applied(_)), "{both:?}");
    let again = s
        .task_complete_many(&[
            completion(&live, &b_token, now),
            completion(&live, &stale, now),
        ])
        .await
        .unwrap();
    assert!(matches!(again[0], Settled::AlreadySettled(_)), "{again:?}");
    assert_eq!(again[1], Settled::LeaseLost);
    let stored = s.task_get(&live.id).await.unwrap().unwrap();
    assert_eq!(stored.state, StoredState::Succeeded);
    let attempts = s.attempt_list(&live.id).await.unwrap().unwrap();
    assert_eq!(attempts.len(), 2);

    // A lease that expired but was not reclaimed yet settles nothing, and each
    // item of a combined call is judged by its own clock.
    let g = s
        .task_lease_available(&lease_params("g", 1, secs(40)))
        .await
        .unwrap()
        .pop()
        .unwrap();
    let g_token = g.lease_token.clone().unwrap();
    let expired = s
        .task_complete_many(&[
            completion(&g, "no-such-token", secs(41)),
            completion(&g, &g_token, secs(71)),
        ])
        .await
        .unwrap();
    assert_eq!(expired, [Settled::LeaseLost, Settled::LeaseLost]);
    assert_eq!(
        s.task_get(&g.id).await.unwrap().unwrap().state,
        StoredState::Leased
    );
    let in_time = s
        .task_complete_many(&[completion(&g, &g_token, secs(69))])
        .await
        .unwrap();
    assert!(matches!(in_time[0], Settled::Applied(_)), "{in_time:?}");
}

async fn a_lease_stops_at_its_reply_budget_but_takes_one_at_least(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let big = |n| NewTask {
        payload: vec![7; 1 << 20],
        ..task("big", n)
    };
    s.task_insert_many(&[big(1), big(2), big(3), big(4)], t0())
        .await
        .unwrap();
    let budget = |bytes: u64| LeaseParams {
        max_reply_bytes: bytes,
        ..lease_params("big", 10, t0())
    };
    let two = s.task_lease_available(&budget(5 << 19)).await.unwrap();
    assert_eq!(
        two.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        [uuid_like(1), uuid_like(2)]
    );
    let one = s.task_lease_available(&budget(1000)).await.unwrap();
    assert_eq!(
        one.len(),
        1,
        "one task even when it alone is over the budget"
    );
    // What was not taken is still there for the next lease.
    let rest = s
        .task_lease_many(&[budget(4 << 20)])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id, uuid_like(4));
}

fn secs_after(s: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(s)
}

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
    a_submitted_checkpoint_is_stored_by_every_insert,
    // Dependencies by key.
    a_key_dependency_waits_for_a_task_submitted_later,
    a_key_naming_an_existing_task_is_an_ordinary_dependency,
    a_key_whose_task_fails_follows_run_if_dependency_fails,
    a_blocked_task_goes_dead_at_its_deadline,
    key_waits_go_with_their_dependent_at_retention,
    racing_waits_and_keyed_inserts_always_bind,
    a_cycle_through_a_key_ends_at_a_deadline,
    dependencies_bind_only_to_the_same_producers_tasks,
    a_key_holds_a_bounded_number_of_waits_per_producer,
    insert_deduplicates_by_queue_and_key,
    replace_waiting_rewrites_a_waiting_task_and_its_place,
    replace_waiting_never_touches_a_leased_finished_or_other_queues_task,
    replace_waiting_rewrites_a_blocked_task,
    replace_waiting_racing_a_lease_never_changes_a_leased_task,
    concurrent_leases_never_share_a_task,
    one_lease_call_shares_tasks_among_waiting_requests,
    leases_extend_settle_and_reclaim_by_the_given_clock,
    list_filters_by_visible_state_at_now,
    a_creation_time_range_lists_newest_created_first_by_keyset,
    a_stale_holder_is_refused_even_beside_the_live_one,
    a_lease_stops_at_its_reply_budget_but_takes_one_at_least,
    attempts_are_counted_per_bucket_with_their_run_times,
    dead_tasks_group_by_error_and_requeue_together,
    dead_tasks_are_cancelled_by_group_or_one_at_a_time,
    lease_holders_are_grouped_by_worker_and_queue,
    schedules_insert_read_update_and_delete,
    schedule_due_reads_only_due_unpaused_schedules_in_order,
    schedule_fire_records_each_fire_time_and_its_task_once,
    schedule_fire_makes_copies_and_deduplicates_by_key,
    two_stores_racing_on_due_schedules_fire_each_once,
    // Routing.
    a_task_targeted_by_worker_id_goes_only_to_that_worker,
    a_changed_target_holds_for_the_next_lease,
    a_target_changes_to_labels_and_clears_to_anyone,
    a_leased_or_finished_task_keeps_its_target,
    a_list_filters_by_target_and_by_a_metadata_entry,
    plain_leases_keep_order_and_targets_around_a_routed_task,
    a_task_targeted_by_labels_goes_to_a_worker_with_all_of_them,
    a_task_nobody_may_take_does_not_block_the_tasks_behind_it,
    a_soft_sticky_retry_waits_for_its_worker_until_the_timeout,
    a_hard_sticky_retry_waits_for_its_worker_only,
    prefer_same_worker_reserves_one_retry_softly,
    six_copies_to_twenty_workers_are_each_done_once_by_six_workers,
    a_worker_that_completed_a_copy_never_gets_another,
    a_worker_never_holds_more_leases_of_a_queue_than_its_cap,
    requests_served_together_get_only_tasks_they_may_take,
    targets_sticky_fanout_and_caps_combine,
    workers_are_recorded_and_listed_with_their_leases,
    requests_with_the_same_labels_share_targeted_tasks,
    queue_settings_are_seeded_put_by_version_and_listed,
    a_gated_lease_holds_key_limits_and_spends_tokens,
    a_gated_lease_never_takes_a_task_twice,
    // The console.
    dead_letters_group_by_the_current_error_however_a_task_died,
    // Sync match.
    a_matched_task_is_inserted_leased_to_its_waiter,
    a_ready_task_that_would_lease_first_keeps_the_new_one_pending,
    matches_stand_only_at_the_head_of_their_queue,
    a_duplicate_key_is_answered_with_the_existing_task_unleased,
    a_sync_matched_lease_expires_and_is_leased_again,
    a_released_lease_is_pending_again_without_spending_an_attempt,
    routed_and_plain_tasks_served_together_keep_lease_order_per_worker,
    requests_of_one_worker_in_a_gated_batch_share_its_cap_in_turn,
    key_buckets_full_again_are_purged,
    // Fewer index writes per task (migration 0013).
    a_creation_time_range_lists_leased_tasks_in_their_place,
    retention_purges_old_finished_tasks_of_every_queue_and_state,
    queue_counts_see_leased_finished_and_pending_tasks,
    a_bulk_selection_by_creation_time_keeps_leased_tasks,
    // The plain lease over several queues .
    one_lease_takes_tasks_in_lease_order_across_queues,
    // Round-robin fairness across lease calls.
    round_robin_turns_persist_across_single_task_leases,
    a_multi_task_round_robin_lease_comes_in_turn_order,
    random_key_populations_are_served_round_robin_across_leases,
    // Scheduled tasks wait outside the lease order (migration 0017).
    a_scheduled_task_leases_exactly_when_due_in_priority_order,
    a_retry_backoff_waits_and_is_leased_when_due,
    an_update_moves_a_task_out_of_the_lease_order_and_back,
    requeued_and_reclaimed_tasks_lease_when_due,
    scheduled_tasks_of_higher_priority_do_not_hold_back_sync_match,
    racing_leasers_keep_fanout_copies_distinct_and_every_task_single,
    // Keys, ids, tokens and worker ids compare byte for byte.
    keys_differing_only_in_spaces_are_different_tasks,
    a_lease_token_with_spaces_added_is_not_the_lease,
    a_task_for_a_worker_is_not_leased_by_that_id_with_a_space,
    // A lease's reply and a batch of completions, as written.
    a_leased_record_is_the_row_as_stored,
    a_mixed_batch_settles_exactly_its_live_leases,
);

/// A lease over several queues locks the head of each; the rows it does not take
/// are announced (NOTIFY at commit), so a lease on another replica that skipped
/// them while they were locked does not sleep through them. Postgres only: SQLite
/// has one writer and no row locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_locked_but_not_taken_are_announced() {
    let Some((s, db)) = open(Backend::Postgres).await else {
        return;
    };
    let high = NewTask {
        priority: 5,
        ..task("x", 1)
    };
    s.task_insert_many(&[high, task("y", 2)], t0())
        .await
        .unwrap();
    // Listening from now on: the insert's own notifications are not heard.
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
    listener.listen(store::postgres::CHANNEL).await.unwrap();
    let leased = s
        .task_lease_available(&LeaseParams {
            queues: vec!["x".into(), "y".into()],
            ..lease_params("x", 1, t0())
        })
        .await
        .unwrap();
    assert_eq!(leased[0].id, uuid_like(1));
    let n = tokio::time::timeout(Duration::from_secs(20), listener.recv())
        .await
        .expect("the untaken row's queue was announced")
        .unwrap();
    assert_eq!(n.payload(), "y");
}

/// On MySQL the same: a lease that locked rows it did not take advances the
/// event counter past its events, and another replica's poller then wakes every
/// queue (it cannot know which rows were skipped while locked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_locked_but_not_taken_wake_every_queue_on_mysql() {
    let Some((s, db)) = open(Backend::Mysql).await else {
        return;
    };
    let high = NewTask {
        priority: 5,
        ..task("x", 1)
    };
    s.task_insert_many(&[high, task("y", 2)], t0())
        .await
        .unwrap();
    // Another replica's store and its poller, recording what it wakes.
    let other = store::connect(&db.url, 2).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<String>>();
    let stop = tokio_util::sync::CancellationToken::new();
    other.spawn_listener(
        Arc::new(move |q: Option<&str>| {
            let _ = tx.send(q.map(str::to_owned));
        }),
        stop.clone(),
    );
    // The poller wakes every queue once as it starts: wait for that first.
    let first = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .unwrap();
    assert_eq!(first, Some(None));
    let leased = s
        .task_lease_available(&LeaseParams {
            queues: vec!["x".into(), "y".into()],
            ..lease_params("x", 1, t0())
        })
        .await
        .unwrap();
    assert_eq!(leased[0].id, uuid_like(1));
    let woken = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the other replica woke")
        .unwrap();
    assert_eq!(woken, None, "every queue");
    stop.cancel();
}
