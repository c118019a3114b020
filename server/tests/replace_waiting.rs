//! Debounce and replace by key over gRPC, on every database: a Submit with
//! `on_duplicate_key = REPLACE_WAITING` rewrites the payload, run_at, priority
//! and metadata of the waiting task that holds its key and says so in
//! `SubmitResult.replaced`; a leased or finished task is kept, as KEEP_EXISTING
//! keeps it; keys are per queue; bad combinations name their field.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use taskbroker_server::api::auth::{Role, TokenEntry};
use tonic::Code;
use tonic::transport::Channel;

fn replacing(queue: &str, key: &str, payload: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        key: key.into(),
        payload: payload.as_bytes().to_vec(),
        on_duplicate_key: pb::DuplicateKeyPolicy::ReplaceWaiting as i32,
        ..spec(queue)
    }
}

async fn send(
    c: &mut BrokerServiceClient<Channel>,
    tasks: Vec<pb::TaskSpec>,
) -> Vec<pb::SubmitResult> {
    c.submit(pb::SubmitRequest { tasks })
        .await
        .expect("submit")
        .into_inner()
        .results
}

/// A debounce: each submission pushes the task later and carries the latest
/// payload; the worker sees one task, with the last payload, once it is due.
async fn a_debounce_keeps_one_task_with_the_latest_payload(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let later = |s: i64| ts(app.clock.now_utc() + chrono::Duration::seconds(s));
    let first = send(
        &mut c,
        vec![pb::TaskSpec {
            run_at: later(10),
            ..replacing("q", "user-7", "v1")
        }],
    )
    .await;
    assert!(!first[0].deduplicated && !first[0].replaced);
    let id = first[0].task_id.clone();
    app.advance(Duration::from_secs(5));
    let second = send(
        &mut c,
        vec![pb::TaskSpec {
            run_at: later(10),
            priority: 3,
            metadata: [("attempt".to_string(), "2".to_string())].into(),
            ..replacing("q", "user-7", "v2")
        }],
    )
    .await;
    assert_eq!(second[0].task_id, id);
    assert!(second[0].deduplicated && second[0].replaced);
    // Due 10 s after the second submission, not the first.
    app.advance(Duration::from_secs(6));
    assert!(lease(&mut c, "q", 10).await.is_empty(), "pushed later");
    app.advance(Duration::from_secs(4));
    let t = lease_one(&mut c, "q").await;
    assert_eq!(
        (t.task_id.as_str(), t.payload.as_slice()),
        (id.as_str(), &b"v2"[..])
    );
    let task = get(&mut admin, &id).await;
    assert_eq!(task.priority, 3);
    assert_eq!(task.metadata["attempt"], "2");
    let events = admin
        .list_task_events(pb::ListTaskEventsRequest {
            task_id: id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let kinds: Vec<i32> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            pb::TaskEventKind::Submitted as i32,
            pb::TaskEventKind::Replaced as i32,
            pb::TaskEventKind::Leased as i32,
        ]
    );
    // Leased now: a replacement keeps it, as KEEP_EXISTING would.
    let third = send(&mut c, vec![replacing("q", "user-7", "v3")]).await;
    assert_eq!(third[0].task_id, id);
    assert!(third[0].deduplicated && !third[0].replaced);
    assert_eq!(get(&mut admin, &id).await.payload, b"v2");
}

/// Hostile callers: no key, a fan-out spec, the same key in another queue, the
/// same key twice in one call, an unknown policy value.
async fn replace_waiting_refuses_bad_combinations_and_keeps_keys_per_queue(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let refused = async |c: &mut BrokerServiceClient<Channel>, t: pb::TaskSpec| {
        c.submit(pb::SubmitRequest { tasks: vec![t] })
            .await
            .unwrap_err()
    };
    let e = refused(&mut c, replacing("q", "", "x")).await;
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].on_duplicate_key"));
    let e = refused(
        &mut c,
        pb::TaskSpec {
            fanout: Some(pb::Fanout {
                copies: 2,
                distinct_workers: false,
            }),
            ..replacing("q", "k", "x")
        },
    )
    .await;
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].key"));
    let e = refused(
        &mut c,
        pb::TaskSpec {
            on_duplicate_key: 99,
            ..replacing("q", "k", "x")
        },
    )
    .await;
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].on_duplicate_key"));
    assert!(
        admin
            .list_tasks(pb::ListTasksRequest {
                queue: "q".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .tasks
            .is_empty(),
        "refused calls store nothing"
    );

    // The same key twice in one call: the later spec wins.
    let r = send(
        &mut c,
        vec![replacing("q", "k", "first"), replacing("q", "k", "second")],
    )
    .await;
    assert!(!r[0].deduplicated && !r[0].replaced);
    assert_eq!(r[1].task_id, r[0].task_id);
    assert!(r[1].deduplicated && r[1].replaced);
    assert_eq!(get(&mut admin, &r[0].task_id).await.payload, b"second");
    // KEEP_EXISTING beside it keeps the task as it is.
    let keep = send(
        &mut c,
        vec![pb::TaskSpec {
            key: "k".into(),
            payload: b"kept?".to_vec(),
            ..spec("q")
        }],
    )
    .await;
    assert!(keep[0].deduplicated && !keep[0].replaced);
    assert_eq!(get(&mut admin, &r[0].task_id).await.payload, b"second");
    // Keys are per queue: the same key in another queue is another task.
    let other = send(&mut c, vec![replacing("other", "k", "elsewhere")]).await;
    assert_ne!(other[0].task_id, r[0].task_id);
    assert!(!other[0].deduplicated && !other[0].replaced);
    assert_eq!(get(&mut admin, &r[0].task_id).await.payload, b"second");
}

/// Another producer's key is refused (ALREADY_EXISTS) and its task unchanged.
async fn replace_waiting_never_rewrites_another_producers_task(b: Backend) {
    const P: &str = "producer-token-0001";
    const P2: &str = "producer-token-0002";
    const A: &str = "admin-token-0000001";
    let token = |role: Role, token: &str, name: &str| TokenEntry {
        role,
        token: token.into(),
        name: Some(name.into()),
        workers: None,
        queues: None,
    };
    let Some(app) = spawn_app_with(
        b,
        Options {
            auth: vec![
                token(Role::Producer, P, "shop"),
                token(Role::Producer, P2, "billing"),
                token(Role::Admin, A, "ops"),
            ],
            ..Options::default()
        },
    )
    .await
    else {
        return;
    };
    let c = app.broker().await;
    let send = |t: pb::TaskSpec, tok: &'static str| {
        let mut c = c.clone();
        async move {
            let mut r = tonic::Request::new(pb::SubmitRequest { tasks: vec![t] });
            r.metadata_mut()
                .insert("authorization", format!("Bearer {tok}").parse().unwrap());
            c.submit(r).await
        }
    };
    let first = send(replacing("q", "k", "mine"), P)
        .await
        .unwrap()
        .into_inner();
    let e = send(replacing("q", "k", "theirs"), P2).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    let own = send(replacing("q", "k", "mine again"), P)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(own.results[0].task_id, first.results[0].task_id);
    assert!(own.results[0].replaced);
    let mut admin = app.admin().await;
    let mut r = tonic::Request::new(pb::GetTaskRequest {
        task_id: own.results[0].task_id.clone(),
    });
    r.metadata_mut()
        .insert("authorization", format!("Bearer {A}").parse().unwrap());
    let task = admin.get_task(r).await.unwrap().into_inner().task.unwrap();
    assert_eq!(task.payload, b"mine again");
}

all_backends!(
    a_debounce_keeps_one_task_with_the_latest_payload,
    replace_waiting_refuses_bad_combinations_and_keeps_keys_per_queue,
    replace_waiting_never_rewrites_another_producers_task,
);
