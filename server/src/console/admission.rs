//! Queues: every queue with its counts and its live settings (paused, limits,
//! fairness, aging, retry and lease defaults), read through the service
//! (`Broker::get_queue`, the in-memory snapshot every replica keeps fresh), and
//! one queue's page with its settings in full, pause/resume (in
//! `admission_actions`, confirmed first) and the form that edits its main limits.

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, Query, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::admission_form::QueueForm;
use super::layout::{self, count, csrf, duration, href};
use super::{Console, PageError, Viewer};
use crate::domain::admission::{Fairness, RateLimit};
use crate::service::QueueView;

fn keep(d: Duration) -> String {
    if d.is_zero() {
        "forever".into()
    } else {
        duration(d)
    }
}

pub fn queue_href(name: &str) -> String {
    format!("/queues/{}", layout::encode(name))
}

/// "paused" or "active", as a labelled badge.
pub fn status_badge(paused: bool) -> Markup {
    let name = if paused { "paused" } else { "active" };
    html! { span class={ "badge " (name) } { (name) } }
}

fn limit(n: u32) -> Markup {
    if n == 0 {
        html! { span.muted { "no limit" } }
    } else {
        html! { (count(u64::from(n))) }
    }
}

fn rate(r: Option<RateLimit>) -> Markup {
    match r {
        None => html! { span.muted { "no limit" } },
        Some(r) => html! { (r.per_second) "/s, burst " (r.capacity()) },
    }
}

fn fairness(f: Fairness) -> &'static str {
    match f {
        Fairness::None => "none (priority, then age)",
        Fairness::RoundRobinKeys => "round robin over keys",
    }
}

fn aging(ms: Option<i64>) -> Markup {
    match ms {
        None => html! { span.muted { "off" } },
        Some(ms) => {
            html! { "+1 priority every " (duration(Duration::from_millis(ms.max(0) as u64))) }
        }
    }
}

/// Every queue the overview counts or that has stored settings, by name.
async fn views(console: &Console) -> Result<Vec<(QueueView, Option<[u64; 3]>)>, PageError> {
    // The counts come from the overview (read at most every 2 s for all viewers).
    let overview = console.overview.get(console).await?;
    let mut names: Vec<String> = console
        .broker
        .settings()
        .live
        .snapshot()
        .keys()
        .cloned()
        .collect();
    names.extend(overview.queues.iter().map(|q| q.stats.queue.clone()));
    names.sort();
    names.dedup();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let view = console.broker.get_queue(&name).await?;
        let counts = overview
            .queues
            .iter()
            .find(|q| q.stats.queue == name)
            .map(|q| {
                let s = &q.stats;
                [s.ready + s.scheduled, s.leased, s.dead]
            });
        out.push((view, counts));
    }
    Ok(out)
}

#[derive(Debug, Default, Deserialize)]
pub struct DoneQuery {
    done: Option<String>,
}

fn done_notice(done: Option<&str>) -> Option<&'static str> {
    Some(match done? {
        "pause" => "Paused: no task of this queue is leased until it is resumed.",
        "resume" => "Resumed: its tasks are leased again.",
        "edit" => "Saved. Every replica applies it within a second.",
        "unchanged" => "Nothing changed.",
        _ => return None,
    })
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Query(q): Query<DoneQuery>,
) -> Result<Markup, PageError> {
    let queues = views(&console).await?;
    let limits = super::buckets::section(&console, &viewer).await?;
    let notice = match q.done.as_deref() {
        Some("lifted") => Some("Lifted: the key's or bucket's tasks are leased again."),
        Some("unlifted") => Some("That cooldown had ended already."),
        _ => None,
    };
    let body = html! {
        h1 { "Queues" }
        @if let Some(n) = notice { p.notice role="status" { (n) } }
        p.muted { "Live settings: stored in the database, applied by every replica within a second; "
            "seeded from " code { "[queues.NAME]" } " in the configuration file and changed here or with "
            code { "taskbroker queue set" } "." }
        @if queues.is_empty() { p { "No queue has tasks or settings yet." } } @else {
            div.scroll { table #queue-settings {
                caption { "Every queue with its limits; open one to change them" }
                thead { tr {
                    th scope="col" { "Queue" } th scope="col" { "Status" }
                    th scope="col" .num { "Pending" } th scope="col" .num { "Leased" } th scope="col" .num { "Dead" }
                    th scope="col" { "Max concurrent" } th scope="col" { "Rate limit" }
                    th scope="col" { "Per key" } th scope="col" { "Fairness" } th scope="col" { "Priority aging" }
                    th scope="col" { "Per worker" } th scope="col" .num { "Attempts" } th scope="col" { "Lease" }
                    th scope="col" { "Keep finished" } th scope="col" { "Actions" }
                } }
                tbody { @for (q, counts) in &queues {
                    @let c = &q.live.config;
                    @let s = &q.live.settings;
                    @let [pending, leased, dead] = counts.unwrap_or_default();
                    tr {
                        th scope="row" { a href=(queue_href(&q.name)) { (q.name) } }
                        td { (status_badge(c.paused)) }
                        td.num { a href=(href("/tasks", &[("queue", &q.name)])) { (count(pending)) } }
                        td.num { a href=(href("/tasks", &[("queue", &q.name), ("state", "leased")])) { (count(leased)) } }
                        td.num { a href=(href("/dead", &[("queue", &q.name)])) { (count(dead)) } }
                        td { (limit(c.max_concurrent)) }
                        td { (rate(c.rate_limit)) }
                        td { (limit(c.max_concurrent_per_key)) " · " (rate(c.per_key_rate_limit)) }
                        td { (fairness(c.fairness)) }
                        td { (aging(c.aging_ms())) }
                        td { (limit(s.max_leases_per_worker)) }
                        td.num { (s.retry.max_attempts) }
                        td { (duration(q.live.default_lease)) " (" (duration(s.min_lease)) " – " (duration(s.max_lease)) ")" }
                        td { (keep(s.retention)) }
                        td.row-actions {
                            @let which = html! { span.vh { " " (q.name) } };
                            @if c.paused {
                                a.button href={ (queue_href(&q.name)) "/resume" } { "Resume…" (which) }
                            } @else {
                                a.button href={ (queue_href(&q.name)) "/pause" } { "Pause…" (which) }
                            }
                            " "
                            a href=(queue_href(&q.name)) { "Edit" (which) }
                        }
                    }
                } }
            } }
        }
        (limits)
    };
    Ok(layout::page("Queues", "/queues", Some(&viewer), body))
}

/// One queue: its settings in full, pause/resume, and the form of its limits.
pub async fn one(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
    Query(q): Query<DoneQuery>,
) -> Result<Markup, PageError> {
    let view = console.broker.get_queue(&name).await?;
    let form = QueueForm::from_config(&view.live.config);
    let charts = super::charts::section(&console, &view.name).await?;
    Ok(queue_page(
        &viewer,
        &view,
        &form,
        done_notice(q.done.as_deref()),
        None,
        Some(charts),
    ))
}

/// The queue page, with the form filled from `form` and, after a refused
/// change, the reason as one line; `charts` are its throughput charts.
pub fn queue_page(
    viewer: &Viewer,
    q: &QueueView,
    form: &QueueForm,
    notice: Option<&str>,
    error: Option<&str>,
    charts: Option<Markup>,
) -> Markup {
    let c = &q.live.config;
    let s = &q.live.settings;
    let base = queue_href(&q.name);
    let body = html! {
        p.crumbs { a href="/queues" { "Queues" } }
        h1 { "Queue " span.mono { (q.name) } " " (status_badge(c.paused)) }
        (layout::notice(notice))
        nav.actions aria-label="Actions" {
            @if c.paused {
                a.button href={ (base) "/resume" } { "Resume…" }
            } @else {
                a.button.danger href={ (base) "/pause" } { "Pause…" }
            }
            a href=(href("/tasks", &[("queue", &q.name)])) { "Its tasks" }
            a href=(href("/dead", &[("queue", &q.name)])) { "Its dead letters" }
        }
        @if let Some(c) = charts { (c) }
        section aria-labelledby="h-settings" {
            h2 #h-settings { "Settings" }
            dl.fields #settings {
                dt { "Status" } dd { @if c.paused { "paused: no task is leased" } @else { "active" } }
                dt { "Max concurrent" } dd { (limit(c.max_concurrent)) }
                dt { "Rate limit" } dd { (rate(c.rate_limit)) }
                dt { "Max concurrent per key" } dd { (limit(c.max_concurrent_per_key)) }
                dt { "Rate limit per key" } dd { (rate(c.per_key_rate_limit)) }
                dt { "Fairness" } dd { (fairness(c.fairness)) }
                dt { "Priority aging" } dd { (aging(c.aging_ms())) }
                dt { "Max leases per worker" } dd { (limit(s.max_leases_per_worker)) }
                dt { "Max attempts" } dd { (s.retry.max_attempts) }
                dt { "Backoff" } dd { (duration(s.retry.initial_backoff)) " × " (s.retry.backoff_multiplier)
                    " up to " (duration(s.retry.max_backoff)) ", jitter " (s.retry.jitter) }
                dt { "Lease" } dd { (duration(q.live.default_lease)) " by default, "
                    (duration(s.min_lease)) " – " (duration(s.max_lease)) }
                dt { "Max payload" } dd { (count(s.max_payload_bytes as u64)) " B" }
                dt { "Keep finished" } dd { (keep(s.retention)) }
                dt { "Payload schema" } dd { @match &c.payload_schema {
                    None => span.muted { "none: payloads are opaque bytes" },
                    Some(text) => details #payload-schema {
                        summary { (count(text.len() as u64)) " bytes (every submitted payload must match it)" }
                        pre { code { (text) } }
                    },
                } }
                dt { "Changed (UTC)" } dd { @match q.live.updated_at {
                    Some(t) => { (layout::time(t)) " (version " (q.live.version) ")" },
                    None => span.muted { "never: the configuration's settings" },
                } }
            }
        }
        section aria-labelledby="h-edit" {
            h2 #h-edit { "Change the limits" }
            p.muted { "Leave a limit blank (or 0) for no limit. Applied at once, here and on every replica within a second." }
            @if let Some(e) = error { p.error role="alert" { (e) } }
            form.stack method="post" action={ (base) "/edit" } {
                (csrf(viewer))
                label for="q-max-concurrent" { "Max concurrent (leases held at once in the cluster)" }
                input #q-max-concurrent name="max_concurrent" inputmode="numeric" value=(form.max_concurrent);
                label for="q-rate" { "Rate limit (leases per second)" }
                input #q-rate name="rate_per_second" inputmode="decimal" value=(form.rate_per_second);
                label for="q-burst" { "Rate limit burst (0: the rate, rounded up)" }
                input #q-burst name="rate_burst" inputmode="numeric" value=(form.rate_burst);
                label for="q-key-max" { "Max concurrent per key" }
                input #q-key-max name="max_concurrent_per_key" inputmode="numeric" value=(form.max_concurrent_per_key);
                label for="q-key-rate" { "Rate limit per key (leases per second)" }
                input #q-key-rate name="key_rate_per_second" inputmode="decimal" value=(form.key_rate_per_second);
                label for="q-key-burst" { "Rate limit per key burst" }
                input #q-key-burst name="key_rate_burst" inputmode="numeric" value=(form.key_rate_burst);
                label for="q-fairness" { "Fairness" }
                select #q-fairness name="fairness" {
                    option value="none" selected[form.fairness != "round_robin_keys"] { "none (priority, then age)" }
                    option value="round_robin_keys" selected[form.fairness == "round_robin_keys"] { "round robin over keys" }
                }
                label for="q-aging" { "Priority aging (+1 priority per wait of, e.g. 30s; blank: off)" }
                input #q-aging name="priority_aging" value=(form.priority_aging);
                label for="q-per-worker" { "Max leases per worker" }
                input #q-per-worker name="max_leases_per_worker" inputmode="numeric" value=(form.max_leases_per_worker);
                label for="q-attempts" { "Max attempts (blank: the broker's default)" }
                input #q-attempts name="max_attempts" inputmode="numeric" value=(form.max_attempts);
                label for="q-payload-schema" { "Payload schema (a JSON Schema document every submitted payload must match; "
                    (if c.payload_schema.is_some() { "to remove it, tick the box below" } else { "blank: none" })
                    "; tasks already stored are not checked)" }
                textarea #q-payload-schema name="payload_schema" rows="6" spellcheck="false" { (form.payload_schema) }
                @if c.payload_schema.is_some() {
                    label.check { input type="checkbox" name="remove_payload_schema" value="1" checked[form.remove_payload_schema]; " Remove the payload schema (payloads become opaque bytes again)" }
                }
                div.buttons {
                    button type="submit" { "Save the limits" }
                    a href=(base) { "Reset the form" }
                }
            }
        }
    };
    layout::page(&format!("Queue {}", q.name), "/queues", Some(viewer), body)
}
