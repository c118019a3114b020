//! Tasks: filter by queue, state, key, worker, schedule, target worker, a metadata entry,
//! last error and creation time,
//! newest first, 50 per page. Paging is by keyset (the page token names the last
//! task's sequence number), so a page costs the same on the millionth task.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, STATES, badge, href, short, state_name};
use super::{Console, PageError, Viewer, non_empty};
use crate::domain::TaskState;
use crate::service::ListTasks;

const PAGE_SIZE: i32 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct TaskQuery {
    queue: Option<String>,
    state: Option<String>,
    key: Option<String>,
    worker: Option<String>,
    /// The schedule that made the tasks.
    schedule: Option<String>,
    /// The worker the tasks are targeted at.
    target: Option<String>,
    /// A metadata entry: `KEY` (any value) or `KEY=VALUE`.
    meta: Option<String>,
    error: Option<String>,
    from: Option<String>,
    to: Option<String>,
    page: Option<String>,
}

/// A time typed into a filter: RFC 3339, or `YYYY-MM-DDTHH:MM[:SS]` (as a
/// datetime-local field sends it) or `YYYY-MM-DD HH:MM[:SS]`, taken as UTC.
pub fn parse_time(field: &str, s: &str) -> Result<DateTime<Utc>, PageError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for f in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Ok(t.and_utc());
        }
    }
    Err(PageError::BadInput(format!(
        "{field}: {s:?} is not a time like 2026-11-23T10:00 (UTC)"
    )))
}

impl TaskQuery {
    fn state(&self) -> Result<Option<TaskState>, PageError> {
        match non_empty(&self.state) {
            None => Ok(None),
            Some(s) => layout::parse_state(&s).map(Some).ok_or_else(|| {
                PageError::BadInput(format!(
                    "state: {s:?} is not one of scheduled, ready, leased, succeeded, dead, cancelled, blocked"
                ))
            }),
        }
    }

    fn request(&self) -> Result<ListTasks, PageError> {
        let time = |field: &str, v: &Option<String>| {
            non_empty(v).map(|s| parse_time(field, &s)).transpose()
        };
        let queue = non_empty(&self.queue);
        if queue.is_none() && non_empty(&self.key).is_some() {
            // Keys are unique per queue, and looked up through that index.
            return Err(PageError::BadInput(
                "key: choose the queue too (a key is unique within its queue)".into(),
            ));
        }
        let (metadata_key, metadata_value) = match non_empty(&self.meta) {
            None => (None, None),
            Some(m) => match m.split_once('=') {
                Some((k, v)) => (Some(k.trim().to_string()), Some(v.trim().to_string())),
                None => (Some(m), None),
            },
        };
        Ok(ListTasks {
            queue,
            states: self.state()?.into_iter().collect(),
            key: non_empty(&self.key),
            worker_id: non_empty(&self.worker),
            last_error: self.error.clone().filter(|e| !e.is_empty()),
            created_after: time("from", &self.from)?,
            created_before: time("to", &self.to)?,
            schedule_id: non_empty(&self.schedule),
            fanout_group: None,
            target_worker: non_empty(&self.target),
            target_labels: Default::default(),
            metadata_key,
            metadata_value: metadata_value.filter(|v| !v.is_empty()),
            page_size: PAGE_SIZE,
            page_token: non_empty(&self.page).unwrap_or_default(),
        })
    }

    /// The filters as query pairs (without the page).
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let v = |o: &Option<String>| o.clone().unwrap_or_default();
        vec![
            ("queue", v(&self.queue)),
            ("state", v(&self.state)),
            ("key", v(&self.key)),
            ("worker", v(&self.worker)),
            ("schedule", v(&self.schedule)),
            ("target", v(&self.target)),
            ("meta", v(&self.meta)),
            ("error", v(&self.error)),
            ("from", v(&self.from)),
            ("to", v(&self.to)),
        ]
    }
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Query(q): Query<TaskQuery>,
) -> Result<Response, PageError> {
    let (result, error) = match q.request() {
        Ok(req) => match console.broker.list_tasks(req).await {
            Ok(page) => (Some(page), None),
            Err(e) => (None, Some(PageError::from(e))),
        },
        Err(e) => (None, Some(e)),
    };
    let message = match error {
        Some(PageError::BadInput(m)) => Some(m),
        Some(other) => return Err(other),
        None => None,
    };
    let pairs = q.pairs();
    let pair_refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let body = html! {
        h1 { "Tasks" }
        @if let Some(sid) = non_empty(&q.schedule) {
            p.crumbs { "Made by schedule " a.mono href={ "/schedules/" (layout::encode(&sid)) } { (sid) } }
        }
        (filter_form(&q))
        @if let Some(m) = &message { p.error role="alert" { (m) } }
        @if let Some(page) = &result {
            @if page.tasks.is_empty() {
                p { "No tasks match." }
            } @else {
                div.scroll {
                    table #tasks {
                        caption { "Newest first" }
                        thead { tr {
                            th scope="col" { "Task" }
                            th scope="col" { "Queue" }
                            th scope="col" { "State" }
                            th scope="col" .num { "Priority" }
                            th scope="col" .num { "Attempt" }
                            th scope="col" { "Created (UTC)" }
                            th scope="col" { "Run at (UTC)" }
                            th scope="col" { "Worker" }
                            th scope="col" { "Last error" }
                        } }
                        tbody {
                            @for t in &page.tasks {
                                @let state = TaskState::of(t.state, t.run_at, page.now);
                                tr {
                                    td { a.mono href={ "/tasks/" (layout::encode(&t.id)) } { (t.id) } }
                                    td { (t.queue) }
                                    td { (badge(state)) }
                                    td.num { (t.priority) }
                                    td.num { (t.attempt) "/" (t.attempts_allowed) }
                                    td { (layout::time(t.created_at)) }
                                    td { (layout::time(t.run_at)) }
                                    td { (t.leased_by.as_deref().unwrap_or("")) }
                                    td { (short(t.last_error.as_deref().unwrap_or(""), 80)) }
                                }
                            }
                        }
                    }
                }
                nav.pager aria-label="Pages" {
                    @if non_empty(&q.page).is_some() {
                        a href=(href("/tasks", &pair_refs)) { "Newest" }
                    }
                    @if !page.next_page_token.is_empty() {
                        a rel="next" href=(older(&pair_refs, &page.next_page_token)) { "Older →" }
                    }
                }
            }
        }
    };
    let status = if message.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok((status, layout::page("Tasks", "/tasks", Some(&viewer), body)).into_response())
}

fn older(pairs: &[(&str, &str)], token: &str) -> String {
    let mut next = pairs.to_vec();
    next.push(("page", token));
    href("/tasks", &next)
}

fn filter_form(q: &TaskQuery) -> Markup {
    let v = |o: &Option<String>| o.clone().unwrap_or_default();
    let state = v(&q.state);
    html! {
        form.filters method="get" action="/tasks" role="search" aria-label="Filter tasks" {
            div { label for="f-queue" { "Queue" } input #f-queue name="queue" value=(v(&q.queue)); }
            div {
                label for="f-state" { "State" }
                select #f-state name="state" {
                    option value="" selected[state.is_empty()] { "any" }
                    @for s in STATES {
                        option value=(state_name(s)) selected[state == state_name(s)] { (state_name(s)) }
                    }
                }
            }
            div { label for="f-key" { "Key (in the queue)" } input #f-key name="key" value=(v(&q.key)); }
            div { label for="f-worker" { "Worker" } input #f-worker name="worker" value=(v(&q.worker)); }
            div { label for="f-schedule" { "Schedule" } input #f-schedule name="schedule" value=(v(&q.schedule)); }
            div { label for="f-target" { "Targeted at worker" } input #f-target name="target" value=(v(&q.target)); }
            div { label for="f-meta" { "Metadata (KEY or KEY=VALUE)" }
                input #f-meta name="meta" placeholder="tenant=acme" value=(v(&q.meta)); }
            div { label for="f-from" { "Created from (UTC)" }
                input #f-from name="from" placeholder="2026-11-23T10:00" value=(v(&q.from)); }
            div { label for="f-to" { "Created before (UTC)" }
                input #f-to name="to" placeholder="2026-11-23T12:00" value=(v(&q.to)); }
            @if let Some(e) = q.error.as_deref().filter(|e| !e.is_empty()) {
                div {
                    label for="f-error" { "Last error" }
                    input #f-error name="error" value=(e);
                }
            }
            div.buttons {
                button type="submit" { "Filter" }
                a href="/tasks" { "Clear" }
            }
        }
    }
}
