//! Validation, preview, windows, pause, resume, trigger and max runs.

use super::*;

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

all_backends!(
    bad_schedules_are_invalid_argument_naming_the_field,
    preview_lists_fire_times_and_creates_nothing,
    the_window_bounds_the_fires_and_its_end_completes_the_schedule,
    pause_stops_fires_resume_skips_what_passed_and_trigger_fires_now,
    max_runs_completes_the_schedule_by_itself
);
