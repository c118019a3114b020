//! Fire times: every, once and cron schedules, across daylight-saving changes.

use super::*;

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

all_backends!(
    every_schedule_makes_tasks_that_carry_its_id_and_fire_time,
    once_and_cron_schedules_fire_on_their_times,
    a_berlin_0230_job_fires_once_on_both_dst_days,
    a_quarter_hourly_new_york_job_fires_what_the_preview_shows_when_clocks_go_back
);
