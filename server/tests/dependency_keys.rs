//! Dependencies by key and dependency results through gRPC, on every store:
//! a dependent of a key no task has waits BLOCKED (ExplainTask names the key)
//! until a task with that key is submitted and succeeds; a leased dependent
//! carries the results of its SUCCEEDED dependencies, within the reply budget;
//! hostile key lists are refused naming their field and store nothing.

mod common;

use std::time::Duration;

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use tonic::Code;
use tonic::transport::Channel;

fn key(queue: &str, k: &str) -> pb::TaskKey {
    pb::TaskKey {
        queue: queue.into(),
        key: k.into(),
    }
}

async fn complete(c: &mut BrokerServiceClient<Channel>, t: &pb::LeasedTask, result: &[u8]) {
    c.complete(pb::CompleteRequest {
        task_id: t.task_id.clone(),
        lease_token: t.lease_token.clone(),
        result: result.to_vec(),
        lease_next: None,
    })
    .await
    .expect("complete");
}

async fn explain(admin: &mut AdminServiceClient<Channel>, id: &str) -> Vec<pb::Gate> {
    admin
        .explain_task(pb::ExplainTaskRequest { task_id: id.into() })
        .await
        .expect("explain")
        .into_inner()
        .gates
}

async fn count(admin: &mut AdminServiceClient<Channel>, queue: &str) -> usize {
    admin
        .list_tasks(pb::ListTasksRequest {
            queue: queue.into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks
        .len()
}

/// The whole journey: a dependent by id and one by a key submitted later.
async fn results_and_keys_reach_the_dependents(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let up = submit_one(&mut c, spec("up")).await;
    let by_id = submit_one(
        &mut c,
        pb::TaskSpec {
            depends_on: vec![up.clone()],
            ..spec("down")
        },
    )
    .await;
    let by_key = submit_one(
        &mut c,
        pb::TaskSpec {
            depends_on_keys: vec![key("later", "report-7")],
            ..spec("down")
        },
    )
    .await;
    let t = get(&mut admin, &by_key).await;
    assert_eq!(state(&t), pb::TaskState::Blocked);
    assert_eq!(t.depends_on_keys, vec![key("later", "report-7")]);
    assert_eq!(t.dependencies_remaining, 1);
    let gates = explain(&mut admin, &by_key).await;
    assert_eq!(gates[0].kind, pb::GateKind::BlockedByDependency as i32);
    assert_eq!(gates[0].missing_keys, vec![key("later", "report-7")]);
    assert!(
        gates[0].detail.contains("later/report-7"),
        "{}",
        gates[0].detail
    );

    let keyed = submit_one(
        &mut c,
        pb::TaskSpec {
            key: "report-7".into(),
            ..spec("later")
        },
    )
    .await;
    let gates = explain(&mut admin, &by_key).await;
    assert!(gates[0].missing_keys.is_empty());
    assert_eq!(gates[0].holder_task_ids, vec![keyed.clone()]);
    assert_eq!(
        get(&mut admin, &by_key).await.depends_on,
        vec![keyed.clone()]
    );

    let t = lease_one(&mut c, "up").await;
    assert!(t.dependency_results.is_empty());
    complete(&mut c, &t, b"up-result").await;
    let t = lease_one(&mut c, "later").await;
    complete(&mut c, &t, b"").await;

    let leased = lease(&mut c, "down", 10).await;
    assert_eq!(leased.len(), 2);
    let of = |id: &str| leased.iter().find(|t| t.task_id == id).expect("leased");
    assert_eq!(
        of(&by_id).dependency_results,
        [(up.clone(), b"up-result".to_vec())].into()
    );
    assert_eq!(
        of(&by_key).dependency_results,
        [(keyed.clone(), Vec::new())].into(),
        "an empty result is a result"
    );
    app.shutdown().await;
}

/// Results that would push the reply past its budget are left out whole; the
/// task is leased all the same.
async fn results_over_the_reply_budget_are_left_out_whole(b: Backend) {
    let mut opts = Options::default();
    opts.settings.limits.max_lease_reply_bytes = 64 << 10;
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let mut c = app.broker().await;
    let small = submit_one(&mut c, spec("up")).await;
    let big = submit_one(&mut c, spec("up")).await;
    let both = submit_one(
        &mut c,
        pb::TaskSpec {
            depends_on: vec![small.clone(), big.clone()],
            ..spec("down")
        },
    )
    .await;
    let only_small = submit_one(
        &mut c,
        pb::TaskSpec {
            depends_on: vec![small.clone()],
            ..spec("down")
        },
    )
    .await;
    let t = lease_one(&mut c, "up").await;
    complete(&mut c, &t, b"s").await;
    let t = lease_one(&mut c, "up").await;
    complete(&mut c, &t, &vec![7; 64 << 10]).await;

    let leased = lease(&mut c, "down", 10).await;
    assert_eq!(leased.len(), 2, "both leased");
    assert_eq!(leased[0].task_id, both);
    assert!(
        leased[0].dependency_results.is_empty(),
        "64 KiB of results do not fit in a 64 KiB reply beside the task"
    );
    assert_eq!(leased[1].task_id, only_small);
    assert_eq!(
        leased[1].dependency_results,
        [(small, b"s".to_vec())].into()
    );
    app.shutdown().await;
}

/// A dependent of a key no task ever gets goes DEAD at its deadline, and its
/// dependents follow the usual rules.
async fn a_missing_key_holds_the_dependent_until_its_deadline(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let deadline = app.clock.now_utc() + chrono::Duration::seconds(30);
    let waiting = submit_one(
        &mut c,
        pb::TaskSpec {
            deadline: ts(deadline),
            depends_on_keys: vec![key("q", "never")],
            ..spec("q")
        },
    )
    .await;
    let next = submit_one(
        &mut c,
        pb::TaskSpec {
            depends_on: vec![waiting.clone()],
            ..spec("q")
        },
    )
    .await;
    app.advance(Duration::from_secs(29));
    app.reap().await;
    assert_eq!(
        state(&get(&mut admin, &waiting).await),
        pb::TaskState::Blocked
    );
    app.advance(Duration::from_secs(1));
    app.reap().await;
    let t = get(&mut admin, &waiting).await;
    assert_eq!(state(&t), pb::TaskState::Dead);
    assert_eq!(t.last_error, "DEADLINE_EXCEEDED");
    let t = get(&mut admin, &next).await;
    assert_eq!(state(&t), pb::TaskState::Cancelled);
    assert_eq!(t.cancel_reason, pb::CancelReason::DependencyFailed as i32);
    app.shutdown().await;
}

/// Hostile key lists: each refused call names its field and stores nothing;
/// the largest allowed list is accepted and every key is named.
async fn hostile_key_lists_are_refused_naming_the_field(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let (mut c, mut admin) = (app.broker().await, app.admin().await);
    let refused = async |c: &mut BrokerServiceClient<Channel>, t: pb::TaskSpec| {
        c.submit(pb::SubmitRequest { tasks: vec![t] })
            .await
            .unwrap_err()
    };
    let keys = |n: usize| -> Vec<pb::TaskKey> {
        (0..n).map(|i| key("elsewhere", &format!("k{i}"))).collect()
    };

    let e = refused(
        &mut c,
        pb::TaskSpec {
            depends_on_keys: keys(65),
            ..spec("h")
        },
    )
    .await;
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].depends_on_keys"));

    // Keys count toward the dependency limit with depends_on.
    let e = refused(
        &mut c,
        pb::TaskSpec {
            depends_on_keys: keys(64),
            depends_on: (0..937).map(|n| format!("id-{n}")).collect(),
            ..spec("h")
        },
    )
    .await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].depends_on"));

    // Its own key: a wait nothing could end.
    let e = refused(
        &mut c,
        pb::TaskSpec {
            key: "self".into(),
            depends_on_keys: vec![key("elsewhere", "x"), key("h", "self")],
            ..spec("h")
        },
    )
    .await;
    assert_eq!(
        bad_field(&e).as_deref(),
        Some("tasks[0].depends_on_keys[1]")
    );

    for (bad, field) in [
        (key("bad queue!", "k"), "tasks[0].depends_on_keys[0].queue"),
        (key("q", ""), "tasks[0].depends_on_keys[0].key"),
        (
            key("q", &"k".repeat(513)),
            "tasks[0].depends_on_keys[0].key",
        ),
    ] {
        let e = refused(
            &mut c,
            pb::TaskSpec {
                depends_on_keys: vec![bad],
                ..spec("h")
            },
        )
        .await;
        assert_eq!(e.code(), Code::InvalidArgument);
        assert_eq!(bad_field(&e).as_deref(), Some(field));
    }
    // The broker's own mark.
    let e = refused(
        &mut c,
        pb::TaskSpec {
            metadata: [("taskbroker.dependencies".to_string(), "true".to_string())].into(),
            ..spec("h")
        },
    )
    .await;
    assert_eq!(bad_field(&e).as_deref(), Some("tasks[0].metadata"));
    assert_eq!(
        count(&mut admin, "h").await,
        0,
        "a refused call stores nothing"
    );

    // The largest list, all missing, every key named.
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            depends_on_keys: keys(64),
            ..spec("h")
        },
    )
    .await;
    let t = get(&mut admin, &id).await;
    assert_eq!(t.depends_on_keys.len(), 64);
    assert_eq!(t.dependencies_remaining, 64);
    let gates = explain(&mut admin, &id).await;
    assert_eq!(gates[0].missing_keys.len(), 64);
    // A key named twice is one wait.
    let mut twice = keys(32);
    twice.extend(keys(32));
    let id = submit_one(
        &mut c,
        pb::TaskSpec {
            depends_on_keys: twice,
            ..spec("h2")
        },
    )
    .await;
    let t = get(&mut admin, &id).await;
    assert_eq!(t.depends_on_keys.len(), 32);
    assert_eq!(t.dependencies_remaining, 32);
    app.shutdown().await;
}

all_backends!(
    results_and_keys_reach_the_dependents,
    results_over_the_reply_budget_are_left_out_whole,
    a_missing_key_holds_the_dependent_until_its_deadline,
    hostile_key_lists_are_refused_naming_the_field,
);
