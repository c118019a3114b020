//! Leasing on MySQL: the plain lease (with routing) and the batched one, the
//! next run time, extending and releasing leases. The gated lease is in
//! `gated.rs`, the routing predicate and the worker locks in `routing.rs`.
//!
//! The plain lease reads each queue's first candidates in lease order by a
//! consistent read (the `tasks_lease` index is in that order, so only the rows
//! returned are read) and, in the same statement, locks them by primary key
//! with `FOR UPDATE SKIP LOCKED` (testing them again under the lock); when it
//! skipped some another job holds, it reads on past them. It merges and cuts them
//! here (count, reply budget, one copy per distinct fan-out group), then leases
//! them with one UPDATE by primary key, all in the job's transaction. MySQL has
//! no UPDATE ... RETURNING: the candidates are read whole, and the reply is
//! those rows with the columns the UPDATE sets set the same way here. Rows another replica holds
//! are skipped, never waited for. Rows locked here but not taken set
//! `Job::spare`, so other replicas' long-polls look again after the commit.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::super::flow::{Ev, visible};
use super::super::leasing::{share_requests, top_up_requests};
use super::super::row::{TaskRow, duration_ms, from_ms, ms, sort_lease_order};
use super::super::*;
use super::routing::{lock_workers, worker_held};
use super::{Job, MysqlStore, marks, sql};
use crate::domain::event::EventKind;

#[async_trait]
impl Leasing for MysqlStore {
    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
        job!(self, |j| lease(j, p).await)
    }

    /// Several requests for the same queues, served in one transaction: the
    /// READY tasks are shared out as [`lease_shares`] says, then a request that
    /// got less than its share (routing, its cap) leaves the rest to the
    /// others, who ask again for what they still want, in request order.
    async fn task_lease_many(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        job!(self, |j| lease_many(j, ps).await)
    }

    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        if queues.is_empty() {
            return Ok(None);
        }
        // Dynamic: one placeholder per queue.
        let text = format!(
            "{}{}{}",
            sql::TASK_NEXT_RUN_AT,
            marks(queues.len()),
            sql::TASK_NEXT_RUN_AT_TAIL
        );
        let mut q = sqlx::query_scalar::<_, Option<i64>>(sqlx::AssertSqlSafe(text));
        for queue in queues {
            q = q.bind(queue);
        }
        let next: Option<i64> = q.bind(ms(now)).fetch_one(&self.pool).await?;
        Ok(next.map(from_ms))
    }

    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>> {
        job!(self, |j| {
            let now = ms(now);
            let ext = extend_by.map(duration_ms);
            let mut out = Vec::with_capacity(leases.len());
            for l in leases {
                let row: Option<(i64, i64, bool)> = sqlx::query_as(sql::LEASE_EXTEND_PICK)
                    .bind(now)
                    .bind(ext)
                    .bind(&l.task_id)
                    .bind(&l.lease_token)
                    .bind(now)
                    .bind(now)
                    .fetch_optional(j.conn())
                    .await?;
                out.push(match row {
                    Some((seq, at, cancel_requested)) => {
                        sqlx::query(sql::LEASE_EXTEND_WRITE)
                            .bind(at)
                            .bind(now)
                            .bind(seq)
                            .execute(j.conn())
                            .await?;
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
    }

    async fn task_lease_gated(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        job!(self, |j| super::gated::lease_gated(j, ps).await)
    }

    /// The attempt is taken back (it never ran); the fencing token is not.
    async fn lease_release(&self, leases: &[LeaseRef], now: DateTime<Utc>) -> StoreResult<u64> {
        job!(self, |j| {
            let now_ms = ms(now);
            let mut released = 0;
            for l in leases {
                let row: Option<(i64, String, i64, i64)> = sqlx::query_as(sql::LEASE_RELEASE_PICK)
                    .bind(&l.task_id)
                    .bind(&l.lease_token)
                    .fetch_optional(j.conn())
                    .await?;
                let Some((seq, queue, attempt, run_at)) = row else {
                    continue;
                };
                sqlx::query(sql::LEASE_RELEASE)
                    .bind(now_ms)
                    .bind(seq)
                    .execute(j.conn())
                    .await?;
                released += 1;
                j.push(Ev {
                    task_id: &l.task_id,
                    queue: &queue,
                    kind: EventKind::Requeued,
                    state: visible("pending", run_at, now_ms),
                    attempt: attempt - 1,
                    worker: None,
                    time: now_ms,
                    detail: Some("lease released: its long-poll went away"),
                });
                j.woken.push(queue);
            }
            Ok(released)
        })
    }
}

/// A READY task the request may take: its whole row, with what ordering and
/// cutting need.
#[derive(sqlx::FromRow)]
struct Cand {
    #[sqlx(flatten)]
    row: TaskRow,
    lease_deadline: i64,
    size: i64,
    fgroup: Option<String>,
}

/// Per queue, how many more leases this worker may take: `max_tasks` where the
/// queue has no cap, else what its cap leaves.
async fn room(j: &mut Job, p: &LeaseParams) -> StoreResult<Vec<i64>> {
    let mut out = Vec::with_capacity(p.queues.len());
    for q in &p.queues {
        out.push(match p.routing.max_leases_per_worker.get(q) {
            None | Some(0) => i64::from(p.max_tasks),
            Some(&cap) => {
                let held = worker_held(j, q, &p.worker_id).await?;
                (i64::from(cap) - held).clamp(0, i64::from(p.max_tasks))
            }
        });
    }
    Ok(out)
}

/// Leases up to `p.max_tasks` READY tasks of `p.queues` to `p.worker_id`.
async fn lease(j: &mut Job, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
    lock_workers(j, &[p.worker_id.as_str()]).await?;
    lease_locked(j, p).await
}

/// [`lease`], its worker's row locked already.
async fn lease_locked(j: &mut Job, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
    let now = ms(p.now);
    let labels = p.routing.labels_json();
    let room = room(j, p).await?;
    let mut found: Vec<Cand> = Vec::new();
    for (queue, &limit) in p.queues.iter().zip(&room) {
        if limit <= 0 {
            continue;
        }
        found.extend(pick(j, p, queue, limit, now, &labels).await?);
    }
    if found.is_empty() {
        return Ok(Vec::new());
    }
    found.sort_by(|a, b| {
        let (x, y) = (&a.row, &b.row);
        y.priority
            .cmp(&x.priority)
            .then(a.lease_deadline.cmp(&b.lease_deadline))
            .then(x.run_at.cmp(&y.run_at))
            .then(x.seq.cmp(&y.seq))
    });
    let locked = found.len();
    found.truncate(usize::try_from(p.max_tasks).unwrap_or(usize::MAX));
    let taken = super::super::leasing::within_reply_budget(
        found
            .iter()
            .map(|c| (c.row.seq, c.size, c.fgroup.as_deref())),
        p.max_reply_bytes,
    );
    if taken.len() < locked {
        j.spare = true;
    }
    // The taken rows, in the order the budget took them.
    let mut by_seq: std::collections::HashMap<i64, TaskRow> =
        found.into_iter().map(|c| (c.row.seq, c.row)).collect();
    let picked: Vec<TaskRow> = taken.iter().filter_map(|s| by_seq.remove(s)).collect();
    let lease_ms = duration_ms(p.lease_duration);
    let rows =
        super::rows::lease_rows(j, picked, &p.worker_id, &p.worker_address, lease_ms, now).await?;
    let mut records = super::super::row::records(rows)?;
    sort_lease_order(&mut records);
    Ok(records)
}

/// Candidates a pick's first window reads beyond what it may take: rows other
/// jobs lock at the head of the queue at the same time are passed over.
const PICK_SLACK: i64 = 8;

/// Windows of candidates one queue's pick reads before it answers with fewer
/// than it may take. Each window is twice the one before: four pass over up to
/// 15 times the first window in rows other jobs hold.
const PICK_ROUNDS: u32 = 4;

/// Up to `limit` READY tasks of `queue` the worker may take, locked: a window of
/// the first candidates in lease order (a consistent read), locked by primary
/// key in that order up to the limit, in one statement. Candidates another job
/// holds are skipped; when the window ran out, the next one is read (by offset
/// in lease order), up to [`PICK_ROUNDS`] windows.
async fn pick(
    j: &mut Job,
    p: &LeaseParams,
    queue: &str,
    limit: i64,
    now: i64,
    labels: &str,
) -> StoreResult<Vec<Cand>> {
    let mut out: Vec<Cand> = Vec::new();
    let mut offset: i64 = 0;
    for round in 0..PICK_ROUNDS {
        let want = limit - out.len() as i64;
        let window = (limit + PICK_SLACK) << round;
        let q = may_take(
            sqlx::query_as(sql::LEASE_PLAIN_PICK).bind(queue),
            p,
            now,
            labels,
        );
        let q = may_take(q.bind(window).bind(offset), p, now, labels);
        let read: Vec<Cand> = q.bind(want).fetch_all(j.conn()).await?;
        // Candidates come from a consistent read: a row this job locked in an
        // earlier window is still READY to it, and its own lock skips nothing.
        for c in read {
            if !out.iter().any(|o| o.row.seq == c.row.seq) {
                out.push(c);
            }
        }
        if out.len() as i64 >= limit {
            break;
        }
        // Short: the queue had no more candidates, or other jobs hold them.
        // Only a full window leaves more to read past it.
        let (seen,): (i64,) = may_take(
            sqlx::query_as(sql::LEASE_PLAIN_WINDOW).bind(queue),
            p,
            now,
            labels,
        )
        .bind(offset + window)
        .fetch_one(j.conn())
        .await?;
        if seen < offset + window {
            break;
        }
        offset += window;
    }
    Ok(out)
}

/// Binds now, now and the routing predicate's five (`routing_may_take`): the
/// candidate test of the plain lease's statements.
fn may_take<'q, O>(
    q: sqlx::query::QueryAs<'q, sqlx::MySql, O, sqlx::mysql::MySqlArguments>,
    p: &'q LeaseParams,
    now: i64,
    labels: &'q str,
) -> sqlx::query::QueryAs<'q, sqlx::MySql, O, sqlx::mysql::MySqlArguments> {
    q.bind(now)
        .bind(now)
        .bind(&p.worker_id)
        .bind(labels)
        .bind(&p.worker_id)
        .bind(now)
        .bind(&p.worker_id)
}

/// See [`Leasing::task_lease_many`].
async fn lease_many(j: &mut Job, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let Some(first) = ps.first() else {
        return Ok(Vec::new());
    };
    if ps.len() == 1 {
        return Ok(vec![lease(j, first).await?]);
    }
    let workers: Vec<&str> = ps.iter().map(|p| p.worker_id.as_str()).collect();
    lock_workers(j, &workers).await?;
    let now = ps.iter().map(|p| p.now).max().unwrap_or(first.now);
    let wanted: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
    let demand: i64 = wanted.iter().map(|&w| i64::from(w)).sum();
    // Dynamic: one placeholder per queue.
    let text = format!(
        "{}{}{}",
        sql::TASK_LEASE_MANY_AVAILABLE,
        marks(first.queues.len()),
        sql::TASK_LEASE_MANY_AVAILABLE_TAIL
    );
    let mut q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(text));
    for queue in &first.queues {
        q = q.bind(queue);
    }
    let available: i64 = q
        .bind(ms(now))
        .bind(ms(now))
        .bind(demand)
        .fetch_one(j.conn())
        .await?;
    let shares = lease_shares(&wanted, usize::try_from(available).unwrap_or(0));
    let mut out = Vec::with_capacity(ps.len());
    for p in share_requests(ps, &shares, now) {
        out.push(match p {
            Some(p) => lease_locked(j, &p).await?,
            None => Vec::new(),
        });
    }
    let got: Vec<usize> = out.iter().map(Vec::len).collect();
    for (i, p) in top_up_requests(ps, &got, &shares, now) {
        out[i].extend(lease_locked(j, &p).await?);
    }
    Ok(out)
}
