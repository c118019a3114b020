//! Leasing: one statement leases for a batch of requests (`FOR UPDATE SKIP
//! LOCKED`), routing decided per row, unless the plain lease can take the batch.
//! The routing statement runs in a transaction that first takes a lock per
//! worker of the batch ([`lock_workers`]); the plain one needs none.

use super::*;

/// Routing: whether the worker of request `i` (1-based) may take the
/// `tasks` row at hand: its target (id, every label), a retry reserved for
/// another worker, a fan-out copy of a group this worker holds or completed, a
/// capped queue in which it has no room. Each test reads only columns of the row
/// unless the row carries that rule.
macro_rules! routing_may_take {
    () => {
        "((target_worker IS NULL OR target_worker = ($4::text[])[i]) \
          AND (target_labels IS NULL OR target_labels::jsonb <@ ($12::text[])[i]::jsonb) \
          AND (reserved_for IS NULL OR reserved_for = ($4::text[])[i] OR reserved_until <= $2) \
          AND (NOT fanout_distinct OR NOT EXISTS (SELECT 1 FROM tasks c \
            WHERE c.fanout_group = tasks.fanout_group AND c.leased_by = ($4::text[])[i] \
              AND c.state IN ('leased', 'succeeded'))) \
          AND (q.cap = 0 OR EXISTS (SELECT 1 FROM room r \
            WHERE r.name = q.name AND r.req = i AND r.room > 0)))"
    };
}

/// Routing: whether every request of the batch may take the row at
/// hand, so it is shared out by slots like any task: no target other than labels
/// that all requests carry ($13, their common labels, NULL when they differ), no
/// reservation, no distinct fan-out group, an uncapped queue.
macro_rules! routing_open {
    () => {
        "(target_worker IS NULL \
          AND (target_labels IS NULL OR target_labels::jsonb <@ $13::jsonb) \
          AND reserved_for IS NULL AND NOT fanout_distinct AND q.cap = 0)"
    };
}

impl PostgresStore {
    pub(super) async fn task_lease_available(
        &self,
        p: &LeaseParams,
    ) -> StoreResult<Vec<TaskRecord>> {
        let mut leased = self.task_lease_many(std::slice::from_ref(p)).await?;
        Ok(leased.pop().unwrap_or_default())
    }

    pub(super) async fn task_lease_many(
        &self,
        ps: &[LeaseParams],
    ) -> StoreResult<Vec<Vec<TaskRecord>>> {
        let Some(first) = ps.first() else {
            return Ok(Vec::new());
        };
        let now = ms(ps.iter().map(|p| p.now).max().unwrap_or(first.now));
        // A batch without labels or caps, in queues without READY routed
        // tasks, takes the statement from before routing (lease_plain.rs). A
        // scheduled task that came due is promoted first (a handful of times at
        // most: each promotion takes every task due by then).
        for _ in 0..4 {
            match self.lease_plain(ps).await? {
                super::lease_plain::Plain::Leased(out) => return Ok(out),
                super::lease_plain::Plain::Due(at) => self.promote(&first.queues, at).await?,
                super::lease_plain::Plain::Routed => break,
            }
        }
        // The routing statement reads the lease index only: the due tasks join it.
        self.promote(&first.queues, now).await?;
        let batch = super::lease_plain::Batch::new(ps);
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
        let rows: Vec<(TaskRow, i64)> = sqlx::query(concat!(
            "WITH room AS ( \
               SELECT q.name, i AS req, q.cap - ( \
                 SELECT count(*) FROM tasks h WHERE h.state = 'leased' \
                   AND h.leased_by = ($4::text[])[i] AND h.queue = q.name) AS room \
               FROM UNNEST($1::text[], $10::int[]) AS q(name, cap), \
                 generate_subscripts($4::text[], 1) AS i \
               WHERE q.cap > 0), \
             cand AS ( \
               SELECT t.* FROM UNNEST($1::text[], $10::int[]) AS q(name, cap) \
               CROSS JOIN LATERAL ( \
                 SELECT id, seq, queue, priority, deadline, run_at, \
                   ", crate::store::reply::size_of_fields!(), " + $9::bigint AS size, \
                   CASE WHEN ", routing_open!(), " THEN NULL ELSE ARRAY( \
                     SELECT i FROM generate_subscripts($4::text[], 1) AS i WHERE ", routing_may_take!(), " \
                     ORDER BY i) END AS elig, \
                   fanout_group, fanout_distinct \
                 FROM tasks \
                 WHERE state = 'pending' AND NOT waiting AND queue = q.name \
                   AND run_at <= $2 AND COALESCE(deadline, 9223372036854775807) > $2 \
                   AND (q.cap = 0 OR EXISTS (SELECT 1 FROM room r WHERE r.name = q.name AND r.room > 0)) \
                   AND (", routing_open!(), " \
                     OR EXISTS (SELECT 1 FROM generate_subscripts($4::text[], 1) AS i \
                       WHERE ", routing_may_take!(), ")) \
                 ORDER BY priority DESC, deadline ASC NULLS LAST, run_at, seq \
                 LIMIT $3 FOR UPDATE SKIP LOCKED) t), \
             ranked AS ( \
               SELECT t.id, t.size, t.rn, t.queue, t.fanout_group, t.fanout_distinct, \
                 CASE WHEN t.elig IS NULL THEN ($7::int[])[t.rn] \
                   ELSE t.elig[1 + (t.rn - 1) % NULLIF(cardinality(t.elig), 0)] END AS req FROM ( \
                 SELECT c.id, c.seq, c.size, c.elig, c.queue, c.fanout_group, c.fanout_distinct, \
                   row_number() OVER ( \
                   ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq) AS rn \
                 FROM cand c \
                 ORDER BY c.priority DESC, c.deadline ASC NULLS LAST, c.run_at, c.seq \
                 LIMIT $3) t), \
             routed AS ( \
               SELECT id, size, rn, req FROM ( \
                 SELECT r.*, \
                   row_number() OVER (PARTITION BY r.req ORDER BY r.rn) AS nth, \
                   row_number() OVER (PARTITION BY r.req, r.fanout_group ORDER BY r.rn) AS nth_copy, \
                   row_number() OVER (PARTITION BY r.req, r.queue ORDER BY r.rn) AS nth_queue \
                 FROM ranked r WHERE r.req IS NOT NULL) r \
               WHERE nth <= ($11::int[])[req] \
                 AND (NOT fanout_distinct OR nth_copy = 1) \
                 AND nth_queue <= COALESCE((SELECT m.room FROM room m \
                   WHERE m.name = r.queue AND m.req = r.req), 2147483647)), \
", super::lease_plain::lease_pick!("routed"), super::lease_plain::lease_write!(), "SELECT leased.*, (SELECT count(*) FROM spare) AS spare FROM leased",
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
        .bind(&caps)
        .bind(&wants)
        .bind(&labels)
        .bind(common_labels)
        .try_map(|row: sqlx::postgres::PgRow| {
            use sqlx::{FromRow, Row};
            Ok((TaskRow::from_row(&row)?, row.try_get::<i64, _>("request")?))
        })
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut out: Vec<Vec<TaskRecord>> = ps.iter().map(|_| Vec::new()).collect();
        for (row, request) in rows {
            let slot = usize::try_from(request - 1)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| StoreError::Corrupt(format!("lease for request {request}")))?;
            slot.push(row.into_record()?);
        }
        for records in &mut out {
            sort_lease_order(records);
        }
        Ok(out)
    }
}

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
    sqlx::query(
        "SELECT count(pg_advisory_xact_lock(hashtextextended('taskbroker.lease.' || w, 0))) \
         FROM (SELECT DISTINCT unnest($1::text[]) AS w ORDER BY w) x",
    )
    .bind(workers)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
