//! Overlap and misfire policies, racing brokers, and producers' own schedules.

use super::*;

async fn every_overlap_policy_does_what_it_says(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let t0 = app.clock.now_utc();
    let allow = overlap(&app, "allow", pb::OverlapPolicy::Allow).await;
    assert_eq!(allow.len(), 2);
    assert!(allow.iter().all(|t| state(t) == pb::TaskState::Ready));

    let skip = overlap(&app, "skip", pb::OverlapPolicy::Skip).await;
    assert_eq!(skip.len(), 1, "not fired while the previous is unfinished");
    finish(&app, "skip").await;
    app.advance(Duration::from_secs(10));
    app.fire_schedules().await;
    assert_eq!(
        tasks_of(&app, "skip").await.len(),
        2,
        "fires again once finished"
    );

    let cancel = overlap(&app, "cancel", pb::OverlapPolicy::CancelPrevious).await;
    assert_eq!(cancel.len(), 2);
    assert_eq!(state(&cancel[0]), pb::TaskState::Cancelled);
    assert_eq!(state(&cancel[1]), pb::TaskState::Ready);

    let buffer = overlap(&app, "buffer", pb::OverlapPolicy::BufferOne).await;
    assert_eq!(buffer.len(), 1, "the overlapping fire time waits");
    finish(&app, "buffer").await;
    app.advance(Duration::from_secs(1));
    app.fire_schedules().await;
    let buffer = tasks_of(&app, "buffer").await;
    assert_eq!(buffer.len(), 2, "and fires once the previous finished");
    let second = from_ts(&buffer[1].fire_time);
    assert!(second > t0, "the buffered fire time keeps its time");
}

/// Every 300 s; the broker was away for 22 minutes (the latest missed fire time
/// is 2 minutes late).
async fn after_downtime(app: &TestApp, id: &str, misfire: pb::MisfirePolicy) -> Vec<DateTime<Utc>> {
    let mut c = app.schedules().await;
    create(
        &mut c,
        pb::Schedule {
            misfire: misfire as i32,
            catchup_window: secs(600),
            ..every(id, 300, id)
        },
    )
    .await;
    fire_times(&tasks_of(app, id).await)
}

async fn every_misfire_policy_decides_what_runs_after_downtime(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let t0 = app.clock.now_utc();
    for (id, policy) in [
        ("skip", pb::MisfirePolicy::Skip),
        ("once", pb::MisfirePolicy::FireOnce),
        ("catchup", pb::MisfirePolicy::CatchUp),
    ] {
        after_downtime(&app, id, policy).await;
    }
    app.fire_schedules().await;
    app.advance(Duration::from_secs(22 * 60));
    app.fire_schedules().await;
    let at = |s| secs_after(t0, s);
    assert_eq!(after_times(&app, "skip").await, [at(0)]);
    assert_eq!(after_times(&app, "once").await, [at(0), at(1200)]);
    assert_eq!(
        after_times(&app, "catchup").await,
        [at(0), at(900), at(1200)]
    );
    let mut c = app.schedules().await;
    assert_eq!(
        from_ts(&get_schedule(&mut c, "skip").await.next_fire_at),
        at(1500)
    );
}

async fn after_times(app: &TestApp, id: &str) -> Vec<DateTime<Utc>> {
    fire_times(&tasks_of(app, id).await)
}

/// Two brokers on one database race scheduler passes at the same instants: every
/// fire time makes exactly one task.
async fn two_brokers_racing_fire_each_fire_time_once(b: Backend) {
    let Some(a) = spawn_app(b).await else { return };
    let second = spawn_on(a.db.clone(), Options::default()).await;
    let mut c = a.schedules().await;
    const N: usize = 40;
    for i in 0..N {
        create(&mut c, every(&format!("r{i:02}"), 1, "race")).await;
    }
    let t0 = a.clock.now_utc();
    let (x, y) = (
        a.app.as_ref().unwrap().broker.clone(),
        second.app.as_ref().unwrap().broker.clone(),
    );
    use taskbroker_server::maintenance::Scheduler;
    let mut fired = 0;
    for step in 0..5 {
        let now = secs_after(t0, step);
        let sx = Scheduler::new(x.clone(), Duration::from_secs(1));
        let sy = Scheduler::new(y.clone(), Duration::from_secs(1));
        let (px, py) = tokio::join!(sx.run_once(now), sy.run_once(now));
        fired += px.unwrap().fired + py.unwrap().fired;
    }
    for i in 0..N {
        let id = format!("r{i:02}");
        let times = fire_times(&tasks_of(&a, &id).await);
        let want: Vec<_> = (0..5).map(|s| secs_after(t0, s)).collect();
        assert_eq!(times, want, "{id}");
        assert_eq!(get_schedule(&mut c, &id).await.runs, 5);
    }
    assert_eq!(fired, (N * 5) as u64);
    second.shutdown().await;
}

async fn producers_manage_only_their_own_schedules(b: Backend) {
    use taskbroker_server::api::auth::{Role, TokenEntry};
    let tok = |role, token: &str, name: &str| TokenEntry {
        role,
        token: token.into(),
        name: Some(name.into()),
        workers: None,
        queues: None,
    };
    let opts = Options {
        auth: vec![
            tok(Role::Producer, "alice-token", "alice"),
            tok(Role::Producer, "bob-token", "bob"),
            tok(Role::Worker, "worker-token", "w"),
            tok(Role::Admin, "admin-token", "ops"),
        ],
        ..Options::default()
    };
    let Some(app) = spawn_app_with(b, opts).await else {
        return;
    };
    let as_ = |t: &str| {
        let v: tonic::metadata::MetadataValue<_> = format!("Bearer {t}").parse().unwrap();
        move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", v.clone());
            Ok(r)
        }
    };
    let channel = Channel::from_shared(app.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut alice = ScheduleServiceClient::with_interceptor(channel.clone(), as_("alice-token"));
    let mut bob = ScheduleServiceClient::with_interceptor(channel.clone(), as_("bob-token"));
    let mut worker = ScheduleServiceClient::with_interceptor(channel.clone(), as_("worker-token"));
    let mut admin = ScheduleServiceClient::with_interceptor(channel.clone(), as_("admin-token"));
    alice
        .create_schedule(pb::CreateScheduleRequest {
            schedule: Some(every("alices", 60, "a")),
        })
        .await
        .unwrap();
    let get = |id: &str| pb::GetScheduleRequest {
        schedule_id: id.into(),
    };
    assert_eq!(
        bob.get_schedule(get("alices")).await.unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        bob.delete_schedule(pb::DeleteScheduleRequest {
            schedule_id: "alices".into()
        })
        .await
        .unwrap_err()
        .code(),
        Code::NotFound
    );
    let bobs = bob
        .list_schedules(pb::ListSchedulesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(bobs.schedules.is_empty());
    assert_eq!(
        worker.get_schedule(get("alices")).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    admin.get_schedule(get("alices")).await.unwrap();
    alice.get_schedule(get("alices")).await.unwrap();
    // Alice reads the tasks her schedule made.
    app.fire_schedules().await;
    let mut ops = pb::admin_service_client::AdminServiceClient::with_interceptor(
        channel.clone(),
        as_("admin-token"),
    );
    let task_id = ops
        .list_tasks(pb::ListTasksRequest {
            schedule_id: "alices".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks[0]
        .id
        .clone();
    let mut alice_admin = pb::admin_service_client::AdminServiceClient::with_interceptor(
        channel.clone(),
        as_("alice-token"),
    );
    alice_admin
        .get_task(pb::GetTaskRequest { task_id })
        .await
        .unwrap();
}

all_backends!(
    every_overlap_policy_does_what_it_says,
    every_misfire_policy_decides_what_runs_after_downtime,
    two_brokers_racing_fire_each_fire_time_once,
    producers_manage_only_their_own_schedules
);
