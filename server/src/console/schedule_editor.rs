//! Creating and editing a schedule: the form (read by `schedule_form`) with a
//! live preview of the spec's next fire times, and the POSTs that create and
//! update through the service's CreateSchedule and UpdateSchedule. The preview
//! is the service's PreviewSchedule: htmx asks `/schedules/preview` for it as
//! the spec is typed; without JavaScript the Preview button posts the form and
//! the page comes back with it, creating nothing. A value the form or the
//! service refuses shows the form again, as typed, with one line naming the
//! field (400), and changes nothing. The CSRF field is checked by the guard
//! before any POST runs; every console viewer is an admin (or auth is off), the
//! role that may write every schedule.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{Markup, html};

use super::layout::{self, csrf, time};
use super::payload_fields;
use super::schedule_form::{ScheduleForm, TemplateForm};
use super::schedules::schedule_href;
use super::{Console, PageError, Viewer};
use crate::domain::routing::Sticky;
use crate::domain::schedule::{Misfire, Overlap};
use crate::service::{Caller, RetrySpec, ScheduleInput, ServiceError, StickySpec};
use crate::store::ScheduleRecord;

/// Fire times shown by the preview.
const PREVIEW: i32 = 5;

/// The preview of a form's spec: its next fire times, or why there are none.
/// A fresh form (nothing typed or sent yet) says what will show there instead
/// of refusing the empty spec.
fn preview_of(console: &Console, form: &ScheduleForm, fresh: bool) -> Markup {
    if fresh {
        return html! { p.small.muted #preview-hint { "The next fire times show here as the spec is typed." } };
    }
    let times = form.spec().and_then(|(spec, start, end)| {
        console
            .broker
            .preview_schedule(Some(spec), start, end, None, PREVIEW)
            .map_err(|e| PageError::from(e).message())
    });
    html! {
        @match times {
            Ok(t) if t.is_empty() => p #preview-none { "It would not fire again (the window or the one-off is past)." }
            Ok(t) => {
                p.small.muted { "Next fire times (UTC):" }
                ol #preview-times { @for f in &t { li { (time(*f)) } } }
            }
            Err(e) => p.error #preview-error { (e) }
        }
    }
}

/// `/schedules/preview`: the preview alone, for htmx.
pub async fn preview(
    State(console): State<Arc<Console>>,
    Form(form): Form<ScheduleForm>,
) -> Markup {
    preview_of(&console, &form, false)
}

fn choice(name: &str, id: &str, current: &str, options: &[(&str, &str)]) -> Markup {
    html! {
        select id=(id) name=(name) {
            @for (value, label) in options {
                option value=(value) selected[current.trim() == *value] { (label) }
            }
        }
    }
}

/// The payload inputs of the queue's payload schema, when it allows them.
fn schema_fields(console: &Console, queue: &str) -> Option<Vec<payload_fields::Field>> {
    let live = console.broker.settings().queue(queue.trim())?;
    payload_fields::fields_of(live.config.payload_schema.as_deref()?)
}

/// A form whose payload came from the schema's inputs gets the payload they make.
fn fill_payload(console: &Console, f: &mut ScheduleForm) -> Result<(), String> {
    if f.task.payload_fields != "1" {
        return Ok(());
    }
    if let Some(fields) = schema_fields(console, &f.task.queue) {
        f.task.payload = payload_fields::build(&fields, &f.task.extra)?;
    }
    Ok(())
}

/// The task template's inputs. A new TaskTemplate field is one more label and
/// input here (and one field in `schedule_form::TemplateForm`).
fn template_fields(console: &Console, t: &TemplateForm) -> Markup {
    let fields = schema_fields(console, &t.queue);
    html! {
        label for="s-queue" { "Queue" }
        input #s-queue name="queue" required value=(t.queue);
        @if fields.is_none() {
            p.small.muted { "A queue with a payload schema: Preview shows one input per property." }
        }
        @match &fields {
            Some(fields) => (payload_fields::render(fields, &t.payload)),
            None => {
                label for="s-payload" { "Payload (text, often JSON)" }
                textarea #s-payload name="payload" rows="3" { (t.payload) }
            }
        }
        label for="s-priority" { "Priority (higher runs first)" }
        input #s-priority name="priority" inputmode="numeric" value=(t.priority);
        label for="s-attempts" { "Max attempts (blank: the queue's default)" }
        input #s-attempts name="max_attempts" inputmode="numeric" value=(t.max_attempts);
        label for="s-deadline" { "Deadline after it is made (e.g. 30m; blank: none)" }
        input #s-deadline name="deadline_after" value=(t.deadline_after);
        label for="s-metadata" { "Metadata (one key=value per line)" }
        textarea #s-metadata name="metadata" rows="2" { (t.metadata) }
        label for="s-key" { "Key of each task ({fire_time} and {schedule_id} substituted; a key taken makes no task; blank: none)" }
        input #s-key name="key" value=(t.key);
        label for="s-fanout" { "Copies per fire (fan-out; blank: one task)" }
        input #s-fanout name="fanout" inputmode="numeric" value=(t.fanout);
        label for="s-concurrency-key" { "Concurrency key (blank: none)" }
        input #s-concurrency-key name="concurrency_key" value=(t.concurrency_key);
        label for="s-target-worker" { "Target worker id (blank: any worker)" }
        input #s-target-worker name="target_worker" value=(t.target_worker);
        label for="s-target-labels" { "Target labels (one key=value per line; blank: any)" }
        textarea #s-target-labels name="target_labels" rows="2" { (t.target_labels) }
        label for="s-sticky" { "Sticky retries" }
        (choice("sticky", "s-sticky", &t.sticky, &[("", "none"), ("soft", "soft"), ("hard", "hard")]))
    }
}

/// How the form came to be shown: `Fresh` before anything was typed or sent
/// (no validation shows yet), `Filled` for a stored schedule or what the browser sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    Fresh,
    Filled,
}

/// The whole form: `existing` is the schedule being edited (none: a new one).
fn form_page(
    console: &Console,
    viewer: &Viewer,
    existing: Option<&ScheduleRecord>,
    f: &ScheduleForm,
    error: Option<&str>,
    shown: Shown,
) -> Markup {
    let (title, action, button) = match existing {
        None => (
            "New schedule".to_string(),
            "/schedules/new".to_string(),
            "Create the schedule",
        ),
        Some(s) => (
            format!("Edit schedule {}", s.id),
            format!("{}/edit", schedule_href(&s.id)),
            "Save the changes",
        ),
    };
    let kind = |k: &str| f.kind.trim() == k || (k == "cron" && f.kind.trim().is_empty());
    let body = html! {
        p.crumbs { a href="/schedules" { "Schedules" } }
        h1 { (title) }
        @if let Some(e) = error { p.error role="alert" { (e) } }
        form.stack.schedule method="post" action=(action) {
            (csrf(viewer))
            @match existing {
                None => {
                    label for="s-id" { "Schedule id (letters, digits and . _ : -)" }
                    input #s-id name="schedule_id" required value=(f.schedule_id);
                }
                Some(s) => { input type="hidden" name="schedule_id" value=(s.id); }
            }
            fieldset.when hx-post="/schedules/preview" hx-trigger="input delay:300ms"
                hx-target="#preview" hx-include="closest form" {
                legend { "When it fires" }
                div.kinds role="radiogroup" aria-label="Kind" {
                    @for (k, label) in [("cron", "cron line"), ("every", "every interval"), ("once", "once")] {
                        label { input type="radio" name="kind" value=(k) checked[kind(k)]; " " (label) }
                    }
                }
                div.kind-cron {
                    label for="s-cron" { "Cron line (minute hour day month weekday; 6 fields: seconds first)" }
                    input #s-cron name="cron" value=(f.cron) placeholder="0 3 * * *";
                    label for="s-tz" { "Time zone (IANA, e.g. Europe/Berlin; blank: UTC)" }
                    input #s-tz name="timezone" value=(f.timezone);
                }
                div.kind-every {
                    label for="s-every" { "Every (e.g. 15m, 1h 30m; at least 1s)" }
                    input #s-every name="every" value=(f.every);
                    label for="s-anchor" { "Anchor, the phase (UTC; blank: now)" }
                    input #s-anchor name="anchor" value=(f.anchor) placeholder="2026-01-31 09:00";
                }
                div.kind-once {
                    label for="s-once" { "At (UTC)" }
                    input #s-once name="once_at" value=(f.once_at) placeholder="2026-01-31 09:00";
                }
                label for="s-start" { "Not before (UTC; blank: no start)" }
                input #s-start name="start_time" value=(f.start_time);
                label for="s-end" { "Not after (UTC; blank: no end)" }
                input #s-end name="end_time" value=(f.end_time);
                div #preview role="status" aria-live="polite" { (preview_of(console, f, shown == Shown::Fresh)) }
                div.buttons {
                    button.secondary type="submit" name="preview" value="1" { "Preview" }
                }
            }
            label for="s-overlap" { "While the previous run is unfinished" }
            (choice("overlap", "s-overlap", &f.overlap, &[
                (Overlap::Skip.as_str(), "skip the fire time"),
                (Overlap::Allow.as_str(), "fire anyway (runs overlap)"),
                (Overlap::BufferOne.as_str(), "keep one, fire it when the run ends"),
                (Overlap::CancelPrevious.as_str(), "cancel the previous run, then fire"),
            ]))
            label for="s-misfire" { "Fire times missed while no broker ran" }
            (choice("misfire", "s-misfire", &f.misfire, &[
                (Misfire::FireOnce.as_str(), "fire once for all of them"),
                (Misfire::Skip.as_str(), "skip them"),
                (Misfire::CatchUp.as_str(), "catch up each, within the window below"),
            ]))
            label for="s-catchup" { "Catch-up window (blank: 1h; at most 7 days)" }
            input #s-catchup name="catchup_window" value=(f.catchup_window);
            label for="s-max-runs" { "Stop after this many runs (blank: no limit)" }
            input #s-max-runs name="max_runs" inputmode="numeric" value=(f.max_runs);
            @if existing.is_none() {
                label.check { input type="checkbox" name="paused" value="on" checked[!f.paused.is_empty()]; " Create it paused" }
            }
            fieldset {
                legend { "The task it makes" }
                (template_fields(console, &f.task))
            }
            div.buttons {
                button type="submit" { (button) }
                a href=(existing.map_or("/schedules".to_string(), |s| schedule_href(&s.id))) { "Cancel" }
            }
        }
    };
    layout::page(&title, "/schedules", Some(viewer), body)
}

fn refused(
    console: &Console,
    viewer: &Viewer,
    s: Option<&ScheduleRecord>,
    f: &ScheduleForm,
    e: &str,
) -> Response {
    let page = form_page(console, viewer, s, f, Some(e), Shown::Filled);
    (StatusCode::BAD_REQUEST, page).into_response()
}

/// A service refusal the form can show as its one line; other errors are pages.
fn form_error(e: ServiceError) -> Result<String, PageError> {
    match e {
        ServiceError::Invalid(_)
        | ServiceError::OutOfRange(_)
        | ServiceError::AlreadyExists { .. } => Ok(PageError::from(e).message()),
        e => Err(e.into()),
    }
}

pub async fn new_form(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
) -> Markup {
    form_page(
        &console,
        &viewer,
        None,
        &ScheduleForm::blank(),
        None,
        Shown::Fresh,
    )
}

pub async fn create(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Form(mut f): Form<ScheduleForm>,
) -> Result<Response, PageError> {
    if let Err(e) = fill_payload(&console, &mut f) {
        return Ok(refused(&console, &viewer, None, &f, &e));
    }
    if !f.preview.is_empty() {
        return Ok(form_page(&console, &viewer, None, &f, None, Shown::Filled).into_response());
    }
    let input = match f.input() {
        Ok(i) => i,
        Err(e) => return Ok(refused(&console, &viewer, None, &f, &e)),
    };
    match console
        .broker
        .create_schedule(&Caller::default(), input)
        .await
    {
        Ok(s) => Ok(Redirect::to(&format!("{}?done=create", schedule_href(&s.id))).into_response()),
        Err(e) => Ok(refused(&console, &viewer, None, &f, &form_error(e)?)),
    }
}

pub async fn edit_form(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
) -> Result<Markup, PageError> {
    let s = console.broker.get_schedule(&Caller::default(), &id).await?;
    Ok(form_page(
        &console,
        &viewer,
        Some(&s),
        &ScheduleForm::from_record(&s),
        None,
        Shown::Filled,
    ))
}

/// What the form cannot show is kept from the stored template: the retry
/// backoff, a SOFT sticky timeout, a fan-out's distinct_workers, and the payload's exact bytes while its field is untouched (a
/// browser turns line ends into `\r\n`; bytes that are not UTF-8 show as U+FFFD).
fn keep_unshown(input: &mut ScheduleInput, s: &ScheduleRecord, f: &ScheduleForm) {
    let Some(t) = input.task.as_mut() else { return };
    let r = &s.template.retry;
    t.retry = RetrySpec {
        initial_backoff: Some(r.initial_backoff),
        backoff_multiplier: Some(r.backoff_multiplier),
        max_backoff: Some(r.max_backoff),
        jitter: Some(r.jitter),
        ..t.retry.clone()
    };
    // A SOFT policy's timeout and a fan-out's distinct_workers.
    if let (Some(StickySpec::Soft { timeout }), Some(Sticky::Soft(kept))) =
        (t.sticky.as_mut(), s.template.sticky)
    {
        *timeout = Some(kept);
    }
    if let (Some(fo), Some(kept)) = (t.fanout.as_mut(), s.template.fanout) {
        fo.distinct_workers = kept.distinct_workers;
    }
    let shown = TemplateForm::from_template(&s.template).payload;
    if f.task.payload_is(&shown) {
        t.payload = s.template.payload.clone();
    }
}

pub async fn edit(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Form(mut f): Form<ScheduleForm>,
) -> Result<Response, PageError> {
    let s = console.broker.get_schedule(&Caller::default(), &id).await?;
    f.schedule_id = s.id.clone();
    if let Err(e) = fill_payload(&console, &mut f) {
        return Ok(refused(&console, &viewer, Some(&s), &f, &e));
    }
    if !f.preview.is_empty() {
        return Ok(form_page(&console, &viewer, Some(&s), &f, None, Shown::Filled).into_response());
    }
    let mut input = match f.input() {
        Ok(i) => i,
        Err(e) => return Ok(refused(&console, &viewer, Some(&s), &f, &e)),
    };
    let paths = f.changed(&ScheduleForm::from_record(&s));
    let base = schedule_href(&s.id);
    if paths.is_empty() {
        return Ok(Redirect::to(&format!("{base}?done=unchanged")).into_response());
    }
    keep_unshown(&mut input, &s, &f);
    match console
        .broker
        .update_schedule(&Caller::default(), input, paths)
        .await
    {
        Ok(_) => Ok(Redirect::to(&format!("{base}?done=edit")).into_response()),
        Err(e) => Ok(refused(&console, &viewer, Some(&s), &f, &form_error(e)?)),
    }
}
