//! Reads of the whole broker on MySQL (queue counts, attempt histograms and
//! durations), on the pool.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::observe::bucket_row;
use super::super::row::{duration_ms, fold_stats, ms};
use super::super::*;
use super::{MysqlStore, sql};

#[async_trait]
impl Observe for MysqlStore {
    async fn queue_stats(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<QueueStatsRecord>> {
        let now = ms(now);
        // Dynamic: each part takes the queues asked for (all, for none), as a list.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::QUEUE_STATS_FINISHED);
        push_queues(&mut qb, queues);
        qb.push(" ");
        qb.push(sql::QUEUE_STATS_FINISHED_RECENT);
        push_queues(&mut qb, queues);
        qb.push(" ");
        qb.push(sql::QUEUE_STATS_LEASED);
        push_queues(&mut qb, queues);
        qb.push(" ");
        qb.push(sql::QUEUE_STATS_PENDING_HEAD);
        qb.push(" ").push_bind(now);
        qb.push(" ");
        qb.push(sql::QUEUE_STATS_PENDING);
        push_queues(&mut qb, queues);
        qb.push(" GROUP BY queue, state, later");
        let counts: Vec<(String, String, bool, i64, i64)> =
            qb.build_query_as().fetch_all(&self.pool).await?;
        // Dynamic: the queues asked for (all, for none), as a list. The
        // statement's two placeholders: the minute's start.
        let mut args = sqlx::mysql::MySqlArguments::default();
        for _ in 0..2 {
            sqlx::Arguments::add(&mut args, now - 60_000).map_err(StoreError::Internal)?;
        }
        let mut qb = sqlx::QueryBuilder::<MySql>::with_arguments(sql::QUEUE_STATS_RECENT, args);
        if !queues.is_empty() {
            qb.push(" WHERE queue IN (");
            let mut sep = qb.separated(", ");
            for q in queues {
                sep.push_bind(q);
            }
            qb.push(")");
        }
        qb.push(" GROUP BY queue, outcome");
        let recent: Vec<(String, String, i64)> = qb.build_query_as().fetch_all(&self.pool).await?;
        Ok(fold_stats(counts, recent))
    }

    async fn finished_fold(&self, up_to: DateTime<Utc>, limit: u32) -> StoreResult<bool> {
        let up_to = ms(up_to);
        let skip = i64::from(limit.max(1)) - 1;
        job!(self, |j| {
            let w: i64 = sqlx::query_scalar(sql::FINISHED_FOLD_LOCK)
                .fetch_one(j.conn())
                .await?;
            let last: Option<Option<i64>> = sqlx::query_scalar(sql::FINISHED_FOLD_COMPACT_LAST)
                .fetch_optional(j.conn())
                .await?;
            if let Some(Some(last)) = last {
                for step in [
                    sql::FINISHED_FOLD_COMPACT_SUM,
                    sql::FINISHED_FOLD_COMPACT_DROP,
                ] {
                    sqlx::query(step).bind(last).execute(j.conn()).await?;
                }
            }
            if w >= up_to {
                return Ok(true);
            }
            let mut q = sqlx::query_scalar::<_, Option<i64>>(sql::FINISHED_FOLD_BOUND);
            for _ in 0..3 {
                q = q.bind(w).bind(up_to).bind(skip);
            }
            let to = q.fetch_one(j.conn()).await?.map_or(up_to, |b| b.min(up_to));
            sqlx::query(sql::FINISHED_FOLD_ADD)
                .bind(w)
                .bind(to)
                .execute(j.conn())
                .await?;
            sqlx::query(sql::FINISHED_FOLD_MARK)
                .bind(to)
                .execute(j.conn())
                .await?;
            Ok(to == up_to)
        })
    }

    async fn attempt_histogram(
        &self,
        p: &AttemptHistogramParams,
    ) -> StoreResult<Vec<AttemptBucket>> {
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(sql::ATTEMPT_HISTOGRAM)
            .bind(ms(p.since))
            .bind(duration_ms(p.bucket).max(1))
            .bind(ms(p.since))
            .bind(ms(p.since))
            .bind(ms(p.until))
            .bind(p.queue.as_deref())
            .bind(p.queue.as_deref())
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(bucket_row).collect())
    }

    async fn attempt_durations(
        &self,
        p: &AttemptDurationParams,
    ) -> StoreResult<Vec<AttemptDuration>> {
        super::super::observe::attempt_durations_of(&self.pool, sql::ATTEMPT_DURATIONS, 2, p).await
    }
}

/// ` AND queue IN (...)` when `queues` names some.
fn push_queues(qb: &mut sqlx::QueryBuilder<MySql>, queues: &[String]) {
    if !queues.is_empty() {
        qb.push(" AND queue IN (");
        let mut sep = qb.separated(", ");
        for q in queues {
            sep.push_bind(q.clone());
        }
        qb.push(")");
    }
}
