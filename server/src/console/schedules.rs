//! Schedules: the list (spec, state, next and last fire time, runs) and one
//! schedule's page (its rules, its next fire times, its run history newest first,
//! a link to the tasks it made). The actions (pause, resume, trigger, delete) are
//! in `schedule_actions`, each confirmed first.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, badge, count, duration, href, opt_time, time};
use super::{Console, PageError, Viewer, non_empty};
use crate::domain::schedule::Spec;
use crate::service::{Caller, SpecInput};
use crate::store::ScheduleRecord;

/// Schedules per list page, and runs per history page.
const PAGE_SIZE: i32 = 100;
const RUNS_PAGE_SIZE: i32 = 50;
/// Upcoming fire times shown on a schedule's page.
const UPCOMING: i32 = 5;

/// Whether a schedule will fire again (as the API's ScheduleState says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Active,
    Paused,
    Completed,
}

pub fn status(s: &ScheduleRecord) -> Status {
    if s.state_reason.is_some() {
        Status::Completed
    } else if s.paused {
        Status::Paused
    } else {
        Status::Active
    }
}

fn status_badge(s: Status) -> Markup {
    let name = match s {
        Status::Active => "active",
        Status::Paused => "paused",
        Status::Completed => "completed",
    };
    html! { span class={ "badge " (name) } { (name) } }
}

/// The next fire time: unset when paused or completed.
pub fn next_fire(s: &ScheduleRecord) -> Option<DateTime<Utc>> {
    match status(s) {
        Status::Active => s.next_spec_at.into_iter().chain(s.buffered_at).min(),
        _ => None,
    }
}

/// A spec for people: `cron "0 3 * * *" (Europe/Berlin)`, `every 15 min 0 s`, `once`.
fn spec_text(spec: &Spec) -> Markup {
    match spec {
        Spec::Cron { expr, timezone } => html! {
            "cron " code { (expr) } " (" (if timezone.is_empty() { "UTC" } else { timezone }) ")"
        },
        Spec::Every { every, .. } => html! { "every " (duration(*every)) },
        Spec::Once { at } => html! { "once, at " (time(*at)) },
    }
}

/// The zone a cron schedule reads its line in, when it is not UTC: its times
/// are shown in it too, beside UTC.
fn zone_of(spec: &Spec) -> Option<chrono_tz::Tz> {
    match spec {
        Spec::Cron { timezone, .. } => timezone
            .parse::<chrono_tz::Tz>()
            .ok()
            .filter(|z| *z != chrono_tz::Tz::UTC && *z != chrono_tz::Tz::Etc__UTC),
        _ => None,
    }
}

/// A time in UTC and, for a schedule with a zone, the same instant on the
/// zone's clock beside it: `2026-12-02 02:00:00 (03:00:00 Europe/Berlin,
/// 2026-12-02)`.
fn zoned(t: DateTime<Utc>, zone: Option<chrono_tz::Tz>) -> Markup {
    html! {
        (time(t))
        @if let Some(z) = zone {
            " " span.tz { "(" (t.with_timezone(&z).format("%Y-%m-%d %H:%M:%S")) " " (z.name()) ")" }
        }
    }
}

fn opt_zoned(t: Option<DateTime<Utc>>, zone: Option<chrono_tz::Tz>) -> Markup {
    match t {
        Some(t) => zoned(t, zone),
        None => opt_time(None),
    }
}

/// A heading's clock: `(UTC)`, or `(UTC; Europe/Berlin)` for a zoned schedule.
fn clocks(zone: Option<chrono_tz::Tz>) -> String {
    match zone {
        Some(z) => format!("(UTC; {})", z.name()),
        None => "(UTC)".to_string(),
    }
}

pub fn schedule_href(id: &str) -> String {
    format!("/schedules/{}", layout::encode(id))
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    page: Option<String>,
    /// After a delete: which schedule.
    deleted: Option<String>,
}

pub async fn list(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Query(q): Query<ListQuery>,
) -> Result<Markup, PageError> {
    let token = non_empty(&q.page).unwrap_or_default();
    let page = console
        .broker
        .list_schedules(&Caller::default(), PAGE_SIZE, &token)
        .await?;
    let notice = non_empty(&q.deleted).map(|id| format!("Deleted schedule {id}."));
    let body = html! {
        h1 { "Schedules" }
        (layout::notice(notice.as_deref()))
        nav.actions aria-label="Actions" { a.button href="/schedules/new" { "New schedule…" } }
        @if page.schedules.is_empty() {
            p { "No schedules." }
            p.muted { "Create one here, with " code { "taskbroker schedule create" } " or with the ScheduleService API." }
        } @else {
            div.scroll { table #schedules {
                caption { "By schedule id; times in UTC, and in the schedule's zone when it has one" }
                thead { tr {
                    th scope="col" { "Schedule" } th scope="col" { "When" } th scope="col" { "Queue" }
                    th scope="col" { "State" } th scope="col" { "Next fire" } th scope="col" { "Last fire" }
                    th scope="col" .num { "Runs" } th scope="col" { "Actions" }
                } }
                tbody { @for s in &page.schedules {
                    @let st = status(s);
                    @let base = schedule_href(&s.id);
                    @let zone = zone_of(&s.spec);
                    tr {
                        th scope="row" { a.mono href=(base) { (s.id) } }
                        td { (spec_text(&s.spec)) }
                        td { a href=(href("/tasks", &[("queue", &s.template.queue)])) { (s.template.queue) } }
                        td { (status_badge(st))
                            @if let Some(r) = &s.state_reason { " " span.muted.small { (r) } } }
                        td { (opt_zoned(next_fire(s), zone)) }
                        td { (opt_zoned(s.last_fire_at, zone)) }
                        td.num { (count(s.runs)) }
                        td.row-actions { (row_actions(&base, &s.id, st, true)) }
                    }
                } }
            } }
            nav.pager aria-label="Pages" {
                @if !token.is_empty() { a href="/schedules" { "First" } }
                @if !page.next_page_token.is_empty() {
                    a rel="next" href=(href("/schedules", &[("page", &page.next_page_token)])) { "Next →" }
                }
            }
        }
    };
    Ok(layout::page("Schedules", "/schedules", Some(&viewer), body))
}

/// Links to the confirmation of each action the state allows. `in_list` adds the
/// schedule's id to each link's accessible name, after the visible words (many
/// rows share one page; a screen reader's list of links must tell them apart).
fn row_actions(base: &str, id: &str, st: Status, in_list: bool) -> Markup {
    let which = html! { @if in_list { span.vh { " " (id) } } };
    html! {
        @if st == Status::Active {
            a.button href={ (base) "/pause" } { "Pause…" (which) }
        }
        @if st == Status::Paused {
            a.button href={ (base) "/resume" } { "Resume…" (which) }
        }
        " "
        a.button href={ (base) "/trigger" } { "Trigger now…" (which) }
        " "
        a.button.danger href={ (base) "/delete" } { "Delete…" (which) }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ScheduleQuery {
    /// The run history's page token.
    runs: Option<String>,
    /// The action just done, for a notice.
    done: Option<String>,
}

fn done_notice(done: Option<&str>) -> Option<&'static str> {
    Some(match done? {
        "pause" => "Paused: nothing fires until it is resumed.",
        "resume" => "Resumed.",
        "trigger" => "Triggered: the new run is at the top of the history.",
        "create" => "Created.",
        "edit" => "Saved: its fire times are computed anew from now.",
        "unchanged" => "Nothing changed.",
        _ => return None,
    })
}

fn spec_input(spec: &Spec) -> SpecInput {
    match spec.clone() {
        Spec::Cron { expr, timezone } => SpecInput::Cron { expr, timezone },
        Spec::Every { every, anchor } => SpecInput::Every {
            every,
            anchor: Some(anchor),
        },
        Spec::Once { at } => SpecInput::Once { at },
    }
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Query(q): Query<ScheduleQuery>,
) -> Result<Markup, PageError> {
    let b = &console.broker;
    let caller = Caller::default();
    let token = non_empty(&q.runs).unwrap_or_default();
    let s = b.get_schedule(&caller, &id).await?;
    let runs = b
        .list_schedule_runs(&caller, &id, RUNS_PAGE_SIZE, &token)
        .await?;
    let st = status(&s);
    let upcoming = if st == Status::Active {
        b.preview_schedule(
            Some(spec_input(&s.spec)),
            s.start_time,
            s.end_time,
            None,
            UPCOMING,
        )
        .unwrap_or_default()
    } else {
        Vec::new()
    };
    let base = schedule_href(&s.id);
    let t = &s.template;
    let zone = zone_of(&s.spec);
    let clock = clocks(zone);
    let body = html! {
        p.crumbs { a href="/schedules" { "Schedules" } }
        h1 { "Schedule " span.mono { (s.id) } " " (status_badge(st)) }
        (layout::notice(done_notice(q.done.as_deref())))
        nav.actions aria-label="Actions" {
            (row_actions(&base, &s.id, st, false))
            a href={ (base) "/edit" } { "Edit" }
            a href=(href("/tasks", &[("schedule", &s.id)])) { "Tasks it made" }
        }
        section aria-labelledby="h-when" {
            h2 #h-when { "When" }
            dl.fields {
                dt { "Fires" } dd { (spec_text(&s.spec)) }
                @if let Spec::Every { anchor, .. } = &s.spec { dt { "Anchor (UTC)" } dd { (time(*anchor)) } }
                dt { "State" } dd { (status_badge(st)) @if let Some(r) = &s.state_reason { " " (r) } }
                dt { "Next fire " (clock) } dd #next-fire { (opt_zoned(next_fire(&s), zone)) }
                @if upcoming.len() > 1 {
                    dt { "Then (by the spec)" }
                    dd { ul.plain { @for f in upcoming.iter().filter(|f| Some(**f) != next_fire(&s)).take(4) { li { (zoned(*f, zone)) } } } }
                }
                dt { "Last fire " (clock) } dd { (opt_zoned(s.last_fire_at, zone)) }
                dt { "Runs" } dd { (count(s.runs)) @if s.max_runs > 0 { " of at most " (s.max_runs) } }
                dt { "Window " (clock) } dd { (opt_zoned(s.start_time, zone)) " to " (opt_zoned(s.end_time, zone)) }
                dt { "While a run is unfinished" } dd { (s.overlap.as_str()) }
                dt { "Missed fire times" } dd { (s.misfire.as_str())
                    @if s.misfire == crate::domain::schedule::Misfire::CatchUp { " (within " (duration(s.catchup_window)) ")" } }
                dt { "Created (UTC)" } dd { (time(s.created_at)) @if let Some(p) = &s.created_by { " by " (p) } }
                dt { "Updated (UTC)" } dd { (time(s.updated_at)) }
            }
        }
        section aria-labelledby="h-template" {
            h2 #h-template { "The task it makes" }
            dl.fields {
                dt { "Queue" } dd { a href=(href("/tasks", &[("queue", &t.queue)])) { (t.queue) } }
                dt { "Priority" } dd { (t.priority) }
                dt { "Attempts" } dd { (t.retry.max_attempts) }
                dt { "Deadline" } dd { @match t.deadline_after { Some(d) => { (duration(d)) " after it is made" } None => span.muted { "none" } } }
                dt { "Payload" } dd { (count(t.payload.len() as u64)) " bytes" }
                @for (k, v) in &t.metadata { dt { "Metadata " (k) } dd.mono { (v) } }
                @if let Some(k) = &t.key { dt { "Key" } dd.mono { (k) } }
                @if let Some(f) = &t.fanout {
                    dt { "Copies per fire" } dd { (f.copies) @if f.distinct_workers { " (distinct workers)" } }
                }
                @if let Some(k) = &t.concurrency_key { dt { "Concurrency key" } dd.mono { (k) } }
                @if let Some(w) = &t.target.worker_id { dt { "Target worker" } dd.mono { (w) } }
                @for (k, v) in &t.target.labels { dt { "Target label " (k) } dd.mono { (v) } }
                @if let Some(st) = &t.sticky { dt { "Sticky retries" } dd { (st.as_str()) } }
            }
        }
        section aria-labelledby="h-runs" {
            h2 #h-runs { "Run history" }
            @if runs.runs.is_empty() { p { "No runs yet." } } @else {
                div.scroll { table #runs {
                    caption { "Newest fire time first" }
                    thead { tr {
                        th scope="col" { "Fire time " (clock) } th scope="col" { "Task" }
                        th scope="col" { "Task state now" } th scope="col" { "Last error" }
                        th scope="col" { "Made by" }
                    } }
                    tbody { @for r in &runs.runs {
                        tr {
                            td { (zoned(r.fire_time, zone)) }
                            td { a.mono href={ "/tasks/" (layout::encode(&r.task_id)) } { (r.task_id) } }
                            td { @match r.task_state { Some(st) => (badge(st)), None => span.muted { "deleted by retention" } } }
                            td.error-text { @match &r.task_last_error { Some(e) => (e), None => span.muted { "—" } } }
                            td { @if r.triggered { "trigger" } @else { "the spec" } }
                        }
                    } }
                } }
                nav.pager aria-label="Run history pages" {
                    @if !token.is_empty() { a href=(base) { "Newest" } }
                    @if !runs.next_page_token.is_empty() {
                        a rel="next" href=(href(&base, &[("runs", &runs.next_page_token)])) { "Older →" }
                    }
                }
            }
        }
    };
    Ok(layout::page(
        &format!("Schedule {}", s.id),
        "/schedules",
        Some(&viewer),
        body,
    ))
}
