//! "Why isn't my task running?": the gates Explain finds holding a waiting
//! task, each in a sentence, shown on its task page.

use maud::{Markup, html};

use super::admission::queue_href;
use super::layout::{self, opt_time};
use crate::domain::explain::{Gate, GateKind, LeasePath};

fn title(kind: GateKind) -> &'static str {
    match kind {
        GateKind::None => "Nothing holds it",
        GateKind::RunAtInFuture => "Not due yet",
        GateKind::RetryBackoff => "Retry backoff",
        GateKind::BlockedByDependency => "Waiting for its dependencies",
        GateKind::QueuePaused => "Queue paused",
        GateKind::QueueConcurrencyFull => "Queue at its concurrency limit",
        GateKind::KeyConcurrencyFull => "Key at its concurrency limit",
        GateKind::RateLimited => "Rate limited",
        GateKind::NoMatchingWorker => "No matching worker",
        GateKind::StickyReserved => "Reserved for a worker",
        GateKind::WaitingBehind => "Waiting behind other tasks",
        GateKind::BucketConcurrencyFull => "Bucket at its concurrency limit",
        GateKind::BucketRateLimited => "Bucket rate limited",
        GateKind::Cooldown => "In a cooldown",
    }
}

/// The rules the lease that takes the task applies, in a sentence.
fn path_sentence(path: LeasePath) -> &'static str {
    match path {
        LeasePath::Plain => "the plain lease: any worker of its queue, in lease order",
        LeasePath::Routed => "the routed lease: its target, sticky policy or fan-out apply",
        LeasePath::Gated => "the gated lease: its queue's admission gates apply",
        LeasePath::Matched => "handed to a waiting long-poll at submit",
    }
}

/// The section, for a task Explain was asked about.
pub fn section(gates: &[Gate], path: Option<LeasePath>, queue: &str) -> Markup {
    html! {
        section aria-labelledby="h-explain" {
            h2 #h-explain { "Why is it not running?" }
            ul #explain {
                @for g in gates {
                    li data-gate=(format!("{:?}", g.kind)) {
                        strong { (title(g.kind)) } ": " (g.detail)
                        @if let Some(u) = g.until { " (until " (opt_time(Some(u))) " UTC)" }
                        @if g.ahead > 0 { " (" (layout::count(g.ahead)) " ahead)" }
                        @if !g.holders.is_empty() {
                            " Held by: "
                            @for (i, h) in g.holders.iter().enumerate() {
                                @if i > 0 { ", " }
                                a.mono href={ "/tasks/" (layout::encode(h)) } { (h) }
                            }
                        }
                        @if g.kind == GateKind::QueuePaused {
                            " " a href=(queue_href(queue)) { "Open the queue to resume it" }
                        }
                    }
                }
            }
            @if let Some(p) = path {
                p #lease-path data-path=(p.as_str()) {
                    "Taken by " (path_sentence(p)) " (path " code { (p.as_str()) } " in "
                    code { "taskbroker_tasks_leased_total" } ")."
                }
            }
        }
    }
}
