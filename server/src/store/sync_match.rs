//! Sync match: a new task inserted already leased to a long-poll that
//! waits for its queue, in the insert's own statement and commit, instead of an
//! insert now and a lease statement later.
//!
//! What every store shares: the request a task is matched to ([`MatchTo`]), which
//! matches of a batch may stand at all ([`matches_in_lease_order`], pure), and
//! the record of a task inserted leased ([`leased_row`]). The rule the stores add
//! inside their one transaction: a matched task is leased only if no pending task
//! of its queue that is due at `now` has a priority as high or higher (such a
//! task would lease first); otherwise it is inserted pending like any other.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::row::IntoRecord;
use super::row::{TaskRow, duration_ms, ms};
use super::{Inserted, NewTask, StoreResult, TaskRecord};
use crate::domain::routing::TaskRouting;

/// The waiting lease request a new task is inserted leased to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchTo {
    pub worker_id: String,
    pub worker_address: String,
    pub lease_duration: Duration,
}

/// One task of `task_insert_matched`: as `task_insert_many` answers, and the
/// task as leased when it was inserted leased to its match.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchedInsert {
    pub inserted: Inserted,
    pub leased: Option<TaskRecord>,
}

/// Which of `matches` may stand, before the database is asked: a task can be
/// matched only if it is due at `now` and carries no routing (a target, a sticky
/// policy or a fan-out group is left to the lease statement), and, within its
/// queue, only if every task of the batch that would lease before it (due at
/// `now`, earlier in lease order) is matched too. So the matched tasks of a
/// queue are the head of the batch's tasks in lease order, and none of the
/// batch's pending tasks would lease before them.
pub fn matches_in_lease_order(
    tasks: &[NewTask],
    matches: &[Option<MatchTo>],
    now: DateTime<Utc>,
) -> Vec<bool> {
    let mut ok: Vec<bool> = tasks
        .iter()
        .zip(matches.iter().chain(std::iter::repeat(&None)))
        .map(|(t, m)| m.is_some() && due(t, now) && t.routing == TaskRouting::default())
        .collect();
    let mut closed: Vec<&str> = Vec::new();
    for i in lease_order(tasks, now) {
        let queue = tasks[i].queue.as_str();
        if closed.contains(&queue) {
            ok[i] = false;
        } else if !ok[i] {
            // A pending task of the batch: nothing behind it in its queue may
            // be leased ahead of it.
            closed.push(queue);
        }
    }
    ok
}

pub use crate::domain::model::batch_lease_order as lease_order;
use crate::domain::model::due;

/// The row of `t` inserted leased to `m` at `now`, with the sequence number,
/// lease token and expiry the database gave it (the record `task_get` reads).
pub(crate) fn leased_row(
    t: &NewTask,
    m: &MatchTo,
    seq: i64,
    lease_token: String,
    lease_expires_at: i64,
    now: DateTime<Utc>,
) -> StoreResult<TaskRecord> {
    let now = ms(now);
    TaskRow {
        seq,
        id: t.id.clone(),
        queue: t.queue.clone(),
        key: t.key.clone(),
        payload: t.payload.clone(),
        priority: i64::from(t.priority),
        run_at: ms(t.run_at),
        deadline: t.deadline.map(ms),
        state: "leased".into(),
        attempt: 1,
        max_attempts: i64::from(t.retry.max_attempts),
        attempts_allowed: i64::from(t.retry.max_attempts),
        initial_backoff_ms: duration_ms(t.retry.initial_backoff),
        backoff_multiplier: t.retry.backoff_multiplier,
        max_backoff_ms: duration_ms(t.retry.max_backoff),
        jitter: t.retry.jitter,
        metadata: metadata_json(t),
        created_at: now,
        updated_at: now,
        last_error: None,
        checkpoint: t.checkpoint.clone(),
        result: None,
        leased_by: Some(m.worker_id.clone()),
        lease_token: Some(lease_token),
        lease_duration_ms: Some(duration_ms(m.lease_duration)),
        lease_expires_at: Some(lease_expires_at),
        fencing_token: 1,
        finished_at: None,
        cancel_requested: false,
        leased_at: Some(now),
        leased_address: Some(m.worker_address.clone()),
        schedule_id: None,
        fire_time: None,
        target_worker: None,
        target_labels: None,
        sticky: None,
        sticky_timeout_ms: None,
        reserved_for: None,
        reserved_until: None,
        fanout_group: None,
        fanout_distinct: false,
        concurrency_key: t.concurrency_key.clone(),
        // Flow: a task with a retry schedule takes the flow insert, never this.
        retry_schedule: None,
    }
    .into_record()
}

/// The metadata column of a new task, as every store writes it.
pub(crate) fn metadata_json(t: &NewTask) -> String {
    serde_json::to_string(&t.metadata).unwrap_or_else(|_| "{}".into())
}

/// When a lease taken at `now` for `m` expires: after its duration, or at the
/// task's deadline if that comes first (as the lease statements compute it).
pub(crate) fn lease_expiry(t: &NewTask, m: &MatchTo, now: DateTime<Utc>) -> i64 {
    let end = ms(now).saturating_add(duration_ms(m.lease_duration));
    t.deadline.map_or(end, |d| end.min(ms(d)))
}

impl MatchedInsert {
    /// A task not inserted: `task_id` already holds its (queue, key).
    pub(crate) fn duplicate(task_id: String) -> Self {
        MatchedInsert {
            inserted: Inserted {
                task_id,
                deduplicated: true,
            },
            leased: None,
        }
    }

    /// A task inserted (`leased`: as leased to its match, when it was).
    pub(crate) fn made(task_id: String, leased: Option<TaskRecord>) -> Self {
        MatchedInsert {
            inserted: Inserted {
                task_id,
                deduplicated: false,
            },
            leased,
        }
    }
}

/// The events of `t` inserted leased to `m` at `now` (ms), as an insert and a
/// lease would record them: SUBMITTED, then LEASED.
pub(crate) fn matched_events<'a>(
    t: &'a NewTask,
    m: &'a MatchTo,
    now: i64,
) -> [super::flow::Ev<'a>; 2] {
    use crate::domain::event::EventKind;
    let ev = |kind, state, attempt, worker| super::flow::Ev {
        task_id: &t.id,
        queue: &t.queue,
        kind,
        state,
        attempt,
        worker,
        time: now,
        detail: None,
    };
    [
        ev(
            EventKind::Submitted,
            super::flow::visible("pending", ms(t.run_at), now),
            0,
            None,
        ),
        ev(EventKind::Leased, "leased", 1, Some(m.worker_id.as_str())),
    ]
}

/// The match task `i` of the batch goes to, if any: one that stands in lease
/// order (`stands`, see [`matches_in_lease_order`]) and that no READY task of
/// its queue outranks (`top`: each queue's highest READY priority, read
/// before the insert). Else the task is inserted as any other.
pub(crate) fn match_of<'m>(
    matches: &'m [Option<MatchTo>],
    stands: &[bool],
    top: &std::collections::HashMap<&str, Option<i64>>,
    i: usize,
    t: &NewTask,
) -> Option<&'m MatchTo> {
    matches
        .get(i)
        .and_then(Option::as_ref)
        .filter(|_| stands[i])
        .filter(|_| {
            top.get(t.queue.as_str())
                .copied()
                .flatten()
                .is_none_or(|p| p < i64::from(t.priority))
        })
}

/// The queues of the batch's standing matches (see [`match_of`]), each once,
/// in the batch's order: whose highest READY priority is read before the
/// batch inserts anything.
pub(crate) fn matched_queues<'t>(tasks: &'t [NewTask], stands: &[bool]) -> Vec<&'t str> {
    let mut queues: Vec<&str> = Vec::new();
    for (t, _) in tasks.iter().zip(stands).filter(|(_, s)| **s) {
        if !queues.contains(&t.queue.as_str()) {
            queues.push(t.queue.as_str());
        }
    }
    queues
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::RetryPolicy;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn t(queue: &str, priority: i32) -> NewTask {
        NewTask {
            id: String::new(),
            queue: queue.into(),
            key: None,
            payload: Vec::new(),
            priority,
            run_at: at(0),
            deadline: None,
            retry: RetryPolicy::default(),
            metadata: Default::default(),
            routing: TaskRouting::default(),
            concurrency_key: None,
            checkpoint: None,
        }
    }

    fn m() -> Option<MatchTo> {
        Some(MatchTo {
            worker_id: "w".into(),
            worker_address: String::new(),
            lease_duration: Duration::from_secs(30),
        })
    }

    #[test]
    fn the_matched_head_of_each_queue_stands() {
        let tasks = [t("a", 0), t("a", 0), t("b", 0), t("a", 0)];
        let got = matches_in_lease_order(&tasks, &[m(), m(), m(), None], at(0));
        assert_eq!(got, [true, true, true, false]);
    }

    #[test]
    fn a_match_behind_a_pending_task_of_its_queue_falls() {
        // The unmatched first task would lease before the second.
        let tasks = [t("a", 0), t("a", 0), t("b", 0)];
        let got = matches_in_lease_order(&tasks, &[None, m(), m()], at(0));
        assert_eq!(got, [false, false, true]);
        // A higher priority leases first, wherever it is in the batch.
        let tasks = [t("a", 0), t("a", 5)];
        assert_eq!(
            matches_in_lease_order(&tasks, &[m(), None], at(0)),
            [false, false]
        );
        assert_eq!(
            matches_in_lease_order(&tasks, &[None, m()], at(0)),
            [false, true]
        );
    }

    #[test]
    fn scheduled_and_routed_tasks_are_not_matched() {
        let later = NewTask {
            run_at: at(10),
            ..t("a", 9)
        };
        let routed = NewTask {
            routing: TaskRouting {
                sticky: Some(crate::domain::routing::Sticky::Hard),
                ..TaskRouting::default()
            },
            ..t("b", 0)
        };
        let tasks = [later, t("a", 0), routed, t("b", 0)];
        let got = matches_in_lease_order(&tasks, &[m(), m(), m(), m()], at(0));
        // A scheduled task does not hold the queue's due tasks back; a routed
        // one is pending and does.
        assert_eq!(got, [false, true, false, false]);
    }
}
