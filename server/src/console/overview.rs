//! Overview: every queue with its counts per state, the last hour's throughput
//! and failure rate as sparklines, the oldest READY task's age and p50/p95 run
//! time. The table refreshes itself every 5 s (htmx polls `/overview/live`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::State;
use maud::{Markup, html};

use super::admission::queue_href;
use super::layout::{self, count, duration, href, sparkline};
use super::{Console, PageError, Viewer};
use crate::service::{Broker, Overview, QueueOverview};

/// How long one overview is shown to every viewer before it is read again (each
/// open overview polls every 5 s). The counts read the live tasks and those
/// finished in the last minute or so (docs/store.md, "Counts of finished
/// tasks"), however many the store keeps, so a view is read in the foreground
/// and is never more than this old.
const FRESH_FOR: Duration = Duration::from_secs(2);

/// The latest overview, shared by all viewers.
#[derive(Default)]
pub struct Cache(Arc<CacheInner>);

#[derive(Clone)]
struct Entry {
    /// When the read began and finished.
    started: Instant,
    at: Instant,
    overview: Arc<Overview>,
    /// Read as the broker started, before anyone asked: never shown (a view
    /// reads its own).
    warm: bool,
}

impl Entry {
    fn fresh(&self) -> bool {
        !self.warm && self.at.elapsed() < FRESH_FOR
    }
}

#[derive(Default)]
struct CacheInner {
    latest: std::sync::Mutex<Option<Entry>>,
    /// Held by a request that reads, so viewers arriving together share one read.
    reading: tokio::sync::Mutex<()>,
}

impl CacheInner {
    fn latest(&self) -> Option<Entry> {
        // A panic while holding this lock cannot leave the value half-written.
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    async fn read(&self, broker: &Broker, warm: bool) -> Result<Arc<Overview>, PageError> {
        let started = Instant::now();
        let o = Arc::new(broker.overview().await?);
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(Entry {
            started,
            at: Instant::now(),
            overview: o.clone(),
            warm,
        });
        Ok(o)
    }
}

impl Cache {
    /// Reads the first overview in the background as the broker starts, so the
    /// first view finds the database's caches warm.
    pub fn warm(&self, broker: Arc<Broker>) {
        let inner = self.0.clone();
        tokio::spawn(async move {
            // Held while reading: a viewer arriving meanwhile shares this read.
            let _reading = inner.reading.lock().await;
            if inner.latest().is_none()
                && let Err(e) = inner.read(&broker, true).await
            {
                tracing::debug!(?e, "console: first overview read failed");
            }
        });
    }

    pub async fn get(&self, console: &Console) -> Result<Arc<Overview>, PageError> {
        let inner = &self.0;
        if let Some(e) = inner.latest().filter(Entry::fresh) {
            return Ok(e.overview);
        }
        let asked = Instant::now();
        let _reading = inner.reading.lock().await;
        match inner.latest() {
            // Begun after this view asked (while it waited for the lock): as new
            // as its own read would be.
            Some(e) if e.fresh() || e.started >= asked => Ok(e.overview),
            _ => inner.read(&console.broker, false).await,
        }
    }
}

pub async fn page(
    State(console): State<Arc<Console>>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Markup, PageError> {
    let o = console.overview.get(&console).await?;
    let paused = paused_queues(&console);
    let body = html! {
        h1 { "Overview" }
        div #live hx-get="/overview/live" hx-trigger="every 5s" hx-swap="innerHTML" {
            (live_view(&o, &paused))
        }
    };
    Ok(layout::page("Overview", "/", Some(&viewer), body))
}

/// The refreshing part alone.
pub async fn live(State(console): State<Arc<Console>>) -> Result<Markup, PageError> {
    let o = console.overview.get(&console).await?;
    Ok(live_view(&o, &paused_queues(&console)))
}

/// The queues paused now (the live settings' snapshot: no database read).
fn paused_queues(console: &Console) -> HashSet<String> {
    let live = console.broker.settings().live.snapshot();
    live.iter()
        .filter(|(_, q)| q.config.paused)
        .map(|(n, _)| n.clone())
        .collect()
}

fn totals(o: &Overview) -> [(&'static str, u64); 4] {
    let sum = |f: fn(&QueueOverview) -> u64| o.queues.iter().map(f).sum::<u64>();
    [
        ("Ready", sum(|q| q.stats.ready)),
        ("Scheduled", sum(|q| q.stats.scheduled)),
        ("Leased", sum(|q| q.stats.leased)),
        ("Dead", sum(|q| q.stats.dead)),
    ]
}

fn live_view(o: &Overview, paused: &HashSet<String>) -> Markup {
    html! {
        p.muted { "Updated " (layout::time(o.now)) " UTC"
            " · refreshes every 5 s" }
        ul.cards aria-label="Totals" {
            @for (label, n) in totals(o) {
                li { span.n { (count(n)) } " " span.l { (label) } }
            }
        }
        @if o.queues.is_empty() {
            p { "No tasks yet. Submit one with "
                code { "taskbroker submit emails --json '{\"to\":\"a@example.com\"}'" } "." }
        } @else {
            div.scroll {
                table #queues {
                    caption { "Queues (throughput, failure rate and run times over the last hour) · "
                        a href="/queues" { "settings, pause and resume" } }
                    thead { tr {
                        th scope="col" { "Queue" }
                        th scope="col" .num { "Ready" }
                        th scope="col" .num { "Scheduled" }
                        th scope="col" .num { "Leased" }
                        th scope="col" .num { "Succeeded" }
                        th scope="col" .num { "Dead" }
                        th scope="col" .num { "Cancelled" }
                        th scope="col" { "Oldest ready" }
                        th scope="col" { "Throughput" }
                        th scope="col" { "Failure rate" }
                        th scope="col" .num { "p50" }
                        th scope="col" .num { "p95" }
                    } }
                    tbody {
                        @for q in &o.queues { (row(o, q, paused.contains(&q.stats.queue))) }
                    }
                }
            }
        }
    }
}

fn row(o: &Overview, q: &QueueOverview, paused: bool) -> Markup {
    let s = &q.stats;
    let name = s.queue.as_str();
    let per_min: Vec<f64> = q
        .succeeded
        .iter()
        .zip(&q.failed)
        .map(|(a, b)| (a + b) as f64)
        .collect();
    let done: u64 = q.succeeded.iter().sum::<u64>() + q.failed.iter().sum::<u64>();
    let failed: u64 = q.failed.iter().sum();
    let rate = if done == 0 {
        0.0
    } else {
        failed as f64 * 100.0 / done as f64
    };
    let state_link = |state: &str| href("/tasks", &[("queue", name), ("state", state)]);
    html! {
        tr {
            th scope="row" { a href=(href("/tasks", &[("queue", name)])) { (name) }
                @if paused { " " a href=(queue_href(name)) { span.badge.paused { "paused" } } } }
            td.num { a href=(state_link("ready")) { (count(s.ready)) } }
            td.num { a href=(state_link("scheduled")) { (count(s.scheduled)) } }
            td.num { a href=(state_link("leased")) { (count(s.leased)) } }
            td.num { (count(s.succeeded)) }
            td.num { a href=(href("/dead", &[("queue", name)])) { (count(s.dead)) } }
            td.num { (count(s.cancelled)) }
            td { @match s.oldest_ready_at {
                Some(t) => (layout::age(o.now, t)),
                None => span.muted { "—" },
            } }
            td { (sparkline(&per_min, None, &format!("{} attempts finished in the last hour", count(done))))
                 " " span.small { (count(done)) "/h" } }
            td { (sparkline(&q.failure_rate(), Some(1.0), &format!("{rate:.1}% of attempts failed in the last hour")))
                 " " span.small { (format!("{rate:.1}%")) } }
            td.num { @match q.p50 { Some(d) => (duration(d)), None => span.muted { "—" } } }
            td.num { @match q.p95 { Some(d) => (duration(d)), None => span.muted { "—" } } }
        }
    }
}
