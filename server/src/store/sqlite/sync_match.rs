//! Sync match on SQLite, run as one writer job: the check (no pending
//! task of the queue due now would lease first) and the inserts share the
//! writer's transaction, and the one writer serialises every other write, so
//! nothing can come between them.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rusqlite::types::{ToSql, ToSqlOutput};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::super::row::{duration_ms, ms};
use super::super::sync_match::{
    lease_expiry, leased_row, match_of, matched_events, matched_queues, matches_in_lease_order,
};
use super::super::*;
use super::{sql, tx};

/// Tasks::task_insert_matched's work, in the running write job.
pub(super) fn insert_matched(
    c: &Connection,
    tasks: &[NewTask],
    matches: &[Option<MatchTo>],
    now: DateTime<Utc>,
) -> StoreResult<Vec<MatchedInsert>> {
    let stands = matches_in_lease_order(tasks, matches, now);
    let now_ms = ms(now);
    // The highest priority among the pending tasks due now, per queue with a
    // match, read before this batch inserts anything.
    let mut top: HashMap<&str, Option<i64>> = HashMap::new();
    for queue in matched_queues(tasks, &stands) {
        super::rows::promote(c, &[queue.to_owned()], now_ms)?;
        let p: Option<i64> = c
            .prepare_cached(sql::TASK_INSERT_MATCHED_TOP)?
            .query_row(params![queue, now_ms], |r| r.get(0))
            .optional()?;
        top.insert(queue, p);
    }
    let mut out = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        let m = match_of(matches, &stands, &top, i, t);
        let Some(m) = m else {
            let inserted = super::rows::insert_many(c, std::slice::from_ref(t), now)?;
            out.extend(inserted.into_iter().map(|inserted| MatchedInsert {
                inserted,
                leased: None,
            }));
            continue;
        };
        let expires = lease_expiry(t, m, now);
        // No RETURNING (it would run in a statement journal, see
        // `settling`): the rowid of the insert, then its token by rowid.
        let n = c
            .prepare_cached(sql::TASK_INSERT_MATCHED_LEASED)?
            .execute(params_from_iter(
                super::rows::insert_params(t, now_ms)?.into_iter().chain([
                    m.worker_id.to_sql()?,
                    ToSqlOutput::from(duration_ms(m.lease_duration)),
                    ToSqlOutput::from(expires),
                    m.worker_address.to_sql()?,
                ]),
            ))?;
        let row: Option<(i64, String)> = if n == 1 {
            let seq = c.last_insert_rowid();
            let token: String = c
                .prepare_cached(sql::TASK_INSERT_MATCHED_TOKEN)?
                .query_row([seq], |r| r.get(0))?;
            Some((seq, token))
        } else {
            None
        };
        let Some((seq, token)) = row else {
            // A duplicate of an existing (queue, key), or of one earlier in this batch.
            let task_id: String = c
                .prepare_cached(sql::TASK_INSERT_MANY_EXISTING)?
                .query_row(params![t.queue, t.key], |r| r.get(0))
                .optional()?
                .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
            out.push(MatchedInsert::duplicate(task_id));
            continue;
        };
        // Flow: SUBMITTED and LEASED, as an insert and a lease would record.
        for ev in matched_events(t, m, now_ms) {
            tx::push(ev);
        }
        let leased = leased_row(t, m, seq, token, expires, now)?;
        out.push(MatchedInsert::made(t.id.clone(), Some(leased)));
    }
    Ok(out)
}
