//! Dead letters: dead tasks grouped by queue and last error, largest group
//! first; each group links to its tasks (requeue, cancel or inspect one) and
//! offers "requeue all" and "cancel all", which show the count and ask first.
//! Cancelling a dead task moves it to CANCELLED: it leaves this list, keeps its
//! attempts and last error, and can still be requeued.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, count, csrf, href, opt_time, short};
use super::{Console, PageError, Viewer, non_empty};
use crate::service::REQUEUE_BATCH;

#[derive(Debug, Default, Deserialize)]
pub struct DeadQuery {
    queue: Option<String>,
    /// After a bulk requeue: how many.
    requeued: Option<u64>,
    /// After a bulk cancel: how many.
    cancelled: Option<u64>,
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Query(q): Query<DeadQuery>,
) -> Result<Markup, PageError> {
    let queue = non_empty(&q.queue);
    let groups = console.broker.dead_groups(queue.clone(), None, 200).await?;
    let notice = match (q.requeued, q.cancelled) {
        (Some(n), _) => Some(format!("Requeued {} dead tasks.", count(n))),
        (_, Some(n)) => Some(format!("Cancelled {} dead tasks.", count(n))),
        _ => None,
    };
    let body = html! {
        h1 { "Dead letters" }
        (layout::notice(notice.as_deref()))
        form.filters method="get" action="/dead" role="search" aria-label="Filter dead letters" {
            div { label for="d-queue" { "Queue" } input #d-queue name="queue" value=(queue.clone().unwrap_or_default()); }
            div.buttons { button type="submit" { "Filter" } a href="/dead" { "All queues" } }
        }
        @if groups.is_empty() {
            p { "No dead tasks." }
        } @else {
            div.scroll { table #dead {
                caption { "Dead tasks by queue and last error, largest group first" }
                thead { tr {
                    th scope="col" { "Queue" } th scope="col" { "Last error" } th scope="col" .num { "Tasks" }
                    th scope="col" { "Last died (UTC)" } th scope="col" { "Actions" }
                } }
                tbody { @for g in &groups {
                    @let error_label = if g.error.is_empty() { "(no error message)".to_string() } else { short(&g.error, 200) };
                    // Every row has the same links: their accessible names say which group.
                    @let which = html! { span.vh { " in " (g.queue) ": " (short(&error_label, 60)) } };
                    tr {
                        td { (g.queue) }
                        td.error-text { (error_label) }
                        td.num { (count(g.count)) }
                        td { (opt_time(g.last_finished_at)) }
                        td.row-actions {
                            a href=(href("/tasks", &[("queue", &g.queue), ("state", "dead"), ("error", &g.error)])) { "Show tasks" (which) }
                            " "
                            a.button href=(href("/dead/requeue", &[("queue", &g.queue), ("error", &g.error)])) {
                                "Requeue all " (count(g.count)) "…" (which)
                            }
                            " "
                            a.button.danger href=(href("/dead/cancel", &[("queue", &g.queue), ("error", &g.error)])) {
                                "Cancel all " (count(g.count)) "…" (which)
                            }
                        }
                    }
                } }
            } }
        }
    };
    Ok(layout::page("Dead letters", "/dead", Some(&viewer), body))
}

#[derive(Debug, Default, Deserialize)]
pub struct GroupQuery {
    queue: String,
    #[serde(default)]
    error: String,
}

/// What a bulk action says.
struct Bulk {
    path: &'static str,
    verb: &'static str,
    title: &'static str,
    explain: &'static str,
    danger: bool,
}

const REQUEUE: Bulk = Bulk {
    path: "/dead/requeue",
    verb: "Requeue",
    title: "Requeue dead tasks",
    explain: "They become ready to run now, each with its full retry budget again.",
    danger: false,
};

const CANCEL: Bulk = Bulk {
    path: "/dead/cancel",
    verb: "Cancel",
    title: "Cancel dead tasks",
    explain: "They leave the dead-letter list and end cancelled: they will not run, their \
              attempts and last error are kept, retention deletes them like any finished \
              task, and each can still be requeued from its page.",
    danger: true,
};

pub async fn confirm_requeue(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Query(g): Query<GroupQuery>,
) -> Result<Markup, PageError> {
    confirm(&console, &viewer, g, &REQUEUE).await
}

pub async fn confirm_cancel(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Query(g): Query<GroupQuery>,
) -> Result<Markup, PageError> {
    confirm(&console, &viewer, g, &CANCEL).await
}

async fn confirm(
    console: &Console,
    viewer: &Viewer,
    g: GroupQuery,
    bulk: &Bulk,
) -> Result<Markup, PageError> {
    let groups = console
        .broker
        .dead_groups(Some(g.queue.clone()), Some(g.error.clone()), 1)
        .await?;
    let n = groups.first().map_or(0, |x| x.count);
    let verb = bulk.verb;
    let body = html! {
        h1 { (verb) " " (count(n)) " dead tasks?" }
        p { "Queue " strong { (g.queue) } ", last error:" }
        pre.body { code { (if g.error.is_empty() { "(no error message)" } else { &g.error }) } }
        @if n == 0 {
            p { "No dead task matches any more." }
            p { a href="/dead" { "Back to dead letters" } }
        } @else {
            p { (bulk.explain)
                @if n > u64::from(REQUEUE_BATCH) {
                    " At most " (count(u64::from(REQUEUE_BATCH))) " are done at a time (the oldest first); " (verb.to_lowercase()) " again for the rest."
                }
            }
            form.confirm method="post" action=(bulk.path) {
                (csrf(viewer))
                input type="hidden" name="queue" value=(g.queue);
                input type="hidden" name="error" value=(g.error);
                button type="submit" class=[bulk.danger.then_some("danger")] { (verb) " " (count(n.min(u64::from(REQUEUE_BATCH)))) " tasks" }
                " "
                a href=(href("/dead", &[("queue", &g.queue)])) { "Go back" }
            }
        }
    };
    Ok(layout::page(bulk.title, "/dead", Some(viewer), body))
}

pub async fn requeue(
    State(console): State<Arc<Console>>,
    Form(g): Form<GroupQuery>,
) -> Result<Response, PageError> {
    let n = console
        .broker
        .requeue_dead(g.queue.clone(), g.error)
        .await?;
    let to = href(
        "/dead",
        &[("queue", &g.queue), ("requeued", &n.to_string())],
    );
    Ok(Redirect::to(&to).into_response())
}

pub async fn cancel(
    State(console): State<Arc<Console>>,
    Form(g): Form<GroupQuery>,
) -> Result<Response, PageError> {
    let n = console.broker.cancel_dead(g.queue.clone(), g.error).await?;
    let to = href(
        "/dead",
        &[("queue", &g.queue), ("cancelled", &n.to_string())],
    );
    Ok(Redirect::to(&to).into_response())
}
