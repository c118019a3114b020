//! At-most-once tasks over gRPC on both stores: leased once; a lost lease or a
//! failed attempt makes them DEAD with a reason, never a retry; what a caller
//! may not do with the field.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;

fn once(queue: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        at_most_once: true,
        ..spec(queue)
    }
}

async fn an_expired_lease_kills_the_task_with_a_reason(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    // The queue's default would retry: at_most_once overrides it.
    let id = submit_one(&mut c, once("jobs")).await;
    let plain = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(3),
            ..spec("jobs")
        },
    )
    .await;
    let got = lease(&mut c, "jobs", 10).await;
    assert_eq!(got.len(), 2);
    let mine = got.iter().find(|t| t.task_id == id).expect("leased");
    assert!(mine.at_most_once);
    assert_eq!(mine.max_attempts, 1);
    assert!(
        !got.iter()
            .find(|t| t.task_id == plain)
            .unwrap()
            .at_most_once
    );
    app.advance(Duration::from_secs(31));
    app.reap().await;
    let t = get(&mut admin, &id).await;
    assert_eq!(state(&t), pb::TaskState::Dead);
    assert!(t.at_most_once);
    assert!(t.last_error.contains("at-most-once"), "{}", t.last_error);
    // The plain task is retried; the at-most-once one is never leased again.
    assert_eq!(state(&get(&mut admin, &plain).await), pb::TaskState::Ready);
    let again = lease(&mut c, "jobs", 10).await;
    assert_eq!(
        again.iter().map(|t| t.task_id.as_str()).collect::<Vec<_>>(),
        [plain.as_str()]
    );
    app.shutdown().await;
}

async fn a_failed_attempt_is_final_even_when_retryable(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    let id = submit_one(&mut c, once("jobs")).await;
    let t = lease_one(&mut c, "jobs").await;
    let r = c
        .fail(pb::FailRequest {
            task_id: id.clone(),
            lease_token: t.lease_token,
            error_message: "boom".into(),
            retry_after: secs(0),
            ..Default::default()
        })
        .await
        .expect("fail")
        .into_inner();
    assert_eq!(r.state, pb::TaskState::Dead as i32);
    assert_eq!(state(&get(&mut admin, &id).await), pb::TaskState::Dead);
    assert!(lease(&mut c, "jobs", 10).await.is_empty());
    app.shutdown().await;
}

/// Hostile input: more attempts with at_most_once, the broker's metadata entry
/// set by hand, and an operator raising max_attempts: each refused, naming the
/// field, storing nothing.
async fn callers_cannot_give_it_more_attempts(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.broker().await;
    let mut admin = app.admin().await;
    let more = pb::TaskSpec {
        retry: retry_now(u32::MAX),
        ..once("jobs")
    };
    let forged = pb::TaskSpec {
        metadata: [("taskbroker.at_most_once".to_string(), "true".to_string())].into(),
        ..spec("jobs")
    };
    for (t, field) in [
        (more, "tasks[0].retry.max_attempts"),
        (forged, "tasks[0].metadata"),
    ] {
        let e = c
            .submit(pb::SubmitRequest { tasks: vec![t] })
            .await
            .expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(bad_field(&e).as_deref(), Some(field));
    }
    let listed = admin
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.tasks.is_empty(), "nothing stored");
    // max_attempts 1 is accepted (the same as unset).
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            retry: retry_now(1),
            ..once("jobs")
        },
    )
    .await;
    let e = admin
        .update_task(pb::UpdateTaskRequest {
            task_id: id.clone(),
            max_attempts: 1000,
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["max_attempts".into()],
            }),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(get(&mut admin, &id).await.max_attempts, 1);
    app.shutdown().await;
}

all_backends!(
    an_expired_lease_kills_the_task_with_a_reason,
    a_failed_attempt_is_final_even_when_retryable,
    callers_cannot_give_it_more_attempts,
);
