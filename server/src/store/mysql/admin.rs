//! An operator's changes on MySQL (cancel, requeue, purge, the bulk changes
//! and the dead letters), each write in its job's transaction.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::flow::visible;
use super::super::observe::dead_group_row;
use super::super::row::{IntoRecord, records};
use super::super::row::{TaskRow, ms};
use super::super::*;
use super::rows::{changed_event, fetch_task};
use super::tx::simple;
use super::{Job, MysqlStore, bound_last, marks, sql};
use crate::domain::event::EventKind;

#[async_trait]
impl Admin for MysqlStore {
    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        job!(self, |j| {
            let now = ms(now);
            let Some(row) = fetch_task(j, task_id).await? else {
                return Ok(Changed::NotFound);
            };
            let kind = match row.stored_state()? {
                StoredState::Pending | StoredState::Blocked => {
                    sqlx::query(sql::TASK_CANCEL_PENDING)
                        .bind(now)
                        .bind(now)
                        .bind(row.seq)
                        .execute(j.conn())
                        .await?;
                    EventKind::Cancelled
                }
                StoredState::Leased => {
                    sqlx::query(sql::TASK_CANCEL_LEASED)
                        .bind(now)
                        .bind(row.seq)
                        .bind(now)
                        .execute(j.conn())
                        .await?;
                    EventKind::Updated
                }
                StoredState::Cancelled => return Ok(Changed::Done(Box::new(row.into_record()?))),
                other => return Ok(Changed::WrongState(other)),
            };
            changed_event(j, task_id, kind, now, None).await
        })
    }

    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        job!(self, |j| {
            let Some(row) = fetch_task(j, task_id).await? else {
                return Ok(Changed::NotFound);
            };
            let state = row.stored_state()?;
            if !matches!(state, StoredState::Dead | StoredState::Cancelled) {
                return Ok(Changed::WrongState(state));
            }
            shift_finished(j, &[row.seq], -1).await?;
            // Routing: an admin requeue frees a reserved retry.
            sqlx::query(sql::TASK_REQUEUE)
                .bind(ms(now))
                .bind(ms(now))
                .bind(row.seq)
                .execute(j.conn())
                .await?;
            changed_event(j, task_id, EventKind::Requeued, ms(now), None).await
        })
    }

    async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64> {
        job!(self, |j| purge_finished(j, before, scope, limit).await)
    }

    async fn task_dead_groups(&self, p: &DeadGroupParams) -> StoreResult<Vec<DeadGroup>> {
        // Grouped by the error's hash first (the dead-letter index), then by the
        // error itself, so two errors with one hash stay apart.
        // Dynamic: the WHERE holds the filters given.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(sql::TASK_DEAD_GROUPS);
        if let Some(q) = &p.queue {
            qb.push(" AND queue = ").push_bind(q);
        }
        if let Some(e) = p.error.as_deref() {
            qb.push(" AND COALESCE(last_error, '') = ").push_bind(e);
        }
        qb.push(" GROUP BY queue, error_hash, e ORDER BY n DESC, queue, e LIMIT ")
            .push_bind(i64::from(p.limit));
        let rows: Vec<(String, String, i64, Option<i64>)> =
            qb.build_query_as().fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(dead_group_row).collect())
    }

    async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64> {
        job!(self, |j| {
            let now = ms(p.now);
            let rows = dead_ids(j, &p.queue, Some(&p.error), None, p.limit).await?;
            let seqs: Vec<i64> = rows.iter().map(|r| r.0).collect();
            shift_finished(j, &seqs, -1).await?;
            update_seqs(j, sql::TASK_REQUEUE_DEAD, now, &seqs).await?;
            for (_, id, attempt) in &rows {
                j.push(simple(
                    id,
                    &p.queue,
                    EventKind::Requeued,
                    "ready",
                    *attempt,
                    now,
                ));
            }
            if !rows.is_empty() {
                j.woken.push(p.queue.clone());
            }
            Ok(rows.len() as u64)
        })
    }

    async fn task_cancel_dead(&self, p: &CancelDeadParams) -> StoreResult<u64> {
        job!(self, |j| {
            let now = ms(p.now);
            let rows = dead_ids(
                j,
                &p.queue,
                p.error.as_deref(),
                p.task_id.as_deref(),
                p.limit,
            )
            .await?;
            let seqs: Vec<i64> = rows.iter().map(|r| r.0).collect();
            // Dead -> cancelled: out of one finished count, into another.
            shift_finished(j, &seqs, -1).await?;
            update_seqs(j, sql::TASK_CANCEL_DEAD, now, &seqs).await?;
            shift_finished(j, &seqs, 1).await?;
            for (_, id, attempt) in &rows {
                j.push(simple(
                    id,
                    &p.queue,
                    EventKind::Cancelled,
                    "cancelled",
                    *attempt,
                    now,
                ));
            }
            Ok(rows.len() as u64)
        })
    }

    async fn task_select(&self, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
        // Dynamic: the WHERE holds the filters given.
        let mut qb = sqlx::QueryBuilder::<MySql>::new(bound_last(sql::TASK_SELECT_HEAD));
        qb.push_bind(&f.queue);
        filter::push_select_terms(&mut qb, &filter::MYSQL, f);
        qb.push(" ORDER BY seq LIMIT ")
            .push_bind(i64::from(f.limit));
        records(qb.build_query_as::<TaskRow>().fetch_all(&self.pool).await?)
    }

    async fn task_cancel_many(
        &self,
        task_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<BulkCancelled> {
        job!(self, |j| cancel_many(j, task_ids, now).await)
    }

    async fn task_requeue_many(
        &self,
        tasks: &[(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        job!(self, |j| {
            let now = ms(now);
            let mut n = 0;
            for (id, run_at) in tasks {
                let row: Option<(i64, String, i64)> = sqlx::query_as(sql::TASK_REQUEUE_MANY_PICK)
                    .bind(id)
                    .fetch_optional(j.conn())
                    .await?;
                let Some((seq, queue, attempt)) = row else {
                    continue;
                };
                shift_finished(j, &[seq], -1).await?;
                sqlx::query(sql::TASK_REQUEUE_MANY)
                    .bind(ms(*run_at))
                    .bind(now)
                    .bind(seq)
                    .execute(j.conn())
                    .await?;
                n += 1;
                let state = visible("pending", ms(*run_at), now);
                j.push(simple(id, &queue, EventKind::Requeued, state, attempt, now));
                j.woken.push(queue);
            }
            Ok(n)
        })
    }
}

async fn purge_finished(
    j: &mut Job,
    before: DateTime<Utc>,
    scope: &PurgeScope,
    limit: u32,
) -> StoreResult<u64> {
    // Dynamic: the queues of the scope, as a list.
    let mut qb = sqlx::QueryBuilder::<MySql>::new(bound_last(sql::TASK_PURGE_FINISHED_PICK_HEAD));
    qb.push_bind(ms(before));
    match scope {
        PurgeScope::Only(q) => {
            qb.push(" AND queue = ").push_bind(q);
        }
        PurgeScope::AllExcept(qs) if !qs.is_empty() => {
            qb.push(" AND queue NOT IN (");
            let mut sep = qb.separated(", ");
            for q in qs {
                sep.push_bind(q);
            }
            qb.push(")");
        }
        PurgeScope::AllExcept(_) => {}
    }
    qb.push(" LIMIT ")
        .push_bind(i64::from(limit))
        .push(" FOR UPDATE SKIP LOCKED");
    let rows: Vec<(i64, String)> = qb.build_query_as().fetch_all(j.conn()).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let seqs: Vec<i64> = rows.iter().map(|r| r.0).collect();
    shift_finished(j, &seqs, -1).await?;
    for (head, key) in [
        (sql::TASK_PURGE_FINISHED_TASKS_HEAD, true),
        (sql::TASK_PURGE_FINISHED_ATTEMPTS_HEAD, false),
        // Its dependency edges go with the dependent.
        (sql::TASK_PURGE_FINISHED_DEPS_HEAD, false),
        (sql::TASK_PURGE_FINISHED_KEY_DEPS_HEAD, false),
    ] {
        // Dynamic: one placeholder per task purged.
        let text = format!("{head}{})", marks(rows.len()));
        let mut q = sqlx::query(sqlx::AssertSqlSafe(text));
        for (seq, id) in &rows {
            q = if key {
                q.bind(*seq)
            } else {
                q.bind(id.clone())
            };
        }
        q.execute(j.conn()).await?;
    }
    Ok(rows.len() as u64)
}

/// The dead tasks of a queue (and error, or one task) a bulk change takes,
/// locked, oldest first.
async fn dead_ids(
    j: &mut Job,
    queue: &str,
    error: Option<&str>,
    task_id: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<(i64, String, i64)>> {
    // Dynamic: the WHERE holds the filters given.
    let mut qb = sqlx::QueryBuilder::<MySql>::new(bound_last(sql::TASK_DEAD_PICK_HEAD));
    qb.push_bind(queue);
    if let Some(e) = error {
        qb.push(" AND COALESCE(last_error, '') = ").push_bind(e);
    }
    if let Some(id) = task_id {
        qb.push(" AND id = ").push_bind(id);
    }
    qb.push(" ORDER BY seq LIMIT ")
        .push_bind(i64::from(limit))
        .push(" FOR UPDATE SKIP LOCKED");
    Ok(qb.build_query_as().fetch_all(j.conn()).await?)
}

/// Adds `by` (-1 before a change takes them out, 1 after one puts them in) to
/// the finished counts of the tasks of `seqs` that are in a finished state and
/// were folded into their counts (finished at or before the watermark); the
/// watermark stays locked in share mode to the commit, so a fold waits.
async fn shift_finished(j: &mut Job, seqs: &[i64], by: i64) -> StoreResult<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    let w: i64 = sqlx::query_scalar(sql::FINISHED_SHARE)
        .fetch_one(j.conn())
        .await?;
    // Dynamic: one placeholder per task.
    let text = format!(
        "{}{}{}",
        sql::FINISHED_SHIFT_HEAD,
        marks(seqs.len()),
        sql::FINISHED_SHIFT_TAIL
    );
    let mut q = sqlx::query(sqlx::AssertSqlSafe(text)).bind(by).bind(w);
    for s in seqs {
        q = q.bind(*s);
    }
    q.execute(j.conn()).await?;
    Ok(())
}

/// Runs `head` (which binds `now` twice or once, then takes the seqs) over `seqs`.
async fn update_seqs(j: &mut Job, head: &str, now: i64, seqs: &[i64]) -> StoreResult<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    let nows = head.matches('?').count();
    // Dynamic: one placeholder per task.
    let text = format!("{head}{})", marks(seqs.len()));
    let mut q = sqlx::query(sqlx::AssertSqlSafe(text));
    for _ in 0..nows {
        q = q.bind(now);
    }
    for s in seqs {
        q = q.bind(*s);
    }
    q.execute(j.conn()).await?;
    Ok(())
}

async fn cancel_many(
    j: &mut Job,
    ids: &[String],
    now: DateTime<Utc>,
) -> StoreResult<BulkCancelled> {
    let now = ms(now);
    let mut out = BulkCancelled::default();
    for id in ids {
        let row: Option<(i64, String, String, i64, bool)> =
            sqlx::query_as(sql::TASK_CANCEL_MANY_PICK)
                .bind(id)
                .fetch_optional(j.conn())
                .await?;
        let Some((seq, state, queue, attempt, requested)) = row else {
            continue;
        };
        if state == "pending" || state == "blocked" {
            sqlx::query(sql::TASK_CANCEL_MANY_PENDING)
                .bind(now)
                .bind(now)
                .bind(seq)
                .execute(j.conn())
                .await?;
            out.cancelled += 1;
            j.push(simple(
                id,
                &queue,
                EventKind::Cancelled,
                "cancelled",
                attempt,
                now,
            ));
        } else if state == "leased" && !requested {
            sqlx::query(sql::TASK_CANCEL_MANY_LEASED)
                .bind(now)
                .bind(seq)
                .execute(j.conn())
                .await?;
            out.cancel_requested += 1;
            j.push(simple(
                id,
                &queue,
                EventKind::Updated,
                "leased",
                attempt,
                now,
            ));
        }
    }
    Ok(out)
}
