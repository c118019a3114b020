//! Leasing on SQLite: the plain and batched lease, the next scheduled run,
//! extending and releasing leases. Writes run in the writer's batch.
//!
//! The plain lease (less CPU per task): the candidates are read with one
//! index-ordered SELECT per queue (`lease_plain_pick`), merged and cut to the
//! request (count, reply budget, one copy per distinct fan-out group) here,
//! then each task taken is leased with a single-row UPDATE by rowid and read
//! back by rowid.
//!
//! Not one `UPDATE ... WHERE seq IN (window functions over a UNION ALL)
//! RETURNING ...`: that needs ephemeral tables and a sorter per call, and
//! RETURNING runs in a statement journal whose close inside the writer's job
//! savepoint walks the job's sub-journal (see `gated::grant`); such a statement
//! took 40% of the writer thread's time in per-task runs, most of it the
//! machinery around one row.
//! The writer is the only writer, so nothing changes the rows between the SELECT
//! and the UPDATEs; the result is the same rows in the same order.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, ToSql, params, params_from_iter};

use super::super::flow::{Ev, of_row, visible};
use super::super::leasing::{share_requests, top_up_requests};
use super::super::row::{TaskRow, duration_ms, from_ms, ms, sort_lease_order};
use super::super::*;
use super::rows::task_row;
use super::{SqliteStore, sql, tx};
use crate::domain::event::EventKind;

#[async_trait]
impl Leasing for SqliteStore {
    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
        let p = p.clone();
        self.write(move |c| lease_available(c, &p)).await
    }

    async fn task_lease_many(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        let ps = ps.to_owned();
        self.write(move |c| lease_many(c, &ps)).await
    }

    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let queues = serde_json::to_string(queues).unwrap_or_else(|_| "[]".into());
        let next: Option<i64> = sqlx::query_scalar(sql::TASK_NEXT_RUN_AT)
            .bind(queues)
            .bind(ms(now))
            .fetch_one(&self.reader)
            .await?;
        Ok(next.map(from_ms))
    }

    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>> {
        let leases = leases.to_owned();
        self.write(move |c| {
            let now = ms(now);
            let ext = extend_by.map(duration_ms);
            // Read (with the new expiry computed by SQLite), then a single-row
            // UPDATE by rowid without RETURNING, which would run in a statement
            // journal (see `settling`).
            let mut live = c.prepare_cached(sql::LEASE_EXTEND_PICK)?;
            let mut extend = c.prepare_cached(sql::LEASE_EXTEND_WRITE)?;
            let mut out = Vec::with_capacity(leases.len());
            for l in &leases {
                let row: Option<(i64, i64, bool)> = live
                    .query_row(params![now, ext, l.task_id, l.lease_token], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .optional()?;
                out.push(match row {
                    Some((seq, at, cancel_requested)) => {
                        extend.execute(params![at, now, seq])?;
                        LeaseState::Live {
                            lease_expires_at: from_ms(at),
                            cancel_requested,
                        }
                    }
                    None => LeaseState::Lost,
                });
            }
            Ok(out)
        })
        .await
    }

    async fn task_lease_gated(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        let ps = ps.to_owned();
        self.write(move |c| super::gated::lease_gated(c, &ps)).await
    }

    async fn lease_release(&self, leases: &[LeaseRef], now: DateTime<Utc>) -> StoreResult<u64> {
        let leases = leases.to_owned();
        self.write(move |c| {
            let mut update = c.prepare_cached(sql::LEASE_RELEASE)?;
            let now_ms = ms(now);
            let mut released = 0;
            for l in &leases {
                let row: Option<(String, i64, i64)> = update
                    .query_row(params![now_ms, l.task_id, l.lease_token], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .optional()?;
                let Some((queue, attempt, run_at)) = row else {
                    continue;
                };
                released += 1;
                // Flow: the task is READY again, its long-poll gone.
                tx::push(Ev {
                    task_id: &l.task_id,
                    queue: &queue,
                    kind: EventKind::Requeued,
                    state: visible("pending", run_at, now_ms),
                    attempt,
                    worker: None,
                    time: now_ms,
                    detail: Some("lease released: its long-poll went away"),
                });
            }
            Ok(released)
        })
        .await
    }
}

fn lease_available(c: &Connection, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
    super::rows::promote(c, &p.queues, ms(p.now))?;
    // Candidates by SELECT, then UPDATE by rowid.
    lease(c, p)
}

fn lease_many(c: &Connection, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let Some(first) = ps.first() else {
        return Ok(Vec::new());
    };
    if ps.len() == 1 {
        // Nothing to share: no need to count first.
        return Ok(vec![lease_available(c, first)?]);
    }
    let now = ps.iter().map(|p| p.now).max().unwrap_or(first.now);
    super::rows::promote(c, &first.queues, ms(now))?;
    let wanted: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
    let demand: i64 = wanted.iter().map(|&w| i64::from(w)).sum();
    // The writer is the only writer: what is counted here is what the leases
    // below take, one request after the other. Dynamic: one numbered
    // placeholder per queue (?3 and on).
    let list = (0..first.queues.len())
        .map(|i| format!("?{}", i + 3))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = sql::TASK_LEASE_MANY_AVAILABLE.replacen("IN (?3)", &format!("IN ({list})"), 1);
    let (at, limit) = (ms(now), demand);
    let mut args: Vec<&dyn ToSql> = vec![&at, &limit];
    for queue in &first.queues {
        args.push(queue);
    }
    let available: i64 = c
        .prepare_cached(&sql)?
        .query_row(params_from_iter(args), |r| r.get(0))?;
    let shares = lease_shares(&wanted, usize::try_from(available).unwrap_or(0));
    let mut out = share_requests(ps, &shares, now)
        .into_iter()
        .map(|p| p.map_or_else(|| Ok(Vec::new()), |p| lease(c, &p)))
        .collect::<StoreResult<Vec<_>>>()?;
    // Routing: what a request left behind, the others ask again for.
    let got: Vec<usize> = out.iter().map(Vec::len).collect();
    for (i, p) in top_up_requests(ps, &got, &shares, now) {
        out[i].extend(lease(c, &p)?);
    }
    Ok(out)
}

/// A READY task the request may take, with what ordering and cutting need.
struct Candidate {
    seq: i64,
    priority: i64,
    deadline: Option<i64>,
    run_at: i64,
    size: i64,
    /// The fan-out group, when its copies go to distinct workers.
    fgroup: Option<String>,
}

/// A candidate's place in lease order.
fn lease_key(c: &Candidate) -> crate::domain::model::LeaseKey {
    crate::domain::model::lease_key(c.priority, 1, c.deadline, c.run_at, c.seq)
}

/// Leases up to `p.max_tasks` READY tasks of `p.queues` to `p.worker_id`.
fn lease(c: &Connection, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
    let now = ms(p.now);
    let labels = p.routing.labels_json();
    let room = super::routing::room(c, p)?;
    let mut found: Vec<Candidate> = Vec::new();
    {
        let mut select = c.prepare_cached(sql::LEASE_PLAIN_PICK)?;
        for (queue, &limit) in p.queues.iter().zip(&room) {
            if limit <= 0 {
                continue;
            }
            let rows = select.query_map(params![p.worker_id, queue, labels, now, limit], |r| {
                Ok(Candidate {
                    seq: r.get(0)?,
                    priority: r.get(1)?,
                    deadline: r.get(2)?,
                    run_at: r.get(3)?,
                    size: r.get(4)?,
                    fgroup: r.get(5)?,
                })
            })?;
            for row in rows {
                found.push(row?);
            }
        }
    }
    if found.is_empty() {
        return Ok(Vec::new());
    }
    found.sort_by_key(lease_key);
    found.truncate(usize::try_from(p.max_tasks).unwrap_or(usize::MAX));
    let taken = super::super::leasing::within_reply_budget(
        found.iter().map(|c| (c.seq, c.size, c.fgroup.as_deref())),
        p.max_reply_bytes,
    );
    let lease_ms = duration_ms(p.lease_duration);
    let expires = now.saturating_add(lease_ms);
    let mut update = c.prepare_cached(sql::LEASE_PLAIN_WRITE)?;
    let mut read = c.prepare_cached(sql::LEASE_PLAIN_READ)?;
    let mut rows: Vec<TaskRow> = Vec::with_capacity(taken.len());
    for seq in taken {
        let n = update.execute(params![
            p.worker_id,
            lease_ms,
            expires,
            now,
            p.worker_address,
            seq
        ])?;
        if n == 1 {
            rows.push(read.query_row([seq], task_row)?);
        }
    }
    // Flow: the LEASED events.
    for r in &rows {
        tx::push(of_row(r, EventKind::Leased, now));
    }
    // The attempt's row is written when it ends (`settling`).
    let mut records = super::super::row::records(rows)?;
    sort_lease_order(&mut records);
    Ok(records)
}

/// The reply bound the pick cuts by, as the shared code writes it: the
/// `reply_size` fragment spells it out, and a test holds the two equal.
#[allow(dead_code)]
fn reply_size() -> String {
    crate::store::reply::size_sql(crate::store::reply::Dialect::Sqlite)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// The `reply_size` fragment is the shared reply bound, spelled out.
    #[test]
    fn the_pick_cuts_by_the_shared_reply_bound() {
        let size = reply_size();
        assert!(
            words(sql::LEASE_PLAIN_PICK).contains(&words(&size)),
            "{}",
            sql::LEASE_PLAIN_PICK
        );
    }
}
