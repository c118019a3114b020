//! Workers, as seen from the leases they hold now (until workers register with
//! the broker, a worker that holds no lease does not appear): address, queues,
//! tasks running, oldest lease and last activity.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::layout::{self, count, href};
use super::{Console, PageError, Viewer};

/// One worker (id and address) over all its queues.
struct Worker {
    queues: Vec<String>,
    tasks: u64,
    first_leased_at: Option<DateTime<Utc>>,
    last_seen_at: DateTime<Utc>,
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Markup, PageError> {
    let holders = console.broker.lease_holders().await?;
    let now = console.broker.clock().now();
    let mut workers: BTreeMap<(String, String), Worker> = BTreeMap::new();
    for h in holders {
        let w = workers
            .entry((h.worker_id, h.worker_address))
            .or_insert_with(|| Worker {
                queues: Vec::new(),
                tasks: 0,
                first_leased_at: None,
                last_seen_at: h.last_seen_at,
            });
        w.queues.push(h.queue);
        w.tasks += h.tasks;
        w.first_leased_at = match (w.first_leased_at, h.first_leased_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        w.last_seen_at = w.last_seen_at.max(h.last_seen_at);
    }
    let body = html! {
        h1 { "Workers" }
        p.muted { "Workers holding leases now, from the leases themselves; a worker between tasks is not listed." }
        @if workers.is_empty() {
            p { "No worker holds a lease." }
        } @else {
            div.scroll { table #workers {
                thead { tr {
                    th scope="col" { "Worker" } th scope="col" { "Address" } th scope="col" { "Queues" }
                    th scope="col" .num { "Running" } th scope="col" { "Oldest lease" } th scope="col" { "Last seen" }
                } }
                tbody { @for ((id, address), w) in &workers {
                    tr {
                        th scope="row" { (id) }
                        td.mono { (address) }
                        td { (w.queues.join(", ")) }
                        td.num { a href=(href("/tasks", &[("worker", id), ("state", "leased")])) { (count(w.tasks)) } }
                        td { @match w.first_leased_at { Some(t) => { (layout::age(now, t)) " ago" }, None => "—" } }
                        td { (layout::age(now, w.last_seen_at)) " ago" }
                    }
                } }
            } }
        }
    };
    Ok(layout::page("Workers", "/workers", Some(&viewer), body))
}
