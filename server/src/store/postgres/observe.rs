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
                .fetch_all(&self.pool)
                .await?
        } else {
            sqlx::query_as(sql::QUEUE_STATS_QUEUES)
                .bind(queues)
                .bind(now)
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

    async fn finished_fold(&self, up_to: DateTime<Utc>, limit: u32) -> StoreResult<bool> {
        let up_to = ms(up_to);
        let skip = i64::from(limit.max(1)) - 1;
        // READ COMMITTED (the pool's): each statement after the lock sees every
        // change that held the watermark in share mode before it.
        let mut tx = self.pool.begin().await?;
        let w: i64 = sqlx::query_scalar(sql::FINISHED_FOLD_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query(sql::FINISHED_FOLD_COMPACT)
            .execute(&mut *tx)
            .await?;
        if w >= up_to {
            tx.commit().await?;
            return Ok(true);
        }
        let bound: Option<i64> = sqlx::query_scalar(sql::FINISHED_FOLD_BOUND)
            .bind(w)
            .bind(up_to)
            .bind(skip)
            .fetch_one(&mut *tx)
            .await?;
        let to = bound.map_or(up_to, |b| b.min(up_to));
        sqlx::query(sql::FINISHED_FOLD_ADD)
            .bind(w)
            .bind(to)
            .execute(&mut *tx)
            .await?;
        sqlx::query(sql::FINISHED_FOLD_MARK)
            .bind(to)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(to == up_to)
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
        super::super::observe::attempt_durations_of(&self.pool, sql::ATTEMPT_DURATIONS, 1, p).await
    }
}
