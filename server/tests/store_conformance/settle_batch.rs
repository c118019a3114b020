//! A lease's reply and a batch of completions, as the store writes them: the
//! leased records are the rows as stored, and a batch that mixes live leases
//! with a stale holder, a repeat, an unknown task and an expired lease settles
//! exactly the live ones, each with its own result, attempt row and event.
//! Run on every database by `store_conformance.rs`.

use super::*;
use taskbroker_server::domain::event::EventKind;

pub async fn a_leased_record_is_the_row_as_stored(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let near = NewTask {
        deadline: Some(secs_after(10)),
        ..task("lr", 1)
    };
    s.task_insert_many(&[near, task("lr", 2), task("lr", 3)], t0())
        .await
        .unwrap();
    let leased = s
        .task_lease_available(&lease_params("lr", 2, secs_after(1)))
        .await
        .unwrap();
    assert_eq!(leased.len(), 2);
    for t in &leased {
        let stored = s.task_get(&t.id).await.unwrap().unwrap();
        assert_eq!(*t, stored, "{}", t.id);
        assert_eq!(t.state, StoredState::Leased);
        assert_eq!(t.attempt, 1);
        assert_eq!(t.leased_by.as_deref(), Some("w"));
    }
    // A deadline nearer than the lease's end cuts it; the other runs 30 s.
    let by_id = |n: usize| leased.iter().find(|t| t.id == uuid_like(n)).unwrap();
    assert_eq!(by_id(1).lease_expires_at, Some(secs_after(10)));
    assert_eq!(by_id(2).lease_expires_at, Some(secs_after(31)));
    assert_ne!(by_id(1).lease_token, by_id(2).lease_token);
}

pub async fn a_mixed_batch_settles_exactly_its_live_leases(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let tasks: Vec<NewTask> = (1..=6).map(|n| task("mb", n)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let leased = s
        .task_lease_available(&lease_params("mb", 6, t0()))
        .await
        .unwrap();
    assert_eq!(leased.len(), 6);
    let by_id = |n: usize| leased.iter().find(|t| t.id == uuid_like(n)).unwrap();
    let token = |n: usize| by_id(n).lease_token.clone().unwrap();
    let done = |n: usize, token: &str, at: i64| CompleteParams {
        task_id: uuid_like(n),
        lease_token: token.into(),
        result: format!("result {n}").into_bytes(),
        now: secs_after(at),
    };
    let batch = [
        done(1, &token(1), 1),
        done(2, "someone else's", 1),
        done(3, &token(3), 1),
        // The same completion again, after the first in the same batch.
        done(3, &token(3), 1),
        done(99, "no such task", 1),
        // Past its lease's end by its own clock.
        done(4, &token(4), 31),
        done(5, &token(5), 2),
    ];
    let got = s.task_complete_many(&batch).await.unwrap();
    assert!(matches!(got[0], Settled::Applied(_)), "{got:?}");
    assert_eq!(got[1], Settled::LeaseLost);
    assert!(matches!(got[2], Settled::Applied(_)), "{got:?}");
    assert!(
        matches!(got[3], Settled::LeaseLost | Settled::AlreadySettled(_)),
        "{got:?}"
    );
    assert_eq!(got[4], Settled::NotFound);
    assert_eq!(got[5], Settled::LeaseLost);
    assert!(matches!(got[6], Settled::Applied(_)), "{got:?}");
    for n in [1, 3, 5] {
        let t = s.task_get(&uuid_like(n)).await.unwrap().unwrap();
        assert_eq!(t.state, StoredState::Succeeded, "{n}");
        assert_eq!(t.result, Some(format!("result {n}").into_bytes()), "{n}");
        let at = if n == 5 { 2 } else { 1 };
        assert_eq!(t.finished_at, Some(secs_after(at)), "{n}");
        assert_eq!(t.lease_expires_at, None, "{n}");
        let attempts = s.attempt_list(&t.id).await.unwrap().unwrap();
        assert_eq!(attempts.len(), 1, "{n}");
        assert_eq!(attempts[0].finished_at, Some(secs_after(at)), "{n}");
        let events = s.event_list(&t.id, 0, 100).await.unwrap();
        let succeeded = events
            .iter()
            .filter(|e| e.kind == EventKind::Succeeded)
            .count();
        assert_eq!(succeeded, 1, "{n}: {events:?}");
    }
    // The others are as leased: untouched, and no attempt ended.
    for n in [2, 4, 6] {
        let t = s.task_get(&uuid_like(n)).await.unwrap().unwrap();
        assert_eq!(t, *by_id(n), "{n}");
        let events = s.event_list(&t.id, 0, 100).await.unwrap();
        assert!(
            events.iter().all(|e| e.kind != EventKind::Succeeded),
            "{n}: {events:?}"
        );
    }
}
