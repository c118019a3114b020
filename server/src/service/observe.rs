//! Reads of the broker as a whole, for the console: the overview (counts,
//! last hour's throughput and failure rate, run-time percentiles), dead tasks
//! grouped by error and their bulk requeue or cancel, and the workers holding leases.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Broker, ServiceError};
use crate::domain::StoredState;
use crate::domain::validate::{self, Invalid};
use crate::store::CancelDeadParams;
use crate::store::{
    AttemptDurationParams, AttemptHistogramParams, DeadGroup, DeadGroupParams, LeaseHolder,
    LeaseHolderParams, QueueStatsRecord, RequeueDeadParams,
};

/// The overview's time window and its resolution.
pub const WINDOW: Duration = Duration::from_secs(3600);
pub const BUCKET: Duration = Duration::from_secs(60);
/// Successful attempts sampled for the run-time percentiles.
const RUN_TIME_SAMPLE: u32 = 5000;
/// Dead tasks requeued by one bulk requeue at most.
pub const REQUEUE_BATCH: u32 = 10_000;

/// One queue on the overview.
#[derive(Debug, Clone)]
pub struct QueueOverview {
    pub stats: QueueStatsRecord,
    /// Finished attempts per bucket over the window, oldest first.
    pub succeeded: Vec<u64>,
    pub failed: Vec<u64>,
    pub p50: Option<Duration>,
    pub p95: Option<Duration>,
}

impl QueueOverview {
    /// Failed attempts as a share of all finished ones, per bucket (0 when none).
    pub fn failure_rate(&self) -> Vec<f64> {
        self.succeeded
            .iter()
            .zip(&self.failed)
            .map(|(&s, &f)| {
                if s + f == 0 {
                    0.0
                } else {
                    f as f64 / (s + f) as f64
                }
            })
            .collect()
    }
}

/// One queue's finished attempts over a window, per bucket, oldest first.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// The start of the first bucket; buckets end on whole multiples of `bucket`
    /// (the last one holds the current minute or hour so far).
    pub since: DateTime<Utc>,
    pub bucket: Duration,
    pub succeeded: Vec<u64>,
    /// Failed, lease expired or deadline exceeded.
    pub failed: Vec<u64>,
}

/// Buckets one throughput read returns at most.
pub const MAX_BUCKETS: u64 = 1440;

pub struct Overview {
    pub now: DateTime<Utc>,
    pub queues: Vec<QueueOverview>,
}

/// The `q`-quantile (0..=1) of `sorted` by the nearest-rank method.
pub fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn optional_queue(queue: &Option<String>) -> Result<(), Invalid> {
    match queue {
        Some(q) => validate::queue_name("queue", q),
        None => Ok(()),
    }
}

impl Broker {
    pub async fn overview(&self) -> Result<Overview, ServiceError> {
        let now = self.clock.now();
        let since = now - chrono::Duration::from_std(WINDOW).unwrap_or_default();
        let store = self.store();
        let histogram = AttemptHistogramParams {
            since,
            until: now,
            bucket: BUCKET,
            queue: None,
        };
        let durations = AttemptDurationParams {
            since,
            limit: RUN_TIME_SAMPLE,
        };
        let (stats, buckets, durations) = tokio::try_join!(
            store.queue_stats(&[], now),
            store.attempt_histogram(&histogram),
            store.attempt_durations(&durations),
        )?;
        let n = (WINDOW.as_secs() / BUCKET.as_secs()) as usize;
        let mut queues: BTreeMap<String, QueueOverview> = stats
            .into_iter()
            .map(|s| {
                let q = QueueOverview {
                    stats: s,
                    succeeded: vec![0; n],
                    failed: vec![0; n],
                    p50: None,
                    p95: None,
                };
                (q.stats.queue.clone(), q)
            })
            .collect();
        for b in buckets {
            if let Some(q) = queues.get_mut(&b.queue)
                && let Some(i) = usize::try_from(b.bucket).ok().filter(|&i| i < n)
            {
                q.succeeded[i] += b.succeeded;
                q.failed[i] += b.failed;
            }
        }
        let mut times: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        for d in durations {
            times.entry(d.queue).or_default().push(d.run_time);
        }
        for (queue, mut t) in times {
            if let Some(q) = queues.get_mut(&queue) {
                t.sort_unstable();
                q.p50 = percentile(&t, 0.5);
                q.p95 = percentile(&t, 0.95);
            }
        }
        Ok(Overview {
            now,
            queues: queues.into_values().collect(),
        })
    }

    /// `queue`'s finished attempts over the `window` up to now, in buckets of
    /// `bucket` (at most [`MAX_BUCKETS`]). The read is bounded by the window: it
    /// walks the attempts' finish-time index from the window's start.
    pub async fn queue_throughput(
        &self,
        queue: &str,
        window: Duration,
        bucket: Duration,
    ) -> Result<Throughput, ServiceError> {
        validate::queue_name("queue", queue)?;
        let width = bucket.as_millis().max(1) as i64;
        let n = (window.as_millis() as i64 / width).clamp(1, MAX_BUCKETS as i64);
        let now_ms = self.clock.now().timestamp_millis();
        let until_ms = (now_ms / width + 1) * width;
        let at = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or_default();
        let since = at(until_ms - n * width);
        let p = AttemptHistogramParams {
            since,
            until: at(until_ms),
            bucket,
            queue: Some(queue.to_string()),
        };
        let mut t = Throughput {
            since,
            bucket,
            succeeded: vec![0; n as usize],
            failed: vec![0; n as usize],
        };
        for b in self.store().attempt_histogram(&p).await? {
            if let Some(i) = usize::try_from(b.bucket).ok().filter(|&i| i < n as usize) {
                t.succeeded[i] += b.succeeded;
                t.failed[i] += b.failed;
            }
        }
        Ok(t)
    }

    /// Dead tasks grouped by queue and error, largest group first.
    pub async fn dead_groups(
        &self,
        queue: Option<String>,
        error: Option<String>,
        limit: u32,
    ) -> Result<Vec<DeadGroup>, ServiceError> {
        optional_queue(&queue)?;
        let p = DeadGroupParams {
            queue,
            error,
            limit: limit.clamp(1, 1000),
        };
        Ok(self.store().task_dead_groups(&p).await?)
    }

    /// Requeues up to [`REQUEUE_BATCH`] dead tasks of `queue` that failed with
    /// `error`; returns how many.
    pub async fn requeue_dead(&self, queue: String, error: String) -> Result<u64, ServiceError> {
        validate::queue_name("queue", &queue)?;
        let p = RequeueDeadParams {
            queue,
            error,
            limit: REQUEUE_BATCH,
            now: self.clock.now(),
        };
        let n = self.store().task_requeue_dead(&p).await?;
        if n > 0 {
            self.dispatch.wake(Some(&p.queue));
        }
        Ok(n)
    }

    /// Cancels up to [`REQUEUE_BATCH`] dead tasks of `queue` that failed with
    /// `error` (dead -> cancelled: off the dead-letter list, history kept, and
    /// requeueable still); returns how many.
    pub async fn cancel_dead(&self, queue: String, error: String) -> Result<u64, ServiceError> {
        validate::queue_name("queue", &queue)?;
        let p = CancelDeadParams {
            queue,
            error: Some(error),
            task_id: None,
            limit: REQUEUE_BATCH,
            now: self.clock.now(),
        };
        Ok(self.store().task_cancel_dead(&p).await?)
    }

    /// Cancels one dead task (dead -> cancelled); FAILED_PRECONDITION when it is
    /// not dead.
    pub async fn cancel_dead_task(&self, task_id: &str) -> Result<(), ServiceError> {
        let task = self.get_task(task_id).await?;
        let p = CancelDeadParams {
            queue: task.queue.clone(),
            error: None,
            task_id: Some(task.id.clone()),
            limit: 1,
            now: self.clock.now(),
        };
        if task.state != StoredState::Dead || self.store().task_cancel_dead(&p).await? == 0 {
            return Err(ServiceError::FailedPrecondition(format!(
                "cannot cancel task {task_id} as a dead letter: it is no longer dead"
            )));
        }
        Ok(())
    }

    /// The workers holding leases now, with what they hold per queue.
    pub async fn lease_holders(&self) -> Result<Vec<LeaseHolder>, ServiceError> {
        let p = LeaseHolderParams { limit: 1000 };
        Ok(self.store().lease_holders(&p).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let t = ms(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(percentile(&t, 0.5), Some(Duration::from_millis(5)));
        assert_eq!(percentile(&t, 0.95), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&t, 0.0), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&ms(&[7]), 0.95), Some(Duration::from_millis(7)));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn failure_rate_is_zero_without_attempts() {
        let q = QueueOverview {
            stats: QueueStatsRecord::default(),
            succeeded: vec![0, 3, 1],
            failed: vec![0, 1, 1],
            p50: None,
            p95: None,
        };
        assert_eq!(q.failure_rate(), vec![0.0, 0.25, 0.5]);
    }
}
