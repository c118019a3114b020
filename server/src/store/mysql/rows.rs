//! The task row on MySQL: its columns (`task_columns` in `rows.sql`, as
//! `TaskRow` reads them; `key` is a reserved word), the locked read of one
//! task, and the reply bound of a row (`reply_size`). Rows decode into records
//! by the shared `store::row`.

use super::super::flow::of_row;
use super::super::row::TaskRow;
use super::super::*;
use super::{Job, sql};
use crate::domain::event::EventKind;

/// The task, its row locked until the job ends.
pub(super) async fn fetch_task(j: &mut Job, id: &str) -> StoreResult<Option<TaskRow>> {
    Ok(sqlx::query_as::<_, TaskRow>(sql::TASK_LOCK)
        .bind(id)
        .fetch_optional(j.conn())
        .await?)
}

/// The task as it is after a change, which is recorded as a `kind` event (Flow).
pub(super) async fn changed_event(
    j: &mut Job,
    id: &str,
    kind: EventKind,
    now: i64,
) -> StoreResult<Changed> {
    match fetch_task(j, id).await? {
        Some(row) => {
            j.push(of_row(&row, kind, now));
            Ok(Changed::Done(Box::new(row.into_record()?)))
        }
        None => Ok(Changed::NotFound),
    }
}

/// Whether `reply_size` (`rows.sql`) is the shared reply bound
/// (`store::reply`) as MySQL spells it, word for word.
pub(super) fn reply_size_is_shared() -> bool {
    use crate::store::reply::{Dialect, size_sql};
    // Not run: the text `reply_size_of_task` must have.
    let expected = format!(
        "SELECT CAST({} AS SIGNED) FROM tasks",
        size_sql(Dialect::Mysql)
    );
    sql::REPLY_SIZE_OF_TASK
        .split_whitespace()
        .eq(expected.split_whitespace())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reply_size_is_the_shared_bound() {
        assert!(super::reply_size_is_shared());
    }
}
