//! Routing on Postgres (migration 0008): the routing columns written
//! with a submit, the reservation a failure leaves, and the worker registry.
//! The lease rules are predicates of the lease statement in `postgres.rs`.

use sqlx::{Postgres, Transaction};

use super::super::row::{TaskRow, ms};
use super::super::*;
use crate::domain::routing::{TaskRouting, reservation};

/// Whether a new task has routing columns to write.
pub(super) fn is_routed(r: &TaskRouting) -> bool {
    !r.target.is_empty() || r.sticky.is_some() || r.fanout_group.is_some()
}

/// The submit statement of `task_insert_many` with the routing columns as well
/// ($17 to $22; $16 is the concurrency keys), for a batch that has routed tasks.
pub(super) const INSERT_ROUTED: &str = concat!(
    "WITH ins AS ( \
       INSERT INTO tasks (id, queue, key, payload, priority, run_at, deadline, state, \
         max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
         max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key, \
         target_worker, target_labels, sticky, sticky_timeout_ms, fanout_group, fanout_distinct, \
         waiting) \
       SELECT id, queue, key, payload, priority, run_at, deadline, 'pending', \
         max_attempts, max_attempts, ib, bm, mb, j, md, $14, $14, ck, tw, tl, st, sto, fg, fd, \
         run_at > $14 \
       FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::float8[], \
         $11::bigint[], $12::float8[], $13::text[], $16::text[], $17::text[], $18::text[], $19::text[], \
         $20::bigint[], $21::text[], $22::bool[]) \
         AS u(id, queue, key, payload, priority, run_at, deadline, max_attempts, \
              ib, bm, mb, j, md, ck, tw, tl, st, sto, fg, fd) \
       ON CONFLICT DO NOTHING RETURNING id, queue, run_at), \
     ev AS (",
    super::events::event_batch!(),
    "SELECT id, queue, 'submitted', \
       CASE WHEN run_at > $14 THEN 'scheduled' ELSE 'ready' END, 0, NULL::text, $14, NULL::text FROM ins",
    super::events::event_batch_end!(),
    "), \
     woken AS (SELECT pg_notify('taskbroker', q || $15) FROM (SELECT DISTINCT queue AS q FROM ins) d) \
     SELECT id FROM ins WHERE (SELECT count(*) FROM woken) >= 0"
);

type InsertQuery<'q> =
    sqlx::query::QueryScalar<'q, Postgres, String, <Postgres as sqlx::Database>::Arguments>;

/// The submit statement: `plain` (the one of `task_insert_many`) or, for a batch
/// with routed tasks, [`INSERT_ROUTED`].
pub(super) fn insert_sql(routed: bool, plain: &'static str) -> sqlx::AssertSqlSafe<&'static str> {
    sqlx::AssertSqlSafe(if routed { INSERT_ROUTED } else { plain })
}

/// Binds the routing arrays of [`INSERT_ROUTED`] when `routed`.
pub(super) trait BindRouting<'q> {
    fn bind_routing(self, routed: bool, tasks: &[NewTask]) -> Self;
}

impl<'q> BindRouting<'q> for InsertQuery<'q> {
    fn bind_routing(self, routed: bool, tasks: &[NewTask]) -> Self {
        if routed {
            bind_routing(self, tasks)
        } else {
            self
        }
    }
}

/// Binds the routing arrays ($17 to $22) of [`INSERT_ROUTED`].
fn bind_routing<'q>(q: InsertQuery<'q>, tasks: &[NewTask]) -> InsertQuery<'q> {
    let workers: Vec<Option<String>> = tasks
        .iter()
        .map(|t| t.routing.target.worker_id.clone())
        .collect();
    let labels: Vec<Option<String>> = tasks
        .iter()
        .map(|t| {
            let l = &t.routing.target.labels;
            (!l.is_empty()).then(|| serde_json::to_string(l).unwrap_or_else(|_| "{}".into()))
        })
        .collect();
    let sticky: Vec<Option<&'static str>> = tasks
        .iter()
        .map(|t| t.routing.sticky.map(|s| s.as_str()))
        .collect();
    let timeouts: Vec<Option<i64>> = tasks
        .iter()
        .map(|t| t.routing.sticky.and_then(|s| s.timeout_ms()))
        .collect();
    let groups: Vec<Option<String>> = tasks
        .iter()
        .map(|t| t.routing.fanout_group.clone())
        .collect();
    let distinct: Vec<bool> = tasks.iter().map(|t| t.routing.fanout_distinct).collect();
    q.bind(workers)
        .bind(labels)
        .bind(sticky)
        .bind(timeouts)
        .bind(groups)
        .bind(distinct)
}

/// After a failure made `row` pending again: reserves the retry for the worker
/// that failed it (sticky policy or `prefer_same_worker`), or clears an older
/// reservation. Writes nothing for a task that has neither.
pub(super) async fn reserve_retry(
    tx: &mut Transaction<'_, Postgres>,
    row: &TaskRow,
    p: &FailParams,
) -> StoreResult<()> {
    let sticky =
        crate::domain::routing::Sticky::parse(row.sticky.as_deref(), row.sticky_timeout_ms);
    let worker = row.leased_by.as_deref().unwrap_or_default();
    let reserved = reservation(sticky, p.prefer_same_worker, worker, p.now);
    if reserved.is_none() && row.reserved_for.is_none() {
        return Ok(());
    }
    let (worker, until) = match reserved {
        Some((w, until)) => (Some(w), until.map(ms)),
        None => (None, None),
    };
    sqlx::query("UPDATE tasks SET reserved_for = $1, reserved_until = $2 WHERE id = $3")
        .bind(worker)
        .bind(until)
        .bind(&row.id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Frees a retry reserved for a worker (an admin changed or requeued the task).
pub(super) async fn clear_reservation(
    tx: &mut Transaction<'_, Postgres>,
    row: &TaskRow,
) -> StoreResult<()> {
    if row.reserved_for.is_none() {
        return Ok(());
    }
    sqlx::query("UPDATE tasks SET reserved_for = NULL, reserved_until = NULL WHERE id = $1")
        .bind(&row.id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}



