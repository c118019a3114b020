//! Transactional enqueue (feature `outbox`): a task is written into the producer's
//! own Postgres or MySQL, in the producer's transaction, as a row of `taskbroker_outbox`
//! (`migrations/outbox/postgres/`, `migrations/outbox/mysql/`); [`Relay`] (`taskbroker relay`) ships committed
//! rows to the broker and deletes them after its acknowledgement. A rolled-back
//! transaction leaves no row, so no task; a committed one leaves a row, so exactly
//! one task (docs/outbox.md says precisely when).
//!
//! - `mod.rs` (this file): [`enqueue`], [`enqueue_many`], [`init_schema`] for Postgres
//!   and the client-side checks of a spec.
//! - `mysql.rs`: the same three for MySQL and MariaDB ([`mysql::enqueue`]).
//! - `relay.rs`: [`Relay`], the batched shipper (woken by LISTEN on Postgres, polling
//!   on MySQL); `batch.rs`: one batch (lock, Submit, delete or mark refused) and how
//!   refusals are told from failures; `source.rs`: that batch's SQL for each database.
//! - `metrics.rs`: the relay's Prometheus counters and [`serve_metrics`].
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use taskbroker_client::{TaskSpec, outbox};
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id, total) VALUES ($1, $2)")
//!     .bind(42_i64)
//!     .bind(1999_i64)
//!     .execute(&mut *tx)
//!     .await?;
//! let row = outbox::enqueue(&mut tx, TaskSpec::new("emails", br#"{"order":42}"#.to_vec())).await?;
//! tx.commit().await?; // the task exists once the relay has shipped the row
//! println!("task key {}", row.key);
//! # Ok(()) }
//! ```

mod batch;
mod metrics;
pub mod mysql;
mod relay;
mod source;

use prost::Message;
use sqlx::{Acquire, PgConnection, Postgres};

use crate::{TaskSpec, pb};

pub use metrics::serve_metrics;
pub use relay::{Relay, RelayBuilder, RelayError, RelayReport};
pub use source::Source;

/// The schema of the outbox table, as shipped in `migrations/outbox/postgres/`.
pub const SCHEMA: &str = include_str!("../../outbox-sql/postgres/0001_outbox.sql");

/// The channel the table's trigger notifies on insert (once per statement).
pub const CHANNEL: &str = "taskbroker_outbox";

/// The prefix of the idempotency key of a row whose spec has no key of its own.
pub const KEY_PREFIX: &str = "outbox:";

/// Longest key the broker accepts (bytes).
const MAX_KEY_BYTES: usize = 512;

/// Why a row could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The spec would be refused by the broker's Submit; nothing was written.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The database refused the insert (the caller's transaction is then aborted).
    #[error("outbox database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// One row written to the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The row's id (its place in the shipping order).
    pub id: i64,
    /// The idempotency key the task will have at the broker: the spec's own key, or
    /// `outbox:` and a random UUID. `taskbroker list --key KEY` finds the task.
    pub key: String,
}

/// Writes `spec` into `taskbroker_outbox` through `conn`: the caller's transaction
/// (`&mut tx` coerces) or a connection (`&mut pool.acquire().await?`, then the row
/// commits by itself). The task is submitted by the relay after the transaction
/// commits, and never if it rolls back.
///
/// A plain `&mut PgConnection` rather than a generic `Acquire` keeps the future `Send`
/// for `tokio::spawn` and web handlers (a generic one trips a higher-ranked lifetime
/// error there).
///
/// The spec is checked as Submit checks what does not depend on the broker's flags
/// (queue name, key); a refusal writes nothing. The current trace context is kept in
/// the spec's metadata (`traceparent`), so the task's trace starts at the producer.
pub async fn enqueue(conn: &mut PgConnection, spec: TaskSpec) -> Result<Enqueued, OutboxError> {
    let mut rows = enqueue_many(conn, [spec]).await?;
    rows.pop().ok_or_else(|| {
        OutboxError::Database(sqlx::Error::Protocol("INSERT returned no row".into()))
    })
}

/// Writes several specs in one statement (one notification), in order; the rows
/// are shipped in that order. All are checked before any is written.
pub async fn enqueue_many(
    conn: &mut PgConnection,
    specs: impl IntoIterator<Item = TaskSpec>,
) -> Result<Vec<Enqueued>, OutboxError> {
    let (keys, bodies): (Vec<Option<String>>, Vec<Vec<u8>>) = prepare(specs)?.into_iter().unzip();
    if bodies.is_empty() {
        return Ok(Vec::new());
    }
    // One statement for the batch; WITH ORDINALITY keeps the ids in input order.
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "INSERT INTO taskbroker_outbox (idempotency_key, spec) \
         SELECT coalesce(k, 'outbox:' || gen_random_uuid()), s \
         FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS t(k, s, n) \
         ORDER BY n \
         RETURNING id, idempotency_key",
    )
    .bind(&keys)
    .bind(&bodies)
    .fetch_all(conn)
    .await?;
    let mut rows: Vec<Enqueued> = rows
        .into_iter()
        .map(|(id, key)| Enqueued { id, key })
        .collect();
    // RETURNING's order is not promised; identity values follow the insert order.
    rows.sort_by_key(|r| r.id);
    Ok(rows)
}

/// A spec ready to write: its own key if any, and its encoding.
pub(crate) type Prepared = (Option<String>, Vec<u8>);

/// Checks every spec, adds the current trace context, and encodes them:
/// (the spec's own key if any, the encoded spec) in input order. Nothing is returned
/// unless every spec passes.
pub(crate) fn prepare(
    specs: impl IntoIterator<Item = TaskSpec>,
) -> Result<Vec<Prepared>, OutboxError> {
    let traceparent = crate::trace::current_traceparent();
    let mut out = Vec::new();
    for (i, spec) in specs.into_iter().enumerate() {
        let mut spec = spec.into_proto();
        check(i, &spec)?;
        if let Some(tp) = &traceparent {
            spec.metadata
                .entry(crate::trace::TRACEPARENT.to_string())
                .or_insert_with(|| tp.clone());
        }
        out.push((
            (!spec.key.is_empty()).then(|| spec.key.clone()),
            spec.encode_to_vec(),
        ));
    }
    Ok(out)
}

/// Applies [`SCHEMA`] (idempotent), under an advisory lock so that several relays
/// starting together do not race.
pub async fn init_schema<'c, A>(conn: A) -> Result<(), sqlx::Error>
where
    A: Acquire<'c, Database = Postgres>,
{
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('taskbroker_outbox schema'))")
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(SCHEMA).execute(&mut *tx).await?;
    tx.commit().await
}

/// The checks of Submit that hold whatever the broker's flags: a bad queue name or
/// key would make the row unshippable.
fn check(i: usize, spec: &pb::TaskSpec) -> Result<(), OutboxError> {
    let invalid = |name: &str, message: &str| OutboxError::Invalid {
        field: format!("specs[{i}].{name}"),
        message: message.to_string(),
    };
    let q = &spec.queue;
    if q.is_empty() {
        return Err(invalid("queue", "is required"));
    }
    if q.len() > 128 {
        return Err(invalid("queue", "is longer than 128 characters"));
    }
    if !q
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(invalid("queue", "may only contain A-Z a-z 0-9 . _ : -"));
    }
    if spec.key.len() > MAX_KEY_BYTES {
        return Err(invalid("key", "is longer than 512 characters"));
    }
    if spec.key.chars().any(char::is_control) {
        return Err(invalid("key", "must not contain control characters"));
    }
    if let Some((field, why)) = unshippable(spec) {
        return Err(invalid(field, why));
    }
    Ok(())
}

/// Why `depends_on_index` cannot travel through the outbox.
pub(crate) const NO_INDEX: &str = "cannot be used through the outbox (rows of many transactions share one Submit); \
     name dependencies by task id in depends_on";
/// Why more than one fan-out copy cannot travel through the outbox.
pub(crate) const NO_FANOUT: &str = "cannot have more than one copy through the outbox (every row is submitted under \
     an idempotency key, which Submit refuses with fan-out)";

/// The field of a spec that the outbox cannot ship, if any. Every row is
/// submitted under an idempotency key, which Submit refuses with more than one
/// fan-out copy; and the relay batches rows of many transactions into one
/// Submit, so an index into "this request" would name another transaction's row.
pub(crate) fn unshippable(spec: &pb::TaskSpec) -> Option<(&'static str, &'static str)> {
    if !spec.depends_on_index.is_empty() {
        return Some(("depends_on_index", NO_INDEX));
    }
    if spec.fanout.as_ref().is_some_and(|f| f.copies > 1) {
        return Some(("fanout.copies", NO_FANOUT));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(r: Result<(), OutboxError>) -> String {
        match r {
            Err(OutboxError::Invalid { field, .. }) => field,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn specs_the_broker_would_refuse_are_refused_here() {
        let ok = TaskSpec::new("emails.v2:high-prio_1", "x").key("order-42");
        assert!(check(0, &ok.into_proto()).is_ok());
        let no_queue = TaskSpec::new("", "x").into_proto();
        assert_eq!(field(check(3, &no_queue)), "specs[3].queue");
        let spaced = TaskSpec::new("has space", "x").into_proto();
        assert_eq!(field(check(0, &spaced)), "specs[0].queue");
        let long_key = TaskSpec::new("q", "x").key("k".repeat(513)).into_proto();
        assert_eq!(field(check(0, &long_key)), "specs[0].key");
        let nul_key = TaskSpec::new("q", "x").key("a\0b").into_proto();
        assert_eq!(field(check(0, &nul_key)), "specs[0].key");
    }

    #[test]
    fn fields_a_batch_of_rows_cannot_carry_are_refused() {
        let mut indexed = TaskSpec::new("q", "x").into_proto();
        indexed.depends_on_index = vec![0];
        assert_eq!(field(check(1, &indexed)), "specs[1].depends_on_index");
        let mut copies = TaskSpec::new("q", "x").into_proto();
        copies.fanout = Some(pb::Fanout {
            copies: 3,
            distinct_workers: false,
        });
        assert_eq!(field(check(0, &copies)), "specs[0].fanout.copies");
        copies.fanout = Some(pb::Fanout {
            copies: 1,
            distinct_workers: false,
        });
        assert!(check(0, &copies).is_ok());
        let mut by_id = TaskSpec::new("q", "x").into_proto();
        by_id.depends_on = vec!["0190-id".into()];
        assert!(check(0, &by_id).is_ok());
    }

    #[test]
    fn the_shipped_schema_is_the_migration_file() {
        assert!(SCHEMA.contains("CREATE TABLE IF NOT EXISTS taskbroker_outbox"));
        assert!(SCHEMA.contains(&format!("pg_notify('{CHANNEL}'")));
        assert!(SCHEMA.contains(&format!("'{KEY_PREFIX}' || gen_random_uuid()")));
    }
}
