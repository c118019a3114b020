//! "Why isn't my task running?": the gates Explain finds holding a waiting
//! task, each in a sentence, shown on its task page.

use maud::{Markup, html};

use super::admission::queue_href;
use super::layout::{self, opt_time};
use crate::domain::explain::{Gate, GateKind};

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
    }
}

/// The section, for a task Explain was asked about.
pub fn section(gates: &[Gate], queue: &str) -> Markup {
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
        }
    }
}
