//! Unit tests of cron lines across daylight-saving changes: every way the broker
//! looks at fire times (preview, next and previous, scheduler passes) agrees.

use super::tests::{cron, rules, utc};
use super::*;

/// Checks that `expected` are exactly the fire times in `[from, to]`, seen every
/// way the broker looks at them: the preview, the next and previous fire time from
/// every half minute, and scheduler passes run at each fire time.
fn assert_fires(expr: &str, tz: &str, from: &str, to: &str, expected: &[&str]) {
    let c = cron(expr, tz);
    let (from, to) = (utc(from), utc(to));
    let expected: Vec<_> = expected.iter().map(|s| utc(s)).collect();
    let what = format!("{expr:?} in {tz}");
    let previewed: Vec<_> = c
        .preview(from - TimeDelta::milliseconds(1), expected.len() + 1)
        .into_iter()
        .filter(|t| *t <= to)
        .collect();
    assert_eq!(previewed, expected, "preview of {what}");
    let mut t = from;
    while t <= to {
        let next = expected.iter().find(|e| **e >= t).copied();
        if next.is_some() {
            assert_eq!(
                c.first_at_or_after(t),
                next,
                "{what}: first at or after {t}"
            );
        }
        let prev = expected.iter().rev().find(|e| **e <= t).copied();
        if prev.is_some() {
            assert_eq!(
                c.last_at_or_before(t),
                prev,
                "{what}: last at or before {t}"
            );
        }
        t += TimeDelta::seconds(30);
    }
    // The scheduler, woken at each fire time, fires the same times as the preview.
    let r = rules(Overlap::Allow, Misfire::FireOnce);
    let mut cur = Cursor {
        next_spec_at: first_fire(&c, from),
        ..Cursor::default()
    };
    let mut fired = Vec::new();
    while let Some(now) = cur.next_spec_at.filter(|t| *t <= to) {
        let p = plan(&c, &r, &cur, false, now + TimeDelta::milliseconds(300));
        fired.extend(p.fires);
        cur.next_spec_at = p.next_spec_at;
    }
    assert_eq!(fired, expected, "scheduler passes of {what}");
}

// New York falls back on 2026-11-01 at 06:00Z (01:00-01:59 happens twice).
#[test]
fn minute_and_hourly_crons_fire_in_both_passes_of_the_repeated_hour() {
    assert_fires(
        "*/15 * * * *",
        "America/New_York",
        "2026-11-01T04:50:00Z",
        "2026-11-01T07:10:00Z",
        &[
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T05:15:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T05:45:00Z",
            "2026-11-01T06:00:00Z", // 01:00 EST
            "2026-11-01T06:15:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T06:45:00Z",
            "2026-11-01T07:00:00Z", // 02:00 EST
        ],
    );
    assert_fires(
        "0 * * * *",
        "America/New_York",
        "2026-11-01T03:30:00Z",
        "2026-11-01T08:30:00Z",
        &[
            "2026-11-01T04:00:00Z", // 00:00 EDT
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T06:00:00Z", // 01:00 EST
            "2026-11-01T07:00:00Z", // 02:00 EST
            "2026-11-01T08:00:00Z",
        ],
    );
    // Berlin falls back on 2026-10-25 at 01:00Z (02:00-02:59 twice).
    assert_fires(
        "*/15 * * * *",
        "Europe/Berlin",
        "2026-10-24T23:50:00Z",
        "2026-10-25T02:05:00Z",
        &[
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:15:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T00:45:00Z",
            "2026-10-25T01:00:00Z", // 02:00 CET
            "2026-10-25T01:15:00Z",
            "2026-10-25T01:30:00Z",
            "2026-10-25T01:45:00Z",
            "2026-10-25T02:00:00Z", // 03:00 CET
        ],
    );
    // Every 20 seconds (seconds first) across the Berlin change: no gap, no double.
    let c = cron("*/20 * * * * *", "Europe/Berlin");
    let got = c.preview(utc("2026-10-25T00:59:00Z"), 6);
    assert_eq!(
        got,
        vec![
            utc("2026-10-25T00:59:20Z"),
            utc("2026-10-25T00:59:40Z"),
            utc("2026-10-25T01:00:00Z"),
            utc("2026-10-25T01:00:20Z"),
            utc("2026-10-25T01:00:40Z"),
            utc("2026-10-25T01:01:00Z"),
        ]
    );
}

// Lord Howe Island moves its clocks by 30 minutes: on 2026-04-05 at 15:00Z, 02:00
// (+11) becomes 01:30 (+10:30), so 01:30-01:59 happens twice.
#[test]
fn a_half_hour_fall_back_repeats_only_the_repeated_half_hour() {
    assert_fires(
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2026-04-04T14:20:00Z",
        "2026-04-04T15:50:00Z",
        &[
            "2026-04-04T14:30:00Z", // 01:30 +11
            "2026-04-04T14:45:00Z", // 01:45 +11
            "2026-04-04T15:00:00Z", // 01:30 +10:30
            "2026-04-04T15:15:00Z", // 01:45 +10:30
            "2026-04-04T15:30:00Z", // 02:00 +10:30
            "2026-04-04T15:45:00Z",
        ],
    );
    // On the hour: 01:00 happens once, 02:00 once.
    assert_fires(
        "0 * * * *",
        "Australia/Lord_Howe",
        "2026-04-04T12:50:00Z",
        "2026-04-04T16:40:00Z",
        &[
            "2026-04-04T13:00:00Z", // 00:00 +11
            "2026-04-04T14:00:00Z", // 01:00 +11
            "2026-04-04T15:30:00Z", // 02:00 +10:30
            "2026-04-04T16:30:00Z", // 03:00 +10:30
        ],
    );
    // A fixed 01:45 fires once, at the first 01:45.
    assert_fires(
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-03T12:00:00Z",
        "2026-04-05T18:00:00Z",
        &[
            "2026-04-03T14:45:00Z", // 01:45 +11
            "2026-04-04T14:45:00Z", // the first 01:45 (+11) only
            "2026-04-05T15:15:00Z", // 01:45 +10:30
        ],
    );
}

// Lord Howe springs forward on 2026-10-04 at 15:30Z: 02:00 (+10:30) becomes 02:30 (+11).
#[test]
fn a_half_hour_spring_forward_skips_only_the_skipped_half_hour() {
    assert_fires(
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2026-10-03T14:50:00Z",
        "2026-10-03T16:05:00Z",
        &[
            "2026-10-03T15:00:00Z", // 01:30 +10:30
            "2026-10-03T15:15:00Z", // 01:45 +10:30
            "2026-10-03T15:30:00Z", // 02:30 +11 (02:00 and 02:15 do not exist)
            "2026-10-03T15:45:00Z",
            "2026-10-03T16:00:00Z",
        ],
    );
    assert_fires(
        "0 * * * *",
        "Australia/Lord_Howe",
        "2026-10-03T14:00:00Z",
        "2026-10-03T17:10:00Z",
        &[
            "2026-10-03T14:30:00Z", // 01:00 +10:30
            "2026-10-03T16:00:00Z", // 03:00 +11 (02:00 does not exist)
            "2026-10-03T17:00:00Z",
        ],
    );
    // A fixed 02:15 that does not exist fires when the jump ends, at 02:30.
    assert_fires(
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-02T12:00:00Z",
        "2026-10-04T18:00:00Z",
        &[
            "2026-10-02T15:45:00Z", // 02:15 +10:30
            "2026-10-03T15:30:00Z", // 02:30 +11, the end of the jump
            "2026-10-04T15:15:00Z", // 02:15 +11
        ],
    );
}

// New York springs forward on 2026-03-08 at 07:00Z: 02:00 EST becomes 03:00 EDT.
#[test]
fn minute_and_hourly_crons_skip_only_the_skipped_hour() {
    assert_fires(
        "*/15 * * * *",
        "America/New_York",
        "2026-03-08T06:20:00Z",
        "2026-03-08T07:20:00Z",
        &[
            "2026-03-08T06:30:00Z", // 01:30 EST
            "2026-03-08T06:45:00Z",
            "2026-03-08T07:00:00Z", // 03:00 EDT
            "2026-03-08T07:15:00Z",
        ],
    );
    assert_fires(
        "0 * * * *",
        "America/New_York",
        "2026-03-08T04:30:00Z",
        "2026-03-08T08:30:00Z",
        &[
            "2026-03-08T05:00:00Z", // 00:00 EST
            "2026-03-08T06:00:00Z", // 01:00 EST
            "2026-03-08T07:00:00Z", // 03:00 EDT
            "2026-03-08T08:00:00Z",
        ],
    );
    // Berlin, 2026-03-29 at 01:00Z: 02:00 CET becomes 03:00 CEST.
    assert_fires(
        "*/30 * * * *",
        "Europe/Berlin",
        "2026-03-29T00:10:00Z",
        "2026-03-29T01:40:00Z",
        &[
            "2026-03-29T00:30:00Z", // 01:30 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST
            "2026-03-29T01:30:00Z",
        ],
    );
}

#[test]
fn fixed_time_crons_fire_once_a_day_across_both_changes_in_new_york() {
    // 01:30 happens twice on 2026-11-01: once, at the first (EDT).
    assert_fires(
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T00:00:00Z",
        "2026-11-02T12:00:00Z",
        &[
            "2026-10-31T05:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:30:00Z",
        ],
    );
    // Several fixed hours: 01:00 still fires once on the fall-back day.
    assert_fires(
        "0 1,13 * * *",
        "America/New_York",
        "2026-11-01T00:00:00Z",
        "2026-11-02T00:00:00Z",
        &["2026-11-01T05:00:00Z", "2026-11-01T18:00:00Z"],
    );
    // 02:30 does not exist on 2026-03-08: it fires at 03:00 EDT.
    assert_fires(
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T00:00:00Z",
        "2026-03-09T12:00:00Z",
        &[
            "2026-03-07T07:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z",
        ],
    );
    // Berlin's 02:30 on both change days, as the documentation promises.
    assert_fires(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T00:00:00Z",
        "2026-10-26T12:00:00Z",
        &[
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z",
        ],
    );
}
