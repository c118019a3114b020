//! Dead letters on Postgres: the console's cancel of dead tasks.

use sqlx::{PgPool, Postgres};

use super::super::row::ms;
use super::super::*;

/// Dead -> cancelled for up to `limit` tasks, oldest first; rows another
/// transaction holds are skipped (a requeue racing this one keeps them).
pub(super) async fn task_cancel_dead(pool: &PgPool, p: &CancelDeadParams) -> StoreResult<u64> {
    // The rows are picked in a CTE, which runs once: an `id IN (SELECT .. LIMIT
    // .. FOR UPDATE SKIP LOCKED)` may be planned as a semi-join that runs the
    // subquery again per row, skipping the rows this statement already changed
    // and so going past the limit.
    let mut qb =
        sqlx::QueryBuilder::<Postgres>::new("WITH picked AS (SELECT id FROM tasks WHERE queue = ");
    qb.push_bind(&p.queue).push(" AND state = 'dead'");
    if let Some(e) = &p.error {
        // tasks_dead_error finds the group by the hash (migration 0011).
        qb.push(" AND error_hash = hashtextextended(")
            .push_bind(e)
            .push(", 0) AND COALESCE(last_error, '') = ")
            .push_bind(e);
    }
    if let Some(id) = &p.task_id {
        qb.push(" AND id = ").push_bind(id);
    }
    qb.push(" ORDER BY seq LIMIT ")
        .push_bind(i64::from(p.limit))
        .push(
            " FOR UPDATE SKIP LOCKED), \
             u AS (UPDATE tasks t SET state = 'cancelled', cancel_requested = FALSE, updated_at = ",
        )
        .push_bind(ms(p.now))
        .push(" FROM picked WHERE t.id = picked.id RETURNING t.id, t.queue, t.state, t.attempt, t.run_at) ")
        // Flow: the CANCELLED events in the same statement.
        .push(super::events::from_updated("cancelled", &ms(p.now).to_string()));
    let n: Option<i32> = qb.build_query_scalar().fetch_optional(pool).await?;
    Ok(super::events::changed(n))
}
