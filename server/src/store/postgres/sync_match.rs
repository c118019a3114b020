//! Sync match on Postgres: one statement inserts a batch, the matched
//! tasks already leased, after checking in the same statement (the same snapshot)
//! that no pending task of their queue due now would lease before them.
//!
//! Why a snapshot check is enough against other replicas: a task that another
//! transaction makes pending and commits after this statement's snapshot was
//! not acknowledged to its producer (nor made due) before this statement began,
//! so the two are concurrent and either order is one the producers could have
//! seen. A task leased here is inserted leased: no lease statement anywhere can
//! take it, so exclusivity needs no lock (the row is new and unique by id).

use chrono::{DateTime, Utc};

use super::super::row::{duration_ms, ms};
use super::super::sync_match::{leased_row, matches_in_lease_order, metadata_json};
use super::super::*;
use super::{CHANNEL, PostgresStore, sql};

/// id, seq, state, lease token, lease expiry of each inserted row.
type InsertedRow = (String, i64, String, Option<String>, Option<i64>);

impl PostgresStore {
    pub(super) async fn sync_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>> {
        let stands = matches_in_lease_order(tasks, matches, now);
        let matched = |i: usize| {
            matches
                .get(i)
                .and_then(Option::as_ref)
                .filter(|_| stands[i])
        };
        let col = |f: &dyn Fn(&NewTask) -> i64| tasks.iter().map(f).collect::<Vec<i64>>();
        let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        let queues: Vec<&str> = tasks.iter().map(|t| t.queue.as_str()).collect();
        let keys: Vec<Option<&str>> = tasks.iter().map(|t| t.key.as_deref()).collect();
        let payloads: Vec<&[u8]> = tasks.iter().map(|t| t.payload.as_slice()).collect();
        let deadlines: Vec<Option<i64>> = tasks.iter().map(|t| t.deadline.map(ms)).collect();
        let multipliers: Vec<f64> = tasks.iter().map(|t| t.retry.backoff_multiplier).collect();
        let jitters: Vec<f64> = tasks.iter().map(|t| t.retry.jitter).collect();
        let metadata: Vec<String> = tasks.iter().map(metadata_json).collect();
        let concurrency_keys: Vec<Option<&str>> =
            tasks.iter().map(|t| t.concurrency_key.as_deref()).collect();
        fn r(t: &NewTask) -> &crate::domain::routing::TaskRouting {
            &t.routing
        }
        let target_workers: Vec<Option<&str>> = tasks
            .iter()
            .map(|t| r(t).target.worker_id.as_deref())
            .collect();
        let target_labels: Vec<Option<String>> = tasks
            .iter()
            .map(|t| {
                let l = &r(t).target.labels;
                (!l.is_empty()).then(|| serde_json::to_string(l).unwrap_or_else(|_| "{}".into()))
            })
            .collect();
        let sticky: Vec<Option<&str>> = tasks
            .iter()
            .map(|t| r(t).sticky.map(|s| s.as_str()))
            .collect();
        let sticky_timeouts: Vec<Option<i64>> = tasks
            .iter()
            .map(|t| r(t).sticky.and_then(|s| s.timeout_ms()))
            .collect();
        let groups: Vec<Option<&str>> =
            tasks.iter().map(|t| r(t).fanout_group.as_deref()).collect();
        let distinct: Vec<bool> = tasks.iter().map(|t| r(t).fanout_distinct).collect();
        let workers: Vec<Option<&str>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| m.worker_id.as_str()))
            .collect();
        let addresses: Vec<Option<&str>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| m.worker_address.as_str()))
            .collect();
        let durations: Vec<Option<i64>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| duration_ms(m.lease_duration)))
            .collect();
        let checkpoints: Vec<Option<&[u8]>> =
            tasks.iter().map(|t| t.checkpoint.as_deref()).collect();
        let stmt = if super::tasks::keyed(tasks) {
            sql::TASK_INSERT_MATCHED
        } else {
            sql::TASK_INSERT_MATCHED_KEYLESS
        };
        let rows: Vec<InsertedRow> = sqlx::query_as(stmt)
            .bind(&ids)
            .bind(&queues)
            .bind(&keys)
            .bind(&payloads)
            .bind(col(&|t| i64::from(t.priority)))
            .bind(col(&|t| ms(t.run_at)))
            .bind(&deadlines)
            .bind(col(&|t| i64::from(t.retry.max_attempts)))
            .bind(col(&|t| duration_ms(t.retry.initial_backoff)))
            .bind(&multipliers)
            .bind(col(&|t| duration_ms(t.retry.max_backoff)))
            .bind(&jitters)
            .bind(&metadata)
            .bind(ms(now))
            .bind(CHANNEL)
            .bind(&concurrency_keys)
            .bind(&target_workers)
            .bind(&target_labels)
            .bind(&sticky)
            .bind(&sticky_timeouts)
            .bind(&groups)
            .bind(&distinct)
            .bind(&workers)
            .bind(&addresses)
            .bind(&durations)
            .bind(&checkpoints)
            .fetch_all(self.hot())
            .await?;
        let mut rows: std::collections::HashMap<String, InsertedRow> =
            rows.into_iter().map(|r| (r.0.clone(), r)).collect();
        // The rest were duplicates of a (queue, key): answer with the existing ids.
        let dups: Vec<&NewTask> = tasks.iter().filter(|t| !rows.contains_key(&t.id)).collect();
        let existing = self.sync_existing_ids(&dups).await?;
        let mut out = Vec::with_capacity(tasks.len());
        for (i, t) in tasks.iter().enumerate() {
            let Some((id, seq, state, token, expires)) = rows.remove(&t.id) else {
                let key = (t.queue.clone(), t.key.clone().unwrap_or_default());
                let task_id = existing
                    .get(&key)
                    .cloned()
                    .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
                out.push(MatchedInsert::duplicate(task_id));
                continue;
            };
            let leased = match (state.as_str(), matched(i), token, expires) {
                ("leased", Some(m), Some(token), Some(expires)) => {
                    Some(leased_row(t, m, seq, token, expires, now)?)
                }
                ("pending", ..) => None,
                _ => return Err(StoreError::Corrupt(format!("task {id} inserted {state}"))),
            };
            out.push(MatchedInsert::made(id, leased));
        }
        Ok(out)
    }

    /// The ids of the tasks that hold the keys of `dups`, by (queue, key).
    async fn sync_existing_ids(
        &self,
        dups: &[&NewTask],
    ) -> StoreResult<std::collections::HashMap<(String, String), String>> {
        if dups.is_empty() {
            return Ok(Default::default());
        }
        let q: Vec<&str> = dups.iter().map(|t| t.queue.as_str()).collect();
        let k: Vec<Option<&str>> = dups.iter().map(|t| t.key.as_deref()).collect();
        let rows: Vec<(String, String, String)> = sqlx::query_as(sql::TASK_INSERT_MATCHED_EXISTING)
            .bind(&q)
            .bind(&k)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|(q, k, id)| ((q, k), id)).collect())
    }
}
