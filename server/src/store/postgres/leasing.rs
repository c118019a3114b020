//! Leasing: one statement leases for a batch of requests (`FOR UPDATE SKIP
//! LOCKED`), routing decided per row, unless the plain lease can take the batch.
//! The routing statement runs in a transaction that first takes a lock per
//! worker of the batch ([`lock_workers`]); the plain one needs none.

use super::rows::{by_request, leased_row};
use super::*;

/// Serialises the routing leases of the batch's workers with every other
/// routing or gated lease of any of them, on any replica, until the transaction
/// ends: the rules that look at what a worker holds (one copy of a distinct
/// fan-out group, the per-worker cap) are then read by a statement that starts
/// after the other lease committed, so two leases of one worker at once cannot
/// both see nothing held and both take. Locks in one order (by worker id), so
/// two batches never wait for each other in a cycle. The plain lease takes no
/// such task and no lock.
pub(super) async fn lock_workers(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    workers: &[&str],
) -> StoreResult<()> {
    sqlx::query(sql::LEASE_LOCK_WORKERS)
        .bind(workers)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

// The plain lease: the lease statement as it was before routing, for the
// batches routing cannot touch.
//
// Routing's lease statement (`task_lease_many_routed`) costs Postgres about three times the
// planning and twice the execution of the statement before it (1.1 ms + 1.0 ms
// instead of 0.35 ms + 0.45 ms per call in per-task mode, `pg_stat_statements`):
// plans are custom per execution (`plan_cache_mode`), and its caps, eligibility
// arrays and window functions are planned every time, although most leases name
// no labels, in queues without per-worker caps and without routed tasks. Such a
// batch runs this statement first. It leases nothing and says so when a READY task
// of its queues carries a routing rule (a target, a reservation, a distinct
// fan-out copy; found through the small partial index of migration 0012, which
// holds only such tasks): then the full statement runs instead. Without routed
// tasks both statements choose the same tasks in the same order, every task being
// open to every request of the batch.

impl PostgresStore {
    /// The batch's leases, or why the statement leased nothing: the full
    /// (routing) statement must decide them (some request carries labels, a queue
    /// has a per-worker cap, or a READY task of the queues carries a routing
    /// rule), or a scheduled task of the queues came due and waits for promotion.
    pub(super) async fn lease_plain(&self, ps: &[LeaseParams]) -> StoreResult<Plain> {
        let Some(first) = ps.first() else {
            return Ok(Plain::Leased(Vec::new()));
        };
        if ps.iter().any(|p| !p.routing.labels.is_empty())
            || first.routing.caps(&first.queues).iter().any(|&c| c > 0)
        {
            return Ok(Plain::Routed);
        }
        let now = ms(ps.iter().map(|p| p.now).max().unwrap_or(first.now));
        let batch = Batch::new(ps);
        // The statement of `task_lease_many` before routing (see the comments
        // there), plus `routed`: whether a READY task of the queues carries a
        // routing rule, in which case `cand` is empty and the one row returned
        // says so. The final LEFT JOIN returns that row even when nothing is leased.
        let rows: Vec<PlainRow> = batch
            .bind(sqlx::query(sql::TASK_LEASE_MANY_PLAIN), &first.queues, now)
            .try_map(|row: sqlx::postgres::PgRow| {
                use sqlx::Row;
                let routed: bool = row.try_get("routed_pending")?;
                let due: bool = row.try_get("due_waiting")?;
                // The one row of `routed` when nothing was leased.
                if row.try_get::<Option<String>, _>("id")?.is_none() {
                    return Ok((None, routed, due));
                }
                let task = leased_row(row)?;
                Ok((Some(task), routed, due))
            })
            .fetch_all(self.hot())
            .await?;
        if rows.iter().any(|(_, routed, _)| *routed) {
            return Ok(Plain::Routed);
        }
        if rows.iter().any(|(_, _, due)| *due) {
            return Ok(Plain::Due(now));
        }
        let leased = rows.into_iter().filter_map(|(t, _, _)| t);
        Ok(Plain::Leased(by_request(ps.len(), leased, true)?))
    }

    /// Clears `waiting` on the pending tasks of `queues` due at `now` (through
    /// `tasks_waiting`, which holds only scheduled tasks), so a lease finds them
    /// in the lease index, in their place by priority. The rows are locked in
    /// one order (id), so two promotions over the same queues never deadlock;
    /// no lease locks a waiting row.
    pub(super) async fn promote(&self, queues: &[String], now: i64) -> StoreResult<()> {
        sqlx::query(sql::LEASE_PROMOTE)
            .bind(queues)
            .bind(now)
            .execute(self.hot())
            .await?;
        Ok(())
    }
}

/// A row of the plain lease statement: the task leased and its request (none
/// when nothing was leased), whether a routed task is READY, whether a waiting
/// task is due.
type PlainRow = (Option<(TaskRow, i64)>, bool, bool);

/// What the plain lease statement did.
pub(super) enum Plain {
    /// The batch's leases.
    Leased(Vec<Vec<TaskRecord>>),
    /// Nothing: the full (routing) statement must decide.
    Routed,
    /// Nothing: a waiting task of the queues is due at this time (ms); promote
    /// it and lease again.
    Due(i64),
}

/// What both lease statements bind of a batch of requests, per request in
/// order: $3 the total demand, $4 the workers, $5 their addresses, $6 the lease
/// durations (ms), $7 the request (1-based) of each slot for the n-th task in
/// lease order (see [`lease_slots`]), $8 the reply budget.
pub(super) struct Batch<'a> {
    pub demand: i64,
    pub workers: Vec<&'a str>,
    pub addresses: Vec<&'a str>,
    pub durations: Vec<i64>,
    pub owners: Vec<i32>,
    pub max_reply_bytes: i64,
}

impl<'a> Batch<'a> {
    pub fn new(ps: &'a [LeaseParams]) -> Self {
        let wanted: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
        Batch {
            demand: ps.iter().map(|p| i64::from(p.max_tasks)).sum(),
            workers: ps.iter().map(|p| p.worker_id.as_str()).collect(),
            addresses: ps.iter().map(|p| p.worker_address.as_str()).collect(),
            durations: ps.iter().map(|p| duration_ms(p.lease_duration)).collect(),
            owners: lease_slots(&wanted)
                .into_iter()
                .map(|i| i32::try_from(i + 1).unwrap_or(i32::MAX))
                .collect(),
            max_reply_bytes: ps.first().map_or(i64::MAX, |p| {
                i64::try_from(p.max_reply_bytes).unwrap_or(i64::MAX)
            }),
        }
    }

    /// `q` with $1 the queues, $2 now (ms), then the batch's binds ($3 to $8)
    /// and $9 a task's fixed reply bytes: what both lease statements bind first.
    pub fn bind<'q>(
        &'q self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        queues: &'q [String],
        now: i64,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        q.bind(queues)
            .bind(now)
            .bind(self.demand)
            .bind(&self.workers)
            .bind(&self.addresses)
            .bind(&self.durations)
            .bind(&self.owners)
            .bind(self.max_reply_bytes)
            .bind(crate::domain::reply::TASK_FIXED_BYTES)
    }
}

#[async_trait]
impl Leasing for PostgresStore {
    async fn task_lease_available(&self, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
        let mut leased = self.task_lease_many(std::slice::from_ref(p)).await?;
        Ok(leased.pop().unwrap_or_default())
    }

    async fn task_lease_many(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        let Some(first) = ps.first() else {
            return Ok(Vec::new());
        };
        let now = ms(ps.iter().map(|p| p.now).max().unwrap_or(first.now));
        // A batch without labels or caps, in queues without READY routed
        // tasks, takes the statement from before routing (`lease_plain`). A
        // scheduled task that came due is promoted first (a handful of times at
        // most: each promotion takes every task due by then).
        for _ in 0..4 {
            match self.lease_plain(ps).await? {
                Plain::Leased(out) => return Ok(out),
                Plain::Due(at) => self.promote(&first.queues, at).await?,
                Plain::Routed => break,
            }
        }
        // The routing statement reads the lease index only: the due tasks join it.
        self.promote(&first.queues, now).await?;
        let batch = Batch::new(ps);
        let wanted: Vec<u32> = ps.iter().map(|p| p.max_tasks).collect();
        // Routing: each request's labels, each queue's per-worker cap
        // (0: none), each request's max_tasks.
        let labels: Vec<String> = ps.iter().map(|p| p.routing.labels_json()).collect();
        let common_labels: Option<&String> = labels
            .first()
            .filter(|l| labels.iter().all(|other| other == *l));
        let caps: Vec<i32> = first.routing.caps(&first.queues);
        let wants: Vec<i32> = wanted
            .iter()
            .map(|&w| i32::try_from(w).unwrap_or(i32::MAX))
            .collect();
        // One statement for every request: the tasks are picked as for one lease of
        // the total (one index-ordered scan per queue, each reading only its first
        // rows, merged; rows another broker holds are skipped, never waited for), and
        // the n-th goes to the request that owns slot n. Per-request values are
        // looked up in arrays, not joined, so the plan is the plan of a single lease
        // (a join's row estimate would invite a scan of the table). The deadline test
        // is a COALESCE, not an OR: statistics rarely see a queue's transient pending
        // rows, and on that estimate the planner turned the OR into two bitmap scans
        // and sorted every pending row of the queue per lease (45 ms instead of
        // 0.4 ms with 20,000 pending); as a filter it keeps the ordered index scan.
        //
        // A request takes its tasks while their bytes stay within the reply budget
        // (and always its first). Rows that were locked here but not taken
        // (over the budget, or beyond the demand in a lease over several queues) are
        // announced with NOTIFY, which is sent at commit when their locks go: a
        // lease on another replica that skipped them may have found nothing and
        // gone to sleep.
        //
        // Routing adds: `room`, the leases each request's worker may
        // still take of each capped queue; in `cand`, a task that no request of
        // this batch may take is passed over (not locked, never blocking the
        // tasks behind it), and `elig` lists the requests that may take it (NULL:
        // all, the cheap case of an untargeted task in an uncapped queue); in
        // `ranked`, such a task goes to one of those requests; `routed` keeps
        // each request within its max_tasks, its cap and one copy per distinct
        // fan-out group.
        let mut tx = self.pool.begin().await?;
        lock_workers(&mut tx, &batch.workers).await?;
        let rows: Vec<(TaskRow, i64)> = batch
            .bind(sqlx::query(sql::TASK_LEASE_MANY_ROUTED), &first.queues, now)
            .bind(&caps)
            .bind(&wants)
            .bind(&labels)
            .bind(common_labels)
            .try_map(leased_row)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        by_request(ps.len(), rows, true)
    }

    async fn task_next_run_at(
        &self,
        queues: &[String],
        now: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let next: Option<i64> = sqlx::query_scalar(sql::TASK_NEXT_RUN_AT)
            .bind(queues)
            .bind(ms(now))
            .fetch_one(self.hot())
            .await?;
        Ok(next.map(from_ms))
    }

    async fn lease_extend(
        &self,
        leases: &[LeaseRef],
        extend_by: Option<Duration>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<LeaseState>> {
        let ids: Vec<&str> = leases.iter().map(|l| l.task_id.as_str()).collect();
        let tokens: Vec<&str> = leases.iter().map(|l| l.lease_token.as_str()).collect();
        let rows: Vec<(String, String, i64, bool)> = sqlx::query_as(sql::LEASE_EXTEND_WRITE)
            .bind(ms(now))
            .bind(extend_by.map(duration_ms))
            .bind(&ids)
            .bind(&tokens)
            .fetch_all(&self.pool)
            .await?;
        Ok(leases
            .iter()
            .map(|l| {
                rows.iter()
                    .find(|r| r.0 == l.task_id && r.1 == l.lease_token)
                    .map_or(LeaseState::Lost, |r| LeaseState::Live {
                        lease_expires_at: from_ms(r.2),
                        cancel_requested: r.3,
                    })
            })
            .collect())
    }

    async fn task_lease_gated(&self, ps: &[LeaseParams]) -> StoreResult<Vec<Vec<TaskRecord>>> {
        self.lease_gated(ps).await
    }

    async fn lease_release(&self, leases: &[LeaseRef], now: DateTime<Utc>) -> StoreResult<u64> {
        if leases.is_empty() {
            return Ok(0);
        }
        let ids: Vec<&str> = leases.iter().map(|l| l.task_id.as_str()).collect();
        let tokens: Vec<&str> = leases.iter().map(|l| l.lease_token.as_str()).collect();
        // The attempt is taken back (it never ran, and no attempt row was written
        // for it: that happens when an attempt ends); the fencing token is not.
        let released: i64 = sqlx::query_scalar(sql::LEASE_RELEASE)
            .bind(ms(now))
            .bind(&ids)
            .bind(&tokens)
            .bind(CHANNEL)
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(released).unwrap_or_default())
    }
}
