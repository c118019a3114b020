//! Cron lines read in a time zone, pure: the instants a line fires at, whatever
//! the clocks do around a daylight-saving change. Schedules ([`super::schedule`])
//! build their calendars on it.

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};

/// A cron line read in a zone: its fire times are instants (UTC), whatever the
/// clocks do around a daylight-saving change.
///
/// The line matches local wall-clock times. A line with `*` or a step in its
/// seconds, minute or hour field (`*/15 * * * *`, `0 * * * *`) *repeats*: it fires
/// at every instant the local clock shows a matching time, so twice in a
/// repeated stretch (fall back) and not at all in a skipped one (spring forward).
/// Any other line names fixed times of day (`30 2 * * *`, `0 1,13 * * *`): each
/// fires once a day, at the first of two equal local times, or when the clocks
/// jump over it, at the end of the jump.
pub(crate) struct CronLine {
    cron: croner::Cron,
    tz: chrono_tz::Tz,
    repeats: bool,
}

const SECOND: TimeDelta = TimeDelta::seconds(1);

impl CronLine {
    pub(crate) fn new(cron: croner::Cron, tz: chrono_tz::Tz) -> Self {
        let p = &cron.pattern;
        let repeats = [&p.seconds, &p.minutes, &p.hours]
            .iter()
            .any(|c| c.from_wildcard || c.step > 1);
        CronLine { cron, tz, repeats }
    }

    fn local(&self, u: DateTime<Utc>) -> NaiveDateTime {
        u.with_timezone(&self.tz).naive_local()
    }

    /// The first local time at or after `n` the line matches (wall-clock only: no zone).
    fn next_local(&self, n: NaiveDateTime) -> Option<NaiveDateTime> {
        let found = self.cron.find_next_occurrence(&n.and_utc(), true).ok()?;
        Some(found.naive_utc())
    }

    /// The last local time at or before `n` the line matches.
    fn prev_local(&self, n: NaiveDateTime) -> Option<NaiveDateTime> {
        let found = self
            .cron
            .find_previous_occurrence(&n.and_utc(), true)
            .ok()?;
        Some(found.naive_utc())
    }

    fn resolve(&self, n: NaiveDateTime) -> LocalResult<DateTime<Utc>> {
        self.tz
            .from_local_datetime(&n)
            .map(|d| d.with_timezone(&Utc))
    }

    /// When `u` lies in a stretch of local time that happens twice: the instant
    /// the clocks went back and the local times the stretch spans, `[start, end)`.
    fn repeated_stretch(
        &self,
        u: DateTime<Utc>,
    ) -> Option<(DateTime<Utc>, NaiveDateTime, NaiveDateTime)> {
        let LocalResult::Ambiguous(a, b) = self.resolve(self.local(u)) else {
            return None;
        };
        let (first, second) = (a.min(b), a.max(b));
        let offset = |x: DateTime<Utc>| self.tz.offset_from_utc_datetime(&x.naive_utc()).fix();
        // The clocks go back at some instant in (first, second]: find it to the second.
        let before = offset(first);
        let (mut lo, mut hi) = (first, second);
        while hi - lo > SECOND {
            let mid = lo + TimeDelta::seconds((hi - lo).num_seconds() / 2);
            if offset(mid) == before {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let start = self.local(hi);
        Some((hi, start, start + (second - first)))
    }

    /// The first fire time at or after `t` (whole seconds).
    pub(crate) fn first_at_or_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut from = t;
        if let Some((back, _, end)) = self.repeated_stretch(t)
            && t < back
        {
            // `t` is before the clocks go back: the rest of this pass first...
            let n = self.next_local(self.local(t))?;
            if n < end {
                return self.resolve(n).earliest();
            }
            // ...then the same local times again.
            from = back;
        }
        if !self.repeats {
            // A fixed time the clocks jumped over fires when the jump ends, which may be `t`.
            let before = self.local(t).checked_sub_signed(SECOND)?;
            if let Some(gap) = chrono_tz::GapInfo::new(&before, &self.tz)
                && let Some((begin, _)) = gap.begin
                && self.prev_local(before).is_some_and(|n| n >= begin)
            {
                return Some(t);
            }
        }
        let mut n = self.next_local(self.local(from))?;
        loop {
            match self.resolve(n) {
                LocalResult::Single(u) if u >= from => return Some(u),
                LocalResult::Ambiguous(a, b) => {
                    let (first, second) = (a.min(b), a.max(b));
                    if first >= from {
                        return Some(first);
                    }
                    if self.repeats && second >= from {
                        return Some(second);
                    }
                }
                LocalResult::None => {
                    // A skipped stretch: a fixed time in it fires when the jump ends.
                    let end = chrono_tz::GapInfo::new(&n, &self.tz)?.end?;
                    let end = end.with_timezone(&Utc);
                    if !self.repeats && end >= from {
                        return Some(end);
                    }
                    n = self.next_local(self.local(end))?;
                    continue;
                }
                LocalResult::Single(_) => {}
            }
            n = self.next_local(n.checked_add_signed(SECOND)?)?;
        }
    }

    /// The last fire time at or before `t` (whole seconds).
    pub(crate) fn last_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut to = t;
        if let Some((back, start, _)) = self.repeated_stretch(t)
            && t >= back
        {
            // `t` is after the clocks went back: this pass so far (a repeating line
            // fires in it), then the first pass.
            if self.repeats {
                let n = self.prev_local(self.local(t))?;
                if n >= start {
                    return self.resolve(n).latest();
                }
            }
            to = back - SECOND;
        }
        let mut n = self.prev_local(self.local(to))?;
        loop {
            match self.resolve(n) {
                LocalResult::Single(u) if u <= to => return Some(u),
                LocalResult::Ambiguous(a, b) => {
                    let (first, second) = (a.min(b), a.max(b));
                    if self.repeats && second <= to {
                        return Some(second);
                    }
                    if first <= to {
                        return Some(first);
                    }
                }
                LocalResult::None => {
                    let gap = chrono_tz::GapInfo::new(&n, &self.tz)?;
                    let end = gap.end?.with_timezone(&Utc);
                    if !self.repeats && end <= to {
                        return Some(end);
                    }
                    let (begin, _) = gap.begin?;
                    n = self.prev_local(begin.checked_sub_signed(SECOND)?)?;
                    continue;
                }
                LocalResult::Single(_) => {}
            }
            n = self.prev_local(n.checked_sub_signed(SECOND)?)?;
        }
    }
}
