//! Task states and the state transitions that several stores share.

use chrono::{DateTime, Utc};

/// The state column as stored. SCHEDULED and READY are one stored state (`pending`)
/// told apart by comparing `run_at` with `now`, so no job has to promote tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredState {
    Pending,
    Leased,
    Succeeded,
    Dead,
    Cancelled,
    /// Flow: waiting for its dependencies (migration 0010).
    Blocked,
}

impl StoredState {
    pub fn as_str(self) -> &'static str {
        match self {
            StoredState::Pending => "pending",
            StoredState::Leased => "leased",
            StoredState::Succeeded => "succeeded",
            StoredState::Dead => "dead",
            StoredState::Cancelled => "cancelled",
            StoredState::Blocked => "blocked",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => StoredState::Pending,
            "leased" => StoredState::Leased,
            "succeeded" => StoredState::Succeeded,
            "dead" => StoredState::Dead,
            "cancelled" => StoredState::Cancelled,
            "blocked" => StoredState::Blocked,
            _ => return None,
        })
    }

    pub fn is_finished(self) -> bool {
        matches!(
            self,
            StoredState::Succeeded | StoredState::Dead | StoredState::Cancelled
        )
    }
}

/// The state a client sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    Scheduled,
    Ready,
    Leased,
    Succeeded,
    Dead,
    Cancelled,
    /// Flow: waiting for its dependencies.
    Blocked,
}

impl TaskState {
    /// The visible state of a stored task at `now`.
    pub fn of(stored: StoredState, run_at: DateTime<Utc>, now: DateTime<Utc>) -> Self {
        match stored {
            StoredState::Pending if run_at > now => TaskState::Scheduled,
            StoredState::Pending => TaskState::Ready,
            StoredState::Leased => TaskState::Leased,
            StoredState::Succeeded => TaskState::Succeeded,
            StoredState::Dead => TaskState::Dead,
            StoredState::Cancelled => TaskState::Cancelled,
            StoredState::Blocked => TaskState::Blocked,
        }
    }
}

/// How one attempt (one lease) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Running,
    Succeeded,
    Failed,
    LeaseExpired,
    DeadlineExceeded,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Running => "running",
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::LeaseExpired => "lease_expired",
            AttemptOutcome::DeadlineExceeded => "deadline_exceeded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => AttemptOutcome::Running,
            "succeeded" => AttemptOutcome::Succeeded,
            "failed" => AttemptOutcome::Failed,
            "lease_expired" => AttemptOutcome::LeaseExpired,
            "deadline_exceeded" => AttemptOutcome::DeadlineExceeded,
            _ => return None,
        })
    }
}

/// Where a task goes after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureDecision {
    /// Retry: pending again, not before `run_at`.
    Retry { run_at: DateTime<Utc> },
    /// Failed for good.
    Dead,
    /// An operator asked to cancel it while it ran.
    Cancelled,
}

impl FailureDecision {
    pub fn stored_state(self) -> StoredState {
        match self {
            FailureDecision::Retry { .. } => StoredState::Pending,
            FailureDecision::Dead => StoredState::Dead,
            FailureDecision::Cancelled => StoredState::Cancelled,
        }
    }

    pub fn run_at(self) -> Option<DateTime<Utc>> {
        match self {
            FailureDecision::Retry { run_at } => Some(run_at),
            _ => None,
        }
    }
}

/// What a Complete or Fail with a given lease token may do to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleCheck {
    /// The token holds a live lease: settle it.
    Proceed,
    /// The same report was already applied with this token: answer OK, change nothing.
    AlreadySettled,
    /// The token holds no lease.
    LeaseLost,
}

/// Which report a worker is making.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    Complete,
    Fail,
}

/// Decides whether a report with `token` may settle the task, given the task's
/// state, its current lease token and expiry, and how its latest attempt ended.
/// A lease is valid until `lease_expires_at`, whether or not the reaper has run.
pub fn settle_check(
    state: StoredState,
    task_token: Option<&str>,
    lease_expires_at: Option<DateTime<Utc>>,
    latest_outcome: Option<AttemptOutcome>,
    report: Report,
    token: &str,
    now: DateTime<Utc>,
) -> SettleCheck {
    if task_token != Some(token) {
        return SettleCheck::LeaseLost;
    }
    if state == StoredState::Leased {
        return match lease_expires_at {
            Some(at) if at > now => SettleCheck::Proceed,
            _ => SettleCheck::LeaseLost,
        };
    }
    match (report, latest_outcome) {
        (Report::Complete, Some(AttemptOutcome::Succeeded)) => SettleCheck::AlreadySettled,
        (Report::Fail, Some(AttemptOutcome::Failed)) => SettleCheck::AlreadySettled,
        _ => SettleCheck::LeaseLost,
    }
}

/// Whether a lease is live for heartbeat and checkpoint purposes.
pub fn lease_is_live(
    state: StoredState,
    task_token: Option<&str>,
    lease_expires_at: Option<DateTime<Utc>>,
    token: &str,
    now: DateTime<Utc>,
) -> bool {
    state == StoredState::Leased
        && task_token == Some(token)
        && lease_expires_at.is_some_and(|at| at > now)
}

/// The metadata entry that names the producer of a task submitted with a
/// producer token (set by the API layer, read back to enforce ownership).
pub const PRODUCER_KEY: &str = "taskbroker.producer";

/// The metadata entry that marks an at-most-once task (set by the broker from
/// TaskSpec.at_most_once; a caller may not set it itself).
pub const AT_MOST_ONCE_KEY: &str = "taskbroker.at_most_once";

/// True for a task submitted with `at_most_once`: one attempt, never retried.
pub fn is_at_most_once(metadata: &std::collections::BTreeMap<String, String>) -> bool {
    metadata.get(AT_MOST_ONCE_KEY).map(String::as_str) == Some("true")
}

/// The metadata entry that marks a task submitted with dependencies (set by
/// the broker; a caller may not set it itself). A lease reads the results of
/// the dependencies of these tasks only, so a task without dependencies costs
/// the lease nothing more.
pub const DEPENDENCIES_KEY: &str = "taskbroker.dependencies";

/// True for a task submitted with dependencies (depends_on, depends_on_index
/// or depends_on_keys).
pub fn has_dependencies(metadata: &std::collections::BTreeMap<String, String>) -> bool {
    metadata.get(DEPENDENCIES_KEY).map(String::as_str) == Some("true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(s, 0).unwrap()
    }

    #[test]
    fn pending_task_is_scheduled_until_run_at() {
        assert_eq!(
            TaskState::of(StoredState::Pending, t(10), t(9)),
            TaskState::Scheduled
        );
        assert_eq!(
            TaskState::of(StoredState::Pending, t(10), t(10)),
            TaskState::Ready
        );
    }

    #[test]
    fn live_lease_settles_and_expired_lease_is_lost() {
        let check = |expires, now| {
            settle_check(
                StoredState::Leased,
                Some("tok"),
                Some(t(expires)),
                Some(AttemptOutcome::Running),
                Report::Complete,
                "tok",
                t(now),
            )
        };
        assert_eq!(check(10, 9), SettleCheck::Proceed);
        assert_eq!(check(10, 10), SettleCheck::LeaseLost);
    }

    #[test]
    fn repeated_report_with_settling_token_is_idempotent() {
        let c = settle_check(
            StoredState::Succeeded,
            Some("tok"),
            None,
            Some(AttemptOutcome::Succeeded),
            Report::Complete,
            "tok",
            t(0),
        );
        assert_eq!(c, SettleCheck::AlreadySettled);
        let f = settle_check(
            StoredState::Pending,
            Some("tok"),
            None,
            Some(AttemptOutcome::Failed),
            Report::Fail,
            "tok",
            t(0),
        );
        assert_eq!(f, SettleCheck::AlreadySettled);
        // A Fail after the lease expired was not applied: the lease is lost.
        let expired = settle_check(
            StoredState::Pending,
            Some("tok"),
            None,
            Some(AttemptOutcome::LeaseExpired),
            Report::Fail,
            "tok",
            t(0),
        );
        assert_eq!(expired, SettleCheck::LeaseLost);
        // A Complete after a Fail with the same token is not the same report.
        let mixed = settle_check(
            StoredState::Pending,
            Some("tok"),
            None,
            Some(AttemptOutcome::Failed),
            Report::Complete,
            "tok",
            t(0),
        );
        assert_eq!(mixed, SettleCheck::LeaseLost);
    }

    #[test]
    fn other_token_is_lost() {
        let c = settle_check(
            StoredState::Leased,
            Some("new"),
            Some(t(100)),
            Some(AttemptOutcome::Running),
            Report::Fail,
            "old",
            t(0),
        );
        assert_eq!(c, SettleCheck::LeaseLost);
    }
}
