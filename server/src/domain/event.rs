//! Flow: the kinds of task events, as stored (`task_events.kind`) and named
//! in the API (`TaskEventKind`).

/// What happened to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Submitted,
    Leased,
    HeartbeatLost,
    Checkpointed,
    Failed,
    RetryScheduled,
    Succeeded,
    Dead,
    Cancelled,
    Requeued,
    Updated,
    Unblocked,
    /// REPLACE_WAITING: a later submission with the same key rewrote the waiting task.
    Replaced,
}

impl EventKind {
    pub const ALL: [EventKind; 13] = [
        EventKind::Submitted,
        EventKind::Leased,
        EventKind::HeartbeatLost,
        EventKind::Checkpointed,
        EventKind::Failed,
        EventKind::RetryScheduled,
        EventKind::Succeeded,
        EventKind::Dead,
        EventKind::Cancelled,
        EventKind::Requeued,
        EventKind::Updated,
        EventKind::Unblocked,
        EventKind::Replaced,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Submitted => "submitted",
            EventKind::Leased => "leased",
            EventKind::HeartbeatLost => "heartbeat_lost",
            EventKind::Checkpointed => "checkpointed",
            EventKind::Failed => "failed",
            EventKind::RetryScheduled => "retry_scheduled",
            EventKind::Succeeded => "succeeded",
            EventKind::Dead => "dead",
            EventKind::Cancelled => "cancelled",
            EventKind::Requeued => "requeued",
            EventKind::Updated => "updated",
            EventKind::Unblocked => "unblocked",
            EventKind::Replaced => "replaced",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Parses a stored visible state (`task_events.state`).
pub fn parse_visible_state(s: &str) -> Option<super::TaskState> {
    use super::TaskState as S;
    Some(match s {
        "scheduled" => S::Scheduled,
        "ready" => S::Ready,
        "leased" => S::Leased,
        "succeeded" => S::Succeeded,
        "dead" => S::Dead,
        "cancelled" => S::Cancelled,
        "blocked" => S::Blocked,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(EventKind::parse("nope"), None);
    }
}
