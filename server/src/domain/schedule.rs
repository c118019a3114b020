//! Schedules, pure: when a spec fires ([`Calendar`], on croner and chrono-tz) and
//! what one scheduler pass does with the fire times that came due ([`plan`]):
//! window, misfire and overlap policies, `max_runs`. No I/O; `now` is passed in.
//!
//! A schedule keeps a cursor: `next_spec_at`, the first spec fire time not yet
//! handled, and `buffered_at`, a fire time held back by `BUFFER_ONE`. A pass
//! turns the fire times at or before `now` into fires (or drops them) and moves
//! the cursor past them.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

use super::validate::Invalid;

/// A fire time at most this late is on time under every misfire policy: it fires
/// as if the scheduler had been on time (a slow pass, a failover, a quick restart).
pub const MISFIRE_GRACE: Duration = Duration::from_secs(60);
/// How often a schedule holding a `BUFFER_ONE` fire time looks at its previous task.
pub const BUFFER_RECHECK: Duration = Duration::from_secs(1);
/// Fires per schedule per pass at most; the rest come in the next pass (at once).
pub const MAX_FIRES_PER_PASS: usize = 100;
/// Default and longest catch-up window.
pub const DEFAULT_CATCHUP_WINDOW: Duration = Duration::from_secs(3600);
pub const MAX_CATCHUP_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// Shortest interval of an `every` spec.
pub const MIN_EVERY: Duration = Duration::from_secs(1);

/// When a schedule fires, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// 5 or 6 cron fields read in an IANA zone ("" is UTC).
    Cron {
        expr: String,
        timezone: String,
    },
    /// `anchor + k * every` for every integer k.
    Every {
        every: Duration,
        anchor: DateTime<Utc>,
    },
    Once {
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    Allow,
    Skip,
    BufferOne,
    CancelPrevious,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfire {
    Skip,
    FireOnce,
    CatchUp,
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::CancelPrevious => "cancel_previous",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Overlap::Allow,
            Overlap::Skip,
            Overlap::BufferOne,
            Overlap::CancelPrevious,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

impl Misfire {
    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::FireOnce => "fire_once",
            Misfire::CatchUp => "catch_up",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Misfire::Skip, Misfire::FireOnce, Misfire::CatchUp]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

enum Kind {
    Cron(Box<super::cron::CronLine>),
    Every { every_ms: i64, anchor_ms: i64 },
    Once(DateTime<Utc>),
}

/// A validated spec with its window: the fire times.
pub struct Calendar {
    kind: Kind,
    start: Option<DateTime<Utc>>,
    end: Option<DateTime<Utc>>,
}

fn ms_to_time(v: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(v)
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// Parses a cron line of 5 or 6 fields (or an `@daily`-style nickname).
pub fn parse_cron(field: &str, expr: &str) -> Result<croner::Cron, Invalid> {
    let fields = expr.split_whitespace().count();
    let nickname = expr.trim_start().starts_with('@');
    if !nickname && !(5..=6).contains(&fields) {
        return Err(Invalid::new(
            field,
            format!("must have 5 or 6 fields (seconds first), not {fields}"),
        ));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| Invalid::new(field, format!("is not a valid cron line: {e}")))
}

/// Parses an IANA zone name; "" is UTC.
pub fn parse_timezone(field: &str, name: &str) -> Result<chrono_tz::Tz, Invalid> {
    if name.is_empty() {
        return Ok(chrono_tz::Tz::UTC);
    }
    chrono_tz::Tz::from_str(name).map_err(|_| {
        Invalid::new(
            field,
            format!("{name:?} is not an IANA time zone (such as Europe/Berlin)"),
        )
    })
}

impl Calendar {
    /// Validates the spec and window; errors name the field (`spec.cron`,
    /// `spec.timezone`, `spec.every`, `end_time`).
    pub fn new(
        spec: &Spec,
        start: Option<DateTime<Utc>>,
        end: Option<DateTime<Utc>>,
    ) -> Result<Self, Invalid> {
        if let (Some(s), Some(e)) = (start, end)
            && e < s
        {
            return Err(Invalid::new("end_time", "is before start_time"));
        }
        let kind = match spec {
            Spec::Cron { expr, timezone } => {
                let tz = parse_timezone("spec.timezone", timezone)?;
                Kind::Cron(Box::new(super::cron::CronLine::new(
                    parse_cron("spec.cron", expr)?,
                    tz,
                )))
            }
            Spec::Every { every, anchor } => {
                if *every < MIN_EVERY {
                    return Err(Invalid::new("spec.every", "must be at least 1s"));
                }
                let every_ms = i64::try_from(every.as_millis())
                    .ok()
                    .filter(|&v| v <= 366 * 24 * 3600 * 1000)
                    .ok_or_else(|| Invalid::new("spec.every", "must be at most 366 days"))?;
                Kind::Every {
                    every_ms,
                    anchor_ms: anchor.timestamp_millis(),
                }
            }
            Spec::Once { at } => Kind::Once(*at),
        };
        Ok(Calendar { kind, start, end })
    }

    fn inside(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let after_start = self.start.is_none_or(|s| t >= s);
        let before_end = self.end.is_none_or(|e| t <= e);
        (after_start && before_end).then_some(t)
    }

    /// The first fire time at or after `t` inside the window.
    pub fn first_at_or_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let lower = self.start.map_or(t, |s| s.max(t));
        let found = match &self.kind {
            Kind::Cron(line) => {
                // Cron fire times are whole seconds: round up so none before `lower` comes back.
                let secs = lower.timestamp() + i64::from(lower.timestamp_subsec_nanos() > 0);
                line.first_at_or_after(DateTime::from_timestamp(secs, 0)?)
            }
            Kind::Every {
                every_ms,
                anchor_ms,
            } => {
                let offset = lower.timestamp_millis().checked_sub(*anchor_ms)?;
                let k = offset.div_euclid(*every_ms) + i64::from(offset.rem_euclid(*every_ms) > 0);
                ms_to_time(anchor_ms.checked_add(k.checked_mul(*every_ms)?)?)
            }
            Kind::Once(at) => (*at >= lower).then_some(*at),
        }?;
        self.inside(found)
    }

    /// The first fire time strictly after `t` (times are kept in whole ms).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.first_at_or_after(t.checked_add_signed(TimeDelta::milliseconds(1))?)
    }

    /// The latest fire time at or before `t` inside the window.
    pub fn last_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let upper = self.end.map_or(t, |e| e.min(t));
        let found = match &self.kind {
            Kind::Cron(line) => {
                line.last_at_or_before(DateTime::from_timestamp(upper.timestamp(), 0)?)
            }
            Kind::Every {
                every_ms,
                anchor_ms,
            } => {
                let offset = upper.timestamp_millis().checked_sub(*anchor_ms)?;
                let k = offset.div_euclid(*every_ms);
                ms_to_time(anchor_ms.checked_add(k.checked_mul(*every_ms)?)?)
            }
            Kind::Once(at) => (*at <= upper).then_some(*at),
        }?;
        self.inside(found)
    }

    /// Up to `n` fire times strictly after `after`.
    pub fn preview(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n.min(1000));
        let mut t = self.next_after(after);
        while let Some(f) = t {
            if out.len() >= n {
                break;
            }
            out.push(f);
            t = self.next_after(f);
        }
        out
    }

    pub fn is_once(&self) -> bool {
        matches!(self.kind, Kind::Once(_))
    }

    /// Why nothing more fires once the spec has no fire time left.
    pub fn ended_reason(&self) -> &'static str {
        match (&self.kind, self.end) {
            (Kind::Once(_), _) => "the one-off fire time passed",
            (_, Some(_)) => "end_time passed",
            _ => "the spec has no more fire times",
        }
    }
}

/// The first fire time of a new (or re-specified, or resumed) schedule: from
/// `now` on; a one-off keeps its time even if it passed (misfire policy decides).
pub fn first_fire(cal: &Calendar, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if cal.is_once() {
        cal.first_at_or_after(DateTime::<Utc>::MIN_UTC)
    } else {
        cal.first_at_or_after(now)
    }
}

/// What a schedule does about fire times, besides the spec.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub overlap: Overlap,
    pub misfire: Misfire,
    pub catchup_window: Duration,
    /// 0: no limit.
    pub max_runs: u32,
    /// Fire times one pass turns into tasks at most (buffered one included):
    /// [`MAX_FIRES_PER_PASS`], fewer when each fire makes many tasks
    /// ([`fires_per_pass`]); the rest wait for the next pass.
    pub max_fires: usize,
}

/// Fire times per pass for a schedule whose fires make `copies` tasks of
/// `bytes` each: at most what one Submit may make (tasks and bytes, copies
/// counted), and at least one.
pub fn fires_per_pass(copies: u32, bytes: u64) -> usize {
    use super::bounds::{MAX_STORED_BYTES, MAX_TASKS};
    let per_fire = u64::from(copies.max(1));
    let by_tasks = MAX_TASKS / per_fire;
    let by_bytes = MAX_STORED_BYTES / per_fire.saturating_mul(bytes).max(1);
    let n = by_tasks.min(by_bytes).min(MAX_FIRES_PER_PASS as u64);
    usize::try_from(n).unwrap_or(MAX_FIRES_PER_PASS).max(1)
}

/// Where a schedule stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub next_spec_at: Option<DateTime<Utc>>,
    pub buffered_at: Option<DateTime<Utc>>,
    pub runs: u64,
}

/// What one pass does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Fire times to turn into tasks now, oldest first.
    pub fires: Vec<DateTime<Utc>>,
    /// Cancel the previous run's task (CANCEL_PREVIOUS) before firing.
    pub cancel_previous: bool,
    /// Fire times dropped by the misfire or overlap policy or by max_runs.
    pub dropped: u64,
    pub next_spec_at: Option<DateTime<Utc>>,
    pub buffered_at: Option<DateTime<Utc>>,
    /// When the scheduler must look at the schedule next; `None`: never.
    pub next_fire_at: Option<DateTime<Utc>>,
    /// Set when nothing more will fire.
    pub completed: Option<&'static str>,
}

/// The spec fire times due at `now` after the misfire policy, and the next one.
fn due_times(
    cal: &Calendar,
    rules: &Rules,
    next: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    limit: usize,
) -> (Vec<DateTime<Utc>>, Option<DateTime<Utc>>, u64) {
    let mut next = next;
    let mut due = Vec::new();
    let mut dropped = 0;
    let Some(first) = next.filter(|n| *n <= now && limit > 0) else {
        return (due, next, 0);
    };
    // Fire times at most MISFIRE_GRACE late are on time under every policy; the
    // policy decides about the ones before `on_time`.
    let on_time = now
        .checked_sub_signed(delta(MISFIRE_GRACE))
        .unwrap_or(first);
    if first < on_time {
        match rules.misfire {
            Misfire::FireOnce => {
                // All missed fire times become one fire, as the latest of them.
                let missed = on_time.checked_sub_signed(TimeDelta::milliseconds(1));
                let latest = missed
                    .and_then(|m| cal.last_at_or_before(m))
                    .map_or(first, |l| l.max(first));
                dropped += u64::from(latest != first);
                due.push(latest);
                next = cal.next_after(latest);
            }
            Misfire::Skip => {
                dropped += 1;
                next = cal.first_at_or_after(on_time);
            }
            Misfire::CatchUp => {
                let cutoff = now
                    .checked_sub_signed(delta(rules.catchup_window))
                    .map_or(first, |c| c.min(on_time));
                if first < cutoff {
                    dropped += 1;
                    next = cal.first_at_or_after(cutoff);
                }
            }
        }
    }
    while let Some(t) = next.filter(|t| *t <= now) {
        if due.len() >= limit {
            break;
        }
        due.push(t);
        next = cal.next_after(t);
    }
    (due, next, dropped)
}

/// One pass over a due schedule at `now`. `previous_unfinished`: the task of the
/// latest run is SCHEDULED, READY or LEASED.
pub fn plan(
    cal: &Calendar,
    rules: &Rules,
    cur: &Cursor,
    previous_unfinished: bool,
    now: DateTime<Utc>,
) -> Plan {
    let mut buffered = cur.buffered_at;
    let mut busy = previous_unfinished;
    // The buffered fire time, when it goes now, counts against the pass's limit.
    let goes = usize::from(buffered.is_some() && !busy);
    let limit = rules.max_fires.clamp(1, MAX_FIRES_PER_PASS) - goes;
    let (due, next, mut dropped) = due_times(cal, rules, cur.next_spec_at, now, limit);
    let mut fires = Vec::new();
    let mut cancel_previous = false;
    if let Some(b) = buffered.filter(|_| !busy) {
        fires.push(b);
        buffered = None;
        busy = true;
    }
    for t in due {
        match rules.overlap {
            Overlap::Allow => fires.push(t),
            Overlap::Skip | Overlap::BufferOne if !busy => {
                fires.push(t);
                busy = true;
            }
            Overlap::Skip => dropped += 1,
            Overlap::BufferOne if buffered.is_none() => buffered = Some(t),
            Overlap::BufferOne => dropped += 1,
            Overlap::CancelPrevious => {
                if busy && fires.pop().is_some() {
                    // Superseded in the same pass: never made.
                    dropped += 1;
                } else if busy {
                    cancel_previous = true;
                }
                fires.push(t);
                busy = true;
            }
        }
    }
    let mut completed = None;
    let (mut next, mut buffered) = (next, buffered);
    if rules.max_runs > 0 {
        let left = u64::from(rules.max_runs).saturating_sub(cur.runs);
        let left = usize::try_from(left).unwrap_or(usize::MAX);
        if fires.len() >= left {
            dropped += (fires.len() - left) as u64;
            fires.truncate(left);
            completed = Some("max_runs reached");
            next = None;
            buffered = None;
        }
    }
    if completed.is_none() && next.is_none() && buffered.is_none() {
        completed = Some(cal.ended_reason());
    }
    let next_fire_at = match (next, buffered) {
        _ if completed.is_some() => None,
        (n, Some(_)) => {
            let recheck = now.checked_add_signed(delta(BUFFER_RECHECK));
            n.into_iter().chain(recheck).min()
        }
        (n, None) => n,
    };
    Plan {
        fires,
        cancel_previous,
        dropped,
        next_spec_at: next,
        buffered_at: buffered,
        next_fire_at,
        completed,
    }
}

/// The wake-up time and completion of a cursor that did not just fire (a new,
/// changed or resumed schedule, or one just triggered).
pub fn settle(cal: &Calendar, rules: &Rules, cur: &Cursor, now: DateTime<Utc>) -> Plan {
    let mut p = Plan {
        next_spec_at: cur.next_spec_at,
        buffered_at: cur.buffered_at,
        ..Plan::default()
    };
    if rules.max_runs > 0 && cur.runs >= u64::from(rules.max_runs) {
        p.completed = Some("max_runs reached");
    } else if cur.next_spec_at.is_none() && cur.buffered_at.is_none() {
        p.completed = Some(cal.ended_reason());
    }
    if p.completed.is_some() {
        p.next_spec_at = None;
        p.buffered_at = None;
        return p;
    }
    let recheck = cur
        .buffered_at
        .and_then(|_| now.checked_add_signed(delta(BUFFER_RECHECK)));
    p.next_fire_at = cur.next_spec_at.into_iter().chain(recheck).min();
    p
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "schedule_dst_tests.rs"]
mod dst_tests;

/// A fire time as `{fire_time}` and the `taskbroker.fire_time` entry show it:
/// RFC 3339 in UTC, to the millisecond (always 24 characters).
pub fn fire_time_text(fire_time: DateTime<Utc>) -> String {
    fire_time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The placeholders a key template may hold.
pub const KEY_PLACEHOLDERS: [&str; 2] = ["{fire_time}", "{schedule_id}"];

/// Checks a key template: `{` and `}` appear only in its placeholders.
pub fn check_key_template(field: &str, template: &str) -> Result<(), Invalid> {
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        let tail = &rest[at..];
        match KEY_PLACEHOLDERS.iter().find(|p| tail.starts_with(**p)) {
            Some(p) => rest = &tail[p.len()..],
            None => {
                return Err(Invalid::new(
                    field,
                    "may hold only the placeholders {fire_time} and {schedule_id} \
                     (`{` and `}` appear nowhere else)",
                ));
            }
        }
    }
    Ok(())
}

/// A key template with its placeholders substituted.
pub fn expand_key(template: &str, schedule_id: &str, fire_time: DateTime<Utc>) -> String {
    template
        .replace("{schedule_id}", schedule_id)
        .replace("{fire_time}", &fire_time_text(fire_time))
}
