//! The worker registry on Postgres (migration 0008) and the lease holders.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Arguments as _, Postgres};

use super::super::row::ms;
use super::super::row::records;
use super::super::workers::{lease_holders_of, minute_before, worker_get_of};
use super::super::*;
use super::{PostgresStore, sql};

#[async_trait]
impl Workers for PostgresStore {
    async fn lease_holders(&self, p: &LeaseHolderParams) -> StoreResult<Vec<LeaseHolder>> {
        lease_holders_of(&self.pool, sql::LEASE_HOLDERS, p).await
    }

    async fn worker_record_seen(&self, seen: &[WorkerSeen]) -> StoreResult<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = seen.iter().map(|w| w.worker_id.as_str()).collect();
        let labels: Vec<String> = seen
            .iter()
            .map(|w| serde_json::to_string(&w.labels).unwrap_or_else(|_| "{}".into()))
            .collect();
        let addresses: Vec<&str> = seen.iter().map(|w| w.address.as_str()).collect();
        // Empty queues (a Heartbeat) keep the stored labels and queues.
        let queues: Vec<Option<String>> = seen
            .iter()
            .map(|w| {
                (!w.queues.is_empty())
                    .then(|| serde_json::to_string(&w.queues).unwrap_or_else(|_| "[]".into()))
            })
            .collect();
        let nows: Vec<i64> = seen.iter().map(|w| ms(w.now)).collect();
        // One row per worker id (the last seen wins), in id order so two replicas
        // upserting the same workers lock rows in the same order.
        sqlx::query(sql::WORKER_RECORD_SEEN)
            .bind(&ids)
            .bind(&labels)
            .bind(&addresses)
            .bind(&queues)
            .bind(&nows)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn worker_list(&self, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>> {
        // Dynamic: the filters are optional; the head's $1 is bound first.
        let mut since = sqlx::postgres::PgArguments::default();
        since
            .add(minute_before(f.now))
            .map_err(StoreError::Internal)?;
        let mut qb = sqlx::QueryBuilder::<Postgres>::with_arguments(sql::WORKER_LIST_HEAD, since);
        qb.push(" WHERE w.last_seen >= ")
            .push_bind(ms(f.seen_since));
        if let Some(queue) = &f.queue {
            qb.push(" AND w.queues::jsonb ? ").push_bind(queue);
        }
        if !f.labels.is_empty() {
            qb.push(" AND w.labels::jsonb @> ")
                .push_bind(serde_json::to_string(&f.labels).unwrap_or_else(|_| "{}".into()))
                .push("::jsonb");
        }
        if let Some(after) = &f.after_id {
            qb.push(" AND w.worker_id > ").push_bind(after);
        }
        qb.push(" ORDER BY w.worker_id LIMIT ")
            .push_bind(i64::from(f.limit));
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
        worker_get_of(&self.pool, sql, 1, worker_id, now).await
    }
}
