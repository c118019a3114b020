//! Dependencies by key on SQLite, at submit: which dependencies a producer's
//! dependent may name, and the waits of its depends_on_keys (with the cap on
//! the unbound waits one key may have per producer). The binds of a later
//! keyed insert are the trigger of migrations 0020 and 0022.

use rusqlite::{Connection, OptionalExtension, params};

use super::super::flow::{may_depend, producer_in};
use super::super::*;
use super::sql;

/// Whether a dependent of `producer` may name the task `id` (it exists and,
/// with a producer, is that producer's).
pub(super) fn may_name(c: &Connection, id: &str, producer: Option<&str>) -> StoreResult<bool> {
    let metadata: Option<String> = c
        .prepare_cached(sql::KEY_WAITS_NAMED)?
        .query_row([id], |r| r.get(0))
        .optional()?;
    Ok(metadata.is_some_and(|m| may_depend(producer, producer_in(&m).as_deref())))
}

/// What a task's depends_on_keys came to.
pub(super) struct KeyDeps {
    /// The tasks that hold some of the keys.
    pub bound: Vec<String>,
    /// How many keys no task holds yet.
    pub waiting: i64,
}

/// Records the depends_on_keys of `task` (task_key_deps) and looks each key up:
/// a key held by a task `producer` may not name is a wait like a key no task
/// holds. `Err(j)`: the j-th key already has [`MAX_WAITS_PER_KEY`] waits.
pub(super) fn key_deps(
    c: &Connection,
    task: &str,
    keys: &[TaskKey],
    producer: Option<&str>,
) -> StoreResult<Result<KeyDeps, usize>> {
    let mut out = KeyDeps {
        bound: Vec::new(),
        waiting: 0,
    };
    for (j, k) in keys.iter().enumerate() {
        let holder: Option<(String, String)> = c
            .prepare_cached(sql::KEY_WAITS_HOLDERS)?
            .query_row(params![k.queue, k.key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let holder = holder
            .filter(|(_, m)| may_depend(producer, producer_in(m).as_deref()))
            .map(|(id, _)| id);
        if holder.is_none() {
            let waits: i64 = c
                .prepare_cached(sql::KEY_WAITS_COUNT)?
                .query_row(params![k.queue, k.key, producer, MAX_WAITS_PER_KEY], |r| {
                    r.get(0)
                })?;
            if waits >= i64::from(MAX_WAITS_PER_KEY) {
                return Ok(Err(j));
            }
        }
        c.prepare_cached(sql::TASK_INSERT_FLOW_KEY_WAITS)?
            .execute(params![task, k.queue, k.key, holder, producer])?;
        match holder {
            Some(id) => out.bound.push(id),
            None => out.waiting += 1,
        }
    }
    Ok(Ok(out))
}
