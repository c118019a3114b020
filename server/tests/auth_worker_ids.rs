//! Worker tokens bound to worker ids (`workers=` in the tokens file): a bound token
//! leases, heartbeats, checkpoints and settles only under the ids it may use;
//! anything else is PERMISSION_DENIED naming `worker_id` and changes nothing.
//! Unbound worker tokens and admin tokens use any worker id.

mod common;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::api::auth::parse_token_file;
use tonic::Code;

const ADMIN: &str = "admin-token-0000001";
const BOUND: &str = "worker-token-bound1";
const FREE: &str = "worker-token-free01";

const TOKENS_FILE: &str = "\
# ops
admin admin-token-0000001 ops
worker worker-token-bound1 per-user workers=uid_5,gpu-*
worker worker-token-free01 fleet
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

fn lease_as(queue: &str, worker_id: &str) -> pb::LeaseRequest {
    pb::LeaseRequest {
        worker_id: worker_id.into(),
        ..lease_req(queue, 10)
    }
}

fn for_worker(queue: &str, worker_id: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        target: Some(pb::Target {
            worker_id: worker_id.into(),
            ..Default::default()
        }),
        ..spec(queue)
    }
}

fn denied_naming<T: std::fmt::Debug>(r: Result<T, tonic::Status>, field: &str) {
    let e = r.expect_err("a bound token used a worker id it may not");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().starts_with(&format!("{field}:")), "{e:?}");
    assert!(!e.message().contains('\n'), "{e:?}");
}

async fn submit(c: &mut Client, tasks: Vec<pb::TaskSpec>) -> Vec<String> {
    c.submit(authed(pb::SubmitRequest { tasks }, ADMIN))
        .await
        .unwrap()
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.task_id)
        .collect()
}

type Client =
    taskbroker_client::pb::broker_service_client::BrokerServiceClient<tonic::transport::Channel>;

async fn task(app: &TestApp, id: &str) -> pb::Task {
    app.admin()
        .await
        .get_task(authed(pb::GetTaskRequest { task_id: id.into() }, ADMIN))
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap()
}

/// Lease: the allowed ids (exact and by prefix) work; another id is refused and
/// the task targeted at it stays READY; unbound and admin tokens use any id.
async fn lease_under_allowed_ids_only(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    let ids = submit(
        &mut c,
        vec![
            for_worker("per-user", "uid_5"),
            for_worker("per-user", "uid_6"),
            for_worker("per-user", "gpu-7"),
        ],
    )
    .await;

    let got = c
        .lease(authed(lease_as("per-user", "uid_5"), BOUND))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, ids[0]);
    let got = c
        .lease(authed(lease_as("per-user", "gpu-7"), BOUND))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, ids[2]);

    for other in ["uid_6", "uid_55", "gpu", "", "uid_5 "] {
        denied_naming(
            c.lease(authed(lease_as("per-user", other), BOUND)).await,
            "worker_id",
        );
    }
    assert_eq!(task(&app, &ids[1]).await.state, pb::TaskState::Ready as i32);

    // An unbound worker token and an admin token keep any worker id.
    let got = c
        .lease(authed(lease_as("per-user", "uid_6"), FREE))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].task_id, ids[1]);
    c.lease(authed(lease_as("per-user", "uid_6"), ADMIN))
        .await
        .unwrap();
    // Heartbeat under another id, even with no leases, is refused too.
    let hb = pb::HeartbeatRequest {
        worker_id: "uid_6".into(),
        leases: vec![],
        extend_by: None,
    };
    denied_naming(c.heartbeat(authed(hb, BOUND)).await, "worker_id");
}

/// A lease held under an id the bound token may not use cannot be heartbeat,
/// checkpointed, completed (alone or in a batch) or failed with that token, even
/// with the lease token in hand; nothing changes. Its own leases settle as usual,
/// but not with a `lease_next` under another id.
async fn settles_check_the_lease_holder(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    let ids = submit(&mut c, vec![spec("settle"), spec("settle")]).await;
    let mut one = lease_as("settle", "uid_6");
    one.max_tasks = 1;
    let theirs = c
        .lease(authed(one.clone(), FREE))
        .await
        .unwrap()
        .into_inner()
        .tasks
        .remove(0);
    one.worker_id = "uid_5".into();
    let mine = c
        .lease(authed(one.clone(), BOUND))
        .await
        .unwrap()
        .into_inner()
        .tasks
        .remove(0);
    let mut leased = vec![theirs.task_id.clone(), mine.task_id.clone()];
    leased.sort();
    let mut submitted = ids.clone();
    submitted.sort();
    assert_eq!(leased, submitted);
    let before = task(&app, &theirs.task_id).await;
    let their_ref = pb::LeaseRef {
        task_id: theirs.task_id.clone(),
        lease_token: theirs.lease_token.clone(),
    };
    let my_ref = pb::LeaseRef {
        task_id: mine.task_id.clone(),
        lease_token: mine.lease_token.clone(),
    };

    let hb = pb::HeartbeatRequest {
        worker_id: "uid_5".into(),
        leases: vec![my_ref.clone(), their_ref.clone()],
        extend_by: secs(600),
    };
    denied_naming(c.heartbeat(authed(hb, BOUND)).await, "worker_id");
    let cp = pb::CheckpointRequest {
        task_id: theirs.task_id.clone(),
        lease_token: theirs.lease_token.clone(),
        checkpoint: b"stolen".to_vec(),
        extend_by: secs(600),
    };
    denied_naming(c.checkpoint(authed(cp, BOUND)).await, "worker_id");
    let complete = |r: &pb::LeaseRef| pb::CompleteRequest {
        task_id: r.task_id.clone(),
        lease_token: r.lease_token.clone(),
        result: b"stolen".to_vec(),
        lease_next: None,
    };
    denied_naming(
        c.complete(authed(complete(&their_ref), BOUND)).await,
        "worker_id",
    );
    let many = pb::CompleteManyRequest {
        completions: vec![complete(&my_ref), complete(&their_ref)],
        lease_next: None,
    };
    denied_naming(c.complete_many(authed(many, BOUND)).await, "worker_id");
    let fail = pb::FailRequest {
        task_id: theirs.task_id.clone(),
        lease_token: theirs.lease_token.clone(),
        non_retryable: true,
        ..Default::default()
    };
    denied_naming(c.fail(authed(fail, BOUND)).await, "worker_id");

    // Nothing changed: both still leased, the other lease not extended, no checkpoint.
    let after = task(&app, &theirs.task_id).await;
    assert_eq!(after.state, pb::TaskState::Leased as i32);
    assert_eq!(after.lease_expires_at, before.lease_expires_at);
    assert!(!after.has_checkpoint, "{after:?}");
    assert_eq!(
        task(&app, &mine.task_id).await.state,
        pb::TaskState::Leased as i32
    );

    // Its own lease: a lease_next under another id is refused before the settle.
    let mut next = complete(&my_ref);
    next.lease_next = Some(pb::LeaseRequest {
        worker_id: "uid_6".into(),
        ..one.clone()
    });
    denied_naming(
        c.complete(authed(next.clone(), BOUND)).await,
        "lease_next.worker_id",
    );
    assert_eq!(
        task(&app, &mine.task_id).await.state,
        pb::TaskState::Leased as i32
    );
    // Under its own ids it heartbeats and settles as usual.
    let hb = pb::HeartbeatRequest {
        worker_id: "uid_5".into(),
        leases: vec![my_ref.clone()],
        extend_by: None,
    };
    c.heartbeat(authed(hb, BOUND)).await.unwrap();
    next.lease_next = Some(one.clone());
    c.complete(authed(next, BOUND)).await.unwrap();
    assert_eq!(
        task(&app, &mine.task_id).await.state,
        pb::TaskState::Succeeded as i32
    );
    // The holder itself may settle its lease; a stale token is the usual LEASE_LOST.
    let stale = pb::CompleteRequest {
        lease_token: "stale".into(),
        ..complete(&their_ref)
    };
    let e = c.complete(authed(stale, BOUND)).await.unwrap_err();
    assert_eq!(e.code(), Code::Aborted, "{e:?}");
    c.complete(authed(complete(&their_ref), FREE))
        .await
        .unwrap();
    // The batch is bounded before any lease is read for the check.
    let many = pb::CompleteManyRequest {
        completions: vec![complete(&their_ref); 1001],
        lease_next: None,
    };
    let e = c.complete_many(authed(many, BOUND)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("completions:"), "{e:?}");
}

all_backends!(lease_under_allowed_ids_only, settles_check_the_lease_holder);
