//! Workers, from the worker registry every replica shares (ListWorkers and
//! GetWorker): who is connected (seen within `worker_ttl`), labels, address,
//! queues, last seen, the last minute's outcomes and what each runs now (its
//! current leases, each linking to its task); and one worker's page with all of
//! its leases.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use futures::future::try_join_all;
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, count, href, opt_time, time};
use super::{Console, PageError, Viewer, non_empty};
use crate::domain::TaskState;
use crate::service::{ListTasks, ListWorkers, ServiceError};
use crate::store::{WorkerLeaseRecord, WorkerRecord};

/// Workers per page.
const PAGE_SIZE: u32 = 100;
/// Running tasks named on the list per worker (the rest are a link away).
const SHOWN_LEASES: usize = 5;

#[derive(Debug, Default, Deserialize)]
pub struct WorkersQuery {
    queue: Option<String>,
    page: Option<String>,
}

fn worker_href(id: &str) -> String {
    format!("/workers/{}", layout::encode(id))
}

fn labels(w: &WorkerRecord) -> Markup {
    html! {
        @if w.labels.is_empty() { span.muted { "none" } } @else {
            ul.labels { @for (k, v) in &w.labels { li.mono { (k) "=" (v) } } }
        }
    }
}

fn task_link(l: &WorkerLeaseRecord) -> Markup {
    html! { a.mono href={ "/tasks/" (layout::encode(&l.task_id)) } { (l.task_id) } }
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Query(q): Query<WorkersQuery>,
) -> Result<Markup, PageError> {
    let queue = non_empty(&q.queue);
    let b = &console.broker;
    let listed = b
        .list_workers(ListWorkers {
            queue: queue.clone(),
            page_size: PAGE_SIZE,
            page_token: non_empty(&q.page),
            ..ListWorkers::default()
        })
        .await?;
    // A few of each worker's current leases, read together (one indexed read
    // each, of at most SHOWN_LEASES + 1 tasks; the worker's page has them all).
    let leases = try_join_all(listed.workers.iter().map(|w| async move {
        if w.leases_held == 0 {
            return Ok(Vec::new());
        }
        let page = b
            .list_tasks(ListTasks {
                worker_id: Some(w.worker_id.clone()),
                states: vec![TaskState::Leased],
                page_size: SHOWN_LEASES as i32 + 1,
                ..ListTasks::default()
            })
            .await?;
        Ok::<_, ServiceError>(page.tasks.into_iter().map(|t| t.id).collect::<Vec<_>>())
    }))
    .await?;
    let now = b.clock().now();
    let ttl = layout::duration(b.settings().worker_ttl);
    let body = html! {
        h1 { "Workers" }
        p.muted { "Workers seen in the last " (ttl) " by any replica (every Lease and Heartbeat is seen; "
            "a worker is recorded at most every 5 s while nothing it says changes)." }
        form.filters method="get" action="/workers" role="search" aria-label="Filter workers" {
            div { label for="w-queue" { "Queue" } input #w-queue name="queue" value=(queue.clone().unwrap_or_default()); }
            div.buttons { button type="submit" { "Filter" } a href="/workers" { "All workers" } }
        }
        @if listed.workers.is_empty() {
            p { "No worker has been seen recently." }
        } @else {
            div.scroll { table #workers {
                caption { "Workers by id, with the tasks each runs now" }
                thead { tr {
                    th scope="col" { "Worker" } th scope="col" { "Address" } th scope="col" { "Labels" }
                    th scope="col" { "Queues" } th scope="col" { "Last seen" }
                    th scope="col" .num { "Done / failed last min" } th scope="col" { "Running" }
                } }
                tbody { @for (w, held) in listed.workers.iter().zip(&leases) {
                    tr {
                        th scope="row" { a href=(worker_href(&w.worker_id)) { (w.worker_id) } }
                        td.mono { (w.address) }
                        td { (labels(w)) }
                        td { (w.queues.join(", ")) }
                        td { (layout::age(now, w.last_seen)) " ago" }
                        td.num { (count(w.completed_last_minute)) " / " (count(w.failed_last_minute)) }
                        td {
                            @if held.is_empty() { span.muted { "idle" } } @else {
                                a href=(href("/tasks", &[("worker", &w.worker_id), ("state", "leased")])) {
                                    (count(w.leases_held)) " task" @if w.leases_held != 1 { "s" } }
                                ": "
                                @for (i, id) in held.iter().take(SHOWN_LEASES).enumerate() {
                                    @if i > 0 { ", " } a.mono href={ "/tasks/" (layout::encode(id)) } { (id) }
                                }
                                @if held.len() > SHOWN_LEASES { ", …" }
                            }
                        }
                    }
                } }
            } }
            @if let Some(next) = &listed.next_page_token {
                p { a href=(href("/workers", &[("queue", queue.as_deref().unwrap_or("")), ("page", next)])) { "Next page" } }
            }
        }
    };
    Ok(layout::page("Workers", "/workers", Some(&viewer), body))
}

/// One worker with every lease it holds.
pub async fn one(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
) -> Result<Markup, PageError> {
    let b = &console.broker;
    let (w, leases) = b.get_worker(&id).await?;
    let now = b.clock().now();
    let body = html! {
        p.crumbs { a href="/workers" { "Workers" } }
        h1 { "Worker " span.mono { (w.worker_id) } }
        dl.fields #worker {
            dt { "Address" } dd.mono { (w.address) }
            dt { "Labels" } dd { (labels(&w)) }
            dt { "Queues" } dd { @for (i, q) in w.queues.iter().enumerate() {
                @if i > 0 { ", " } a href=(href("/tasks", &[("queue", q)])) { (q) } } }
            dt { "First seen (UTC)" } dd { (time(w.first_seen)) }
            dt { "Last seen (UTC)" } dd { (time(w.last_seen)) " (" (layout::age(now, w.last_seen)) " ago)" }
            dt { "Last minute" } dd { (count(w.completed_last_minute)) " completed, " (count(w.failed_last_minute)) " failed" }
        }
        h2 { "Running now" }
        @if leases.is_empty() { p { "No lease held." } } @else {
            div.scroll { table #leases {
                thead { tr {
                    th scope="col" { "Task" } th scope="col" { "Queue" } th scope="col" .num { "Attempt" }
                    th scope="col" { "Leased (UTC)" } th scope="col" { "Lease expires (UTC)" }
                } }
                tbody { @for l in &leases {
                    tr {
                        td { (task_link(l)) }
                        td { (l.queue) }
                        td.num { (l.attempt) }
                        td { (opt_time(l.leased_at)) }
                        td { (opt_time(l.lease_expires_at)) }
                    }
                } }
            } }
        }
    };
    Ok(layout::page(
        &format!("Worker {}", w.worker_id),
        "/workers",
        Some(&viewer),
        body,
    ))
}
