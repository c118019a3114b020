//! Producers stay apart, tried as a hostile producer would, on every store:
//! another producer's task ids and keys in `depends_on`, `depends_on_keys`, a
//! schedule's key template and the bulk filters are answered exactly as a task
//! that does not exist (the same status and message as a made-up id, no id,
//! no state, no result); one key holds a bounded number of waits per producer.
//! Without a producer (an admin token) dependencies bind as before.

mod common;

use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::admin_service_client::AdminServiceClient;
use taskbroker_client::pb::broker_service_client::BrokerServiceClient;
use taskbroker_client::pb::schedule_service_client::ScheduleServiceClient;
use taskbroker_server::api::auth::{Role, TokenEntry};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

const ALICE: &str = "alice-token-000001";
const BOB: &str = "bob-token-00000001";
const WORKER: &str = "worker-token-00001";
const ADMIN: &str = "admin-token-000001";

async fn app(b: Backend) -> Option<TestApp> {
    let tok = |role, token: &str, name: &str| TokenEntry {
        role,
        token: token.into(),
        name: Some(name.into()),
        workers: None,
        queues: None,
    };
    spawn_app_with(
        b,
        Options {
            auth: vec![
                tok(Role::Producer, ALICE, "alice"),
                tok(Role::Producer, BOB, "bob"),
                tok(Role::Worker, WORKER, "w"),
                tok(Role::Admin, ADMIN, "ops"),
            ],
            ..Options::default()
        },
    )
    .await
}

fn r#as<T>(token: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

struct Clients {
    broker: BrokerServiceClient<Channel>,
    admin: AdminServiceClient<Channel>,
    schedules: ScheduleServiceClient<Channel>,
}

async fn clients(app: &TestApp) -> Clients {
    Clients {
        broker: app.broker().await,
        admin: app.admin().await,
        schedules: app.schedules().await,
    }
}

impl Clients {
    async fn submit(&mut self, token: &str, t: pb::TaskSpec) -> Result<String, Status> {
        let r = self
            .broker
            .submit(r#as(token, pb::SubmitRequest { tasks: vec![t] }))
            .await?;
        Ok(r.into_inner().results[0].task_id.clone())
    }

    async fn get(&mut self, token: &str, id: &str) -> pb::Task {
        self.admin
            .get_task(r#as(token, pb::GetTaskRequest { task_id: id.into() }))
            .await
            .expect("get")
            .into_inner()
            .task
            .unwrap()
    }

    /// Leases the one ready task of `queue` and completes it with `result`.
    async fn run(&mut self, queue: &str, result: &[u8]) -> String {
        let leased = self
            .broker
            .lease(r#as(WORKER, lease_req(queue, 1)))
            .await
            .unwrap()
            .into_inner()
            .tasks;
        assert_eq!(leased.len(), 1, "one task ready in {queue}");
        self.broker
            .complete(r#as(
                WORKER,
                pb::CompleteRequest {
                    task_id: leased[0].task_id.clone(),
                    lease_token: leased[0].lease_token.clone(),
                    result: result.to_vec(),
                    lease_next: None,
                },
            ))
            .await
            .unwrap();
        leased[0].task_id.clone()
    }
}

fn key(queue: &str, k: &str) -> pb::TaskKey {
    pb::TaskKey {
        queue: queue.into(),
        key: k.into(),
    }
}

fn keyed(queue: &str, k: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        key: k.into(),
        ..spec(queue)
    }
}

fn waiting_for(queue: &str, keys: Vec<pb::TaskKey>) -> pb::TaskSpec {
    pb::TaskSpec {
        depends_on_keys: keys,
        ..spec(queue)
    }
}

/// What a producer's GetTask shows of a dependent's dependencies.
fn seen(t: &pb::Task) -> (pb::TaskState, Vec<String>, u32) {
    (state(t), t.depends_on.clone(), t.dependencies_remaining)
}

async fn another_producers_tasks_are_no_dependencies(b: Backend) {
    let Some(app) = app(b).await else {
        return;
    };
    let mut c = clients(&app).await;
    let hers = c.submit(ALICE, keyed("billing", "inv-1")).await.unwrap();

    // By id: her id is refused exactly as a made-up one.
    let by_id = |id: &str| pb::TaskSpec {
        depends_on: vec![id.into()],
        ..spec("bob.down")
    };
    let theirs = c.submit(BOB, by_id(&hers)).await.unwrap_err();
    let made_up = c
        .submit(BOB, by_id("0190aaaa-0000-7000-8000-000000000001"))
        .await
        .unwrap_err();
    assert_eq!(theirs.code(), Code::InvalidArgument, "{theirs:?}");
    assert_eq!(theirs.code(), made_up.code());
    assert_eq!(theirs.message(), made_up.message());
    assert_eq!(
        bad_field(&theirs).as_deref(),
        Some("tasks[0].depends_on[0]")
    );

    // By a key she holds: a wait, as for a key no task holds.
    let on_hers = c
        .submit(BOB, waiting_for("bob.down", vec![key("billing", "inv-1")]))
        .await
        .unwrap();
    let on_none = c
        .submit(
            BOB,
            waiting_for("bob.down", vec![key("billing", "no-such")]),
        )
        .await
        .unwrap();
    let blocked = (pb::TaskState::Blocked, Vec::new(), 1);
    assert_eq!(seen(&c.get(BOB, &on_hers).await), blocked);
    assert_eq!(seen(&c.get(BOB, &on_none).await), blocked);
    // By a key she submits later: never bound to her task.
    let later = c
        .submit(BOB, waiting_for("bob.down", vec![key("billing", "inv-2")]))
        .await
        .unwrap();
    c.submit(ALICE, keyed("billing", "inv-2")).await.unwrap();
    assert_eq!(seen(&c.get(BOB, &later).await), blocked);

    // An admin's dependent (no producer) binds to her task as before.
    let admins = c
        .submit(
            ADMIN,
            waiting_for("ops.down", vec![key("billing", "inv-1")]),
        )
        .await
        .unwrap();
    assert_eq!(c.get(ADMIN, &admins).await.depends_on, vec![hers.clone()]);

    // Her tasks succeed: his stay BLOCKED, and no worker gets her result.
    c.run("billing", b"alice's secret").await;
    c.run("billing", b"alice's secret").await;
    assert_eq!(seen(&c.get(BOB, &on_hers).await), blocked);
    assert_eq!(seen(&c.get(BOB, &later).await), blocked);
    let leased = c
        .broker
        .lease(r#as(WORKER, lease_req("bob.down", 10)))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert!(leased.is_empty(), "{leased:?}");
    let t = c
        .broker
        .lease(r#as(WORKER, lease_req("ops.down", 1)))
        .await
        .unwrap()
        .into_inner()
        .tasks
        .remove(0);
    assert_eq!(
        t.dependency_results.get(&hers).map(Vec::as_slice),
        Some(&b"alice's secret"[..])
    );

    // His own key binds his wait.
    let own = c
        .submit(BOB, waiting_for("bob.down", vec![key("bob.up", "inv-1")]))
        .await
        .unwrap();
    let his = c.submit(BOB, keyed("bob.up", "inv-1")).await.unwrap();
    assert_eq!(c.get(BOB, &own).await.depends_on, vec![his]);
    app.shutdown().await;
}

fn daily(id: &str) -> pb::Schedule {
    pb::Schedule {
        schedule_id: id.into(),
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Every(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            })),
            ..Default::default()
        }),
        task: Some(pb::TaskTemplate {
            queue: "reports".into(),
            key: "daily".into(),
            ..Default::default()
        }),
        overlap: pb::OverlapPolicy::CancelPrevious as i32,
        ..Default::default()
    }
}

async fn another_producers_key_in_a_schedule_shows_nothing_of_its_task(b: Backend) {
    let Some(app) = app(b).await else {
        return;
    };
    let mut c = clients(&app).await;
    let hers = c.submit(ALICE, keyed("reports", "daily")).await.unwrap();
    c.schedules
        .create_schedule(r#as(
            BOB,
            pb::CreateScheduleRequest {
                schedule: Some(daily("bobs")),
            },
        ))
        .await
        .unwrap();
    let run = c
        .schedules
        .trigger_schedule(r#as(
            BOB,
            pb::TriggerScheduleRequest {
                schedule_id: "bobs".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    assert_ne!(run.task_id, hers);
    assert_eq!(run.task_state, pb::TaskState::Unspecified as i32);
    // The scheduler's own fires, with CANCEL_PREVIOUS: still nothing of hers.
    app.advance(std::time::Duration::from_secs(61));
    app.fire_schedules().await;
    app.advance(std::time::Duration::from_secs(61));
    app.fire_schedules().await;
    let runs = c
        .schedules
        .list_schedule_runs(r#as(
            BOB,
            pb::ListScheduleRunsRequest {
                schedule_id: "bobs".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert!(runs.len() >= 2, "{runs:?}");
    for r in &runs {
        assert_ne!(r.task_id, hers, "{runs:?}");
        assert_eq!(r.task_state, pb::TaskState::Unspecified as i32, "{r:?}");
        let e = c
            .admin
            .get_task(r#as(
                BOB,
                pb::GetTaskRequest {
                    task_id: r.task_id.clone(),
                },
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
    }
    // Her task is untouched (not cancelled as a "previous run").
    assert_eq!(state(&c.get(ALICE, &hers).await), pb::TaskState::Ready);

    // An admin's schedule with that key names her task, as before.
    c.schedules
        .create_schedule(r#as(
            ADMIN,
            pb::CreateScheduleRequest {
                schedule: Some(pb::Schedule {
                    overlap: pb::OverlapPolicy::Allow as i32,
                    ..daily("ops")
                }),
            },
        ))
        .await
        .unwrap();
    let run = c
        .schedules
        .trigger_schedule(r#as(
            ADMIN,
            pb::TriggerScheduleRequest {
                schedule_id: "ops".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    assert_eq!(run.task_id, hers);
    app.shutdown().await;
}

async fn bulk_operations_are_refused_to_producers(b: Backend) {
    let Some(app) = app(b).await else {
        return;
    };
    let mut c = clients(&app).await;
    let hers = c.submit(ALICE, keyed("billing", "inv-1")).await.unwrap();
    let filter = || pb::TaskSelector {
        queue: "billing".into(),
        key_prefix: "inv".into(),
        ..Default::default()
    };
    let e = c
        .admin
        .cancel_tasks(r#as(
            BOB,
            pb::CancelTasksRequest {
                filter: Some(filter()),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = c
        .admin
        .requeue_tasks(r#as(
            BOB,
            pb::RequeueTasksRequest {
                filter: Some(filter()),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(state(&c.get(ALICE, &hers).await), pb::TaskState::Ready);
    app.shutdown().await;
}

async fn one_key_holds_a_bounded_number_of_waits(b: Backend) {
    let Some(app) = app(b).await else {
        return;
    };
    let mut c = clients(&app).await;
    let cap = taskbroker_server::store::MAX_WAITS_PER_KEY as usize;
    let k = key("up", "popular");
    let many: Vec<pb::TaskSpec> = (0..cap)
        .map(|_| waiting_for("down", vec![k.clone()]))
        .collect();
    c.broker
        .submit(r#as(ALICE, pb::SubmitRequest { tasks: many }))
        .await
        .unwrap();
    // One more: refused naming the key where the request had it.
    let other = key("up", "other");
    let e = c
        .submit(
            ALICE,
            waiting_for("down.more", vec![other.clone(), other, k.clone()]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert_eq!(
        bad_field(&e).as_deref(),
        Some("tasks[0].depends_on_keys[2]")
    );
    let stored = c
        .admin
        .list_tasks(r#as(
            ADMIN,
            pb::ListTasksRequest {
                queue: "down.more".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert!(stored.is_empty(), "a refused Submit stores nothing");
    // Another producer's waits count apart: his own cap is untouched.
    c.submit(BOB, waiting_for("down.more", vec![k]))
        .await
        .unwrap();
    app.shutdown().await;
}

all_backends!(
    another_producers_tasks_are_no_dependencies,
    another_producers_key_in_a_schedule_shows_nothing_of_its_task,
    bulk_operations_are_refused_to_producers,
    one_key_holds_a_bounded_number_of_waits,
);
