//! The plain lease on SQLite (less CPU per task): the candidates are read
//! with one index-ordered SELECT per queue, merged and cut to the request (count,
//! reply budget, one copy per distinct fan-out group) here, then each task taken
//! is leased with a single-row UPDATE by rowid and read back by rowid.
//!
//! It used to be one `UPDATE ... WHERE seq IN (window functions over a UNION ALL)
//! RETURNING ...`: ephemeral tables and a sorter per call, and RETURNING runs in a
//! statement journal whose close inside the writer's job savepoint walks the
//! job's sub-journal (see `admission_lease::grant`). That statement was 40% of the
//! writer thread's time in per-task runs, most of it the machinery around one row.
//! The writer is the only writer, so nothing changes the rows between the SELECT
//! and the UPDATEs; the result is the same rows in the same order.

use std::sync::OnceLock;

use rusqlite::{Connection, params};

use super::super::flow::of_row;
use super::super::row::{TaskRow, duration_ms, ms, sort_lease_order};
use super::super::*;
use super::columns::{task_columns, task_row};
use super::events;
use crate::domain::event::EventKind;

/// Leases one READY task by rowid (no RETURNING: see the module docs), for the plain
/// lease here and the gated one (admission.rs): ?1 worker, ?2 lease duration ms, ?3
/// expiry before the deadline cap, ?4 now, ?5 worker address, ?6 seq.
pub(super) const LEASE_BY_SEQ: &str = "UPDATE tasks SET state = 'leased', attempt = attempt + 1, \
     fencing_token = fencing_token + 1, lease_token = lower(hex(randomblob(16))), \
     leased_by = ?1, lease_duration_ms = ?2, \
     lease_expires_at = MIN(?3, COALESCE(deadline, 9223372036854775807)), updated_at = ?4, \
     leased_at = ?4, leased_address = ?5 \
     WHERE seq = ?6 AND state = 'pending'";

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

/// One queue's first candidates in lease order: ?1 worker, ?2 queue, ?3 the
/// worker's labels (JSON), ?4 now, ?5 how many at most. Routing:
/// passes over the tasks this worker may not take (`MAY_TAKE`).
pub(super) fn candidates_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "SELECT seq, priority, deadline, run_at, \
             {} AS size, \
             CASE WHEN fanout_distinct THEN fanout_group END AS fgroup \
             FROM tasks WHERE state = 'pending' AND waiting = 0 AND queue = ?2 AND run_at <= ?4 \
             AND (deadline IS NULL OR deadline > ?4) AND {} \
             ORDER BY priority DESC, deadline IS NULL, deadline, run_at, seq LIMIT ?5",
            crate::store::reply::size_sql(crate::store::reply::Dialect::Sqlite),
            super::routing::MAY_TAKE.replace("?L", "?3")
        )
    })
}

/// Leases up to `p.max_tasks` READY tasks of `p.queues` to `p.worker_id`.
pub(super) fn lease(c: &Connection, p: &LeaseParams) -> StoreResult<Vec<TaskRecord>> {
    let now = ms(p.now);
    let labels = p.routing.labels_json();
    let room = super::routing::room(c, p)?;
    let mut found: Vec<Candidate> = Vec::new();
    {
        let mut select = c.prepare_cached(candidates_sql())?;
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
    // The first task always; then while the reply's bytes stay within the
    // budget (the running total counts every task up to here in lease order).
    // Of a distinct fan-out group, only its first copy.
    let budget = i64::try_from(p.max_reply_bytes).unwrap_or(i64::MAX);
    let mut total: i64 = 0;
    let mut groups: Vec<&str> = Vec::new();
    let mut taken: Vec<i64> = Vec::with_capacity(found.len());
    for cand in &found {
        total = total.saturating_add(cand.size);
        let first_copy = match cand.fgroup.as_deref() {
            None => true,
            Some(g) if groups.contains(&g) => false,
            Some(g) => {
                groups.push(g);
                true
            }
        };
        if (total <= budget || total == cand.size) && first_copy {
            taken.push(cand.seq);
        }
    }
    let lease_ms = duration_ms(p.lease_duration);
    let expires = now.saturating_add(lease_ms);
    let mut update = c.prepare_cached(LEASE_BY_SEQ)?;
    let mut read = c.prepare_cached(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE seq = ?1"
    ))?;
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
        events::push(of_row(r, EventKind::Leased, now));
    }
    // The attempt's row is written when it ends (`finish_attempt`).
    let mut records = rows
        .into_iter()
        .map(TaskRow::into_record)
        .collect::<StoreResult<Vec<_>>>()?;
    sort_lease_order(&mut records);
    Ok(records)
}
