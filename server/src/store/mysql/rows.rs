//! The task row on MySQL: its columns (`task_columns` in `rows.sql`, as
//! `TaskRow` reads them; `key` is a reserved word), the locked read of one
//! task, and the reply bound of a row (`reply_size`). Rows decode into records
//! by the shared `store::row`. And the row writes several rooms share: the
//! insert of tasks (submit, a fire's runs, a dead-letter notice) and the lease
//! of picked rows (`lease_seqs`, for the plain and the gated lease).

use chrono::{DateTime, Utc};
use sqlx::MySql;

use super::super::flow::{of_row, simple, visible};
use super::super::row::IntoRecord;
use super::super::row::{TaskRow, duration_ms, ms};
use super::super::*;
use super::{Job, marks, sql};
use crate::domain::event::EventKind;

/// The task, its row locked until the job ends.
pub(super) async fn fetch_task(j: &mut Job, id: &str) -> StoreResult<Option<TaskRow>> {
    Ok(sqlx::query_as::<_, TaskRow>(sql::TASK_LOCK)
        .bind(id)
        .fetch_optional(j.conn())
        .await?)
}

/// The task as it is after a change, which is recorded as a `kind` event (Flow).
pub(super) async fn changed_event(
    j: &mut Job,
    id: &str,
    kind: EventKind,
    now: i64,
    detail: Option<&str>,
) -> StoreResult<Changed> {
    match fetch_task(j, id).await? {
        Some(row) => {
            let mut e = of_row(&row, kind, now);
            e.detail = detail.or(e.detail);
            j.push(e);
            Ok(Changed::Done(Box::new(row.into_record()?)))
        }
        None => Ok(Changed::NotFound),
    }
}

/// Whether `reply_size` (`rows.sql`) is the shared reply bound
/// (`store::reply`) as MySQL spells it, word for word.
pub(super) fn reply_size_is_shared() -> bool {
    use crate::store::reply::{Dialect, size_sql};
    // Not run: the text `reply_size_of_task` must have.
    let expected = format!(
        "SELECT CAST({} AS SIGNED) FROM tasks",
        size_sql(Dialect::Mysql)
    );
    sql::REPLY_SIZE_OF_TASK
        .split_whitespace()
        .eq(expected.split_whitespace())
}

/// What one task's row adds to the multi-row INSERT of `insert_many`: its
/// text and byte parameters, and the framing of all of them.
pub(super) fn insert_bytes(t: &NewTask) -> usize {
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
        + param(t.checkpoint.as_ref().map_or(0, Vec::len))
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
                .push_bind(r.fanout_distinct)
                .push_bind(&t.checkpoint);
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
                j.push(simple(
                    &t.id,
                    &t.queue,
                    EventKind::Submitted,
                    visible("pending", ms(t.run_at), now),
                    0,
                    now,
                ));
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

/// Leases the picked rows (pending, locked by this job) to a worker with one
/// UPDATE by seq, and answers with them as it left them: the columns it sets
/// are set here the same way, so nothing is read back.
pub(super) async fn lease_rows(
    j: &mut Job,
    mut rows: Vec<TaskRow>,
    worker: &str,
    address: &str,
    lease_ms: i64,
    now: i64,
) -> StoreResult<Vec<TaskRow>> {
    if rows.is_empty() {
        return Ok(rows);
    }
    let batch = uuid::Uuid::new_v4().simple().to_string();
    let until = now.saturating_add(lease_ms);
    // Dynamic: one placeholder per task leased.
    let text = format!("{}{})", sql::LEASE_PLAIN_WRITE, marks(rows.len()));
    let mut q = sqlx::query(sqlx::AssertSqlSafe(text))
        .bind(&batch)
        .bind(worker)
        .bind(lease_ms)
        .bind(until)
        .bind(now)
        .bind(now)
        .bind(address);
    for r in &rows {
        q = q.bind(r.seq);
    }
    let n = q.execute(j.conn()).await?.rows_affected();
    // The rows are locked here and were pending: every one is leased.
    if n != rows.len() as u64 {
        return Err(StoreError::Corrupt(format!(
            "leased {n} of {} locked rows",
            rows.len()
        )));
    }
    for r in &mut rows {
        leased(r, &batch, worker, address, lease_ms, until, now);
        j.push(of_row(r, EventKind::Leased, now));
    }
    Ok(rows)
}

/// A pending row as `lease_plain_write` leaves it.
fn leased(
    r: &mut TaskRow,
    batch: &str,
    worker: &str,
    address: &str,
    lease_ms: i64,
    until: i64,
    now: i64,
) {
    r.state = "leased".into();
    r.attempt += 1;
    r.fencing_token += 1;
    r.lease_token = Some(format!("{batch}.{}", r.seq));
    r.leased_by = Some(worker.to_owned());
    r.lease_duration_ms = Some(lease_ms);
    r.lease_expires_at = Some(r.deadline.map_or(until, |d| until.min(d)));
    r.updated_at = now;
    r.leased_at = Some(now);
    r.leased_address = Some(address.to_owned());
}

/// Leases the tasks of `seqs` (pending ones) to a worker and reads them back.
pub(super) async fn lease_seqs(
    j: &mut Job,
    seqs: &[i64],
    worker: &str,
    address: &str,
    lease_ms: i64,
    now: i64,
) -> StoreResult<Vec<TaskRow>> {
    if seqs.is_empty() {
        return Ok(Vec::new());
    }
    // Each lease token is this call's random prefix and the row's seq: unique,
    // and it names exactly the rows this UPDATE changed (a row another
    // transaction leased meanwhile is not pending here any more).
    let batch = uuid::Uuid::new_v4().simple().to_string();
    // Dynamic: one placeholder per task leased.
    let text = format!("{}{})", sql::LEASE_PLAIN_WRITE, marks(seqs.len()));
    let mut q = sqlx::query(sqlx::AssertSqlSafe(text))
        .bind(&batch)
        .bind(worker)
        .bind(lease_ms)
        .bind(now.saturating_add(lease_ms))
        .bind(now)
        .bind(now)
        .bind(address);
    for s in seqs {
        q = q.bind(*s);
    }
    q.execute(j.conn()).await?;
    // Dynamic: one placeholder per task leased.
    let text = format!("{}{})", sql::LEASE_PLAIN_READ, marks(seqs.len()));
    let mut q = sqlx::query_as::<_, TaskRow>(sqlx::AssertSqlSafe(text)).bind(&batch);
    for s in seqs {
        q = q.bind(*s);
    }
    let rows = q.fetch_all(j.conn()).await?;
    for r in &rows {
        j.push(of_row(r, EventKind::Leased, now));
    }
    Ok(rows)
}

/// Rows per multi-row INSERT of tasks.
const INSERT_PIECE: usize = 100;

#[cfg(test)]
mod tests {
    #[test]
    fn reply_size_is_the_shared_bound() {
        assert!(super::reply_size_is_shared());
    }
}
