//! One task: its fields, payload (JSON pretty-printed, text or hex), checkpoint,
//! result, metadata, every attempt (worker, address, start, end, outcome, error)
//! its event history (its task events, latest [`HISTORY_SHOWN`]) and the
//! actions its state allows.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, badge, duration, href, opt_time, time};
use super::{Console, PageError, Viewer};
use crate::domain::{AttemptOutcome, StoredState, TaskState};
use crate::service::{Broker, ServiceError};
use crate::store::EventRecord;

/// Bytes of a body shown at most (the rest is summarised).
const SHOWN_BYTES: usize = 64 * 1024;

/// Events of the history shown at most: the latest ones.
pub const HISTORY_SHOWN: usize = 200;
/// Events read per call (the most ListTaskEvents allows).
const HISTORY_PAGE: i32 = 1000;
/// Calls made at most for one page view, so a task with a huge history stays cheap.
const HISTORY_PAGES: usize = 10;

/// A task's latest events, oldest first, through the service (as ListTaskEvents).
pub struct History {
    pub events: Vec<EventRecord>,
    /// Events read in all (more than shown when it is long).
    pub read: u64,
    /// Whether the reading stopped before the end.
    pub cut: bool,
}

pub async fn history(b: &Broker, id: &str) -> Result<History, ServiceError> {
    let mut events = std::collections::VecDeque::new();
    let (mut after, mut read) = (0, 0u64);
    for _ in 0..HISTORY_PAGES {
        let page = b.list_task_events(id, after, HISTORY_PAGE).await?;
        let full = page.len() == HISTORY_PAGE as usize;
        read += page.len() as u64;
        if let Some(last) = page.last() {
            after = last.event_id;
        }
        for e in page {
            if events.len() == HISTORY_SHOWN {
                events.pop_front();
            }
            events.push_back(e);
        }
        if !full {
            return Ok(History {
                events: events.into(),
                read,
                cut: false,
            });
        }
    }
    Ok(History {
        events: events.into(),
        read,
        cut: true,
    })
}

fn history_section(h: &History) -> Markup {
    let more = h.read > h.events.len() as u64;
    html! {
        @if !h.events.is_empty() {
            section aria-labelledby="h-history" {
                h2 #h-history { "History" }
                @if more {
                    p.muted #history-note {
                        "Showing the latest " (layout::count(h.events.len() as u64)) " of "
                        @if h.cut { "more than " }
                        (layout::count(h.read)) " events; ListTaskEvents pages through them all."
                    }
                }
                div.scroll { table #history {
                    caption { "Events of this task, oldest first" }
                    thead { tr {
                        th scope="col" { "Time (UTC)" } th scope="col" { "Kind" } th scope="col" { "State" }
                        th scope="col" .num { "Attempt" } th scope="col" { "Worker" } th scope="col" { "Detail" }
                    } }
                    tbody { @for e in &h.events {
                        tr data-kind=(e.kind.as_str()) {
                            td { (time(e.time)) }
                            td.mono { (e.kind.as_str().to_uppercase()) }
                            td { (badge(e.state)) }
                            td.num { (e.attempt) }
                            td { (e.worker_id.as_deref().unwrap_or("")) }
                            td { (e.detail.as_deref().unwrap_or("")) }
                        }
                    } }
                } }
            }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct TaskPageQuery {
    /// How to show the payload: auto (default), json, text or hex.
    view: Option<String>,
    /// The action just done, for a notice.
    done: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Auto,
    Json,
    Text,
    Hex,
}

impl View {
    fn parse(s: Option<&str>) -> View {
        match s {
            Some("json") => View::Json,
            Some("text") => View::Text,
            Some("hex") => View::Hex,
            _ => View::Auto,
        }
    }
}

/// A body as the chosen view, falling back (JSON -> text -> hex) when the bytes
/// are not that. Returns the markup and the view used.
pub fn body(bytes: &[u8], view: View) -> (Markup, View) {
    let shown = &bytes[..bytes.len().min(SHOWN_BYTES)];
    let cut = bytes.len() > shown.len();
    let json = || {
        serde_json::from_slice::<serde_json::Value>(bytes)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
    };
    let text = || std::str::from_utf8(shown).ok();
    let (content, used) = match view {
        View::Auto | View::Json if !cut => match json() {
            Some(j) => (j, View::Json),
            None => match text() {
                Some(t) => (t.to_string(), View::Text),
                None => (hex_dump(shown), View::Hex),
            },
        },
        View::Auto | View::Json | View::Text => match text() {
            Some(t) => (t.to_string(), View::Text),
            None => (hex_dump(shown), View::Hex),
        },
        View::Hex => (hex_dump(shown), View::Hex),
    };
    let markup = html! {
        pre.body tabindex="0" { code { (content) } }
        @if cut {
            p.muted { "Showing the first " (layout::count(SHOWN_BYTES as u64)) " of "
                (layout::count(bytes.len() as u64)) " bytes." }
        }
    };
    (markup, used)
}

/// Sixteen bytes per line: offset, hex, printable ASCII.
pub fn hex_dump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String = chunk
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!("{:08x}  {:<47}  {ascii}\n", i * 16, hex.join(" ")));
    }
    out
}

fn outcome_name(o: AttemptOutcome) -> &'static str {
    match o {
        AttemptOutcome::Running => "running",
        AttemptOutcome::Succeeded => "succeeded",
        AttemptOutcome::Failed => "failed",
        AttemptOutcome::LeaseExpired => "lease expired",
        AttemptOutcome::DeadlineExceeded => "deadline exceeded",
    }
}

fn done_notice(done: Option<&str>) -> Option<&'static str> {
    Some(match done? {
        "cancel" => "Cancelled (a leased task is told to stop at its next heartbeat).",
        "requeue" => "Requeued: the task is ready to run again.",
        "change" => "Changed.",
        _ => return None,
    })
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Query(q): Query<TaskPageQuery>,
) -> Result<Markup, PageError> {
    let b = &console.broker;
    let (task, attempts, events) =
        tokio::try_join!(b.get_task(&id), b.list_attempts(&id), history(b, &id))?;
    // Why a waiting task is not running (Explain); only a pending task has gates.
    let gates = if task.state == StoredState::Pending {
        let e = b.explain_task(&id).await?;
        Some((e.gates, e.lease_path))
    } else {
        None
    };
    let now = b.clock().now();
    let state = TaskState::of(task.state, task.run_at, now);
    let view = View::parse(q.view.as_deref());
    let (payload, used) = body(&task.payload, view);
    let base = format!("/tasks/{}", layout::encode(&task.id));
    let body_html = html! {
        p.crumbs { a href=(href("/tasks", &[("queue", &task.queue)])) { "Tasks in " (task.queue) } }
        h1 { "Task " span.mono { (task.id) } " " (badge(state)) }
        (layout::notice(done_notice(q.done.as_deref())))
        (actions(&base, task.state))
        @if let Some((gates, path)) = &gates { (super::explain::section(gates, *path, &task.queue)) }
        section aria-labelledby="h-fields" {
            h2 #h-fields { "Fields" }
            dl.fields {
                dt { "Queue" } dd { (task.queue) }
                dt { "Key" } dd { (task.key.as_deref().unwrap_or("—")) }
                dt { "Priority" } dd { (task.priority) }
                dt { "Attempt" } dd { (task.attempt) " of " (task.attempts_allowed) " allowed (max_attempts " (task.max_attempts) ")" }
                dt { "Run at (UTC)" } dd { (time(task.run_at)) }
                dt { "Deadline (UTC)" } dd { (opt_time(task.deadline)) }
                dt { "Created (UTC)" } dd { (time(task.created_at)) }
                dt { "Updated (UTC)" } dd { (time(task.updated_at)) }
                dt { "Finished (UTC)" } dd { (opt_time(task.finished_at)) }
                // A waiting task (also one requeued or retried) has no lessee; a finished
                // one shows who held its last lease.
                @if let Some(w) = task.leased_by.as_ref().filter(|_| state == TaskState::Leased) {
                    dt { "Leased by" } dd { a href=(href("/tasks", &[("worker", w), ("state", "leased")])) { (w) } }
                    dt { "Lease expires (UTC)" } dd { (opt_time(task.lease_expires_at)) }
                } @else if let Some(w) = task.leased_by.as_ref().filter(|_| task.state.is_finished()) {
                    dt { "Last leased by" } dd { a href=(href("/tasks", &[("worker", w)])) { (w) } }
                }
                @if let Some(sid) = &task.schedule_id {
                    dt { "Schedule" } dd { a.mono href={ "/schedules/" (layout::encode(sid)) } { (sid) }
                        @if let Some(f) = task.fire_time { " (fire time " (time(f)) ")" } }
                }
                @if task.cancel_requested { dt { "Cancel requested" } dd { "yes" } }
                dt { "Last error" } dd { (task.last_error.as_deref().unwrap_or("—")) }
            }
        }
        section aria-labelledby="h-payload" {
            h2 #h-payload { "Payload " span.muted.small { "(" (layout::count(task.payload.len() as u64)) " bytes, shown as " (view_name(used)) ")" } }
            nav.views aria-label="Payload view" {
                @for (v, label) in [(View::Json, "JSON"), (View::Text, "Text"), (View::Hex, "Hex")] {
                    @if v == used {
                        a href=(format!("{base}?view={}", view_name(v))) aria-current="true" { (label) }
                    } @else {
                        a href=(format!("{base}?view={}", view_name(v))) { (label) }
                    }
                }
            }
            (payload)
        }
        section aria-labelledby="h-attempts" {
            h2 #h-attempts { "Attempts" }
            @if attempts.is_empty() { p { "Not run yet." } } @else {
                div.scroll { table #attempts {
                    thead { tr {
                        th scope="col" .num { "#" } th scope="col" { "Worker" } th scope="col" { "Address" }
                        th scope="col" { "Started (UTC)" } th scope="col" { "Ended (UTC)" }
                        th scope="col" .num { "Ran" } th scope="col" { "Outcome" } th scope="col" { "Error" }
                    } }
                    tbody { @for a in &attempts {
                        tr {
                            td.num { (a.attempt) }
                            td { (a.worker_id) }
                            td { (a.worker_address) }
                            td { (time(a.leased_at)) }
                            td { (opt_time(a.finished_at)) }
                            td.num { (a.finished_at.unwrap_or(now).signed_duration_since(a.leased_at).to_std().map(duration).unwrap_or_default()) }
                            td { span class={ "outcome " (outcome_name(a.outcome).replace(' ', "-")) } { (outcome_name(a.outcome)) } }
                            td { (a.error.as_deref().unwrap_or("")) }
                        }
                    } }
                } }
            }
        }
        (history_section(&events))
        @if let Some(c) = &task.checkpoint {
            section aria-labelledby="h-checkpoint" {
                h2 #h-checkpoint { "Checkpoint " span.muted.small { "(" (layout::count(c.len() as u64)) " bytes)" } }
                (body(c, View::Auto).0)
            }
        }
        @if let Some(r) = &task.result {
            section aria-labelledby="h-result" {
                h2 #h-result { "Result " span.muted.small { "(" (layout::count(r.len() as u64)) " bytes)" } }
                (body(r, View::Auto).0)
            }
        }
        section aria-labelledby="h-meta" {
            h2 #h-meta { "Metadata" }
            @if task.metadata.is_empty() { p.muted { "None." } } @else {
                dl.fields { @for (k, v) in &task.metadata { dt { (k) } dd.mono { (v) } } }
            }
        }
    };
    Ok(layout::page(
        &format!("Task {}", task.id),
        "/tasks",
        Some(&viewer),
        body_html,
    ))
}

fn view_name(v: View) -> &'static str {
    match v {
        View::Auto | View::Json => "json",
        View::Text => "text",
        View::Hex => "hex",
    }
}

/// The actions the stored state allows; each leads to a confirmation page.
fn actions(base: &str, state: StoredState) -> Markup {
    // A dead task's cancel takes it off the dead-letter list (dead -> cancelled).
    let cancel = matches!(
        state,
        StoredState::Pending | StoredState::Leased | StoredState::Dead
    );
    let requeue = matches!(state, StoredState::Dead | StoredState::Cancelled);
    let change = !matches!(state, StoredState::Leased | StoredState::Succeeded);
    html! {
        @if cancel || requeue || change {
            nav.actions aria-label="Actions" {
                @if cancel { a.button.danger href={ (base) "/cancel" } { "Cancel…" } }
                @if requeue { a.button href={ (base) "/requeue" } { "Requeue…" } }
                @if change { a.button href={ (base) "/change" } { "Change priority, run at, deadline, attempts or target…" } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_history_says_how_much_is_shown() {
        let e = |id: i64| EventRecord {
            event_id: id,
            task_id: "t".into(),
            queue: "q".into(),
            kind: crate::domain::event::EventKind::Checkpointed,
            state: TaskState::Leased,
            attempt: 1,
            worker_id: Some("w<1>".into()),
            time: chrono::DateTime::UNIX_EPOCH,
            detail: None,
        };
        let events: Vec<EventRecord> = (1..=HISTORY_SHOWN as i64).map(e).collect();
        let all = History {
            events: events.clone(),
            read: HISTORY_SHOWN as u64,
            cut: false,
        };
        let html = history_section(&all).into_string();
        assert!(!html.contains("history-note") && html.contains("w&lt;1&gt;"));
        let long = History {
            events: events.clone(),
            read: 1500,
            cut: false,
        };
        assert!(
            history_section(&long)
                .into_string()
                .contains("Showing the latest 200 of 1,500 events")
        );
        let cut = History {
            events,
            read: 10_000,
            cut: true,
        };
        assert!(
            history_section(&cut)
                .into_string()
                .contains("of more than 10,000")
        );
        let none = History {
            events: vec![],
            read: 0,
            cut: false,
        };
        assert!(history_section(&none).into_string().is_empty());
    }

    #[test]
    fn bodies_fall_back_from_json_to_text_to_hex() {
        assert_eq!(body(br#"{"a":1}"#, View::Auto).1, View::Json);
        assert!(
            body(br#"{"a":1}"#, View::Auto)
                .0
                .into_string()
                .contains("&quot;a&quot;: 1")
        );
        assert_eq!(body(b"hello", View::Auto).1, View::Text);
        assert_eq!(body(b"hello", View::Hex).1, View::Hex);
        assert_eq!(body(&[0xff, 0x00], View::Json).1, View::Hex);
        assert!(
            body(b"<script>x</script>", View::Text)
                .0
                .into_string()
                .contains("&lt;script&gt;")
        );
        assert_eq!(
            hex_dump(b"AB\x00"),
            format!("00000000  {:<47}  AB.\n", "41 42 00")
        );
    }
}
