//! What the console and the metrics read: attempt histograms and durations,
//! dead-letter groups and their requeue, lease holders.

use super::*;

#[async_trait]
impl Observe for PostgresStore {
    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>> {
        let now = ms(now);
        let all = queues.is_empty();
        // Index-only scans (see observe.sql), of every queue or of `queues`.
        let counts: Vec<(String, String, bool, i64, i64)> = if all {
            sqlx::query_as(sql::QUEUE_STATS)
                .bind(now)
                .bind(now)
                .fetch_all(&self.pool)
                .await?
        } else {
            sqlx::query_as(sql::QUEUE_STATS_QUEUES)
                .bind(queues)
                .bind(queues)
                .bind(now)
                .bind(queues)
                .bind(now)
                .bind(queues)
                .fetch_all(&self.pool)
                .await?
        };
        let recent: Vec<(String, String, i64)> = sqlx::query_as(sql::QUEUE_STATS_RECENT)
            .bind(now - 60_000)
            .bind(all)
            .bind(queues)
            .fetch_all(&self.pool)
            .await?;
        Ok(super::row::fold_stats(counts, recent))
    }

    async fn attempt_histogram(
        &self,
        p: &AttemptHistogramParams,
    ) -> StoreResult<Vec<AttemptBucket>> {
        // The window's attempts: ended ones from task_attempts, succeeded ones from
        // their task rows (recent_attempts), optionally of one queue.
        observe::attempt_histogram_of(&self.pool, sql::ATTEMPT_HISTOGRAM, p).await
    }

    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>> {
        super::super::observe::attempt_durations_of(&self.pool, sql::ATTEMPT_DURATIONS, p).await
    }
}
