//! Parsers for the CLI's flag values: durations, times, states. Pure, so they are
//! tested without a broker; `now` is passed in.

use std::time::{Duration, SystemTime};

use crate::pb::TaskState;

/// `10s`, `5m`, `1h 30m`, `250ms`.
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 10s or 5m: {e}"))
}

/// An RFC 3339 time (`2030-01-02T15:04:05Z`, `...+02:00`) or a duration from `now`.
pub fn time_or_delay(s: &str, now: SystemTime) -> Result<SystemTime, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.into());
    }
    match humantime::parse_duration(s) {
        Ok(d) => Ok(now + d),
        Err(_) => Err(format!(
            "{s:?} is neither an RFC 3339 time (2030-01-02T15:04:05Z) nor a duration (10m)"
        )),
    }
}

/// An RFC 3339 time, or a duration meaning that long before `now` (for filters
/// on what already happened: `--created-after 1h`).
pub fn time_or_ago(s: &str, now: SystemTime) -> Result<SystemTime, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.into());
    }
    match humantime::parse_duration(s) {
        Ok(d) => now
            .checked_sub(d)
            .filter(|t| *t >= SystemTime::UNIX_EPOCH)
            .ok_or_else(|| format!("{s:?} reaches back before 1970")),
        Err(_) => Err(format!(
            "{s:?} is neither an RFC 3339 time (2030-01-02T15:04:05Z) nor a duration (10m)"
        )),
    }
}

/// A task state by its short name, any case: `ready`, `DEAD`.
pub fn state(s: &str) -> Result<TaskState, String> {
    let upper = s.trim().to_ascii_uppercase();
    let full = if upper.starts_with("TASK_STATE_") {
        upper
    } else {
        format!("TASK_STATE_{upper}")
    };
    match TaskState::from_str_name(&full) {
        Some(TaskState::Unspecified) | None => Err(format!(
            "{s:?} is not a state (scheduled, ready, leased, succeeded, dead, cancelled, blocked)"
        )),
        Some(state) => Ok(state),
    }
}

/// `name=value`.
pub fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not name=value")),
    }
}

/// `QUEUE:KEY` (the key may hold more colons).
pub fn queue_key(s: &str) -> Result<(String, String), String> {
    // QUEUE/KEY, as `explain` prints it: a queue name never holds `/`, so the
    // first one ends it and a key may hold more. QUEUE:KEY (split at the first
    // `:`) is read too when there is no `/`.
    let split = s.split_once('/').or_else(|| s.split_once(':'));
    match split {
        Some((q, k)) if !q.is_empty() && !k.is_empty() => Ok((q.to_string(), k.to_string())),
        _ => Err(format!("expected QUEUE/KEY, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_relative() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(
            time_or_delay("10m", now).unwrap(),
            now + Duration::from_secs(600)
        );
        let t = time_or_delay("1970-01-01T01:00:00+01:00", now).unwrap();
        assert_eq!(t, SystemTime::UNIX_EPOCH);
        assert!(time_or_delay("tomorrow", now).is_err());
        assert_eq!(duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(
            time_or_ago("10m", now).unwrap(),
            now - Duration::from_secs(600)
        );
        assert_eq!(
            time_or_ago("1970-01-01T00:00:05Z", now).unwrap(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(5)
        );
        assert!(time_or_ago("1h", now).is_err());
        assert!(time_or_ago("yesterday", now).is_err());
    }

    #[test]
    fn states_by_short_name_in_any_case() {
        assert_eq!(state("ready").unwrap(), TaskState::Ready);
        assert_eq!(state("DEAD").unwrap(), TaskState::Dead);
        assert_eq!(state("task_state_leased").unwrap(), TaskState::Leased);
        assert!(state("unspecified").is_err());
        assert!(state("done").is_err());
        assert_eq!(key_value("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(key_value("=x").is_err());
    }

    #[test]
    fn a_queue_key_is_queue_slash_key_as_explain_prints_it() {
        let qk = |q: &str, k: &str| (q.to_string(), k.to_string());
        assert_eq!(queue_key("billing/inv-1").unwrap(), qk("billing", "inv-1"));
        assert_eq!(queue_key("ns:q/a/b:c").unwrap(), qk("ns:q", "a/b:c"));
        assert_eq!(queue_key("billing:inv-1").unwrap(), qk("billing", "inv-1"));
        assert!(queue_key("billing/").is_err());
        assert!(queue_key("/inv-1").is_err());
        assert!(queue_key("billing").is_err());
    }
}
