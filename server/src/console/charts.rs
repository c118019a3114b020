//! A queue's throughput and failure charts: finished attempts per minute over
//! the last hour and per hour over the last day, as inline SVG bars
//! (succeeded below, failed above), each with its totals in words and one
//! tooltip per bar. No script: the charts are drawn by the server.

use std::time::Duration;

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::layout::count;
use super::{Console, PageError};
use crate::service::Throughput;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);
const MINUTE: Duration = Duration::from_secs(60);

const W: f64 = 600.0;
const H: f64 = 120.0;

/// One chart: `id` names it for tests and links, `unit` is "minute" or "hour".
fn chart(id: &str, title: &str, unit: &str, t: &Throughput) -> Markup {
    let ok: u64 = t.succeeded.iter().sum();
    let bad: u64 = t.failed.iter().sum();
    let n = t.succeeded.len().max(1);
    let top = t
        .succeeded
        .iter()
        .zip(&t.failed)
        .map(|(s, f)| s + f)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let slot = W / n as f64;
    let gap = if slot > 4.0 { 1.0 } else { 0.0 };
    let fmt = if unit == "minute" {
        "%H:%M"
    } else {
        "%d %H:00"
    };
    let at = |i: usize| -> DateTime<Utc> {
        t.since + chrono::Duration::from_std(t.bucket * i as u32).unwrap_or_default()
    };
    let label = format!("{title}: {} succeeded, {} failed", count(ok), count(bad));
    html! {
        figure.chart #(id) data-succeeded=(ok) data-failed=(bad) {
            figcaption {
                strong { (title) } " (per " (unit) ", UTC): "
                span.ok { (count(ok)) " succeeded" } ", " span.bad { (count(bad)) " failed" }
            }
            svg.chart role="img" aria-label=(label) viewBox={ "0 0 " (W) " " (H) }
                preserveAspectRatio="none" {
                line.axis x1="0" y1=(H) x2=(W) y2=(H) {}
                @for i in 0..t.succeeded.len() {
                    @let (s, f) = (t.succeeded[i], t.failed[i]);
                    @if s + f > 0 {
                        @let hs = s as f64 / top * (H - 4.0);
                        @let hf = f as f64 / top * (H - 4.0);
                        @let x = i as f64 * slot;
                        g {
                            title { (at(i).format(fmt)) ": " (s) " succeeded, " (f) " failed" }
                            @if s > 0 { rect.ok x=(fmt1(x)) y=(fmt1(H - hs)) width=(fmt1(slot - gap)) height=(fmt1(hs)) {} }
                            @if f > 0 { rect.bad x=(fmt1(x)) y=(fmt1(H - hs - hf)) width=(fmt1(slot - gap)) height=(fmt1(hf)) {} }
                        }
                    }
                }
            }
            div.axis aria-hidden="true" {
                span { (at(0).format(fmt)) } span { "top: " (top as u64) " per " (unit) } span { "now" }
            }
        }
    }
}

fn fmt1(v: f64) -> String {
    format!("{v:.1}")
}

/// The section of a queue's page with both charts.
pub async fn section(console: &Console, queue: &str) -> Result<Markup, PageError> {
    let b = &console.broker;
    let (hour, day) = tokio::try_join!(
        b.queue_throughput(queue, HOUR, MINUTE),
        b.queue_throughput(queue, DAY, HOUR),
    )?;
    Ok(html! {
        section aria-labelledby="h-throughput" {
            h2 #h-throughput { "Throughput and failures" }
            p.muted.small { "Finished attempts: succeeded, and failed (an error, an expired lease or a passed deadline)." }
            div.charts {
                (chart("chart-hour", "Last hour", "minute", &hour))
                (chart("chart-day", "Last day", "hour", &day))
            }
        }
    })
}
