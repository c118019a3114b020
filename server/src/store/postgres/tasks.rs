//! Tasks on Postgres: the submit (plain, keyed, routed; with dependencies in
//! flow.rs, sync-matched in sync_match.rs), reads, updates, attempts.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::error::BoxDynError;
use sqlx::postgres::PgArguments;
use sqlx::{Arguments as _, Postgres};

use super::super::row::{TaskRow, duration_ms, ms};
use super::super::row::{record, records};
use super::super::sync_match::metadata_json;
use super::super::tasks::{UpdateValues, update_allowed};
use super::super::*;
use super::{PostgresStore, flow, routing, sql};
use crate::domain::event::EventKind;

/// Whether a task of the batch carries a key (else its inserts cannot collide).
pub(super) fn keyed(tasks: &[NewTask]) -> bool {
    tasks.iter().any(|t| t.key.is_some())
}

/// The arrays $1 to $16 of a task insert (`tasks.sql` says what each holds),
/// which `task_insert_many*` and `task_insert_matched*` bind alike before
/// their own. `wake` is $15: the tag appended to the wake-up's queue name, or
/// the channel the matched insert notifies.
pub(super) fn insert_arguments(
    tasks: &[NewTask],
    now: DateTime<Utc>,
    wake: &str,
) -> Result<PgArguments, BoxDynError> {
    let col = |f: &dyn Fn(&NewTask) -> i64| tasks.iter().map(f).collect::<Vec<i64>>();
    let mut a = PgArguments::default();
    a.add(tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>())?;
    a.add(tasks.iter().map(|t| t.queue.as_str()).collect::<Vec<_>>())?;
    a.add(tasks.iter().map(|t| t.key.as_deref()).collect::<Vec<_>>())?;
    a.add(
        tasks
            .iter()
            .map(|t| t.payload.as_slice())
            .collect::<Vec<_>>(),
    )?;
    a.add(col(&|t| i64::from(t.priority)))?;
    a.add(col(&|t| ms(t.run_at)))?;
    a.add(tasks.iter().map(|t| t.deadline.map(ms)).collect::<Vec<_>>())?;
    a.add(col(&|t| i64::from(t.retry.max_attempts)))?;
    a.add(col(&|t| duration_ms(t.retry.initial_backoff)))?;
    a.add(
        tasks
            .iter()
            .map(|t| t.retry.backoff_multiplier)
            .collect::<Vec<_>>(),
    )?;
    a.add(col(&|t| duration_ms(t.retry.max_backoff)))?;
    a.add(tasks.iter().map(|t| t.retry.jitter).collect::<Vec<_>>())?;
    a.add(tasks.iter().map(metadata_json).collect::<Vec<_>>())?;
    a.add(ms(now))?;
    a.add(wake)?;
    a.add(
        tasks
            .iter()
            .map(|t| t.concurrency_key.as_deref())
            .collect::<Vec<_>>(),
    )?;
    Ok(a)
}

/// The submitted checkpoints, the last array of every task insert.
pub(super) fn add_checkpoints(a: &mut PgArguments, tasks: &[NewTask]) -> Result<(), BoxDynError> {
    a.add(
        tasks
            .iter()
            .map(|t| t.checkpoint.as_deref())
            .collect::<Vec<_>>(),
    )
}

/// The ids of the tasks that hold the keys of `dups` (the tasks of a batch
/// that a (queue, key) made duplicates), by (queue, key).
pub(super) async fn existing_ids<'e>(
    e: impl sqlx::PgExecutor<'e>,
    stmt: &'static str,
    dups: &[&NewTask],
) -> StoreResult<std::collections::HashMap<(String, String), String>> {
    if dups.is_empty() {
        return Ok(Default::default());
    }
    let q: Vec<&str> = dups.iter().map(|t| t.queue.as_str()).collect();
    let k: Vec<Option<&str>> = dups.iter().map(|t| t.key.as_deref()).collect();
    let rows: Vec<(String, String, String)> =
        sqlx::query_as(stmt).bind(&q).bind(&k).fetch_all(e).await?;
    Ok(rows.into_iter().map(|(q, k, id)| ((q, k), id)).collect())
}

impl PostgresStore {
    /// Inserts tasks (see `Store::task_insert_many`) on one connection, which may
    /// be in a transaction (Flow inserts tasks with dependencies in one).
    /// `tag`: appended to the wake-up's queue name: the store's own tag
    /// when the broker wakes its own waiters after the commit, else "".
    pub(super) async fn insert_on(
        conn: &mut sqlx::PgConnection,
        tasks: &[NewTask],
        now: DateTime<Utc>,
        tag: &str,
    ) -> StoreResult<Vec<Inserted>> {
        // One multi-row statement (one round trip, one commit) for the whole batch;
        // it also notifies the queues that got tasks, in the same transaction.
        // Routing: a batch with routed tasks inserts their routing
        // columns too (the same statement with more arrays), before the
        // checkpoints.
        let routed = tasks.iter().any(|t| routing::is_routed(&t.routing));
        let stmt = if routed {
            sql::TASK_INSERT_MANY_ROUTED
        } else if keyed(tasks) {
            sql::TASK_INSERT_MANY
        } else {
            sql::TASK_INSERT_MANY_KEYLESS
        };
        let mut args = insert_arguments(tasks, now, tag);
        if routed {
            args = args.and_then(|mut a| routing::add_routing(&mut a, tasks).map(|()| a));
        }
        let args = args.and_then(|mut a| add_checkpoints(&mut a, tasks).map(|()| a));
        let args = args.map_err(sqlx::Error::Encode)?;
        let inserted: Vec<String> = sqlx::query_scalar_with(stmt, args)
            .fetch_all(&mut *conn)
            .await?;
        let inserted: std::collections::HashSet<String> = inserted.into_iter().collect();
        // The rest were duplicates of a (queue, key): answer with the existing ids.
        let dups: Vec<&NewTask> = tasks.iter().filter(|t| !inserted.contains(&t.id)).collect();
        let existing = existing_ids(&mut *conn, sql::TASK_INSERT_MANY_EXISTING, &dups).await?;
        tasks
            .iter()
            .map(|t| {
                if inserted.contains(&t.id) {
                    return Ok(Inserted {
                        task_id: t.id.clone(),
                        deduplicated: false,
                    });
                }
                let key = (t.queue.clone(), t.key.clone().unwrap_or_default());
                existing
                    .get(&key)
                    .map(|id| Inserted {
                        task_id: id.clone(),
                        deduplicated: true,
                    })
                    .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))
            })
            .collect()
    }
}

#[async_trait]
impl Tasks for PostgresStore {
    async fn task_insert_many(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<Inserted>> {
        let mut conn = self.hot().acquire().await?;
        // The broker wakes its own waiters after the commit.
        Self::insert_on(&mut conn, tasks, now, &self.wake_tag).await
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
        let queues: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
        let names: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
        records(
            sqlx::query_as::<_, TaskRow>(sql::TASK_FIND_KEYS)
                .bind(&queues)
                .bind(&names)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    async fn task_queues(
        &self,
        task_ids: &[String],
    ) -> StoreResult<std::collections::HashMap<String, String>> {
        let rows: Vec<(String, String)> = sqlx::query_as(sql::TASK_QUEUES)
            .bind(task_ids)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().collect())
    }

    async fn task_list(&self, f: &TaskFilter) -> StoreResult<Vec<TaskRecord>> {
        // Every list is read in creation order, from its index (tasks have no
        // index on `seq` alone: each row version would write an entry to it).
        // A page token of an earlier version carries only a sequence number.
        // Dynamic: the filters are optional.
        let push_where = |qb: &mut sqlx::QueryBuilder<Postgres>| {
            filter::push_task_terms(qb, &filter::POSTGRES, f);
        };
        // tasks_created leaves LEASED rows out (0013: a lease writes no entry
        // into it); they are few, so they are read apart and merged in.
        let mut qb = sqlx::QueryBuilder::<Postgres>::new(sql::TASK_LIST_HEAD);
        push_where(&mut qb);
        qb.push(" ORDER BY created_at DESC, seq DESC LIMIT ")
            .push_bind(i64::from(f.limit))
            .push(sql::TASK_LIST_LEASED);
        push_where(&mut qb);
        qb.push(" ORDER BY created_at DESC, seq DESC LIMIT ")
            .push_bind(i64::from(f.limit))
            .push(")) u ORDER BY created_at DESC, seq DESC LIMIT ")
            .push_bind(i64::from(f.limit));
        records(qb.build_query_as::<TaskRow>().fetch_all(&self.pool).await?)
    }

    async fn task_update(
        &self,
        task_id: &str,
        u: &TaskUpdate,
        now: DateTime<Utc>,
    ) -> StoreResult<Changed> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = Self::fetch_task(&mut tx, task_id).await? else {
            tx.rollback().await?;
            return Ok(Changed::NotFound);
        };
        let state = row.stored_state()?;
        if !update_allowed(state, u) {
            tx.rollback().await?;
            return Ok(Changed::WrongState(state));
        }
        let v = UpdateValues::of(&row, u);
        let changes = v.changes(&row);
        sqlx::query(sql::TASK_UPDATE)
            .bind(v.run_at)
            .bind(v.priority)
            .bind(v.deadline)
            .bind(v.max_attempts)
            .bind(v.attempts_allowed)
            .bind(ms(now))
            .bind(&row.id)
            .bind(&v.target_worker)
            .bind(&v.target_labels)
            .execute(&mut *tx)
            .await?;
        if state == StoredState::Pending {
            Self::notify(&mut tx, &[&row.queue]).await?;
        }
        // Routing: an admin change frees a reserved retry.
        routing::clear_reservation(&mut tx, &row).await?;
        let changed = Self::changed_event(
            &mut tx,
            task_id,
            EventKind::Updated,
            ms(now),
            Some(&changes),
        )
        .await?;
        tx.commit().await?;
        Ok(changed)
    }

    /// REPLACE_WAITING (see `Store::task_replace_waiting`): the row is locked
    /// (FOR UPDATE rechecks its state once a lease that held it commits), so a
    /// task a lease took is never changed.
    async fn task_replace_waiting(
        &self,
        r: &Replacement,
        now: DateTime<Utc>,
    ) -> StoreResult<Option<String>> {
        let mut tx = self.pool.begin().await?;
        let held: Option<(String, String, String)> = sqlx::query_as(sql::TASK_REPLACE_WAITING_HELD)
            .bind(&r.queue)
            .bind(&r.key)
            .fetch_optional(&mut *tx)
            .await?;
        let Some((id, state, metadata)) = held else {
            tx.rollback().await?;
            return Ok(None);
        };
        let now = ms(now);
        // Every write of run_at writes `waiting` (migration 0017).
        sqlx::query(sql::TASK_REPLACE_WAITING_WRITE)
            .bind(&r.payload)
            .bind(ms(r.run_at))
            .bind(i64::from(r.priority))
            .bind(super::super::merged_metadata(&metadata, &r.metadata))
            .bind(now)
            .bind(&id)
            .execute(&mut *tx)
            .await?;
        if state == "pending" {
            Self::notify(&mut tx, &[&r.queue]).await?;
        }
        Self::changed_event(&mut tx, &id, EventKind::Replaced, now, None).await?;
        tx.commit().await?;
        Ok(Some(id))
    }

    async fn attempt_list(&self, task_id: &str) -> StoreResult<Option<Vec<AttemptRecord>>> {
        let statements = [sql::ATTEMPT_LIST_TASK, sql::ATTEMPT_LIST];
        super::super::tasks::attempt_list(&self.pool, statements, 1, task_id).await
    }

    async fn task_insert_flow(
        &self,
        tasks: &[NewTask],
        flows: &[FlowSpec],
        now: DateTime<Utc>,
        commit_by: Option<std::time::Instant>,
    ) -> StoreResult<FlowInserted> {
        flow::insert(&self.pool, tasks, flows, now, commit_by).await
    }

    async fn task_insert_matched(
        &self,
        tasks: &[NewTask],
        matches: &[Option<MatchTo>],
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<MatchedInsert>> {
        self.sync_insert_matched(tasks, matches, now).await
    }
}
