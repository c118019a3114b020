//! Queues: the counts of every queue beside its effective settings (retry
//! policy, payload and lease limits, retention), as configured at start-up.

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use maud::{Markup, html};

use super::layout::{self, count, duration, href};
use super::{Console, PageError, Viewer};

fn keep(d: Duration) -> String {
    if d.is_zero() {
        "forever".into()
    } else {
        duration(d)
    }
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Markup, PageError> {
    // The overview's counts (read at most every 2 s for all viewers).
    let overview = console.overview.get(&console).await?;
    let stats: Vec<_> = overview.queues.iter().map(|q| &q.stats).collect();
    let settings = console.broker.settings();
    let body = html! {
        h1 { "Queues" }
        p.muted { "Live settings (seeded from "
            code { "[queues.NAME]" } " in the configuration file; changed with "
            code { "taskbroker queue set" } ")." }
        @if stats.is_empty() { p { "No queue has tasks yet." } } @else {
            div.scroll { table #queue-settings {
                thead { tr {
                    th scope="col" { "Queue" } th scope="col" .num { "Pending" } th scope="col" .num { "Leased" }
                    th scope="col" .num { "Dead" } th scope="col" .num { "Attempts" } th scope="col" { "Backoff" }
                    th scope="col" .num { "Max payload" } th scope="col" { "Lease" } th scope="col" { "Keep finished" }
                    th scope="col" { "Overrides" }
                } }
                tbody { @for s in stats {
                    @let q = settings.queue(&s.queue).map(|l| l.settings);
                    @let retry = settings.retry_for(&s.queue);
                    @let (min_lease, max_lease) = settings.lease_bounds(std::slice::from_ref(&s.queue));
                    tr {
                        th scope="row" { a href=(href("/tasks", &[("queue", &s.queue)])) { (s.queue) } }
                        td.num { (count(s.ready + s.scheduled)) }
                        td.num { (count(s.leased)) }
                        td.num { a href=(href("/dead", &[("queue", &s.queue)])) { (count(s.dead)) } }
                        td.num { (retry.max_attempts) }
                        td { (duration(retry.initial_backoff)) " × " (retry.backoff_multiplier) " up to " (duration(retry.max_backoff)) }
                        td.num { (count(settings.max_payload_for(&s.queue) as u64)) " B" }
                        td { (duration(min_lease)) " – " (duration(max_lease)) }
                        td { (keep(q.as_ref().map_or(settings.retention, |q| q.retention))) }
                        td { @if q.is_some() { "yes" } @else { span.muted { "defaults" } } }
                    }
                } }
            } }
        }
    };
    Ok(layout::page("Queues", "/queues", Some(&viewer), body))
}
