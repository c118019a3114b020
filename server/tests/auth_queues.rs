//! Worker tokens bound to queues (`queues=` in the tokens file): a bound token
//! leases only from the queues it may use (exact names or prefixes ending in
//! `*`), and heartbeats, checkpoints and settles only the leases of tasks in
//! them; anything else is PERMISSION_DENIED naming the field and changes
//! nothing. Unbound worker tokens and admin tokens use any queue.

mod common;

use common::*;
use taskbroker_client::pb;
use taskbroker_server::api::auth::parse_token_file;
use tonic::Code;

const ADMIN: &str = "admin-token-0000001";
const BOUND: &str = "worker-token-queues";
const FREE: &str = "worker-token-free01";

const TOKENS_FILE: &str = "\
admin admin-token-0000001 ops
worker worker-token-queues team-a queues=billing,reports-*
worker worker-token-free01 fleet
";

type Client =
    taskbroker_client::pb::broker_service_client::BrokerServiceClient<tonic::transport::Channel>;

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

fn lease_from(queues: &[&str]) -> pb::LeaseRequest {
    pb::LeaseRequest {
        queues: queues.iter().map(|q| q.to_string()).collect(),
        max_tasks: 1,
        ..lease_req("unused", 1)
    }
}

fn denied_naming<T: std::fmt::Debug>(r: Result<T, tonic::Status>, field: &str) {
    let e = r.expect_err("a bound token used a queue it may not");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().starts_with(&format!("{field}:")), "{e:?}");
    assert!(!e.message().contains('\n'), "{e:?}");
}

/// One task in each queue, in order; their ids.
async fn submit(c: &mut Client, queues: &[&str]) -> Vec<String> {
    let tasks = queues.iter().map(|q| spec(q)).collect();
    c.submit(authed(pb::SubmitRequest { tasks }, ADMIN))
        .await
        .unwrap()
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.task_id)
        .collect()
}

async fn state(app: &TestApp, id: &str) -> i32 {
    app.admin()
        .await
        .get_task(authed(pb::GetTaskRequest { task_id: id.into() }, ADMIN))
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap()
        .state
}

async fn lease_one(c: &mut Client, queue: &str, token: &str) -> pb::LeasedTask {
    let mut got = c
        .lease(authed(lease_from(&[queue]), token))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(got.len(), 1, "one task of {queue}");
    got.remove(0)
}

/// Lease: the bound queues (exact and by prefix) work; a queue that only looks
/// like one (a longer name, the prefix without its `*`, another case, a trailing
/// space), and a list with one queue outside, are refused and lease nothing;
/// an empty list is not read as every queue; unbound and admin tokens lease anywhere.
async fn lease_from_bound_queues_only(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    let outside = ["billing-eu", "reports", "Billing", "other"];
    let ids = submit(&mut c, &["billing", "reports-eu", "billing-eu", "reports"]).await;
    submit(&mut c, &["Billing", "other"]).await;

    assert_eq!(lease_one(&mut c, "billing", BOUND).await.task_id, ids[0]);
    assert_eq!(lease_one(&mut c, "reports-eu", BOUND).await.task_id, ids[1]);
    for q in outside.iter().chain(&["billing "]) {
        denied_naming(c.lease(authed(lease_from(&[q]), BOUND)).await, "queues[0]");
    }
    // Within a bound prefix, a trailing space is still no queue name.
    let e = c
        .lease(authed(lease_from(&["reports-eu "]), BOUND))
        .await
        .expect_err("not a queue name");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    denied_naming(
        c.lease(authed(lease_from(&["reports-x", "other"]), BOUND))
            .await,
        "queues[1]",
    );
    assert_eq!(state(&app, &ids[2]).await, pb::TaskState::Ready as i32);
    assert_eq!(state(&app, &ids[3]).await, pb::TaskState::Ready as i32);
    let e = c
        .lease(authed(lease_from(&[]), BOUND))
        .await
        .expect_err("no queue named");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // An unbound worker token and an admin token lease from any queue.
    assert_eq!(lease_one(&mut c, "billing-eu", FREE).await.task_id, ids[2]);
    assert_eq!(lease_one(&mut c, "reports", ADMIN).await.task_id, ids[3]);
    app.shutdown().await;
}

/// A lease of a task outside the bound queues cannot be heartbeat,
/// checkpointed, completed (alone or in a batch) or failed with the bound
/// token, even with the lease token in hand; nothing changes. Its own lease
/// settles as usual, but not with a `lease_next` from a queue outside.
async fn settles_check_the_queue_of_the_task(b: Backend) {
    let Some(app) = app(b).await else { return };
    let mut c = app.broker().await;
    submit(&mut c, &["other", "billing", "billing", "other"]).await;
    let theirs = lease_one(&mut c, "other", FREE).await;
    let mine = lease_one(&mut c, "billing", BOUND).await;
    let lease_ref = |t: &pb::LeasedTask| pb::LeaseRef {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
    };
    let before = app
        .admin()
        .await
        .get_task(authed(
            pb::GetTaskRequest {
                task_id: theirs.task_id.clone(),
            },
            ADMIN,
        ))
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();

    let hb = pb::HeartbeatRequest {
        worker_id: "w1".into(),
        leases: vec![lease_ref(&mine), lease_ref(&theirs)],
        extend_by: secs(600),
    };
    denied_naming(c.heartbeat(authed(hb, BOUND)).await, "queue");
    let cp = pb::CheckpointRequest {
        task_id: theirs.task_id.clone(),
        lease_token: theirs.lease_token.clone(),
        checkpoint: b"stolen".to_vec(),
        extend_by: secs(600),
    };
    denied_naming(c.checkpoint(authed(cp, BOUND)).await, "queue");
    let complete = |t: &pb::LeasedTask| pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: b"stolen".to_vec(),
        lease_next: None,
    };
    denied_naming(c.complete(authed(complete(&theirs), BOUND)).await, "queue");
    let many = pb::CompleteManyRequest {
        completions: vec![complete(&mine), complete(&theirs)],
        lease_next: None,
    };
    denied_naming(c.complete_many(authed(many, BOUND)).await, "queue");
    let fail = pb::FailRequest {
        task_id: theirs.task_id.clone(),
        lease_token: theirs.lease_token.clone(),
        non_retryable: true,
        ..Default::default()
    };
    denied_naming(c.fail(authed(fail, BOUND)).await, "queue");

    // Nothing changed: both still leased, the other lease not extended, no checkpoint.
    let after = app
        .admin()
        .await
        .get_task(authed(
            pb::GetTaskRequest {
                task_id: theirs.task_id.clone(),
            },
            ADMIN,
        ))
        .await
        .unwrap()
        .into_inner()
        .task
        .unwrap();
    assert_eq!(after.state, pb::TaskState::Leased as i32);
    assert_eq!(after.lease_expires_at, before.lease_expires_at);
    assert!(!after.has_checkpoint, "{after:?}");
    assert_eq!(
        state(&app, &mine.task_id).await,
        pb::TaskState::Leased as i32
    );

    // Its own lease: a lease_next from a queue outside is refused before the
    // settle, and the waiting task of that queue is not leased.
    let mut next = complete(&mine);
    next.lease_next = Some(lease_from(&["billing", "other"]));
    denied_naming(
        c.complete(authed(next.clone(), BOUND)).await,
        "lease_next.queues[1]",
    );
    assert_eq!(
        state(&app, &mine.task_id).await,
        pb::TaskState::Leased as i32
    );
    let mut fail_next = pb::FailRequest {
        task_id: mine.task_id.clone(),
        lease_token: mine.lease_token.clone(),
        lease_next: Some(lease_from(&["other"])),
        ..Default::default()
    };
    denied_naming(
        c.fail(authed(fail_next.clone(), BOUND)).await,
        "lease_next.queues[0]",
    );
    // Within its queues it heartbeats and settles as usual, and lease_next leases.
    let hb = pb::HeartbeatRequest {
        worker_id: "w1".into(),
        leases: vec![lease_ref(&mine)],
        extend_by: None,
    };
    c.heartbeat(authed(hb, BOUND)).await.unwrap();
    next.lease_next = Some(lease_from(&["billing"]));
    let got = c
        .complete(authed(next, BOUND))
        .await
        .unwrap()
        .into_inner()
        .next_tasks;
    assert_eq!(got.len(), 1);
    assert_eq!(
        state(&app, &mine.task_id).await,
        pb::TaskState::Succeeded as i32
    );
    fail_next.task_id = got[0].task_id.clone();
    fail_next.lease_token = got[0].lease_token.clone();
    fail_next.lease_next = None;
    c.fail(authed(fail_next, BOUND)).await.unwrap();
    // The other queue's waiting task was never leased by the bound token.
    let waiting = c
        .lease(authed(lease_from(&["other"]), FREE))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert_eq!(waiting.len(), 1);
    app.shutdown().await;
}

all_backends!(
    lease_from_bound_queues_only,
    settles_check_the_queue_of_the_task
);
