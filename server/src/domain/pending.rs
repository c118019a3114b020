//! Backpressure's view of each queue's waiting tasks (`max_pending`,
//! `max_pending_bytes`), the pure part.
//!
//! Counting a queue's waiting tasks reads rows in proportion to its backlog, so
//! Submit does not count on every call. Each queue's view is a count read from
//! the store at most [`COUNT_MAX_AGE`] ago, plus the tasks this broker admitted
//! since, minus the tasks it leased since. One caller at a time reads a new count
//! once the old one is that old; the others meanwhile use the old count and what
//! this broker did since. What this broker does not see (another broker's
//! Submits, retries and reclaimed leases coming back, cancels) shows at the next
//! count. The service does the reading (`service/pending.rs`); `now` is passed in.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// How old a count may be before the next check of its queue reads a new one.
pub const COUNT_MAX_AGE: Duration = Duration::from_secs(1);

/// Waiting tasks and the sum of their payload bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub tasks: u64,
    pub bytes: u64,
}

impl Held {
    pub fn new(tasks: u64, bytes: u64) -> Self {
        Held { tasks, bytes }
    }

    fn plus(self, o: Held) -> Held {
        Held::new(
            self.tasks.saturating_add(o.tasks),
            self.bytes.saturating_add(o.bytes),
        )
    }

    fn minus(self, o: Held) -> Held {
        Held::new(
            self.tasks.saturating_sub(o.tasks),
            self.bytes.saturating_sub(o.bytes),
        )
    }
}

/// What a caller checking a queue does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// The view is usable (fresh, or another caller is reading a new count).
    Use,
    /// Read a new count, then report it with [`PendingCounts::counted`] (or
    /// [`PendingCounts::count_failed`]); until then other callers do not count.
    Count,
    /// Another caller is reading the first count of this queue: wait for it and look again.
    Wait,
}

#[derive(Debug, Default)]
struct Entry {
    /// The last count and the instant its reading started.
    counted: Option<(DateTime<Utc>, Held)>,
    /// Admitted by this broker since the count.
    admitted: Held,
    /// Leased by this broker since the count.
    departed: Held,
    /// While a caller reads a new count: what had been admitted when it began.
    refreshing: Option<Held>,
}

impl Entry {
    fn view(&self) -> Option<Held> {
        let (_, held) = self.counted?;
        Some(held.plus(self.admitted).minus(self.departed))
    }
}

/// The views of the queues whose limits have been checked on this broker.
#[derive(Debug)]
pub struct PendingCounts {
    max_age: Duration,
    queues: HashMap<String, Entry>,
}

impl Default for PendingCounts {
    fn default() -> Self {
        PendingCounts::new(COUNT_MAX_AGE)
    }
}

impl PendingCounts {
    pub fn new(max_age: Duration) -> Self {
        PendingCounts {
            max_age,
            queues: HashMap::new(),
        }
    }

    /// What a caller about to check `queue` at `now` does. A count is fresh
    /// while `now` is less than `max_age` after its reading began (a clock that
    /// went back makes it stale).
    pub fn look(&mut self, queue: &str, now: DateTime<Utc>) -> Look {
        let max_age = self.max_age;
        let e = self.queues.entry(queue.to_string()).or_default();
        let fresh = e
            .counted
            .is_some_and(|(at, _)| at <= now && (now - at).to_std().is_ok_and(|age| age < max_age));
        if fresh {
            return Look::Use;
        }
        match (e.refreshing, e.counted) {
            (Some(_), Some(_)) => Look::Use,
            (Some(_), None) => Look::Wait,
            (None, _) => {
                e.refreshing = Some(e.admitted);
                Look::Count
            }
        }
    }

    /// A count whose reading began at `at` found `held`. Admissions made while it
    /// was read are kept (they may be in it or not: counting them again errs on
    /// the side of refusing); leases made meanwhile are dropped for the same reason.
    pub fn counted(&mut self, queue: &str, at: DateTime<Utc>, held: Held) {
        let Some(e) = self.queues.get_mut(queue) else {
            return;
        };
        let before = e.refreshing.take().unwrap_or(e.admitted);
        e.admitted = e.admitted.minus(before);
        e.departed = Held::default();
        e.counted = Some((at, held));
    }

    /// The reading of a count failed (or was abandoned): the next caller reads one.
    pub fn count_failed(&mut self, queue: &str) {
        if let Some(e) = self.queues.get_mut(queue) {
            e.refreshing = None;
        }
    }

    /// The waiting tasks of `queue` as this broker sees them; `None` before its first count.
    pub fn view(&self, queue: &str) -> Option<Held> {
        self.queues.get(queue)?.view()
    }

    /// This broker admitted `add` to `queue` (a queue never counted is not tracked).
    pub fn admit(&mut self, queue: &str, add: Held) {
        if let Some(e) = self.queues.get_mut(queue) {
            e.admitted = e.admitted.plus(add);
        }
    }

    /// This broker leased `left` of `queue`'s waiting tasks.
    pub fn depart(&mut self, queue: &str, left: Held) {
        if let Some(e) = self.queues.get_mut(queue) {
            e.departed = e.departed.plus(left);
        }
    }

    /// Whether any queue is tracked (a lease of an untracked queue has nothing to report).
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    fn at(ms: i64) -> DateTime<Utc> {
        t0() + chrono::Duration::milliseconds(ms)
    }

    #[test]
    fn the_first_check_counts_and_later_ones_use_the_count_until_it_is_a_second_old() {
        let mut p = PendingCounts::default();
        assert_eq!(p.look("q", at(0)), Look::Count);
        p.counted("q", at(0), Held::new(5, 50));
        for ms in [0, 1, 500, 999] {
            assert_eq!(p.look("q", at(ms)), Look::Use, "at {ms} ms");
        }
        assert_eq!(p.view("q"), Some(Held::new(5, 50)));
        assert_eq!(p.look("q", at(1000)), Look::Count);
    }

    #[test]
    fn one_caller_counts_at_a_time_and_the_others_use_the_old_count() {
        let mut p = PendingCounts::default();
        assert_eq!(p.look("q", at(0)), Look::Count);
        // The first count not read yet: there is nothing to use.
        assert_eq!(p.look("q", at(0)), Look::Wait);
        p.counted("q", at(0), Held::new(3, 0));
        assert_eq!(p.look("q", at(1500)), Look::Count);
        assert_eq!(p.look("q", at(1500)), Look::Use);
        assert_eq!(p.look("q", at(1600)), Look::Use);
        assert_eq!(p.view("q"), Some(Held::new(3, 0)));
        // Other queues are counted on their own.
        assert_eq!(p.look("r", at(1600)), Look::Count);
    }

    #[test]
    fn a_failed_count_lets_the_next_caller_count() {
        let mut p = PendingCounts::default();
        assert_eq!(p.look("q", at(0)), Look::Count);
        p.count_failed("q");
        assert_eq!(p.look("q", at(0)), Look::Count);
    }

    #[test]
    fn the_view_adds_what_was_admitted_and_takes_off_what_was_leased() {
        let mut p = PendingCounts::default();
        // Not tracked before its first count.
        p.admit("q", Held::new(100, 100));
        assert_eq!(p.view("q"), None);
        assert_eq!(p.look("q", at(0)), Look::Count);
        p.counted("q", at(0), Held::new(10, 1000));
        p.admit("q", Held::new(2, 20));
        p.depart("q", Held::new(5, 500));
        assert_eq!(p.view("q"), Some(Held::new(7, 520)));
        // Never below zero.
        p.depart("q", Held::new(50, 5000));
        assert_eq!(p.view("q"), Some(Held::new(0, 0)));
    }

    #[test]
    fn a_new_count_keeps_admissions_made_while_it_was_read_and_drops_the_rest() {
        let mut p = PendingCounts::default();
        assert_eq!(p.look("q", at(0)), Look::Count);
        p.counted("q", at(0), Held::new(10, 0));
        p.admit("q", Held::new(4, 0));
        p.depart("q", Held::new(1, 0));
        assert_eq!(p.look("q", at(1000)), Look::Count);
        // While the count is read: one more admitted, one more leased.
        p.admit("q", Held::new(1, 0));
        p.depart("q", Held::new(1, 0));
        assert_eq!(p.view("q"), Some(Held::new(13, 0)));
        p.counted("q", at(1000), Held::new(20, 0));
        assert_eq!(p.view("q"), Some(Held::new(21, 0)));
        assert_eq!(p.look("q", at(1999)), Look::Use);
    }

    #[test]
    fn a_clock_that_went_back_makes_the_count_stale() {
        let mut p = PendingCounts::default();
        assert_eq!(p.look("q", at(5000)), Look::Count);
        p.counted("q", at(5000), Held::new(1, 0));
        assert_eq!(p.look("q", at(4000)), Look::Count);
    }

    #[test]
    fn large_values_saturate() {
        let mut p = PendingCounts::default();
        assert_eq!(p.look("q", at(0)), Look::Count);
        p.counted("q", at(0), Held::new(u64::MAX, u64::MAX));
        p.admit("q", Held::new(u64::MAX, 1));
        assert_eq!(p.view("q"), Some(Held::new(u64::MAX, u64::MAX)));
    }
}
