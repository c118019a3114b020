//! Limit buckets and cooldowns on the Queues page: every bucket with its
//! limits and its use now (tokens, leases held, a cooldown), and the live
//! cooldowns workers set, each with a Lift button (a POST carrying the CSRF
//! field, which the guard checks before it runs).

use std::sync::Arc;

use axum::Form;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{csrf, opt_time};
use super::{Console, PageError, Viewer};
use crate::domain::admission::RateLimit;
use crate::domain::bucket::CooldownTarget;

fn rate(r: Option<RateLimit>) -> Markup {
    match r {
        Some(r) => html! { (r.per_second) "/s (burst " (r.capacity()) ")" },
        None => html! { span.muted { "none" } },
    }
}

fn limit(n: u32) -> Markup {
    if n == 0 {
        html! { span.muted { "none" } }
    } else {
        html! { (n) }
    }
}

/// The section of the Queues page.
pub async fn section(console: &Console, viewer: &Viewer) -> Result<Markup, PageError> {
    let buckets = console.broker.list_buckets().await?;
    let cooldowns = console.broker.list_cooldowns("", "").await?;
    Ok(html! {
        h2 #buckets { "Limit buckets" }
        p.muted { "One limit shared by every task that names the bucket, in every queue and on every replica; "
            "changed with " code { "taskbroker bucket set" } "." }
        @if buckets.is_empty() { p { "No bucket is defined." } } @else {
            div.scroll { table #bucket-use {
                caption { "Every bucket with its limits and its use now" }
                thead { tr {
                    th scope="col" { "Bucket" } th scope="col" { "Rate limit" }
                    th scope="col" { "Max concurrent" } th scope="col" .num { "Tokens" }
                    th scope="col" .num { "Leases held" } th scope="col" { "Cooldown until" }
                } }
                tbody { @for b in &buckets {
                    tr {
                        th scope="row" .mono { (b.name) }
                        td { (rate(b.config.rate_limit)) }
                        td { (limit(b.config.max_concurrent)) }
                        td.num { @if b.config.rate_limit.is_some() { (format!("{:.1}", b.tokens)) } @else { "–" } }
                        td.num { (b.leased) }
                        td { (opt_time(b.cooldown_until)) }
                    }
                } }
            } }
        }
        h2 #cooldowns { "Cooldowns" }
        p.muted { "Set by a worker's Fail (from a 429's Retry-After): no task of the key or bucket is leased until then." }
        @if cooldowns.is_empty() { p { "No cooldown is live." } } @else {
            div.scroll { table #cooldown-list {
                caption { "Live cooldowns, soonest end first" }
                thead { tr {
                    th scope="col" { "Holds" } th scope="col" { "Until" }
                    th scope="col" { "Set by task" } th scope="col" { "Actions" }
                } }
                tbody { @for c in &cooldowns {
                    @let (queue, key, bucket) = c.target.columns();
                    tr {
                        th scope="row" {
                            @match &c.target {
                                CooldownTarget::Key { queue, key } => { "key " span.mono { (key) } " of queue " span.mono { (queue) } }
                                CooldownTarget::Bucket(b) => { "bucket " span.mono { (b) } }
                            }
                        }
                        td { (opt_time(Some(c.until))) }
                        td { a.mono href={ "/tasks/" (c.task_id) } { (c.task_id) } }
                        td.row-actions {
                            form method="post" action="/cooldowns/lift" {
                                (csrf(viewer))
                                input type="hidden" name="queue" value=(queue);
                                input type="hidden" name="concurrency_key" value=(key);
                                input type="hidden" name="bucket" value=(bucket);
                                button type="submit" { "Lift" span.vh { " the cooldown of " (if bucket.is_empty() { key } else { bucket }) } }
                            }
                        }
                    }
                } }
            } }
        }
    })
}

#[derive(Debug, Default, Deserialize)]
pub struct LiftForm {
    #[serde(default)]
    queue: String,
    #[serde(default)]
    concurrency_key: String,
    #[serde(default)]
    bucket: String,
}

/// Ends a cooldown now, then back to the Queues page.
pub async fn lift(
    State(console): State<Arc<Console>>,
    Form(f): Form<LiftForm>,
) -> Result<Response, PageError> {
    let lifted = console
        .broker
        .lift_cooldown(&f.queue, &f.concurrency_key, &f.bucket)
        .await?;
    let done = if lifted { "lifted" } else { "unlifted" };
    Ok(Redirect::to(&format!("/queues?done={done}#cooldowns")).into_response())
}
