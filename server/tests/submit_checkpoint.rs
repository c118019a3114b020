//! TaskSpec.checkpoint on every store: the first attempt's lease hands the
//! submitted checkpoint over (plain, batched, sync-matched, with dependencies,
//! fan-out copies); a task without one has none; one past the checkpoint limit
//! is refused and the whole Submit writes nothing; a worker's Checkpoint
//! replaces it for the retry; REPLACE_WAITING keeps the waiting task's.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::service::Settings;

/// The checkpoint limit of these brokers (small, so a test can pass it).
const LIMIT: usize = 64;

fn settings() -> Settings {
    let mut s = Settings {
        sync_match_postgres: true,
        ..Default::default()
    };
    s.limits.max_checkpoint_bytes = LIMIT;
    s
}

async fn app(b: Backend) -> Option<TestApp> {
    spawn_app_with(
        b,
        Options {
            settings: settings(),
            ..Options::default()
        },
    )
    .await
}

fn with_checkpoint(queue: &str, c: &[u8]) -> pb::TaskSpec {
    pb::TaskSpec {
        checkpoint: Some(c.to_vec()),
        ..spec(queue)
    }
}

async fn the_first_lease_hands_the_submitted_checkpoint_over(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    // One Submit of three: a checkpoint, an empty one (set: a checkpoint all
    // the same), none.
    let ids = submit(
        &mut c,
        vec![
            with_checkpoint("ck", b"step=3\xff\x00"),
            with_checkpoint("ck", b""),
            spec("ck"),
        ],
    )
    .await;
    let leased = lease(&mut c, "ck", 10).await;
    assert_eq!(leased.len(), 3);
    let by_id = |id: &str| leased.iter().find(|t| t.task_id == id).expect("leased");
    let (full, empty, none) = (by_id(&ids[0]), by_id(&ids[1]), by_id(&ids[2]));
    assert_eq!((full.attempt, full.has_checkpoint), (1, true));
    assert_eq!(full.checkpoint, b"step=3\xff\x00");
    assert!(empty.has_checkpoint);
    assert!(empty.checkpoint.is_empty());
    assert!(!none.has_checkpoint);
    // GetTask shows the submitted one too.
    let t = get(&mut app.admin().await, &ids[0]).await;
    assert!(t.has_checkpoint);
    let t = get(&mut app.admin().await, &ids[2]).await;
    assert!(!t.has_checkpoint);
}

async fn one_past_the_limit_is_refused_and_the_submit_writes_nothing(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    let err = c
        .submit(pb::SubmitRequest {
            tasks: vec![
                with_checkpoint("big", &[7; LIMIT]),
                with_checkpoint("big", &[7; LIMIT + 1]),
            ],
        })
        .await
        .expect_err("past the limit");
    // As a Checkpoint past the limit is (and a payload past its own).
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert_eq!(bad_field(&err).as_deref(), Some("tasks[1].checkpoint"));
    assert!(
        err.message().contains("more than the limit of 64"),
        "{err:?}"
    );
    let listed = app
        .admin()
        .await
        .list_tasks(pb::ListTasksRequest {
            queue: "big".into(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner()
        .tasks;
    assert!(listed.is_empty(), "a refused Submit stored {listed:?}");
    // At the limit exactly, it stands.
    let id = submit_one(&mut c, with_checkpoint("big", &[7; LIMIT])).await;
    let t = lease_one(&mut c, "big").await;
    assert_eq!(t.task_id, id);
    assert_eq!(t.checkpoint, vec![7; LIMIT]);
}

async fn a_sync_matched_task_carries_its_checkpoint(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut waiter = app.broker().await;
    let poll = tokio::spawn(async move {
        waiter
            .lease(pb::LeaseRequest {
                wait: secs(60),
                ..lease_req("sm", 1)
            })
            .await
            .unwrap()
            .into_inner()
            .tasks
    });
    app.until_waiting(1).await;
    let mut c = app.broker().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..with_checkpoint("sm", b"resume-here")
        },
    )
    .await;
    let got = tokio::time::timeout(Duration::from_secs(20), poll)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, id);
    assert_eq!(app.service().sync_matched(), 1, "handed over by the Submit");
    assert!(got[0].has_checkpoint);
    assert_eq!(got[0].checkpoint, b"resume-here");
    // Stored too: a Checkpoint-free failure hands it to the retry.
    c.fail(pb::FailRequest {
        task_id: id.clone(),
        lease_token: got[0].lease_token.clone(),
        error_message: "again".into(),
        ..Default::default()
    })
    .await
    .expect("fail");
    let again = lease_one(&mut c, "sm").await;
    assert_eq!(
        (again.attempt, again.checkpoint.as_slice()),
        (2, &b"resume-here"[..])
    );
}

async fn a_workers_checkpoint_replaces_the_submitted_one(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..with_checkpoint("re", b"seed")
        },
    )
    .await;
    let first = lease_one(&mut c, "re").await;
    assert_eq!(first.checkpoint, b"seed");
    c.checkpoint(pb::CheckpointRequest {
        task_id: id.clone(),
        lease_token: first.lease_token.clone(),
        checkpoint: b"newer".to_vec(),
        extend_by: None,
    })
    .await
    .expect("checkpoint");
    c.fail(pb::FailRequest {
        task_id: id.clone(),
        lease_token: first.lease_token.clone(),
        error_message: "retry".into(),
        ..Default::default()
    })
    .await
    .expect("fail");
    let second = lease_one(&mut c, "re").await;
    assert_eq!(second.attempt, 2);
    assert!(second.has_checkpoint);
    assert_eq!(second.checkpoint, b"newer");
}

async fn dependents_and_copies_carry_their_checkpoint(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    // Index 1 waits for index 0 (the flow insert); index 2 is two copies.
    let ids = submit(
        &mut c,
        vec![
            spec("first"),
            pb::TaskSpec {
                depends_on_index: vec![0],
                ..with_checkpoint("then", b"dep")
            },
            pb::TaskSpec {
                fanout: Some(pb::Fanout {
                    copies: 2,
                    distinct_workers: false,
                }),
                ..with_checkpoint("copies", b"copy")
            },
        ],
    )
    .await;
    let copies = lease(&mut c, "copies", 10).await;
    assert_eq!(copies.len(), 2);
    for t in &copies {
        assert_eq!(
            (t.has_checkpoint, t.checkpoint.as_slice()),
            (true, &b"copy"[..])
        );
    }
    assert!(lease(&mut c, "then", 1).await.is_empty(), "blocked");
    let first = lease_one(&mut c, "first").await;
    c.complete(pb::CompleteRequest {
        task_id: first.task_id,
        lease_token: first.lease_token,
        ..Default::default()
    })
    .await
    .expect("complete");
    let then = lease_one(&mut c, "then").await;
    assert_eq!(then.task_id, ids[1]);
    assert_eq!(
        (then.has_checkpoint, then.checkpoint.as_slice()),
        (true, &b"dep"[..])
    );
}

async fn replace_waiting_keeps_the_waiting_tasks_checkpoint(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    let keyed = |payload: &[u8], checkpoint: Option<&[u8]>| pb::TaskSpec {
        key: "k1".into(),
        payload: payload.to_vec(),
        checkpoint: checkpoint.map(<[u8]>::to_vec),
        on_duplicate_key: pb::DuplicateKeyPolicy::ReplaceWaiting as i32,
        ..spec("rw")
    };
    let id = submit_one(&mut c, keyed(b"v1", Some(b"old"))).await;
    let r = c
        .submit(pb::SubmitRequest {
            tasks: vec![keyed(b"v2", Some(b"new"))],
        })
        .await
        .expect("replace")
        .into_inner()
        .results;
    assert_eq!(r[0].task_id, id);
    assert!(r[0].replaced);
    let t = lease_one(&mut c, "rw").await;
    assert_eq!(t.payload, b"v2");
    assert_eq!(t.checkpoint, b"old");
    // A replacement never hands a checkpoint to a task that had none.
    let bare = submit_one(
        &mut c,
        pb::TaskSpec {
            key: "k2".into(),
            ..spec("rw")
        },
    )
    .await;
    let r = c
        .submit(pb::SubmitRequest {
            tasks: vec![pb::TaskSpec {
                key: "k2".into(),
                ..keyed(b"v3", Some(b"new"))
            }],
        })
        .await
        .expect("replace")
        .into_inner()
        .results;
    assert!(r[0].replaced);
    let t = lease_one(&mut c, "rw").await;
    assert_eq!(
        (t.task_id.as_str(), t.has_checkpoint),
        (bare.as_str(), false)
    );
}

all_backends!(
    the_first_lease_hands_the_submitted_checkpoint_over,
    one_past_the_limit_is_refused_and_the_submit_writes_nothing,
    a_sync_matched_task_carries_its_checkpoint,
    a_workers_checkpoint_replaces_the_submitted_one,
    dependents_and_copies_carry_their_checkpoint,
    replace_waiting_keeps_the_waiting_tasks_checkpoint,
);
