//! Over gRPC, on every database: keys and lease tokens that differ only in
//! spaces are different values. A bound worker token cannot extend, checkpoint or
//! settle another worker's lease by sending that lease's token with a space
//! added; two producers' keys `inv-1` and `inv-1 ` never meet (no deduplication,
//! no replace across them).

mod common;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::api::auth::parse_token_file;
use tonic::Code;

const ADMIN: &str = "admin-token-0000001";
const ALPHA: &str = "worker-token-alpha1";
const BETA: &str = "worker-token-beta01";
const ALICE: &str = "producer-token-alice";
const BOB: &str = "producer-token-bob01";

const TOKENS_FILE: &str = "\
admin admin-token-0000001 ops
worker worker-token-alpha1 alpha workers=alpha
worker worker-token-beta01 beta workers=beta
producer producer-token-alice alice
producer producer-token-bob01 bob
";

fn authed<T>(msg: T, tok: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {tok}").parse().unwrap());
    r
}

async fn app(b: Backend) -> Option<TestApp> {
    spawn_app_with(
        b,
        Options {
            auth: parse_token_file(TOKENS_FILE).unwrap(),
            ..Options::default()
        },
    )
    .await
}

async fn read(app: &TestApp, id: &str) -> pb::Task {
    app.admin()
        .await
        .get_task(authed(pb::GetTaskRequest { task_id: id.into() }, ADMIN))
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap()
}

fn lost<T: std::fmt::Debug>(r: Result<T, tonic::Status>) {
    let e = r.expect_err("a token with a space added settled the lease");
    assert!(
        e.code() == Code::Aborted && error_reason(&e).as_deref() == Some("LEASE_LOST"),
        "{e:?}"
    );
}

/// Beta sends alpha's lease token with a space before or after it: every call
/// answers the lease lost and changes nothing; alpha's own token still works.
async fn a_lease_token_with_a_space_added_is_not_another_workers_lease(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    let id = c
        .submit(authed(
            pb::SubmitRequest {
                tasks: vec![spec("jobs")],
            },
            ADMIN,
        ))
        .await
        .unwrap()
        .into_inner()
        .results[0]
        .task_id
        .clone();
    let leased = c
        .lease(authed(
            pb::LeaseRequest {
                worker_id: "alpha".into(),
                ..lease_req("jobs", 1)
            },
            ALPHA,
        ))
        .await
        .unwrap()
        .into_inner()
        .tasks
        .remove(0);
    assert_eq!(leased.task_id, id);
    let granted = read(&app, &id).await;
    app.advance(std::time::Duration::from_secs(1));

    for wrong in [
        format!("{} ", leased.lease_token),
        format!(" {}", leased.lease_token),
    ] {
        let beat = c
            .heartbeat(authed(
                pb::HeartbeatRequest {
                    worker_id: "beta".into(),
                    leases: vec![pb::LeaseRef {
                        task_id: id.clone(),
                        lease_token: wrong.clone(),
                    }],
                    extend_by: secs(600),
                },
                BETA,
            ))
            .await
            .unwrap()
            .into_inner();
        assert!(beat.leases[0].lost, "{beat:?}");
        lost(
            c.checkpoint(authed(
                pb::CheckpointRequest {
                    task_id: id.clone(),
                    lease_token: wrong.clone(),
                    checkpoint: b"beta's".to_vec(),
                    extend_by: secs(600),
                },
                BETA,
            ))
            .await,
        );
        lost(
            c.complete(authed(
                pb::CompleteRequest {
                    task_id: id.clone(),
                    lease_token: wrong.clone(),
                    result: b"beta's".to_vec(),
                    lease_next: None,
                },
                BETA,
            ))
            .await,
        );
        lost(
            c.fail(authed(
                pb::FailRequest {
                    task_id: id.clone(),
                    lease_token: wrong.clone(),
                    error_message: "beta's".into(),
                    non_retryable: true,
                    ..Default::default()
                },
                BETA,
            ))
            .await,
        );
    }
    let now = read(&app, &id).await;
    assert_eq!(now.state, pb::TaskState::Leased as i32);
    assert_eq!(now.lease_expires_at, granted.lease_expires_at);
    assert!(now.checkpoint.is_empty(), "{now:?}");

    c.complete(authed(
        pb::CompleteRequest {
            task_id: id.clone(),
            lease_token: leased.lease_token.clone(),
            result: b"alpha's".to_vec(),
            lease_next: None,
        },
        ALPHA,
    ))
    .await
    .unwrap();
    let done = read(&app, &id).await;
    assert_eq!(done.state, pb::TaskState::Succeeded as i32);
    assert_eq!(done.result, b"alpha's");
}

fn keyed(key: &str, payload: &str, policy: pb::DuplicateKeyPolicy) -> pb::TaskSpec {
    pb::TaskSpec {
        key: key.into(),
        payload: payload.as_bytes().to_vec(),
        on_duplicate_key: policy as i32,
        ..spec("billing")
    }
}

/// Alice's `inv-1` and `inv-1 ` are two tasks; Bob's `inv-1  ` with
/// REPLACE_WAITING is a third, and replaces nothing of hers.
async fn keys_that_differ_in_trailing_spaces_never_meet(b: Backend) {
    let Some(app) = app(b).await else { return };
    let c = app.broker().await;
    let send = |t: pb::TaskSpec, tok: &'static str| {
        let mut c = c.clone();
        async move {
            c.submit(authed(pb::SubmitRequest { tasks: vec![t] }, tok))
                .await
                .expect("submit")
                .into_inner()
                .results
                .remove(0)
        }
    };
    use pb::DuplicateKeyPolicy::{KeepExisting, ReplaceWaiting};
    let first = send(keyed("inv-1", "alice 1", KeepExisting), ALICE).await;
    let second = send(keyed("inv-1 ", "alice 2", KeepExisting), ALICE).await;
    assert!(!second.deduplicated, "{second:?}");
    assert_ne!(second.task_id, first.task_id);
    let bobs = send(keyed("inv-1  ", "bob", ReplaceWaiting), BOB).await;
    assert!(!bobs.replaced && !bobs.deduplicated, "{bobs:?}");
    assert_ne!(bobs.task_id, first.task_id);
    assert_ne!(bobs.task_id, second.task_id);

    for (id, key, payload) in [
        (&first.task_id, "inv-1", "alice 1"),
        (&second.task_id, "inv-1 ", "alice 2"),
        (&bobs.task_id, "inv-1  ", "bob"),
    ] {
        let t = read(&app, id).await;
        assert_eq!(t.key, key);
        assert_eq!(t.payload, payload.as_bytes());
    }
    // Each key still deduplicates against itself.
    let again = send(keyed("inv-1 ", "alice 3", KeepExisting), ALICE).await;
    assert!(again.deduplicated);
    assert_eq!(again.task_id, second.task_id);
}

all_backends!(
    a_lease_token_with_a_space_added_is_not_another_workers_lease,
    keys_that_differ_in_trailing_spaces_never_meet,
);
