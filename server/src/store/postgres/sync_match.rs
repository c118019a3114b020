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

use super::super::row::duration_ms;
use sqlx::Arguments as _;

use super::super::sync_match::{leased_row, matches_in_lease_order};
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
        let workers: Vec<Option<&str>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| m.worker_id.as_str()))
            .collect();
        let addresses: Vec<Option<&str>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| m.worker_address.as_str()))
            .collect();
        let durations: Vec<Option<i64>> = (0..tasks.len())
            .map(|i| matched(i).map(|m| duration_ms(m.lease_duration)))
            .collect();
        let stmt = if super::tasks::keyed(tasks) {
            sql::TASK_INSERT_MATCHED
        } else {
            sql::TASK_INSERT_MATCHED_KEYLESS
        };
        let args = super::tasks::insert_arguments(tasks, now, CHANNEL).and_then(|mut args| {
            super::routing::add_routing(&mut args, tasks)?;
            args.add(&workers)?;
            args.add(&addresses)?;
            args.add(&durations)?;
            super::tasks::add_checkpoints(&mut args, tasks)?;
            Ok(args)
        });
        let args = args.map_err(sqlx::Error::Encode)?;
        let rows: Vec<InsertedRow> = sqlx::query_as_with(stmt, args)
            .fetch_all(self.hot())
            .await?;
        let mut rows: std::collections::HashMap<String, InsertedRow> =
            rows.into_iter().map(|r| (r.0.clone(), r)).collect();
        // The rest were duplicates of a (queue, key): answer with the existing ids.
        let dups: Vec<&NewTask> = tasks.iter().filter(|t| !rows.contains_key(&t.id)).collect();
        let existing =
            super::tasks::existing_ids(&self.pool, sql::TASK_INSERT_MATCHED_EXISTING, &dups)
                .await?;
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
}
