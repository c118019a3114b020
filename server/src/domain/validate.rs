//! Input validation with the field named in every error. Limits are configurable;
//! the defaults are the documented minimum ranges.

use std::time::Duration;

/// The longest cooldown a worker may set unless the configuration says otherwise.
pub const DEFAULT_MAX_COOLDOWN: Duration = Duration::from_secs(3600);

/// A rejected input: which field and why. `too_large` marks size limits, which
/// answer RESOURCE_EXHAUSTED instead of INVALID_ARGUMENT.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    pub field: String,
    pub message: String,
    pub too_large: bool,
}

impl Invalid {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid {
            field: field.into(),
            message: message.into(),
            too_large: false,
        }
    }

    pub fn too_large(field: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid {
            too_large: true,
            ..Invalid::new(field, message)
        }
    }
}

/// Accepted ranges for requests.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Tasks in one Submit (1..=max). Default 1000.
    pub max_submit_batch: usize,
    /// Payload bytes per task. Default 1 MiB.
    pub max_payload_bytes: usize,
    /// Checkpoint bytes. Default 1 MiB.
    pub max_checkpoint_bytes: usize,
    /// Result bytes. Default 1 MiB.
    pub max_result_bytes: usize,
    /// Lease durations and extensions. Default 1 s to 24 h.
    pub min_lease: Duration,
    pub max_lease: Duration,
    /// Default lease duration when a Lease names none. Default 30 s.
    pub default_lease: Duration,
    /// Longest long poll. Default 60 s.
    pub max_wait: Duration,
    /// Tasks per Lease. Default 1000 (the reply budget still cuts a reply short).
    pub max_lease_batch: u32,
    /// Bytes one Lease reply encodes to at most (each task counted by the bound
    /// of `domain::reply`); it always holds at least one task. Default 4 MiB,
    /// the default receive limit of gRPC clients: a larger reply would be
    /// leased but never decoded.
    pub max_lease_reply_bytes: usize,
    /// Leases per Heartbeat. Default 1000.
    pub max_heartbeat_batch: usize,
    /// Attempts a retry policy may allow. Default 1000.
    pub max_attempts: u32,
    /// Longest backoff a retry policy may ask for. Default 7 days.
    pub max_backoff: Duration,
    /// Longest cooldown a worker's Fail may set. Default 1 h.
    pub max_cooldown: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_submit_batch: 1000,
            max_payload_bytes: 1 << 20,
            max_checkpoint_bytes: 1 << 20,
            max_result_bytes: 1 << 20,
            min_lease: Duration::from_secs(1),
            max_lease: Duration::from_secs(24 * 3600),
            default_lease: Duration::from_secs(30),
            max_wait: Duration::from_secs(60),
            max_lease_batch: 1000,
            max_lease_reply_bytes: 4 << 20,
            max_heartbeat_batch: 1000,
            max_attempts: 1000,
            max_backoff: Duration::from_secs(7 * 24 * 3600),
            max_cooldown: DEFAULT_MAX_COOLDOWN,
        }
    }
}

/// `[A-Za-z0-9._:-]{1,128}`.
pub fn queue_name(field: &str, queue: &str) -> Result<(), Invalid> {
    if queue.is_empty() {
        return Err(Invalid::new(field, "is required"));
    }
    if queue.len() > 128 {
        return Err(Invalid::new(field, "is longer than 128 characters"));
    }
    if !queue
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(Invalid::new(field, "may only contain A-Z a-z 0-9 . _ : -"));
    }
    Ok(())
}

/// A required, bounded identifier such as a worker id, task id, key or lease
/// token, with no control characters (NUL among them, which Postgres `text`
/// refuses: one such value would fail every request combined with it).
pub fn identifier(field: &str, value: &str, max_len: usize) -> Result<(), Invalid> {
    if value.is_empty() {
        return Err(Invalid::new(field, "is required"));
    }
    if value.len() > max_len {
        return Err(Invalid::new(
            field,
            format!("is longer than {max_len} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Invalid::new(field, "must not contain control characters"));
    }
    Ok(())
}

/// Free text (an error message) made storable: NUL, which Postgres `text`
/// refuses, becomes U+FFFD; everything else is kept.
pub fn storable_text(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text
    }
}

/// A byte field under its size limit.
pub fn size(field: &str, len: usize, max: usize) -> Result<(), Invalid> {
    if len > max {
        return Err(Invalid::too_large(
            field,
            format!("is {len} bytes, more than the limit of {max}"),
        ));
    }
    Ok(())
}

/// A duration inside `[min, max]`.
pub fn duration_in(field: &str, d: Duration, min: Duration, max: Duration) -> Result<(), Invalid> {
    if d < min || d > max {
        return Err(Invalid::new(
            field,
            format!(
                "must be between {} and {}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_follow_the_pattern() {
        assert!(queue_name("q", "emails.v2:high-prio_1").is_ok());
        assert_eq!(queue_name("q", "").unwrap_err().message, "is required");
        assert!(queue_name("q", "has space").is_err());
        assert!(queue_name("q", "é").is_err());
        assert!(queue_name("q", &"a".repeat(128)).is_ok());
        assert!(queue_name("q", &"a".repeat(129)).is_err());
    }

    #[test]
    fn identifiers_refuse_control_characters() {
        assert!(identifier("key", "order:42/é", 64).is_ok());
        for bad in ["a\0b", "tab\there", "new\nline", "\u{7f}", "\u{85}"] {
            let e = identifier("tasks[0].key", bad, 64).unwrap_err();
            assert_eq!(e.field, "tasks[0].key");
            assert_eq!(e.message, "must not contain control characters");
        }
        assert_eq!(storable_text("a\0b\nc".into()), "a\u{FFFD}b\nc");
    }

    #[test]
    fn size_limits_are_marked_too_large() {
        let e = size("tasks[0].payload", 11, 10).unwrap_err();
        assert!(e.too_large);
        assert_eq!(e.field, "tasks[0].payload");
        assert!(size("p", 10, 10).is_ok());
    }
}
