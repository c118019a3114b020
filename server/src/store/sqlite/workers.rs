//! The worker registry on SQLite (migration 0008) and the leases held: the
//! registry's writes run in the writer's batch, its reads on the reader pool.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::params;

use super::super::row::ms;
use super::super::row::records;
use super::super::workers::{lease_holders_of, minute_before, worker_get_of};
use super::super::*;
use super::{SqliteStore, sql};

#[async_trait]
impl Workers for SqliteStore {
    async fn lease_holders(&self, p: &LeaseHolderParams) -> StoreResult<Vec<LeaseHolder>> {
        lease_holders_of(&self.reader, sql::LEASE_HOLDERS, p).await
    }

    async fn worker_record_seen(&self, seen: &[WorkerSeen]) -> StoreResult<()> {
        let seen = seen.to_owned();
        self.write(move |c| {
            let mut upsert = c.prepare_cached(sql::WORKER_RECORD_SEEN)?;
            for w in &seen {
                let labels = serde_json::to_string(&w.labels).unwrap_or_else(|_| "{}".into());
                let queues = (!w.queues.is_empty())
                    .then(|| serde_json::to_string(&w.queues).unwrap_or_else(|_| "[]".into()));
                upsert.execute(params![w.worker_id, labels, w.address, queues, ms(w.now)])?;
            }
            Ok(())
        })
        .await
    }

    async fn worker_list(&self, f: &WorkerFilter) -> StoreResult<Vec<WorkerRecord>> {
        // Dynamic: the filters given add their terms; the minute before now is
        // written in as a number.
        let mut sql = sql::WORKER_LIST_HEAD.replacen('?', &minute_before(f.now).to_string(), 1);
        if f.queue.is_some() {
            sql.push_str(" AND EXISTS (SELECT 1 FROM json_each(w.queues) q WHERE q.value = ?)");
        }
        for _ in &f.labels {
            sql.push_str(
                " AND EXISTS (SELECT 1 FROM json_each(w.labels) l WHERE l.key = ? AND l.value = ?)",
            );
        }
        if f.after_id.is_some() {
            sql.push_str(" AND w.worker_id > ?");
        }
        sql.push_str(" ORDER BY w.worker_id LIMIT ?");
        let mut q = sqlx::query_as::<_, WorkerRow>(sqlx::AssertSqlSafe(sql)).bind(ms(f.seen_since));
        if let Some(queue) = &f.queue {
            q = q.bind(queue);
        }
        for (k, v) in &f.labels {
            q = q.bind(k).bind(v);
        }
        if let Some(after) = &f.after_id {
            q = q.bind(after);
        }
        records(q.bind(f.limit).fetch_all(&self.reader).await?)
    }

    async fn worker_get(
        &self,
        worker_id: &str,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<(WorkerRecord, Vec<WorkerLeaseRecord>)>> {
        let sql = [sql::WORKER_GET, sql::WORKER_GET_LEASES];
        worker_get_of(&self.reader, sql, 1, worker_id, now).await
    }
}
