//! Dependencies across producers: a dependent submitted by a producer
//! (`FlowSpec.producer`) binds only to that producer's tasks (the
//! `taskbroker.producer` entry of their metadata), by id, by a key held at
//! submit, and by a key inserted later, whichever insert path makes it; a
//! dependent without a producer binds to any task. One key holds at most
//! `MAX_WAITS_PER_KEY` unbound waits per producer. Run on every database by
//! `store_conformance.rs`.

use super::*;
use taskbroker_server::store::{FlowInserted, FlowSpec, MAX_WAITS_PER_KEY, TaskKey};

fn tkey(queue: &str, k: &str) -> TaskKey {
    TaskKey {
        queue: queue.into(),
        key: k.into(),
    }
}

/// Task `n` of `producer` (none: submitted without one).
fn of(producer: Option<&str>, queue: &str, n: usize) -> NewTask {
    let mut t = task(queue, n);
    if let Some(p) = producer {
        t.metadata
            .insert("taskbroker.producer".into(), p.to_string());
    }
    t
}

fn by(producer: Option<&str>, keys: &[TaskKey], ids: &[usize]) -> FlowSpec {
    FlowSpec {
        depends_on_keys: keys.to_vec(),
        depends_on: ids.iter().map(|&n| uuid_like(n)).collect(),
        producer: producer.map(str::to_string),
        ..Default::default()
    }
}

async fn flow(s: &Arc<dyn Store>, producer: Option<&str>, n: usize, f: FlowSpec) -> FlowInserted {
    s.task_insert_flow(&[of(producer, "own.down", n)], &[f], t0(), None)
        .await
        .unwrap()
}

async fn missing(s: &Arc<dyn Store>, n: usize) -> Vec<TaskKey> {
    s.task_keys_missing(&uuid_like(n), 100).await.unwrap()
}

async fn deps(s: &Arc<dyn Store>, n: usize) -> Vec<String> {
    s.task_flow_info(&[uuid_like(n)])
        .await
        .unwrap()
        .remove(&uuid_like(n))
        .unwrap()
        .depends_on
}

pub async fn dependencies_bind_only_to_the_same_producers_tasks(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let k = tkey("own.up", "inv-1");
    let done = |r: FlowInserted| assert!(matches!(r, FlowInserted::Done(_)), "{r:?}");
    // Waits before the key has a task: bob's, alice's, and one without a producer.
    done(
        flow(
            &s,
            Some("bob"),
            1,
            by(Some("bob"), std::slice::from_ref(&k), &[]),
        )
        .await,
    );
    done(
        flow(
            &s,
            Some("alice"),
            2,
            by(Some("alice"), std::slice::from_ref(&k), &[]),
        )
        .await,
    );
    done(flow(&s, None, 3, by(None, std::slice::from_ref(&k), &[])).await);
    // Alice's task takes the key (the plain insert): it binds her wait and the
    // producer-less one, never bob's.
    let mut holder = of(Some("alice"), "own.up", 10);
    holder.key = Some("inv-1".into());
    s.task_insert_many(&[holder], t0()).await.unwrap();
    assert_eq!(
        missing(&s, 1).await,
        vec![k.clone()],
        "bob's wait is unbound"
    );
    assert!(deps(&s, 1).await.is_empty());
    assert!(missing(&s, 2).await.is_empty());
    assert_eq!(deps(&s, 2).await, vec![uuid_like(10)]);
    assert_eq!(deps(&s, 3).await, vec![uuid_like(10)]);

    // The key held at submit: bob's dependent waits as for a key no task
    // holds; alice's depends on her task.
    done(
        flow(
            &s,
            Some("bob"),
            4,
            by(Some("bob"), std::slice::from_ref(&k), &[]),
        )
        .await,
    );
    assert_eq!(missing(&s, 4).await, vec![k.clone()]);
    assert!(deps(&s, 4).await.is_empty());
    done(
        flow(
            &s,
            Some("alice"),
            5,
            by(Some("alice"), std::slice::from_ref(&k), &[]),
        )
        .await,
    );
    assert_eq!(deps(&s, 5).await, vec![uuid_like(10)]);

    // By id: alice's task is, for bob, a task that does not exist.
    let r = flow(&s, Some("bob"), 6, by(Some("bob"), &[], &[10])).await;
    assert_eq!(r, FlowInserted::UnknownDependency { task: 0, dep: 0 });
    assert_eq!(
        flow(&s, Some("bob"), 6, by(Some("bob"), &[], &[999])).await,
        r,
        "as a made-up id"
    );
    assert!(s.task_get(&uuid_like(6)).await.unwrap().is_none());
    done(flow(&s, Some("alice"), 7, by(Some("alice"), &[], &[10])).await);
    done(flow(&s, None, 8, by(None, &[], &[10])).await);

    // Her task's success unblocks hers and the producer-less ones only.
    let leased = s
        .task_lease_available(&lease_params("own.up", 1, t0()))
        .await
        .unwrap();
    let r = s
        .task_complete(&CompleteParams {
            task_id: leased[0].id.clone(),
            lease_token: leased[0].lease_token.clone().unwrap(),
            result: b"alice's result".to_vec(),
            now: t0(),
        })
        .await
        .unwrap();
    assert!(matches!(r, Settled::Applied(_)), "{r:?}");
    for (n, want) in [
        (1, StoredState::Blocked),
        (2, StoredState::Pending),
        (3, StoredState::Pending),
        (4, StoredState::Blocked),
        (5, StoredState::Pending),
        (7, StoredState::Pending),
        (8, StoredState::Pending),
    ] {
        let got = s.task_get(&uuid_like(n)).await.unwrap().unwrap().state;
        assert_eq!(got, want, "task {n}");
    }
    let results = s
        .task_dependency_results(&[uuid_like(1), uuid_like(4)])
        .await
        .unwrap();
    assert!(results.is_empty(), "bob's tasks read none of hers");

    // Bob's own task with the key in another queue binds his waits there.
    let k2 = tkey("own.up2", "inv-1");
    done(
        flow(
            &s,
            Some("bob"),
            11,
            by(Some("bob"), std::slice::from_ref(&k2), &[]),
        )
        .await,
    );
    let mut his = of(Some("bob"), "own.up2", 12);
    his.key = Some("inv-1".into());
    s.task_insert_many(&[his], t0()).await.unwrap();
    assert_eq!(deps(&s, 11).await, vec![uuid_like(12)]);
}

pub async fn a_key_holds_a_bounded_number_of_waits_per_producer(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let cap = MAX_WAITS_PER_KEY as usize;
    let k = tkey("cap.up", "k");
    // Each task waits for a key of its own, then for `k`.
    let batch = |producer: Option<&str>, from: usize, n: usize| {
        let tasks: Vec<NewTask> = (from..from + n)
            .map(|i| of(producer, "cap.down", i))
            .collect();
        let flows = (from..from + n)
            .map(|i| {
                by(
                    producer,
                    &[tkey("cap.up", &format!("own-{i}")), k.clone()],
                    &[],
                )
            })
            .collect();
        (tasks, flows)
    };
    let insert = |(tasks, flows): (Vec<NewTask>, Vec<FlowSpec>)| {
        let s = s.clone();
        async move {
            s.task_insert_flow(&tasks, &flows, t0(), None)
                .await
                .unwrap()
        }
    };
    let stored = |n: usize| {
        let s = s.clone();
        async move { s.task_get(&uuid_like(n)).await.unwrap().is_some() }
    };
    let r = insert(batch(Some("bob"), 1, cap - 1)).await;
    assert!(matches!(r, FlowInserted::Done(_)), "{r:?}");
    // Two more in one call: the second is one too many, and nothing is stored.
    let r = insert(batch(Some("bob"), cap, 2)).await;
    assert_eq!(r, FlowInserted::TooManyWaits { task: 1, key: 1 });
    assert!(!stored(cap).await && !stored(cap + 1).await);
    let r = insert(batch(Some("bob"), cap, 1)).await;
    assert!(matches!(r, FlowInserted::Done(_)), "{r:?}");
    let r = insert(batch(Some("bob"), cap + 1, 1)).await;
    assert_eq!(r, FlowInserted::TooManyWaits { task: 0, key: 1 });
    assert!(!stored(cap + 1).await);
    // Other producers' waits, and those without one, count apart.
    let r = insert(batch(Some("alice"), cap + 1, 1)).await;
    assert!(matches!(r, FlowInserted::Done(_)), "{r:?}");
    let r = insert(batch(None, cap + 2, 1)).await;
    assert!(matches!(r, FlowInserted::Done(_)), "{r:?}");
    // A key a task holds is no wait: bob depends on his own holder at once.
    let mut holder = of(Some("bob"), "cap.up", cap + 10);
    holder.key = Some("k".into());
    s.task_insert_many(&[holder], t0()).await.unwrap();
    let r = insert(batch(Some("bob"), cap + 3, 1)).await;
    assert!(matches!(r, FlowInserted::Done(_)), "{r:?}");
}
