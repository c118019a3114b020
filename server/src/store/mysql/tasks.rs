//! Submit and read on MySQL. Reads run on the pool (READ COMMITTED: each
//! statement sees what was committed when it started); writes run as jobs.

use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::flow::{Ev, visible};
use super::super::row::{AttemptRow, TaskRow, duration_ms, ms, state_filter_sql};
use super::super::*;
use super::rows::{changed_event, fetch_task};
use super::{Job, MysqlStore, retryable, sql};
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
            insert_many(j, tasks, now).await
        })
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>> {
        sqlx::query_as::<_, TaskRow>(sql::TASK_GET)
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?
            .map(TaskRow::into_record)
            .transpose()
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
        let mut out = std::collections::HashMap::with_capacity(task_ids.len());
        for ids in task_ids.chunks(500) {
            // Dynamic: one placeholder per task.
            let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::TASK_QUEUES);
            let mut sep = qb.separated(", ");
            for id in ids {
                sep.push_bind(id);
            }
            qb.push(")");
            out.extend(
                qb.build_query_as::<(String, String)>()
                    .fetch_all(&self.pool)
                    .await?,
            );
        }
        Ok(out)
    }

    async fn task_list(&self, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        // Dynamic: the WHERE holds the filters given.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::TASK_LIST_HEAD);
        if let Some(queue) = &f.queue {
            qb.push(" AND queue = ").push_bind(queue);
        }
        if let Some(key) = &f.key {
            qb.push(" AND `key` = ").push_bind(key);
        }
        if let Some(worker) = &f.worker_id {
            qb.push(" AND leased_by = ").push_bind(worker);
        }
        if let Some(error) = &f.last_error {
            qb.push(" AND last_error = ").push_bind(error);
        }
        if let Some(after) = f.created_after {
            qb.push(" AND created_at >= ").push_bind(ms(after));
        }
        if let Some(before) = f.created_before {
            qb.push(" AND created_at < ").push_bind(ms(before));
        }
        if let Some(schedule) = &f.schedule_id {
            qb.push(" AND schedule_id = ").push_bind(schedule);
        }
        // Newest created first (the order of every store); a page token of an
        // earlier version carries only a sequence number.
        match (f.before_created, f.before_seq) {
            (Some(at), Some(seq)) => {
                qb.push(" AND (created_at < ")
                    .push_bind(ms(at))
                    .push(" OR (created_at = ")
                    .push_bind(ms(at))
                    .push(" AND seq < ")
                    .push_bind(seq)
                    .push("))");
            }
            (_, Some(seq)) => {
                qb.push(" AND seq < ").push_bind(seq);
            }
            _ => {}
        }
        if let Some(group) = &f.fanout_group {
            qb.push(" AND fanout_group = ").push_bind(group);
        }
        if let Some(sql) = state_filter_sql(&f.states, &ms(f.now).to_string()) {
            qb.push(" AND ").push(sql);
        }
        qb.push(" ORDER BY created_at DESC, seq DESC LIMIT ")
            .push_bind(f.limit);
        qb.build_query_as::<TaskRow>()
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(TaskRow::into_record)
            .collect()
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
            if matches!(state, StoredState::Leased | StoredState::Succeeded) {
                return Ok(Changed::WrongState(state));
            }
            let max_attempts = u.max_attempts.map(i64::from).unwrap_or(row.max_attempts);
            // Routing: an admin change frees a reserved retry.
            sqlx::query(sql::TASK_UPDATE)
                .bind(u.run_at.map(ms).unwrap_or(row.run_at))
                .bind(u.priority.map(i64::from).unwrap_or(row.priority))
                .bind(u.deadline.map(|d| d.map(ms)).unwrap_or(row.deadline))
                .bind(max_attempts)
                .bind(row.attempts_allowed - row.max_attempts + max_attempts)
                .bind(ms(now))
                .bind(row.seq)
                .execute(j.conn())
                .await?;
            changed_event(j, task_id, EventKind::Updated, ms(now)).await
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
            changed_event(j, &id, EventKind::Replaced, now).await?;
            Ok(Some(id))
        })
    }

    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>> {
        let exists: Option<i64> = sqlx::query_scalar(sql::ATTEMPT_LIST_TASK)
            .bind(task_id)
            .fetch_optional(&self.pool)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query_as::<_, AttemptRow>(sql::ATTEMPT_LIST)
            .bind(task_id)
            .bind(task_id)
            .fetch_all(&self.pool)
            .await?;
        rows.into_iter()
            .map(AttemptRow::into_record)
            .collect::<StoreResult<Vec<_>>>()
            .map(Some)
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

/// Rows per multi-row INSERT of tasks.
const INSERT_PIECE: usize = 100;

/// What one task's row adds to the multi-row INSERT of `insert_many`: its
/// text and byte parameters, and the framing of all of them.
fn insert_bytes(t: &NewTask) -> usize {
    use super::native::packet::{PARAM_FRAMING, opt_param, param};
    let r = &t.routing;
    // As JSON, as the row holds them (escapes may lengthen them).
    let json = |m: &std::collections::BTreeMap<String, String>| {
        serde_json::to_string(m).map_or(0, |s| s.len())
    };
    param(t.id.len())
        + param(t.queue.len())
        + opt_param(t.key.as_deref())
        + param(t.payload.len())
        + param(json(&t.metadata))
        + opt_param(t.concurrency_key.as_deref())
        + opt_param(r.target.worker_id.as_deref())
        + param(json(&r.target.labels))
        + opt_param(r.fanout_group.as_deref())
        // The numbers, flags and short words: 15 parameters of 16 bytes or less.
        + 15 * (16 + PARAM_FRAMING)
}

/// [`Tasks::task_insert_many`] in a job of its caller's (flow, schedules,
/// dead-letter notices and sync match insert with it too).
pub(super) async fn insert_many(
    j: &mut Job,
    tasks: &[NewTask],
    now: DateTime<Utc>,
) -> StoreResult<Vec<Inserted>> {
    let now = ms(now);
    // A key already taken (stored, or earlier in the batch) deduplicates: the
    // first occurrence in the batch is inserted, later ones answer its id.
    let mut out: Vec<Option<Inserted>> = vec![None; tasks.len()];
    let mut seen: std::collections::HashMap<(&str, &str), usize> = Default::default();
    let mut fresh: Vec<usize> = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        if let Some(k) = &t.key {
            if let Some(&first) = seen.get(&(t.queue.as_str(), k.as_str())) {
                out[i] = Some(Inserted {
                    task_id: tasks[first].id.clone(),
                    deduplicated: true,
                });
                continue;
            }
            seen.insert((t.queue.as_str(), k.as_str()), i);
        }
        fresh.push(i);
    }
    let size = |&i: &usize| insert_bytes(&tasks[i]);
    for piece in super::native::packet::pieces(&fresh, INSERT_PIECE, j.packet, size) {
        // INSERT IGNORE: a row whose (queue, key) exists is skipped (its id is
        // looked up below); nothing else is ignored here, as every other column
        // is checked by the service.
        // Dynamic: one row per task, as many as fit a packet.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::TASK_INSERT_MANY);
        qb.push(" ");
        qb.push_values(piece.iter().map(|&i| &tasks[i]), |mut b, t| {
            let r = &t.routing;
            let metadata = serde_json::to_string(&t.metadata).unwrap_or_else(|_| "{}".into());
            let labels = (!r.target.labels.is_empty())
                .then(|| serde_json::to_string(&r.target.labels).unwrap_or_else(|_| "{}".into()));
            b.push_bind(&t.id)
                .push_bind(&t.queue)
                .push_bind(&t.key)
                .push_bind(&t.payload)
                .push_bind(i64::from(t.priority))
                .push_bind(ms(t.run_at))
                .push_bind(t.deadline.map(ms))
                .push_bind("pending")
                .push_bind(i64::from(t.retry.max_attempts))
                .push_bind(i64::from(t.retry.max_attempts))
                .push_bind(duration_ms(t.retry.initial_backoff))
                .push_bind(t.retry.backoff_multiplier)
                .push_bind(duration_ms(t.retry.max_backoff))
                .push_bind(t.retry.jitter)
                .push_bind(metadata)
                .push_bind(now)
                .push_bind(now)
                .push_bind(&t.concurrency_key)
                .push_bind(&r.target.worker_id)
                .push_bind(labels)
                .push_bind(r.sticky.map(|s| s.as_str()))
                .push_bind(r.sticky.and_then(|s| s.timeout_ms()))
                .push_bind(&r.fanout_group)
                .push_bind(r.fanout_distinct);
        });
        let n = qb.build().execute(j.conn()).await?.rows_affected();
        let stored: Vec<String> = if n as usize == piece.len() {
            piece.iter().map(|&i| tasks[i].id.clone()).collect()
        } else {
            // Which ids went in: those stored now under this batch's ids.
            // Dynamic: one placeholder per task of the piece.
            let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::TASK_INSERT_MANY_STORED_HEAD);
            let mut sep = qb.separated(", ");
            for &i in piece {
                sep.push_bind(&tasks[i].id);
            }
            qb.push(") AND created_at = ").push_bind(now);
            qb.build_query_scalar::<String>()
                .fetch_all(j.conn())
                .await?
        };
        for &i in piece {
            let t = &tasks[i];
            if stored.contains(&t.id) {
                j.push(Ev {
                    task_id: &t.id,
                    queue: &t.queue,
                    kind: EventKind::Submitted,
                    state: visible("pending", ms(t.run_at), now),
                    attempt: 0,
                    worker: None,
                    time: now,
                    detail: None,
                });
                out[i] = Some(Inserted {
                    task_id: t.id.clone(),
                    deduplicated: false,
                });
                continue;
            }
            // A duplicate of an existing (queue, key).
            let task_id: String = sqlx::query_scalar(sql::TASK_INSERT_MANY_EXISTING)
                .bind(&t.queue)
                .bind(&t.key)
                .fetch_optional(j.conn())
                .await?
                .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
            out[i] = Some(Inserted {
                task_id,
                deduplicated: true,
            });
        }
    }
    let out: Vec<Inserted> = out.into_iter().flatten().collect();
    // The waits for the keys stored now (dependencies by key).
    super::key_waits::bind(j, tasks, &out).await?;
    Ok(out)
}
