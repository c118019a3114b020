//! Actions on one queue through the service's UpdateQueue: pause and resume,
//! each confirmed on a page of its own before the POST that does it, and the
//! edit of its main limits (a refused value re-shows the form with the reason as
//! one line). The CSRF field is checked by the guard before any POST runs.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{Markup, html};

use super::actions::Confirmed;
use super::admission::{queue_href, queue_page};
use super::admission_form::QueuePost;
use super::layout::{self, Ask, confirm_form, confirm_handler, href};
use super::{Console, PageError, Viewer};
use crate::domain::admission::QueueConfig;
use crate::service::ServiceError;

const PAUSE: Ask = Ask {
    action: "pause",
    question: "Pause this queue?",
    button: "Pause the queue",
    explain: "No task of this queue is leased while it is paused (on every replica within a \
              second). Tasks already leased run on; submitting still works, and the tasks wait.",
    danger: true,
};
const RESUME: Ask = Ask {
    action: "resume",
    question: "Resume this queue?",
    button: "Resume the queue",
    explain: "Its waiting tasks are leased again, within its other limits; waiting workers are \
              woken at once.",
    danger: false,
};

async fn confirm(
    console: &Console,
    viewer: &Viewer,
    name: &str,
    ask: &Ask,
) -> Result<Markup, PageError> {
    let q = console.broker.get_queue(name).await?;
    let base = queue_href(&q.name);
    let paused = q.live.config.paused;
    let body = html! {
        h1 { (ask.question) }
        p { "Queue " a.mono href=(base) { (q.name) } ", "
            a href=(href("/tasks", &[("queue", &q.name), ("state", "ready")])) { "its waiting tasks" } "." }
        @if paused == (ask.action == "pause") {
            p { "It is " (if paused { "paused" } else { "active" }) " already." }
        }
        p { (ask.explain) }
        (confirm_form(viewer, &base, ask.action, ask.button, ask.danger))
    };
    Ok(layout::page(ask.question, "/queues", Some(viewer), body))
}

async fn set_paused(console: &Console, name: &str, paused: bool) -> Result<Response, PageError> {
    let patch = QueueConfig {
        paused,
        ..QueueConfig::default()
    };
    let q = console
        .broker
        .update_queue(name, &patch, &["paused".to_string()])
        .await?;
    let done = if paused { "pause" } else { "resume" };
    Ok(Redirect::to(&format!("{}?done={done}", queue_href(&q.name))).into_response())
}

confirm_handler!(confirm_pause, PAUSE);

pub async fn pause(
    State(console): State<Arc<Console>>,
    Path(name): Path<String>,
    Form(_): Form<Confirmed>,
) -> Result<Response, PageError> {
    set_paused(&console, &name, true).await
}

confirm_handler!(confirm_resume, RESUME);

pub async fn resume(
    State(console): State<Arc<Console>>,
    Path(name): Path<String>,
    Form(_): Form<Confirmed>,
) -> Result<Response, PageError> {
    set_paused(&console, &name, false).await
}

/// Saves the changed limits (only fields the post carries; see `QueuePost`);
/// a value the form or the service refuses shows the form again, as typed,
/// with the reason (400).
pub async fn edit(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    Form(post): Form<QueuePost>,
) -> Result<Response, PageError> {
    let view = console.broker.get_queue(&name).await?;
    let form = post.over(&view.live.config);
    let refused = |e: &str| {
        let page = queue_page(&viewer, &view, &form, None, Some(e), None);
        (StatusCode::BAD_REQUEST, page).into_response()
    };
    let (patch, paths) = match form.changes(&view.live.config) {
        Ok(c) => c,
        Err(e) => return Ok(refused(&e)),
    };
    let base = queue_href(&view.name);
    if paths.is_empty() {
        return Ok(Redirect::to(&format!("{base}?done=unchanged")).into_response());
    }
    match console.broker.update_queue(&name, &patch, &paths).await {
        Ok(_) => Ok(Redirect::to(&format!("{base}?done=edit")).into_response()),
        Err(ServiceError::Invalid(i)) => Ok(refused(&i.to_string())),
        Err(e) => Err(e.into()),
    }
}
