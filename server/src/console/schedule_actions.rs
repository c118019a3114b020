//! Actions on one schedule, each confirmed on a page of its own before the POST
//! that does it (the CSRF field is checked by the guard): pause, resume, trigger
//! now, delete.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::actions::Confirmed;
use super::layout::{self, Ask, confirm_form, confirm_handler, href};
use super::schedules::{Status, schedule_href, status};
use super::{Console, PageError, Viewer};
use crate::service::Caller;
use crate::store::ScheduleRecord;

const PAUSE: Ask = Ask {
    action: "pause",
    question: "Pause this schedule?",
    button: "Pause the schedule",
    explain: "Nothing fires while it is paused. Fire times that pass while it is paused are \
              skipped, not caught up, when it is resumed. Tasks it already made are not touched.",
    danger: false,
};
const RESUME: Ask = Ask {
    action: "resume",
    question: "Resume this schedule?",
    button: "Resume the schedule",
    explain: "It fires again from its next fire time after now; the fire times that passed \
              while it was paused are skipped (a one-off that has not fired yet still fires).",
    danger: false,
};
const TRIGGER: Ask = Ask {
    action: "trigger",
    question: "Trigger this schedule now?",
    button: "Make one run now",
    explain: "It makes one task now, from its template, outside its spec (also when paused or \
              completed). The run counts toward max_runs and shows in the run history as a trigger.",
    danger: false,
};
const DELETE: Ask = Ask {
    action: "delete",
    question: "Delete this schedule?",
    button: "Delete the schedule",
    explain: "The schedule and its run history are deleted; nothing fires again. Tasks it \
              already made stay, and can still be found on the Tasks page by their queue.",
    danger: true,
};

fn confirm_page(viewer: &Viewer, s: &ScheduleRecord, ask: &Ask) -> Markup {
    let base = schedule_href(&s.id);
    let body = html! {
        h1 { (ask.question) }
        p { "Schedule " a.mono href=(base) { (s.id) } ", making tasks in queue "
            a href=(href("/tasks", &[("queue", &s.template.queue)])) { strong { (s.template.queue) } } "." }
        p { (ask.explain) }
        @if ask.action == "resume" && status(s) == Status::Completed {
            p { "It is completed (" (s.state_reason.as_deref().unwrap_or("")) "): resuming will not make it fire again." }
        }
        (confirm_form(viewer, &base, ask.action, ask.button, ask.danger))
    };
    layout::page(ask.question, "/schedules", Some(viewer), body)
}

async fn confirm(
    console: &Console,
    viewer: &Viewer,
    id: &str,
    ask: &Ask,
) -> Result<Markup, PageError> {
    let s = console.broker.get_schedule(&Caller::default(), id).await?;
    Ok(confirm_page(viewer, &s, ask))
}

fn back(id: &str, done: &str) -> Response {
    Redirect::to(&format!("{}?done={done}", schedule_href(id))).into_response()
}

confirm_handler!(confirm_pause, PAUSE);

pub async fn pause(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    Form(_): Form<Confirmed>,
) -> Result<Response, PageError> {
    console
        .broker
        .pause_schedule(&Caller::default(), &id)
        .await?;
    Ok(back(&id, "pause"))
}

confirm_handler!(confirm_resume, RESUME);

pub async fn resume(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    Form(_): Form<Confirmed>,
) -> Result<Response, PageError> {
    console
        .broker
        .resume_schedule(&Caller::default(), &id)
        .await?;
    Ok(back(&id, "resume"))
}

confirm_handler!(confirm_trigger, TRIGGER);

pub async fn trigger(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    Form(_): Form<Confirmed>,
) -> Result<Response, PageError> {
    console
        .broker
        .trigger_schedule(&Caller::default(), &id)
        .await?;
    Ok(back(&id, "trigger"))
}

confirm_handler!(confirm_delete, DELETE);

pub async fn delete(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    Form(_): Form<Confirmed>,
) -> Result<Response, PageError> {
    console
        .broker
        .delete_schedule(&Caller::default(), &id)
        .await?;
    Ok(Redirect::to(&href("/schedules", &[("deleted", &id)])).into_response())
}
