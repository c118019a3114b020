//! Reads of the whole broker for the console and metrics, on the reader pool.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::super::observe;
use super::super::row::ms;
use super::super::*;
use super::{SqliteStore, sql};

#[async_trait]
impl Observe for SqliteStore {
    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>> {
        let now = ms(now);
        // Dynamic: each count gets ` AND queue IN (...)` when `queues` names some.
        let within = if queues.is_empty() {
            String::new()
        } else {
            format!(
                " AND queue IN ({})",
                super::rows::placeholders(queues.len())
            )
        };
        let sql = format!(
            "{} {within} GROUP BY queue, state UNION ALL {} {within} GROUP BY queue \
             UNION ALL {} {within} GROUP BY queue, later \
             UNION ALL {} {within} GROUP BY queue, later",
            sql::QUEUE_STATS_FINISHED,
            sql::QUEUE_STATS_LEASED,
            sql::QUEUE_STATS_READY,
            sql::QUEUE_STATS_WAITING,
        );
        let mut q = sqlx::query_as::<_, (String, String, bool, i64, i64)>(sqlx::AssertSqlSafe(sql));
        for part in 0..4 {
            if part >= 2 {
                q = q.bind(now);
            }
            for queue in queues {
                q = q.bind(queue.clone());
            }
        }
        let counts = q.fetch_all(&self.reader).await?;
        // Dynamic: the queue filter, as above.
        let sql = format!(
            "{}{} GROUP BY t.queue, a.outcome",
            sql::QUEUE_STATS_RECENT,
            within.replace(" queue", " t.queue")
        );
        let mut q =
            sqlx::query_as::<_, (String, String, i64)>(sqlx::AssertSqlSafe(sql)).bind(now - 60_000);
        for queue in queues {
            q = q.bind(queue);
        }
        let recent = q.fetch_all(&self.reader).await?;
        Ok(super::super::row::fold_stats(counts, recent))
    }

    async fn attempt_histogram(
        &self,
        p: &AttemptHistogramParams,
    ) -> StoreResult<Vec<AttemptBucket>> {
        observe::attempt_histogram_of(&self.reader, sql::ATTEMPT_HISTOGRAM, p).await
    }

    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>> {
        super::super::observe::attempt_durations_of(&self.reader, sql::ATTEMPT_DURATIONS, p).await
    }
}
