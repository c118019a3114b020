//! The worker registry on MySQL, and who holds leases.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::row::ms;
use super::super::row::records;
use super::super::workers::{lease_holders_of, minute_before, worker_get_of};
use super::super::*;
use super::{MysqlStore, sql};

#[async_trait]
impl Workers for MysqlStore {
    async fn lease_holders(&self, p: &LeaseHolderParams) -> StoreResult<Vec<LeaseHolder>> {
        lease_holders_of(&self.pool, sql::LEASE_HOLDERS, p).await
    }

    async fn worker_record_seen(&self, seen: &[WorkerSeen]) -> StoreResult<()> {
        if seen.is_empty() {
            return Ok(());
        }
        // One statement, rows in worker order (no deadlock between two batches).
        let mut rows: Vec<&WorkerSeen> = seen.iter().collect();
        rows.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        // Dynamic: one row per worker.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::WORKER_RECORD_SEEN);
        qb.push(" ");
        qb.push_values(rows, |mut b, w| {
            let labels = serde_json::to_string(&w.labels).unwrap_or_else(|_| "{}".into());
            let queues = serde_json::to_string(&w.queues).unwrap_or_else(|_| "[]".into());
            b.push_bind(&w.worker_id)
                .push_bind(labels)
                .push_bind(&w.address)
                .push_bind(queues)
                .push_bind(ms(w.now))
                .push_bind(ms(w.now))
                .push_bind(!w.queues.is_empty());
        });
        qb.push(" ");
        qb.push(sql::WORKER_RECORD_SEEN_TAIL);
        qb.build().execute(&self.pool).await?;
        Ok(())
    }

    async fn worker_list(&self, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>> {
        // Dynamic: the WHERE holds the filters given (a condition per label).
        // The head's two placeholders: the minute before now.
        let mut args = sqlx::mysql::MySqlArguments::default();
        for _ in 0..2 {
            sqlx::Arguments::add(&mut args, minute_before(f.now)).map_err(StoreError::Internal)?;
        }
        let mut qb = sqlx::QueryBuilder::<MySql>::with_arguments(sql::WORKER_LIST_HEAD, args);
        qb.push(" WHERE w.last_seen >= ")
            .push_bind(ms(f.seen_since));
        if let Some(queue) = &f.queue {
            qb.push(" AND JSON_CONTAINS(w.queues, JSON_QUOTE(")
                .push_bind(queue)
                .push("))");
        }
        for (k, v) in &f.labels {
            qb.push(" AND JSON_UNQUOTE(JSON_EXTRACT(w.labels, CONCAT('$.\"', ")
                .push_bind(k)
                .push(", '\"'))) = ")
                .push_bind(v);
        }
        if let Some(after) = &f.after_id {
            qb.push(" AND w.worker_id > ").push_bind(after);
        }
        qb.push(" ORDER BY w.worker_id LIMIT ").push_bind(f.limit);
        records(
            qb.build_query_as::<WorkerRow>()
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn worker_get(
        &self,
        worker_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>> {
        let sql = [sql::WORKER_GET, sql::WORKER_GET_LEASES];
        worker_get_of(&self.pool, sql, 2, worker_id, now).await
    }
}
