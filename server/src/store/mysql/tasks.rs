//! Submit and read on MySQL. Reads run on the pool (READ COMMITTED: each
//! statement sees what was committed when it started); writes run as jobs.

use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::row::{IntoRecord, record, records};
use super::super::row::{TaskRow, ms};
use super::super::tasks::by_id_list;
use super::super::tasks::{UpdateValues, update_allowed};
use super::super::*;
use super::rows::{changed_event, fetch_task};
use super::{MysqlStore, retryable, sql};
use crate::domain::event::EventKind;

#[async_trait]
impl Tasks for MysqlStore {
    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>> {
        job!(self, |j| {
            j.own_wakes = true;
            super::rows::insert_many(j, tasks, now).await
        })
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>> {
        record(
            sqlx::query_as::<_, TaskRow>(sql::TASK_GET)
                .bind(task_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn task_find_keys(&self, keys: &[(String, String)]) -> StoreResult<Vec<TaskRecord>> {
        let mut out = Vec::new();
        for chunk in keys.chunks(250) {
            // Dynamic: one (queue, key) pair per key asked.
            let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::TASK_FIND_KEYS);
            let mut sep = qb.separated(", ");
            for (queue, key) in chunk {
                sep.push("(")
                    .push_bind_unseparated(queue)
                    .push_unseparated(", ")
                    .push_bind_unseparated(key)
                    .push_unseparated(")");
            }
            qb.push(")");
            for row in qb.build_query_as::<TaskRow>().fetch_all(&self.pool).await? {
                out.push(row.into_record()?);
            }
        }
        Ok(out)
    }

    async fn task_queues(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, String>> {
        let rows: Vec<(String, String)> =
            by_id_list(&self.pool, sql::TASK_QUEUES, task_ids).await?;
        Ok(rows.into_iter().collect())
    }

    async fn task_list(&self, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        // Dynamic: the WHERE holds the filters given.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::TASK_LIST_HEAD);
        // Newest created first (the order of every store).
        filter::push_task_terms(&mut qb, &filter::MYSQL, f);
        qb.push(" ORDER BY created_at DESC, seq DESC LIMIT ")
            .push_bind(f.limit);
        records(qb.build_query_as::<TaskRow>().fetch_all(&self.pool).await?)
    }

    async fn task_update(
        &self,
        task_id: &str,
        u: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        job!(self, |j| {
            let Some(row) = fetch_task(j, task_id).await? else {
                return Ok(Changed::NotFound);
            };
            let state = row.stored_state()?;
            if !update_allowed(state, u) {
                return Ok(Changed::WrongState(state));
            }
            let v = UpdateValues::of(&row, u);
            let changes = v.changes(&row);
            // Routing: an admin change frees a reserved retry.
            sqlx::query(sql::TASK_UPDATE)
                .bind(v.run_at)
                .bind(v.priority)
                .bind(v.deadline)
                .bind(v.max_attempts)
                .bind(v.attempts_allowed)
                .bind(ms(now))
                .bind(&v.target_worker)
                .bind(&v.target_labels)
                .bind(row.seq)
                .execute(j.conn())
                .await?;
            changed_event(j, task_id, EventKind::Updated, ms(now), Some(&changes)).await
        })
    }

    /// The row is locked (FOR UPDATE reads the latest committed state, after a
    /// lease that held it), so a task a lease took is never changed.
    async fn task_replace_waiting(
        &self,
        r: &Replacement,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        job!(self, |j| {
            let held: Option<(String, String)> = sqlx::query_as(sql::TASK_REPLACE_WAITING_HELD)
                .bind(&r.queue)
                .bind(&r.key)
                .fetch_optional(j.conn())
                .await?;
            let Some((id, metadata)) = held else {
                return Ok(None);
            };
            let now = ms(now);
            sqlx::query(sql::TASK_REPLACE_WAITING_WRITE)
                .bind(&r.payload)
                .bind(ms(r.run_at))
                .bind(i64::from(r.priority))
                .bind(merged_metadata(&metadata, &r.metadata))
                .bind(now)
                .bind(&id)
                .execute(j.conn())
                .await?;
            changed_event(j, &id, EventKind::Replaced, now, None).await?;
            Ok(Some(id))
        })
    }

    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>> {
        let statements = [sql::ATTEMPT_LIST_TASK, sql::ATTEMPT_LIST];
        super::super::tasks::attempt_list(&self.pool, statements, 2, task_id).await
    }

    async fn task_insert_flow(
        &self,
        tasks: &[NewTask],
        flows: &[FlowSpec],
        now: DateTime<Utc>,
        commit_by: Option<Instant>,
    ) -> StoreResult<FlowInserted> {
        // The job by hand: an answer other than Done, or a deadline passed,
        // rolls back.
        let mut tries = 0u32;
        loop {
            let mut j = self.begin().await?;
            let r = super::flow::insert(&mut j, tasks, flows, now).await;
            let r = match r {
                Ok(FlowInserted::Done(v)) => {
                    if commit_by.is_some_and(|d| Instant::now() >= d) {
                        // Rolled back: nothing is inserted.
                        drop(j);
                        return Ok(FlowInserted::DeadlinePassed);
                    }
                    self.finish(j).await.map(|()| FlowInserted::Done(v))
                }
                Ok(other) => return Ok(other),
                Err(e) => Err(e),
            };
            match r {
                Err(e) if tries < 8 && retryable(&e) => tries += 1,
                other => return other,
            }
        }
    }

    async fn task_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>> {
        job!(self, |j| super::sync_match::insert_matched(
            j, tasks, matches, now
        )
        .await)
    }
}
