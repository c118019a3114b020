//! [`Relay`]: ships committed `taskbroker_outbox` rows to the broker.
//!
//! One batch is one transaction on the producer's database: lock up to
//! `batch_size` rows in id order (`FOR UPDATE SKIP LOCKED`, so several relays share
//! the table without shipping a row twice at once), Submit them in one call, each
//! under its idempotency key (the spec's own key, else the row's `outbox:UUID`),
//! delete them, commit. The delete happens only after the broker's acknowledgement;
//! if the relay dies between the two, the rows stay and the next Submit of the same
//! keys returns the tasks the first one made (`deduplicated`) instead of new ones.
//!
//! On Postgres the relay wakes on the table's NOTIFY and also polls, so a notification
//! lost while its connection was down only delays rows; MySQL has no notifications, so
//! there it polls only (`poll_interval`). A row the broker refuses for good (an
//! invalid spec, a key held by another producer) gets `failed_at` and `last_error`
//! and is skipped from then on; it never blocks the rows behind it.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::FusedFuture;
use sqlx::postgres::PgListener;

use super::CHANNEL;
use super::batch::{Batch, secs};
use super::metrics::Counters;
use super::source::Source;
use crate::{Client, Error};

/// Rows per Submit at most: the broker's limit.
const MAX_BATCH: usize = 1000;

/// What a relay did, summed over the batches of a call or a reporting period.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RelayReport {
    /// Rows acknowledged by the broker and deleted.
    pub shipped: u64,
    /// Of those, rows whose key the broker already held (a redelivery after a crash
    /// between acknowledgement and delete, or a spec key of an existing task).
    pub deduplicated: u64,
    /// Rows the broker refused for good, now marked `failed_at`.
    pub refused: u64,
    /// Submit calls that were acknowledged.
    pub batches: u64,
    /// The longest a shipped row waited between its insert and its delete.
    pub max_lag: Duration,
}

impl RelayReport {
    fn add(&mut self, other: &RelayReport) {
        self.shipped += other.shipped;
        self.deduplicated += other.deduplicated;
        self.refused += other.refused;
        self.batches += other.batches;
        self.max_lag = self.max_lag.max(other.max_lag);
    }
}

/// Why a relay call stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// The producer's database failed; the batch was rolled back.
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The broker could not take the batch now (unreachable, shedding load, a bad
    /// token); the batch was rolled back and is tried again.
    #[error("broker: {0}")]
    Broker(#[from] Error),
}

/// Settings of a [`Relay`]; see [`Relay::builder`].
#[derive(Debug, Clone)]
pub struct RelayBuilder {
    pub(super) pool: Source,
    pub(super) client: Client,
    batch_size: usize,
    pub(super) max_batch_bytes: usize,
    poll_interval: Duration,
    report_interval: Duration,
    max_backoff: Duration,
}

impl RelayBuilder {
    /// Rows per Submit, 1 to 1000. Default 1000 (the broker's limit).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.clamp(1, MAX_BATCH);
        self
    }

    /// Encoded spec bytes per Submit, at least one row. Default 4 MiB, well under the
    /// broker's default message limit (16 MiB).
    pub fn max_batch_bytes(mut self, n: usize) -> Self {
        self.max_batch_bytes = n.max(1);
        self
    }

    /// How often the table is read without a notification (notifications are lost
    /// while the listening connection is down). Default 2 s.
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = d.max(Duration::from_millis(10));
        self
    }

    /// How often [`Relay::run`] logs what it shipped and the lag. Default 30 s.
    pub fn report_interval(mut self, d: Duration) -> Self {
        self.report_interval = d.max(Duration::from_millis(10));
        self
    }

    /// Longest pause between retries while the broker or the database is away.
    /// Default 5 s.
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.max_backoff = d.max(Duration::from_millis(10));
        self
    }

    pub fn build(self) -> Relay {
        Relay {
            cfg: self,
            counters: Arc::new(Counters::default()),
        }
    }
}

/// Ships the rows of `taskbroker_outbox` in `pool`'s database (Postgres or MySQL) to the
/// broker of `client`.
/// Clones share their counters (see [`Relay::metrics_text`]).
#[derive(Debug, Clone)]
pub struct Relay {
    pub(super) cfg: RelayBuilder,
    counters: Arc<Counters>,
}

impl Relay {
    /// A relay with the default settings: batches of up to 1000 rows or 4 MiB,
    /// a 2 s poll. `pool` is a `PgPool` or a `MySqlPool` (or a [`Source`]).
    pub fn builder(pool: impl Into<Source>, client: Client) -> RelayBuilder {
        RelayBuilder {
            pool: pool.into(),
            client,
            batch_size: MAX_BATCH,
            max_batch_bytes: 4 << 20,
            poll_interval: Duration::from_secs(2),
            report_interval: Duration::from_secs(30),
            max_backoff: Duration::from_secs(5),
        }
    }

    /// Ships every row committed so far, batch after batch, and returns what it did.
    /// Stops at the first error (the batch in hand is rolled back, nothing is lost).
    pub async fn run_once(&self) -> Result<RelayReport, RelayError> {
        self.drain(&mut std::future::pending::<()>()).await
    }

    /// Ships rows as they are committed until `shutdown` completes (for example
    /// [`crate::worker::shutdown_signal`]); the batch in flight is finished first.
    /// Errors of the broker or the database are logged and retried with backoff.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> Result<(), RelayError> {
        let shutdown = shutdown.fuse();
        futures::pin_mut!(shutdown);
        let mut listener = self.listen().await;
        let mut period = RelayReport::default();
        let mut last_report = Instant::now();
        let mut failures = 0u32;
        self.log_refused_rows().await;
        loop {
            match self.drain(&mut shutdown).await {
                Ok(r) => {
                    failures = 0;
                    period.add(&r);
                }
                Err(e) => {
                    failures += 1;
                    self.counters.failed();
                    tracing::warn!(error = %e, failures, "outbox relay: batch not shipped; retrying");
                    let pause = crate::worker::backoff(
                        failures,
                        Duration::from_millis(100),
                        self.cfg.max_backoff,
                    );
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(pause) => continue,
                    }
                }
            }
            if last_report.elapsed() >= self.cfg.report_interval {
                self.report(&period).await;
                period = RelayReport::default();
                last_report = Instant::now();
            }
            if shutdown.is_terminated() {
                break;
            }
            // Sleeps until a notification, the fallback poll or the stop.
            let lost = tokio::select! {
                _ = &mut shutdown => break,
                _ = tokio::time::sleep(self.cfg.poll_interval) => false,
                n = wait_notification(&mut listener) => n.is_err(),
            };
            if lost {
                // The listening connection is gone; polling carries on alone until
                // it is back.
                listener = None;
            }
            if listener.is_none() && matches!(self.cfg.pool, Source::Postgres(_)) {
                listener = self.listen().await;
            }
        }
        if period.shipped + period.refused > 0 {
            self.report(&period).await;
        }
        tracing::info!("outbox relay stopped");
        Ok(())
    }

    async fn listen(&self) -> Option<PgListener> {
        let Source::Postgres(pool) = &self.cfg.pool else {
            return None;
        };
        let attempt = async {
            let mut l = PgListener::connect_with(pool).await?;
            l.listen(CHANNEL).await?;
            Ok::<_, sqlx::Error>(l)
        };
        match attempt.await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "outbox relay: cannot LISTEN; polling only until it can");
                None
            }
        }
    }

    /// Batches until the table is empty, `shutdown` has completed, or an error.
    async fn drain<F>(&self, shutdown: &mut F) -> Result<RelayReport, RelayError>
    where
        F: Future<Output = ()> + Unpin,
    {
        let mut total = RelayReport::default();
        let mut isolate = 0usize;
        let mut conflicts = 0u32;
        loop {
            // Polled once between batches: a stop never cuts a batch in half.
            if (&mut *shutdown).now_or_never().is_some() {
                return Ok(total);
            }
            let limit = if isolate > 0 { 1 } else { self.cfg.batch_size };
            let batch = match self.ship_batch(limit).await {
                // InnoDB chose this batch as a deadlock's victim (relays deleting
                // rows next to each other's): it was rolled back whole, so it is
                // simply taken again.
                Err(RelayError::Database(e)) if conflicts < 20 && super::source::conflict(&e) => {
                    conflicts += 1;
                    tracing::debug!(error = %e, "outbox relay: batch rolled back by a lock conflict; again");
                    continue;
                }
                other => other?,
            };
            conflicts = 0;
            match batch {
                Batch::Empty => return Ok(total),
                Batch::Done(r, taken) => {
                    isolate = isolate.saturating_sub(taken);
                    self.counters.add(&r);
                    total.add(&r);
                }
                Batch::Isolate(n) => isolate = n,
            }
        }
    }

    /// The relay's metrics in the Prometheus text format: totals since it started, and
    /// the oldest waiting row's age, read now.
    pub async fn metrics_text(&self) -> String {
        self.counters.render(self.oldest_pending().await.ok())
    }

    /// Age of the oldest row waiting to be shipped (zero when none waits).
    async fn oldest_pending(&self) -> Result<Duration, sqlx::Error> {
        let age = self.cfg.pool.oldest_pending().await?;
        Ok(age.map(secs).unwrap_or_default())
    }

    async fn report(&self, r: &RelayReport) {
        let oldest = self.oldest_pending().await.map_err(|e| {
            tracing::debug!(error = %e, "outbox relay: cannot read the oldest row");
        });
        tracing::info!(
            shipped = r.shipped,
            deduplicated = r.deduplicated,
            refused = r.refused,
            batches = r.batches,
            max_lag_ms = r.max_lag.as_millis() as u64,
            oldest_pending_ms = oldest.map(|d| d.as_millis() as u64).unwrap_or(0),
            "outbox relay report"
        );
    }

    async fn log_refused_rows(&self) {
        let n = self.cfg.pool.refused_rows().await;
        match n {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                rows = n,
                "outbox relay: rows refused by the broker are kept with failed_at set; \
                 fix them and set failed_at to NULL, or delete them"
            ),
            Err(e) => tracing::warn!(error = %e, "outbox relay: cannot read the outbox table"),
        }
    }
}

async fn wait_notification(listener: &mut Option<PgListener>) -> Result<(), sqlx::Error> {
    match listener {
        Some(l) => l.recv().await.map(|_| ()),
        None => std::future::pending().await,
    }
}
