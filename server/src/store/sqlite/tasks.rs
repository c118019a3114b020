//! Submitting and reading tasks on SQLite: inserts and an operator's edits run
//! in the writer's batch; reads on the reader pool (WAL readers never wait for
//! the writer).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::super::row::{IntoRecord, record, records};
use super::super::row::{TaskRow, ms};
use super::super::tasks::by_id_list;
use super::super::tasks::{UpdateValues, update_allowed};
use super::super::*;
use super::rows::{changed_event, fetch_task};
use super::{SqliteStore, sql};
use crate::domain::TaskState;
use crate::domain::event::EventKind;

#[async_trait]
impl Tasks for SqliteStore {
    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>> {
        let tasks = tasks.to_owned();
        self.write(move |c| super::rows::insert_many(c, &tasks, now))
            .await
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<TaskRecord>> {
        record(
            sqlx::query_as::<_, TaskRow>(sql::TASK_GET)
                .bind(task_id)
                .fetch_optional(&self.reader)
                .await?,
        )
    }

    async fn task_find_keys(&self, keys: &[(String, String)]) -> StoreResult<Vec<TaskRecord>> {
        let mut out = Vec::new();
        for chunk in keys.chunks(250) {
            // Dynamic: one (?, ?) per pair.
            let pairs = vec!["(?, ?)"; chunk.len()].join(", ");
            let sql = sql::TASK_FIND_KEYS.replacen("(?, ?)", &pairs, 1);
            let mut q = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(sql));
            for (queue, key) in chunk {
                q = q.bind(queue).bind(key);
            }
            for row in q.fetch_all(&self.reader).await? {
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
            by_id_list(&self.reader, sql::TASK_QUEUES, task_ids).await?;
        Ok(rows.into_iter().collect())
    }

    async fn task_list(&self, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        task_list(&self.reader, f).await
    }

    async fn task_update(
        &self,
        task_id: &str,
        update: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        let (task_id, u) = (task_id.to_owned(), update.clone());
        self.write(move |c| self::update(c, &task_id, &u, now))
            .await
    }

    async fn task_replace_waiting(
        &self,
        r: &Replacement,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        let r = r.clone();
        self.write(move |c| replace_waiting(c, &r, now)).await
    }

    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>> {
        let statements = [sql::ATTEMPT_LIST_TASK, sql::ATTEMPT_LIST];
        super::super::tasks::attempt_list(&self.reader, statements, 1, task_id).await
    }

    async fn task_insert_flow(
        &self,
        tasks: &[NewTask],
        flows: &[FlowSpec],
        now: DateTime<Utc>,
        commit_by: Option<std::time::Instant>,
    ) -> StoreResult<FlowInserted> {
        let (tasks, flows) = (tasks.to_owned(), flows.to_owned());
        self.write(move |c| super::flow::insert(c, &tasks, &flows, now, commit_by))
            .await
    }

    async fn task_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>> {
        let (tasks, matches) = (tasks.to_owned(), matches.to_owned());
        self.write(move |c| super::sync_match::insert_matched(c, &tasks, &matches, now))
            .await
    }
}

fn update(
    c: &Connection,
    task_id: &str,
    u: &TaskUpdate,
    now: DateTime<Utc>,
) -> StoreResult<Changed> {
    let Some(row) = fetch_task(c, task_id)? else {
        return Ok(Changed::NotFound);
    };
    let state = row.stored_state()?;
    if !update_allowed(state, u) {
        return Ok(Changed::WrongState(state));
    }
    let v = UpdateValues::of(&row, u);
    let changes = v.changes(&row);
    c.prepare_cached(sql::TASK_UPDATE)?.execute(params![
        v.run_at,
        v.priority,
        v.deadline,
        v.max_attempts,
        v.attempts_allowed,
        ms(now),
        row.seq,
        v.target_worker,
        v.target_labels
    ])?;
    // Routing: an admin change frees a reserved retry.
    super::routing::clear_reservation(c, &row)?;
    let changed = changed_event(c, task_id, EventKind::Updated, ms(now), Some(&changes))?;
    Ok(changed)
}

/// REPLACE_WAITING (see `Store::task_replace_waiting`). The writer is the only
/// writer: nothing comes between the read and the update.
fn replace_waiting(
    c: &Connection,
    r: &Replacement,
    now: DateTime<Utc>,
) -> StoreResult<Option<String>> {
    let held: Option<(String, String)> = c
        .prepare_cached(sql::TASK_REPLACE_WAITING_HELD)?
        .query_row(params![r.queue, r.key], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    let Some((id, metadata)) = held else {
        return Ok(None);
    };
    let now = ms(now);
    // Every write of run_at writes `waiting` (migration 0017).
    c.prepare_cached(sql::TASK_REPLACE_WAITING_WRITE)?
        .execute(params![
            r.payload,
            ms(r.run_at),
            r.priority,
            super::super::merged_metadata(&metadata, &r.metadata),
            now,
            id
        ])?;
    changed_event(c, &id, EventKind::Replaced, now, None)?;
    Ok(Some(id))
}

async fn task_list(r: &sqlx::SqlitePool, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
    // Newest created first (the order of every store): the page is chosen by
    // creation time and sequence number (from an index when one covers the
    // filters), and only its rows are read in full.
    // Dynamic: the filters given add their terms, and the terms and inner order
    // chosen for the states asked for.
    let inner = sql::TASK_LIST_HEAD;
    let inner = inner[..inner.find("ORDER BY").unwrap_or(inner.len())].trim_end();
    let mut qb = sqlx::QueryBuilder::<sqlx::Sqlite>::new(inner);
    // Read in creation order from its index (the rowid, seq, ends every SQLite
    // index), so an empty creation-time range costs what a full page does.
    filter::push_task_terms(&mut qb, &filter::SQLITE, f);
    // Terms that let SQLite use a partial index (it does not infer them from the
    // state filter): leased rows through the lease-expiry index, sorted after
    // (`+created_at`: they are few); finished or pending rows of one queue through the
    // (queue, state) or lease index. Without them a rare state scans the table.
    let only = |set: &[TaskState]| !f.states.is_empty() && f.states.iter().all(|s| set.contains(s));
    let mut order = " ORDER BY created_at DESC, seq DESC LIMIT ";
    if only(&[TaskState::Leased]) {
        qb.push(" AND state = 'leased' AND lease_expires_at >= 0");
        order = " ORDER BY +created_at DESC, seq DESC LIMIT ";
    } else if f.queue.is_some()
        && only(&[TaskState::Succeeded, TaskState::Dead, TaskState::Cancelled])
    {
        qb.push(" AND state NOT IN ('pending', 'leased')");
    } else if f.queue.is_some() && only(&[TaskState::Ready, TaskState::Scheduled]) {
        qb.push(" AND state = 'pending'");
    }
    qb.push(order)
        .push_bind(f.limit)
        .push(") ORDER BY created_at DESC, seq DESC");
    records(qb.build_query_as::<TaskRow>().fetch_all(r).await?)
}
