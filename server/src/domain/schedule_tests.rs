//! Unit tests of the calendar and of one scheduler pass (no I/O: `now` is given).

use super::*;

pub(super) fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

pub(super) fn cron(expr: &str, tz: &str) -> Calendar {
    let spec = Spec::Cron {
        expr: expr.into(),
        timezone: tz.into(),
    };
    Calendar::new(&spec, None, None).unwrap()
}

fn every(secs: u64, anchor: &str) -> Calendar {
    let spec = Spec::Every {
        every: Duration::from_secs(secs),
        anchor: utc(anchor),
    };
    Calendar::new(&spec, None, None).unwrap()
}

pub(super) fn rules(overlap: Overlap, misfire: Misfire) -> Rules {
    Rules {
        overlap,
        misfire,
        catchup_window: DEFAULT_CATCHUP_WINDOW,
        max_runs: 0,
        max_fires: MAX_FIRES_PER_PASS,
    }
}

fn at(next: &str) -> Cursor {
    Cursor {
        next_spec_at: Some(utc(next)),
        ..Cursor::default()
    }
}

#[test]
fn cron_fires_on_its_minutes_in_utc_by_default() {
    let c = cron("*/15 * * * *", "");
    let got = c.preview(utc("2026-01-05T09:07:00Z"), 3);
    assert_eq!(
        got,
        vec![
            utc("2026-01-05T09:15:00Z"),
            utc("2026-01-05T09:30:00Z"),
            utc("2026-01-05T09:45:00Z")
        ]
    );
}

#[test]
fn six_field_cron_has_seconds_first() {
    let c = cron("*/20 * * * * *", "");
    let got = c.preview(utc("2026-01-05T09:00:00Z"), 3);
    assert_eq!(got[0], utc("2026-01-05T09:00:20Z"));
    assert_eq!(got[2], utc("2026-01-05T09:01:00Z"));
}

#[test]
fn weekday_cron_in_new_york_skips_the_weekend() {
    let c = cron("0 9 * * MON-FRI", "America/New_York");
    // Friday 2026-01-09 10:00 New York -> next is Monday 09:00 EST (14:00 UTC).
    let got = c.preview(utc("2026-01-09T15:00:00Z"), 1);
    assert_eq!(got, vec![utc("2026-01-12T14:00:00Z")]);
}

#[test]
fn bad_cron_lines_and_zones_name_the_field_and_reason() {
    let bad = |expr: &str, tz: &str| {
        let spec = Spec::Cron {
            expr: expr.into(),
            timezone: tz.into(),
        };
        Calendar::new(&spec, None, None).err().unwrap()
    };
    let e = bad("0 3 * *", "");
    assert_eq!(e.field, "spec.cron");
    assert!(e.message.contains("5 or 6 fields"), "{}", e.message);
    let e = bad("0 25 * * *", "");
    assert_eq!(e.field, "spec.cron");
    assert!(e.message.contains("not a valid cron line"), "{}", e.message);
    let e = bad("0 3 * * * * 2026", "");
    assert_eq!(e.field, "spec.cron");
    let e = bad("0 3 * * *", "Mars/Olympus");
    assert_eq!(e.field, "spec.timezone");
    assert!(e.message.contains("Mars/Olympus"));
}

#[test]
fn a_0230_berlin_job_runs_once_on_the_spring_forward_day_when_the_gap_ends() {
    let c = cron("30 2 * * *", "Europe/Berlin");
    // 2026-03-29: clocks jump from 02:00 CET to 03:00 CEST; 02:30 does not exist.
    let got = c.preview(utc("2026-03-27T12:00:00Z"), 4);
    assert_eq!(
        got,
        vec![
            utc("2026-03-28T01:30:00Z"), // 02:30 CET
            utc("2026-03-29T01:00:00Z"), // 03:00 CEST, the end of the gap
            utc("2026-03-30T00:30:00Z"), // 02:30 CEST
            utc("2026-03-31T00:30:00Z"),
        ]
    );
}

#[test]
fn a_0230_berlin_job_runs_once_on_the_fall_back_day_at_the_first_0230() {
    let c = cron("30 2 * * *", "Europe/Berlin");
    // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    let got = c.preview(utc("2026-10-23T12:00:00Z"), 4);
    assert_eq!(
        got,
        vec![
            utc("2026-10-24T00:30:00Z"), // 02:30 CEST
            utc("2026-10-25T00:30:00Z"), // the first 02:30 (CEST) only
            utc("2026-10-26T01:30:00Z"), // 02:30 CET
            utc("2026-10-27T01:30:00Z"),
        ]
    );
}

#[test]
fn every_fires_on_its_anchor_phase() {
    let c = every(60, "2026-01-01T00:00:10Z");
    assert_eq!(
        c.preview(utc("2026-01-05T09:00:00Z"), 2),
        vec![utc("2026-01-05T09:00:10Z"), utc("2026-01-05T09:01:10Z")]
    );
    // An anchor in the future is a phase too.
    let c = every(3600, "2030-01-01T00:30:00Z");
    assert_eq!(
        c.first_at_or_after(utc("2026-01-05T09:00:00Z")),
        Some(utc("2026-01-05T09:30:00Z"))
    );
    assert_eq!(
        c.last_at_or_before(utc("2026-01-05T09:00:00Z")),
        Some(utc("2026-01-05T08:30:00Z"))
    );
}

#[test]
fn every_must_be_at_least_a_second() {
    let spec = Spec::Every {
        every: Duration::from_millis(500),
        anchor: utc("2026-01-01T00:00:00Z"),
    };
    assert_eq!(
        Calendar::new(&spec, None, None).err().unwrap().field,
        "spec.every"
    );
}

#[test]
fn once_fires_once_even_when_created_late() {
    let spec = Spec::Once {
        at: utc("2026-01-05T09:00:00Z"),
    };
    let c = Calendar::new(&spec, None, None).unwrap();
    assert_eq!(
        first_fire(&c, utc("2026-01-05T10:00:00Z")),
        Some(utc("2026-01-05T09:00:00Z"))
    );
    assert_eq!(c.next_after(utc("2026-01-05T09:00:00Z")), None);
    let p = plan(
        &c,
        &rules(Overlap::Allow, Misfire::FireOnce),
        &at("2026-01-05T09:00:00Z"),
        false,
        utc("2026-01-05T09:00:00Z"),
    );
    assert_eq!(p.fires, vec![utc("2026-01-05T09:00:00Z")]);
    assert_eq!(p.completed, Some("the one-off fire time passed"));
    assert_eq!(p.next_fire_at, None);
}

#[test]
fn nothing_fires_outside_the_window() {
    let spec = Spec::Every {
        every: Duration::from_secs(60),
        anchor: utc("2026-01-01T00:00:00Z"),
    };
    let c = Calendar::new(
        &spec,
        Some(utc("2026-01-05T09:00:30Z")),
        Some(utc("2026-01-05T09:03:00Z")),
    )
    .unwrap();
    assert_eq!(
        c.preview(utc("2026-01-05T08:00:00Z"), 10),
        vec![
            utc("2026-01-05T09:01:00Z"),
            utc("2026-01-05T09:02:00Z"),
            utc("2026-01-05T09:03:00Z")
        ]
    );
    // The last fire completes the schedule by itself.
    let p = plan(
        &c,
        &rules(Overlap::Allow, Misfire::FireOnce),
        &at("2026-01-05T09:03:00Z"),
        false,
        utc("2026-01-05T09:03:00Z"),
    );
    assert_eq!(p.fires.len(), 1);
    assert_eq!(p.completed, Some("end_time passed"));
    let e = Calendar::new(
        &spec,
        Some(utc("2026-01-05T09:00:00Z")),
        Some(utc("2026-01-05T08:00:00Z")),
    )
    .err()
    .unwrap();
    assert_eq!(e.field, "end_time");
}

#[test]
fn an_on_time_fire_fires_under_every_policy_and_moves_the_cursor() {
    let c = every(60, "2026-01-01T00:00:00Z");
    for misfire in [Misfire::Skip, Misfire::FireOnce, Misfire::CatchUp] {
        for overlap in [
            Overlap::Allow,
            Overlap::Skip,
            Overlap::BufferOne,
            Overlap::CancelPrevious,
        ] {
            let p = plan(
                &c,
                &rules(overlap, misfire),
                &at("2026-01-05T09:00:00Z"),
                false,
                utc("2026-01-05T09:00:00.400Z"),
            );
            assert_eq!(p.fires, vec![utc("2026-01-05T09:00:00Z")]);
            assert_eq!(p.next_spec_at, Some(utc("2026-01-05T09:01:00Z")));
            assert_eq!(p.next_fire_at, p.next_spec_at);
            assert!(!p.cancel_previous);
            assert_eq!(p.completed, None);
        }
    }
}

#[test]
fn nothing_is_due_before_the_next_fire_time() {
    let c = every(60, "2026-01-01T00:00:00Z");
    let p = plan(
        &c,
        &rules(Overlap::Allow, Misfire::CatchUp),
        &at("2026-01-05T09:01:00Z"),
        false,
        utc("2026-01-05T09:00:59Z"),
    );
    assert!(p.fires.is_empty());
    assert_eq!(p.next_fire_at, Some(utc("2026-01-05T09:01:00Z")));
}

// After three hours of downtime, a job due every hour at :00.
fn after_downtime(misfire: Misfire) -> Plan {
    let c = every(3600, "2026-01-01T00:00:00Z");
    plan(
        &c,
        &rules(Overlap::Allow, misfire),
        &at("2026-01-05T07:00:00Z"),
        false,
        utc("2026-01-05T09:30:00Z"),
    )
}

#[test]
fn misfire_skip_drops_missed_fire_times() {
    let p = after_downtime(Misfire::Skip);
    assert!(p.fires.is_empty());
    assert_eq!(p.next_spec_at, Some(utc("2026-01-05T10:00:00Z")));
    assert!(p.dropped > 0);
    // Less than MISFIRE_GRACE late is on time.
    let c = every(3600, "2026-01-01T00:00:00Z");
    let p = plan(
        &c,
        &rules(Overlap::Allow, Misfire::Skip),
        &at("2026-01-05T09:00:00Z"),
        false,
        utc("2026-01-05T09:00:59Z"),
    );
    assert_eq!(p.fires, vec![utc("2026-01-05T09:00:00Z")]);
}

#[test]
fn misfire_fire_once_fires_the_latest_missed_time_once() {
    let p = after_downtime(Misfire::FireOnce);
    assert_eq!(p.fires, vec![utc("2026-01-05T09:00:00Z")]);
    assert_eq!(p.next_spec_at, Some(utc("2026-01-05T10:00:00Z")));
}

#[test]
fn misfire_catch_up_fires_each_missed_time_inside_the_window() {
    let p = after_downtime(Misfire::CatchUp);
    // The window is 1 h: 08:00 is older than 08:30, so only 09:00 is caught up.
    assert_eq!(p.fires, vec![utc("2026-01-05T09:00:00Z")]);
    let c = every(3600, "2026-01-01T00:00:00Z");
    let wide = Rules {
        catchup_window: Duration::from_secs(24 * 3600),
        ..rules(Overlap::Allow, Misfire::CatchUp)
    };
    let p = plan(
        &c,
        &wide,
        &at("2026-01-05T07:00:00Z"),
        false,
        utc("2026-01-05T09:30:00Z"),
    );
    assert_eq!(
        p.fires,
        vec![
            utc("2026-01-05T07:00:00Z"),
            utc("2026-01-05T08:00:00Z"),
            utc("2026-01-05T09:00:00Z")
        ]
    );
}

#[test]
fn catch_up_is_bounded_per_pass_and_continues_at_once() {
    let c = every(1, "2026-01-01T00:00:00Z");
    let p = plan(
        &c,
        &rules(Overlap::Allow, Misfire::CatchUp),
        &at("2026-01-05T09:00:00Z"),
        false,
        utc("2026-01-05T09:10:00Z"),
    );
    assert_eq!(p.fires.len(), MAX_FIRES_PER_PASS);
    assert_eq!(p.next_fire_at, Some(utc("2026-01-05T09:01:40Z")));
}

#[test]
fn overlap_skip_does_not_fire_while_the_previous_task_is_unfinished() {
    let c = every(60, "2026-01-01T00:00:00Z");
    let p = plan(
        &c,
        &rules(Overlap::Skip, Misfire::CatchUp),
        &at("2026-01-05T09:00:00Z"),
        true,
        utc("2026-01-05T09:00:00Z"),
    );
    assert!(p.fires.is_empty());
    assert_eq!(p.dropped, 1);
    assert_eq!(p.next_spec_at, Some(utc("2026-01-05T09:01:00Z")));
}

#[test]
fn overlap_allow_fires_while_the_previous_task_is_unfinished() {
    let c = every(60, "2026-01-01T00:00:00Z");
    let p = plan(
        &c,
        &rules(Overlap::Allow, Misfire::CatchUp),
        &at("2026-01-05T09:00:00Z"),
        true,
        utc("2026-01-05T09:00:00Z"),
    );
    assert_eq!(p.fires.len(), 1);
    assert!(!p.cancel_previous);
}

#[test]
fn overlap_buffer_one_keeps_one_fire_time_until_the_previous_finishes() {
    let c = every(60, "2026-01-01T00:00:00Z");
    let r = rules(Overlap::BufferOne, Misfire::CatchUp);
    let p = plan(
        &c,
        &r,
        &at("2026-01-05T09:00:00Z"),
        true,
        utc("2026-01-05T09:00:00Z"),
    );
    assert!(p.fires.is_empty());
    assert_eq!(p.buffered_at, Some(utc("2026-01-05T09:00:00Z")));
    assert_eq!(p.next_fire_at, Some(utc("2026-01-05T09:00:01Z")));
    // Still busy at the next fire time: that one is dropped, the buffer stays.
    let cur = Cursor {
        next_spec_at: p.next_spec_at,
        buffered_at: p.buffered_at,
        runs: 1,
    };
    let p = plan(&c, &r, &cur, true, utc("2026-01-05T09:01:00Z"));
    assert!(p.fires.is_empty());
    assert_eq!(p.dropped, 1);
    assert_eq!(p.buffered_at, Some(utc("2026-01-05T09:00:00Z")));
    // The previous finished: the buffered fire time fires.
    let cur = Cursor {
        next_spec_at: p.next_spec_at,
        buffered_at: p.buffered_at,
        runs: 1,
    };
    let p = plan(&c, &r, &cur, false, utc("2026-01-05T09:01:30Z"));
    assert_eq!(p.fires, vec![utc("2026-01-05T09:00:00Z")]);
    assert_eq!(p.buffered_at, None);
    assert_eq!(p.next_fire_at, Some(utc("2026-01-05T09:02:00Z")));
}

#[test]
fn overlap_cancel_previous_cancels_the_unfinished_task_and_fires() {
    let c = every(60, "2026-01-01T00:00:00Z");
    let p = plan(
        &c,
        &rules(Overlap::CancelPrevious, Misfire::CatchUp),
        &at("2026-01-05T09:00:00Z"),
        true,
        utc("2026-01-05T09:00:00Z"),
    );
    assert_eq!(p.fires, vec![utc("2026-01-05T09:00:00Z")]);
    assert!(p.cancel_previous);
    // Several due in one pass: only the latest is made.
    let wide = Rules {
        catchup_window: Duration::from_secs(24 * 3600),
        ..rules(Overlap::CancelPrevious, Misfire::CatchUp)
    };
    let p = plan(
        &c,
        &wide,
        &at("2026-01-05T09:00:00Z"),
        false,
        utc("2026-01-05T09:02:00Z"),
    );
    assert_eq!(p.fires, vec![utc("2026-01-05T09:02:00Z")]);
    assert!(!p.cancel_previous);
}

#[test]
fn max_runs_stops_the_schedule_by_itself() {
    let c = every(60, "2026-01-01T00:00:00Z");
    let r = Rules {
        max_runs: 3,
        ..rules(Overlap::Allow, Misfire::CatchUp)
    };
    let cur = Cursor {
        runs: 2,
        ..at("2026-01-05T09:00:00Z")
    };
    let p = plan(&c, &r, &cur, false, utc("2026-01-05T09:05:00Z"));
    assert_eq!(p.fires, vec![utc("2026-01-05T09:00:00Z")]);
    assert_eq!(p.completed, Some("max_runs reached"));
    assert_eq!(p.next_fire_at, None);
}

#[test]
fn preview_stops_at_the_end_of_the_spec() {
    let c = cron("0 0 1 1 *", "");
    assert_eq!(c.preview(utc("2026-06-01T00:00:00Z"), 2).len(), 2);
    let spec = Spec::Once {
        at: utc("2027-01-01T00:00:00Z"),
    };
    let c = Calendar::new(&spec, None, None).unwrap();
    assert_eq!(
        c.preview(utc("2026-06-01T00:00:00Z"), 5),
        vec![utc("2027-01-01T00:00:00Z")]
    );
}

#[test]
fn fire_times_at_most_a_minute_late_are_on_time_under_every_misfire_policy() {
    // Every 20 s; the scheduler stalled 40 s: the fire times 40 s and 20 s late are on time.
    let c = every(20, "2026-01-01T00:00:00Z");
    let short_window = Duration::from_secs(10);
    for misfire in [Misfire::Skip, Misfire::FireOnce, Misfire::CatchUp] {
        for catchup_window in [short_window, DEFAULT_CATCHUP_WINDOW] {
            let r = Rules {
                catchup_window,
                ..rules(Overlap::Allow, misfire)
            };
            let p = plan(
                &c,
                &r,
                &at("2026-01-05T09:00:00Z"),
                false,
                utc("2026-01-05T09:00:40Z"),
            );
            assert_eq!(
                p.fires,
                vec![
                    utc("2026-01-05T09:00:00Z"),
                    utc("2026-01-05T09:00:20Z"),
                    utc("2026-01-05T09:00:40Z"),
                ],
                "{misfire:?}, catch-up window {catchup_window:?}"
            );
            assert_eq!(p.dropped, 0);
            assert_eq!(p.next_spec_at, Some(utc("2026-01-05T09:01:00Z")));
        }
    }
    // Stalled 2 minutes: 09:00:00-09:00:40 are missed (more than 60 s late), the policy
    // decides about them; 09:01:00 (60 s late) onwards are on time and fire each.
    let on_time = [
        "2026-01-05T09:01:00Z",
        "2026-01-05T09:01:20Z",
        "2026-01-05T09:01:40Z",
        "2026-01-05T09:02:00Z",
    ]
    .map(utc);
    let after_stall = |misfire, catchup_window| {
        let r = Rules {
            catchup_window,
            ..rules(Overlap::Allow, misfire)
        };
        plan(
            &c,
            &r,
            &at("2026-01-05T09:00:00Z"),
            false,
            utc("2026-01-05T09:02:00Z"),
        )
        .fires
    };
    let mut fire_once = vec![utc("2026-01-05T09:00:40Z")];
    fire_once.extend(on_time);
    assert_eq!(
        after_stall(Misfire::FireOnce, DEFAULT_CATCHUP_WINDOW),
        fire_once
    );
    assert_eq!(after_stall(Misfire::Skip, DEFAULT_CATCHUP_WINDOW), on_time);
    assert_eq!(after_stall(Misfire::CatchUp, short_window), on_time);
    let mut caught_up = [
        "2026-01-05T09:00:00Z",
        "2026-01-05T09:00:20Z",
        "2026-01-05T09:00:40Z",
    ]
    .map(utc)
    .to_vec();
    caught_up.extend(on_time);
    assert_eq!(
        after_stall(Misfire::CatchUp, DEFAULT_CATCHUP_WINDOW),
        caught_up
    );
}

#[test]
fn key_templates_take_only_their_placeholders() {
    for ok in ["r-{fire_time}", "{schedule_id}/{fire_time}", "plain", ""] {
        assert!(check_key_template("k", ok).is_ok(), "{ok}");
    }
    for bad in [
        "{",
        "}",
        "{fire}",
        "{fire_time",
        "r-{{fire_time}}",
        "{schedule_id}}",
    ] {
        assert!(check_key_template("k", bad).is_err(), "{bad}");
    }
    let t = DateTime::parse_from_rfc3339("2026-01-05T03:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(
        expand_key("{schedule_id}@{fire_time}", "nightly", t),
        "nightly@2026-01-05T03:00:00.000Z"
    );
    assert_eq!(
        fire_time_text(DateTime::UNIX_EPOCH).len(),
        fire_time_text(t).len()
    );
}

#[test]
fn fires_per_pass_is_what_one_submit_may_make() {
    assert_eq!(fires_per_pass(1, 10), MAX_FIRES_PER_PASS);
    assert_eq!(fires_per_pass(1000, 10), 1);
    assert_eq!(fires_per_pass(30, 10), 33);
    // 1 MiB per task: 8 fire times make 8 MiB.
    assert_eq!(fires_per_pass(1, 1 << 20), 8);
    assert_eq!(fires_per_pass(1000, 1 << 20), 1, "never below one");
}
