//! A stale holder refused beside the live one, and the lease reply budget.

use super::*;

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

all_backends!(
    a_stale_holder_is_refused_even_beside_the_live_one,
    a_lease_stops_at_its_reply_budget_but_takes_one_at_least
);
