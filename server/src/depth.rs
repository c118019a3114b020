//! The queue depths `/metrics` shows, kept as a snapshot so that a scrape never
//! counts the task table.
//!
//! Counting every task by queue and state is a scan of the whole table: about
//! half a second of database time with a million tasks stored. Keeping exact
//! counters instead would add a write to a shared counter row to every submit,
//! lease and settle (and serialize the commits that touch one queue on that row).
//! So the count runs off the scrape and off the hot path: a scrape answers from the
//! last snapshot at once and, when that snapshot is older than `max_age`, starts
//! one count in the background for the next scrape. Depths are therefore at most
//! `max_age` plus one count's duration behind (plus one scrape interval between
//! scrapes), which `taskbroker_queue_depth_age_seconds` shows. The first scrape
//! after start (and every scrape when `max_age` is zero) counts before it answers.
//! One replica counts at most once per `max_age`, whatever the number of scrapers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::service::Broker;
use crate::store::{QueueStatsRecord, StoreResult};

/// How old the depths a scrape shows may grow before it starts a new count.
/// Default 10 s: below a typical 15-30 s scrape interval, so each scrape shows a
/// count taken since the one before.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(10);

/// One count of the task table.
#[derive(Clone)]
pub struct Snapshot {
    pub stats: Arc<Vec<QueueStatsRecord>>,
    /// When the count was taken (it ran from `taken` on).
    pub taken: Instant,
}

pub struct DepthCache {
    max_age: Duration,
    last: Mutex<Option<Snapshot>>,
    /// A count is running in the background (one at a time).
    counting: AtomicBool,
}

impl DepthCache {
    pub fn new(max_age: Duration) -> Arc<Self> {
        Arc::new(DepthCache {
            max_age,
            last: Mutex::new(None),
            counting: AtomicBool::new(false),
        })
    }

    fn last(&self) -> Option<Snapshot> {
        // Held for a clone of two pointers, never across an await.
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn keep(&self, s: Snapshot) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        // A slow count that started earlier must not replace a newer one.
        if last.as_ref().is_none_or(|l| l.taken <= s.taken) {
            *last = Some(s);
        }
    }

    async fn count(&self, broker: &Broker) -> StoreResult<Snapshot> {
        let taken = Instant::now();
        let stats = broker
            .store()
            .queue_stats(&[], broker.clock().now())
            .await?;
        let s = Snapshot {
            stats: Arc::new(stats),
            taken,
        };
        self.keep(s.clone());
        Ok(s)
    }

    /// The depths to show now: the last snapshot, counting again in the
    /// background when it is older than `max_age`; a fresh count when there is
    /// none yet or `max_age` is zero.
    pub async fn get(self: &Arc<Self>, broker: &Arc<Broker>) -> StoreResult<Snapshot> {
        let Some(last) = self.last().filter(|_| !self.max_age.is_zero()) else {
            return self.count(broker).await;
        };
        if last.taken.elapsed() >= self.max_age
            && self
                .counting
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let (me, broker) = (self.clone(), broker.clone());
            tokio::spawn(async move {
                // Cleared however the count ends, so a failed one is retried.
                let _counting = Counting(&me.counting);
                if let Err(e) = me.count(&broker).await {
                    tracing::warn!(error = %e, "metrics: counting queue depths failed");
                }
            });
        }
        Ok(last)
    }
}

/// Clears the "a count is running" flag when the count ends.
struct Counting<'a>(&'a AtomicBool);

impl Drop for Counting<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
