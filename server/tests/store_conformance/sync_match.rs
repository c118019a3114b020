//! Sync match on both stores: a task inserted already leased to a
//! waiting request, only when no pending task of its queue due now would lease
//! first; its lease behaves as any other (settle, expiry, reclaim); a lease
//! nobody received is released without spending an attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use taskbroker_server::domain::StoredState;
use taskbroker_server::domain::routing::{Sticky, TaskRouting};
use taskbroker_server::store::{
    CompleteParams, LeaseRef, MatchTo, MatchedInsert, NewTask, Settled, Store,
};

use super::{lease_params, open, t0, task, uuid_like};
use crate::common::Backend;

fn at(secs: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(secs)
}

fn to(worker: &str) -> Option<MatchTo> {
    Some(MatchTo {
        worker_id: worker.into(),
        worker_address: "10.0.0.9:5".into(),
        lease_duration: Duration::from_secs(30),
    })
}

fn prio(queue: &str, n: usize, priority: i32) -> NewTask {
    NewTask {
        priority,
        ..task(queue, n)
    }
}

fn leased_ids(got: &[MatchedInsert]) -> Vec<Option<String>> {
    got.iter()
        .map(|m| m.leased.as_ref().map(|r| r.id.clone()))
        .collect()
}

async fn state_of(s: &dyn Store, n: usize) -> StoredState {
    s.task_get(&uuid_like(n)).await.unwrap().unwrap().state
}

pub async fn a_matched_task_is_inserted_leased_to_its_waiter(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let got = s
        .task_insert_matched(&[task("m", 1), task("m", 2)], &[to("w1"), None], t0())
        .await
        .unwrap();
    assert!(got.iter().all(|m| !m.inserted.deduplicated));
    let leased = got[0].leased.clone().expect("the matched task is leased");
    assert!(got[1].leased.is_none(), "the other is pending");
    // The answer is the stored task, as a lease would have returned it.
    let stored = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(leased, stored);
    assert_eq!(stored.state, StoredState::Leased);
    assert_eq!((stored.attempt, stored.fencing_token), (1, 1));
    assert_eq!(stored.leased_by.as_deref(), Some("w1"));
    assert_eq!(stored.lease_expires_at, Some(at(30)));
    assert_eq!(stored.created_at, t0());
    // The attempt shows with its worker and address, running.
    let attempts = s.attempt_list(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        (
            attempts[0].worker_id.as_str(),
            attempts[0].worker_address.as_str()
        ),
        ("w1", "10.0.0.9:5")
    );
    // A lease finds only the pending one; the matched task settles by its token.
    let next = s
        .task_lease_available(&lease_params("m", 10, at(1)))
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        [uuid_like(2)]
    );
    let done = s
        .task_complete(&CompleteParams {
            task_id: uuid_like(1),
            lease_token: leased.lease_token.unwrap(),
            result: b"ok".to_vec(),
            now: at(2),
        })
        .await
        .unwrap();
    assert!(matches!(done, Settled::Applied(_)));
    assert_eq!(state_of(&*s, 1).await, StoredState::Succeeded);
}

pub async fn a_ready_task_that_would_lease_first_keeps_the_new_one_pending(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // READY: priority 5 in q; SCHEDULED (not due): priority 9 in q; READY in
    // another queue, priority 9.
    let later = NewTask {
        run_at: at(60),
        ..prio("q", 2, 9)
    };
    s.task_insert_many(&[prio("q", 1, 5), later, prio("other", 3, 9)], t0())
        .await
        .unwrap();
    // Priority 5 (as high, and older) and 4 would lease after the READY task.
    for (n, p) in [(10, 5), (11, 4)] {
        let got = s
            .task_insert_matched(&[prio("q", n, p)], &[to("w1")], at(1))
            .await
            .unwrap();
        assert_eq!(leased_ids(&got), [None], "priority {p} stays pending");
        assert_eq!(state_of(&*s, n).await, StoredState::Pending);
    }
    // Priority 6 would lease first: it is handed over.
    let got = s
        .task_insert_matched(&[prio("q", 12, 6)], &[to("w1")], at(1))
        .await
        .unwrap();
    assert_eq!(leased_ids(&got), [Some(uuid_like(12))]);
    // Once the scheduled task is due, it counts (priority 9).
    let got = s
        .task_insert_matched(&[prio("q", 13, 8)], &[to("w1")], at(60))
        .await
        .unwrap();
    assert_eq!(leased_ids(&got), [None]);
    // The pending ones lease in their order: the held-back tasks were not
    // overtaken.
    let order: Vec<String> = s
        .task_lease_available(&lease_params("q", 10, at(61)))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(
        order,
        [
            uuid_like(2),
            uuid_like(13),
            uuid_like(1),
            uuid_like(10),
            uuid_like(11)
        ]
    );
}

pub async fn matches_stand_only_at_the_head_of_their_queue(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // In one batch: an unmatched task ahead of a matched one in the same queue
    // holds it back; in another queue the match stands. A higher priority later
    // in the batch leases before an earlier match.
    let tasks = [
        task("a", 1),
        task("a", 2),
        task("b", 3),
        prio("c", 4, 0),
        prio("c", 5, 3),
    ];
    let matches = [None, to("w1"), to("w2"), to("w3"), None];
    let got = s.task_insert_matched(&tasks, &matches, t0()).await.unwrap();
    assert_eq!(
        leased_ids(&got),
        [None, None, Some(uuid_like(3)), None, None]
    );
    // Scheduled and routed tasks are never matched.
    let scheduled = NewTask {
        run_at: at(5),
        ..task("d", 6)
    };
    let sticky = NewTask {
        routing: TaskRouting {
            sticky: Some(Sticky::Hard),
            ..TaskRouting::default()
        },
        ..task("e", 7)
    };
    let got = s
        .task_insert_matched(&[scheduled, sticky], &[to("w1"), to("w1")], t0())
        .await
        .unwrap();
    assert_eq!(leased_ids(&got), [None, None]);
    let stored = s.task_get(&uuid_like(7)).await.unwrap().unwrap();
    assert_eq!(
        stored.routing.sticky,
        Some(Sticky::Hard),
        "routing is stored"
    );
}

pub async fn a_duplicate_key_is_answered_with_the_existing_task_unleased(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let keyed = |n| NewTask {
        key: Some("k".into()),
        ..task("k", n)
    };
    s.task_insert_many(&[keyed(1)], t0()).await.unwrap();
    // The existing keyed task is pending and READY, so nothing of equal
    // priority is matched anyway; a second request in a fresh queue shows the
    // duplicate alone.
    let got = s
        .task_insert_matched(&[keyed(2)], &[to("w1")], t0())
        .await
        .unwrap();
    assert!(got[0].inserted.deduplicated);
    assert_eq!(got[0].inserted.task_id, uuid_like(1));
    assert!(got[0].leased.is_none());
    // In one batch: the first is matched and leased, its duplicate is not.
    let k2 = |n| NewTask {
        key: Some("k2".into()),
        ..task("k2", n)
    };
    let got = s
        .task_insert_matched(&[k2(3), k2(4)], &[to("w1"), to("w2")], t0())
        .await
        .unwrap();
    assert_eq!(leased_ids(&got), [Some(uuid_like(3)), None]);
    assert!(got[1].inserted.deduplicated);
    assert_eq!(got[1].inserted.task_id, uuid_like(3));
}

pub async fn a_sync_matched_lease_expires_and_is_leased_again(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let deadline = NewTask {
        deadline: Some(at(10)),
        ..task("x", 2)
    };
    let got = s
        .task_insert_matched(&[task("x", 1), deadline], &[to("w1"), to("w2")], t0())
        .await
        .unwrap();
    assert_eq!(leased_ids(&got), [Some(uuid_like(1)), Some(uuid_like(2))]);
    // The deadline caps the lease, as a lease statement caps it.
    assert_eq!(
        got[1].leased.as_ref().unwrap().lease_expires_at,
        Some(at(10))
    );
    let reaped = s.lease_reclaim_expired(at(31), 100).await.unwrap();
    assert_eq!(reaped.reclaimed, 1);
    assert_eq!(reaped.deadline_exceeded, 1);
    let again = s
        .task_lease_available(&lease_params("x", 10, at(31)))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, uuid_like(1));
    assert_eq!((again[0].attempt, again[0].fencing_token), (2, 2));
    let attempts = s.attempt_list(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(attempts[0].worker_id, "w1");
    assert_eq!(attempts[0].error.as_deref(), Some("lease expired"));
}

pub async fn a_released_lease_is_pending_again_without_spending_an_attempt(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let got = s
        .task_insert_matched(&[task("r", 1)], &[to("w1")], t0())
        .await
        .unwrap();
    let token = got[0].leased.as_ref().unwrap().lease_token.clone().unwrap();
    let wrong = LeaseRef {
        task_id: uuid_like(1),
        lease_token: "not-the-token".into(),
    };
    assert_eq!(s.lease_release(&[wrong], at(1)).await.unwrap(), 0);
    let right = LeaseRef {
        task_id: uuid_like(1),
        lease_token: token.clone(),
    };
    assert_eq!(
        s.lease_release(std::slice::from_ref(&right), at(1))
            .await
            .unwrap(),
        1
    );
    // Only once.
    assert_eq!(s.lease_release(&[right], at(1)).await.unwrap(), 0);
    let stored = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(stored.state, StoredState::Pending);
    assert_eq!(stored.attempt, 0);
    assert_eq!(stored.leased_by, None);
    assert!(
        s.attempt_list(&uuid_like(1))
            .await
            .unwrap()
            .unwrap()
            .is_empty()
    );
    // The old token settles nothing.
    let late = s
        .task_complete(&CompleteParams {
            task_id: uuid_like(1),
            lease_token: token,
            result: Vec::new(),
            now: at(2),
        })
        .await
        .unwrap();
    assert!(matches!(late, Settled::LeaseLost));
    // Leased again: attempt 1, and a fencing token above the released one.
    let again = s
        .task_lease_available(&lease_params("r", 1, at(2)))
        .await
        .unwrap();
    assert_eq!((again[0].attempt, again[0].fencing_token), (1, 2));
}
