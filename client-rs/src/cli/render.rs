//! How the CLI shows tasks, attempts and stats: aligned tables and `key  value`
//! blocks for people, JSON for scripts. Pure: strings in, strings out.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::pb;
use crate::time::{from_proto_duration, from_proto_timestamp};
use crate::{TaskState, state_name};

/// Columns padded to their widest cell, two spaces apart; no trailing spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let head: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&head).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            let pad = widths[i] - cell.chars().count() + 2;
            line.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(super) fn time(t: &Option<prost_types::Timestamp>) -> String {
    from_proto_timestamp(t.as_ref())
        .map(|t| humantime::format_rfc3339_seconds(t).to_string())
        .unwrap_or_default()
}

pub(super) fn time_json(t: &Option<prost_types::Timestamp>) -> Value {
    from_proto_timestamp(t.as_ref())
        .map(|t| Value::String(humantime::format_rfc3339_millis(t).to_string()))
        .unwrap_or(Value::Null)
}

/// Text when the bytes are UTF-8 without control characters, else `base64:...`.
fn bytes_text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') => s.to_string(),
        _ => format!("base64:{}", STANDARD.encode(b)),
    }
}

/// A string when UTF-8, else `{"base64": "..."}`.
fn bytes_json(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_string()),
        Err(_) => json!({ "base64": STANDARD.encode(b) }),
    }
}

/// At most `max` characters of the first line.
fn clip(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > max || line.len() < s.len() {
        let cut: String = line.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    } else {
        line.to_string()
    }
}

pub fn state(s: i32) -> &'static str {
    state_name(TaskState::try_from(s).unwrap_or(TaskState::Unspecified))
}

pub fn task_rows(tasks: &[pb::Task]) -> String {
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                t.queue.clone(),
                state(t.state).to_string(),
                format!("{}/{}", t.attempt, t.max_attempts),
                t.priority.to_string(),
                t.key.clone(),
                time(&t.created_at),
                clip(&t.last_error, 40),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "QUEUE",
            "STATE",
            "ATTEMPT",
            "PRIORITY",
            "KEY",
            "CREATED",
            "LAST ERROR",
        ],
        &rows,
    )
}

pub fn task_json(t: &pb::Task) -> Value {
    let retry = t.retry.clone().unwrap_or_default();
    let secs = |d: &Option<prost_types::Duration>| {
        from_proto_duration(d.as_ref()).map(|d| d.as_secs_f64())
    };
    json!({
        "id": t.id,
        "queue": t.queue,
        "state": state(t.state),
        "attempt": t.attempt,
        "max_attempts": t.max_attempts,
        "priority": t.priority,
        "key": t.key,
        "payload": bytes_json(&t.payload),
        "metadata": t.metadata,
        "run_at": time_json(&t.run_at),
        "deadline": time_json(&t.deadline),
        "created_at": time_json(&t.created_at),
        "updated_at": time_json(&t.updated_at),
        "finished_at": time_json(&t.finished_at),
        "leased_by": t.leased_by,
        "lease_expires_at": time_json(&t.lease_expires_at),
        "cancel_requested": t.cancel_requested,
        "fencing_token": t.fencing_token,
        "last_error": t.last_error,
        "checkpoint": if t.has_checkpoint { bytes_json(&t.checkpoint) } else { Value::Null },
        "result": bytes_json(&t.result),
        "retry": {
            "max_attempts": retry.max_attempts,
            "initial_backoff_secs": secs(&retry.initial_backoff),
            "backoff_multiplier": retry.backoff_multiplier,
            "max_backoff_secs": secs(&retry.max_backoff),
            "jitter": retry.jitter,
            "schedule_secs": retry.schedule.iter().map(|d| secs(&Some(*d))).collect::<Vec<_>>(),
        },
        "schedule_id": t.schedule_id,
        "fire_time": time_json(&t.fire_time),
        "target": t.target.as_ref().map(|g| json!({
            "worker_id": g.worker_id,
            "labels": g.labels,
        })),
        "fanout_group": t.fanout_group,
        "reserved_for": t.reserved_for,
        "concurrency_key": t.concurrency_key,
        "depends_on": t.depends_on,
        "depends_on_keys": t.depends_on_keys.iter().map(|k| format!("{}/{}", k.queue, k.key)).collect::<Vec<_>>(),
        "dependencies_remaining": t.dependencies_remaining,
        "run_if_dependency_fails": t.run_if_dependency_fails,
        "at_most_once": t.at_most_once,
    })
}

/// Who holds the task's lease; for a finished task, who held the last one. A
/// waiting task (also one requeued or retried) has no lessee.
fn lessee(t: &pb::Task) -> (&'static str, String) {
    use TaskState as S;
    match S::try_from(t.state).unwrap_or(S::Unspecified) {
        S::Leased => ("leased by", t.leased_by.clone()),
        S::Succeeded | S::Dead | S::Cancelled => ("last leased by", t.leased_by.clone()),
        _ => ("leased by", String::new()),
    }
}

/// `name  value` lines for one task; empty values are left out.
pub fn task_detail(t: &pb::Task) -> String {
    let mut lines: Vec<(&str, String)> = vec![
        ("id", t.id.clone()),
        ("queue", t.queue.clone()),
        ("state", state(t.state).to_string()),
        ("attempt", format!("{} of {}", t.attempt, t.max_attempts)),
        ("priority", t.priority.to_string()),
        ("key", t.key.clone()),
        ("created", time(&t.created_at)),
        ("updated", time(&t.updated_at)),
        ("run at", time(&t.run_at)),
        ("deadline", time(&t.deadline)),
        ("finished", time(&t.finished_at)),
        lessee(t),
        ("lease expires", time(&t.lease_expires_at)),
        (
            "cancel requested",
            if t.cancel_requested {
                "yes".into()
            } else {
                String::new()
            },
        ),
        (
            "fencing token",
            if t.fencing_token > 0 {
                t.fencing_token.to_string()
            } else {
                String::new()
            },
        ),
        ("last error", t.last_error.clone()),
        ("payload", bytes_text(&t.payload)),
        (
            "checkpoint",
            if t.has_checkpoint {
                bytes_text(&t.checkpoint)
            } else {
                String::new()
            },
        ),
        ("result", bytes_text(&t.result)),
    ];
    let yes = |b: bool| if b { "yes".to_string() } else { String::new() };
    lines.push(("schedule", t.schedule_id.clone()));
    lines.push(("fire time", time(&t.fire_time)));
    if let Some(g) = &t.target {
        lines.push(("target worker", g.worker_id.clone()));
        let mut labels: Vec<String> = g.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        lines.push(("target labels", labels.join(",")));
    }
    lines.push(("fan-out group", t.fanout_group.clone()));
    lines.push(("reserved for", t.reserved_for.clone()));
    lines.push(("concurrency key", t.concurrency_key.clone()));
    lines.push(("depends on", t.depends_on.join(",")));
    let keys: Vec<String> = t
        .depends_on_keys
        .iter()
        .map(|k| format!("{}/{}", k.queue, k.key))
        .collect();
    lines.push(("depends on keys", keys.join(",")));
    if t.dependencies_remaining > 0 {
        lines.push((
            "waiting for",
            format!("{} dependencies", t.dependencies_remaining),
        ));
    }
    lines.push(("run if dep fails", yes(t.run_if_dependency_fails)));
    lines.push(("at most once", yes(t.at_most_once)));
    if let Some(r) = &t.retry
        && !r.schedule.is_empty()
    {
        let s: Vec<String> = r
            .schedule
            .iter()
            .filter_map(|d| from_proto_duration(Some(d)))
            .map(|d| humantime::format_duration(d).to_string())
            .collect();
        lines.push(("retry schedule", s.join(",")));
    }
    for (k, v) in &t.metadata {
        lines.push(("metadata", format!("{k}={v}")));
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in lines.into_iter().filter(|(_, v)| !v.is_empty()) {
        out.push_str(&format!("{k:<width$}  {v}\n"));
    }
    out
}

fn outcome(o: i32) -> &'static str {
    let full = pb::AttemptOutcome::try_from(o)
        .unwrap_or(pb::AttemptOutcome::Unspecified)
        .as_str_name();
    full.strip_prefix("ATTEMPT_OUTCOME_").unwrap_or(full)
}

pub fn attempt_rows(attempts: &[pb::Attempt]) -> String {
    let rows: Vec<Vec<String>> = attempts
        .iter()
        .map(|a| {
            vec![
                a.attempt.to_string(),
                outcome(a.outcome).to_string(),
                a.worker_id.clone(),
                a.worker_address.clone(),
                time(&a.leased_at),
                time(&a.finished_at),
                a.fencing_token.to_string(),
                clip(&a.error, 60),
            ]
        })
        .collect();
    table(
        &[
            "ATTEMPT", "OUTCOME", "WORKER", "ADDRESS", "LEASED", "FINISHED", "FENCING", "ERROR",
        ],
        &rows,
    )
}

pub fn attempt_json(a: &pb::Attempt) -> Value {
    json!({
        "attempt": a.attempt,
        "outcome": outcome(a.outcome),
        "worker_id": a.worker_id,
        "worker_address": a.worker_address,
        "leased_at": time_json(&a.leased_at),
        "finished_at": time_json(&a.finished_at),
        "fencing_token": a.fencing_token,
        "error": a.error,
    })
}

fn age(d: &Option<prost_types::Duration>) -> String {
    match from_proto_duration(d.as_ref()) {
        Some(d) if !d.is_zero() => {
            humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
        }
        _ => "-".into(),
    }
}

pub fn stats_rows(stats: &[pb::QueueStats]) -> String {
    let rows: Vec<Vec<String>> = stats
        .iter()
        .map(|s| {
            vec![
                s.queue.clone(),
                s.scheduled.to_string(),
                s.ready.to_string(),
                s.leased.to_string(),
                s.succeeded.to_string(),
                s.dead.to_string(),
                s.cancelled.to_string(),
                age(&s.oldest_ready_age),
                s.completed_last_minute.to_string(),
                s.failed_last_minute.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "QUEUE",
            "SCHEDULED",
            "READY",
            "LEASED",
            "SUCCEEDED",
            "DEAD",
            "CANCELLED",
            "OLDEST READY",
            "DONE/MIN",
            "FAILED/MIN",
        ],
        &rows,
    )
}

pub fn stats_json(s: &pb::QueueStats) -> Value {
    json!({
        "queue": s.queue,
        "scheduled": s.scheduled,
        "ready": s.ready,
        "leased": s.leased,
        "succeeded": s.succeeded,
        "dead": s.dead,
        "cancelled": s.cancelled,
        "oldest_ready_age_secs": from_proto_duration(s.oldest_ready_age.as_ref()).map(|d| d.as_secs_f64()),
        "completed_last_minute": s.completed_last_minute,
        "failed_last_minute": s.failed_last_minute,
    })
}

fn event_kind(k: i32) -> &'static str {
    match pb::TaskEventKind::try_from(k).unwrap_or(pb::TaskEventKind::Unspecified) {
        pb::TaskEventKind::Unspecified => "unknown",
        pb::TaskEventKind::Submitted => "submitted",
        pb::TaskEventKind::Leased => "leased",
        pb::TaskEventKind::HeartbeatLost => "heartbeat lost",
        pb::TaskEventKind::Checkpointed => "checkpointed",
        pb::TaskEventKind::Failed => "failed",
        pb::TaskEventKind::RetryScheduled => "retry scheduled",
        pb::TaskEventKind::Succeeded => "succeeded",
        pb::TaskEventKind::Dead => "dead",
        pb::TaskEventKind::Cancelled => "cancelled",
        pb::TaskEventKind::Requeued => "requeued",
        pb::TaskEventKind::Updated => "updated",
        pb::TaskEventKind::Unblocked => "unblocked",
        pb::TaskEventKind::Replaced => "replaced",
    }
}

/// A task's events as a table, oldest first.
pub fn event_rows(events: &[pb::TaskEvent]) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.event_id.to_string(),
                time(&e.time),
                event_kind(e.kind).to_string(),
                state(e.state).to_string(),
                e.attempt.to_string(),
                e.worker_id.clone(),
                clip(&e.detail, 80),
            ]
        })
        .collect();
    table(
        &[
            "EVENT", "TIME", "KIND", "STATE", "ATTEMPT", "WORKER", "DETAIL",
        ],
        &rows,
    )
}

/// One event on one line, for `watch`.
pub fn event_line(e: &pb::TaskEvent) -> String {
    let mut line = format!(
        "{}  {}  {}  {}  {}  {}",
        e.event_id,
        time(&e.time),
        e.queue,
        e.task_id,
        event_kind(e.kind),
        state(e.state)
    );
    if !e.worker_id.is_empty() {
        line += &format!("  worker={}", e.worker_id);
    }
    if !e.detail.is_empty() {
        line += &format!("  {}", clip(&e.detail, 120));
    }
    line.push('\n');
    line
}

pub fn event_json(e: &pb::TaskEvent) -> Value {
    json!({
        "event_id": e.event_id,
        "task_id": e.task_id,
        "queue": e.queue,
        "kind": event_kind(e.kind),
        "state": state(e.state),
        "attempt": e.attempt,
        "worker_id": e.worker_id,
        "time": time_json(&e.time),
        "detail": e.detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["ID", "STATE", "KEY"],
            &[
                vec!["a".into(), "READY".into(), "k".into()],
                vec!["abcdef".into(), "DEAD".into(), String::new()],
            ],
        );
        assert_eq!(t, "ID      STATE  KEY\na       READY  k\nabcdef  DEAD\n");
    }

    #[test]
    fn bytes_show_as_text_or_base64() {
        assert_eq!(bytes_text(b"hello"), "hello");
        assert_eq!(bytes_text(&[0xff, 0x00]), "base64:/wA=");
        assert_eq!(bytes_json(b"x"), json!("x"));
        assert_eq!(clip("first\nsecond", 40), "first...");
        assert_eq!(clip("short", 40), "short");
    }
}
