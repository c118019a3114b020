//! An operator's changes on SQLite (cancel, requeue, purge, the dead letters,
//! bulk operations), each run inside the writer's batch transaction; the reads
//! they start from on the reader pool.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, ToSql, params, params_from_iter};

use super::super::observe::dead_group_row;
use super::super::row::{IntoRecord, records};
use super::super::row::{TaskRow, ms};
use super::super::tasks::in_list;
use super::super::*;
use super::rows::{changed_event, fetch_task};
use super::{SqliteStore, sql, tx};
use crate::domain::event::EventKind;

#[async_trait]
impl Admin for SqliteStore {
    async fn task_cancel(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        let task_id = task_id.to_owned();
        self.write(move |c| {
            let now = ms(now);
            let Some(row) = fetch_task(c, &task_id)? else {
                return Ok(Changed::NotFound);
            };
            let (sql, kind) = match row.stored_state()? {
                StoredState::Pending | StoredState::Blocked => {
                    (sql::TASK_CANCEL_PENDING, EventKind::Cancelled)
                }
                StoredState::Leased => (sql::TASK_CANCEL_LEASED, EventKind::Updated),
                StoredState::Cancelled => return Ok(Changed::Done(Box::new(row.into_record()?))),
                other => return Ok(Changed::WrongState(other)),
            };
            c.prepare_cached(sql)?.execute(params![now, row.seq])?;
            changed_event(c, &task_id, kind, now, None)
        })
        .await
    }

    async fn task_requeue(&self, task_id: &str, now: DateTime<Utc>) -> StoreResult<Changed> {
        let task_id = task_id.to_owned();
        self.write(move |c| {
            let Some(row) = fetch_task(c, &task_id)? else {
                return Ok(Changed::NotFound);
            };
            let state = row.stored_state()?;
            if !matches!(state, StoredState::Dead | StoredState::Cancelled) {
                return Ok(Changed::WrongState(state));
            }
            c.prepare_cached(sql::TASK_REQUEUE)?
                .execute(params![ms(now), row.seq])?;
            // Routing: an admin requeue frees a reserved retry.
            super::routing::clear_reservation(c, &row)?;
            changed_event(c, &task_id, EventKind::Requeued, ms(now), None)
        })
        .await
    }

    async fn task_purge_finished(
        &self,
        before: DateTime<Utc>,
        scope: &PurgeScope,
        limit: u32,
    ) -> StoreResult<u64> {
        let scope = scope.clone();
        self.write(move |c| {
            let before = ms(before);
            let mut args: Vec<&dyn ToSql> = vec![&before];
            // Dynamic: the scope picks the statement; NOT IN lists one ? per queue.
            let sql = match &scope {
                PurgeScope::Only(q) => {
                    args.push(q);
                    sql::TASK_PURGE_FINISHED_QUEUE.to_string()
                }
                PurgeScope::AllExcept(qs) if !qs.is_empty() => {
                    args.extend(qs.iter().map(|q| q as &dyn ToSql));
                    in_list(sql::TASK_PURGE_FINISHED_EXCEPT, qs.len())
                }
                PurgeScope::AllExcept(_) => sql::TASK_PURGE_FINISHED_ALL.to_string(),
            };
            args.push(&limit);
            let ids = c
                .prepare(&sql)?
                .query_map(params_from_iter(args), |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut delete = c.prepare_cached(sql::TASK_PURGE_FINISHED_ATTEMPTS)?;
            let mut edges = c.prepare_cached(sql::TASK_PURGE_FINISHED_DEPS)?;
            let mut keys = c.prepare_cached(sql::TASK_PURGE_FINISHED_KEY_DEPS)?;
            for id in &ids {
                delete.execute([id])?;
                edges.execute([id])?;
                keys.execute([id])?;
            }
            Ok(ids.len() as u64)
        })
        .await
    }

    async fn task_dead_groups(&self, p: &DeadGroupParams) -> StoreResult<Vec<DeadGroup>> {
        // Grouping by the stored error rather than COALESCE(last_error, '')
        // spares a sort, and the rare NULL and '' groups of one queue are merged
        // below. Dynamic: the filters given add their terms.
        let mut qb = sqlx::QueryBuilder::<sqlx::Sqlite>::new(sql::TASK_DEAD_GROUPS);
        if let Some(q) = &p.queue {
            qb.push(" AND queue = ").push_bind(q);
        }
        match p.error.as_deref() {
            Some("") => {
                qb.push(" AND (last_error IS NULL OR last_error = '')");
            }
            Some(e) => {
                qb.push(" AND last_error = ").push_bind(e);
            }
            None => {}
        }
        qb.push(" GROUP BY queue, last_error ORDER BY n DESC, queue, last_error LIMIT ")
            .push_bind(i64::from(p.limit) + 1);
        let rows: Vec<(String, Option<String>, i64, Option<i64>)> =
            qb.build_query_as().fetch_all(&self.reader).await?;
        let mut groups: Vec<DeadGroup> = Vec::with_capacity(rows.len());
        for (queue, error, n, last) in rows {
            let g = dead_group_row((queue, error.unwrap_or_default(), n, last));
            match groups
                .iter_mut()
                .find(|x| x.queue == g.queue && x.error == g.error)
            {
                Some(x) => {
                    x.count += g.count;
                    x.last_finished_at = x.last_finished_at.max(g.last_finished_at);
                }
                None => groups.push(g),
            }
        }
        groups.sort_by(|a, b| (b.count, &a.queue, &a.error).cmp(&(a.count, &b.queue, &b.error)));
        groups.truncate(p.limit as usize);
        Ok(groups)
    }

    async fn task_requeue_dead(&self, p: &RequeueDeadParams) -> StoreResult<u64> {
        let p = p.clone();
        self.write(move |c| {
            let rows: Vec<(String, String, i64)> = c
                .prepare_cached(sql::TASK_REQUEUE_DEAD)?
                .query_map(
                    params![ms(p.now), p.queue, p.error, i64::from(p.limit)],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )?
                .collect::<rusqlite::Result<_>>()?;
            // Flow: the REQUEUED events.
            for (id, queue, attempt) in &rows {
                let e = tx::simple(id, queue, EventKind::Requeued, "ready", *attempt, ms(p.now));
                tx::push(e);
            }
            Ok(rows.len() as u64)
        })
        .await
    }

    async fn task_cancel_dead(&self, p: &CancelDeadParams) -> StoreResult<u64> {
        let p = p.clone();
        self.write(move |c| {
            let rows: Vec<(String, String, i64)> = c
                .prepare_cached(sql::TASK_CANCEL_DEAD)?
                .query_map(
                    params![ms(p.now), p.queue, p.error, p.task_id, i64::from(p.limit)],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )?
                .collect::<rusqlite::Result<_>>()?;
            // Flow: the CANCELLED events.
            for (id, queue, attempt) in &rows {
                let kind = EventKind::Cancelled;
                tx::push(tx::simple(
                    id,
                    queue,
                    kind,
                    "cancelled",
                    *attempt,
                    ms(p.now),
                ));
            }
            Ok(rows.len() as u64)
        })
        .await
    }

    async fn task_select(&self, f: &BulkFilter) -> StoreResult<Vec<TaskRecord>> {
        // Dynamic: the filters given add their terms.
        let head = sql::TASK_SELECT_HEAD.trim_end().trim_end_matches(';');
        let mut qb =
            sqlx::QueryBuilder::<sqlx::Sqlite>::new(head.strip_suffix('?').unwrap_or(head));
        qb.push_bind(&f.queue);
        filter::push_select_terms(&mut qb, &filter::SQLITE, f);
        qb.push(" ORDER BY seq LIMIT ")
            .push_bind(i64::from(f.limit));
        records(
            qb.build_query_as::<TaskRow>()
                .fetch_all(&self.reader)
                .await?,
        )
    }

    async fn task_cancel_many(
        &self,
        task_ids: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<BulkCancelled> {
        let ids = task_ids.to_owned();
        self.write(move |c| {
            let now = ms(now);
            let mut out = BulkCancelled::default();
            for id in &ids {
                let cancelled: Option<(String, i64)> = c
                    .prepare_cached(sql::TASK_CANCEL_MANY_PENDING)?
                    .query_row(params![id, now], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                if let Some((queue, attempt)) = &cancelled {
                    out.cancelled += 1;
                    let kind = EventKind::Cancelled;
                    tx::push(tx::simple(id, queue, kind, "cancelled", *attempt, now));
                }
                let requested: Option<(String, i64)> = c
                    .prepare_cached(sql::TASK_CANCEL_MANY_LEASED)?
                    .query_row(params![id, now], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                if let Some((queue, attempt)) = &requested {
                    out.cancel_requested += 1;
                    let kind = EventKind::Updated;
                    tx::push(tx::simple(id, queue, kind, "leased", *attempt, now));
                }
            }
            Ok(out)
        })
        .await
    }

    async fn task_requeue_many(
        &self,
        tasks: &[(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let tasks = tasks.to_owned();
        self.write(move |c| {
            let now = ms(now);
            let mut n = 0;
            for (id, run_at) in &tasks {
                let row: Option<(String, i64)> = c
                    .prepare_cached(sql::TASK_REQUEUE_MANY)?
                    .query_row(params![id, ms(*run_at), now], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .optional()?;
                if let Some((q, attempt)) = row {
                    n += 1;
                    let state = super::super::flow::visible("pending", ms(*run_at), now);
                    tx::push(tx::simple(id, &q, EventKind::Requeued, state, attempt, now));
                    super::flow::wake(q);
                }
            }
            Ok(n)
        })
        .await
    }
}
