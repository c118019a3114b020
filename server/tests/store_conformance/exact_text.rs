//! Text the store compares is compared byte for byte on every store: keys, task
//! ids, queue names, lease tokens and worker ids that differ only in leading or
//! trailing spaces are different values (MySQL's PAD SPACE collations would
//! make `k` and `k ` one key).

use chrono::Duration as Span;
use taskbroker_server::store::{
    self, CheckpointParams, CompleteParams, FailParams, LeaseRef, LeaseState, NewTask, Settled,
};

use super::{lease_params, open, t0, task, uuid_like};
use crate::common::Backend;
use taskbroker_server::domain::routing::{Target, TaskRouting};

fn keyed(queue: &str, n: usize, key: &str) -> NewTask {
    NewTask {
        key: Some(key.into()),
        ..task(queue, n)
    }
}

pub async fn keys_differing_only_in_spaces_are_different_tasks(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // One call, then one call each: every key is its own task.
    let one = s
        .task_insert_many(&[keyed("a", 1, "k"), keyed("a", 2, "k ")], t0())
        .await
        .unwrap();
    let apart = s
        .task_insert_many(&[keyed("a", 3, " k")], t0())
        .await
        .unwrap();
    let mut got: Vec<_> = one.iter().chain(&apart).collect();
    assert!(got.iter().all(|i| !i.deduplicated), "{got:?}");
    got.sort_by(|x, y| x.task_id.cmp(&y.task_id));
    got.dedup_by(|x, y| x.task_id == y.task_id);
    assert_eq!(got.len(), 3, "three keys, three tasks");
    for n in 1..=3 {
        assert!(s.task_get(&uuid_like(n)).await.unwrap().is_some());
    }
    // Each key deduplicates only against itself.
    let again = s
        .task_insert_many(&[keyed("a", 4, "k "), keyed("a", 5, "k  ")], t0())
        .await
        .unwrap();
    assert_eq!(again[0].task_id, uuid_like(2));
    assert!(again[0].deduplicated);
    assert_eq!(again[1].task_id, uuid_like(5));
    assert!(!again[1].deduplicated);
    // Queue names too: the same key on `a` and on `a ` is two tasks.
    let other_queue = s
        .task_insert_many(&[keyed("a ", 6, "k")], t0())
        .await
        .unwrap();
    assert_eq!(other_queue[0].task_id, uuid_like(6));
    assert!(!other_queue[0].deduplicated);
    // Lookups by key and by id find the exact value only.
    let holders = s
        .task_find_keys(&[("a".into(), "k ".into()), ("a ".into(), "k".into())])
        .await
        .unwrap();
    let mut ids: Vec<_> = holders.into_iter().map(|t| t.id).collect();
    ids.sort();
    assert_eq!(ids, [uuid_like(2), uuid_like(6)]);
    let spaced = format!("{} ", uuid_like(1));
    assert!(s.task_get(&spaced).await.unwrap().is_none());
    assert_eq!(
        s.task_get(&uuid_like(1))
            .await
            .unwrap()
            .unwrap()
            .key
            .as_deref(),
        Some("k")
    );
    assert_eq!(
        s.task_get(&uuid_like(3))
            .await
            .unwrap()
            .unwrap()
            .key
            .as_deref(),
        Some(" k")
    );
}

pub async fn a_lease_token_with_spaces_added_is_not_the_lease(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[task("t", 1)], t0()).await.unwrap();
    let leased = s
        .task_lease_available(&lease_params("t", 1, t0()))
        .await
        .unwrap()
        .pop()
        .unwrap();
    let token = leased.lease_token.clone().unwrap();
    let now = t0() + Span::seconds(1);
    for wrong in [format!("{token} "), format!(" {token}")] {
        let beat = s
            .lease_extend(
                &[LeaseRef {
                    task_id: leased.id.clone(),
                    lease_token: wrong.clone(),
                }],
                Some(std::time::Duration::from_secs(600)),
                now,
            )
            .await
            .unwrap();
        assert_eq!(beat, [LeaseState::Lost], "{wrong:?}");
        let cp = CheckpointParams {
            task_id: leased.id.clone(),
            lease_token: wrong.clone(),
            checkpoint: b"theirs".to_vec(),
            extend_by: None,
            now,
        };
        assert_eq!(s.task_checkpoint(&cp).await.unwrap(), Settled::LeaseLost);
        let fail = FailParams {
            prefer_same_worker: false,
            task_id: leased.id.clone(),
            lease_token: wrong.clone(),
            error: "not mine".into(),
            non_retryable: true,
            retry_after: None,
            now,
            jitter_unit: 0.5,
        };
        assert_eq!(s.task_fail(&fail).await.unwrap(), Settled::LeaseLost);
        let done = |lease_token: String| CompleteParams {
            task_id: leased.id.clone(),
            lease_token,
            result: b"theirs".to_vec(),
            now,
        };
        assert_eq!(
            s.task_complete(&done(wrong.clone())).await.unwrap(),
            Settled::LeaseLost
        );
        let many = s
            .task_complete_many(&[done(wrong.clone()), done(wrong.clone())])
            .await
            .unwrap();
        assert_eq!(many, [Settled::LeaseLost, Settled::LeaseLost]);
    }
    // Nothing moved: the lease is as granted, and its own token settles it.
    let stored = s.task_get(&leased.id).await.unwrap().unwrap();
    assert_eq!(stored.lease_expires_at, leased.lease_expires_at);
    assert_eq!(stored.checkpoint, None);
    let done = s
        .task_complete(&CompleteParams {
            task_id: leased.id.clone(),
            lease_token: token,
            result: Vec::new(),
            now,
        })
        .await
        .unwrap();
    assert!(matches!(done, Settled::Applied(_)), "{done:?}");
}

pub async fn a_task_for_a_worker_is_not_leased_by_that_id_with_a_space(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let targeted = NewTask {
        routing: TaskRouting {
            target: Target {
                worker_id: Some("w".into()),
                labels: Default::default(),
            },
            ..TaskRouting::default()
        },
        ..task("r", 1)
    };
    s.task_insert_many(&[targeted], t0()).await.unwrap();
    for other in ["w ", " w"] {
        let p = store::LeaseParams {
            worker_id: other.into(),
            ..lease_params("r", 5, t0())
        };
        assert!(
            s.task_lease_available(&p).await.unwrap().is_empty(),
            "{other:?}"
        );
    }
    let p = store::LeaseParams {
        worker_id: "w".into(),
        ..lease_params("r", 5, t0())
    };
    let got = s.task_lease_available(&p).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, uuid_like(1));
}
