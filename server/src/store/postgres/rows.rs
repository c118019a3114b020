//! The task row on Postgres: every statement reads it whole (`SELECT *`,
//! `RETURNING t.*`) into [`TaskRow`]; the lease statements add the request
//! (1-based) each row went to, which [`by_request`] sorts the rows out by.

use sqlx::{Postgres, Transaction};

use super::super::row::IntoRecord;
use super::super::row::{TaskRow, sort_lease_order};
use super::super::*;
use super::{PostgresStore, sql};

impl PostgresStore {
    /// The task row, locked until the transaction ends.
    pub(super) async fn fetch_task(
        tx: &mut Transaction<'_, Postgres>,
        id: &str,
    ) -> StoreResult<Option<TaskRow>> {
        Ok(sqlx::query_as::<_, TaskRow>(sql::TASK_LOCK)
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?)
    }
}

/// Decodes a row of a lease statement: the task and its request (`request`).
pub(super) fn leased_row(row: sqlx::postgres::PgRow) -> Result<(TaskRow, i64), sqlx::Error> {
    use sqlx::{FromRow, Row};
    Ok((TaskRow::from_row(&row)?, row.try_get::<i64, _>("request")?))
}

/// The leased rows of a batch of `n` requests, as each request's records;
/// `sorted`: each reply in lease order (the gated lease's round robin keeps the
/// order granted).
pub(super) fn by_request(
    n: usize,
    rows: impl IntoIterator<Item = (TaskRow, i64)>,
    sorted: bool,
) -> StoreResult<Vec<Vec<TaskRecord>>> {
    let mut out: Vec<Vec<TaskRecord>> = (0..n).map(|_| Vec::new()).collect();
    for (row, request) in rows {
        let slot = usize::try_from(request - 1)
            .ok()
            .and_then(|i| out.get_mut(i))
            .ok_or_else(|| StoreError::Corrupt(format!("lease for request {request}")))?;
        slot.push(row.into_record()?);
    }
    if sorted {
        for records in &mut out {
            sort_lease_order(records);
        }
    }
    Ok(out)
}
