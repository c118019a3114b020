//! REPLACE_WAITING: a submission writes its payload, run_at, priority and
//! metadata over the task holding its (queue, key) while that task waits, and
//! never over one a lease took or one finished. Run on every database by
//! `store_conformance.rs`.

use super::*;
use taskbroker_server::domain::event::EventKind;
use taskbroker_server::store::{FlowInserted, FlowSpec, Replacement};

fn at(secs: i64) -> DateTime<Utc> {
    t0() + chrono::Duration::seconds(secs)
}

fn keyed(queue: &str, n: usize, run_at: DateTime<Utc>) -> NewTask {
    NewTask {
        key: Some("k".into()),
        run_at,
        ..task(queue, n)
    }
}

fn replacement(queue: &str, payload: &str, run_at: DateTime<Utc>) -> Replacement {
    Replacement {
        queue: queue.into(),
        key: "k".into(),
        payload: payload.as_bytes().to_vec(),
        run_at,
        priority: 7,
        metadata: BTreeMap::from([
            ("traceparent".to_string(), "tp-new".to_string()),
            (
                "taskbroker.producer".to_string(),
                "someone-else".to_string(),
            ),
        ]),
    }
}

async fn lease_ids(s: &Arc<dyn Store>, queue: &str, now: DateTime<Utc>) -> Vec<String> {
    s.task_lease_available(&lease_params(queue, 10, now))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect()
}

pub async fn replace_waiting_rewrites_a_waiting_task_and_its_place(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // A task scheduled for later, holding key "k" in queue "a", written by producer p1.
    let mut first = keyed("a", 1, at(100));
    first
        .metadata
        .insert("taskbroker.producer".into(), "p1".into());
    s.task_insert_many(&[first], t0()).await.unwrap();
    assert!(lease_ids(&s, "a", at(1)).await.is_empty(), "not due yet");
    // Replaced with run_at now: it is due at once (the waiting flag follows run_at).
    let got = s
        .task_replace_waiting(&replacement("a", "new", at(1)), at(1))
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some(uuid_like(1).as_str()));
    let t = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(t.payload, b"new");
    assert_eq!(t.run_at, at(1));
    assert_eq!(t.priority, 7);
    assert_eq!(t.metadata["traceparent"], "tp-new");
    assert_eq!(
        t.metadata["taskbroker.producer"], "p1",
        "the broker's own entries stay the existing task's"
    );
    assert_eq!(t.state, StoredState::Pending);
    let events = s.event_list(&uuid_like(1), 0, 10).await.unwrap();
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Submitted, EventKind::Replaced]);
    assert_eq!(events[1].state, TaskState::Ready);
    // And the other way: a due task pushed later leaves the lease order until then.
    s.task_insert_many(&[keyed("b", 2, t0())], t0())
        .await
        .unwrap();
    let got = s
        .task_replace_waiting(&replacement("b", "later", at(50)), at(2))
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some(uuid_like(2).as_str()));
    assert!(lease_ids(&s, "b", at(3)).await.is_empty(), "moved later");
    assert_eq!(
        s.task_next_run_at(&["b".to_string()], at(3)).await.unwrap(),
        Some(at(50))
    );
    assert_eq!(lease_ids(&s, "b", at(50)).await, [uuid_like(2)]);
    assert_eq!(lease_ids(&s, "a", at(3)).await, [uuid_like(1)]);
}

pub async fn replace_waiting_never_touches_a_leased_finished_or_other_queues_task(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[keyed("a", 1, t0())], t0())
        .await
        .unwrap();
    // Keys are per queue: the same key in another queue is another task (none).
    let got = s
        .task_replace_waiting(&replacement("b", "x", t0()), t0())
        .await
        .unwrap();
    assert_eq!(got, None);
    let leased = s
        .task_lease_available(&lease_params("a", 1, at(1)))
        .await
        .unwrap();
    assert_eq!(leased.len(), 1);
    let got = s
        .task_replace_waiting(&replacement("a", "x", at(2)), at(2))
        .await
        .unwrap();
    assert_eq!(got, None, "leased: kept");
    let t = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(t.payload, b"1");
    assert_eq!(t.state, StoredState::Leased);
    let done = s
        .task_complete(&CompleteParams {
            task_id: uuid_like(1),
            lease_token: leased[0].lease_token.clone().unwrap(),
            result: Vec::new(),
            now: at(3),
        })
        .await
        .unwrap();
    assert!(matches!(done, Settled::Applied(_)));
    let got = s
        .task_replace_waiting(&replacement("a", "x", at(4)), at(4))
        .await
        .unwrap();
    assert_eq!(got, None, "finished: kept");
    let t = s.task_get(&uuid_like(1)).await.unwrap().unwrap();
    assert_eq!(
        (t.payload.as_slice(), t.state),
        (&b"1"[..], StoredState::Succeeded)
    );
    // No updated event was recorded for the refused replacements.
    let events = s.event_list(&uuid_like(1), 0, 10).await.unwrap();
    assert!(events.iter().all(|e| e.kind != EventKind::Replaced));
}

pub async fn replace_waiting_rewrites_a_blocked_task(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    s.task_insert_many(&[task("a", 1)], t0()).await.unwrap();
    let flows = [FlowSpec {
        depends_on: vec![uuid_like(1)],
        ..Default::default()
    }];
    let r = s
        .task_insert_flow(&[keyed("a", 2, t0())], &flows, t0(), None)
        .await
        .unwrap();
    assert!(matches!(r, FlowInserted::Done(_)));
    let got = s
        .task_replace_waiting(&replacement("a", "new", at(1)), at(1))
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some(uuid_like(2).as_str()));
    let t = s.task_get(&uuid_like(2)).await.unwrap().unwrap();
    assert_eq!(
        (t.payload.as_slice(), t.state),
        (&b"new"[..], StoredState::Blocked)
    );
}

/// Replacements racing leases: a task a lease took is never changed after it
/// was taken (what the lease handed out is what the task holds), and each
/// replacement either changed a waiting task or found it leased.
pub async fn replace_waiting_racing_a_lease_never_changes_a_leased_task(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    const N: usize = 40;
    for n in 0..N {
        let q = format!("r{n}");
        s.task_insert_many(&[keyed(&q, n, t0())], t0())
            .await
            .unwrap();
    }
    let mut handles = Vec::new();
    for n in 0..N {
        let (s1, s2) = (s.clone(), s.clone());
        let q = format!("r{n}");
        let q2 = q.clone();
        handles.push(tokio::spawn(async move {
            let lease = tokio::spawn(async move {
                s1.task_lease_available(&lease_params(&q, 1, at(1)))
                    .await
                    .unwrap()
            });
            let replace = tokio::spawn(async move {
                s2.task_replace_waiting(&replacement(&q2, "new", t0()), at(1))
                    .await
                    .unwrap()
            });
            (lease.await.unwrap(), replace.await.unwrap())
        }));
    }
    for (n, h) in handles.into_iter().enumerate() {
        let (leased, replaced) = h.await.unwrap();
        let stored = s.task_get(&uuid_like(n)).await.unwrap().unwrap();
        let want = if replaced.is_some() {
            "new".to_string()
        } else {
            n.to_string()
        };
        assert_eq!(stored.payload, want.as_bytes());
        match leased.first() {
            Some(l) => {
                assert_eq!(stored.state, StoredState::Leased);
                assert_eq!(
                    stored.payload, l.payload,
                    "a leased task keeps what the lease handed out"
                );
            }
            None => {
                // Postgres: the lease skipped the row the replacement held.
                assert!(replaced.is_some(), "nothing else held the task");
                assert_eq!(stored.state, StoredState::Pending);
            }
        }
    }
}
