//! The plain lease: the lease statement as it was before routing, for
//! the batches routing cannot touch.
//!
//! Routing's lease statement (in `lease.rs`) costs Postgres about three times the
//! planning and twice the execution of the statement before it (1.1 ms + 1.0 ms
//! instead of 0.35 ms + 0.45 ms per call in per-task mode, `pg_stat_statements`):
//! plans are custom per execution (`plan_cache_mode`), and its caps, eligibility
//! arrays and window functions are planned every time, although most leases name
//! no labels, in queues without per-worker caps and without routed tasks. Such a
//! batch runs this statement first. It leases nothing and says so when a READY task
//! of its queues carries a routing rule (a target, a reservation, a distinct
//! fan-out copy; found through the small partial index of migration 0012, which
//! holds only such tasks): then the full statement runs instead. Without routed
//! tasks both statements choose the same tasks in the same order, every task being
//! open to every request of the batch.

use super::*;

/// The end of both lease statements, before the writes: `picked`, the rows of
/// `$from` (id, size, rn, req) each request takes while their bytes stay within
/// the reply budget ($8; the first always), and `spare`, a NOTIFY for the queues
/// of rows locked in `cand` but not taken.
macro_rules! lease_pick {
    ($from:literal) => {
        concat!(
            "picked AS ( \
               SELECT id, req FROM ( \
                 SELECT id, req, size, sum(size) OVER (PARTITION BY req ORDER BY rn) AS total \
                 FROM ",
            $from,
            ") r \
               WHERE total <= $8 OR total = size), \
             spare AS ( \
               SELECT pg_notify('taskbroker', s.queue) FROM ( \
                 SELECT DISTINCT queue FROM cand \
                 WHERE id NOT IN (SELECT id FROM picked)) s), "
        )
    };
}
pub(super) use lease_pick;

/// What every lease statement writes, in one place: `leased`, the UPDATE of the
/// `picked` rows (id, req) to leased for request `req` (now $2, workers $4,
/// addresses $5, durations $6), returning the rows with their request, and `ev`,
/// their LEASED events. (The attempt's row is written when it ends.) A row that is
/// no longer pending is skipped: the gated lease picks rows it has not locked. The
/// test is a CASE so that the planner never takes it as a reason to find the rows
/// through an index on `state` (a generic plan doing so reads every pending row
/// for each lease).
macro_rules! lease_write {
    () => {
        concat!(
            "leased AS ( \
               UPDATE tasks t SET state = 'leased', attempt = t.attempt + 1, \
                 fencing_token = t.fencing_token + 1, lease_token = gen_random_uuid()::text, \
                 leased_by = ($4::text[])[p.req], lease_duration_ms = ($6::bigint[])[p.req], \
                 lease_expires_at = LEAST($2 + ($6::bigint[])[p.req], \
                   COALESCE(t.deadline, $2 + ($6::bigint[])[p.req])), \
                 updated_at = $2, leased_at = $2, leased_address = ($5::text[])[p.req] \
               FROM picked p WHERE t.id = p.id \
                 AND CASE WHEN t.state = 'pending' THEN TRUE ELSE FALSE END \
               RETURNING t.*, p.req::bigint AS request)",
            super::events::leased_event!("$2"),
            " "
        )
    };
}
pub(super) use lease_write;

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
        let rows: Vec<PlainRow> = sqlx::query(concat!(
            "WITH routed AS ( \
               SELECT EXISTS (SELECT 1 FROM tasks WHERE state = 'pending' \
                 AND queue = ANY($1::text[]) AND run_at <= $2 \
                 AND (target_worker IS NOT NULL OR target_labels IS NOT NULL \
                   OR reserved_for IS NOT NULL OR fanout_distinct)) AS pending), \
             due AS ( \
               SELECT EXISTS (SELECT 1 FROM tasks WHERE state = 'pending' AND waiting \
                 AND queue = ANY($1::text[]) AND run_at <= $2) AS waiting), \
             cand AS ( \
               SELECT t.* FROM UNNEST($1::text[]) AS q(name) \
               CROSS JOIN LATERAL ( \
                 SELECT id, seq, queue, priority, deadline, run_at, \
                   ",
            crate::store::reply::size_of_fields!(),
            " + $9::bigint AS size \
                 FROM tasks \
                 WHERE state = 'pending' AND NOT waiting AND queue = q.name \
                   AND run_at <= $2 AND COALESCE(deadline, 9223372036854775807) > $2 \
                   AND NOT (SELECT pending FROM routed) AND NOT (SELECT waiting FROM due) \
                 ORDER BY priority DESC, deadline ASC NULLS LAST, run_at, seq \
                 LIMIT $3 FOR UPDATE SKIP LOCKED) t), \
             ranked AS ( \
               SELECT t.id, t.size, t.rn, ($7::int[])[t.rn] AS req FROM ( \
                 SELECT c.id, c.size, row_number() OVER ( \
                   ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq) AS rn \
                 FROM cand c \
                 ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq \
                 LIMIT $3) t), \
",
            lease_pick!("ranked"),
            lease_write!(),
            "SELECT l.*, r.pending AS routed_pending, (SELECT waiting FROM due) AS due_waiting, \
               (SELECT count(*) FROM spare) AS spare \
             FROM routed r LEFT JOIN leased l ON TRUE",
        ))
        .bind(&first.queues)
        .bind(now)
        .bind(batch.demand)
        .bind(&batch.workers)
        .bind(&batch.addresses)
        .bind(&batch.durations)
        .bind(&batch.owners)
        .bind(batch.max_reply_bytes)
        .bind(crate::domain::reply::TASK_FIXED_BYTES)
        .try_map(|row: sqlx::postgres::PgRow| {
            use sqlx::{FromRow, Row};
            let routed: bool = row.try_get("routed_pending")?;
            let due: bool = row.try_get("due_waiting")?;
            // The one row of `routed` when nothing was leased.
            if row.try_get::<Option<String>, _>("id")?.is_none() {
                return Ok((None, routed, due));
            }
            let task = (TaskRow::from_row(&row)?, row.try_get::<i64, _>("request")?);
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
        let mut out: Vec<Vec<TaskRecord>> = ps.iter().map(|_| Vec::new()).collect();
        for (row, request) in rows.into_iter().filter_map(|(t, _, _)| t) {
            let slot = usize::try_from(request - 1)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| StoreError::Corrupt(format!("lease for request {request}")))?;
            slot.push(row.into_record()?);
        }
        for records in &mut out {
            sort_lease_order(records);
        }
        Ok(Plain::Leased(out))
    }

    /// Clears `waiting` on the pending tasks of `queues` due at `now` (through
    /// `tasks_waiting`, which holds only scheduled tasks), so a lease finds them
    /// in the lease index, in their place by priority. The rows are locked in
    /// one order (id), so two promotions over the same queues never deadlock;
    /// no lease locks a waiting row.
    pub(super) async fn promote(&self, queues: &[String], now: i64) -> StoreResult<()> {
        sqlx::query(
            "UPDATE tasks SET waiting = FALSE WHERE id IN (SELECT id FROM tasks \
             WHERE state = 'pending' AND waiting AND queue = ANY($1) AND run_at <= $2 \
             ORDER BY id FOR UPDATE)",
        )
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
}
