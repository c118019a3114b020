//! Sync match on MySQL: a task matched to a waiting request is inserted
//! already leased to it, if no pending task of its queue due now has a
//! priority as high or higher (read in the same transaction).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::super::flow::{Ev, visible};
use super::super::row::{duration_ms, ms};
use super::super::sync_match::{lease_expiry, leased_row, matches_in_lease_order, metadata_json};
use super::super::*;
use super::Job;
use crate::domain::event::EventKind;

pub(super) async fn task_insert_matched(
    j: &mut Job,
    tasks: &[NewTask],
    matches: &[Option<MatchTo>],
    now: DateTime<Utc>,
) -> StoreResult<Vec<MatchedInsert>> {
    let stands = matches_in_lease_order(tasks, matches, now);
    let now_ms = ms(now);
    let mut top: HashMap<&str, Option<i64>> = HashMap::new();
    for (t, _) in tasks.iter().zip(&stands).filter(|(_, s)| **s) {
        if top.contains_key(t.queue.as_str()) {
            continue;
        }
        let p: Option<i64> = sqlx::query_scalar(
            "SELECT priority FROM tasks WHERE state = 'pending' AND queue = ? \
             AND run_at <= ? AND lease_deadline > ? \
             ORDER BY priority DESC LIMIT 1",
        )
        .bind(&t.queue)
        .bind(now_ms)
        .bind(now_ms)
        .fetch_optional(j.conn())
        .await?;
        top.insert(t.queue.as_str(), p);
    }
    let mut out = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        let m = matches
            .get(i)
            .and_then(Option::as_ref)
            .filter(|_| stands[i])
            .filter(|_| {
                top.get(t.queue.as_str())
                    .copied()
                    .flatten()
                    .is_none_or(|p| p < i64::from(t.priority))
            });
        let Some(m) = m else {
            let inserted = super::ops::task_insert_many(j, std::slice::from_ref(t), now).await?;
            out.extend(inserted.into_iter().map(|inserted| MatchedInsert {
                inserted,
                leased: None,
            }));
            continue;
        };
        let expires = lease_expiry(t, m, now);
        let token = uuid::Uuid::new_v4().simple().to_string();
        let n = sqlx::query(
            "INSERT IGNORE INTO tasks (id, queue, `key`, payload, priority, run_at, deadline, \
             state, max_attempts, attempts_allowed, initial_backoff_ms, backoff_multiplier, \
             max_backoff_ms, jitter, metadata, created_at, updated_at, concurrency_key, \
             attempt, fencing_token, lease_token, leased_by, lease_duration_ms, \
             lease_expires_at, leased_at, leased_address) \
             VALUES (?, ?, ?, ?, ?, ?, ?, 'leased', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 1, ?, ?, ?, \
             ?, ?, ?)",
        )
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
        .execute(j.conn())
        .await?;
        if n.rows_affected() != 1 {
            // A duplicate of an existing (queue, key), or of one earlier in this batch.
            let task_id: String =
                sqlx::query_scalar("SELECT id FROM tasks WHERE queue = ? AND `key` = ?")
                    .bind(&t.queue)
                    .bind(&t.key)
                    .fetch_optional(j.conn())
                    .await?
                    .ok_or_else(|| StoreError::Corrupt(format!("id {} collided", t.id)))?;
            out.push(MatchedInsert {
                inserted: Inserted {
                    task_id,
                    deduplicated: true,
                },
                leased: None,
            });
            continue;
        }
        let seq = i64::try_from(n.last_insert_id()).unwrap_or(i64::MAX);
        for (kind, state, attempt, worker) in [
            (
                EventKind::Submitted,
                visible("pending", ms(t.run_at), now_ms),
                0,
                None,
            ),
            (EventKind::Leased, "leased", 1, Some(m.worker_id.as_str())),
        ] {
            j.push(Ev {
                task_id: &t.id,
                queue: &t.queue,
                kind,
                state,
                attempt,
                worker,
                time: now_ms,
                detail: None,
            });
        }
        out.push(MatchedInsert {
            inserted: Inserted {
                task_id: t.id.clone(),
                deduplicated: false,
            },
            leased: Some(leased_row(t, m, seq, token, expires, now)?),
        });
    }
    Ok(out)
}

pub(super) async fn lease_release(
    j: &mut Job,
    leases: &[LeaseRef],
    now: DateTime<Utc>,
) -> StoreResult<u64> {
    // The attempt is taken back (it never ran); the fencing token is not.
    let now_ms = ms(now);
    let mut released = 0;
    for l in leases {
        let row: Option<(i64, String, i64, i64)> = sqlx::query_as(
            "SELECT seq, queue, attempt, run_at FROM tasks \
             WHERE id = ? AND state = 'leased' AND lease_token = ? FOR UPDATE",
        )
        .bind(&l.task_id)
        .bind(&l.lease_token)
        .fetch_optional(j.conn())
        .await?;
        let Some((seq, queue, attempt, run_at)) = row else {
            continue;
        };
        sqlx::query(
            "UPDATE tasks SET state = 'pending', attempt = attempt - 1, lease_token = NULL, \
             leased_by = NULL, lease_duration_ms = NULL, lease_expires_at = NULL, \
             leased_at = NULL, leased_address = NULL, updated_at = ? WHERE seq = ?",
        )
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
}
