//! Reads of the whole broker for the console and metrics, on the reader pool.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, params};

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
            "{} {within} {} {within} GROUP BY queue, state) GROUP BY queue, state \
             HAVING SUM(n) > 0 UNION ALL {} {within} GROUP BY queue \
             UNION ALL {} {within} GROUP BY queue, later \
             UNION ALL {} {within} GROUP BY queue, later",
            sql::QUEUE_STATS_FINISHED,
            sql::QUEUE_STATS_FINISHED_RECENT,
            sql::QUEUE_STATS_LEASED,
            sql::QUEUE_STATS_READY,
            sql::QUEUE_STATS_WAITING,
        );
        let mut q = sqlx::query_as::<_, (String, String, bool, i64, i64)>(sqlx::AssertSqlSafe(sql));
        for part in 0..5 {
            if part >= 3 {
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

    async fn finished_fold(&self, up_to: DateTime<Utc>, limit: u32) -> StoreResult<bool> {
        let up_to = ms(up_to);
        let skip = i64::from(limit.max(1)) - 1;
        self.write(move |c| {
            let w: i64 = c
                .prepare_cached(sql::FINISHED_FOLD_LOCK)?
                .query_row([], |r| r.get(0))?;
            if w >= up_to {
                return Ok(true);
            }
            let bound: Option<i64> = c
                .prepare_cached(sql::FINISHED_FOLD_BOUND)?
                .query_row(params![w, up_to, skip], |r| r.get(0))
                .optional()?;
            let to = bound.map_or(up_to, |b| b.min(up_to));
            c.prepare_cached(sql::FINISHED_FOLD_ADD)?
                .execute(params![w, to])?;
            c.prepare_cached(sql::FINISHED_FOLD_MARK)?
                .execute(params![to])?;
            Ok(to == up_to)
        })
        .await
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
        super::super::observe::attempt_durations_of(&self.reader, sql::ATTEMPT_DURATIONS, 1, p)
            .await
    }
}
