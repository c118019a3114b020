//! What the console and the metrics read: attempt histograms and durations,
//! dead-letter groups and their requeue, lease holders.

use super::*;

impl PostgresStore {


    pub(super) async fn task_dead_groups(
        &self,
        p: &DeadGroupParams,
    ) -> StoreResult<Vec<DeadGroup>> {
        // Console (migration 0011): counted per (queue, error_hash) from
        // tasks_dead_error alone, then one row per group read for its text.
        let rows: Vec<(String, String, i64, Option<i64>)> = sqlx::query_as(
            "WITH g AS (SELECT queue, error_hash, COUNT(*) AS n, MAX(finished_at) AS last \
               FROM tasks WHERE state = 'dead' AND ($1::text IS NULL OR queue = $1) \
                 AND ($2::text IS NULL OR (error_hash = hashtextextended($2, 0) \
                   AND COALESCE(last_error, '') = $2)) \
               GROUP BY queue, error_hash ORDER BY n DESC, queue, error_hash LIMIT $3) \
             SELECT g.queue, COALESCE((SELECT t.last_error FROM tasks t WHERE t.state = 'dead' \
                 AND t.queue = g.queue AND t.error_hash = g.error_hash \
                 AND ($2::text IS NULL OR COALESCE(t.last_error, '') = $2) LIMIT 1), '') AS e, \
               g.n, g.last FROM g ORDER BY g.n DESC, g.queue, e",
        )
        .bind(p.queue.as_deref())
        .bind(p.error.as_deref())
        .bind(i64::from(p.limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(observe::dead_group_row).collect())
    }

    pub(super) async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64> {
        let mut tx = self.pool.begin().await?;
        let n: Option<i32> = sqlx::query_scalar(
            // A CTE runs once (an IN subquery may be rescanned per row, past the limit).
            sqlx::AssertSqlSafe(format!(
                "WITH picked AS (SELECT id FROM tasks WHERE queue = $2 AND state = 'dead' \
                   AND error_hash = hashtextextended($3, 0) \
                   AND COALESCE(last_error, '') = $3 ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED), \
                 u AS (UPDATE tasks t SET state = 'pending', run_at = $1, waiting = FALSE, \
                   attempts_allowed = attempt + max_attempts, cancel_requested = FALSE, \
                   finished_at = NULL, updated_at = $1 \
                 FROM picked WHERE t.id = picked.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at) {}",
                // Flow: the REQUEUED events in the same statement.
                events::from_updated("requeued", "$1")
            )),
        )
        .bind(ms(p.now))
        .bind(&p.queue)
        .bind(&p.error)
        .bind(i64::from(p.limit))
        .fetch_optional(&mut *tx)
        .await?;
        let n = events::changed(n);
        if n > 0 {
            Self::notify(&mut tx, &[&p.queue]).await?;
        }
        tx.commit().await?;
        Ok(n)
    }

}

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
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(sql::ATTEMPT_HISTOGRAM)
        .bind(ms(p.since))
        .bind(ms(p.until))
        .bind(duration_ms(p.bucket).max(1))
        .bind(p.queue.as_deref())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(observe::bucket_row).collect())
    }

    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>> {
        let rows: Vec<(String, i64)> = sqlx::query_as(sql::ATTEMPT_DURATIONS)
        .bind(ms(p.since))
        .bind(i64::from(p.limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(queue, d)| AttemptDuration {
                queue,
                run_time: Duration::from_millis(d.max(0) as u64),
            })
            .collect())
    }
}
