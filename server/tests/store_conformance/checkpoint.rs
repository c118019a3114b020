//! A submitted checkpoint (NewTask.checkpoint) on every store: stored where a
//! worker's Checkpoint stores its own by the plain, routed and sync-matched
//! inserts, so the first lease reads it; none stays none, empty stays empty.

use std::time::Duration;

use taskbroker_server::domain::routing::TaskRouting;
use taskbroker_server::store::{MatchTo, NewTask};

use super::{lease_params, open, t0, task, uuid_like};
use crate::common::Backend;

fn seeded(queue: &str, n: usize, checkpoint: Option<&[u8]>) -> NewTask {
    NewTask {
        checkpoint: checkpoint.map(<[u8]>::to_vec),
        ..task(queue, n)
    }
}

pub async fn a_submitted_checkpoint_is_stored_by_every_insert(b: Backend) {
    let Some((s, _db)) = open(b).await else {
        return;
    };
    // Plain inserts: a checkpoint, none, an empty one.
    let plain = [
        seeded("cp", 1, Some(b"a\xff")),
        seeded("cp", 2, None),
        seeded("cp", 3, Some(b"")),
    ];
    s.task_insert_many(&plain, t0()).await.unwrap();
    // Routed (fan-out group): the insert with the routing columns.
    let routed = NewTask {
        routing: TaskRouting {
            fanout_group: Some(uuid_like(4)),
            ..TaskRouting::default()
        },
        ..seeded("cp-routed", 4, Some(b"r"))
    };
    s.task_insert_many(&[routed], t0()).await.unwrap();
    let stored = |n: usize| {
        let s = s.clone();
        async move { s.task_get(&uuid_like(n)).await.unwrap().unwrap().checkpoint }
    };
    assert_eq!(stored(1).await.as_deref(), Some(&b"a\xff"[..]));
    assert_eq!(stored(2).await, None);
    assert_eq!(stored(3).await.as_deref(), Some(&b""[..]));
    assert_eq!(stored(4).await.as_deref(), Some(&b"r"[..]));
    // The first lease reads what was stored.
    let leased = s
        .task_lease_available(&lease_params("cp", 10, t0()))
        .await
        .unwrap();
    assert_eq!(leased.len(), 3);
    for t in &leased {
        let want = plain.iter().find(|p| p.id == t.id).unwrap();
        assert_eq!(t.checkpoint, want.checkpoint, "task {}", t.id);
    }
    // Sync match: the leased answer and the stored row both hold it.
    let m = MatchTo {
        worker_id: "w1".into(),
        worker_address: "10.0.0.9:5".into(),
        lease_duration: Duration::from_secs(30),
    };
    let got = s
        .task_insert_matched(
            &[
                seeded("cp-sm", 5, Some(b"m")),
                seeded("cp-sm", 6, Some(b"p")),
            ],
            &[Some(m), None],
            t0(),
        )
        .await
        .unwrap();
    let leased = got[0].leased.clone().expect("matched");
    assert_eq!(leased.checkpoint.as_deref(), Some(&b"m"[..]));
    assert_eq!(Some(leased), s.task_get(&uuid_like(5)).await.unwrap());
    assert!(got[1].leased.is_none());
    assert_eq!(stored(6).await.as_deref(), Some(&b"p"[..]));
}
