//! Admission (#14, migration 0009) store cases: stored queue settings and the
//! gated lease, run on both databases by `store_conformance.rs`.

use super::*;
use taskbroker_server::domain::admission::{QueueConfig, RateLimit};

fn keyed_task(n: usize, key: &str) -> NewTask {
    NewTask {
        concurrency_key: Some(key.into()),
        ..task("g", n)
    }
}

pub async fn queue_settings_are_seeded_put_by_version_and_listed(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let paused = QueueConfig {
        paused: true,
        ..QueueConfig::default()
    };
    s.queue_seed(&[
        ("a".into(), paused.clone()),
        ("b".into(), QueueConfig::default()),
    ])
    .await
    .unwrap();
    let listed = s.queue_list().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed[0].config.paused && listed[0].updated_at.is_none());
    // A put over a stale version changes nothing.
    let v = listed[0].version;
    assert!(
        !s.queue_put("a", &QueueConfig::default(), Some(v + 7), t0())
            .await
            .unwrap()
    );
    assert!(
        s.queue_put("a", &QueueConfig::default(), Some(v), t0())
            .await
            .unwrap()
    );
    assert!(!s.queue_put("c", &paused, Some(0), t0()).await.unwrap());
    assert!(s.queue_put("c", &paused, None, t0()).await.unwrap());
    assert!(!s.queue_put("c", &paused, None, t0()).await.unwrap());
    // A new seed replaces earlier seeds but not an operator's change.
    s.queue_seed(&[("a".into(), paused.clone())]).await.unwrap();
    let listed = s.queue_list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    assert!(!listed[0].config.paused);
    assert_eq!(listed[0].updated_at, Some(t0()));
}

pub async fn a_gated_lease_holds_key_limits_and_spends_tokens(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let config = QueueConfig {
        max_concurrent_per_key: 1,
        rate_limit: Some(RateLimit {
            per_second: 1.0,
            burst: 3,
        }),
        ..QueueConfig::default()
    };
    assert!(s.queue_put("g", &config, None, t0()).await.unwrap());
    let tasks: Vec<NewTask> = (1..=10)
        .map(|n| keyed_task(n, if n <= 6 { "x" } else { "y" }))
        .collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    let got = s
        .task_lease_gated(&[lease_params("g", 10, t0())])
        .await
        .unwrap()
        .remove(0);
    let keys: Vec<&str> = got
        .iter()
        .filter_map(|t| t.concurrency_key.as_deref())
        .collect();
    // One per key (x's five others never block y), within the burst of 3.
    assert_eq!(keys, ["x", "y"]);
    // The bucket has one token left: one lease, of neither held key.
    let more = s
        .task_lease_gated(&[lease_params("g", 10, t0())])
        .await
        .unwrap()
        .remove(0);
    assert!(more.is_empty());
    let done = CompleteParams {
        task_id: got[0].id.clone(),
        lease_token: got[0].lease_token.clone().unwrap(),
        result: Vec::new(),
        now: t0(),
    };
    assert!(matches!(
        s.task_complete(&done).await.unwrap(),
        Settled::Applied(_)
    ));
    let next = s
        .task_lease_gated(&[lease_params("g", 10, t0())])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(next.len(), 1);
    // Out of tokens now; two seconds bring two.
    let done = CompleteParams {
        task_id: next[0].id.clone(),
        lease_token: next[0].lease_token.clone().unwrap(),
        result: Vec::new(),
        now: t0(),
    };
    s.task_complete(&done).await.unwrap();
    let none = s
        .task_lease_gated(&[lease_params("g", 10, t0())])
        .await
        .unwrap()
        .remove(0);
    assert!(none.is_empty());
    let later = s
        .task_lease_gated(&[lease_params("g", 10, secs_after(2))])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(later.len(), 1, "x is free, y is held: one lease");
}

pub async fn a_gated_lease_never_takes_a_task_twice(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    let config = QueueConfig {
        max_concurrent: 1000,
        ..QueueConfig::default()
    };
    s.queue_put("g", &config, None, t0()).await.unwrap();
    let tasks: Vec<NewTask> = (1..=200).map(|n| task("g", n)).collect();
    s.task_insert_many(&tasks, t0()).await.unwrap();
    // Gated and plain leases racing over the same rows.
    let mut handles = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let p = [lease_params("g", 7, t0())];
                let batch = if i % 2 == 0 {
                    s.task_lease_gated(&p).await.unwrap().remove(0)
                } else {
                    s.task_lease_many(&p).await.unwrap().remove(0)
                };
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
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(all.len(), 200);
    assert_eq!(unique.len(), 200);
}
