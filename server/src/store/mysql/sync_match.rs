//! Sync match on MySQL: a task matched to a waiting request is inserted
//! already leased to it, if no pending task of its queue due now has a
//! priority as high or higher (read in the same transaction). This is the work
//! of `Tasks::task_insert_matched`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::super::row::{duration_ms, ms};
use super::super::sync_match::{
    lease_expiry, leased_row, match_of, matched_events, matched_queues, matches_in_lease_order,
    metadata_json,
};
use super::super::*;
use super::{Job, sql};

pub(super) async fn insert_matched(
    j: &mut Job,
    tasks: &[NewTask],
    matches: &[Option<MatchTo>],
    now: DateTime<Utc>,
) -> StoreResult<Vec<MatchedInsert>> {
    let stands = matches_in_lease_order(tasks, matches, now);
    let now_ms = ms(now);
    let mut top: HashMap<&str, Option<i64>> = HashMap::new();
    for queue in matched_queues(tasks, &stands) {
        let p: Option<i64> = sqlx::query_scalar(sql::TASK_INSERT_MATCHED_TOP)
            .bind(queue)
            .bind(now_ms)
            .bind(now_ms)
            .fetch_optional(j.conn())
            .await?;
        top.insert(queue, p);
    }
    let mut out = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        let m = match_of(matches, &stands, &top, i, t);
        let Some(m) = m else {
            let inserted = super::rows::insert_many(j, std::slice::from_ref(t), now).await?;
            out.extend(inserted.into_iter().map(|inserted| MatchedInsert {
                inserted,
                leased: None,
            }));
            continue;
        };
        let expires = lease_expiry(t, m, now);
        let token = uuid::Uuid::new_v4().simple().to_string();
        let n = sqlx::query(sql::TASK_INSERT_MATCHED_LEASED)
            .bind(&t.id)
            .bind(&t.queue)
            .bind(&t.key)
            .bind(&t.payload)
            .bind(i64::from(t.priority))
            .bind(ms(t.run_at))
            .bind(t.deadline.map(ms))
            .bind(i64::from(t.retry.max_attempts))
            .bind(i64::from(t.retry.max_attempts))
            .bind(duration_ms(t.retry.initial_backoff))
            .bind(t.retry.backoff_multiplier)
            .bind(duration_ms(t.retry.max_backoff))
            .bind(t.retry.jitter)
            .bind(metadata_json(t))
            .bind(now_ms)
            .bind(now_ms)
            .bind(&t.concurrency_key)
            .bind(&token)
            .bind(&m.worker_id)
            .bind(duration_ms(m.lease_duration))
            .bind(expires)
            .bind(now_ms)
            .bind(&m.worker_address)
            .bind(&t.checkpoint)
            .execute(j.conn())
            .await?;
        if n.rows_affected() != 1 {
            // A duplicate of an existing (queue, key), or of one earlier in this batch.
            let task_id: String = sqlx::query_scalar(sql::TASK_INSERT_MATCHED_EXISTING)
                .bind(&t.queue)
                .bind(&t.key)
                .fetch_optional(j.conn())
                .await?
                .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
            out.push(MatchedInsert::duplicate(task_id));
            continue;
        }
        let seq = i64::try_from(n.last_insert_id()).unwrap_or(i64::MAX);
        for ev in matched_events(t, m, now_ms) {
            j.push(ev);
        }
        let leased = leased_row(t, m, seq, token, expires, now)?;
        out.push(MatchedInsert::made(t.id.clone(), Some(leased)));
    }
    Ok(out)
}
