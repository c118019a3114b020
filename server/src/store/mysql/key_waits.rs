//! Dependencies by key on MySQL, bound in Rust: the insert of a keyed task
//! binds the waits for its (queue, key) in the insert's own transaction (a
//! trigger would need SUPER where binary logging is on, and managed servers
//! grant none). A wait binds when it has no producer or the inserted task's
//! producer (`taskbroker.producer` in its metadata) is the wait's: never to
//! another producer's task.
//!
//! The one-row table `key_deps_lock` orders binds and waits: a Submit whose
//! key has no task yet locks it (FOR UPDATE) while it looks the key up and
//! records the wait (`flow.rs`); every keyed insert holds it shared until it
//! commits. Either the insert commits first (the lookup sees the task) or the
//! wait does (the bind below sees the row). Keyed inserts never wait for each
//! other.

use super::super::*;
use super::{Job, sql};
use crate::domain::task::PRODUCER_KEY;

/// Binds the waits for the keys of the tasks `inserted` says were stored now
/// (`inserted[i]` answers `tasks[i]`).
pub(super) async fn bind(j: &mut Job, tasks: &[NewTask], inserted: &[Inserted]) -> StoreResult<()> {
    let mut keyed: Vec<&NewTask> = Vec::new();
    for (t, r) in tasks.iter().zip(inserted) {
        if t.key.is_some() && !r.deduplicated && r.task_id == t.id {
            keyed.push(t);
        }
    }
    if keyed.is_empty() {
        return Ok(());
    }
    sqlx::query(sql::KEY_WAITS_LOCK_SHARED)
        .fetch_optional(j.conn())
        .await?;
    for t in keyed {
        let key = t.key.as_deref().unwrap_or_default();
        let producer = t.metadata.get(PRODUCER_KEY).map(String::as_str);
        // Producer-less waits, then the producer's own: each an index
        // condition on (queue, key, producer), so another producer's waits
        // for this key are never read.
        let mut of = vec![None];
        if producer.is_some() {
            of.push(producer);
        }
        for p in of {
            let bound = sqlx::query(sql::KEY_WAITS_BIND)
                .bind(&t.id)
                .bind(&t.queue)
                .bind(key)
                .bind(p)
                .execute(j.conn())
                .await?
                .rows_affected();
            if bound == 0 {
                continue;
            }
            // The edges, resolved like any other when the keyed task finishes
            // (events.rs looks task_deps up for every task that finishes).
            sqlx::query(sql::KEY_WAITS_EDGES)
                .bind(&t.id)
                .bind(&t.queue)
                .bind(key)
                .bind(p)
                .bind(&t.id)
                .execute(j.conn())
                .await?;
        }
    }
    Ok(())
}

/// How many unbound waits `(queue, key)` has of `producer` (producer-less ones
/// for `None`), counted up to [`MAX_WAITS_PER_KEY`].
pub(super) async fn waiting(
    j: &mut Job,
    key: &TaskKey,
    producer: Option<&str>,
) -> StoreResult<i64> {
    Ok(sqlx::query_scalar(sql::KEY_WAITS_COUNT)
        .bind(&key.queue)
        .bind(&key.key)
        .bind(producer)
        .bind(i64::from(MAX_WAITS_PER_KEY))
        .fetch_one(j.conn())
        .await?)
}
