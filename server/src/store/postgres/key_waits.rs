//! Dependencies by key on Postgres, at submit: who holds the keys a batch
//! waits for (with their producers), and the cap on the unbound waits one key
//! may have per producer. The binds of a later keyed insert are the trigger of
//! migrations 0020 and 0022.

use std::collections::HashMap;

use super::super::*;
use super::sql;

/// The tasks that hold the depends_on_keys of `flows` (this batch's own
/// included), by key, with their producers.
pub(super) async fn key_holders(
    tx: &mut sqlx::PgConnection,
    flows: &[FlowSpec],
) -> StoreResult<HashMap<TaskKey, (String, Option<String>)>> {
    let (queues, keys): (Vec<&str>, Vec<&str>) = flows
        .iter()
        .flat_map(|f| &f.depends_on_keys)
        .map(|k| (k.queue.as_str(), k.key.as_str()))
        .unzip();
    let rows: Vec<(String, String, String, Option<String>)> =
        sqlx::query_as(sql::KEY_WAITS_HOLDERS)
            .bind(&queues)
            .bind(&keys)
            .fetch_all(&mut *tx)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(queue, key, id, producer)| (TaskKey { queue, key }, (id, producer)))
        .collect())
}

/// The first wait of `flows` (as (task, key) indexes) that would take its key
/// past [`MAX_WAITS_PER_KEY`] unbound waits of its producer; `waits` are this
/// batch's new waits: (task index, key index, key, producer).
pub(super) async fn over_wait_cap(
    tx: &mut sqlx::PgConnection,
    waits: &[(usize, usize, &TaskKey, Option<&str>)],
) -> StoreResult<Option<(usize, usize)>> {
    let mut held: HashMap<(&TaskKey, Option<&str>), i64> = HashMap::new();
    for &(_, _, k, p) in waits {
        if held.contains_key(&(k, p)) {
            continue;
        }
        // One index probe per distinct key, counting no further than the cap
        // (the NULL case and the named one are separate index conditions).
        let stmt = if p.is_some() {
            sql::KEY_WAITS_COUNT
        } else {
            sql::TASK_INSERT_FLOW_KEY_WAITS_OF_NONE
        };
        let n: i64 = sqlx::query_scalar(stmt)
            .bind(&k.queue)
            .bind(&k.key)
            .bind(p)
            .bind(i64::from(MAX_WAITS_PER_KEY))
            .fetch_one(&mut *tx)
            .await?;
        held.insert((k, p), n);
    }
    for &(i, j, k, p) in waits {
        let n = held.entry((k, p)).or_default();
        if *n >= i64::from(MAX_WAITS_PER_KEY) {
            return Ok(Some((i, j)));
        }
        *n += 1;
    }
    Ok(None)
}
