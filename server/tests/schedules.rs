//! ScheduleService end to end over real gRPC, on both databases, with the manual
//! clock: tests move time and run scheduler passes (`run_once`) themselves.

mod common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use taskbroker_client::pb;
use taskbroker_client::pb::schedule_service_client::ScheduleServiceClient;
use tonic::Code;
use tonic::transport::Channel;

type Schedules = ScheduleServiceClient<Channel>;

fn every(id: &str, secs: u64, queue: &str) -> pb::Schedule {
    pb::Schedule {
        schedule_id: id.into(),
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Every(prost_types::Duration {
                seconds: secs as i64,
                nanos: 0,
            })),
            ..Default::default()
        }),
        task: Some(pb::TaskTemplate {
            queue: queue.into(),
            payload: b"tick".to_vec(),
            ..Default::default()
        }),
        overlap: pb::OverlapPolicy::Allow as i32,
        ..Default::default()
    }
}

fn cron(id: &str, line: &str, tz: &str) -> pb::Schedule {
    pb::Schedule {
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::Cron(line.into())),
            timezone: tz.into(),
            anchor: None,
        }),
        ..every(id, 1, "cron")
    }
}

async fn create(c: &mut Schedules, s: pb::Schedule) -> pb::Schedule {
    c.create_schedule(pb::CreateScheduleRequest { schedule: Some(s) })
        .await
        .expect("create schedule")
        .into_inner()
        .schedule
        .unwrap()
}

async fn get_schedule(c: &mut Schedules, id: &str) -> pb::Schedule {
    c.get_schedule(pb::GetScheduleRequest {
        schedule_id: id.into(),
    })
    .await
    .expect("get schedule")
    .into_inner()
    .schedule
    .unwrap()
}

async fn tasks_of(app: &TestApp, id: &str) -> Vec<pb::Task> {
    let mut tasks = app
        .admin()
        .await
        .list_tasks(pb::ListTasksRequest {
            schedule_id: id.into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    tasks.sort_by_key(|t| from_ts(&t.fire_time));
    tasks
}

fn fire_times(tasks: &[pb::Task]) -> Vec<DateTime<Utc>> {
    tasks.iter().map(|t| from_ts(&t.fire_time)).collect()
}

fn secs_after(t: DateTime<Utc>, s: i64) -> DateTime<Utc> {
    t + chrono::Duration::seconds(s)
}

async fn runs(c: &mut Schedules, id: &str) -> Vec<pb::ScheduleRun> {
    c.list_schedule_runs(pb::ListScheduleRunsRequest {
        schedule_id: id.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .runs
}

async fn finish(app: &TestApp, queue: &str) {
    let mut b = app.broker().await;
    let t = lease_one(&mut b, queue).await;
    b.complete(pb::CompleteRequest {
        task_id: t.task_id,
        lease_token: t.lease_token,
        result: vec![],
        lease_next: None,
    })
    .await
    .unwrap();
}

async fn every_schedule_makes_tasks_that_carry_its_id_and_fire_time(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let t0 = app.clock.now_utc();
    let s = create(&mut c, every("tick", 60, "ticks")).await;
    assert_eq!(s.state, pb::ScheduleState::Active as i32);
    assert_eq!(
        from_ts(&s.next_fire_at),
        t0,
        "an every schedule fires at its anchor"
    );
    assert_eq!(app.fire_schedules().await.fired, 1);
    assert_eq!(
        app.fire_schedules().await.fired,
        0,
        "a fire time fires once"
    );
    app.advance(Duration::from_secs(60));
    assert_eq!(app.fire_schedules().await.fired, 1);

    let tasks = tasks_of(&app, "tick").await;
    assert_eq!(fire_times(&tasks), [t0, secs_after(t0, 60)]);
    assert!(
        tasks
            .iter()
            .all(|t| t.schedule_id == "tick" && t.queue == "ticks")
    );
    let mut broker = app.broker().await;
    let leased = lease_one(&mut broker, "ticks").await;
    assert_eq!(leased.metadata["taskbroker.schedule_id"], "tick");
    assert!(leased.metadata.contains_key("taskbroker.fire_time"));
    assert_eq!(leased.payload, b"tick");

    let s = get_schedule(&mut c, "tick").await;
    assert_eq!(s.runs, 2);
    assert_eq!(from_ts(&s.last_fire_at), secs_after(t0, 60));
    assert_eq!(from_ts(&s.next_fire_at), secs_after(t0, 120));
    let history = runs(&mut c, "tick").await;
    assert_eq!(history.len(), 2);
    assert_eq!(
        from_ts(&history[0].fire_time),
        secs_after(t0, 60),
        "newest first"
    );
    let states: Vec<i32> = history.iter().map(|r| r.task_state).collect();
    assert!(states.contains(&(pb::TaskState::Leased as i32)));
    assert!(states.contains(&(pb::TaskState::Ready as i32)));

    c.delete_schedule(pb::DeleteScheduleRequest {
        schedule_id: "tick".into(),
    })
    .await
    .unwrap();
    let gone = c
        .get_schedule(pb::GetScheduleRequest {
            schedule_id: "tick".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    app.advance(Duration::from_secs(60));
    assert_eq!(app.fire_schedules().await.fired, 0);
    assert_eq!(tasks_of(&app, "tick").await.len(), 2, "tasks made stay");
}

async fn once_and_cron_schedules_fire_on_their_times(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    // One second past a minute boundary: the next boundary comes 59 s on.
    let since_minute = app.clock.now_utc().timestamp_millis().rem_euclid(60_000) as u64;
    app.advance(Duration::from_millis((61_000 - since_minute) % 60_000));
    let t0 = app.clock.now_utc();
    let at = secs_after(t0, 30);
    let once = pb::Schedule {
        spec: Some(pb::ScheduleSpec {
            kind: Some(pb::schedule_spec::Kind::OnceAt(ts(at).unwrap())),
            ..Default::default()
        }),
        ..every("once", 1, "once")
    };
    create(&mut c, once).await;
    create(&mut c, cron("minutely", "0 * * * * *", "")).await;
    assert_eq!(app.fire_schedules().await.fired, 0);
    app.advance(Duration::from_secs(90));
    let pass = app.fire_schedules().await;
    assert_eq!(pass.fired, 2, "the one-off and one minute boundary");
    let s = get_schedule(&mut c, "once").await;
    assert_eq!(s.state, pb::ScheduleState::Completed as i32);
    assert_eq!(s.state_reason, "the one-off fire time passed");
    assert_eq!(fire_times(&tasks_of(&app, "once").await), [at]);
    let minute = fire_times(&tasks_of(&app, "minutely").await);
    assert_eq!(minute.len(), 1);
    assert_eq!(minute[0].timestamp() % 60, 0);
}

/// A 02:30 Europe/Berlin job across both DST changes of 2027, with the clock moved there.
async fn a_berlin_0230_job_fires_once_on_both_dst_days(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let utc = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
    let move_to = |t: DateTime<Utc>| {
        let now = app.clock.now_utc();
        app.advance((t - now).to_std().expect("the clock only moves forward"));
    };
    move_to(utc("2027-03-27T12:00:00Z"));
    create(&mut c, cron("berlin", "30 2 * * *", "Europe/Berlin")).await;
    // Spring forward (2027-03-28): 02:30 does not exist; it runs at 03:00 CEST.
    move_to(utc("2027-03-28T00:59:59Z"));
    assert_eq!(app.fire_schedules().await.fired, 0);
    move_to(utc("2027-03-28T01:00:00Z"));
    assert_eq!(app.fire_schedules().await.fired, 1);
    // Fall back (2027-10-31): 02:30 happens twice; it runs at the first only.
    move_to(utc("2027-10-30T12:00:00Z"));
    c.update_schedule(pb::UpdateScheduleRequest {
        schedule: Some(cron("berlin", "30 2 * * *", "Europe/Berlin")),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["spec".into()],
        }),
    })
    .await
    .unwrap();
    move_to(utc("2027-10-31T00:30:00Z"));
    assert_eq!(app.fire_schedules().await.fired, 1);
    move_to(utc("2027-10-31T01:30:00Z"));
    assert_eq!(app.fire_schedules().await.fired, 0);
    let times = fire_times(&tasks_of(&app, "berlin").await);
    assert_eq!(
        times,
        [utc("2027-03-28T01:00:00Z"), utc("2027-10-31T00:30:00Z")]
    );
    let s = get_schedule(&mut c, "berlin").await;
    assert_eq!(from_ts(&s.next_fire_at), utc("2027-11-01T01:30:00Z"));
}

/// Every 15 minutes in New York across the fall-back night of 2027-11-07 (01:00-01:59
/// happens twice): PreviewSchedule lists both passes, and the scheduler, with the
/// clock moved to each of them, fires exactly those times.
async fn a_quarter_hourly_new_york_job_fires_what_the_preview_shows_when_clocks_go_back(
    b: Backend,
) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let utc = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
    let move_to = |t: DateTime<Utc>| {
        let now = app.clock.now_utc();
        app.advance((t - now).to_std().expect("the clock only moves forward"));
    };
    move_to(utc("2027-11-07T04:50:00Z"));
    let spec = cron("ny", "*/15 * * * *", "America/New_York");
    let preview = c
        .preview_schedule(pb::PreviewScheduleRequest {
            spec: spec.spec.clone(),
            count: 9,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let shown: Vec<_> = preview
        .fire_times
        .iter()
        .map(|t| from_ts(&Some(*t)))
        .collect();
    let expected: Vec<_> = [
        "2027-11-07T05:00:00Z", // 01:00 EDT
        "2027-11-07T05:15:00Z",
        "2027-11-07T05:30:00Z",
        "2027-11-07T05:45:00Z",
        "2027-11-07T06:00:00Z", // 01:00 EST
        "2027-11-07T06:15:00Z",
        "2027-11-07T06:30:00Z",
        "2027-11-07T06:45:00Z",
        "2027-11-07T07:00:00Z", // 02:00 EST
    ]
    .into_iter()
    .map(utc)
    .collect();
    assert_eq!(shown, expected);
    create(&mut c, spec).await;
    for t in &shown {
        move_to(*t);
        assert_eq!(app.fire_schedules().await.fired, 1, "at {t}");
    }
    assert_eq!(fire_times(&tasks_of(&app, "ny").await), shown);
    let s = get_schedule(&mut c, "ny").await;
    assert_eq!(from_ts(&s.next_fire_at), utc("2027-11-07T07:15:00Z"));
}

async fn bad_schedules_are_invalid_argument_naming_the_field(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let t0 = app.clock.now_utc();
    let c0 = c.clone();
    let reject = |s: pb::Schedule| {
        let mut c = c0.clone();
        async move {
            c.create_schedule(pb::CreateScheduleRequest { schedule: Some(s) })
                .await
                .unwrap_err()
        }
    };
    let e = reject(cron("x", "0 25 * * *", "")).await;
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.spec.cron"));
    assert!(
        e.message().contains("not a valid cron line"),
        "{}",
        e.message()
    );
    let e = reject(cron("x", "0 3 * *", "")).await;
    assert!(e.message().contains("5 or 6 fields"), "{}", e.message());
    let e = reject(cron("x", "0 3 * * *", "Europe/Atlantis")).await;
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.spec.timezone"));
    let e = reject(pb::Schedule {
        start_time: ts(secs_after(t0, 10)),
        end_time: ts(t0),
        ..every("x", 1, "q")
    })
    .await;
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.end_time"));
    let e = reject(every("x", 0, "q")).await;
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.spec.every"));
    let e = reject(every("has space", 1, "q")).await;
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.schedule_id"));
    let e = reject(every("x", 1, "")).await;
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.task.queue"));
    let e = reject(pb::Schedule {
        spec: None,
        ..every("x", 1, "q")
    })
    .await;
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.spec"));
    let e = reject(pb::Schedule {
        overlap: 42,
        ..every("x", 1, "q")
    })
    .await;
    assert_eq!(bad_field(&e).as_deref(), Some("schedule.overlap"));
    create(&mut c, every("x", 1, "q")).await;
    assert_eq!(reject(every("x", 1, "q")).await.code(), Code::AlreadyExists);
    let list = c
        .list_schedules(pb::ListSchedulesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .schedules;
    assert_eq!(list.len(), 1, "rejected schedules change nothing");
}

async fn preview_lists_fire_times_and_creates_nothing(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let utc = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
    let r = c
        .preview_schedule(pb::PreviewScheduleRequest {
            spec: cron("p", "*/15 9-17 * * MON-FRI", "America/New_York").spec,
            after: ts(utc("2030-01-04T21:50:00Z")), // Friday 16:50 in New York
            count: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let times: Vec<_> = r.fire_times.iter().map(|t| from_ts(&Some(*t))).collect();
    assert_eq!(
        times,
        [
            utc("2030-01-04T22:00:00Z"), // Friday 17:00 (hour 17 is in 9-17)
            utc("2030-01-04T22:15:00Z"),
            utc("2030-01-04T22:30:00Z"),
            utc("2030-01-04T22:45:00Z"),
            utc("2030-01-07T14:00:00Z"), // Monday 09:00
        ]
    );
    let e = c
        .preview_schedule(pb::PreviewScheduleRequest {
            spec: cron("p", "61 * * * *", "").spec,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_field(&e).as_deref(), Some("spec.cron"));
    let e = c
        .preview_schedule(pb::PreviewScheduleRequest {
            spec: cron("p", "* * * * *", "").spec,
            count: 5000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_field(&e).as_deref(), Some("count"));
    let list = c
        .list_schedules(pb::ListSchedulesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(list.schedules.is_empty());
}

async fn the_window_bounds_the_fires_and_its_end_completes_the_schedule(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let t0 = app.clock.now_utc();
    create(
        &mut c,
        pb::Schedule {
            start_time: ts(secs_after(t0, 10)),
            end_time: ts(secs_after(t0, 30)),
            ..every("w", 10, "w")
        },
    )
    .await;
    for _ in 0..5 {
        app.fire_schedules().await;
        app.advance(Duration::from_secs(10));
    }
    let times = fire_times(&tasks_of(&app, "w").await);
    assert_eq!(
        times,
        [secs_after(t0, 10), secs_after(t0, 20), secs_after(t0, 30)]
    );
    let s = get_schedule(&mut c, "w").await;
    assert_eq!(s.state, pb::ScheduleState::Completed as i32);
    assert_eq!(s.state_reason, "end_time passed");
    assert!(s.next_fire_at.is_none());
}

async fn pause_stops_fires_resume_skips_what_passed_and_trigger_fires_now(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    let t0 = app.clock.now_utc();
    create(&mut c, every("p", 10, "p")).await;
    assert_eq!(app.fire_schedules().await.fired, 1);
    let s = c
        .pause_schedule(pb::PauseScheduleRequest {
            schedule_id: "p".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .schedule
        .unwrap();
    assert_eq!(s.state, pb::ScheduleState::Paused as i32);
    assert!(s.next_fire_at.is_none());
    app.advance(Duration::from_secs(35));
    assert_eq!(app.fire_schedules().await.fired, 0);
    // Trigger fires now, outside the spec, even while paused.
    let run = c
        .trigger_schedule(pb::TriggerScheduleRequest {
            schedule_id: "p".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    assert!(run.triggered);
    assert_eq!(from_ts(&run.fire_time), secs_after(t0, 35));
    let s = c
        .resume_schedule(pb::ResumeScheduleRequest {
            schedule_id: "p".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .schedule
        .unwrap();
    assert_eq!(s.state, pb::ScheduleState::Active as i32);
    assert_eq!(from_ts(&s.next_fire_at), secs_after(t0, 40));
    app.advance(Duration::from_secs(5));
    assert_eq!(app.fire_schedules().await.fired, 1);
    let times = fire_times(&tasks_of(&app, "p").await);
    assert_eq!(
        times,
        [t0, secs_after(t0, 35), secs_after(t0, 40)],
        "10, 20 and 30 passed while paused"
    );
    let history = runs(&mut c, "p").await;
    assert_eq!(history.iter().filter(|r| r.triggered).count(), 1);
    assert_eq!(get_schedule(&mut c, "p").await.runs, 3);
}

async fn max_runs_completes_the_schedule_by_itself(b: Backend) {
    let Some(app) = spawn_app(b).await else {
        return;
    };
    let mut c = app.schedules().await;
    create(
        &mut c,
        pb::Schedule {
            max_runs: 2,
            ..every("m", 10, "m")
        },
    )
    .await;
    for _ in 0..4 {
        app.fire_schedules().await;
        app.advance(Duration::from_secs(10));
    }
    assert_eq!(tasks_of(&app, "m").await.len(), 2);
    let s = get_schedule(&mut c, "m").await;
    assert_eq!(s.state, pb::ScheduleState::Completed as i32);
    assert_eq!(s.state_reason, "max_runs reached");
    // Raising max_runs revives it.
    let s = c
        .update_schedule(pb::UpdateScheduleRequest {
            schedule: Some(pb::Schedule {
                max_runs: 3,
                ..every("m", 10, "m")
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["max_runs".into()],
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .schedule
        .unwrap();
    assert_eq!(s.state, pb::ScheduleState::Active as i32);
    assert_eq!(app.fire_schedules().await.fired, 1);
    assert_eq!(
        get_schedule(&mut c, "m").await.state,
        pb::ScheduleState::Completed as i32
    );
}

async fn overlap(app: &TestApp, id: &str, policy: pb::OverlapPolicy) -> Vec<pb::Task> {
    let mut c = app.schedules().await;
    create(
        &mut c,
        pb::Schedule {
            overlap: policy as i32,
            ..every(id, 10, id)
        },
    )
    .await;
    app.fire_schedules().await; // the first run, left unfinished
    app.advance(Duration::from_secs(10));
    app.fire_schedules().await; // the second fire time overlaps it
    tasks_of(app, id).await
}

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
    every_schedule_makes_tasks_that_carry_its_id_and_fire_time,
    once_and_cron_schedules_fire_on_their_times,
    a_berlin_0230_job_fires_once_on_both_dst_days,
    a_quarter_hourly_new_york_job_fires_what_the_preview_shows_when_clocks_go_back,
    bad_schedules_are_invalid_argument_naming_the_field,
    preview_lists_fire_times_and_creates_nothing,
    the_window_bounds_the_fires_and_its_end_completes_the_schedule,
    pause_stops_fires_resume_skips_what_passed_and_trigger_fires_now,
    max_runs_completes_the_schedule_by_itself,
    every_overlap_policy_does_what_it_says,
    every_misfire_policy_decides_what_runs_after_downtime,
    two_brokers_racing_fire_each_fire_time_once,
    producers_manage_only_their_own_schedules,
);
