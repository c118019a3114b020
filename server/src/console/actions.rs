//! Actions on one task, each confirmed on a page of its own before the POST that
//! does it (so they work without JavaScript and cannot be clicked by accident):
//! cancel, requeue, and change priority / run_at / deadline / max attempts / target (form,
//! then review).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, confirm_form, csrf, opt_time, time};
use super::tasks::parse_time;
use super::{Console, PageError, Viewer};
use crate::domain::StoredState;
use crate::domain::routing::Target;
use crate::service::UpdateTask;
use crate::store::TaskRecord;

fn task_href(id: &str) -> String {
    format!("/tasks/{}", layout::encode(id))
}

fn confirm_page(
    viewer: &Viewer,
    task: &TaskRecord,
    action: &str,
    question: &str,
    explain: &str,
    danger: bool,
) -> Markup {
    let base = task_href(&task.id);
    let body = html! {
        h1 { (question) }
        p { "Task " a.mono href=(base) { (task.id) } " in queue " strong { (task.queue) } "." }
        p { (explain) }
        (confirm_form(viewer, &base, action, question.trim_end_matches('?'), danger))
    };
    layout::page(question, "/tasks", Some(viewer), body)
}

pub async fn confirm_cancel(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
) -> Result<Markup, PageError> {
    let task = console.broker.get_task(&id).await?;
    let explain = if task.state == StoredState::Dead {
        "It is dead already: cancelling it takes it off the dead-letter list. It ends \
         cancelled, keeps its attempts and last error, and can still be requeued."
    } else {
        "A task waiting to run is cancelled now. A leased task is asked to stop: its \
         worker learns it at the next heartbeat, and the task ends cancelled."
    };
    Ok(confirm_page(
        &viewer,
        &task,
        "cancel",
        "Cancel this task?",
        explain,
        true,
    ))
}

/// The CSRF field is checked by the guard before any POST handler runs.
#[derive(Deserialize)]
pub struct Confirmed {}

pub async fn cancel(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    Form(_): Form<Confirmed>,
) -> Result<Response, PageError> {
    // A dead task is a dead letter: its cancel is the dead-letter cancel. The
    // state may change between the read and the write; each call is conditional.
    match console.broker.get_task(&id).await?.state {
        StoredState::Dead => console.broker.cancel_dead_task(&id).await?,
        _ => {
            console.broker.cancel_task(&id).await?;
        }
    }
    Ok(Redirect::to(&format!("{}?done=cancel", task_href(&id))).into_response())
}

pub async fn confirm_requeue(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
) -> Result<Markup, PageError> {
    let task = console.broker.get_task(&id).await?;
    Ok(confirm_page(
        &viewer,
        &task,
        "requeue",
        "Requeue this task?",
        "It becomes ready to run now, with its full retry budget again.",
        false,
    ))
}

pub async fn requeue(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    Form(_): Form<Confirmed>,
) -> Result<Response, PageError> {
    console.broker.requeue_task(&id).await?;
    Ok(Redirect::to(&format!("{}?done=requeue", task_href(&id))).into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct ChangeForm {
    priority: Option<String>,
    run_at: Option<String>,
    deadline: Option<String>,
    max_attempts: Option<String>,
    /// The worker id only it may lease the task; "any" clears the whole target.
    target_worker: Option<String>,
    /// KEY=VALUE pairs a worker must carry, comma-separated.
    target_labels: Option<String>,
    /// "apply" once reviewed; anything else shows the review.
    step: Option<String>,
}

/// The changes a form asks for; a blank field leaves its value alone.
struct Changes {
    priority: Option<i32>,
    run_at: Option<DateTime<Utc>>,
    /// `Some(None)` clears the deadline.
    deadline: Option<Option<DateTime<Utc>>>,
    max_attempts: Option<u32>,
    /// A new target (empty: anyone may lease the task).
    target: Option<Target>,
}

/// A target as the review page shows it: "worker w2, gpu=a100", or "any worker".
fn target_text(t: &Target) -> String {
    let mut parts: Vec<String> = t.worker_id.iter().map(|w| format!("worker {w}")).collect();
    parts.extend(t.labels.iter().map(|(k, v)| format!("{k}={v}")));
    if parts.is_empty() {
        "any worker".into()
    } else {
        parts.join(", ")
    }
}

impl ChangeForm {
    fn changes(&self) -> Result<Changes, PageError> {
        let field = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let priority = field(&self.priority)
            .map(|p| {
                p.parse::<i32>().map_err(|_| {
                    PageError::BadInput(format!("priority: {p:?} is not a whole number"))
                })
            })
            .transpose()?;
        let run_at = match field(&self.run_at).as_deref() {
            None => None,
            Some("now") => Some(Utc::now()),
            Some(s) => Some(parse_time("run_at", s)?),
        };
        let deadline = match field(&self.deadline).as_deref() {
            None => None,
            Some("none") => Some(None),
            Some(s) => Some(Some(parse_time("deadline", s)?)),
        };
        let max_attempts = field(&self.max_attempts)
            .map(|m| {
                m.parse::<u32>().map_err(|_| {
                    PageError::BadInput(format!("max attempts: {m:?} is not a whole number"))
                })
            })
            .transpose()?;
        let worker = field(&self.target_worker);
        let pairs = field(&self.target_labels);
        let target = if worker.as_deref() == Some("any") {
            Some(Target::default())
        } else if worker.is_some() || pairs.is_some() {
            let mut labels = BTreeMap::new();
            for pair in pairs.iter().flat_map(|p| p.split(',')).map(str::trim) {
                if pair.is_empty() {
                    continue;
                }
                let Some((k, v)) = pair.split_once('=') else {
                    return Err(PageError::BadInput(format!(
                        "target labels: {pair:?} is not KEY=VALUE"
                    )));
                };
                labels.insert(k.trim().to_string(), v.trim().to_string());
            }
            let t = Target {
                worker_id: worker,
                labels,
            };
            t.validate("target")
                .map_err(|e| PageError::BadInput(e.to_string()))?;
            Some(t)
        } else {
            None
        };
        if priority.is_none()
            && run_at.is_none()
            && deadline.is_none()
            && max_attempts.is_none()
            && target.is_none()
        {
            return Err(PageError::BadInput(
                "Nothing to change: fill in at least one field.".into(),
            ));
        }
        Ok(Changes {
            priority,
            run_at,
            deadline,
            max_attempts,
            target,
        })
    }
}

/// The labels of a target, as the form takes them, or "none".
fn target_labels_now(t: &Target) -> String {
    if t.labels.is_empty() {
        return "none".into();
    }
    let pairs: Vec<String> = t.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(", ")
}

fn change_page(viewer: &Viewer, task: &TaskRecord, error: Option<&str>) -> Markup {
    let base = task_href(&task.id);
    let body = html! {
        h1 { "Change task" }
        p { "Task " a.mono href=(base) { (task.id) } " in queue " strong { (task.queue) } ". "
            "Leave a field blank to keep its value. Times are UTC." }
        @if let Some(e) = error { p.error role="alert" { (e) } }
        form.stack method="post" action={ (base) "/change" } {
            (csrf(viewer))
            label for="c-priority" { "Priority (now " (task.priority) "; higher runs first)" }
            input #c-priority name="priority" inputmode="numeric";
            label for="c-run-at" { "Run at (now " (time(task.run_at)) "; or \u{201c}now\u{201d})" }
            input #c-run-at name="run_at" placeholder="2026-11-23T10:00";
            label for="c-deadline" { "Deadline (now " (opt_time(task.deadline)) "; \u{201c}none\u{201d} clears it)" }
            input #c-deadline name="deadline" placeholder="2026-11-23T12:00";
            label for="c-max-attempts" { "Max attempts (now " (task.max_attempts) "; attempts so far count)" }
            input #c-max-attempts name="max_attempts" inputmode="numeric";
            label for="c-target-worker" { "Target worker (now " (task.routing.target.worker_id.as_deref().unwrap_or("any")) "; \u{201c}any\u{201d} clears the target; only while the task waits)" }
            input #c-target-worker name="target_worker" placeholder="worker-7";
            label for="c-target-labels" { "Target labels (now " (target_labels_now(&task.routing.target)) "; KEY=VALUE, comma-separated)" }
            input #c-target-labels name="target_labels" placeholder="gpu=a100, region=eu";
            div.buttons {
                button type="submit" name="step" value="review" { "Review the change" }
                a href=(base) { "Cancel, go back" }
            }
        }
    };
    layout::page("Change task", "/tasks", Some(viewer), body)
}

pub async fn change_form(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
) -> Result<Markup, PageError> {
    let task = console.broker.get_task(&id).await?;
    Ok(change_page(&viewer, &task, None))
}

pub async fn change(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Form(f): Form<ChangeForm>,
) -> Result<Response, PageError> {
    let task = console.broker.get_task(&id).await?;
    let changes = match f.changes() {
        Ok(c) => c,
        Err(PageError::BadInput(m)) => {
            let page = change_page(&viewer, &task, Some(&m));
            return Ok((axum::http::StatusCode::BAD_REQUEST, page).into_response());
        }
        Err(e) => return Err(e),
    };
    if f.step.as_deref() != Some("apply") {
        return Ok(review_page(&viewer, &task, &f, &changes).into_response());
    }
    let mut paths = Vec::new();
    let mut req = UpdateTask {
        task_id: id.clone(),
        ..UpdateTask::default()
    };
    if let Some(p) = changes.priority {
        paths.push("priority".to_string());
        req.priority = p;
    }
    if let Some(t) = changes.run_at {
        paths.push("run_at".to_string());
        req.run_at = Some(t);
    }
    if let Some(d) = changes.deadline {
        paths.push("deadline".to_string());
        req.deadline = d;
    }
    if let Some(m) = changes.max_attempts {
        paths.push("max_attempts".to_string());
        req.max_attempts = m;
    }
    if let Some(t) = changes.target {
        paths.push("target".to_string());
        req.target = t;
    }
    req.paths = paths;
    console.broker.update_task(req).await?;
    Ok(Redirect::to(&format!("{}?done=change", task_href(&id))).into_response())
}

fn review_page(viewer: &Viewer, task: &TaskRecord, f: &ChangeForm, c: &Changes) -> Markup {
    let base = task_href(&task.id);
    let keep = |v: &Option<String>| v.clone().unwrap_or_default();
    let body = html! {
        h1 { "Confirm the change" }
        p { "Task " a.mono href=(base) { (task.id) } " in queue " strong { (task.queue) } "." }
        div.scroll { table {
            thead { tr { th scope="col" { "Field" } th scope="col" { "Now" } th scope="col" { "After" } } }
            tbody {
                @if let Some(p) = c.priority {
                    tr { th scope="row" { "Priority" } td { (task.priority) } td { (p) } }
                }
                @if let Some(t) = c.run_at {
                    tr { th scope="row" { "Run at (UTC)" } td { (time(task.run_at)) } td { (time(t)) } }
                }
                @if let Some(d) = c.deadline {
                    tr { th scope="row" { "Deadline (UTC)" } td { (opt_time(task.deadline)) } td { (opt_time(d)) } }
                }
                @if let Some(m) = c.max_attempts {
                    tr { th scope="row" { "Max attempts" } td { (task.max_attempts) } td { (m) } }
                }
                @if let Some(t) = &c.target {
                    tr { th scope="row" { "Target" } td { (target_text(&task.routing.target)) } td { (target_text(t)) } }
                }
            }
        } }
        form.confirm method="post" action={ (base) "/change" } {
            (csrf(viewer))
            input type="hidden" name="priority" value=(keep(&f.priority));
            input type="hidden" name="run_at" value=(c.run_at.map(|t| t.to_rfc3339()).unwrap_or_default());
            input type="hidden" name="deadline" value=(keep(&f.deadline));
            input type="hidden" name="max_attempts" value=(keep(&f.max_attempts));
            input type="hidden" name="target_worker" value=(keep(&f.target_worker));
            input type="hidden" name="target_labels" value=(keep(&f.target_labels));
            button type="submit" name="step" value="apply" { "Apply the change" }
            " "
            a href={ (base) "/change" } { "Back to the form" }
        }
    };
    layout::page("Confirm the change", "/tasks", Some(viewer), body)
}
